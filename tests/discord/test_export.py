"""/roundtable export through the real discord.py client and the emulator: deferred while the file
is built, then the file arrives attached to the answer. /roundtable usage is an embed with a total."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.openai_server import GroupChatScript


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(selector=["TERMINATE"], default_agent_reply=lambda name, n: f"{name} answer {n}")


async def conversation(harness) -> None:
    emu = harness.emu
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan Tokyo <script>alert(1)</script>")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=10)
    await emu.user_post(emu.channel_id, emu.bob_id, "@planner and Kyoto?")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=10)
    await harness.idle()


async def export(harness, options: dict[str, Any], user: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    emu = harness.emu
    rec = await emu.invoke_command(emu.guild_id, emu.channel_id, user or emu.alice_id, "roundtable export", options)
    first = await rec.wait_response(5)
    if first["type"] != 5:
        return first, {}
    followup = (await rec.wait_followups(1, timeout=15))[0]
    return first, followup


async def test_export_arrives_as_an_attachment_after_a_deferral(harness):
    emu = harness.emu
    await conversation(harness)
    first, message = await export(harness, {"format": "json"})
    assert first["type"] == 5 and first["ephemeral"]  # deferred ("thinking") while the file is built
    assert message["content"] == "#general: 4 messages, 2 episodes, as JSON data."
    [attachment] = message["attachments"]
    assert attachment["filename"] == "general-transcript.json"
    data = json.loads(emu.files[attachment["id"]][1])
    texts = [(m["author"]["name"], m["text"]) for m in data["messages"]]
    assert texts == [("Alice", "@planner plan Tokyo <script>alert(1)</script>"), ("planner", "planner answer 1"),
                     ("Bob", "@planner and Kyoto?"), ("planner", "planner answer 2")]
    assert [r["model"] for r in data["runs"]] == ["fake-model", "fake-model"]
    _, page = await export(harness, {})
    [html] = page["attachments"]
    assert html["filename"] == "general-transcript.html"
    body = emu.files[html["id"]][1].decode()
    assert body.startswith("<!doctype html>") and "plan Tokyo &lt;script&gt;alert(1)&lt;/script&gt;" in body
    emu.attachment_size_limit = 2000  # a server whose upload limit this file is over
    _, too_big = await export(harness, {"format": "html"})
    assert not too_big["attachments"] and too_big["content"].startswith("#general: 4 messages, 2 episodes, as a page")
    assert "more than the 2 KB Discord takes here: where the bot runs, `roundtable export --group 1 --format html" \
        in too_big["content"]
    refused = await export(harness, {"format": "md"}, user=emu.bob_id)
    assert "Manage Server" in refused[1]["content"] and not refused[1]["attachments"]  # refused, ephemerally


async def test_usage_is_an_embed_with_a_total_and_no_made_up_price(harness):
    await conversation(harness)
    usage = await harness.command("roundtable usage", {"days": 1})
    fields = harness.embed_fields(usage)
    assert usage["data"]["embeds"][0]["title"] == "Usage in the last day"
    assert fields["planner"].startswith("2 calls · ") and fields["planner"].endswith(
        "no price known for fake-model (2 calls)")
    assert fields["total"].startswith("2 calls · ")
