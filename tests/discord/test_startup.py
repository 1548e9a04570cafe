"""`roundtable run` start-up: problems are one readable line, never a traceback; the log is at
ROUNDTABLE_LOG_LEVEL, without secrets or discord.py's voice warnings."""
from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI, closed_base_url
from tests.fakes.strict_openai import StrictOpenAI
from tests.support.spawn import start_roundtable

KEY = "sk-test-startup"


def run_env(tmp_path: Path, **env_overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ROUNDTABLE_", "DISCORD_"))}
    env.update(OPENAI_API_KEY=KEY, OPENAI_BASE_URL="http://127.0.0.1:9/v1", ROUNDTABLE_DB=str(tmp_path / "rt.db"),
               ROUNDTABLE_LLM_RETRIES="0")
    env.update(env_overrides)
    return env


async def run(tmp_path: Path, **env_overrides: str) -> tuple[int, list[str]]:
    """`roundtable run` to its end; OPENAI_BASE_URL defaults to a closed port (pass a FakeOpenAI's
    when the run must get past the model check)."""
    proc = await start_roundtable(
        "--env-file", os.devnull, "run",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=run_env(tmp_path, **env_overrides),
        cwd=tmp_path)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()  # reaped here, not left to the garbage collector
    lines = [line for line in (out + err).decode().splitlines()
             if line.startswith("roundtable:") or "Traceback" in line]
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
    async with DiscordEmulator(privileged_intents_allowed=case != "no_intent") as emu, FakeOpenAI() as llm:
        token = "wrong-token" if case == "bad_token" else emu.token
        code, lines = await run(tmp_path, DISCORD_TOKEN=token, DISCORD_API_BASE_URL=emu.api_base,
                                OPENAI_BASE_URL=llm.base_url)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    assert "wrong-token" not in lines[0] and emu.token not in lines[0]
    if case == "bad_token":
        assert not (tmp_path / "rt.db").exists()  # the token is checked before the database is opened


async def test_a_guild_id_the_bot_is_not_in_is_one_line(tmp_path):
    async with DiscordEmulator() as emu, FakeOpenAI() as llm:
        code, lines = await run(tmp_path, DISCORD_TOKEN=emu.token, DISCORD_API_BASE_URL=emu.api_base,
                                DISCORD_GUILD_ID="123456789012345678", OPENAI_BASE_URL=llm.base_url)
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("roundtable: DISCORD_GUILD_ID=123456789012345678: the bot is not in that server")


async def test_a_malformed_base_url_with_credentials_is_not_echoed(tmp_path):
    code, lines = await run(tmp_path, DISCORD_TOKEN="x", OPENAI_BASE_URL="htp://user:sk-very-secret@host/v1")
    assert code == 2 and len(lines) == 1 and "OPENAI_BASE_URL" in lines[0]
    assert "sk-very-secret" not in lines[0] and "user:" not in lines[0]


@pytest.mark.parametrize("server", ["unreachable", "refuses the key"])
async def test_a_failing_model_server_stops_the_bot_before_it_logs_in(tmp_path, server):
    async with DiscordEmulator() as emu, StrictOpenAI(key="sk-the-right-one") as llm:
        url = closed_base_url() if server == "unreachable" else llm.base_url
        code, lines = await run(tmp_path, DISCORD_TOKEN=emu.token, DISCORD_API_BASE_URL=emu.api_base,
                                OPENAI_BASE_URL=url)
        sessions = dict(emu.sessions)
    assert code == 2 and len(lines) == 1, lines
    if server == "unreachable":
        assert lines[0] == (f"roundtable: OPENAI_BASE_URL={url} did not answer (connection refused); "
                            "check that the server runs")
    else:
        assert lines[0].startswith(f"roundtable: OPENAI_API_KEY was refused by 127.0.0.1:{llm.port}: HTTP 401: ")
    assert KEY not in lines[0] and emu.token not in lines[0]
    assert sessions == {}  # no gateway session: nothing was taken in


@pytest.mark.parametrize("level", ["INFO", "WARNING"])
async def test_run_logs_at_roundtable_log_level_without_voice_warnings(tmp_path, level):
    async with DiscordEmulator() as emu, FakeOpenAI() as llm:
        proc = await start_roundtable(
            "--env-file", os.devnull, "run", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, cwd=tmp_path,
            env=run_env(tmp_path, DISCORD_TOKEN=emu.token, DISCORD_API_BASE_URL=emu.api_base,
                        DISCORD_GUILD_ID=emu.guild_id, OPENAI_BASE_URL=llm.base_url, ROUNDTABLE_LOG_LEVEL=level))
        try:
            await emu.wait_for(lambda: any(s.ready for s in emu.sessions.values()) or proc.returncode is not None,
                               timeout=30, what="the bot's gateway session")
            proc.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(proc.communicate(), 180)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()  # reaped here, not left to the garbage collector
    log = out.decode()
    assert proc.returncode == 0, log
    assert "voice will NOT be supported" not in log and "PyNaCl" not in log and "davey" not in log
    assert (" INFO " in log) == (level == "INFO")
    if level == "INFO":
        assert "INFO bot.llm.openai_llm: model server" in log and "INFO storage.db: opened database" in log
    assert KEY not in log and emu.token not in log and "Traceback" not in log
