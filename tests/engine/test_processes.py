"""Two engine processes on one database (SQLite and PostgreSQL), both posting into one group:
the owner answers every question exactly once; `kill -9` of the owner mid-run, and the other
process takes the group over (its holder's pid is gone), re-runs the cut-off turn and finishes:
nothing lost, nothing posted twice."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from bot.core.features.tools import UNKNOWN
from bot.core.models import GroupSettings
from tests.fakes.databases import Place
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call
from tests.support import bound, eventually

pytestmark = pytest.mark.slow  # kill -9 of an engine process beside another: CI runs it, the default run leaves it out

ROOT = Path(__file__).resolve().parents[2]


async def spawn(place: Place, name: str, posts: int, delay: float, hang_from: int = 0,
                *more: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.engine_process", place.target, name, "--posts", str(posts),
        "--delay", str(delay), "--hang-from", str(hang_from), *more, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def line(proc: asyncio.subprocess.Process, starts: str) -> str:
    assert proc.stdout is not None
    while True:
        text = (await asyncio.wait_for(proc.stdout.readline(), 90)).decode()  # a process starts slowly under load
        assert text, f"the process ended before printing {starts!r}"
        if text.startswith(starts):
            return text


async def test_kill_9_of_the_owner_mid_run_and_the_other_process_finishes_exactly_once(place: Place) -> None:
    async with await place.open() as store:
        group = await store.groups.create_group("console:main", "main", GroupSettings(mode="tags"))
        await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
    # its second call never answers: it is still the owner, mid-run, whenever the other has started and posted
    owner = await spawn(place, "a", posts=2, delay=0.2, hang_from=2)
    other = None
    try:
        assert "owner=True" in await line(owner, "started")
        other = await spawn(place, "b", posts=2, delay=0.05)
        assert "owner=False" in await line(other, "started")
        await line(owner, "calling 2")  # its second turn is in flight
        await line(other, "posted")  # b's questions are stored
        owner.send_signal(signal.SIGKILL)
        await owner.wait()
        await line(other, "all answered")
        assert await asyncio.wait_for(other.wait(), bound(30)) == 0
    finally:
        for proc in (owner, other):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()

    rows = await place.fetch("SELECT seq, author_type, text FROM messages ORDER BY seq")
    questions = [text for _, kind, text in rows if kind == "user"]
    assert sorted(questions) == sorted(f"@planner question {n}-{i}" for n in "ab" for i in range(2))
    runs = await place.fetch("SELECT snapshot_seq, status, posted_seq FROM runs ORDER BY id")
    assert [status for _, status, _ in runs].count("interrupted") == 1  # the turn the kill cut off
    posted = [(snapshot, seq) for snapshot, status, seq in runs if status == "posted"]
    assert [s for s, _ in posted] == sorted({s for s, _ in posted})  # no snapshot answered twice
    replies = [text for _, kind, text in rows if kind == "agent"]
    assert len(replies) == len(set(replies)) == len(posted)  # every reply from its own run, none twice
    assert any(text.startswith("planner answers b#") for text in replies)  # the survivor finished the work
    latest = rows[-1][0]
    assert await place.fetch("SELECT delivered_through FROM agents") == [(latest,)]
    assert await place.fetch("SELECT COUNT(*) FROM messages WHERE confirmed = 0") == [(0,)]


def mcp_config(tmp_path: Path, name: str, seconds: float) -> str:
    """One process's MCP servers' file: the test server over stdio, its `add` counting into one file for both."""
    path = tmp_path / name
    path.write_text(json.dumps({"mcpServers": {"counter": {
        "command": sys.executable, "args": [str(ROOT / "tests" / "fakes" / "mcp_server.py")],
        "env": {"MCP_COUNT_FILE": str(tmp_path / "count"), "MCP_ADD_SECONDS": str(seconds)}}}}))
    return str(path)


async def test_kill_9_of_the_owner_mid_tool_call_and_the_other_process_never_runs_it_twice(place: Place,
                                                                                            tmp_path: Path) -> None:
    """Never twice across a lease takeover (issue 29): the owner is killed with -9 while a call of the
    non-idempotent `add` of a REAL MCP server runs; the other process takes the group over and resumes
    the run from its journal: `add` ran once (the file counts its invocations), the model is told the
    outcome is unknown (same tool_call_id), the channel is told once, and the run ends with a reply."""
    async with await place.open() as store:
        group = await store.groups.create_group("console:main", "main", GroupSettings(mode="tags"))
        planner = await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
        await store.tools.grant_tools(planner.id, ["counter.*"])
    count = tmp_path / "count"
    script = GroupChatScript(agents={"planner": [
        Reply(text="Adding.", tool_calls=[tool_call("counter__add", n=2)]), "Done, as far as I can tell."]})
    async with FakeOpenAI(script) as srv:
        owner = await spawn(place, "a", 1, 0.0, 0, "--base-url", srv.base_url,
                            "--mcp-config", mcp_config(tmp_path, "a.json", 3600))
        other = None
        try:
            assert "owner=True" in await line(owner, "started")
            await eventually(lambda: count.exists() and count.read_text() == "add 2\n", "the call reached the server")
            other = await spawn(place, "b", 0, 0.0, 0, "--base-url", srv.base_url,
                                "--mcp-config", mcp_config(tmp_path, "b.json", 0))
            assert "owner=False" in await line(other, "started")
            assert await place.fetch("SELECT tool, status FROM tool_calls") == [("counter__add", "running")]
            owner.send_signal(signal.SIGKILL)
            await owner.wait()
            await line(other, "all answered")
            assert await asyncio.wait_for(other.wait(), bound(60)) == 0
        finally:
            for proc in (owner, other):
                if proc is not None and proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    assert count.read_text() == "add 2\n"  # never twice, across the takeover
    resumed = [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner")][-1]
    assistant, answer = resumed["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["name"] == "counter__add"
    assert answer == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": UNKNOWN}
    assert await place.fetch("SELECT tool, status FROM tool_calls") == [("counter__add", "unknown")]
    texts = [text for (text,) in await place.fetch("SELECT text FROM messages ORDER BY seq")]
    assert sum("call of counter.add was cut by a restart" in t for t in texts) == 1, texts
    assert texts[-1] == "Done, as far as I can tell.", texts
