"""Discord replies as context (SPEC §6) through the real discord.py client and the emulator: a person
replies to an agent's old post the window no longer holds; the reply tags that agent, and the agent's
prompt ends with the quoted post. A reply to a message the store does not hold (posted before
/roundtable setup) quotes nothing."""
from __future__ import annotations

import pytest

from bot.core.features.replies import HEADER
from tests.fakes.openai_server import GroupChatScript, message_text

PLAN = "[PLAN-A] Day 1: Asakusa and the Senso-ji at dawn, then Ueno park"


@pytest.fixture
def script() -> GroupChatScript:
    def answer(name: str, n: int) -> str:
        if n == 1:
            return PLAN
        return f"{name} idea {n}: " + " ".join(f"stop {k} in Shibuya for {k * 170} yen," for k in range(25))

    return GroupChatScript(default_agent_reply=answer)


def planner_prompts(harness) -> list[list[str]]:
    return [[message_text(m) for m in r["messages"]] for r in harness.llm_server.requests
            if GroupChatScript.classify(r) == ("participant", "planner")]


async def test_a_reply_to_an_old_post_brings_it_into_the_prompt_quoted(harness):
    emu = harness.emu
    before_setup = await emu.user_post(emu.channel_id, emu.alice_id, "[OLD] a message from before the bot")
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags", followup_window=0,
                              context_budget=500)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan a 3-day Tokyo trip")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=30)
    await harness.idle()
    plan_post = next(m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id"))
    assert plan_post["content"] == PLAN
    for n in range(4):  # the window moves past the plan
        await emu.user_post(emu.channel_id, emu.alice_id, f"@planner another idea, number {n}?")
        await emu.wait_for(lambda n=n: len(harness.webhook_posts()) >= 2 + n, timeout=30)
        await harness.idle()
    assert PLAN not in "\n".join(planner_prompts(harness)[-1])

    await emu.user_post(emu.channel_id, emu.bob_id, "make that 4 days", reference_message_id=plan_post["id"])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 6, timeout=30)  # the reply tagged planner
    await harness.idle()
    quoted = planner_prompts(harness)[-1]
    assert quoted[-1] == "\n".join([HEADER, 'Bob\'s reply "make that 4 days" answers:', f"> [planner] {PLAN}"])
    assert PLAN not in "\n".join(quoted[:-1])

    await emu.user_post(emu.channel_id, emu.bob_id, "@planner and this?", reference_message_id=before_setup["id"])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 7, timeout=30)
    await harness.idle()
    latest = planner_prompts(harness)[-1]
    assert "[OLD]" not in "\n".join(latest)  # not in the store: nothing to quote
    assert not any('reply "@planner and this?"' in m for m in latest)
    rows = await harness.store.thread.messages(1)
    assert [r.reply_to_seq for r in rows if r.author_name == "Bob"] == [2, None]


async def test_a_reply_across_channels_tags_nobody_and_quotes_nothing(harness):
    """Bob replies, in another group's channel, to planner's post here: that group has no planner of its
    own to tag and nothing of this group's to quote (on main the reply tagged this group's planner
    there). Untagged in tags mode, the reply goes to that group's every agent: local answers it, once.
    (Bob posts nothing else there: a second message posted at once may be routed with the reply, which
    it then supersedes, or after it, when the dispatcher took the reply first, and local answers both.)"""
    emu = harness.emu
    other = emu.add_channel(emu.guild_id, "second")
    await emu.wait_for(lambda: harness.bot.get_channel(int(other)) is not None, timeout=5)
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    for command, options in (("roundtable setup", {"mode": "tags"}),
                             ("agent add", {"name": "local", "role": "knows the city", "prompt": "You know."})):
        await (await emu.invoke_command(emu.guild_id, other, emu.alice_id, command, options)).wait_response(5)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan a 3-day Tokyo trip")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=30)
    await harness.idle()
    plan_post = next(m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id"))

    await emu.user_post(other, emu.bob_id, "what do you think of this?", reference_message_id=plan_post["id"])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=30)
    await harness.idle()
    there = [m for m in emu.channel_messages(other) if m.get("webhook_id")]
    assert [m["author"]["username"] for m in there] == ["local"]  # planner was not tagged there
    rows = await harness.store.thread.messages(2)
    assert [(r.author_name, r.reply_to_seq, r.tags.agent_names) for r in rows] == [
        ("Bob", None, ()), ("local", None, ())]
    [local_prompt] = [[message_text(m) for m in r["messages"]] for r in harness.llm_server.requests
                      if GroupChatScript.classify(r) == ("participant", "local")]
    assert HEADER not in "\n".join(local_prompt) and PLAN not in "\n".join(local_prompt)  # nothing quoted
    assert len(harness.webhook_posts()) == 2
