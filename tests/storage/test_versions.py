"""A regenerated reply in the store (SQLite file and PostgreSQL schema; SPEC §8 "Regenerate reply"):
settling a 'regenerate' run replaces the row's text in one transaction, keeping each earlier text as
a version, and hands the row's shown parts to the new run, so the outbox edits them."""
from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.core.errors import InvalidInput
from bot.core.models import GroupSettings, NewMessage, RunResult, Usage, token_cost
from storage.store import SqlStore
from tests.fakes.databases import Place


@pytest.fixture
async def store(place: Place) -> AsyncIterator[SqlStore]:
    async with await place.open() as opened:
        yield opened


def reply(agent_id: int, run_id: int, text: str, tokens: int) -> NewMessage:
    return NewMessage("agent", "planner", text, author_agent_id=agent_id, source_run_id=run_id, token_count=tokens)


async def posted(store: SqlStore) -> tuple[int, int, int]:
    """A group whose planner answered alice (row 2, shown in two parts 1001 and 1002), then a notice (row 3)."""
    group = await store.groups.create_group("test:g", "g", GroupSettings())
    planner = await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
    await store.leases.acquire_lease(group.id, 60)
    await store.thread.append_user_message(group.id, NewMessage("user", "alice", "plan", author_user_id="a"))
    run = await store.runs.start_run(group.id, planner.id, "group", 1)
    await store.runs.finish_run(run.id, RunResult("posted", Usage(100, 10), reply=reply(planner.id, run.id, "v1", 5)),
                                cap=10)
    for part in ("1001", "1002"):
        await store.posting.record_posted(group.id, 2, part)
    await store.posting.confirm_message(group.id, 2)
    await store.thread.append_system_message(group.id, NewMessage("system", "roundtable", "a notice", token_count=4))
    return group.id, planner.id, run.id


async def test_each_regenerate_keeps_the_text_before_as_a_version(store: SqlStore) -> None:
    group_id, planner, first = await posted(store)
    notice_before = (await store.thread.get_message(group_id, 3)).tokens_before
    agents_before = await store.roster.list_agents(group_id)
    run = await store.runs.start_run(group_id, planner, "regenerate", 1, replaces=2)
    assert (run.kind, run.replaces_seq, run.snapshot_seq) == ("regenerate", 2, 1)
    done = await store.runs.finish_run(run.id, RunResult("posted", Usage(100, 20), reply=reply(planner, run.id, "v2 @x",
                                                                                               9)),
                                       cap=0)
    assert done.run.status == "posted" and done.run.posted_seq == 2 and done.reply is not None
    row = await store.thread.get_message(group_id, 2)
    assert (row.text, row.source_run_id, row.token_count, row.confirmed) == ("v2 @x", run.id, 9, False)
    assert row.external_ids == () and row.regenerated_at is not None
    # its shown parts are the new run's provisional messages now: the outbox edits them in order
    assert [(p.position, p.external_id) for p in await store.drafts.draft_parts(run.id)] == [(0, "1001"), (1, "1002")]
    assert await store.thread.find_message_by_external_id("1001") is None
    assert await store.drafts.orphan_drafts(group_id) == []  # owned by the row, not swept
    # the later rows' running token sums follow the new count
    assert (await store.thread.get_message(group_id, 3)).tokens_before == notice_before + token_cost(9) - token_cost(5)
    assert [a.delivered_through for a in await store.roster.list_agents(group_id)] == [
        a.delivered_through for a in agents_before]  # no cursor moves
    assert [m.seq for m in await store.thread.messages(group_id)] == [1, 2, 3]  # no new row
    episode = await store.episodes.get_episode(row.episode_id or 0)
    assert (episode.prompt_tokens, episode.agent_turns) == (200, 1)  # its tokens count; no new turn

    (version,) = await store.thread.message_versions(group_id)
    assert (version.seq, version.version, version.text, version.run_id) == (2, 1, "v1", first)

    await store.posting.record_posted(group_id, 2, "1001")  # the outbox edited the first part ...
    await store.posting.record_posted(group_id, 2, "1002")
    await store.posting.confirm_message(group_id, 2)  # ... and the second: the row is shown, its parts its own again
    assert await store.drafts.draft_parts(run.id) == []
    assert (await store.thread.find_message_by_external_id("1002") or row).seq == 2

    again = await store.runs.start_run(group_id, planner, "regenerate", 1, replaces=2)
    await store.runs.finish_run(again.id, RunResult("posted", reply=reply(planner, again.id, "v3", 5)), cap=0)
    versions = await store.thread.message_versions(group_id, [2])
    assert [(v.version, v.text, v.run_id) for v in versions] == [(1, "v1", first), (2, "v2 @x", run.id)]
    assert versions[1].created_at == row.regenerated_at  # when that text was written
    assert await store.thread.message_versions(group_id, [3]) == []


async def test_a_regenerate_of_a_deleted_row_or_without_a_reply_changes_nothing(store: SqlStore) -> None:
    group_id, planner, _ = await posted(store)
    failed = await store.runs.start_run(group_id, planner, "regenerate", 1, replaces=2)
    done = await store.runs.finish_run(failed.id, RunResult("failed", Usage(50, 0), error="timed out"), cap=0)
    assert done.run.status == "failed" and done.reply is None
    assert (await store.thread.get_message(group_id, 2)).text == "v1"
    run = await store.runs.start_run(group_id, planner, "regenerate", 1, replaces=2)
    await store.thread.delete_message(group_id, 2)
    done = await store.runs.finish_run(run.id, RunResult("posted", reply=reply(planner, run.id, "v2", 3)), cap=0)
    assert done.run.status == "discarded" and done.run.error == "the message was deleted during the run"
    assert await store.thread.message_versions(group_id) == []
    assert (await store.thread.get_message(group_id, 2)).text == ""


async def test_a_regenerate_run_names_what_it_replaces(store: SqlStore) -> None:
    group_id, planner, _ = await posted(store)
    with pytest.raises(InvalidInput, match="names the reply it replaces"):
        await store.runs.start_run(group_id, planner, "regenerate", 1)
    with pytest.raises(InvalidInput, match="names the reply it replaces"):
        await store.runs.start_run(group_id, planner, "group", 1, replaces=2)
