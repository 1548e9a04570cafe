"""MCP servers as tool sources (bot.llm.mcp_tools): the SDK's client against REAL MCP servers written
with the SDK's server side (tests/fakes/mcp_server.py), over stdio and over streamable HTTP on 127.0.0.1;
the config file's bad input; a server down at start; a stdio server never outliving its process (kill -9)."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from mcp.types import ToolAnnotations

from bot.core.errors import ConfigError
from bot.core.features.tools import RunContext
from bot.core.rules.secrets import SECRETS
from bot.llm.mcp_tools import McpServer, McpServers, ServerConfig, config_path, load_config, tool_spec
from tests.fakes.mcp_server import serve_http
from tests.support import eventually

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "tests" / "fakes" / "mcp_server.py")
CONTEXT = RunContext(1, 1, 1)
TOKEN = "mcp-env-token-7c6b5a49382716aa"


def stdio(tmp_path: Path, **env: str) -> ServerConfig:
    return ServerConfig("counter", command=sys.executable, args=(SERVER,),
                        env={"MCP_COUNT_FILE": str(tmp_path / "count"), **env}, timeout=20)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting to be reaped is not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


async def test_a_stdio_server_lists_its_tools_with_their_hints_and_runs_them(tmp_path):
    server = McpServer(stdio(tmp_path, SECRET_TOKEN=TOKEN))
    SECRETS.register_all([TOKEN])  # (load_config registers a file's env values: see the config tests)
    try:
        assert await server.start()
        specs = {s.name: s for s in server.tools()}
        assert list(specs) == ["add", "delete", "fail", "get", "grow", "slow", "token"]  # sorted: a stable order
        assert specs["get"].read_only and not specs["add"].read_only and not specs["add"].idempotent
        assert specs["delete"].destructive and not specs["get"].destructive
        assert specs["add"].parameters["properties"]["n"]["type"] == "integer"
        assert specs["add"].timeout == 20
        added = await server.call("add", {"n": 2}, CONTEXT)
        assert (added.text, added.error) == ("counter is 2", False)
        failed = await server.call("fail", {}, CONTEXT)
        assert failed.error and "fail" in failed.text
        shown = await server.call("token", {}, CONTEXT)
        assert SECRETS.mask(shown.text) == "token=***"
    finally:
        await server.close()
    assert (tmp_path / "count").read_text() == "add 2\n"


async def test_a_streamable_http_server_lists_and_runs_its_tools():
    async with serve_http() as url:
        server = McpServer(ServerConfig("web", url=url, headers={"Authorization": "Bearer header-secret-1234567"}))
        try:
            assert await server.start()
            assert [s.name for s in server.tools()] == ["add", "delete", "fail", "get", "grow", "slow", "token"]
            assert (await server.call("add", {"n": 3}, CONTEXT)).text == "counter is 3"
            assert (await server.call("get", {}, CONTEXT)).text == "counter is 3"
        finally:
            await server.close()


@pytest.mark.parametrize("config, problem", [
    (ServerConfig("missing", command="rt-no-such-mcp-server"), "command 'rt-no-such-mcp-server' not found"),
    (ServerConfig("dies", command=sys.executable, args=(SERVER, "exit")), ""),
    (ServerConfig("closed", url="http://127.0.0.1:9/mcp"), ""),
])
async def test_a_server_down_at_start_is_one_error_line_and_offers_no_tools(config, problem, caplog):
    server = McpServer(config)
    try:
        with caplog.at_level(logging.ERROR, logger="bot.llm.mcp_tools"):
            assert not await server.start(wait=20)
        lines = [r.getMessage() for r in caplog.records if r.name == "bot.llm.mcp_tools"]
        assert len(lines) == 1 and lines[0].startswith(f"MCP server {config.name} is down: ")
        assert problem in lines[0] and "Traceback" not in caplog.text
        assert server.tools() == []
        answer = await server.call("get", {}, CONTEXT)
        assert answer.error and answer.text.startswith(f"error: the MCP server {config.name} is down")
    finally:
        await server.close()


async def test_a_server_down_at_start_is_tried_again_and_its_tools_come_back(tmp_path, caplog):
    up = tmp_path / "up"
    server = McpServer(stdio(tmp_path, MCP_UP_FILE=str(up)))
    try:
        with caplog.at_level(logging.INFO, logger="bot.llm.mcp_tools"):
            assert not await server.start(wait=20)
            assert server.tools() == []
            up.touch()
            await eventually(lambda: server.up, "the server to come back (back-off: 1 s, 2 s, ...)")
        assert [s.name for s in server.tools()][:2] == ["add", "delete"]
        assert (await server.call("add", {"n": 1}, CONTEXT)).text == "counter is 1"
        messages = [r.getMessage() for r in caplog.records if r.name == "bot.llm.mcp_tools"]
        (down,) = [m for m in messages if "is down" in m]
        assert down.startswith("MCP server counter is down: ")
        assert messages[-1] == "MCP server counter is up: 7 tools"
    finally:
        await server.close()


async def test_a_changed_tool_list_is_read_again(tmp_path):
    server = McpServer(stdio(tmp_path))
    try:
        assert await server.start()
        assert "extra" not in [s.name for s in server.tools()]
        assert (await server.call("grow", {}, CONTEXT)).text == "grown"
        await eventually(lambda: "extra" in [s.name for s in server.tools()], "the list read again")
        assert (await server.call("extra", {}, CONTEXT)).text == "extra here"
    finally:
        await server.close()


GOOD = {"mcpServers": {
    "counter": {"command": "python", "args": ["server.py"], "env": {"API_KEY": "env-secret-abc123456"}},
    "web": {"url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer h-secret-99887766"},
            "timeout": 5, "confirm": ["delete"]}}}


def test_the_config_file_in_the_format_other_clients_use(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(GOOD))
    counter, web = load_config(path)
    assert (counter.name, counter.command, counter.args, counter.timeout) == ("counter", "python", ("server.py",), 30)
    assert (web.url, web.timeout, web.confirm) == ("https://mcp.example/mcp", 5.0, ("delete",))
    assert SECRETS.mask("env-secret-abc123456 and Bearer h-secret-99887766") == "*** and ***"
    assert config_path({}, tmp_path) == path  # mcp.json in the working directory
    assert config_path({"ROUNDTABLE_MCP_CONFIG": "/etc/rt/tools.json"}, tmp_path) == Path("/etc/rt/tools.json")
    assert config_path({}, tmp_path / "elsewhere") is None


@pytest.mark.parametrize("text, says", [
    ("{not json", "is not JSON (line 1)"),
    ('{"servers": {}}', 'has no "mcpServers" object'),
    ('{"mcpServers": {"a b": {"command": "x"}}}', "server 'a b' has a name that is not letters"),
    ('{"mcpServers": {"x": {}}}', "server 'x' needs either \"command\" (stdio) or \"url\""),
    ('{"mcpServers": {"x": {"command": "a", "url": "http://h"}}}', "needs either"),
    ('{"mcpServers": {"x": {"url": "ftp://h"}}}', "has a \"url\" that is not http:// or https://"),
    ('{"mcpServers": {"x": {"command": "a", "args": "b"}}}', "has \"args\" that are not a list of strings"),
    ('{"mcpServers": {"x": {"command": "a", "env": {"K": 1}}}}', "has \"env\" that is not an object of strings"),
    ('{"mcpServers": {"x": {"command": "a", "timeout": 0}}}', "has a \"timeout\" that is not a number"),
    ('{"mcpServers": {"x": {"command": "a", "confirm": "yes"}}}', "has a \"confirm\" that is not true, false"),
])
def test_a_malformed_config_file_is_one_line_naming_the_file_and_the_fix(tmp_path, text, says):
    path = tmp_path / "mcp.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    line = str(info.value)
    assert line.startswith(f"ROUNDTABLE_MCP_CONFIG: {path}") and says in line and "\n" not in line


def test_a_config_file_that_cannot_be_read(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot be read .*point ROUNDTABLE_MCP_CONFIG at an MCP config file"):
        McpServers.from_environment({"ROUNDTABLE_MCP_CONFIG": str(tmp_path / "none.json")})


# The SDK takes about as long to import as the OpenAI client: a process without MCP servers (the console's and
# the bot's start, init, the doctor) never imports it. In a child: the test's own process has it loaded.
WITHOUT_SERVERS = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path
    import bot.cli.doctor, bot.cli.init, bot.cli.main, bot.llm.endpoints, bot.llm.providers, bot.wiring
    import bot.surfaces.console.surface
    from bot.llm.mcp_tools import McpServers, doctor_checks

    async def main():
        servers = McpServers.from_environment({{}}, cwd=Path({cwd!r}))
        await servers.start()
        checks = [*await servers.checks(), *await doctor_checks({{}}, cwd=Path({cwd!r}))]
        await servers.close()
        return len(checks)

    checks = asyncio.run(main())
    print(json.dumps({{"checks": checks, "mcp": sorted(m for m in sys.modules if m.split(".")[0] == "mcp")}}))
""")


async def test_without_servers_the_sdk_is_never_imported(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WITHOUT_SERVERS.format(cwd=str(tmp_path)), cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out.decode()) == {"checks": 0, "mcp": []}


HOLDER = textwrap.dedent("""
    import asyncio, sys
    sys.path.insert(0, {root!r})
    from bot.llm.mcp_tools import McpServer, ServerConfig
    from bot.core.features.tools import RunContext

    async def main():
        server = McpServer(ServerConfig("counter", command=sys.executable, args=({server!r},), env={env!r}))
        assert await server.start()
        print("up", flush=True)
        await server.call("add", {{"n": 1}}, RunContext(1, 1, 1))  # never returns: the test kills us first
        print("returned", flush=True)

    asyncio.run(main())
""")


async def test_a_stdio_server_never_outlives_the_process_that_started_it_kill_9_included(tmp_path):
    """The SDK starts the server in a session of its own; its guard (bot/llm/mcp_guard.py) kills it
    when its parent dies. Here the parent is killed with -9 while a call runs in the server."""
    env = {"MCP_PID_FILE": str(tmp_path / "pid"), "MCP_COUNT_FILE": str(tmp_path / "count"),
           "MCP_ADD_SECONDS": "3600"}
    script = tmp_path / "holder.py"
    script.write_text(HOLDER.format(root=str(ROOT), server=SERVER, env=env))
    holder = await asyncio.create_subprocess_exec(sys.executable, str(script), stdout=asyncio.subprocess.PIPE)
    try:
        assert holder.stdout is not None
        async with asyncio.timeout(60):
            assert await holder.stdout.readline() == b"up\n"
        count = tmp_path / "count"
        await eventually(lambda: count.exists() and count.read_text() == "add 1\n", "the call reached the server")
        pid = int((tmp_path / "pid").read_text())
        assert alive(pid)
        holder.send_signal(signal.SIGKILL)
        await holder.wait()
        await eventually(lambda: not alive(pid), f"the MCP server (pid {pid}) outlived its process")
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
    assert count.read_text() == "add 1\n"  # the call never finished, and nothing ran it again


async def test_closing_stops_a_stdio_server(tmp_path):
    server = McpServer(stdio(tmp_path, MCP_PID_FILE=str(tmp_path / "pid")))
    assert await server.start()
    pid = int((tmp_path / "pid").read_text())
    await server.close()
    await eventually(lambda: not alive(pid), "the server ran on after close")
    assert os.path.exists(tmp_path / "pid")


async def test_the_doctor_starts_each_server_and_names_the_fix(tmp_path):
    """`roundtable doctor`'s MCP checks: a real stdio server ✓ with its tools counted, a command
    that does not exist and one that exits at once ✗ with why and the fix; a malformed file one ✗."""
    from bot.llm.mcp_tools import doctor_checks

    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "counter": {"command": sys.executable, "args": [SERVER], "env": {"MCP_COUNT_FILE": str(tmp_path / "n")}},
        "missing": {"command": "no-such-mcp-server-xyz"},
        "exits": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}}}))
    checks = await doctor_checks({"ROUNDTABLE_MCP_CONFIG": str(path)}, wait=20)
    counter, missing, exits = (c.line() for c in checks)
    assert counter == "✓ MCP server counter: started; 7 tools listed"
    assert missing == (f"✗ MCP server missing: did not start (FileNotFoundError: command 'no-such-mcp-server-xyz' "
                       f"not found); fix: install the program, or correct the server's \"command\" in {path} (a "
                       "name on PATH, or a full path)")
    assert exits.startswith("✗ MCP server exits: did not start (") and (
        f"fix: run its command by hand to see why ({sys.executable} -c raise SystemExit(3)), then correct") in exits
    assert await doctor_checks({"ROUNDTABLE_MCP_CONFIG": ""}, cwd=tmp_path / "nowhere") == []
    path.write_text("{not json")
    [bad] = await doctor_checks({"ROUNDTABLE_MCP_CONFIG": str(path)})
    assert bad.line().startswith(f"✗ MCP servers: ROUNDTABLE_MCP_CONFIG: {path} is not JSON (line 1)")


@pytest.mark.parametrize("name, hints, confirm, held", [
    ("delete", ToolAnnotations(destructive_hint=True), False, True),  # destructiveHint: held by default
    ("add", ToolAnnotations(destructive_hint=False), False, False),
    ("add", None, True, True),  # "confirm": true holds every tool of the server
    ("add", None, ("add",), True),  # "confirm": [names]
    ("get", None, ("add",), False),
])
def test_which_tools_wait_for_approval_by_default(name, hints, confirm, held):
    tool = SimpleNamespace(name=name, description="", input_schema=None, annotations=hints)
    assert tool_spec(tool, 30.0, confirm).confirm is held


BAD = str(ROOT / "tests" / "fakes" / "mcp_bad_server.py")


async def test_a_call_that_hangs_in_its_server_is_a_timeout_and_the_server_goes_on(tmp_path):
    """The server's "timeout" bounds each call: the SDK's own clock running out is the same TimeoutError
    the tool loop turns into a result ("did not answer within"), never the SDK's error; the server
    still answers the next call."""
    server = McpServer(ServerConfig("stuck", command=sys.executable, args=(BAD,), timeout=1,
                                    env={"MCP_COUNT_FILE": str(tmp_path / "count")}))
    try:
        assert await server.start()
        with pytest.raises(TimeoutError):
            await server.call("hang", {}, CONTEXT)
        assert (await server.call("echo", {"text": "hi"}, CONTEXT)).text == "echo: hi"
    finally:
        await server.close()


async def test_a_server_that_never_answers_is_down_and_the_doctor_names_it(tmp_path, caplog):
    """A server whose process starts but never answers: start-up goes on after its wait (one ERROR
    line, no tools) and the doctor's ✗ names it and the fix."""
    from bot.llm.mcp_tools import doctor_checks

    config = ServerConfig("mute", command=sys.executable, args=(BAD, "mute"))
    server = McpServer(config)
    try:
        with caplog.at_level(logging.ERROR, logger="bot.llm.mcp_tools"):
            assert not await server.start(wait=1)
        assert server.tools() == []
        assert [r.getMessage() for r in caplog.records if r.name == "bot.llm.mcp_tools"] == [
            "MCP server mute is down: did not answer within 1 s; its tools are not offered until it starts (tried "
            "again with back-off)"]
    finally:
        await server.close()
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"mute": {"command": sys.executable, "args": [BAD, "mute"]}}}))
    [check] = await doctor_checks({"ROUNDTABLE_MCP_CONFIG": str(path)}, wait=1)
    assert check.line().startswith("✗ MCP server mute: did not start (did not answer within 1 s); fix: run its "
                                   "command by hand"), check.line()
