"""`roundtable run` start-up problems are one readable line, never a traceback."""
from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.discord_emulator import DiscordEmulator

ROUNDTABLE = str(Path(sys.executable).parent / "roundtable")


async def run(tmp_path: Path, **env_overrides: str) -> tuple[int, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ROUNDTABLE_", "DISCORD_"))}
    env.update(OPENAI_API_KEY="sk-test-startup", OPENAI_BASE_URL="http://127.0.0.1:9/v1",
               ROUNDTABLE_DB=str(tmp_path / "rt.db"))
    env.update(env_overrides)
    proc = await asyncio.create_subprocess_exec(
        ROUNDTABLE, "--env-file", str(tmp_path / "none.env"), "run",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
    lines = [line for line in (out + err).decode().splitlines() if line.startswith("roundtable:") or "Traceback" in line]
    return proc.returncode or 0, lines


async def test_missing_token(tmp_path):
    code, lines = await run(tmp_path)
    assert code == 2
    assert lines == [lines[0]] and lines[0].startswith("roundtable: DISCORD_TOKEN is missing")


async def test_malformed_keys_are_all_named_in_one_line(tmp_path):
    code, lines = await run(tmp_path, DISCORD_TOKEN="x", ROUNDTABLE_MAX_TURNS="0", DISCORD_API_BASE_URL="nope")
    assert code == 2 and len(lines) == 1
    assert "ROUNDTABLE_MAX_TURNS" in lines[0] and "DISCORD_API_BASE_URL" in lines[0]


@pytest.mark.parametrize("case, expected", [
    ("bad_token", "roundtable: Discord rejected DISCORD_TOKEN"),
    ("no_intent", "roundtable: Discord refused the Message Content intent"),
])
async def test_rejected_token_and_missing_intent(tmp_path, case, expected):
    async with DiscordEmulator(privileged_intents_allowed=case != "no_intent") as emu:
        token = "wrong-token" if case == "bad_token" else emu.token
        code, lines = await run(tmp_path, DISCORD_TOKEN=token, DISCORD_API_BASE_URL=emu.api_base)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    assert "wrong-token" not in lines[0] and emu.token not in lines[0]


async def test_a_guild_id_the_bot_is_not_in_is_one_line(tmp_path):
    async with DiscordEmulator() as emu:
        code, lines = await run(tmp_path, DISCORD_TOKEN=emu.token, DISCORD_API_BASE_URL=emu.api_base,
                                DISCORD_GUILD_ID="123456789012345678")
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("roundtable: DISCORD_GUILD_ID=123456789012345678: the bot is not in that server")


async def test_a_malformed_base_url_with_credentials_is_not_echoed(tmp_path):
    code, lines = await run(tmp_path, DISCORD_TOKEN="x", OPENAI_BASE_URL="htp://user:sk-very-secret@host/v1")
    assert code == 2 and len(lines) == 1 and "OPENAI_BASE_URL" in lines[0]
    assert "sk-very-secret" not in lines[0] and "user:" not in lines[0]
