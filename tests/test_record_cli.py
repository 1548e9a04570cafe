"""`roundtable export` and `roundtable replay` as child processes over a database the engine wrote:
each export format, replay through a scripted local model server (the real openai client), and bad
input as one line with exit code 2. Replay changes nothing stored."""
from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from pathlib import Path

import jsonschema
import pytest

from bot.core.models import Completion, Usage
from tests.engine.conftest import Harness
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript
from tests.fakes.scripted_llm import ScriptedLLM
from tests.test_cli import KEY, clean_env, roundtable

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "docs" / "export-schema.json").read_text())


@pytest.fixture
async def db(tmp_path) -> Path:
    """A group 'main' (planner, budget, local): alice's task, planner, budget, TERMINATE (episode 1);
    bob's task, local, TERMINATE (episode 2); then a notice."""
    harness = Harness(tmp_path / "rt.db")
    llm = ScriptedLLM(
        selector=[Completion("planner", Usage(300, 1, 0), model="gpt-4o-mini"),
                  Completion("budget", Usage(320, 1, 0), model="gpt-4o-mini"),
                  Completion("TERMINATE", Usage(340, 2, 0), model="gpt-4o-mini"),
                  Completion("local", Usage(200, 1, 0), model="gpt-4o-mini"),
                  Completion("TERMINATE", Usage(210, 2, 0), model="gpt-4o-mini")],
        default_agent_reply=lambda name, n: f"{name} says <b>{n}</b>",
    )
    async with harness.running(llm):
        await harness.say("Plan a 3-day Tokyo trip")
        await harness.idle()
        await harness.say("What about food?", who="bob")
        await harness.idle()
        await harness.store.thread.append_system_message(harness.group.id, harness.engine.notice("a notice"))
    return harness.path


def dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [line for line in conn.iterdump() if "_migrations" not in line]
    finally:
        conn.close()


async def test_export_each_format(tmp_path, db):
    result = await roundtable(tmp_path, "--env-file", "/dev/null", "export", "--db", str(db), "--group", "main",
                              "--format", "json", "--out", "t.json")
    assert (result.code, result.out) == (0, "")
    assert result.err == "roundtable: exported 6 messages of main as json to t.json\n"
    data = json.loads((tmp_path / "t.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert [m["author"]["name"] for m in data["messages"]] == ["alice", "planner", "budget", "bob", "local",
                                                                "roundtable"]
    md = await roundtable(tmp_path, "--env-file", "/dev/null", "export", "--db", str(db), "--group", "1",
                          "--format", "MD")
    assert md.code == 0 and md.out.startswith("# main: Roundtable transcript\n")
    assert "> planner says &lt;b>1&lt;/b>" in md.out and "6 messages, 2 episodes;" in md.out
    html = await roundtable(tmp_path, "--env-file", "/dev/null", "export", "--db", str(db), "--group", "test:main",
                            "--format", "html", "--from", "4", "--to", "5", "--out", "t.html")
    assert html.code == 0, html.err
    page = (tmp_path / "t.html").read_text()
    assert html.code == 0 and page.count("<article") == 2 and 'data-seq="4"' in page and 'data-seq="5"' in page
    assert "local says &lt;b&gt;3&lt;/b&gt;" in page
    assert not list(tmp_path.glob(".*.part"))  # written beside, then renamed


@pytest.mark.parametrize("args, line", [
    (["--group", "nope", "--format", "md"], "roundtable: no group 'nope' in this database (groups: main (id 1))"),
    (["--group", "main", "--format", "pdf"], "roundtable: unknown format 'pdf': use html, json or md"),
    (["--group", "main", "--format", "md", "--from", "5", "--to", "2"], "roundtable: --from 5 is after --to 2"),
    (["--group", "main", "--format", "md", "--from", "0"], "roundtable: --from 0: messages are numbered from 1"),
    (["--group", "main", "--format", "md", "--from", "40"], "roundtable: main has 6 messages; there is no #40."),
    (["--group", "main", "--format", "md", "--from", "two"],
     "roundtable: argument --from: invalid int value: 'two' (see roundtable export --help)"),
    (["--format", "md"], "roundtable: the following arguments are required: --group (see roundtable export --help)"),
    (["--group", "main", "--format", "md", "--out", "no/such/dir/x.md"],
     "roundtable: --out no/such/dir/x.md: the directory no/such/dir does not exist"),
])
async def test_export_bad_input_is_one_line(tmp_path, db, args, line):
    result = await roundtable(tmp_path, "--env-file", "/dev/null", "export", "--db", str(db), *args,
                              OPENAI_API_KEY=KEY)
    assert result.problem == line
    assert KEY not in result.err


# The verbs that need only the database run main() in a child that then lists the heavy clients it imported
# (the openai client alone took 5-8 s to import on a loaded machine): one child runs them one after the other,
# listing after each (a verb that imported one is named, and the list only grows).
VERBS = {
    "migrate": ["migrate", "--db", "rt.db"],
    "export html": ["export", "--db", "rt.db", "--group", "main", "--format", "html", "--out", "t.html"],
    "export json": ["export", "--db", "rt.db", "--group", "main", "--format", "json"],
    "copy": ["copy", "--from", "rt.db", "--to", "copy.db"],
}
IMPORTS_CHILD = """\
import json, sys
from bot.cli.main import main
for verb, args in json.loads(sys.argv[1]).items():
    code = main(["--env-file", sys.argv[2], *args])
    heavy = sorted({name.split(".")[0] for name in sys.modules} & {"openai", "discord", "tiktoken", "aiohttp", "httpx"})
    print("imports:", json.dumps({"verb": verb, "code": code, "heavy": heavy}), flush=True)
"""


async def test_the_verbs_that_need_only_the_database_load_no_model_or_discord_client(tmp_path, db):
    assert db == tmp_path / "rt.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", IMPORTS_CHILD, json.dumps(VERBS), os.devnull, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=tmp_path, env=clean_env(OPENAI_API_KEY=KEY))
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()
    found = [json.loads(line.removeprefix("imports: ")) for line in out.decode().splitlines()
             if line.startswith("imports: ")]
    assert found == [{"verb": verb, "code": 0, "heavy": []} for verb in VERBS], err.decode()
    assert (tmp_path / "t.html").is_file() and (tmp_path / "copy.db").is_file()


async def test_export_of_a_missing_database_creates_none(tmp_path):
    result = await roundtable(tmp_path, "--env-file", "/dev/null", "export", "--group", "main", "--format", "md")
    assert result.problem == "roundtable: ROUNDTABLE_DB roundtable.db does not exist (no database there to read)"
    assert not (tmp_path / "roundtable.db").exists()


async def test_replay_reports_a_changed_decision_and_changes_nothing_stored(tmp_path, db):
    before = dump(db)
    script = GroupChatScript(selector=["budget"])
    async with FakeOpenAI(script) as server:
        result = await roundtable(tmp_path, "--env-file", "/dev/null", "replay", "--db", str(db), "--group", "main",
                                  "--seq", "1", "--model", "gpt-4.1-nano", OPENAI_API_KEY=KEY,
                                  OPENAI_BASE_URL=server.base_url)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "#1 by alice in main: Plan a 3-day Tokyo trip"
    assert lines[2].split() == ["chosen", "planner", "budget"]
    assert lines[3].split() == ["source", "selector", "selector"]
    assert lines[7].split() == ["model", "gpt-4o-mini", "gpt-4.1-nano"]
    assert "Changed: planner -> budget." in lines
    assert lines[-1] == "(selector model gpt-4.1-nano; today's roster and settings; nothing stored changed)"
    [request] = server.requests
    assert request["model"] == "gpt-4.1-nano" and script.calls == [("selector", None)]
    prompt = "\n".join(m["content"] for m in request["messages"])
    assert "Plan a 3-day Tokyo trip" in prompt and "planner says" not in prompt  # the thread through #1
    assert dump(db) == before


async def test_replay_of_an_episode_counts_the_changes(tmp_path, db):
    before = dump(db)
    async with FakeOpenAI(GroupChatScript(selector=["planner", "local", "TERMINATE"])) as server:
        result = await roundtable(tmp_path, "--env-file", "/dev/null", "replay", "--db", str(db), "--group", "main",
                                  "--episode", "1", OPENAI_API_KEY=KEY, OPENAI_BASE_URL=server.base_url)
    assert result.code == 0, result.err
    assert result.out.splitlines()[:5] == [
        "Episode 1: 3 selector decisions replayed",
        "  #1 alice: planner -> planner  same",
        "  #2 planner: budget -> local  CHANGED",
        "  #3 budget: TERMINATE -> TERMINATE  same",
        "1 of 3 would change.",
    ]
    assert len(server.requests) == 3 and dump(db) == before


@pytest.mark.parametrize("args, line", [
    (["--seq", "99"], "roundtable: main has 6 messages; there is no #99."),
    (["--seq", "6"], "roundtable: #6 is a notice from the bot; notices are never routed, so there is nothing to "
                     "replay."),
    (["--episode", "42"], "roundtable: main has no episode 42."),
    (["--seq", "1", "--episode", "1"],
     "roundtable: argument --episode: not allowed with argument --seq (see roundtable replay --help)"),
    ([], "roundtable: one of the arguments --seq --episode is required (see roundtable replay --help)"),
])
async def test_replay_bad_input_is_one_line(tmp_path, db, args, line):
    async with FakeOpenAI(GroupChatScript()) as server:
        result = await roundtable(tmp_path, "--env-file", "/dev/null", "replay", "--db", str(db), "--group", "main",
                                  *args, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=server.base_url)
    assert result.problem == line
    assert server.requests == []
