"""Provisional messages of streamed replies in the store (SQLite file and PostgreSQL schema):
recorded before they are edited, owned by the committed row, taken over by the agent's next run,
forgotten when the row is confirmed."""
from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.core.errors import NotFound
from bot.core.models import GroupSettings, NewMessage, RunResult
from storage.store import SqlStore
from tests.fakes.databases import Place


@pytest.fixture
async def store(place: Place) -> AsyncIterator[SqlStore]:
    async with await place.open() as opened:
        yield opened


async def setup(store: SqlStore) -> tuple[int, int, int]:
    group = await store.groups.create_group("test:g", "g", GroupSettings())
    planner = await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
    budget = await store.roster.add_agent(group.id, "budget", "counts", "You count.")
    await store.leases.acquire_lease(group.id, 60)
    await store.thread.append_user_message(group.id, NewMessage("user", "alice", "@planner plan", author_user_id="a"))
    return group.id, planner.id, budget.id


async def test_a_part_is_recorded_before_its_id_is_known_then_with_it(store: SqlStore) -> None:
    group_id, planner, _ = await setup(store)
    run = await store.runs.start_run(group_id, planner, "group", 1)
    first = await store.drafts.add_draft(group_id, planner, run.id, 0, "planner", "Day 1")
    assert first.external_id is None and first.text == "Day 1" and first.author_name == "planner"
    await store.drafts.draft_posted(first.id, "1001")
    second = await store.drafts.add_draft(group_id, planner, run.id, 1, "planner", "Day 2")
    assert [(p.position, p.external_id) for p in await store.drafts.draft_parts(run.id)] == [(0, "1001"), (1, None)]
    assert second.id != first.id
    with pytest.raises(NotFound):
        await store.drafts.draft_posted(first.id + 100, "1")


async def test_the_committed_row_owns_its_runs_parts_until_it_is_confirmed(store: SqlStore) -> None:
    group_id, planner, _ = await setup(store)
    run = await store.runs.start_run(group_id, planner, "group", 1)
    part = await store.drafts.add_draft(group_id, planner, run.id, 0, "planner", "Day")
    await store.drafts.draft_posted(part.id, "1001")
    reply = NewMessage("agent", "planner", "Day 1 and 2", author_agent_id=planner, source_run_id=run.id)
    finished = await store.runs.finish_run(run.id, RunResult("posted", reply=reply), cap=10)
    assert finished.reply is not None
    later = await store.runs.start_run(group_id, planner, "group", 2)
    assert await store.drafts.adopt_drafts(group_id, planner, later.id) == []  # the row owns them
    assert await store.drafts.orphan_drafts(group_id) == []
    await store.posting.record_posted(group_id, finished.reply.seq, "1001")
    await store.posting.confirm_message(group_id, finished.reply.seq)
    assert await store.drafts.draft_parts(run.id) == []


async def test_an_interrupted_runs_parts_go_to_the_agents_next_run_or_to_the_sweep(store: SqlStore) -> None:
    group_id, planner, budget = await setup(store)
    run = await store.runs.start_run(group_id, planner, "group", 1)
    for position, external_id in ((0, "1001"), (1, None)):
        part = await store.drafts.add_draft(group_id, planner, run.id, position, "planner", f"part {position}")
        if external_id:
            await store.drafts.draft_posted(part.id, external_id)
    other = await store.runs.start_run(group_id, budget, "group", 1)
    await store.drafts.add_draft(group_id, budget, other.id, 0, "budget", "mine")
    assert await store.drafts.orphan_drafts(group_id) == []  # both runs are running
    assert await store.runs.interrupt_running_runs(group_id) == 2
    assert [p.agent_id for p in await store.drafts.orphan_drafts(group_id)] == [planner, planner, budget]
    again = await store.runs.start_run(group_id, planner, "group", 1)
    adopted = await store.drafts.adopt_drafts(group_id, planner, again.id)
    assert [(p.run_id, p.position, p.external_id) for p in adopted] == [(again.id, 0, "1001"), (again.id, 1, None)]
    assert [p.agent_id for p in await store.drafts.orphan_drafts(group_id)] == [budget]
    await store.runs.finish_run(again.id, RunResult("failed", error="model down"), cap=10)  # no reply: unowned again
    orphans = await store.drafts.orphan_drafts(group_id)
    assert len(orphans) == 3
    await store.drafts.drop_drafts(p.id for p in orphans)
    assert await store.drafts.orphan_drafts(group_id) == [] and await store.drafts.draft_parts(again.id) == []
