"""/ask through the emulator with the real client: private answers, busy both ways, post:true."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakes.openai_server import GroupChatScript, Reply


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(selector=lambda body: "TERMINATE", default_agent_reply=lambda name, n: f"{name} says {n}")


async def ask(harness, options: dict[str, Any], user: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the first callback, the answer) of an /ask: deferred ephemerally while it works, then a follow-up."""
    rec = await harness.emu.invoke_command(harness.emu.guild_id, harness.emu.channel_id,
                                           user or harness.emu.bob_id, "ask", options)
    first = await rec.wait_response(5)
    assert first["type"] == 5 and first["ephemeral"], first  # "thinking…", only for the asker
    return first, (await rec.wait_followups(1, 15))[0]


async def test_a_private_answer_is_ephemeral_and_posts_nothing(harness, script):
    await harness.setup_group(("planner", "plans"), ("budget", "counts"), mode="tags")
    script.set_direct("planner", ["Start in Asakusa, then Ueno. TERMINATE"])
    _, answer = await ask(harness, {"agent": "planner", "prompt": "Where do we start?"})
    assert answer["flags"] & 64  # ephemeral
    assert answer["content"] == "planner (only you see this):\nStart in Asakusa, then Ueno."
    await harness.idle()
    assert harness.webhook_posts() == []
    prompt = harness.llm_server.requests[-1]["messages"]
    assert prompt[-1]["content"].endswith("Where do we start?") and "Bob" in prompt[-1]["content"]


async def test_asking_a_busy_agent_is_refused_and_a_delivery_waits_for_a_direct_run(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    script.set_agent("planner", [Reply("a slow draft", delay=1.0), "second draft"])
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner draft it")
    await emu.wait_for(lambda: ("participant", "planner") in script.calls, timeout=10)
    _, refused = await ask(harness, {"agent": "planner", "prompt": "quick one?"})
    assert "planner is busy with a group run" in refused["content"] and refused["flags"] & 64
    assert ("direct", "planner") not in script.calls  # told at once, nothing queued
    await emu.wait_for(lambda: len(harness.webhook_posts()) == 1, timeout=10)
    await harness.idle()

    script.set_direct("planner", [Reply("privately: Ueno", delay=1.0)])
    asking = asyncio.create_task(ask(harness, {"agent": "planner", "prompt": "and after?"}))
    await emu.wait_for(lambda: ("direct", "planner") in script.calls, timeout=10)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner next step")
    _, answer = await asking
    assert answer["content"].endswith("privately: Ueno")
    await emu.wait_for(lambda: len(harness.webhook_posts()) == 2, timeout=10)
    direct, group_run = harness.llm_server.requests[-2:]
    assert group_run.at - direct.at >= 0.9  # the delivery started only when the direct run ended
    assert [p["content"] for p in harness.webhook_posts()] == ["a slow draft", "second draft"]


async def test_post_true_posts_once_through_the_webhook_and_counts_toward_the_cap(harness, script):
    await harness.setup_group(("planner", "plans"), mode="tags", max_turns=1)
    script.set_direct("planner", ["Plan: Asakusa, Ueno, Ginza.", "One more idea."])
    _, answer = await ask(harness, {"agent": "planner", "prompt": "share the plan", "post": True})
    await harness.idle()
    posts = harness.webhook_posts()
    assert [(p["username"], p["content"]) for p in posts] == [("planner", "Plan: Asakusa, Ueno, Ginza.")]
    assert posts[0]["allowed_mentions"]["parse"] == []
    assert answer["content"].startswith("planner's answer is posted in the group: https://discord.com/channels/")
    _, second = await ask(harness, {"agent": "planner", "prompt": "anything else?", "post": True})
    assert second["content"].startswith("planner (only you see this; not posted: the group reached its cap of 1")
    assert second["content"].endswith("One more idea.")
    await harness.idle()
    assert len(harness.webhook_posts()) == 1


async def test_a_long_private_answer_is_attached(harness, script):
    await harness.setup_group(("planner", "plans"), mode="tags")
    long = "\n\n".join(f"Day {n}: " + "walk and eat. " * 40 for n in range(1, 9))
    script.set_direct("planner", [long])
    _, answer = await ask(harness, {"agent": "planner", "prompt": "the whole plan, in detail"})
    assert answer["content"].startswith(f"planner's answer is {len(long.strip()):,} characters long, so it is attached")
    assert [a["filename"] for a in answer["attachments"]] == ["planner-answer.md"]
