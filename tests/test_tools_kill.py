"""Never twice, across kill -9 (issue 29): `roundtable console` processes on one SQLite file, the real openai
client against a local server, a REAL MCP server over stdio whose `add` counts its invocations in a file.

A console is killed with -9 while `add` runs (or after its result was journaled); a console started again on
the same database resumes the run from its journal: `add` is not run again, and the model is told."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from bot.core.features.tools import UNKNOWN
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call
from tests.support import eventually
from tests.support.spawn import start_roundtable
from tests.test_console import clean_env, run_console

SERVER = str(Path(__file__).resolve().parent / "fakes" / "mcp_server.py")
SESSION = (b'/agent add name:planner role:counts prompt:"You count."\n'
           b"/agent tools name:planner grant:counter.*\n"
           b"@planner add 2\n")


def mcp_json(tmp_path: Path, seconds: float) -> None:
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"counter": {
        "command": sys.executable, "args": [SERVER],
        "env": {"MCP_COUNT_FILE": str(tmp_path / "count"), "MCP_ADD_SECONDS": str(seconds),
                "MCP_PID_FILE": str(tmp_path / "pid")}}}}))


def journal(tmp_path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(tmp_path / "rt.db") as db:
        try:
            return db.execute("SELECT tool, status FROM tool_calls ORDER BY id").fetchall()
        except sqlite3.OperationalError:  # not created yet
            return []


@pytest.mark.parametrize("cut", ["in flight", "after its result"])
async def test_kill_9_then_restart_never_runs_a_call_twice(tmp_path, cut):
    in_flight = cut == "in flight"
    mcp_json(tmp_path, 3600 if in_flight else 0)
    count = tmp_path / "count"
    script = GroupChatScript(agents={"planner": [
        Reply(text="Adding.", tool_calls=[tool_call("counter__add", n=2)]),
        *([] if in_flight else [Reply("Never sent.", delay=3600.0)]),  # the call after the result: killed in it
        "Done, as far as I can tell."]})
    async with FakeOpenAI(script) as srv:
        proc = await start_roundtable(
            "--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=clean_env(tmp_path, srv.base_url), cwd=tmp_path)
        try:
            assert proc.stdin is not None
            proc.stdin.write(SESSION)
            await proc.stdin.drain()  # the input stays open
            await eventually(lambda: count.exists() and count.read_text() == "add 2\n", "the call reached the server")
            if not in_flight:
                await eventually(lambda: journal(tmp_path) == [("counter__add", "done")], "the result journaled")
                await eventually(lambda: len(script.participant_order) == 2, "the model asked again")
            else:
                assert journal(tmp_path) == [("counter__add", "running")]
            server = int((tmp_path / "pid").read_text())
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await eventually(lambda: not Path(f"/proc/{server}").exists() or "zombie" in Path(
            f"/proc/{server}/status").read_text(), "the MCP server to die with its console")
        mcp_json(tmp_path, 0)
        code, out, err = await run_console(tmp_path, srv.base_url, "")
    assert code == 0, err
    assert count.read_text() == "add 2\n"  # never twice
    assert "[planner] Done, as far as I can tell." in out, out + err
    resumed = [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner")][-1]
    assistant, answer = resumed["messages"][-2:]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["function"]["name"] == "counter__add"
    assert answer["tool_call_id"] == assistant["tool_calls"][0]["id"]
    if in_flight:
        assert answer["content"] == UNKNOWN
        assert journal(tmp_path) == [("counter__add", "unknown")]
        assert out.count("call of counter.add was cut by a restart") == 1
    else:
        assert answer["content"] == "counter is 2"
        assert journal(tmp_path) == [("counter__add", "done")]
        assert "cut by a restart" not in out
    assert "Traceback" not in err
