"""A backlog (rows not routed yet, stored while no process ran the group) is routed in the
background after the start, chunk by chunk, groups taking turns: a fresh message in another
group is answered meanwhile, and the log says what is being caught up."""
from __future__ import annotations

import asyncio
import logging

import pytest

from bot.core.models import GroupSettings
from bot.core.runtime.dispatcher import ROUTE_CHUNK
from bot.core.runtime.engine import Engine
from bot.llm.tokens import make_token_counter
from tests.engine.conftest import FAST_RETRY
from tests.fakes.databases import Place
from tests.fakes.scripted_llm import ScriptedLLM
from tests.fakes.surface import RecordingSurface
from tests.support import eventually

BACKLOG = 3 * ROUTE_CHUNK + 17  # rows: several chunks


async def add_backlog(place: Place, group_id: int, rows: int) -> None:
    """`rows` people's messages in the group written by SQL, as an import would: none routed, the
    agents' cursors at the end (nobody owes an answer to the old rows)."""
    insert = ("INSERT INTO messages (group_id, seq, author_type, author_name, author_user_id, text, confirmed,"
              " token_count, created_at, tokens_before)"
              " SELECT ?, x, 'user', 'alice', 'alice', 'old message ' || x, 1, 5, 0, (x - 1) * 6 FROM ")
    if place.kind == "postgresql":
        await place.execute(insert + "generate_series(1, ?) AS s(x)", (group_id, rows))
    else:
        await place.execute("WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < ?) "
                            + insert + "s", (rows, group_id))
    await place.execute("UPDATE groups SET latest_seq = ?, tokens_total = ? WHERE id = ?", (rows, rows * 6, group_id))
    await place.execute("UPDATE agents SET delivered_through = ? WHERE group_id = ?", (rows, group_id))


async def test_a_fresh_message_is_answered_while_another_groups_backlog_is_routed(
        place: Place, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bot.core.runtime.dispatcher")
    held = asyncio.Event()  # the model call that routes the backlog's newest row waits for it
    llm = ScriptedLLM(selector=["planner"], agents={"planner": ["Here is the plan."]}, selector_gate=held)
    surface = RecordingSurface()
    async with await place.open() as store:
        big = await store.groups.create_group("test:big", "big", GroupSettings(mode="selector"))
        fresh = await store.groups.create_group("test:fresh", "fresh", GroupSettings(mode="tags"))
        for group in (big, fresh):
            for name in ("planner", "budget"):
                await store.roster.add_agent(group.id, name, "helps", "You help.")
        await add_backlog(place, big.id, BACKLOG)
        engine = Engine(store, llm, surface, make_token_counter(), retry=FAST_RETRY)
        await engine.start()
        try:
            await engine.post_user_message(await store.groups.get_group(fresh.id), author_name="bob", user_id="bob",
                                           text="@planner plan the trip")

            async def fresh_answered() -> bool:
                return any(m.group_id == fresh.id and m.author_type == "agent" for m in surface.published)

            async def big_routed() -> bool:
                return await place.fetch("SELECT routed_through FROM groups WHERE id = ?", (big.id,)) == [(BACKLOG,)]

            await eventually(fresh_answered, "the fresh message was answered")
            assert not await big_routed()  # the backlog is still being routed (its last decision waits)
            lines = [r.getMessage() for r in caplog.records]
            assert f"group={big.id}: routing a backlog of {BACKLOG} row(s) (seq 1-{BACKLOG}) in the background" in lines
            assert not any(f"group={fresh.id}:" in line for line in lines)  # a fresh message is no backlog
            held.set()
            await eventually(big_routed, "the backlog was routed")
            decisions = await store.routing.decisions(big.id, after=0, through=BACKLOG)
            assert len(decisions) == BACKLOG
            assert {d.source for seq, d in decisions.items() if seq < BACKLOG} == {"superseded"}
            assert decisions[BACKLOG].source == "selector" and decisions[BACKLOG].agent_names == ("planner",)
            done = [line for line in (r.getMessage() for r in caplog.records)
                    if line.startswith(f"group={big.id}: backlog of {BACKLOG} row(s) routed in ")]
            assert len(done) == 1
        finally:
            await engine.close()
