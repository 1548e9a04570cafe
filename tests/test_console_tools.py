"""Agents' tools in `roundtable console` (issue 29): a piped session, the real openai client against a local
server, and a REAL MCP server over stdio (tests/fakes/mcp_server.py) declared in the working directory's mcp.json."""
from __future__ import annotations

import json
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
               "@planner add 2\n")
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
    lines = out.splitlines()
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
