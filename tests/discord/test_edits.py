"""The author's own hand (SPEC §1, issue 28 item 2) through the real discord.py client and the emulator:
a message deleted in Discord (MESSAGE_DELETE, MESSAGE_DELETE_BULK) leaves a tombstone whose text and
files are gone from the database row, from the next prompt the model server sees and from the JSON,
Markdown and HTML exports; a person's edit (MESSAGE_UPDATE) is in the next prompt, marked "(edited)";
an operator deleting one chunk of an agent's reply tombstones the whole row and the bot takes down its
other chunks; edits and deletions made while the bot was away are taken when it catches up."""
from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from tests.discord.test_export import export
from tests.discord.test_reading import ask
from tests.fakes.openai_server import GroupChatScript, message_text

SECRET = "SWORDFISH-4471"
FILE_SECRET = "the vault opens with MARLIN-9902"
LONG = "Day 1: " + " ".join(f"stop {n} in Asakusa, then lunch." for n in range(150))  # three chunks of 2,000


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(selector=["TERMINATE"], default_agent_reply=lambda name, n: f"{name} answer {n}")


def row(harness, message_id: str) -> tuple[Any, ...] | None:
    """The stored row of a Discord message (text, attachments, edited_at, deleted_at), as another process reads it."""
    with sqlite3.connect(harness.db) as db:
        return db.execute("SELECT m.text, m.attachments, m.edited_at, m.deleted_at FROM messages m"
                          " JOIN message_external_ids x ON x.group_id = m.group_id AND x.seq = m.seq"
                          " WHERE x.external_id = ?", (str(message_id),)).fetchone()


def prompts(harness, agent: str) -> list[str]:
    return ["\n".join(message_text(m) for m in r["messages"]) for r in harness.llm_server.requests
            if f"You are {agent}, the " in "\n".join(message_text(m) for m in r["messages"])]


async def stored(harness, message_id: str) -> None:
    await harness.emu.wait_for(lambda: row(harness, message_id) is not None, timeout=30, what="the row")


async def test_a_deleted_message_leaves_the_store_the_next_prompt_and_every_export(harness):
    emu = harness.emu
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    secret = await emu.user_post(emu.channel_id, emu.alice_id, f"@planner the door code is {SECRET}",
                                 attachments=[("vault.txt", FILE_SECRET.encode())])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=30)
    assert SECRET in prompts(harness, "planner")[0] and FILE_SECRET in prompts(harness, "planner")[0]
    await harness.idle()
    await ask(harness, "catchup", emu.bob_id)  # bob's catch-up summary of rows 1-2 is kept for a while

    await emu.user_delete(secret["id"])  # alice deletes her own message
    await emu.wait_for(lambda: (row(harness, secret["id"]) or (0, 0, 0, None))[3] is not None, timeout=30,
                       what="the tombstone")
    assert row(harness, secret["id"])[:2] == ("", "[]")
    with sqlite3.connect(harness.db) as db:
        everything = repr(db.execute("SELECT * FROM messages").fetchall())
    assert SECRET not in everything and "MARLIN" not in everything and "vault.txt" not in everything
    await ask(harness, "catchup", emu.bob_id)  # the same rows: summarised again, from the tombstone
    catchups = [r for r in harness.llm_server.requests if "summarising a group chat" in message_text(r["messages"][0])]
    assert len(catchups) == 2 and SECRET in message_text(catchups[0]["messages"][0])
    again = message_text(catchups[1]["messages"][0])
    assert SECRET not in again and "vault.txt" not in again and "[Alice] (deleted)" in again

    await emu.user_post(emu.channel_id, emu.alice_id, "@planner what did I ask?")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=30)
    await harness.idle()
    latest = prompts(harness, "planner")[-1]
    assert SECRET not in latest and "MARLIN" not in latest and "vault.txt" not in latest
    assert "[Alice] (deleted)" in latest and "[planner] planner answer 1" in latest  # seq kept, no gap

    _, as_json = await export(harness, {"format": "json"})
    data = json.loads(emu.files[as_json["attachments"][0]["id"]][1])
    first = data["messages"][0]
    assert (first["seq"], first["author"]["name"], first["text"], first["attachments"]) == (1, "Alice", "", [])
    assert first["deleted_at"] is not None and data["messages"][1]["deleted_at"] is None
    for fmt in ("md", "html"):
        _, page = await export(harness, {"format": fmt})
        body = emu.files[page["attachments"][0]["id"]][1].decode()
        assert SECRET not in body and "MARLIN" not in body and "vault.txt" not in body, fmt
        assert "(deleted)" in body, fmt
    assert SECRET not in json.dumps(data) and "MARLIN" not in json.dumps(data)


async def test_an_edited_message_is_in_the_next_prompt_marked_edited(harness):
    emu = harness.emu
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    first = await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan Tokyo for 3 days",
                                attachments=[("old.txt", FILE_SECRET.encode()), ("keep.txt", b"kept notes")])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=30)
    await harness.idle()
    kept = next(a["id"] for a in first["attachments"] if a["filename"] == "keep.txt")
    await emu.user_edit(first["id"], "@planner plan Tokyo for 5 days", keep_attachments=[kept])
    await emu.wait_for(lambda: (row(harness, first["id"]) or (0, 0, None))[2] is not None, timeout=30,
                       what="the edit")
    text, files, _, deleted = row(harness, first["id"])
    assert text == "@planner plan Tokyo for 5 days" and deleted is None
    assert [f["name"] for f in json.loads(files)] == ["keep.txt"]  # the file she removed is gone too

    await emu.user_post(emu.channel_id, emu.alice_id, "@planner go on")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=30)
    await harness.idle()
    latest = prompts(harness, "planner")[-1]
    assert "[Alice] @planner plan Tokyo for 5 days (edited)" in latest
    assert "3 days" not in latest and "MARLIN" not in latest and "kept notes" in latest
    assert len(harness.webhook_posts()) == 2  # an edit answers nobody: the tags stay as first parsed


async def test_an_operator_deleting_a_chunk_or_a_purge_tombstones_the_rows(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    script.set_agent("planner", [LONG])
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner the full day, please")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 3, timeout=30)
    await harness.idle()
    chunks = [m["id"] for m in emu.channel_messages(emu.channel_id)
              if m.get("webhook_id") and m["author"]["username"] == "planner"]
    assert len(chunks) == 3  # one row, three Discord messages
    await stored(harness, chunks[1])
    await emu.user_delete(chunks[1])  # an operator deletes the second chunk of planner's reply
    await emu.wait_for(lambda: row(harness, chunks[0])[3] is not None, timeout=30, what="the agent's tombstone")
    whole = row(harness, chunks[0])
    assert whole is not None and whole[0] == "" and row(harness, chunks[1]) == row(harness, chunks[2]) == whole
    await emu.wait_for(lambda: not [m for m in emu.channel_messages(emu.channel_id) if m["id"] in chunks],
                       timeout=30, what="the reply's other chunks taken down")

    a = await emu.user_post(emu.channel_id, emu.bob_id, "first spam")
    b = await emu.user_post(emu.channel_id, emu.bob_id, "second spam")
    await stored(harness, a["id"])
    await stored(harness, b["id"])
    await emu.bulk_delete(emu.channel_id, [a["id"], b["id"]])
    await emu.wait_for(lambda: row(harness, a["id"])[3] is not None and row(harness, b["id"])[3] is not None,
                       timeout=30, what="both tombstones")
    assert row(harness, a["id"])[:2] == row(harness, b["id"])[:2] == ("", "[]")
    with sqlite3.connect(harness.db) as db:
        texts = dict(db.execute("SELECT seq, text FROM messages"))
    assert sorted(texts) == list(range(1, len(texts) + 1))  # no gap (whether an agent answered the spam or not)
    assert (texts[1], texts[2]) == ("@planner the full day, please", "")


async def test_edits_and_deletions_made_while_the_bot_was_away_are_taken_on_catching_up(harness):
    emu = harness.emu
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    keep = await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan Tokyo")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=30)
    gone = await emu.user_post(emu.channel_id, emu.alice_id, f"the door code is {SECRET}")
    typo = await emu.user_post(emu.channel_id, emu.bob_id, "budget is 1,050 dollars")
    for message in (keep, gone, typo):
        await stored(harness, message["id"])
    await harness.idle()
    reply = next(m["id"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")
                 and m["author"]["username"] == "planner")
    await harness.stop()
    await emu.user_delete(gone["id"], dispatch=False)  # no gateway event reaches a stopped bot anyway
    await emu.user_delete(reply, dispatch=False)  # an operator removes planner's answer
    await emu.user_edit(typo["id"], "budget is 1,500 dollars", dispatch=False)
    later = await emu.user_post(emu.channel_id, emu.alice_id, "posted while away", dispatch=False)
    await harness.start()
    await emu.wait_for(lambda: (row(harness, gone["id"]) or (0, 0, 0, None))[3] is not None
                       and (row(harness, typo["id"]) or (0, 0, None))[2] is not None
                       and row(harness, later["id"]) is not None, timeout=30, what="the catch-up")
    assert row(harness, gone["id"])[0] == "" and row(harness, reply)[3] is not None
    assert row(harness, typo["id"])[0] == "budget is 1,500 dollars"
    assert row(harness, keep["id"])[0] == "@planner plan Tokyo" and row(harness, keep["id"])[2:] == (None, None)
    with sqlite3.connect(harness.db) as db:
        assert SECRET not in repr(db.execute("SELECT * FROM messages").fetchall())
