"""Worker mode on Discord (issue 29 item 8): an operator makes an agent a worker; its group_post calls
arrive through the channel's webhook under its name, its final text never does. The real discord.py
client against the emulator and the real openai client against a local server that speaks tool calls."""
from __future__ import annotations

import pytest

from tests.fakes.openai_server import GroupChatScript, Reply, tool_call


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(agents={"planner": [
        Reply(tool_calls=[tool_call("group_post", content="Day 1: Asakusa.")]),
        Reply(tool_calls=[tool_call("group_post", content="Day 2: Ueno.")]),
        "Private: two days posted."]})


async def test_a_workers_posts_arrive_through_the_webhook_under_its_name(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "agent edit",
                                   {"name": "planner", "mode": "worker"})
    await rec.wait_response(15)
    (answer,) = await rec.wait_followups(1, timeout=30)  # deferred: it asks the model whether it takes tools
    assert answer["content"] == ("Updated planner: worker mode: its runs are private and it speaks only through "
                                 "group_post.")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan two days")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=30)
    await harness.idle()
    posts = [(p["username"], p["content"]) for p in harness.webhook_posts()]
    assert posts == [("planner", "Day 1: Asakusa."), ("planner", "Day 2: Ueno.")]
    assert not any("Private" in str(m) for m in emu.channel_messages(emu.channel_id))
