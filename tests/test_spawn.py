"""The suite's fork server (tests/support/spawn.py, zygote.py) gives the tests what a new `roundtable`
process gives them: the same output and exit status as the installed script in a new interpreter, the
environment, working directory and streams the test passes, signals and a death by one."""
from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI, GroupChatScript
from tests.support import eventually
from tests.support.spawn import PIPE, start_roundtable
from tests.test_cli import clean_env


async def both(cwd: Path, *args: str, stdin: bytes = b"", **env: str) -> list[tuple[int | None, str, str]]:
    results = []
    for fresh in (True, False):
        proc = await start_roundtable(*args, stdin=PIPE, stdout=PIPE, stderr=PIPE, env=clean_env(**env), cwd=cwd,
                                      fresh=fresh)
        out, err = await asyncio.wait_for(proc.communicate(stdin), 180)
        results.append((proc.returncode, out.decode(), err.decode()))
    return results


@pytest.mark.parametrize("args", [("--version",), ("no-such-verb",), ("export", "--help"),
                                  ("--env-file", "nowhere.env", "export")])
async def test_a_forked_roundtable_answers_as_a_new_interpreter_does(tmp_path, args):
    fresh, forked = await both(tmp_path, *args)
    assert forked == fresh


async def test_a_forked_roundtable_reads_the_test_s_environment_and_directory(tmp_path):
    (tmp_path / ".env").write_text("ROUNDTABLE_DB=from-the-env-file.db\n")  # the default --env-file: ./.env
    fresh, forked = await both(tmp_path, "export", "--group", "main", "--format", "md")
    assert forked == fresh and forked[0] == 2 and "from-the-env-file.db" in forked[2], forked
    elsewhere = await start_roundtable("export", "--group", "main", "--format", "md", stdout=PIPE, stderr=PIPE,
                                       cwd=tmp_path, env=clean_env(ROUNDTABLE_DB="from-the-environment.db"))
    _, err = await asyncio.wait_for(elsewhere.communicate(), 180)
    assert "from-the-environment.db" in err.decode() and "from-the-env-file.db" not in err.decode()


async def test_a_forked_console_is_signalled_and_killed_like_any_process(tmp_path):
    script = GroupChatScript(agents={})
    async with FakeOpenAI(script) as srv:
        env = clean_env(OPENAI_API_KEY="sk-test-spawn", OPENAI_BASE_URL=srv.base_url, ROUNDTABLE_MODEL="fake-model")
        log = tmp_path / "console.log"
        with open(log, "wb") as out:  # a file as stdout, stderr merged into it
            proc = await start_roundtable("--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"),
                                          stdin=PIPE, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env,
                                          cwd=tmp_path)
        assert proc.stdin is not None and proc.returncode is None
        proc.stdin.write(b"/agent list\n")  # answered at once; then the console waits for the next line
        await proc.stdin.drain()
        await eventually(lambda: "No agents" in log.read_text(), "the console's answer in the file")
        proc.kill()
        assert await asyncio.wait_for(proc.wait(), 60) == -signal.SIGKILL == proc.returncode
        with pytest.raises(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)  # it is gone, as asyncio says of an ended process

        proc = await start_roundtable("--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"),
                                      stdin=PIPE, stdout=PIPE, stderr=PIPE, env=env, cwd=tmp_path)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"/agent list\n")
        await proc.stdin.drain()
        assert "No agents" in (await asyncio.wait_for(proc.stdout.readline(), 180)).decode()  # unbuffered, live
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the console's own handling, exit 130
        _, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 130 and "Traceback" not in err.decode()
