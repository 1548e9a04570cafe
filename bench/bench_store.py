"""Print store figures on SQLite and PostgreSQL: the store's cost of one turn, history reads,
and turns per second from one and from two processes sharing the database.

    .venv/bin/python bench/bench_store.py [--groups 50] [--agents 8] [--rows 20000] [--history 0]
        [--pg postgresql://postgres@127.0.0.1:5432/test] [--only sqlite|postgresql]

A turn is what the engine asks of the store for one agent reply: a person's message, the
selector's decision, a run started and settled with its reply (two rows). The history is built
turn by turn through the store, round-robin over the groups, after `--history` rows per group
written in bulk by SQL (people's rows, for the size of the tables and indexes). History read: the newest 40 rows of
a random group (`messages(after=...)`), p50 and p95. Two processes: each appends turns to its
own half of the groups for `--seconds`, as two bot shards would (SQLite admits one writer at a
time; PostgreSQL serialises writes per group). PostgreSQL runs in a fresh schema that is dropped afterwards. Figures
only, never a timed test.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.places import scratch_schema
from bot.core.models import Decision, GroupSettings, NewMessage, RunResult, Usage
from storage import SqlStore, open_store


async def turn(store: SqlStore, group_id: int, agent_id: int, i: int) -> None:
    message, _ = await store.thread.append_user_message(
        group_id, NewMessage("user", "alice", f"question {i} " + "words " * 20, author_user_id="alice", token_count=30))
    await store.routing.record_decision(group_id, Decision(seq=message.seq, source="selector", agent_ids=(agent_id,),
                                                           agent_names=("a",), usage=Usage(300, 2, 0)))
    run = await store.runs.start_run(group_id, agent_id, "group", message.seq)
    reply = NewMessage("agent", "a", f"answer {i} " + "text " * 60, author_agent_id=agent_id, token_count=80)
    await store.runs.finish_run(run.id, RunResult("posted", Usage(900, 80, 500), reply=reply), cap=100)


async def bulk_history(store: SqlStore, per_group: int) -> None:
    """`per_group` rows in every group, written by one SQL statement (not through the store's API)."""
    if store._sql.name == "postgresql":
        series = "generate_series(1, ?) AS s(x)"
        prefix = ""
    else:
        series = "s"
        prefix = "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < ?) "
    async with store._write() as db:
        await db.exec(
            f"{prefix}INSERT INTO messages (group_id, seq, author_type, author_name, author_user_id, text, confirmed,"
            " token_count, created_at, tokens_before)"
            " SELECT g.id, x, 'user', 'alice', 'alice', 'history ' || x || ' ' || ?, 1, 30, 0, (x - 1) * 31"
            f" FROM groups AS g CROSS JOIN {series}",
            (per_group, "words " * 30) if prefix else ("words " * 30, per_group))  # in the order of the ?s
        await db.exec("UPDATE groups SET latest_seq = ?, tokens_total = ?", (per_group, per_group * 31))
        await db.exec("UPDATE agents SET delivered_through = ?", (per_group,))


async def build(store: SqlStore, groups: int, agents: int, rows: int, history: int
                ) -> tuple[dict[int, list[int]], float, float]:
    roster: dict[int, list[int]] = {}
    for g in range(groups):
        group = await store.groups.create_group(f"bench:{g}", f"g{g}", GroupSettings())
        roster[group.id] = [(await store.roster.add_agent(group.id, f"agent{a}", "r", "p")).id for a in range(agents)]
        await store.leases.acquire_lease(group.id, 3600)
    started = time.perf_counter()
    if history:
        await bulk_history(store, history)
    bulk = time.perf_counter() - started
    ids = list(roster)
    started = time.perf_counter()
    turns = rows // 2
    for i in range(turns):
        group_id = ids[i % len(ids)]
        await turn(store, group_id, roster[group_id][i % agents], i)
    return roster, (time.perf_counter() - started) / turns * 1000, bulk


async def reads(store: SqlStore, ids: list[int], n: int = 300) -> tuple[float, float]:
    rng = random.Random(1)
    times = []
    for _ in range(n):
        group_id = rng.choice(ids)
        latest = (await store.groups.get_group(group_id)).latest_seq
        started = time.perf_counter()
        await store.thread.messages(group_id, after=max(0, latest - 40))
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95)]


def worker(target: str, ids: list[int], seconds: float) -> None:
    async def go() -> int:
        store = await open_store(target)
        done = 0
        try:
            roster = {g: [a.id for a in await store.roster.list_agents(g)] for g in ids}
            for g in ids:
                await store.leases.acquire_lease(g, 3600)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                g = ids[done % len(ids)]
                await turn(store, g, roster[g][done % len(roster[g])], done)
                done += 1
        finally:
            await store.close()
        return done
    print(json.dumps({"turns": asyncio.run(go())}))


def throughput(target: str, ids: list[int], processes: int, seconds: float) -> float:
    shares = [ids[i::processes] for i in range(processes)]
    children = [subprocess.Popen([sys.executable, __file__, "--worker", target, "--seconds", str(seconds),
                                  "--ids", ",".join(map(str, share))], stdout=subprocess.PIPE, text=True)
                for share in shares]
    total: int = sum(json.loads(child.communicate()[0])["turns"] for child in children)
    return total / seconds


async def measure(kind: str, target: str, args: argparse.Namespace) -> dict[str, float]:
    store = await open_store(target)
    try:
        roster, per_turn, bulk = await build(store, args.groups, args.agents, args.rows, args.history)
        p50, p95 = await reads(store, list(roster))
        await store.leases.release_leases()
    finally:
        await store.close()
    ids = list(roster)
    one = throughput(target, ids, 1, args.seconds)
    two = throughput(target, ids, 2, args.seconds)
    return {"bulk_s": bulk, "turn_ms": per_turn, "read_p50_ms": p50, "read_p95_ms": p95,
            "turns_s_1proc": one, "turns_s_2proc": two}


async def main(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "sqlite"):
            results["sqlite"] = await measure("sqlite", str(Path(tmp) / "bench.db"), args)
    if args.only in (None, "postgresql"):
        async with scratch_schema(args.pg, f"rt_bench_{uuid.uuid4().hex[:8]}") as target:
            results["postgresql"] = await measure("postgresql", target, args)
    print(f"{args.groups} groups x {args.agents} agents, {args.groups * args.history} rows in bulk"
          f" then {args.rows} through the store; {os.cpu_count()} CPUs")
    print(f"{'':12}{'bulk (s)':>9}{'turn (ms)':>10}{'read p50':>10}{'read p95':>10}"
          f"{'turns/s 1p':>12}{'turns/s 2p':>12}")
    for kind, r in results.items():
        print(f"{kind:12}{r['bulk_s']:9.1f}{r['turn_ms']:10.2f}{r['read_p50_ms']:10.2f}{r['read_p95_ms']:10.2f}"
              f"{r['turns_s_1proc']:12.0f}{r['turns_s_2proc']:12.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--history", type=int, default=0, help="rows per group written in bulk first")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pg", default=os.environ.get("ROUNDTABLE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.worker:
        worker(parsed.worker, [int(i) for i in parsed.ids.split(",")], parsed.seconds)
    else:
        asyncio.run(main(parsed))
