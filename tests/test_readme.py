"""README's first two commands as a newcomer pastes them, in a fresh clone: the install (a fresh venv, the
packages from the package index with the lock, as README gives it), then the console with the key inline
and README's example lines piped in, against a local fake model server. The commands and the lines are
read from README.md's marked blocks, so README and this test cannot drift.

The clone is of this checkout's committed HEAD (what CI's fresh clone holds): uncommitted edits of
README.md are not what it runs. Installing takes a minute or two; it needs the package index.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI, GroupChatScript
from tests.test_cli import Result, clean_env

ROOT = Path(__file__).resolve().parents[1]
COMMANDS_MARK = "<!-- first commands:"
SESSION_MARK = "<!-- first session:"
TEST_MARK = "<!-- test command:"
REPLY = "Day 1: Asakusa, Ueno and an izakaya in Ueno, 9,000 yen. TERMINATE"
INSTALL_TIMEOUT = 900  # seconds: a fresh venv and every package, on a loaded two-core machine
CONSOLE_TIMEOUT = 120


def marked_block(readme: str, mark: str) -> list[str]:
    """The lines of the fenced block that follows the comment starting with `mark`."""
    _, found, after = readme.partition(mark)
    assert found, f"README.md has no block marked {mark!r}"
    match = re.match(r"[^\n]*-->\n```[a-z]*\n(.*?)\n```\n", after, re.DOTALL)
    assert match, f"README.md: no fenced block right after {mark!r}"
    return match.group(1).splitlines()


def test_readme_opens_with_two_commands_install_then_the_console() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = marked_block(readme, COMMANDS_MARK)
    assert readme.index(COMMANDS_MARK) < readme.index("```"), "the marked block is README's first"
    assert len(commands) == 2, commands
    install, console = commands
    assert "pip install -c constraints.txt" in install, install
    assert shlex.split(console)[-1] == "console" and "OPENAI_API_KEY=" in console, console
    assert marked_block(readme, SESSION_MARK), "README shows what to type into the console"



def test_readmes_test_command_is_what_ci_runs() -> None:
    """README's one-line test command is .ci/run's last line (but pip's -q): CI runs what README says."""
    readme = (ROOT / "README.md").read_text()
    (command,) = marked_block(readme, TEST_MARK)
    ci = (ROOT / ".ci/run").read_text().strip().splitlines()[-1]
    assert command == ci.replace("pip install -q ", "pip install "), (command, ci)
    assert "pytest -q -m ''" in command, "CI runs every test, the slow ones too"


async def shell(line: str, cwd: Path, env: dict[str, str], stdin: str, timeout: float) -> Result:
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", line, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd)
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return Result(proc.returncode or 0, out.decode(), err.decode())


@pytest.mark.slow  # a fresh clone, venv and install: CI runs it, the default run leaves it out
async def test_readmes_first_two_commands_work_in_a_fresh_clone(tmp_path: Path) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "roundtable"
    cloned = await shell(f"git clone --quiet {shlex.quote(str(ROOT))} {shlex.quote(str(clone))}", tmp_path,
                         clean_env(), "", 120)
    assert cloned.code == 0, cloned
    readme = (clone / "README.md").read_text()
    install, console = marked_block(readme, COMMANDS_MARK)
    session = marked_block(readme, SESSION_MARK)
    env = {k: v for k, v in clean_env().items() if k != "VIRTUAL_ENV"}  # a newcomer's shell: no venv active

    installed = await shell(install, clone, env, "", INSTALL_TIMEOUT)
    assert installed.code == 0, installed
    assert (clone / ".venv" / "bin" / "roundtable").exists()

    key = re.search(r"OPENAI_API_KEY=(\S+)", console)
    assert key, console
    async with FakeOpenAI(GroupChatScript(agents={"planner": [REPLY]}), models=("gpt-4o-mini",)) as srv:
        result = await shell(console, clone, {**env, "OPENAI_BASE_URL": srv.base_url}, "\n".join(session) + "\n",
                             CONSOLE_TIMEOUT)
    assert result.code == 0, result
    out = result.out.splitlines()
    person_line = next(line for line in session if line.startswith("@"))
    assert f"[you] {person_line}" in out, result
    assert f"[planner] {REPLY.removesuffix(' TERMINATE')}" in out, result
    assert srv.requests and all(r.headers["authorization"] == f"Bearer {key.group(1)}" for r in srv.requests)
    assert {r["model"] for r in srv.requests} == {"gpt-4o-mini"}  # the default model: nothing else to set
    assert not (clone / ".env").exists() and os.path.exists(clone / "roundtable.db")


EXAMPLE_ROLE = "trip planner who drafts the itinerary"  # "You are planner, the trip planner who ..."
ADD_EXAMPLE = re.compile(r"/agent add name:planner role:(\"[^\"]*\"|.+?)(?: prompt:|\s{2,}|`|$)", re.MULTILINE)


def test_the_example_role_reads_well_in_the_agents_prompt_everywhere_it_is_shown() -> None:
    """The seed prompt reads "You are {{name}}, the {{role}} in a group chat ...": the role is a noun
    phrase. README's first session, its Discord example, the docs, `console --help`, the console's
    hint and /help all give the same one."""
    from bot.cli.main import build_parser
    from bot.core.rules.prompts import PARTICIPANT_PROMPT, fill
    from bot.core.verbs.commands import help_text
    from bot.surfaces.console.commandline import parse_command
    from bot.surfaces.console.surface import NO_AGENTS

    readme = (ROOT / "README.md").read_text()
    typed = parse_command(next(line for line in marked_block(readme, SESSION_MARK) if line.startswith("/agent add")))
    role = typed.options["role"]
    assert fill(PARTICIPANT_PROMPT, name="planner", role=role).splitlines()[0] == (
        "You are planner, the trip planner who drafts the itinerary in a group chat working on the task below.")
    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    console_help = verbs.choices["console"].format_help()
    places = {"README.md": readme, "docs/console.md": (ROOT / "docs/console.md").read_text(),
              "docs/setup.md": (ROOT / "docs/setup.md").read_text(), "console --help": " ".join(console_help.split()),
              "the console's hint": NO_AGENTS, "/help agent": help_text("console", "agent")}
    for place, text in places.items():
        shown = [m.strip('"') for m in ADD_EXAMPLE.findall(text)]
        assert shown and all(r == EXAMPLE_ROLE == role for r in shown), (place, shown)


TOOLS_SERVER_MARK = "<!-- tools server:"
TOOLS_CONFIG_MARK = "<!-- tools config:"


async def test_the_give_agents_tools_example_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README's "Give agents tools": its server file and its mcp.json, saved as README says, in a directory
    whose `.venv` is this one: the config parser reads the file, the server starts and lists its tools, a
    call of each works; the grant line README shows names the server's tools."""
    from bot.core.features.tools import RunContext, matches
    from bot.llm.mcp_tools import McpServer, config_path, load_config
    from bot.surfaces.console.commandline import parse_command

    readme = (ROOT / "README.md").read_text()
    (tmp_path / "notes_server.py").write_text("\n".join(marked_block(readme, TOOLS_SERVER_MARK)) + "\n")
    (tmp_path / "mcp.json").write_text("\n".join(marked_block(readme, TOOLS_CONFIG_MARK)))
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    monkeypatch.chdir(tmp_path)
    path = config_path({})
    assert path == tmp_path / "mcp.json"
    (config,) = load_config(path)
    server = McpServer(config)
    context = RunContext(1, 1, 1)
    try:
        assert await server.start(wait=60), server.problem
        specs = {s.name: s for s in server.tools()}
        assert sorted(specs) == ["add_note", "read_notes"] and specs["read_notes"].read_only
        assert (await server.call("read_notes", {}, context)).text == "(no notes yet)"
        assert (await server.call("add_note", {"text": "book the ryokan"}, context)).text == "noted"
        assert (await server.call("read_notes", {}, context)).text == "book the ryokan\n"
    finally:
        await server.close()
    grant = parse_command(next(line for line in readme.splitlines() if line.startswith("/agent tools name:planner "
                                                                                          "grant:notes")))
    assert all(matches(str(grant.options["grant"]), f"notes.{name}") for name in specs)
