"""Recovery is prompt (SPEC §4, §11), with the real bot: people's messages posted while PostgreSQL
restarts are stored and answered as soon as it is back, and the channel is told of an outage that
lasts (once, and once at its end), as on SQLite; a 429's Retry-After is honoured as given; expected
outages are one log line, never a traceback.

Every back-off step is an hour here (`HOUR`), so only the wake-up on recovery can finish the work
within the tests' bounds. The outage is staged through a TCP proxy (the shared test server is
never restarted). Nothing here measures time: `python -m bench.recovery` does (docs/benchmarks.md)."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg
import pytest

from bot.core.rules.store_health import StoreHealth
from bot.core.runtime.worker import RetryPolicy, tell_episode
from storage import open_store
from tests.discord.conftest import BotHarness
from tests.discord_emulator import DiscordEmulator
from tests.fakes.databases import PostgresPlace
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript
from tests.fakes.tcp_proxy import TcpProxy

HOUR = RetryPolicy(first=3600.0, factor=2.0, cap=3600.0, unreachable=3600.0)  # every back-off step: an hour
AFTER = 0.5  # seconds of outage before people are told (10 s in production)
NOTICE = "I can't save anything to my database: the database server cannot be reached"
FIXED = "My database works again"
WEBHOOK = r"^/webhooks/\d+/[\w.\-]{60,}"
OURS = ("bot", "storage", "asyncpg", "asyncio")  # the loggers of the bot and what it runs on (not discord.py's)


def bot_posts(emu: DiscordEmulator, text: str) -> list[dict[str, Any]]:
    return [m for m in emu.channel_messages(emu.channel_id)
            if text in m["content"] and m["author"]["id"] == str(emu.bot_user_id) and not m.get("webhook_id")]


def answers(emu: DiscordEmulator) -> list[str]:
    return [m["content"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]


async def test_messages_posted_while_postgresql_restarts_are_stored_and_answered_once_it_is_back_and_told(
        pg: PostgresPlace, tmp_path, original_discord_endpoints, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    script = GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")
    admin = await asyncpg.connect(pg.url)
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server, TcpProxy.to_url(pg.url) as proxy:
        harness = BotHarness(emu, llm_server, tmp_path / "unused.db")
        harness.open_store = lambda: open_store(proxy.url(pg.target), health=StoreHealth(after=AFTER))
        harness.retry = HOUR
        await harness.start()
        try:
            await harness.setup_group(("planner", "plans"), mode="tags")
            await emu.user_post(emu.channel_id, emu.alice_id, "@planner before")
            await emu.wait_for(lambda: answers(emu) == ["planner answer 1"], timeout=30, what="the first answer")
            await harness.idle()

            await proxy.down(admin)
            for n in range(1, 6):
                await emu.user_post(emu.channel_id, emu.alice_id, f"@planner during {n}")
            await emu.wait_for(lambda: bot_posts(emu, NOTICE), timeout=30, what="the outage told in the channel")
            await proxy.up()
            await emu.wait_for(lambda: bot_posts(emu, FIXED), timeout=30, what="its end told")
            await emu.wait_for(lambda: len(answers(emu)) >= 2, timeout=30, what="the answer after the outage")
            await harness.idle()
            assert harness.store is not None
            people = [r.text for r in await harness.store.thread.messages(1) if r.author_type == "user"]
        finally:
            await harness.stop()
            await admin.close()
    assert people == ["@planner before"] + [f"@planner during {n}" for n in range(1, 6)]  # all, once, in order
    assert len(bot_posts(emu, NOTICE)) == 1 and len(bot_posts(emu, FIXED)) == 1  # once per outage
    assert answers(emu)[-1].startswith("planner answer")
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith(OURS)]  # expected: no traceback


async def test_intake_and_delivery_go_on_as_soon_as_postgresql_is_back_not_at_their_next_back_off_step(
        pg: PostgresPlace, tmp_path, original_discord_endpoints, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="bot.surfaces.discord.events")
    script = GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")
    admin = await asyncpg.connect(pg.url)
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server, TcpProxy.to_url(pg.url) as proxy:
        harness = BotHarness(emu, llm_server, tmp_path / "unused.db")
        harness.open_store = lambda: open_store(proxy.url(pg.target), health=StoreHealth(after=3600))
        harness.retry = HOUR
        await harness.start()
        try:
            await harness.setup_group(("planner", "plans"), mode="tags")
            await harness.idle()
            assert harness.store is not None
            store = harness.store
            await proxy.down(admin)
            for n in range(1, 4):
                await emu.user_post(emu.channel_id, emu.alice_id, f"@planner during {n}")
            await emu.wait_for(lambda: any("retrying in 3600" in r.getMessage() for r in caplog.records
                                           if r.name == "bot.surfaces.discord.events"),
                               timeout=30, what="intake waiting for the database (up to an hour)")
            await proxy.up()
            await emu.wait_for(lambda: answers(emu), timeout=30, what="the answer once the server is back")
            await harness.idle()
            people = [r.text for r in await store.thread.messages(1) if r.author_type == "user"]
        finally:
            await harness.stop()
            await admin.close()
    assert people == [f"@planner during {n}" for n in range(1, 4)]  # all, once, in order


async def test_a_rate_limited_reply_is_posted_after_each_retry_after_as_given(harness, script) -> None:
    emu = harness.emu
    await harness.stop()
    harness.retry = HOUR
    await harness.start()
    script.set_agent("planner", ["First answer."])
    await harness.setup_group(("planner", "plans"), mode="tags")
    limited = {"message": "You are being rate limited.", "retry_after": 0.2, "global": False}
    emu.fail_next("POST", WEBHOOK, 429, body=limited, times=5)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await emu.wait_for(lambda: answers(emu) == ["First answer."], timeout=30, what="the reply after five 429s")
    assert [r.status for r in emu.requests_matching("POST", WEBHOOK)
            if not r.path.startswith(f"/webhooks/{emu.application_id}/")][-6:] == [429] * 5 + [200]


async def test_an_episode_shown_while_postgresql_is_away_is_one_warning_line(
        pg: PostgresPlace, tmp_path, original_discord_endpoints, caplog: pytest.LogCaptureFixture) -> None:
    script = GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")
    admin = await asyncpg.connect(pg.url)
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server, TcpProxy.to_url(pg.url) as proxy:
        harness = BotHarness(emu, llm_server, tmp_path / "unused.db")
        harness.open_store = lambda: open_store(proxy.url(pg.target))
        await harness.start()
        try:
            await harness.setup_group(("planner", "plans"), mode="tags")
            await emu.user_post(emu.channel_id, emu.alice_id, "@planner before")
            await emu.wait_for(lambda: answers(emu) == ["planner answer 1"], timeout=30, what="the first answer")
            await harness.idle()
            assert harness.store is not None and harness.engine is not None
            group = await harness.store.groups.get_group(1)
            episode = await harness.store.episodes.get_episode(1)
            caplog.set_level(logging.WARNING)
            caplog.clear()
            await proxy.down(admin)
            await tell_episode(harness.engine.surface, group, episode)  # its reaction needs the task's row
            await proxy.up()
        finally:
            await harness.stop()
            await admin.close()
    said = [r for r in caplog.records if "could not show episode" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert said[0].exc_info is None and "\n" not in said[0].getMessage()
    assert "PostgreSQL" in said[0].getMessage()


async def test_a_reaction_in_flight_at_shutdown_is_no_error(harness, script, caplog: pytest.LogCaptureFixture) -> None:
    emu = harness.emu
    script.set_agent("planner", ["First answer."])
    await harness.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await emu.wait_for(lambda: answers(emu), timeout=30, what="the answer")
    await harness.idle()
    group = await harness.store.groups.get_group(1)
    episode = await harness.store.episodes.get_episode(1)
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    await harness.bot.close()  # shutting down: discord.py's session is closed
    await tell_episode(harness.engine.surface, group, episode)  # a reaction still to set
    await asyncio.gather(*harness.surface.link.tasks, return_exceptions=True)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith(OURS)]
    assert loud == [], [(r.levelname, r.getMessage()) for r in loud]
    assert any("shutting down" in r.getMessage() for r in caplog.records)
