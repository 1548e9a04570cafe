"""Engine fixtures: a real database (`harness`: a SQLite file and a PostgreSQL schema, see
`tests.fakes.databases`; `sqlite_harness`: the file only, for tests that read it directly),
a scripted LLM, a recording surface."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.core.models import Group, GroupSettings
from bot.core.runtime.engine import Engine
from bot.core.runtime.worker import RetryPolicy
from bot.core.verbs.admin import Verbs, verbs_of
from bot.llm.tokens import make_token_counter
from storage import SqlStore
from tests.fakes.databases import Place, SqlitePlace
from tests.fakes.scripted_llm import ScriptedLLM
from tests.fakes.surface import RecordingSurface
from tests.support import bound, eventually

FAST_RETRY = RetryPolicy(first=0.02, factor=2.0, cap=0.2)  # the default waits seconds

ROSTER = [
    ("planner", "drafts the itinerary", "You plan trips."),
    ("budget", "keeps the total honest", "You check costs."),
    ("local", "knows Tokyo", "You know the city."),
]


class Harness:
    def __init__(self, where: Path | Place) -> None:
        self.place = where if isinstance(where, Place) else SqlitePlace(where)
        self.path: Path = getattr(self.place, "path", Path("/nonexistent"))  # the SQLite file, if it is one
        self.surface = RecordingSurface()
        self.llm = ScriptedLLM()
        self.store: SqlStore
        self.engine: Engine
        self.group: Group
        self.engine_options: dict[str, Any] = {}  # more Engine arguments (a clock, the schedule tick)
        self.store_options: dict[str, Any] = {}  # more `open_store` arguments (busy_timeout_ms)

    @contextlib.asynccontextmanager
    async def running(self, llm: ScriptedLLM | None = None, **settings: object) -> AsyncIterator[Harness]:
        self.llm = llm or self.llm
        self.store = await self.place.open(**self.store_options)
        self.engine = Engine(self.store, self.llm, self.surface, make_token_counter(), retry=FAST_RETRY,
                             **self.engine_options)
        self.group = await self.store.groups.create_group("test:main", "main",
                                                          GroupSettings(**settings))  # type: ignore[arg-type]
        if not await self.store.roster.list_agents(self.group.id):
            for name, role, prompt in ROSTER:
                await self.store.roster.add_agent(self.group.id, name, role, prompt)
        try:
            await self.engine.start()
            yield self
        finally:
            await self.engine.close()
            await self.store.close()

    def verbs(self) -> Verbs:
        """The verbs over the engine and the store, as wiring makes them for a surface."""
        return verbs_of(self.engine, self.store)

    async def say(self, text: str, who: str = "alice") -> None:
        group = await self.store.groups.get_group(self.group.id)
        await self.engine.post_user_message(group, author_name=who, user_id=who, text=text)

    async def idle(self, timeout: float | None = None) -> None:
        await self.engine.wait_idle(self.group.id, bound(timeout))

    async def until_called(self, count: int = 1) -> None:
        """Wait (bounded) until the scripted LLM has had `count` participant calls."""
        await eventually(lambda: len(self.llm.participant_order) >= count, f"{count} participant call(s)")

    async def fetch(self, sql: str) -> list[tuple[Any, ...]]:
        """Rows of raw SQL on the database, as another process reads it."""
        return await self.place.fetch(sql)

    async def thread(self) -> list[str]:
        return [f"[{m.author_name}] {m.text}" for m in await self.store.thread.messages(self.group.id)]


@pytest.fixture
def harness(place: Place) -> Harness:
    return Harness(place)


@pytest.fixture
def sqlite_harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "roundtable.db")
