"""Print what an idle engine costs when it leads many groups: CPU and RSS while nothing is said.

    .venv/bin/python bench/bench_idle.py [--groups 1000] [--agents 8] [--seconds 30]
        [--pg postgresql://postgres@127.0.0.1:5432/test] [--only sqlite|postgresql]

One engine process (the console's or the bot's engine, no surface traffic, an instant LLM)
starts over a database with `--groups` groups of `--agents` agents each, takes every group's
lease and resumes it, then sits idle for `--seconds`: its lease keeper renews the leases and
looks at every group every 2 s, and the scheduler ticks. Printed: the start-up time (taking the
leases), CPU seconds per minute while idle, and the process's maximum RSS. Then a second
engine process starts on the same database: it finds every lease taken (the figures say how
long its start took and what it costs idle). PostgreSQL runs in a fresh schema, dropped
afterwards. Figures only, never a timed test.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fakes import InstantLLM, RecordingSurface
from bench.places import with_schema
from bench.scenario import Script
from bot.core.models import GroupSettings
from bot.core.runtime.engine import Engine
from bot.llm.tokens import estimate_tokens, make_token_counter
from storage import open_store

ROOT = Path(__file__).resolve().parents[1]


async def seed(target: str, groups: int, agents: int) -> None:
    store = await open_store(target)
    try:
        for g in range(groups):
            group = await store.groups.create_group(f"console:g{g}", f"g{g}", GroupSettings())
            for a in range(agents):
                await store.roster.add_agent(group.id, f"agent{a}", "helps", "You help.")
    finally:
        await store.close()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def idle_process(target: str, seconds: float) -> dict[str, float]:
    """In this process: one engine over `target`, started, then idle for `seconds`."""
    store = await open_store(target)
    engine = Engine(store, InstantLLM(Script(estimate_tokens)), RecordingSurface(), make_token_counter())
    try:
        began = time.perf_counter()
        await engine.start()
        started = time.perf_counter() - began
        led = len(engine.ownership.owned)
        cpu = cpu_seconds()
        await asyncio.sleep(seconds)
        idle_cpu = cpu_seconds() - cpu
    finally:
        await engine.close()
        await store.close()
    return {"start_s": started, "led": led, "cpu_per_min": idle_cpu * 60 / seconds,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(target: str, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(Path(__file__)), "--child", target, "--seconds", str(seconds)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)


def result_of(child: subprocess.Popen[str]) -> dict[str, float]:
    out, _ = child.communicate(timeout=900)
    if child.returncode != 0:
        raise RuntimeError(f"the engine process failed ({child.returncode})")
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def measure(kind: str, target: str, groups: int, agents: int, seconds: float) -> None:
    began = time.perf_counter()
    asyncio.run(seed(target, groups, agents))
    print(f"{kind}: {groups} groups x {agents} agents seeded in {time.perf_counter() - began:.1f}s", flush=True)
    first = run_child(target, seconds + 15)
    time.sleep(5)  # the first one has its leases (or most of them) before the second starts
    second = run_child(target, seconds)
    one, two = result_of(first), result_of(second)
    for name, f in (("first process", one), ("second process", two)):
        print(f"  {name:15s} start {f['start_s']:6.2f}s, leads {int(f['led']):5d} groups, idle CPU "
              f"{f['cpu_per_min']:5.2f} s/min, max RSS {f['rss_mib']:6.1f} MiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--pg", default=os.environ.get("ROUNDTABLE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(idle_process(args.child, args.seconds))))
        return
    if args.only != "postgresql":
        with tempfile.TemporaryDirectory(prefix="roundtable-idle-") as tmp:
            measure("sqlite", str(Path(tmp) / "idle.db"), args.groups, args.agents, args.seconds)
    if args.only != "sqlite":
        import asyncpg

        schema = f"rt_idle_{uuid.uuid4().hex[:10]}"

        async def admin(sql: str) -> None:
            conn = await asyncpg.connect(args.pg)
            try:
                await conn.execute(sql)
            finally:
                await conn.close()

        asyncio.run(admin(f"CREATE SCHEMA {schema}"))
        try:
            measure("postgresql", with_schema(args.pg, schema), args.groups, args.agents, args.seconds)
        finally:
            asyncio.run(admin(f"DROP SCHEMA {schema} CASCADE"))


if __name__ == "__main__":
    main()
