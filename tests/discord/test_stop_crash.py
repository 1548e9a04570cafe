"""kill -9 of `roundtable run` while a ⏹ Stop is being shown (SPEC §8 "People steer a reply"), then a
restart on the same database and emulator: the stopped reply is in the channel exactly once, ends in
"(stopped)" without its button, and the stopped run is not run again."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.discord.process import BotProcess, UniqueReplies, eval_ids
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.slow  # kill -9 of a bot process: CI runs it, not the default run

WEBHOOK = r"^/webhooks/\d+/[\w.\-]{60,}"
EDIT = WEBHOOK + r"/messages/\d+$"


@pytest.fixture
def replies() -> UniqueReplies:
    return UniqueReplies()


@pytest.fixture
async def bot(tmp_path, replies) -> AsyncIterator[BotProcess]:
    async with DiscordEmulator() as emu, FakeOpenAI(replies) as llm:
        process = BotProcess(tmp_path, emu, llm)
        try:
            yield process
        finally:
            await process.close()
            emu.release_all()


def stopped_edit(request) -> bool:
    return str((request.json or {}).get("content") or "").endswith("(stopped)")


@pytest.mark.parametrize("point", ["after the commit before the final edit",
                                   "after the final edit, before it was recorded"])
async def test_kill_9_during_a_stop_leaves_the_stopped_reply_once_and_does_not_run_it_again(bot, replies, point):
    emu = bot.emu
    replies.every, replies.piece = 0.05, 4
    channel = await bot.add_group(emu.channel_id, agents=("echo", "other"))  # streamed (the default)
    await bot.start()
    await emu.user_post(channel.channel_id, emu.alice_id, "@echo warm up")
    await bot.wait_settled()
    replies.hold_end = asyncio.Event()  # the model never finishes the next reply: only Stop ends it
    held = emu.hold("PATCH", EDIT, after=point.startswith("after the final edit"), where=stopped_edit)
    await emu.user_post(channel.channel_id, emu.alice_id, "@echo the real question")

    def provisional() -> list[dict]:
        return [m for m in (emu.get_message(m["id"]) for m in emu.channel_messages(channel.channel_id)
                            if m.get("webhook_id")) if m and m["components"]]
    await emu.wait_for(provisional, timeout=20, what="the provisional message with its Stop button")
    (message,) = provisional()
    stop_id = message["components"][0]["components"][0]["custom_id"]
    await (await emu.click_button(message, stop_id, emu.alice_id)).wait_response(10)
    await held.wait_arrived(timeout=20)
    asked = len(replies.participant_order)
    await bot.kill()
    await bot.start()
    await bot.wait_settled()
    posted = [m for m in emu.channel_messages(channel.channel_id) if m.get("webhook_id")]
    rows = bot.query("SELECT text, external_ids FROM messages WHERE author_type = 'agent' ORDER BY seq")
    assert [i for _, ids in rows for i in eval_ids(ids)] == [m["id"] for m in posted]  # each row once, nothing else
    assert [m["content"] for m in posted] == [text for text, _ in rows]
    statuses = [r[0] for r in bot.query("SELECT status FROM runs ORDER BY id")]
    assert statuses == ["posted", "stopped"], statuses  # settled before the kill: not run again
    assert len(replies.participant_order) == asked
    assert bot.query("SELECT status FROM episodes ORDER BY id")[-1] == ("stopped",)
    ((text, ids),) = bot.query("SELECT text, external_ids FROM messages WHERE author_type = 'agent' ORDER BY seq"
                               " DESC LIMIT 1")
    assert text.endswith("\n\n(stopped)") and eval_ids(ids) == [message["id"]]  # finished in its own message
    final = emu.get_message(message["id"])
    assert final["content"] == text and final["components"] == []
    assert not [m for m in emu.channel_messages(channel.channel_id) if (emu.get_message(m["id"]) or m)["components"]]
