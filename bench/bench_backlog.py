"""Print how a backlog of rows not routed yet affects an engine's start: the start itself, a fresh
message in another group, and the backlog's routing.

    .venv/bin/python bench/bench_backlog.py [--groups 500] [--rows 2000] [--pg postgresql://...]
        [--only sqlite|postgresql]

`--groups` groups each get `--rows` people's messages written by one SQL statement, none routed
(their agents' cursors at the end: routing them runs nobody), plus one group without a backlog.
One engine then starts as the Discord bot does (`start(connected=False)`: taking the leases and
resuming every group, which is what the gateway IDENTIFY waits for), is told the surface is
connected, and a person posts a tagged message in the group without a backlog. Printed: the
start, the fresh message's reply after the start, the time until every backlog is routed, and the
process's maximum RSS. An instant LLM; PostgreSQL in a fresh schema, dropped afterwards. Figures
only, never a timed test.
"""
from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fakes import InstantLLM, RecordingSurface
from bench.places import scratch_schema
from bench.scenario import Script
from bot.core.models import GroupSettings
from bot.core.runtime.engine import Engine
from bot.llm.tokens import estimate_tokens, make_token_counter
from storage import SqlStore, open_store

FRESH = "console:fresh"


async def build(target: str, groups: int, rows: int) -> float:
    """The groups and their backlogs; seconds it took."""
    began = time.perf_counter()
    store = await open_store(target)
    try:
        for g in range(groups):
            group = await store.groups.create_group(f"console:backlog{g}", f"backlog{g}", GroupSettings(mode="tags"))
            await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
        fresh = await store.groups.create_group(FRESH, "fresh", GroupSettings(mode="tags"))
        await store.roster.add_agent(fresh.id, "planner", "plans", "You plan.")
        await bulk_backlog(store, rows, fresh.id)
    finally:
        await store.close()
    return time.perf_counter() - began


async def bulk_backlog(store: SqlStore, rows: int, skip_group: int) -> None:
    """`rows` unrouted people's rows in every group but `skip_group`, by one SQL statement."""
    if store._sql.name == "postgresql":
        prefix, series, params = "", "generate_series(1, ?) AS s(x)", (rows, skip_group)
    else:
        prefix = "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < ?) "
        series, params = "s", (rows, skip_group)
    async with store._write() as db:
        await db.exec(
            f"{prefix}INSERT INTO messages (group_id, seq, author_type, author_name, author_user_id, text, confirmed,"
            " token_count, created_at, tokens_before)"
            " SELECT g.id, x, 'user', 'alice', 'alice', 'old message ' || x, 1, 30, 0, (x - 1) * 31"
            f" FROM groups AS g CROSS JOIN {series} WHERE g.id <> ?", params)
        await db.exec("UPDATE groups SET latest_seq = ?, tokens_total = ? WHERE id <> ?",
                      (rows, rows * 31, skip_group))
        await db.exec("UPDATE agents SET delivered_through = ? WHERE group_id <> ?", (rows, skip_group))


async def unrouted_groups(store: SqlStore) -> int:
    async with store._read() as db:
        row = await db.one("SELECT COUNT(*) FROM groups WHERE routed_through < latest_seq")
    return int(row[0]) if row else 0


async def measure(target: str) -> dict[str, float]:
    store = await open_store(target)
    surface = RecordingSurface()
    engine = Engine(store, InstantLLM(Script(estimate_tokens)), surface, make_token_counter())
    try:
        began = time.perf_counter()
        if "connected" in inspect.signature(engine.start).parameters:  # (an engine from before it has none)
            await engine.start(connected=False)
            engine.connect()
        else:
            await engine.start()
        started = time.perf_counter()
        fresh = await store.groups.find_group(FRESH)
        assert fresh is not None
        await engine.post_user_message(fresh, author_name="bob", user_id="bob", text="@planner plan the trip")
        while not surface.agent_posts():
            await asyncio.sleep(0.005)
        answered = time.perf_counter()
        while await unrouted_groups(store):
            await asyncio.sleep(0.2)
        routed = time.perf_counter()
    finally:
        await engine.close()
        await store.close()
    return {"start_s": started - began, "reply_s": answered - started, "routed_s": routed - began,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


async def run(kind: str, target: str, args: argparse.Namespace) -> None:
    built = await build(target, args.groups, args.rows)
    f = await measure(target)
    print(f"{kind:11s} built in {built:5.1f}s; start {f['start_s']:6.2f}s; fresh reply {f['reply_s']:6.2f}s "
          f"after the start; every backlog routed {f['routed_s']:6.1f}s after the start began; "
          f"max RSS {f['rss_mib']:6.1f} MiB", flush=True)


async def main(args: argparse.Namespace) -> None:
    print(f"{args.groups} groups x {args.rows} unrouted rows ({args.groups * args.rows:,} rows) "
          f"and one group without a backlog; {os.cpu_count()} CPUs", flush=True)
    if args.only != "postgresql":
        with tempfile.TemporaryDirectory(prefix="roundtable-backlog-") as tmp:
            await run("sqlite", str(Path(tmp) / "backlog.db"), args)
    if args.only != "sqlite":
        async with scratch_schema(args.pg, f"rt_backlog_{uuid.uuid4().hex[:8]}") as target:
            await run("postgresql", target, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--rows", type=int, default=2000, help="unrouted rows per group")
    parser.add_argument("--pg", default=os.environ.get("ROUNDTABLE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    asyncio.run(main(parser.parse_args()))
