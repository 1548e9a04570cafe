"""The tools bench's MCP server over stdio (`python bench/tool_server.py`), written with the SDK's own
server side (`MCPServer`, mcp 2's FastMCP).

`wait(ms)` sleeps `ms` milliseconds (0: answers at once) and says how long it took inside the
tool (`took 5.012 ms`): the tool's own time, which the bench takes off the product's time.
`weather`, `exchange_rate` and `find_places` answer at once with fixed text: a tool list of the
size an agent is given, for the token figures.
"""
from __future__ import annotations

import asyncio
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)


def build() -> MCPServer:
    server = MCPServer("roundtable-bench")

    @server.tool(annotations=READ_ONLY)
    async def wait(ms: float) -> str:
        """Wait `ms` milliseconds, then say how long the wait took."""
        began = time.perf_counter()
        if ms > 0:
            await asyncio.sleep(ms / 1000)
        return f"took {(time.perf_counter() - began) * 1000:.3f} ms"

    @server.tool(annotations=READ_ONLY)
    def weather(city: str, day: int = 1) -> str:
        """The weather forecast for a city: sky, temperatures in Celsius and the chance of rain, for
        day 1 (tomorrow) to 7 of the coming week."""
        return f"{city}, day {day}: partly cloudy, 14-21 C, rain 20%"

    @server.tool(annotations=READ_ONLY)
    def exchange_rate(base: str, quote: str) -> str:
        """Today's mid-market exchange rate between two currencies, by their ISO 4217 codes (USD, JPY, EUR)."""
        return f"1 {base.upper()} = 151.20 {quote.upper()} (mid-market, today)"

    @server.tool(annotations=READ_ONLY)
    def find_places(query: str, area: str, limit: int = 5) -> str:
        """Places matching a query in an area of a city (restaurants, museums, parks, shops), with their
        opening hours and a typical price per person; at most `limit` of them."""
        return "\n".join(f"{query} {k} in {area}: open 10:00-20:00, about 2,000 JPY" for k in range(1, limit + 1))

    return server


if __name__ == "__main__":
    build().run()  # stdio
