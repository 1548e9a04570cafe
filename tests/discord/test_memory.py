"""Agent memory as an admin uses it on Discord: /agent edit memory:true, a run that writes a note,
/agent memory show and clear, /agent show; the real discord.py client against the emulator and the
real openai client against a local server that speaks tool calls."""
from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.openai_server import GroupChatScript, Reply, message_text, tool_call

NOTE = "Alice travels by train."


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(agents={"planner": [
        Reply(tool_calls=[tool_call("memory_write", note=NOTE)]), "Day 1: the train to Kyoto.",
        "Day 2: Nara.", Reply(tool_calls=[tool_call("memory_write", note="Alice liked Kyoto.")]),
    ]})


async def ask(harness, name: str, options: dict[str, Any] | None = None,
              user: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first answer, and what the user finally reads (the follow-up of a deferred answer)."""
    rec = await harness.emu.invoke_command(harness.emu.guild_id, harness.emu.channel_id,
                                           user or harness.emu.alice_id, name, options or {})
    first = await rec.wait_response(5)
    if first["type"] != 5:
        return first, first["data"]
    return first, (await rec.wait_followups(1, timeout=15))[0]


async def test_memory_on_a_note_written_shown_and_cleared(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    first, turned_on = await ask(harness, "agent edit", {"name": "planner", "memory": True})
    assert first["type"] == 5 and first["ephemeral"]  # deferred while the model is asked about tool calls
    assert turned_on["content"] == "Updated planner: memory is on."
    assert harness.llm_server.requests[-1]["tool_choice"]["type"] == "function"  # the probe

    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan Kyoto")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=10)
    await harness.idle()
    assert [p["content"] for p in harness.webhook_posts()] == ["Day 1: the train to Kyoto."]

    _, shown = await ask(harness, "agent memory show", {"name": "planner"})
    embed = shown["embeds"][0]
    assert embed["title"] == "Memory of planner"
    assert embed["description"] == "1 note, newest first; memory is on."
    assert [f["value"] for f in embed["fields"]] == [NOTE]
    assert embed["fields"][0]["name"].endswith(" UTC")  # when it was saved

    await emu.user_post(emu.channel_id, emu.alice_id, "@planner and day 2?")  # writes only after the reminder
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=10)
    await harness.idle()
    reminded = harness.llm_server.requests[-1]
    assert message_text(reminded["messages"][-1]).startswith("Reminder: memory is on for you.")
    # the first run's note, in its system prompt (which opens the agent's own part, under the shared layout)
    assert NOTE in "\n".join(message_text(m) for m in reminded["messages"][:2])

    _, card = await ask(harness, "agent show", {"name": "planner"})
    assert harness.embed_fields({"data": card})["memory"] == "on, 2 notes"
    _, refused = await ask(harness, "agent memory clear", {"name": "planner"}, user=emu.bob_id)
    assert refused["content"].startswith("Only people with Manage Server")
    _, cleared = await ask(harness, "agent memory clear", {"name": "planner"})
    assert cleared["content"] == "Cleared 2 notes of planner."
    _, empty = await ask(harness, "agent memory show", {"name": "planner"})
    assert empty["content"] == "planner has no notes (memory is on)."
    _, off = await ask(harness, "agent edit", {"name": "planner", "memory": False})
    assert off["content"] == "Updated planner: memory is off."


async def test_memory_stays_off_for_a_model_without_tool_calls(harness, script):
    script.takes_tools = False
    await harness.setup_group(("planner", "plans"), mode="tags")
    _, answer = await ask(harness, "agent edit", {"name": "planner", "memory": True})
    assert answer["content"] == ("Memory stays off for planner: model fake-model answered without the tool call it "
                                 "was asked for, so it does not take tool calls; memory needs them.")
    _, card = await ask(harness, "agent show", {"name": "planner"})
    assert harness.embed_fields({"data": card})["memory"] == "off, 0 notes"
