"""Print the tools figures: the product's overhead per MCP tool call, and the prompt tokens of a turn
with tool steps against the same turn without tools.

    .venv/bin/python bench/bench_tools.py [--quick] [--calls 100] [--tool-ms 0,20] [--targets]

The tools part of `python -m bench` (see bench/tool_figures.py for what is timed and counted): the
real engine, openai client, MCP client (over stdio, to bench/tool_server.py) and a SQLite file, in
one process. Figures only: nothing here passes or fails (`--targets` adds issue 29's reading).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tool_figures import CALLS, QUICK_CALLS, QUICK_TOOL_MS, TOOL_MS, measure, render


def _floats(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated milliseconds, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected milliseconds >= 0, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_CALLS} calls of a tool that answers at once (default {CALLS} per tool time)")
    parser.add_argument("--calls", type=int, metavar="N", help=f"timed tool calls per tool time (default {CALLS})")
    parser.add_argument("--tool-ms", type=_floats, metavar="MS[,MS]",
                        help="the tool's own wait per figure, ms (default 0,20; --quick 0)")
    parser.add_argument("--targets", action="store_true", help="also read the figures against issue 29's target")
    args = parser.parse_args(argv)
    calls = args.calls or (QUICK_CALLS if args.quick else CALLS)
    if calls < 1:
        parser.error("--calls must be >= 1")
    tool_ms = args.tool_ms or list(QUICK_TOOL_MS if args.quick else TOOL_MS)
    figures = asyncio.run(measure(calls, tool_ms))
    print("\n".join(render(figures, with_targets=args.targets)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
