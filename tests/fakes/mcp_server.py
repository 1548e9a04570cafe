"""A real MCP server for the tests, written with the SDK's own server side (`MCPServer`, mcp 2's
FastMCP): over stdio (`python tests/fakes/mcp_server.py`) or streamable HTTP (`serve_http`).

Tools: `get` (read-only), `add(n)` (not idempotent: each invocation is counted in the file
`MCP_COUNT_FILE`, one line per call, before it sleeps `MCP_ADD_SECONDS`), `slow(seconds)`,
`fail` (an error result), `delete(item)` (destructive), `token` (returns the env's SECRET_TOKEN),
`grow` (adds a tool `extra` and sends `notifications/tools/list_changed`).
At start it writes its pid to `MCP_PID_FILE` when that is set; with `MCP_UP_FILE` set, it exits at once
while that file does not exist (a server down, until the test creates the file)."""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations


def build() -> MCPServer:
    server = MCPServer("roundtable-test")
    state = {"value": 0}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get() -> str:
        """Read the counter."""
        return f"counter is {state['value']}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False))
    async def add(n: int) -> str:
        """Add n to the counter."""
        count = os.environ.get("MCP_COUNT_FILE")
        if count:
            with open(count, "a", encoding="utf-8") as file:
                file.write(f"add {n}\n")
        await asyncio.sleep(float(os.environ.get("MCP_ADD_SECONDS", "0")))
        state["value"] += n
        return f"counter is {state['value']}"

    @server.tool()
    async def slow(seconds: float) -> str:
        """Wait, then answer."""
        await asyncio.sleep(seconds)
        return "done"

    @server.tool()
    def fail() -> str:
        """Always fails."""
        raise ValueError("the tool failed on purpose")

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def delete(item: str) -> str:
        """Delete an item."""
        count = os.environ.get("MCP_COUNT_FILE")
        if count:
            with open(count, "a", encoding="utf-8") as file:
                file.write(f"delete {item}\n")
        return f"deleted {item}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def token() -> str:
        """Show the server's token."""
        return f"token={os.environ.get('SECRET_TOKEN', '')}"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool `extra` and tell the client the list changed."""
        server.add_tool(lambda: "extra here", name="extra", description="Added later")
        await ctx.session.send_tool_list_changed()
        return "grown"

    return server


@contextlib.asynccontextmanager
async def serve_http() -> AsyncIterator[str]:
    """The server over streamable HTTP on 127.0.0.1 (a port of its own), in this event loop; its URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = build().streamable_http_app(host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(3000):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started, "the MCP HTTP server did not start"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await task
        sock.close()


if __name__ == "__main__":
    pid_file = os.environ.get("MCP_PID_FILE")
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()), encoding="utf-8")
    if len(sys.argv) > 1 and sys.argv[1] == "exit":  # a server that dies at once
        sys.exit(3)
    up = os.environ.get("MCP_UP_FILE")
    if up and not Path(up).exists():  # a server that does not start until the test lets it
        sys.exit(4)
    build().run("stdio")
