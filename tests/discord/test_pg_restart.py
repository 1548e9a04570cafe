"""The bot on PostgreSQL while the server restarts (staged through a TCP proxy: the shared test
server is never restarted): a message posted meanwhile is stored and answered once it is back, a
command meanwhile gets a plain answer, and the log holds one WARNING when the outage starts and
one when it ends, no ERROR and no traceback."""
from __future__ import annotations

import logging

import asyncpg
import pytest

from bot.surfaces.discord.commands import DATABASE_AWAY
from storage import open_store
from tests.discord.conftest import BotHarness
from tests.discord_emulator import DiscordEmulator
from tests.fakes.databases import PostgresPlace
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript
from tests.fakes.tcp_proxy import TcpProxy

OURS = ("bot", "storage", "asyncpg", "asyncio")  # the loggers of the bot and what it runs on (not discord.py's)


async def test_a_postgresql_restart_loses_nothing_and_logs_one_warning_at_each_end(
        pg: PostgresPlace, tmp_path, original_discord_endpoints, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    script = GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")
    admin = await asyncpg.connect(pg.url)
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server, TcpProxy.to_url(pg.url) as proxy:
        harness = BotHarness(emu, llm_server, tmp_path / "unused.db")
        harness.open_store = lambda: open_store(proxy.url(pg.target))
        await harness.start()
        try:
            await harness.setup_group(("planner", "plans"), mode="tags")
            await emu.user_post(emu.channel_id, emu.alice_id, "@planner before the restart")
            await emu.wait_for_messages(emu.channel_id, lambda m: m["content"] == "planner answer 1", timeout=20)

            await proxy.down(admin)
            await emu.user_post(emu.channel_id, emu.alice_id, "@planner during the restart")
            status = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "roundtable status", {})
            await emu.wait_for(lambda: any(DATABASE_AWAY in str(c) for c in status.callbacks + status.followups),
                               timeout=20, what="the command's answer")
            await emu.wait_for(lambda: any("lost the connection to PostgreSQL" in r.getMessage()
                                           for r in caplog.records), timeout=20, what="the outage in the log")
            await proxy.up()
            await emu.wait_for_messages(emu.channel_id, lambda m: m["content"] == "planner answer 2", timeout=30)
            await harness.idle()
            during = next(m for m in emu.channel_messages(emu.channel_id)
                          if m["content"] == "@planner during the restart")
            await emu.wait_for(lambda: "💬" in emu.reactions_of(during["id"]), timeout=10)  # the episode's end, shown
        finally:
            await harness.stop()
            await admin.close()
    asked = [m["content"] for m in emu.channel_messages(emu.channel_id) if not m.get("webhook_id")]
    assert asked.count("@planner during the restart") == 1
    answers = [m["content"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]
    assert answers == ["planner answer 1", "planner answer 2"]  # each once
    loud = [(r.levelname, r.name, r.getMessage()) for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith(OURS)]
    assert [(level, name) for level, name, _ in loud] == [("WARNING", "storage.pg")] * 2, loud
    assert "lost the connection to PostgreSQL" in loud[0][2] and "is reachable again after" in loud[1][2]
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith(OURS)]
