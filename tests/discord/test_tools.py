"""/agent tools on Discord (issue 29): an operator grants a tool, the agent calls it; the real discord.py
client against the emulator and the real openai client against a local server that speaks tool calls."""
from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from bot.core.models import ToolOutput, ToolSpec
from bot.core.ports import ToolContext
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import GroupChatScript, Reply, tool_call
from tests.support import eventually

HOOK = r"^/webhooks/\d+/[\w.\-]{60,}"


class Counter:
    name = "counter"

    def __init__(self) -> None:
        self.calls = 0
        self.release: asyncio.Event | None = None  # set: each call waits for it

    def tools(self) -> list[ToolSpec]:
        return [ToolSpec("add", "Add one"), ToolSpec("get", "Read it", read_only=True)]

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        self.calls += 1
        if self.release is not None:
            await self.release.wait()
        return ToolOutput(f"counter is {self.calls}")


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__add")]), "Counted: 1."]})


async def command(harness, options: dict[str, Any], user: str | None = None) -> dict[str, Any]:
    rec = await harness.emu.invoke_command(harness.emu.guild_id, harness.emu.channel_id,
                                           user or harness.emu.alice_id, "agent tools", options)
    return await rec.wait_response(5)


async def test_an_operator_grants_a_tool_and_the_agent_calls_it(harness, script):
    emu = harness.emu
    counter = Counter()
    harness.engine.tools.add(counter)
    await harness.setup_group(("planner", "plans"), mode="tags")
    listed = await command(harness, {"name": "planner"})
    assert listed["data"]["content"] == ("planner has no tool granted. Available: counter.add, counter.get "
                                         "(read-only), history_read (read-only), history_search (read-only).")
    refused = await command(harness, {"name": "planner", "grant": "counter.*"}, user=emu.bob_id)
    assert "Only people with Manage Server" in refused["data"]["content"]
    granted = await command(harness, {"name": "planner", "grant": "counter.*"})
    assert granted["data"]["content"].splitlines() == [
        "Granted counter.*.", "planner may call: counter.* (counter.add, counter.get). Available: counter.add, "
        "counter.get (read-only), history_read (read-only), history_search (read-only)."]
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner count")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=15)
    await harness.idle()
    assert [p["content"] for p in harness.webhook_posts()] == ["Counted: 1.\n\n🔧 counter.add ✓"]
    assert counter.calls == 1
    why = harness.embed_fields(await harness.command("roundtable why"))  # the newest message: the reply
    assert why["🔧 counter.add ✓"] == "arguments: {}\nresult: counter is 1", why
    revoked = await command(harness, {"name": "planner", "revoke": "counter.*"})
    assert revoked["data"]["content"].startswith("Revoked 1 of 1 (counter.*).\nplanner has no tool granted.")


async def test_the_grant_option_autocompletes_the_available_tools(harness, script):
    emu = harness.emu
    harness.engine.tools.add(Counter())
    await harness.setup_group(("planner", "plans"), mode="tags")

    async def offered(typed: str) -> list[str]:
        auto = await emu.invoke_autocomplete(emu.guild_id, emu.channel_id, emu.alice_id, "agent tools",
                                             {"name": "planner", "grant": typed}, "grant")
        return [c["value"] for c in (await auto.wait_response(5))["data"]["choices"]]

    assert await offered("") == ["counter.*", "counter.add", "counter.get", "history_read", "history_search"]
    assert await offered("cou") == ["counter.*", "counter.add", "counter.get"]
    assert await offered("counter.add, hist") == ["counter.add, history_read", "counter.add, history_search"]


def provisional(emu: DiscordEmulator) -> list[str]:
    """The contents the bot's channel webhook posts and edits carried, in order."""
    return [r.json["content"] for r in emu.requests_matching(None, HOOK)
            if r.method in ("POST", "PATCH") and r.json and "content" in r.json
            and not r.path.startswith(f"/webhooks/{emu.application_id}/")]


async def test_the_provisional_message_shows_each_call_and_the_reply_keeps_a_compact_line(streaming, script):
    """SPEC §6b "Visible": while the run calls a tool its provisional message shows the call running,
    then done with its seconds and the reply's text; the committed reply ends with the compact line."""
    emu = streaming.emu
    counter = Counter()
    counter.release = asyncio.Event()
    answered = asyncio.Event()
    script.set_agent("planner", [Reply(tool_calls=[tool_call("counter__add", n=1)]),
                                 Reply("Counted: 1.", hold_end=answered)])
    assert streaming.engine is not None
    streaming.engine.tools.add(counter)
    await streaming.setup_group(("planner", "plans"), mode="tags")
    await command(streaming, {"name": "planner", "grant": "counter.*"})
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner count")
    await eventually(lambda: "🔧 counter.add · n=1 …" in provisional(emu), "the running call in the draft")
    counter.release.set()
    done = re.compile(r"🔧 counter\.add · n=1 … ✓ \d+\.\d s\n\nCounted: 1")
    await eventually(lambda: any(done.fullmatch(c) for c in provisional(emu)), "the call done and the reply's text")
    answered.set()
    final = "Counted: 1.\n\n🔧 counter.add ✓"
    await eventually(lambda: provisional(emu)[-1] == final, "the committed reply's compact line")
    await streaming.idle()
    messages = [m["content"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]
    assert messages == [final]  # one message, grown by edits, finished by the committed reply


async def test_show_tools_off_keeps_only_the_reply(harness, script):
    emu = harness.emu
    harness.engine.tools.add(Counter())
    await harness.setup_group(("planner", "plans"), mode="tags", show_tools=False)
    await command(harness, {"name": "planner", "grant": "counter.*"})
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner count")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=15)
    await harness.idle()
    assert [p["content"] for p in harness.webhook_posts()] == ["Counted: 1."]
