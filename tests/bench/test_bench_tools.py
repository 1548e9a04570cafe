"""bench/bench_tools.py (issue 29's figures) end to end on its quick path: that it runs the product's tool
path and prints every figure, never how fast."""
from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from bench.cli import build_parser
from bench.report import Results, render
from bench.tool_figures import ToolFigures

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_tools.py"


async def test_the_quick_run_prints_the_overhead_and_the_tokens() -> None:
    process = await asyncio.create_subprocess_exec(sys.executable, str(SCRIPT), "--quick", "--calls", "3",
                                                   "--targets", stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    text = out.decode()
    assert process.returncode == 0, err.decode()[-3000:]
    assert "tool answers at once (its own time p50" in text and "), 3 calls" in text
    assert re.search(r"overhead per call above the tool's time, ms \(p50 / p95\): [0-9.-]+ / [0-9.]+", text), text
    assert re.search(r"MCP client's round trip, ms \(p50 / p95\): +[0-9.-]+ / [0-9.]+", text), text
    assert "the same list in every request: yes" in text and "4 tools" in text
    assert re.search(r"model calls: +4 vs 1", text), text  # three tool steps, then the answer
    prompt = re.search(r"prompt tokens: +([0-9,]+) vs ([0-9,]+)", text)
    uncached = re.search(r"uncached prompt tokens: +([0-9,]+) vs ([0-9,]+) \(([0-9.]+)x\)", text)
    assert prompt and uncached, text
    with_tools, without = (int(v.replace(",", "")) for v in prompt.groups())
    assert with_tools > without > 0
    assert re.search(r"target \(issue 29\): overhead p50 <= 20 ms above the tool's own time: .*met$", text, re.M)


def test_python_m_bench_runs_the_tools_figures_unless_told_not_to() -> None:
    args = build_parser().parse_args(["--quick", "--tool-calls", "5"])
    assert not args.no_tools and args.tool_calls == 5
    assert build_parser().parse_args(["--no-tools"]).no_tools
    text = render(Results(tools=ToolFigures()))
    assert text.endswith("Tools over MCP (in-process engine, openai client, a stdio MCP server of the SDK, "
                         "SQLite journal)")
