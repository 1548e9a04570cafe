"""The database takes no writes for a while: a person's message waits and is stored once it works
again; people are told once when the outage starts and once when it ends (not per failed write),
and `/roundtable status` shows it while it lasts. On SQLite and PostgreSQL, and in the console."""
from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Collection

from bot.core.models import GroupSettings
from bot.core.rules.store_health import StoreHealth
from bot.core.runtime.engine import Engine
from bot.core.verbs.admin import verbs_of
from bot.llm.tokens import make_token_counter
from bot.surfaces.console.surface import Console, ConsoleSurface
from storage.store import SqliteStore
from tests.engine.conftest import FAST_RETRY, Harness
from tests.fakes.faults import pg_disk_full, read_only
from tests.fakes.scripted_llm import ScriptedLLM
from tests.support import bound, eventually

AFTER = 0.3  # seconds of failing writes before people are told (10 s in production)
NOTICE = "I can't save anything to my database: "
FIXED = "My database works again (it could not be written for "


@contextlib.asynccontextmanager
async def no_writes(harness: Harness) -> AsyncIterator[str]:
    """The database refuses writes, for real: SQLite read-only, PostgreSQL's disk full; yields the reason."""
    if harness.place.kind == "sqlite":
        with read_only(harness.store):
            yield "the database file is read-only"
    else:
        async with pg_disk_full(harness.place):
            yield "the database server's disk is full"


def counting_failures(health: StoreHealth) -> list[int]:
    """A counter of the failed writes `health` hears of (in a list, to read it as it grows)."""
    count, real = [0], health.failed

    def failed(reason: str, statements: Collection[str]) -> None:
        count[0] += 1
        real(reason, statements)

    health.failed = failed  # type: ignore[method-assign]
    return count


async def test_a_message_waits_out_an_outage_people_told_once_each_way_and_status_shows_it(harness):
    harness.store_options["health"] = StoreHealth(after=AFTER)
    harness.llm = ScriptedLLM(agents={"planner": ["Saved at last."]})
    async with harness.running(mode="tags"):
        group = await harness.store.groups.get_group(harness.group.id)
        alerts, waited = harness.surface.alerts, []
        failures = counting_failures(harness.store.health)
        async with no_writes(harness) as reason:
            posting = asyncio.create_task(harness.engine.post_user_message(
                group, author_name="alice", user_id="alice", text="@planner kept", waiting=waited.append))
            await eventually(lambda: alerts, "the notice")
            seen = failures[0]
            await eventually(lambda: failures[0] >= seen + 5, "more failed writes")  # still refused, told once
            assert not posting.done() and len(alerts) == 1
            assert alerts[0].startswith(NOTICE + reason + ". Messages posted now are not lost")
            card = await harness.verbs().record.status(group)
            assert card.tone == "bad"
            assert next(f.value for f in card.fields if f.name == "database problem").endswith(
                f"now: {reason}; messages posted meanwhile are saved and answered once it works again")
        message = await asyncio.wait_for(posting, bound(10))
        await eventually(lambda: len(alerts) == 2, "the recovery")
        await harness.idle()
        assert alerts[1].startswith(FIXED) and waited == [reason]
        assert await harness.thread() == ["[alice] @planner kept", "[planner] Saved at last."]
        assert message.seq == 1
        card = await harness.verbs().record.status(group)
        assert "database problem" not in [f.name for f in card.fields]
        assert len(alerts) == 2


async def test_the_console_says_it_in_one_line_then_the_recovery_in_one_line(tmp_path):
    out = io.StringIO()
    store = await SqliteStore.open(tmp_path / "c.db", health=StoreHealth(after=AFTER))
    llm = ScriptedLLM(agents={"planner": ["Here."]})
    surface = ConsoleSurface(out)
    engine = Engine(store, llm, surface, make_token_counter(), retry=FAST_RETRY)
    failures = counting_failures(store.health)
    con = Console(engine, surface, store=store, verbs=verbs_of(engine, store), person="you", group_name="main",
                  defaults=GroupSettings(mode="tags"))
    lines: asyncio.Queue[str] = asyncio.Queue()

    async def read_line(*, more: bool = False) -> str:
        return await lines.get()

    running = asyncio.create_task(con.run(read_line))
    try:
        lines.put_nowait('/agent add name:planner role:plans prompt:"You plan."\n')
        await eventually(lambda: "Added planner" in out.getvalue(), "the agent")
        with read_only(store):
            lines.put_nowait("@planner hello\n")
            await eventually(lambda: "[roundtable] I can't save" in out.getvalue(), "the notice")
            shown, seen = out.getvalue(), failures[0]
            await eventually(lambda: failures[0] >= seen + 5, "more failed writes")
            assert out.getvalue() == shown  # still one line
        await eventually(lambda: "[planner] Here." in out.getvalue(), "the answer")
        lines.put_nowait("")
        await asyncio.wait_for(running, bound(10))
    finally:
        running.cancel()
        await engine.close()
        await store.close()
    printed = out.getvalue().splitlines()[1:]
    fixed = [line for line in printed if line.startswith("[roundtable] My database works again")]
    assert len(fixed) == 1 and fixed[0].startswith(
        "[roundtable] My database works again (it could not be written for ")
    printed.remove(fixed[0])  # said once the message is saved: just before or after it is shown
    assert printed[:2] == [
        "error: your message is not saved yet (the database file is read-only); it will be as soon as the "
        "database takes it",
        "[roundtable] I can't save anything to my database: the database file is read-only. Messages posted now "
        "are not lost: they are saved and answered as soon as it works again. (This notice is posted directly and "
        "is not in the history: the database cannot store it.)",
    ]
    assert printed[2:4] == ["[you] @planner hello", "[planner] Here."]
    assert len(printed) == 5 and printed[4].startswith("episode #1 ended: quiet")
