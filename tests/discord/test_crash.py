"""kill -9 of `roundtable run` at every step of a turn, then a restart on the same database
and emulator: every message answered as routing says, nothing lost, nothing posted twice.
The same while a reply streams (provisional messages): one copy, never a half reply.
Also SIGTERM (a graceful stop), a storm of restarts while five channels keep talking, and a kill
while a ⏹ Stop is being shown (SPEC §8): the stopped reply once, without its button, not run again."""
from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.core.rules.secrets import Secrets
from tests.discord.process import BotProcess, Channel, UniqueReplies, check_once, eval_ids
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI
from tests.support import quiet_period

pytestmark = pytest.mark.slow  # kill -9 and SIGTERM of a bot process, storms of kills: CI runs it, not the default run

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


async def ask(bot: BotProcess, channel: Channel, text: str) -> dict[str, Any]:
    return await bot.emu.user_post(channel.channel_id, bot.emu.alice_id, text)


async def wait_rows(bot: BotProcess, sql: str, params: tuple[Any, ...] = (), timeout: float = 20) -> None:
    def found() -> bool:
        return bool(bot.query(sql, params)[0][0])
    await bot.emu.wait_for(found, timeout=timeout, interval=0.005, what=sql)


KILL_POINTS = [
    "user row committed",
    "during the model call",
    "reply committed, not posted",
    "posted, id not recorded",
    "between chunks, next chunk not sent",
    "between chunks, next chunk sent, not recorded",
    "during a cursor advance",
]


@pytest.mark.parametrize("point", KILL_POINTS)
async def test_kill_9_at_each_step_of_a_turn_loses_nothing_and_posts_nothing_twice(bot, replies, point):  # noqa: C901 - each kill point's set-up side by side, read against the others
    emu = bot.emu
    replies.long = point.startswith("between chunks")
    channel = await bot.add_group(emu.channel_id, agents=("echo", "other"), stream=False)  # whole posts
    await bot.start()
    await ask(bot, channel, "@echo warm up")
    await bot.wait_settled()
    user_rows = "SELECT COUNT(*) FROM messages WHERE author_type = 'user' AND text = ?"
    held = None
    if point == "during the model call":
        replies.hang = 1
    elif point == "reply committed, not posted":
        held = emu.hold("POST", WEBHOOK)
    elif point == "posted, id not recorded":
        held = emu.hold("POST", WEBHOOK, after=True)
    elif point.startswith("between chunks"):
        first = emu.hold("POST", WEBHOOK, after=True)
    await ask(bot, channel, "@echo the real question")
    if point == "user row committed":
        await wait_rows(bot, user_rows, ("@echo the real question",))
    elif point == "during the model call":
        await emu.wait_for(lambda: len(replies.participant_order) == 2, timeout=20, what="the model call")
    elif point == "during a cursor advance":
        # the decision is stored; the next write moves the cursor of 'other', whom nobody tagged
        await wait_rows(bot, "SELECT COUNT(*) FROM decisions WHERE seq = 3")
        lock = sqlite3.connect(bot.db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        await quiet_period(0.5)  # the cursor's write meets the lock (nothing shows that outside the process)
    elif point.startswith("between chunks"):
        await first.wait_arrived(timeout=20)
        held = emu.hold("POST", WEBHOOK, after=point.endswith("not recorded"))
        first.release()
    if held is not None:
        await held.wait_arrived(timeout=20)
    await bot.kill()
    if point == "during a cursor advance":
        lock.execute("ROLLBACK")
        lock.close()
    await bot.start()
    await bot.wait_settled()
    totals = check_once(bot, [channel])
    assert totals["people"] == 2 and totals["replies"] >= 2
    statuses = [r[0] for r in bot.query("SELECT status FROM runs ORDER BY id")]
    assert statuses.count("running") == 0 and statuses.count("posted") == 2, statuses
    if point == "during the model call":
        assert "interrupted" in statuses


STREAM_KILL_POINTS = [
    "after the first edit",
    "between chunks, the next provisional post landed, its id not recorded",
    "after the last edit before the commit",
    "after the commit before the final edit",
    "after the final edit, before it was recorded",
]


@pytest.mark.parametrize("point", STREAM_KILL_POINTS)
async def test_kill_9_while_a_reply_streams_leaves_one_copy_and_no_half_reply(bot, replies, point):
    """The reply is shown while it is written; the bot dies at a point of it and starts again:
    the re-run's reply (or the committed one) ends up in the same messages, once, whole."""
    emu = bot.emu
    replies.long = point.startswith("between chunks")
    replies.every, replies.piece = (0.04, 100) if replies.long else (0.5, 2)  # a few seconds of text
    channel = await bot.add_group(emu.channel_id, agents=("echo", "other"))  # streamed (the default)
    await bot.start()
    await ask(bot, channel, "@echo warm up")
    await bot.wait_settled()
    before = len(emu.requests)
    shown = "SELECT COUNT(*) FROM drafts WHERE external_id IS NOT NULL"
    if point == "after the last edit before the commit":
        replies.hold_end = asyncio.Event()  # the model never finishes this reply
    held = None
    final = f"echo reply {len(replies.texts) + 1}."  # what the reply will be (the draft never shows its stop)
    if point.startswith("after the commit"):
        held = emu.hold("PATCH", EDIT, where=lambda r: (r.json or {}).get("content") == final)
    elif point.startswith("after the final edit"):
        held = emu.hold("PATCH", EDIT, after=True, where=lambda r: (r.json or {}).get("content") == final)
    await ask(bot, channel, "@echo the real question")
    if point == "after the first edit":
        await emu.wait_for(lambda: [r for r in emu.requests[before:] if r.method == "PATCH" and r.status == 200],
                           timeout=20, what="a provisional edit")
    elif point.startswith("between chunks"):
        await wait_rows(bot, shown)  # the first provisional message is recorded: the next post is the second
        held = emu.hold("POST", WEBHOOK, after=True)
    elif point == "after the last edit before the commit":
        known = Secrets()  # the bot's secrets: a tail that may begin one of them is held back while written
        known.register_all([emu.token, *(token for (token,) in bot.query("SELECT token FROM webhooks"))])
        whole = final[:known.unfinished(final[:-1])].rstrip()
        await emu.wait_for(lambda: [m for m in emu.channel_messages(emu.channel_id)
                                    if m.get("webhook_id") and m["content"] == whole],
                           timeout=20, what="the whole text, edited in")
    if held is not None:
        await held.wait_arrived(timeout=20)
    provisional = [m["id"] for m in emu.channel_messages(emu.channel_id)
                   if m.get("webhook_id") and not bot.query("SELECT 1 FROM messages WHERE external_ids LIKE ?",
                                                            (f'%"{m["id"]}"%',))]
    await bot.kill()
    await bot.start()
    await bot.wait_settled()
    totals = check_once(bot, [channel])
    assert totals["people"] == 2 and totals["replies"] == 2
    statuses = [r[0] for r in bot.query("SELECT status FROM runs ORDER BY id")]
    assert statuses.count("running") == 0 and statuses.count("posted") == 2, statuses
    (last,) = bot.query("SELECT external_ids FROM messages WHERE author_type = 'agent' ORDER BY seq DESC LIMIT 1")[0]
    assert provisional and eval_ids(last)[0] == provisional[0]  # finished in the message it began in
    committed = point.startswith(("after the commit", "after the final edit"))
    assert ("interrupted" in statuses) is not committed  # else the re-run's reply took the messages over
    if point.startswith("between chunks"):
        assert "a provisional message had landed unrecorded" in bot.log.read_text()


async def test_sigterm_stops_gracefully_and_the_next_start_finishes_the_turn(bot, replies):
    emu = bot.emu
    channel = await bot.add_group(emu.channel_id)
    await bot.start()
    replies.hang = 1
    await ask(bot, channel, "@echo take your time")
    await emu.wait_for(lambda: replies.participant_order, timeout=20, what="the model call")
    assert await bot.terminate() == 0
    assert "Traceback" not in bot.log.read_text()
    assert [r[0] for r in bot.query("SELECT status FROM runs")] == ["interrupted"]
    assert bot.query("SELECT COUNT(*) FROM leases")[0][0] == 0  # released, not left to expire
    await bot.start()
    await bot.wait_settled()
    assert check_once(bot, [channel]) == {"people": 1, "replies": 1}


@pytest.mark.parametrize("streams", ["fast", "slowly"])
async def test_a_storm_of_kills_while_five_channels_keep_talking(bot, replies, streams):
    """Kills at random moments; with replies streaming slowly (a few seconds each), most land mid-stream."""
    emu = bot.emu
    replies.delay = 0.05
    if streams == "slowly":
        replies.every, replies.piece = 0.1, 3
    channels = [await bot.add_group(emu.channel_id)]
    for i in range(4):
        channels.append(await bot.add_group(emu.add_channel(emu.guild_id, f"room-{i}")))
    rng = random.Random(6)
    posting = True

    async def people() -> None:
        n = 0
        while posting:
            n += 1
            channel = rng.choice(channels)
            await ask(bot, channel, f"@echo message {n} in {channel.channel_id}")
            await asyncio.sleep(rng.uniform(0.005, 0.06))

    talkers = asyncio.create_task(people())
    try:
        await bot.start()
        for _ in range(3):
            await asyncio.sleep(rng.uniform(0.8, 2.5))
            await bot.kill()
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            await bot.start()
        (taken,) = bot.query("SELECT COUNT(*) FROM messages WHERE author_type = 'user'")[0]
        await wait_rows(bot, "SELECT COUNT(*) > ? FROM messages WHERE author_type = 'user'", (taken + 5,),
                        timeout=90)  # the last start takes live messages too
    finally:
        posting = False
        await talkers
    # hundreds of tagged messages, each answered: a loaded machine answers a few a second
    await bot.wait_settled(timeout=300)
    totals = check_once(bot, channels)
    assert totals["people"] > 50
    runs = dict(bot.query("SELECT status, COUNT(*) FROM runs GROUP BY status"))
    print(f"storm: {totals['people']} people's messages, {totals['replies']} replies, runs {runs}")


# kill -9 while a ⏹ Stop is being shown ---------------------------------------------------------
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
