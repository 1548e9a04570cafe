"""A real MCP server (the SDK's own server side) that behaves badly, for the tests of bad input
(issue 29): `python tests/fakes/mcp_bad_server.py` over stdio.

Tools: `hang` (writes "hang" to `MCP_COUNT_FILE`, then never answers), `huge(megabytes)` (a result
of that many MiB), `echo(text)` (its argument back), `secrets` (the env's `LEAK_TOKEN` and
`LEAK_KEY`, and the text of the file `MCP_LEAK_FILE`, as a careless tool would print its
configuration). With the argument `mute` it never
answers at all (a server that never starts: it reads its input and says nothing)."""
from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer


def build() -> MCPServer:
    server = MCPServer("roundtable-bad")

    @server.tool()
    async def hang() -> str:
        """Never answers."""
        count = os.environ.get("MCP_COUNT_FILE")
        if count:
            with open(count, "a", encoding="utf-8") as file:
                file.write("hang\n")
        await asyncio.Event().wait()
        return "never"

    @server.tool()
    def huge(megabytes: int) -> str:
        """A very long result."""
        return "x" * (megabytes * 1024 * 1024)

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return f"echo: {text}"

    @server.tool()
    def secrets() -> str:
        """Show the configuration."""
        leak = os.environ.get("MCP_LEAK_FILE")
        found = Path(leak).read_text(encoding="utf-8") if leak else ""
        return f"bot token {os.environ.get('LEAK_TOKEN', '')}, api key {os.environ.get('LEAK_KEY', '')} {found}"

    return server


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "mute":
        for _ in sys.stdin:  # reads every request and answers none
            pass
        sys.exit(0)
    build().run("stdio")
