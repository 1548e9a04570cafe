"""bench/bench_engine.py (the engine part of `roundtable bench`) end to end on a history just
past one routing chunk: a history that long is a backlog, routed only once the surface is
connected, and the bench's surface must say so (issue 28: it hung at "history 1,000")."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bot.core.runtime.dispatcher import ROUTE_CHUNK

ROOT = Path(__file__).resolve().parents[2]


def test_bench_engine_runs_a_history_longer_than_a_routing_chunk() -> None:
    size = ROUTE_CHUNK + 20
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_engine.py"), "--sizes", str(size), "--turns", "3",
         "--repeats", "1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = done.stdout.splitlines()
    assert line.startswith(f"history {size:>6}: append ") and "route" in line and "posts/s" in line
    assert "turns ran" not in line  # no note: every timed turn ran
