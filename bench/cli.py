"""`python -m bench` / `roundtable bench`: run the scenarios, print one table of figures.

Progress goes to stderr; the table to stdout. Figures only: whether they meet the project's
targets is said in docs/benchmarks.md (`python -m bench --targets` adds that reading for it).
No unit test asserts a time (tests/bench checks the cache rule and the wiring, fast).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.cache_server import Tokenizer
    from bench.report import Results
    from bench.streaming import StreamingFigures
    from bench.tool_figures import ToolFigures

DESCRIPTION = ("Prompt tokens, cache and prefix on the Tokyo task (Roundtable vs AutoGen's SelectorGroupChat, "
               "with its defaults and with token-limited contexts) against a local server that bills cached "
               "tokens as OpenAI does, and the engine's overhead per turn at several history sizes. A run over "
               "100 turns is episodes of at most 100, each later one opened by a person's follow-up. And "
               "streamed replies over the Discord emulator, against stream:off (from a source checkout, whose "
               "tests/ holds the emulator). And agents' tools over MCP: the overhead per tool call and the "
               "prompt tokens of a turn with tool steps.")
PG_ENV = "ROUNDTABLE_BENCH_PG"
FULL_TURNS = (30, 200)
QUICK_TURNS = (30,)


def _ints(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected whole numbers >= 1, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="smaller run: Tokyo 30 turns only, history sizes 1k/5k, 30 engine turns")
    parser.add_argument("--turns", type=_ints, metavar="N[,N]",
                        help="Tokyo task turn counts (default 30,200; --quick 30)")
    parser.add_argument("--sizes", type=_ints, metavar="N[,N]",
                        help="history sizes for the engine figures (default 1000,10000,50000; --quick 1000,5000)")
    parser.add_argument("--engine-turns", type=int, metavar="N",
                        help="timed turns per fresh engine start (default 50; --quick 30)")
    parser.add_argument("--repeats", type=int, default=3, metavar="N",
                        help="fresh engine starts per history size (default 3)")
    parser.add_argument("--pg", metavar="URL", default=os.environ.get(PG_ENV) or None,
                        help="also measure the engine figures on this PostgreSQL database (postgresql://...), each "
                             "size in a fresh schema bench_<pid>_<n> dropped afterwards; the rows say sqlite or "
                             f"postgresql (default: ${PG_ENV}; unset: SQLite only)")
    parser.add_argument("--no-autogen", action="store_true", help="do not run AutoGen even when it is installed")
    parser.add_argument("--no-engine", action="store_true", help="skip the engine figures (tokens only)")
    parser.add_argument("--no-tokens", action="store_true", help="skip the Tokyo task (engine figures only)")
    parser.add_argument("--no-streaming", action="store_true",
                        help="skip the streaming figure (a `roundtable run` process over the Discord emulator)")
    parser.add_argument("--streaming-replies", type=int, metavar="N",
                        help="replies timed per mode for the streaming figure (default 5; --quick 3)")
    parser.add_argument("--no-tools", action="store_true",
                        help="skip the tools figures (overhead per MCP tool call, tokens of a turn with tool steps)")
    parser.add_argument("--tool-calls", type=int, metavar="N",
                        help="timed tool calls per tool time for the tools figures (default 100; --quick 20)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log the engine's warnings (-v) or more")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
    add_arguments(parser)
    parser.add_argument("--targets", action="store_true",
                        help="also read the figures against the project's targets (for docs/benchmarks.md)")
    return parser


def _progress(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


async def collect(args: argparse.Namespace) -> Results:
    from bench.cache_server import Tokenizer
    from bench.report import Results
    from bench.tokyo import AUTOGEN_MISSING, autogen_available, run_all

    turns = args.turns or list(QUICK_TURNS if args.quick else FULL_TURNS)
    tokenizer = Tokenizer()
    results = Results()
    use_autogen = not args.no_autogen and autogen_available()
    results.header = _header(args, tokenizer, use_autogen)
    if not use_autogen:
        results.autogen_line = AUTOGEN_MISSING if not args.no_autogen else "AutoGen: skipped (--no-autogen)"
    if not args.no_tokens:
        for n in turns:
            _progress(f"Tokyo task, {n} turns (Roundtable{', AutoGen, AutoGen tuned' if use_autogen else ''})")
            results.pairs.append(await run_all(n, tokenizer, autogen=use_autogen))
    if not args.no_engine:
        await _engine_figures(args, results)
    if not args.no_streaming:
        results.streaming = await _streaming_figures(args)
    if not args.no_tools:
        results.tools = await _tool_figures(args)
    return results


def _header(args: argparse.Namespace, tokenizer: Tokenizer, use_autogen: bool) -> list[str]:
    """The table's first lines: the task, the server's token counts, AutoGen's set-up, the databases."""
    from bench.cache_server import BLOCK_TOKENS, MIN_CACHED_PROMPT
    from bench.scenario import FOLLOW_UP, REPLY_TOKENS, TASK
    from bench.tokyo import TUNED_AGENT_TOKENS, TUNED_SELECTOR_TOKENS

    ag_version = ""
    if use_autogen:
        from importlib.metadata import version

        ag_version = f" (autogen-agentchat {version('autogen-agentchat')})"
    header = [
        "Roundtable bench",
        f"task: {TASK!r}; agents planner, budget, local; replies ~{REPLY_TOKENS} tokens, all distinct; "
        f"the selector rotates planner->budget->local; episodes of at most 100 turns, each later one opened "
        f"by {FOLLOW_UP!r}",
        f"server: tokens by {tokenizer.name}; cached = the {BLOCK_TOKENS}-token blocks of the prefix shared with "
        f"an earlier prompt, 0 unless that prefix is at least {MIN_CACHED_PROMPT:,} tokens (OpenAI's rule)",
        f"AutoGen: SelectorGroupChat{ag_version}, default selector prompt, allow_repeated_speaker=False; "
        f"tuned: TokenLimitedChatCompletionContext of {TUNED_AGENT_TOKENS:,} tokens per agent and "
        f"{TUNED_SELECTOR_TOKENS:,} for the selector"
        if use_autogen else "AutoGen: not run",
    ]
    if args.pg and not args.no_engine:
        from storage.pg import mask_url

        header.append(f"engine figures: SQLite (a temporary file) and PostgreSQL {mask_url(args.pg)} "
                      "(a fresh schema per size, dropped afterwards)")
    return header


async def _engine_figures(args: argparse.Namespace, results: Results) -> None:
    """Runs mid-run, and each history size's start and turns (on SQLite, and PostgreSQL with --pg)."""
    from bench import engine_figures

    sizes = args.sizes or list(engine_figures.QUICK_SIZES if args.quick else engine_figures.DEFAULT_SIZES)
    engine_turns = args.engine_turns or (engine_figures.QUICK_TURNS if args.quick else engine_figures.TURNS)
    _progress("engine: 100 messages during a run")
    results.mid_run = await engine_figures.runs_mid_run()
    for n in sizes:
        for pg_url in (None, args.pg) if args.pg else (None,):
            where = ", PostgreSQL" if pg_url else (", SQLite" if args.pg else "")
            _progress(f"engine: history {n:,}{where}, {args.repeats} fresh starts x {engine_turns} turns")
            results.sizes.append(await engine_figures.measure_size(n, engine_turns, args.repeats, pg_url))


async def _streaming_figures(args: argparse.Namespace) -> StreamingFigures:
    from bench import streaming

    replies = args.streaming_replies or (streaming.QUICK_REPLIES if args.quick else streaming.REPLIES)
    _progress(f"streaming: {replies} replies streamed, {replies} with stream:off and {replies} streamed from an "
              "instant model over the Discord emulator")
    return await streaming.measure(replies)


async def _tool_figures(args: argparse.Namespace) -> ToolFigures:
    from bench import tool_figures

    calls = args.tool_calls or (tool_figures.QUICK_CALLS if args.quick else tool_figures.CALLS)
    tool_ms = tool_figures.QUICK_TOOL_MS if args.quick else tool_figures.TOOL_MS
    _progress(f"tools: {calls} MCP tool calls per tool time ({', '.join(f'{ms:g} ms' for ms in tool_ms)}); "
              "a turn with tool steps vs without, in tokens")
    return await tool_figures.measure(calls, tool_ms)


def check_pg(url: str) -> str | None:
    """None when `url` is a PostgreSQL URL whose server answers; otherwise one line saying why not."""
    from bench.places import unreachable
    from storage import is_postgres
    from storage.pg import mask_url

    if not is_postgres(url):
        return "expected a postgresql://USER@HOST:PORT/DATABASE URL"
    reason = unreachable(url, timeout=5)
    return None if reason is None else f"cannot connect to {mask_url(url)}: {reason}"  # without its password


def run(args: argparse.Namespace) -> int:
    """Run with parsed options; print the table. 0, or 2 for a bad option."""
    if args.streaming_replies is not None and args.streaming_replies < 1:
        print("bench: --streaming-replies must be >= 1", file=sys.stderr)
        return 2
    if args.tool_calls is not None and args.tool_calls < 1:
        print("bench: --tool-calls must be >= 1", file=sys.stderr)
        return 2
    if args.repeats < 1 or (args.engine_turns is not None and args.engine_turns < 10):
        print("bench: --repeats must be >= 1 and --engine-turns >= 10 (the tenth turn is a figure)", file=sys.stderr)
        return 2
    if args.pg and not args.no_engine:
        problem = check_pg(args.pg)
        if problem:
            print(f"bench: --pg ({PG_ENV}): {problem}", file=sys.stderr)
            return 2
    levels = ("ERROR", "WARNING", "INFO", "DEBUG")
    logging.basicConfig(level=levels[min(args.verbose, len(levels) - 1)], stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    from bench.report import render

    started = time.perf_counter()
    results = asyncio.run(collect(args))
    print(render(results, with_targets=getattr(args, "targets", False)))  # `roundtable bench` has no --targets
    _progress(f"done in {time.perf_counter() - started:.0f}s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))
