"""Tool calls held for approval on Discord (issue 29 item 7, SPEC §6b "Approval"): the real discord.py
client against the emulator (Approve / Deny on the agent's provisional message, before its ⏹ Stop;
component interactions), the
real openai client against a local server that speaks tool calls. The tool is a destructive one, as an
MCP server marks it (`destructiveHint`: `ToolSpec.confirm`, tests/llm/test_mcp_tools.py)."""
from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.core.models import ToolOutput, ToolSpec
from bot.core.ports import ToolContext
from bot.surfaces.discord import drafts
from tests.discord.conftest import BotHarness
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call
from tests.support import eventually

TOLD = "error: denied by Alice: this call of files.delete did not run."


class Files:
    name = "files"

    def __init__(self) -> None:
        self.deleted: list[object] = []

    def tools(self) -> list[ToolSpec]:
        return [ToolSpec("delete", "Delete a file", destructive=True, confirm=True)]

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        self.deleted.append(arguments["item"])
        return ToolOutput(f"deleted {arguments['item']}")


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("files__delete", item="old.txt")]),
                                               "Finished."]})


def requests_of(harness) -> list[dict[str, Any]]:
    """The webhook messages that ask for approval, as the emulator holds them now."""
    found = [m for m in harness.emu.channel_messages(harness.emu.channel_id) if "wants to run" in (m["content"]
             or "") or "files.delete**" in (m["content"] or "")]
    return [harness.emu.get_message(m["id"]) or m for m in found]


def shown(harness, message_id: str) -> list[tuple[str, list[Any]]]:
    """What a message showed, edit by edit: (content, the labels of its buttons)."""
    edits = [r.json for r in harness.emu.requests_matching("PATCH", rf"^/webhooks/\d+/[\w.\-]+/messages/{message_id}$")
             if r.status == 200]
    return [(e["content"], [c["label"] for row in e.get("components", []) for c in row["components"]]) for e in edits]


def only_message(harness) -> dict[str, Any]:
    """The channel's one agent message (the request was posted as the reply's provisional message)."""
    (message,) = [m for m in harness.emu.channel_messages(harness.emu.channel_id) if m.get("webhook_id")]
    return harness.emu.get_message(message["id"]) or message


async def held(harness) -> dict[str, Any]:
    """Set up the group, grant files.*, and let Bob start an episode whose call is held; the request."""
    files = Files()
    harness.engine.tools.add(files)
    harness.files = files
    await harness.setup_group(("planner", "plans"), mode="tags")
    granted = await harness.command("agent tools", {"name": "planner", "grant": "files.*"})
    assert "files.delete (destructive)" in granted["data"]["content"]
    await harness.emu.user_post(harness.emu.channel_id, harness.emu.bob_id, "@planner delete old.txt")
    await eventually(lambda: requests_of(harness), "the request for approval", timeout=30)
    (request,) = requests_of(harness)
    return request


def labels(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["label"], c["custom_id"]) for row in message["components"] for c in row["components"]]


async def test_only_the_starter_or_an_operator_decides_and_approve_runs_it_once(harness):
    emu = harness.emu
    request = await held(harness)
    assert request["content"].startswith(f"⏸️ planner wants to run **files.delete** with `{{\"item\": \"old.txt\"}}`.\n"
                                         f"<@{emu.bob_id}> or an operator: Approve or Deny")
    (approve, _), (deny, _), (stop, _) = labels(request)
    assert (approve, deny, stop) == ("Approve", "Deny", "Stop")
    approve_id = labels(request)[0][1]
    carol = emu.add_member(emu.guild_id, "carol")
    refused = await emu.click_button(request, approve_id, carol)
    answer = await refused.wait_response(10)
    assert answer["ephemeral"] and answer["data"]["content"] == f"Only <@{emu.bob_id}> or an operator can approve this."
    assert harness.files.deleted == []
    pressed = await emu.click_button(request, approve_id, emu.bob_id)
    await pressed.wait_response(10)
    await eventually(lambda: only_message(harness)["content"] == "Finished.\n\n🔧 files.delete ✓",
                     "the reply (its compact line of the call), in the request's message",
                     timeout=30)
    await harness.idle()
    assert harness.files.deleted == ["old.txt"]  # once
    settled = only_message(harness)
    assert settled["id"] == request["id"] and settled["components"] == []
    assert ("✅ planner's call of **files.delete** was approved by Bob.", ["Stop"]) in shown(harness, request["id"])
    with contextlib.closing(sqlite3.connect(harness.db)) as db:
        assert db.execute("SELECT status, result FROM tool_calls").fetchall() == [
            ("done", "[approved by Bob]\ndeleted old.txt")]
    why = await harness.command("roundtable why")  # the newest message: the agent's reply
    assert harness.embed_fields(why)["tool approvals"] == "files.delete: approved by Bob"


async def test_an_operators_deny_tells_the_model_who_denied_it(harness):
    emu = harness.emu
    request = await held(harness)
    deny_id = labels(request)[1][1]
    pressed = await emu.click_button(request, deny_id, emu.alice_id)  # alice: an operator, not the starter
    await pressed.wait_response(10)
    await eventually(lambda: only_message(harness)["content"] == "Finished.\n\n🔧 files.delete ✗",
                     "the reply (its compact line of the call), in the request's message",
                     timeout=30)
    assert harness.files.deleted == []
    last = [r for r in harness.llm_server.requests if GroupChatScript.classify(r) == ("participant", "planner")][-1]
    assert last["messages"][-1]["content"] == TOLD
    settled = only_message(harness)
    assert settled["id"] == request["id"] and settled["components"] == []
    assert ("🚫 planner's call of **files.delete** was denied by Alice.", ["Stop"]) in shown(harness, request["id"])


async def test_nobody_pressing_within_approval_timeout_denies(harness):
    files = Files()
    harness.engine.tools.add(files)
    await harness.setup_group(("planner", "plans"), mode="tags", approval_timeout=1)
    await harness.command("agent tools", {"name": "planner", "grant": "files.delete"})
    await harness.emu.user_post(harness.emu.channel_id, harness.emu.bob_id, "@planner delete old.txt")
    await eventually(lambda: [m for m in harness.emu.channel_messages(harness.emu.channel_id)
                              if m["content"] == "Finished.\n\n🔧 files.delete ✗"],
                     "the reply (its compact line of the call)",
                     timeout=30)
    assert files.deleted == []
    message = only_message(harness)
    assert message["components"] == []
    assert ("🚫 planner's call of **files.delete** was denied: nobody approved it within 1 s.", ["Stop"]) in shown(
        harness, message["id"])
    last = [r for r in harness.llm_server.requests if GroupChatScript.classify(r) == ("participant", "planner")][-1]
    assert last["messages"][-1]["content"] == ("error: denied: nobody approved this call of files.delete in time; "
                                              "it did not run.")


@pytest.fixture(params=[False, True], ids=["whole", "streamed"])
async def either(request, tmp_path, script, original_discord_endpoints) -> AsyncIterator[BotHarness]:
    """A bot whose groups post whole replies, or stream them."""
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server:
        bot = BotHarness(emu, llm_server, tmp_path / "roundtable.db", stream=request.param)
        await bot.start()
        try:
            yield bot
        finally:
            await bot.stop()


async def test_an_operator_stops_the_run_while_its_call_waits(either):
    """⏹ Stop while a call waits for approval: the wait ends at once, the call never runs, the
    message the request was shown in ends in (stopped) without buttons, the episode is stopped."""
    bot = either
    emu = bot.emu
    asked = await held(bot)
    (_, _), (_, _), (stop, stop_id) = labels(asked)
    assert stop == "Stop"
    await (await emu.click_button(asked, stop_id, emu.alice_id)).wait_response(10)  # alice: an operator
    await eventually(lambda: only_message(bot)["components"] == [], "the buttons removed", timeout=30)
    await bot.idle()
    message = only_message(bot)
    assert message["id"] == asked["id"] and message["content"] == "(stopped)\n\n🔧 files.delete ✗"
    assert bot.files.deleted == []
    with contextlib.closing(sqlite3.connect(bot.db)) as db:
        assert db.execute("SELECT status, error FROM runs").fetchall() == [("stopped", "stopped by Alice")]
        assert db.execute("SELECT status FROM episodes").fetchall() == [("stopped",)]
        assert db.execute("SELECT status, result FROM tool_calls").fetchall() == [
            ("unknown", "error: the turn was stopped before this call returned; its outcome is unknown.")]
    assert bot.surface.approvals.of(1, "planner") is None  # nothing left waiting


async def test_a_streamed_run_asks_at_once_though_its_first_post_would_wait(streaming, monkeypatch):
    """A streamed reply's first provisional post waits a moment after its first text (FIRST_AFTER: a
    reply done by then is posted whole, issue 31); a request for approval needs its buttons now, so
    it is posted at once, and the reply is finished in it."""
    monkeypatch.setattr(drafts, "FIRST_AFTER", 3600.0)
    emu = streaming.emu
    request = await held(streaming)
    (approve, approve_id), (deny, _), (stop, _) = labels(request)
    assert (approve, deny, stop) == ("Approve", "Deny", "Stop")
    await (await emu.click_button(request, approve_id, emu.bob_id)).wait_response(10)
    await eventually(lambda: only_message(streaming)["content"] == "Finished.\n\n🔧 files.delete ✓",
                     "the reply, in the request's message", timeout=30)
    await streaming.idle()
    assert streaming.files.deleted == ["old.txt"] and only_message(streaming)["components"] == []
