"""Recovery is prompt (SPEC §11): what waits for the surface or the database goes on when they are
back, not at its next back-off step. Each test makes the back-off step an hour, so only the
mechanism can finish the work within the test's bounds; nothing here measures time (the probe
`python -m bench.recovery` does: docs/benchmarks.md)."""
from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from bot.core.errors import DeliveryError
from bot.core.models import Agent, GroupSettings, Message
from bot.core.ports import Recorder
from bot.core.rules.store_health import StoreHealth
from bot.core.runtime.engine import Engine
from bot.core.runtime.worker import RetryPolicy
from bot.llm.tokens import make_token_counter
from storage import open_store
from tests.engine.conftest import Harness
from tests.fakes.databases import PostgresPlace
from tests.fakes.scripted_llm import ScriptedLLM
from tests.fakes.surface import RecordingSurface
from tests.fakes.tcp_proxy import TcpProxy
from tests.support import eventually

HOUR = RetryPolicy(first=3600.0, factor=2.0, cap=3600.0, unreachable=3600.0)  # every back-off step: an hour
NOTICE = "I can't save anything to my database: the database server cannot be reached"
FIXED = "My database works again"


class OneGroupDown(RecordingSurface):
    """A surface that fails the agent rows of one group (a 5xx, a reset: a passing fault) `times` times."""

    def __init__(self, group_id: int, times: int) -> None:
        super().__init__()
        self.down_for, self.times = group_id, times

    async def publish(self, group, message: Message, agent: Agent | None, *, resume: bool = False,
                      record: Recorder) -> None:
        if group.id == self.down_for and message.author_type == "agent" and self.times:
            self.times -= 1
            raise DeliveryError("Discord answered 503", maybe_shown=True)
        await super().publish(group, message, agent, resume=resume, record=record)


async def test_a_row_held_by_a_passing_fault_goes_as_soon_as_another_post_goes_through(tmp_path) -> None:
    harness = Harness(tmp_path / "roundtable.db")
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} answer {n}")
    async with harness.running(llm, mode="tags"):
        store = harness.store
        other = await store.groups.create_group("test:other", "other", GroupSettings(mode="tags"))
        await store.roster.add_agent(other.id, "planner", "plans", "You plan trips.")
        surface = OneGroupDown(harness.group.id, times=1)
        engine = Engine(store, llm, surface, make_token_counter(), retry=HOUR)
        await engine.start()
        try:
            main = await store.groups.get_group(harness.group.id)
            await engine.post_user_message(main, author_name="alice", user_id="alice", text="@planner one")
            await eventually(lambda: surface.times == 0, "the first reply refused")
            assert not [m for m in surface.published if m.author_type == "agent"]
            await engine.post_user_message(await store.groups.get_group(other.id), author_name="bob", user_id="bob",
                                           text="@planner two")
            await eventually(lambda: len([m for m in surface.published if m.author_type == "agent"]) == 2,
                        "both replies shown (the held one once the other went through)")
            await engine.wait_idle(main.id, 30)
        finally:
            await engine.close()
    shown = [(m.group_id, m.author_name) for m in surface.published if m.author_type == "agent"]
    assert sorted(shown) == [(harness.group.id, "planner"), (other.id, "planner")]


async def test_a_run_the_restarting_server_failed_midway_is_not_left_running_and_is_answered_once_back(
        pg: PostgresPlace, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} answer {n}")
    llm.gate = asyncio.Event()
    admin = await asyncpg.connect(pg.url)
    async with TcpProxy.to_url(pg.url) as proxy:
        store = await open_store(proxy.url(pg.target), health=StoreHealth(after=3600))
        group = await store.groups.create_group("console:main", "main", GroupSettings(mode="tags"))
        await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
        engine = Engine(store, llm, RecordingSurface(), make_token_counter(), retry=HOUR)
        await engine.start()
        try:
            await engine.post_user_message(group, author_name="alice", user_id="alice", text="@planner go")
            await eventually(lambda: llm.participant_order == ["planner"], "the model asked for the answer")
            await proxy.down(admin)  # the server restarts while the model writes the answer
            llm.gate.set()  # the answer is in: settling the run fails, the server being away
            await eventually(lambda: any("lost the connection to PostgreSQL" in r.getMessage() for r in caplog.records),
                        "the outage was noticed")
            await proxy.up()
            await engine.wait_idle(group.id, 30)
        finally:
            await engine.close()
            await store.close()
            await admin.close()
    statuses = [status for status, in await pg.fetch("SELECT status FROM runs ORDER BY id")]
    assert "running" not in statuses and statuses[-1] == "posted", statuses  # settled (or retried), not left
    texts = await pg.fetch("SELECT author_name, text FROM messages ORDER BY seq")
    assert [author for author, _ in texts] == ["alice", "planner"]  # answered once
