"""Print engine figures: append throughput, per-turn overhead at several history sizes, memory.

    .venv/bin/python bench/bench_engine.py [--sizes 1000,10000,50000] [--turns 50]

The engine part of `python -m bench` (see bench/engine_figures.py for what is timed),
one line per size. Uses a real SQLite file in a temporary directory and an instant
in-process LLM (no network), so the figures are the engine's and the store's own cost
per turn. Figures only: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.engine_figures import DEFAULT_SIZES, REPEATS, TURNS, measure_size


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(n) for n in DEFAULT_SIZES))
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    for n in (int(s) for s in args.sizes.split(",")):
        f = asyncio.run(measure_size(n, args.turns, args.repeats))
        print(f"history {n:>6}: append {f.append_per_s:6.0f} msg/s, route {f.route_per_s:6.0f} msg/s | "
              f"overhead/turn p50 {f.percentile(50):6.1f} ms, p99 {f.percentile(99):6.1f} ms, "
              f"1st after start {f.first:6.1f} ms, 10th {f.tenth:6.1f} ms | {f.posts_per_s:5.1f} posts/s | "
              f"max RSS {f.rss_mib:6.1f} MiB{' | ' + f.note if f.note else ''}", flush=True)


if __name__ == "__main__":
    main()
