"""Agents' tools over MCP (issue 29): the product's overhead per tool call, and what tool steps cost in
prompt tokens. Figures only, nothing passes or fails here.

Both run the product's own path in-process: the engine (a group in "tags" mode that streams, one
agent granted `bench.*`), the real `openai` client against the bench's local server, the real MCP
client (`bot.llm.mcp_tools.McpServer`) over stdio to `bench/tool_server.py` (the SDK's
MCPServer), and a real SQLite file, so each call's journal writes (the step, running, the result)
are counted. The surface is in-process (`bench.fakes.RecordingSurface`, with a draft that
shows nothing).

- Overhead: the model answers with one call of `wait(ms)` per step, 10 steps a turn, for as many
  turns as it takes (and one turn first, not counted: the first call of a process). A call's
  overhead is the time from the end of the streamed answer carrying it (the server wrote `[DONE]`)
  to the next model request received by the server, minus the tool's own time (measured inside
  the tool, which says it in its result). Also the MCP client's round trip alone: the time of
  `McpServer.call` minus the tool's own time.
- Tokens: the same group twice against `bench.cache_server.CacheServer` (OpenAI's cache rule: nothing
  cached unless the first 1,024 tokens match an earlier prompt), with the agent granted the server's
  four tools and without: `WARM_TURNS` turns first (questions, ~150-token replies, no tool call),
  then the measured turn: with tools the model calls three tools one step at a time, then
  answers; without, it answers at once with the same text. Prompt and uncached prompt tokens of
  the measured turn's calls, each side.
"""
from __future__ import annotations

import contextlib
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from bench.cache_server import CacheServer, CallRecord, Tokenizer
from bench.engine_figures import percentile
from bench.fakes import RecordingSurface
from bench.openai_server import FakeOpenAI, RecordedRequest, Reply, message_text, tool_call
from bench.scenario import AGENTS, PERSON
from bot.core.features.tools import ToolRegistry
from bot.core.models import Agent, DraftPart, GroupSettings, ToolOutput
from bot.core.ports import Draft, ToolContext
from bot.core.runtime.engine import Engine
from bot.llm.mcp_tools import McpServer, ServerConfig
from bot.llm.openai_llm import OpenAILLM
from bot.llm.tokens import make_token_counter
from storage import SqlStore, open_store

SERVER = str(Path(__file__).with_name("tool_server.py"))
SOURCE = "bench"  # the MCP server's name: its tools are bench.wait ... for commands, bench__wait for the model
STEPS = 10  # tool steps per turn in the overhead figure
CALLS = 100
QUICK_CALLS = 20
TOOL_MS = (0.0, 20.0)  # the tool's own wait, per figure
QUICK_TOOL_MS = (0.0,)
TARGET_MS = 20.0  # issue 29: p50 overhead above the tool's own time
TOKEN_STEPS = 3
WARM_TURNS = 8
TIMEOUT = 300.0
_TOOK = re.compile(r"took ([0-9.]+) ms")


@dataclass
class Overhead:
    tool_ms: float  # what the tool was asked to wait
    overhead_ms: list[float] = field(default_factory=list)  # per call: product time minus the tool's own
    round_trip_ms: list[float] = field(default_factory=list)  # per call: McpServer.call minus the tool's own
    tool_own_ms: list[float] = field(default_factory=list)


@dataclass
class TokenSide:
    records: list[CallRecord] = field(default_factory=list)  # the measured turn's calls

    @property
    def prompt(self) -> int:
        return sum(r.prompt_tokens for r in self.records)

    @property
    def uncached(self) -> int:
        return sum(r.uncached_tokens for r in self.records)


@dataclass
class ToolFigures:
    overheads: list[Overhead] = field(default_factory=list)
    with_tools: TokenSide = field(default_factory=TokenSide)
    without_tools: TokenSide = field(default_factory=TokenSide)
    tools: int = 0  # tools offered in the token figure
    definition_tokens: int = 0  # their definitions, as the server counts them
    stable_order: bool = False  # every request of the token run with tools sent the same list
    tokenizer: str = ""


# the parts --------------------------------------------------------------------------------------------
class _Draft:
    """A draft that shows nothing (the streamed answer's pieces still go through the product's path)."""

    def grew(self) -> None:
        pass

    async def stop(self, *, wait: bool = True) -> None:
        pass

    async def discard(self) -> None:
        pass


class _Surface(RecordingSurface):
    def draft(self, group: Any, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> Draft | None:
        return _Draft()


class _TimedServer(McpServer):
    """The product's MCP client, its calls timed (the bench's only addition)."""

    def __init__(self, config: ServerConfig) -> None:
        super().__init__(config)
        self.round_trips: list[tuple[float, str]] = []  # (seconds, result text)

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        began = time.perf_counter()
        output = await super().call(tool, arguments, context)
        self.round_trips.append((time.perf_counter() - began, output.text))
        return output


def _tool_steps_this_turn(body: dict[str, Any]) -> int:
    """How many tool results the request carries after the person's newest message."""
    n = 0
    for m in reversed(body.get("messages") or []):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "tool":
            n += 1
        elif role != "assistant":
            break
    return n


def _last_person(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "user":
            return message_text(m)
    return ""


@contextlib.asynccontextmanager
async def _product(base_url: str, settings: GroupSettings, *, grant: bool) -> AsyncIterator[
        tuple[Engine, SqlStore, int, _TimedServer]]:
    """The engine over a fresh SQLite file, the openai client at `base_url`; a group with the planner.
    With `grant`, the MCP server started and its tools granted to the planner; without, no tools at all."""
    with tempfile.TemporaryDirectory(prefix="roundtable-bench-tools-") as tmp:
        store = await open_store(str(Path(tmp) / "bench.db"))
        mcp = _TimedServer(ServerConfig(SOURCE, command=sys.executable, args=(SERVER,), timeout=60.0))
        counter = make_token_counter()
        llm = OpenAILLM(api_key="sk-bench", base_url=base_url, default_model="bench-model", timeout=60,
                        max_retries=0, counter=counter)
        engine = Engine(store, llm, _Surface(), counter, selector_model="bench-model",
                        tools=ToolRegistry([mcp] if grant else []))
        try:
            if grant and not await mcp.start(60.0):
                raise RuntimeError(f"the bench's MCP server did not start: {mcp.problem}")
            group = await store.groups.create_group("console:bench-tools", "bench-tools", settings)
            spec = AGENTS[0]
            agent = await store.roster.add_agent(group.id, spec.name, spec.role, spec.system_prompt)
            if grant:
                await store.tools.grant_tools(agent.id, [f"{SOURCE}.*"])
            engine.connect()
            await engine.start()
            yield engine, store, group.id, mcp
        finally:
            await engine.close()
            await mcp.close()
            await llm.aclose()
            await store.close()


async def _turn(engine: Engine, store: SqlStore, group_id: int, text: str) -> None:
    group = await store.groups.get_group(group_id)
    await engine.post_user_message(group, author_name=PERSON, user_id=PERSON, text=f"@{AGENTS[0].name} {text}")
    await engine.wait_idle(group_id, TIMEOUT)


# overhead ---------------------------------------------------------------------------------------------
async def measure_overhead(calls: int = CALLS, tool_ms: float = 0.0) -> Overhead:
    """`calls` tool calls (whole turns of STEPS), after one turn not counted."""
    figures = Overhead(tool_ms)
    answered: list[RecordedRequest] = []  # the requests answered with a tool call

    def respond(body: dict[str, Any]) -> Reply:  # (the server passes its RecordedRequest)
        if body.get("tools") and _tool_steps_this_turn(body) < STEPS:
            answered.append(cast(RecordedRequest, body))
            return Reply(tool_calls=[tool_call(f"{SOURCE}__wait", ms=tool_ms)])
        return Reply(text="Waited enough.")

    settings = GroupSettings(mode="tags", stream=True, max_tool_steps=STEPS + 1)
    async with FakeOpenAI(respond, models=("bench-model",)) as server, \
            _product(server.base_url, settings, grant=True) as (engine, store, group_id, mcp):
        await _turn(engine, store, group_id, "warm up")
        counted, trips = len(answered), len(mcp.round_trips)
        turns = max(1, -(-calls // STEPS))
        for k in range(turns):
            await _turn(engine, store, group_id, f"wait, round {k + 1}")
        requests = server.requests
        position = {id(r): i for i, r in enumerate(requests)}
        for body in answered[counted:][:calls]:
            following = requests[position[id(body)] + 1]
            own = _own_ms(following)
            if body.ended_at is None or own is None:
                raise RuntimeError("a tool step was not answered as scripted (no end, or no tool result after it)")
            figures.tool_own_ms.append(own)
            figures.overhead_ms.append((following.at - body.ended_at) * 1000 - own)
        for seconds, text in mcp.round_trips[trips:][:calls]:
            took = _TOOK.search(text)
            if took:
                figures.round_trip_ms.append(seconds * 1000 - float(took.group(1)))
    return figures


def _own_ms(body: dict[str, Any]) -> float | None:
    """The tool's own time, from the newest tool result the request carries."""
    for m in reversed(body.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "tool":
            took = _TOOK.search(message_text(m))
            return float(took.group(1)) if took else None
    return None


# tokens -----------------------------------------------------------------------------------------------
MEASURED = "what should we do on day 2, given the weather and the yen?"
STEP_CALLS = (("weather", {"city": "Tokyo", "day": 2}), ("exchange_rate", {"base": "USD", "quote": "JPY"}),
              ("find_places", {"query": "ramen", "area": "Shinjuku", "limit": 3}))


def _reply(k: int) -> str:
    """The agent's k-th reply: ~150 tokens, different for each k."""
    words = (f"Answer {k}: day {k} starts early at Asakusa with the temple and the market streets, then a boat along "
             "the river to the gardens, lunch near the fish market, an afternoon in the museums of Ueno park and "
             "an evening walk through the lanes of Yanaka with dinner at a small place near the station, about "
             f"{4000 + 37 * k} yen for two; tickets are bought on the day").split()
    return " ".join((words * 3)[:120]) + "."


async def measure_tokens(warm_turns: int = WARM_TURNS) -> ToolFigures:
    """The token half of the figures (both sides), `overheads` left empty."""
    figures = ToolFigures()
    tokenizer = Tokenizer()
    figures.tokenizer = tokenizer.name
    turn = [0]  # the person's question being answered

    def respond(record: CallRecord, body: dict[str, Any]) -> str | Reply:
        step = _tool_steps_this_turn(body)
        if body.get("tools") and MEASURED in _last_person(body) and step < TOKEN_STEPS:
            name, args = STEP_CALLS[step]
            return Reply(tool_calls=[tool_call(f"{SOURCE}__{name}", **args)])
        return _reply(turn[0])

    for grant in (False, True):
        settings = GroupSettings(mode="tags", stream=True)
        async with CacheServer(respond, tokenizer=tokenizer) as server, \
                _product(server.base_url, settings, grant=grant) as (engine, store, group_id, _):
            for k in range(1, warm_turns + 1):
                turn[0] = k
                await _turn(engine, store, group_id, f"question {k}: what about day {k}?")
            mark = len(server.records)
            turn[0] = warm_turns + 1
            await _turn(engine, store, group_id, MEASURED)
            side = TokenSide(server.records[mark:])
            if grant:
                offered: list[Any] = [r["tools"] for r in server.requests if r.get("tools")]
                figures.stable_order = bool(offered) and all(t == offered[0] for t in offered)
                if offered:
                    figures.tools = len(offered[0])
                    figures.definition_tokens = len(server.tokens.prompt([], offered[0]))
                figures.with_tools = side
            else:
                figures.without_tools = side
    return figures


async def measure(calls: int = CALLS, tool_ms: Sequence[float] = TOOL_MS, warm_turns: int = WARM_TURNS
                  ) -> ToolFigures:
    figures = await measure_tokens(warm_turns)
    for ms in tool_ms:
        figures.overheads.append(await measure_overhead(calls, ms))
    return figures


# the report -------------------------------------------------------------------------------------------
def _ms(values: list[float]) -> str:
    return f"{percentile(values, 50):.1f} / {percentile(values, 95):.1f}" if values else "-"


def _x(a: int, b: int) -> str:
    return f"{a / b:.2f}x" if b else "-"


def render(figures: ToolFigures, *, with_targets: bool = False) -> list[str]:
    """The figures as lines (and `with_targets`, issue 29's target read off them)."""
    lines = ["Tools over MCP (in-process engine, openai client, a stdio MCP server of the SDK, SQLite journal)"]
    for o in figures.overheads:
        what = "answers at once" if o.tool_ms == 0 else f"waits {o.tool_ms:g} ms"
        own = statistics.median(o.tool_own_ms) if o.tool_own_ms else float("nan")
        lines += [f"  tool {what} (its own time p50 {own:.1f} ms), {len(o.overhead_ms)} calls",
                  f"    overhead per call above the tool's time, ms (p50 / p95): {_ms(o.overhead_ms)}",
                  f"    of which the MCP client's round trip, ms (p50 / p95):   {_ms(o.round_trip_ms)}"]
    w, wo = figures.with_tools, figures.without_tools
    if w.records or wo.records:
        lines += [f"  tokens: a turn with {TOKEN_STEPS} tool steps vs the same turn without tools, after "
                  f"{WARM_TURNS} earlier turns ({figures.tools} tools, {figures.definition_tokens:,} tokens of "
                  f"definitions, the same list in every request: {'yes' if figures.stable_order else 'no'}; "
                  f"{figures.tokenizer})",
                  f"    model calls:            {len(w.records)} vs {len(wo.records)}",
                  f"    prompt tokens:          {w.prompt:,} vs {wo.prompt:,} ({_x(w.prompt, wo.prompt)})",
                  f"    uncached prompt tokens: {w.uncached:,} vs {wo.uncached:,} ({_x(w.uncached, wo.uncached)})"]
    at_once = next((o for o in figures.overheads if o.overhead_ms), None)
    if with_targets and at_once is not None:
        p50 = percentile(at_once.overhead_ms, 50)
        lines += [f"  target (issue 29): overhead p50 <= {TARGET_MS:g} ms above the tool's own time: {p50:.1f} ms: "
                  f"{'met' if p50 <= TARGET_MS else 'not met'}"]
    return lines
