"""`run_bot` as `roundtable run` wires it: settings -> store, OpenAI client, Discord client."""
from __future__ import annotations

import asyncio
import contextlib
import logging

from bot.config import load_settings
from bot.surfaces.discord.client import run_bot
from bot.wiring import open_engine
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript


async def test_run_bot_answers_in_the_channel(tmp_path, original_discord_endpoints, caplog):
    caplog.set_level(logging.INFO, logger="bot.surfaces.discord.client")
    script = GroupChatScript(selector=["TERMINATE"], agents={"planner": ["Wired up."]})
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm:
        settings = load_settings({
            "OPENAI_API_KEY": "sk-run", "OPENAI_BASE_URL": llm.base_url, "DISCORD_TOKEN": emu.token,
            "DISCORD_API_BASE_URL": emu.api_base, "DISCORD_GUILD_ID": emu.guild_id,
            "ROUNDTABLE_DB": str(tmp_path / "run.db"), "ROUNDTABLE_MAX_TURNS": "7",
        }, need_discord=True)
        task = asyncio.create_task(run_bot(settings, open_engine, settings.new_groups))
        try:
            await emu.wait_until_ready(10)
            await emu.wait_for(lambda: emu.synced_commands.get(emu.guild_id), timeout=10)
            await emu.wait_for(  # on_ready comes discord.py's guild_ready_timeout (2 s) after the guilds
                lambda: any(r.getMessage().startswith("connected as") for r in caplog.records), timeout=30,
                what="on_ready")
            rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "roundtable setup")
            assert "max_turns 7" in (await rec.wait_response(5))["data"]["content"]
            rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "agent add",
                                           {"name": "planner", "role": "plans", "prompt": "You plan."})
            await rec.wait_response(5)
            await emu.user_post(emu.channel_id, emu.alice_id, "@planner ready?")
            posts = await emu.wait_for_messages(  # (streamed: the post grows into the reply)
                emu.channel_id, lambda m: m.get("webhook_id") and m["content"] == "Wired up.", timeout=10)
            assert posts[0]["author"]["username"] == "planner"
            assert len([m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]) == 1
            synced = {c["name"] for c in emu.synced_commands[emu.guild_id]}
            assert {"roundtable", "agent"} <= synced
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
