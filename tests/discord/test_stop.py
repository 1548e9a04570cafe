"""⏹ Stop on an agent's provisional message (SPEC §8 "People steer a reply"): the real discord.py client
against the emulator (a button on the group's webhook message, component interactions), the real openai
client against a local server whose stream never ends, so only the press can end the turn."""
from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any

from tests.discord.conftest import BotHarness
from tests.fakes.openai_server import Reply
from tests.support import eventually

# While a reply is written, a tail that may still grow into a registered secret is held back (the
# emulator's webhook token is random: one in 65 begins with "n", and "...plan" then showed "...pla"
# until the stream ended, which it never does here). No secret begins with "…", so this shows whole.
SHOWN = "Here is the first half of the plan…"


def buttons(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["label"], c["custom_id"]) for row in message["components"] for c in row["components"]]


async def streaming_forever(harness: BotHarness, script, starter: str) -> dict[str, Any]:
    """`starter` asks planner, whose stream shows SHOWN and then never ends; its provisional message."""
    emu = harness.emu
    script.set_agent("planner", [Reply(SHOWN, every=0.01, hold_end=asyncio.Event())])  # never set
    await harness.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, starter, "@planner plan it")

    def shown() -> list[dict[str, Any]]:
        found = [m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id") and m["content"] == SHOWN]
        return [emu.get_message(m["id"]) or m for m in found]
    await eventually(lambda: shown() and shown()[0]["components"], "the provisional message, with its button",
                     timeout=30)
    return shown()[0]


def row(harness: BotHarness, sql: str) -> tuple[Any, ...]:
    with contextlib.closing(sqlite3.connect(harness.db)) as db:
        return db.execute(sql).fetchone()


async def test_the_starter_stops_a_streaming_reply_and_a_stranger_is_told_who_may(streaming, script):
    emu = streaming.emu
    message = await streaming_forever(streaming, script, emu.bob_id)
    ((label, stop_id),) = buttons(message)
    assert label == "Stop" and message["components"][0]["components"][0]["emoji"]["name"] == "⏹️"
    carol = emu.add_member(emu.guild_id, "carol")
    refused = await (await emu.click_button(message, stop_id, carol)).wait_response(10)
    assert refused["ephemeral"] and refused["data"]["content"] == f"Only <@{emu.bob_id}> or an operator can stop this."
    assert buttons(emu.get_message(message["id"])) == [("Stop", stop_id)]  # still running
    pressed = await emu.click_button(message, stop_id, emu.bob_id)
    await pressed.wait_response(10)
    await eventually(lambda: emu.get_message(message["id"])["content"] == f"{SHOWN}\n\n(stopped)",
                     "the provisional message ends in (stopped)", timeout=30)
    await streaming.idle()
    final = emu.get_message(message["id"])
    assert final["components"] == []
    assert [m["id"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")] == [message["id"]]
    status, error, prompt, estimated = row(streaming, "SELECT status, error, prompt_tokens, estimated FROM runs")
    assert (status, error, estimated) == ("stopped", "stopped by Bob", 1) and prompt > 0  # what it spent, counted
    assert row(streaming, "SELECT status FROM episodes") == ("stopped",)
    assert row(streaming, "SELECT text, external_ids FROM messages WHERE author_type = 'agent'")[0] == (
        f"{SHOWN}\n\n(stopped)")
    said = await streaming.command("roundtable status")
    assert "stopped" in str(said["data"])


async def test_an_operator_stops_it(streaming, script):
    emu = streaming.emu
    message = await streaming_forever(streaming, script, emu.bob_id)
    ((_, stop_id),) = buttons(message)
    await (await emu.click_button(message, stop_id, emu.alice_id)).wait_response(10)  # alice: an operator
    await eventually(lambda: emu.get_message(message["id"])["components"] == [], "the button removed", timeout=30)
    await streaming.idle()
    assert emu.get_message(message["id"])["content"] == f"{SHOWN}\n\n(stopped)"
    assert row(streaming, "SELECT status, error FROM runs") == ("stopped", "stopped by Alice")


async def test_a_finished_reply_keeps_no_button(streaming, script):
    emu = streaming.emu
    done = asyncio.Event()
    script.set_agent("planner", [Reply("The whole plan, done.", hold_end=done)])  # written, not finished yet
    await streaming.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.bob_id, "@planner plan it")
    await eventually(lambda: any(m.get("webhook_id") for m in emu.channel_messages(emu.channel_id)),
                     "the provisional message", timeout=30)
    done.set()
    await eventually(lambda: any(m["content"] == "The whole plan, done." for m in emu.channel_messages(emu.channel_id)),
                     "the reply", timeout=30)
    await streaming.idle()
    (reply,) = [m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]
    assert emu.get_message(reply["id"])["components"] == []
    posts = [r.json for r in emu.requests_matching("POST", r"^/webhooks/") if r.json and r.json.get("username")]
    assert posts and posts[0]["components"][0]["components"][0]["label"] == "Stop"  # it had one while written
