"""The author's own hand on the store (SPEC §1, issue 28 item 2), on SQLite and PostgreSQL: a person's
edit changes the row's text (marked edited, tags and token count kept); a deletion leaves a tombstone
whose text and files are gone from the database row; the summaries written from the old text are
blanked, so they are written again and never reused."""
from __future__ import annotations

import pytest

from bot.core.models import ContextSummary, GroupSettings, NewMessage, SharedFile, Summary, Tags, Usage
from storage import SqlStore
from tests.fakes.databases import Place

SECRET = "the launch code is 0000-SWORDFISH"


@pytest.fixture
async def store(place: Place):
    async with await place.open() as opened:
        yield opened


def files() -> tuple[SharedFile, ...]:
    return (SharedFile(name="plan.txt", kind="text", size=40, url="https://cdn.example/plan.txt",
                       attachment_id="71", text=SECRET, chars=len(SECRET)),
            SharedFile(name="map.png", kind="image", size=400, url="https://cdn.example/map.png",
                       attachment_id="72", width=10, height=10))


async def say(store: SqlStore, group_id: int, text: str, ids: tuple[str, ...] = (), **kwargs) -> int:
    message, _ = await store.thread.append_user_message(group_id, NewMessage(
        "user", "alice", text, author_user_id="u1", external_ids=ids, token_count=7, **kwargs))
    return message.seq


async def test_a_deleted_row_is_a_tombstone_its_text_and_files_gone_from_the_database(store: SqlStore,
                                                                                      place: Place):
    group = await store.groups.create_group("g", "g", GroupSettings())
    await say(store, group.id, "before", ("100",))
    seq = await say(store, group.id, f"@planner {SECRET}", ("101",), attachments=files(),
                    tags=Tags(agent_ids=(1,), agent_names=("planner",)))
    await say(store, group.id, "after", ("102",))
    tombstone = await store.thread.delete_message(group.id, seq)
    assert tombstone is not None and tombstone.deleted and tombstone.deleted_at is not None
    assert (tombstone.seq, tombstone.author_name, tombstone.text, tombstone.attachments) == (seq, "alice", "", ())
    assert tombstone.tags.agent_names == ("planner",) and tombstone.external_ids == ("101",)  # who, not what
    assert tombstone.token_count == 7 and tombstone.confirmed  # the window's positions do not move
    raw = await place.fetch("SELECT text, attachments FROM messages WHERE group_id = ? AND seq = ?", (group.id, seq))
    assert raw == [("", "[]")]
    dump = repr(await place.fetch("SELECT * FROM messages"))
    assert "SWORDFISH" not in dump and "plan.txt" not in dump and "map.png" not in dump
    assert [m.seq for m in await store.thread.messages(group.id)] == [1, 2, 3]  # no gap
    assert (await store.thread.find_message_by_external_id("101")) == tombstone
    assert await store.thread.delete_message(group.id, seq) is None  # once
    assert await store.thread.edit_message(group.id, seq, "back again") is None  # a tombstone stays one


async def test_an_edit_changes_the_text_marks_it_and_keeps_tags_and_count(store: SqlStore, place: Place):
    group = await store.groups.create_group("g", "g", GroupSettings())
    seq = await say(store, group.id, f"@planner {SECRET}", ("101",), attachments=files(),
                    tags=Tags(agent_ids=(1,), agent_names=("planner",)))
    assert await store.thread.edit_message(group.id, seq, f"@planner {SECRET}") is None  # an embed came: no change
    edited = await store.thread.edit_message(group.id, seq, "@budget plan three days")
    assert edited is not None and edited.edited_at is not None and not edited.deleted
    assert (edited.text, edited.tags.agent_names, edited.token_count) == ("@budget plan three days", ("planner",), 7)
    assert [f.name for f in edited.attachments] == ["plan.txt", "map.png"]  # no list given: kept
    fewer = await store.thread.edit_message(group.id, seq, "@budget plan three days", attachment_ids=["72"])
    assert fewer is not None and [f.name for f in fewer.attachments] == ["map.png"]  # the person removed a file
    assert "SWORDFISH" not in repr(await place.fetch("SELECT * FROM messages"))
    assert await store.thread.get_message(group.id, seq) == fewer


async def test_summaries_written_from_a_changed_row_are_blanked_and_written_again(store: SqlStore):
    group = await store.groups.create_group("g", "g", GroupSettings())
    for n in range(1, 41):
        await say(store, group.id, f"row {n}")
    for through, after in ((10, 0), (20, 10), (30, 20)):
        await store.summaries.save_context_summary(group.id, ContextSummary(through, after, f"notes to {through}", 9,
                                                                            model="m"),
                                                   Usage(100, 10, 0))
    await store.reading.save_summary(group.id, Summary(10, 20, "catch-up 11-20", model="m"))
    await store.reading.save_summary(group.id, Summary(20, 30, "catch-up 21-30", model="m"))
    await store.thread.delete_message(group.id, 15)
    # the summary through 10 never read row 15; the ones through 20 and 30 (rolled from it) did
    found = await store.summaries.context_summary(group.id, through=30)
    assert found is not None and (found.through, found.text) == (10, "notes to 10")
    assert await store.reading.get_summary(group.id, 10, 20, newer_than=0) is None
    assert (await store.reading.get_summary(group.id, 20, 30, newer_than=0)) is not None
    await store.summaries.save_context_summary(group.id, ContextSummary(30, 10, "rewritten", 9, model="m"), Usage(50, 5,
                                                                                                                  0))
    again = await store.summaries.context_summary(group.id, through=30)
    assert again is not None and (again.through, again.after, again.text) == (30, 10, "rewritten")
    spent = [s for s in await store.spending.spending(group.id, 0) if s.kind == "summary"]
    assert sum(s.calls for s in spent) == 4  # the blanked ones' calls are still counted
    await store.thread.edit_message(group.id, 25, "row 25, corrected")  # an edit: the same
    assert (await store.summaries.context_summary(group.id, through=30)).through == 10  # type: ignore[union-attr]
    assert await store.reading.get_summary(group.id, 20, 30, newer_than=0) is None
