"""What did I miss? /unread, /inbox, /read, /catchup through the emulator with the real client."""
from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.openai_server import GroupChatScript, message_text
from tests.support import eventually, quiet_period


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(selector=lambda body: "TERMINATE", default_agent_reply=lambda name, n: f"{name} says {n}",
                           summary=["Alice asked for a plan; planner drafted one. Nothing is open."])


def link(emu, message: dict[str, Any]) -> str:
    return f"https://discord.com/channels/{emu.guild_id}/{message['channel_id']}/{message['id']}"


async def ask(harness, name: str, user: str, options: dict[str, Any] | None = None,
              channel: str | None = None) -> dict[str, Any]:
    rec = await harness.emu.invoke_command(harness.emu.guild_id, channel or harness.emu.channel_id, user, name,
                                           options or {})
    answer = await rec.wait_response(5)
    if answer["type"] == 5:  # deferred while it works
        answer = {"data": (await rec.wait_followups(1, 15))[0], "rec": rec}
    answer["rec"] = rec
    return answer


def embed(answer: dict[str, Any]) -> dict[str, Any]:
    return answer["data"]["embeds"][0]


async def click_mark_read(harness, answer: dict[str, Any], user: str) -> dict[str, Any]:
    rec = answer["rec"]
    message = rec.followups[0] if rec.followups else rec.original
    button = next(c for row in message["components"] for c in row["components"] if "read" in c.get("custom_id", ""))
    clicked = await harness.emu.click_button(message, button["custom_id"], user)
    return await clicked.wait_response(5)


async def conversation(harness, n: int = 2) -> list[dict[str, Any]]:
    """`n` questions to the planner, each answered: 2n rows."""
    emu = harness.emu
    for _ in range(n):
        asked = len(harness.webhook_posts())
        await emu.user_post(emu.channel_id, emu.alice_id, f"@planner step {asked}")
        await emu.wait_for(lambda asked=asked: len(harness.webhook_posts()) > asked, timeout=10)
    await harness.idle()
    return emu.channel_messages(emu.channel_id)


async def test_unread_counts_every_row_for_someone_who_never_acted_then_after_a_reaction(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    messages = await conversation(harness, 3)  # 6 rows
    first = await ask(harness, "unread", emu.bob_id)
    assert first["ephemeral"]
    card = embed(first)
    assert card["title"] == "6 unread messages in #general"
    assert link(emu, messages[0]) in card["fields"][0]["value"]
    assert await harness.store.reading.get_seen(1, str(emu.bob_id)) is None  # reading the answer moves nothing
    await emu.user_react(emu.channel_id, messages[2]["id"], emu.bob_id, "👍")  # row 3
    async def at_row_3() -> bool:
        return await harness.store.reading.get_seen(1, str(emu.bob_id)) == 3
    await eventually(at_row_3, "bob's read cursor at row 3")
    after = embed(await ask(harness, "unread", emu.bob_id))
    assert after["title"] == "3 unread messages in #general" and link(emu, messages[3]) in after["fields"][0]["value"]
    await emu.user_react(emu.channel_id, messages[0]["id"], emu.bob_id, "👀")  # an older one: never backwards
    await quiet_period()  # an older reaction moves nothing, so no event follows it
    assert await harness.store.reading.get_seen(1, str(emu.bob_id)) == 3


async def test_inbox_finds_tags_by_name_mention_and_user_across_groups_and_marks_them_read(harness, script):
    emu = harness.emu
    carol = emu.add_member(emu.guild_id, "carol", global_name="Carol")
    other = emu.add_channel(emu.guild_id, "second")
    await emu.wait_for(lambda: harness.bot.get_channel(int(other)) is not None, timeout=5)
    await harness.setup_group(mode="tags")
    await (await emu.invoke_command(emu.guild_id, other, emu.alice_id, "roundtable setup", {"mode": "tags"})
           ).wait_response(5)
    await emu.user_post(emu.channel_id, emu.bob_id, "hi all")  # bob is known by name from now on
    await emu.user_post(emu.channel_id, carol, "@user please approve the budget")
    await emu.user_post(emu.channel_id, carol, "@bob can you check the hotel?")
    await emu.user_post(other, carol, f"<@{emu.bob_id}> and the trains too")
    async def all_four() -> bool:
        return len(await harness.store.thread.messages(1)) == 3 and len(await harness.store.thread.messages(2)) == 1
    await eventually(all_four, "all four stored")
    await harness.idle()
    alice = embed(await ask(harness, "inbox", emu.alice_id))
    assert [f["name"] for f in alice["fields"]] == ["Carol in #general (#2)"]  # @user: alice runs the server
    bob_inbox = await ask(harness, "inbox", emu.bob_id, channel=other)
    names = [f["name"] for f in embed(bob_inbox)["fields"]]
    assert sorted(names) == ["Carol in #general (#3)", "Carol in #second (#1)"]  # by name, by mention, two groups
    done = await click_mark_read(harness, bob_inbox, emu.bob_id)
    assert done["type"] == 7 and done["data"]["content"] == "✅ Marked read."
    assert await harness.store.reading.get_seen(1, str(emu.bob_id)) == 3
    assert await harness.store.reading.get_seen(2, str(emu.bob_id)) == 1
    empty = await ask(harness, "inbox", emu.bob_id)
    assert empty["data"]["content"] == "Nobody tagged you since you last read."


async def test_read_then_unread_says_nothing_is_unread_and_mark_read_on_unread(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    await conversation(harness, 1)
    unread = await ask(harness, "unread", emu.bob_id)
    await click_mark_read(harness, unread, emu.bob_id)
    assert (await ask(harness, "unread", emu.bob_id))["data"]["content"] == (
        "Nothing new in #general: you have read everything.")
    await conversation(harness, 1)
    marked = await ask(harness, "read", emu.bob_id)
    assert marked["data"]["content"] == "Marked #general read through #4."
    assert (await ask(harness, "unread", emu.bob_id))["data"]["content"].startswith("Nothing new")
    status = await ask(harness, "roundtable status", emu.bob_id)
    assert harness.embed_fields(status)["unread for you"] == "0"


async def test_catchup_summarises_only_the_unread_rows_once_and_moves_nothing_until_the_button(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    await conversation(harness, 1)
    await ask(harness, "read", emu.bob_id)
    await conversation(harness, 2)  # rows 3-6 are unread for bob
    caught = await ask(harness, "catchup", emu.bob_id)
    card = embed(caught)
    assert card["title"] == "What you missed in #general (#3-#6)"
    assert card["description"] == "Alice asked for a plan; planner drafted one. Nothing is open."
    summaries = [r for r in harness.llm_server.requests if "summarising a group chat" in message_text(r["messages"][0])]
    assert len(summaries) == 1
    prompt = message_text(summaries[0]["messages"][0])
    assert "@planner step 1" in prompt and "@planner step 0" not in prompt  # only what bob has not read
    assert await harness.store.reading.get_seen(1, str(emu.bob_id)) == 2  # reading the summary moves nothing
    again = await ask(harness, "catchup", emu.bob_id)
    assert embed(again)["description"] == card["description"]
    assert len([r for r in harness.llm_server.requests if "summarising" in message_text(r["messages"][0])]) == 1
    await click_mark_read(harness, again, emu.bob_id)
    assert await harness.store.reading.get_seen(1, str(emu.bob_id)) == 6


async def test_a_long_inbox_is_paged_and_mark_read_covers_what_it_lists(harness, script):
    emu = harness.emu
    await harness.setup_group(mode="tags")
    for i in range(11):
        await emu.user_post(emu.channel_id, emu.alice_id, f"<@{emu.bob_id}> question {i}")
    async def eleven() -> bool:
        return len(await harness.store.thread.messages(1)) == 11
    await eventually(eleven, "the 11 messages stored")
    inbox = await ask(harness, "inbox", emu.bob_id)
    first = embed(inbox)
    assert first["title"] == "11 messages tag you" and len(first["fields"]) == 8
    assert first["footer"]["text"].startswith("page 1 of 2")
    message = inbox["rec"].original
    older = next(c for row in message["components"] for c in row["components"] if c.get("label") == "Older ▶")
    await harness.views_ready(message)
    turned = await (await emu.click_button(message, older["custom_id"], emu.bob_id)).wait_response(5)
    assert turned["type"] == 7 and len(turned["data"]["embeds"][0]["fields"]) == 3
    await click_mark_read(harness, inbox, emu.bob_id)
    assert await harness.store.reading.get_seen(1, str(emu.bob_id)) == 11
