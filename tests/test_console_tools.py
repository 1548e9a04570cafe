"""Agents' tools in `roundtable console` (issue 29): a piped session, the real openai client against a local
server, and a REAL MCP server over stdio (tests/fakes/mcp_server.py) declared in the working directory's mcp.json."""
from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call
from tests.test_console import run_console

SERVER = str(Path(__file__).resolve().parent / "fakes" / "mcp_server.py")


async def test_a_granted_mcp_tool_is_called_and_a_server_down_is_one_line(tmp_path):
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {
        "counter": {"command": sys.executable, "args": [SERVER],
                    "env": {"MCP_COUNT_FILE": str(tmp_path / "count"), "SECRET_TOKEN": "tok-console-1234567890"}},
        "broken": {"command": "rt-no-such-mcp-server"}}}))
    script = GroupChatScript(agents={"planner": [
        Reply(text="Adding.", tool_calls=[tool_call("counter__add", n=2), tool_call("counter__token")]),
        "Added: the counter is 2."]})
    session = ('/agent add name:planner role:counts prompt:"You count."\n'
               "/agent tools name:planner\n"
               "/agent tools name:planner grant:memory_write\n"
               "/agent tools name:planner grant:counter.*\n"
               "@planner add 2\n"
               "/roundtable doctor\n")
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
    lines = out.splitlines()
    assert "  ✓ MCP server counter: started; 7 tools listed" in lines  # /roundtable doctor: the servers as they are
    assert "  ✗ MCP server broken: did not start (FileNotFoundError: command 'rt-no-such-mcp-server' not found)" \
        in lines
    assert "planner has no tool granted. Available: counter.add, counter.delete (destructive), counter.fail, " \
           "counter.get (read-only), counter.grow, counter.slow, counter.token (read-only), fetch_url (read-only), " \
           "history_read (read-only), history_search (read-only)." in lines  # (the built-ins are granted too)
    assert "error: memory_write comes with its feature and is not granted (memory_write: /agent edit memory:on)." \
        in lines
    assert "Granted counter.*." in lines
    assert any(line.startswith("planner may call: counter.* (counter.add, counter.delete,") for line in lines)
    at = lines.index("[planner] Added: the counter is 2.")
    assert lines[at + 1:at + 3] == ["", "🔧 counter.add ✓ · counter.token ✓"]  # show_tools: the compact line
    assert (tmp_path / "count").read_text() == "add 2\n"
    down = [line for line in err.splitlines() if "MCP server" in line]
    assert len(down) == 1 and "MCP server broken is down: " in down[0] and "not found" in down[0], err
    assert "Traceback" not in err and code == 1  # the refused grant line
    first, second = (r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner"))
    assert [t["function"]["name"] for t in first["tools"]][:2] == ["counter__add", "counter__delete"]
    results = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert results == ["counter is 2", "token=***"]  # the server's env value is a secret
    assert "tok-console-1234567890" not in out + err + json.dumps(srv.requests)


async def test_a_destructive_call_in_a_piped_console_is_denied_with_a_line_saying_so(tmp_path):
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {
        "counter": {"command": sys.executable, "args": [SERVER], "env": {"MCP_COUNT_FILE": str(tmp_path / "count")}}}}))
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__delete", item="old")]),
                                                 "It was not allowed."]})
    session = ('/agent add name:planner role:counts prompt:"You count."\n'
               "/agent tools name:planner grant:counter.delete\n"
               "@planner delete old\n")
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
    lines = out.splitlines()
    assert ('[roundtable] planner wants to run counter.delete with {"item": "old"}: denied (approving a call needs '
            "the console's input to be a terminal).") in lines, out
    assert "[planner] It was not allowed." in lines
    assert not (tmp_path / "count").exists()  # never ran
    second = [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner")][-1]
    assert second["messages"][-1]["content"] == (
        "error: denied: the console's input is not a terminal, so nobody could be asked; this call of counter.delete "
        "did not run.")
    assert "Traceback" not in err and code == 0


BAD = str(Path(__file__).resolve().parent / "fakes" / "mcp_bad_server.py")


async def test_a_hanging_call_a_5_mb_result_an_ungranted_tool_and_bad_arguments_are_tool_errors(tmp_path):
    """Bad input from real MCP servers and from the model (issue 29): a call that hangs in its server
    times out as a result (the server's "timeout") and the turn goes on, and the next message is
    answered; a 5 MiB result is cut to tool_result_max with a note and nothing huge is stored; a tool
    the agent was not granted and arguments that are not JSON are errors the model reads (the first
    logged)."""
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {
        "stuck": {"command": sys.executable, "args": [BAD], "timeout": 2,
                  "env": {"MCP_COUNT_FILE": str(tmp_path / "count")}},
        "bad": {"command": sys.executable, "args": [BAD]}}}))
    script = GroupChatScript(agents={"planner": [
        Reply(text="Trying.", tool_calls=[tool_call("stuck__hang"), tool_call("bad__huge", megabytes=5),
                                          tool_call("bad__echo", text="hi"),
                                          tool_call("bad__huge", arguments="{megabytes: 5")]),
        "Done despite the trouble.",
        "Still here."]})
    session = ('/agent add name:planner role:tries prompt:"You try."\n'
               "/agent tools name:planner grant:stuck.hang\n"
               "/agent tools name:planner grant:bad.huge\n"
               "@planner try everything\n"
               "@planner are you there?\n")
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
    lines = out.splitlines()
    assert "[planner] Done despite the trouble." in lines and "[planner] Still here." in lines, out + err
    assert (tmp_path / "count").read_text() == "hang\n"  # it reached the server, once
    second = [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner")][1]
    hang, huge, ungranted, bad = (m["content"] for m in second["messages"] if m["role"] == "tool")
    assert hang == "error: stuck.hang did not answer within 2 s."
    assert huge == "x" * 20_000 + "\n[cut: the result had 5,242,880 characters; only the first 20,000 are shown]"
    assert ungranted == "error: there is no tool named 'bad__echo'; the tools are bad__huge, stuck__hang."
    assert bad.startswith("error: the arguments must be a JSON object such as {\"name\": \"value\"}; got '{megabytes")
    assert "called 'bad__echo', a tool it was not offered" in err and "Traceback" not in err, err
    assert code == 0, err
    with sqlite3.connect(tmp_path / "rt.db") as db:
        longest = db.execute("SELECT MAX(LENGTH(result)) FROM tool_calls").fetchone()[0]
    assert longest < 21_000  # nothing huge stored
    assert sum(f.stat().st_size for f in tmp_path.glob("rt.db*")) < 2_000_000


async def test_a_malformed_mcp_json_stops_the_start_with_one_line_naming_the_file_and_the_fix(tmp_path):
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"counter": {"command": "python", "args": "x.py"}}}')
    async with FakeOpenAI(GroupChatScript()) as srv:
        code, _, err = await run_console(tmp_path, srv.base_url, "hello\n")
    assert err.splitlines() == [f"roundtable: ROUNDTABLE_MCP_CONFIG: {tmp_path / 'mcp.json'}: server 'counter' has "
                                '"args" that are not a list of strings'], err
    assert code == 2 and not (tmp_path / "rt.db").exists()
