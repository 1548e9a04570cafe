"""The bench's runners end to end on small sizes: that they run and count, never how fast."""
from __future__ import annotations

import math

import pytest

from bench import engine_figures
from bench.cache_server import Tokenizer
from bench.cli import build_parser
from bench.engine_figures import MidRun, SizeFigures, percentile
from bench.report import Results, render, targets
from bench.tokyo import AUTOGEN_MISSING, RunReport, autogen_available, loopback_only, run_autogen, run_pair
from bot.__main__ import build_parser as roundtable_parser


async def test_roundtable_and_autogen_on_a_short_task() -> None:
    rt, ag = await run_pair(4, Tokenizer(), autogen=autogen_available())
    assert rt.note == "", rt.note
    assert [t.agent for t in rt.turns] == ["planner", "budget", "local", "planner"]
    assert len(rt.calls("participant")) == 4 and len(rt.calls("selector")) >= 4
    assert rt.prompt == rt.cached + rt.uncached and rt.completion > 4 * 100
    assert rt.turns[1].thread_tokens > rt.turns[0].thread_tokens
    if autogen_available():
        assert ag.note == "", ag.note
        assert [t.agent for t in ag.turns] == ["planner", "budget", "local", "planner"]
        assert len(ag.calls("selector")) == 4
        # the same replies on both sides
        assert [r.reply for r in ag.calls("participant")] == [r.reply for r in rt.calls("participant")]
    else:
        assert ag.note == AUTOGEN_MISSING and not ag.records


async def test_autogen_is_skipped_with_one_line_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.tokyo.autogen_available", lambda: False)
    report = await run_autogen(3, Tokenizer())
    assert report.note == AUTOGEN_MISSING == "AutoGen: skipped (pip install -e '.[bench]' to compare)"
    assert AUTOGEN_MISSING in render(Results(pairs=[(RunReport("Roundtable", 3), report)],
                                             autogen_line=AUTOGEN_MISSING))


def test_only_loopback_connections_are_let_through() -> None:
    import socket

    with loopback_only() as refused:
        with pytest.raises(OSError):
            socket.getaddrinfo("openaipublic.blob.core.windows.net", 443)
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):
            s.connect(("192.0.2.1", 443))
        assert socket.getaddrinfo("127.0.0.1", 80)
    assert refused == ["lookup openaipublic.blob.core.windows.net", "connect 192.0.2.1"]
    assert socket.socket.connect.__qualname__ == "socket.connect"


async def test_messages_arriving_during_a_run_are_counted_per_agent() -> None:
    result = await engine_figures.runs_mid_run(messages=5)
    assert result.messages == 5 and result.held_agent == "planner"
    assert set(result.runs_after) == {"planner", "budget", "local"}


async def test_engine_figures_on_a_small_history() -> None:
    f = await engine_figures.measure_size(30, turns=10, repeats=1)
    assert f.note == "", f.note
    assert len(f.first_ms) == 1 and len(f.tenth_ms) == 1 and len(f.overhead_ms) == 9
    assert f.append_per_s > 0 and f.route_per_s > 0 and f.posts_per_s > 0 and f.rss_mib > 0


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0
    assert math.isnan(percentile([], 50))


def test_targets_read_the_figures() -> None:
    def report(framework: str, turns: int, prompt: int, cached: int, kept: float) -> RunReport:
        from bench.cache_server import CallRecord

        r = RunReport(framework, turns)
        r.records = [CallRecord(0, "participant", "planner", "m", 2, prompt, cached, prefix_kept=kept)]
        return r

    fast = SizeFigures(1000, overhead_ms=[1.0] * 50, first_ms=[1.0], tenth_ms=[1.0])
    slow = SizeFigures(50000, overhead_ms=[30.0] * 50, first_ms=[200.0], tenth_ms=[30.0])
    results = Results(
        pairs=[(report("Roundtable", 30, 40, 0, 0.99), report("AutoGen", 30, 100, 0, 1.0)),
               (report("Roundtable", 200, 30, 10, 0.90), report("AutoGen", 200, 100, 40, 1.0))],
        sizes=[fast, slow],
        mid_run=MidRun(100, "planner", {"planner": 1, "budget": 1, "local": 2}),
    )
    lines = targets(results)
    assert lines[0].endswith(": met") and "0.40x" in lines[0]
    assert lines[1].endswith(": not met") and "total 0.30x" in lines[1] and "uncached 0.33x" in lines[1]
    assert lines[2].endswith(": not met") and "90.0% at 200 turns" in lines[2]
    assert lines[3].endswith(": not met") and "first 200.0 > tenth 30.0" in lines[3] and "p50 grows" in lines[3]
    assert lines[4].endswith(": not met")
    results.sizes, results.mid_run = [fast], MidRun(100, "planner", {"planner": 1, "budget": 1, "local": 1})
    assert targets(results)[3].endswith(": met") and targets(results)[4].endswith(": met")
    text = render(results)
    assert "Tokyo task, 200 turns" in text and "history 1k: overhead/turn p50 / p99 ms" in text


def test_options_for_python_m_bench_and_roundtable_bench() -> None:
    args = build_parser().parse_args(["--quick", "--sizes", "1000,2_000"])
    assert args.quick and args.sizes == [1000, 2000] and args.turns is None
    args = roundtable_parser().parse_args(["bench", "--turns", "30", "--no-engine"])
    assert args.verb == "bench" and args.turns == [30] and args.no_engine
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--sizes", "0"])
