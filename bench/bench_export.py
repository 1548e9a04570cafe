"""Print export figures for a long history: time, file size and peak memory (RSS) per format.

    .venv/bin/python bench/bench_export.py [--messages 100000] [--max-rss 64]

Builds a group of `--messages` rows through the store (a person's task, then three agent replies,
each with its run, its tokens and a selector decision; some replies hold code blocks), then exports
it in each format from a fresh child process, which reports its own peak RSS and the RSS it had
before exporting (imports and the open store). Exports stream a page of rows at a time, so the peak
must not grow with the history: a peak over `--max-rss` MiB is reported and the exit code is 1.
Figures only, never a timed test.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.core.models import Decision, GroupSettings, NewMessage, RunResult, Usage
from storage.store import SqliteStore

CODE = "Here is the plan:\n\n```python\nfor day in range(3):\n    print(f'<b>day {day}</b>')\n```\n"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


async def build(path: Path, n: int) -> None:
    store = await SqliteStore.open(path)
    group = await store.groups.create_group("console:bench", "bench", GroupSettings())
    agents = [await store.roster.add_agent(group.id, name, "role", "prompt") for name in ("planner", "budget", "local")]
    seq = 0
    while seq < n:
        message, _ = await store.thread.append_user_message(group.id, NewMessage(
            "user", "alice", f"Task {seq}: plan **three days** in Tokyo for under $1,500 <script>x</script>",
            author_user_id="alice", token_count=30))
        seq = message.seq
        await store.routing.record_decision(group.id, Decision(seq, "selector", (agents[0].id,), (agents[0].name,),
                                                               ("planner",), 1, None, Usage(500, 2, 0),
                                                               model="gpt-4o-mini"))
        for i, agent in enumerate(agents):
            if seq >= n:
                break
            run = await store.runs.start_run(group.id, agent.id, "group", seq)
            text = (CODE if i == 0 else "") + f"{agent.name} reply to #{seq}: " + "words and more words " * 8
            reply = NewMessage("agent", agent.name, text, author_agent_id=agent.id, source_run_id=run.id,
                               token_count=60)
            finished = await store.runs.finish_run(run.id, RunResult("posted", Usage(1500, 80, 1024), Usage(500, 2, 0),
                                                                     reply=reply, model="gpt-4o-mini"), cap=1000)
            assert finished.reply is not None
            seq = finished.reply.seq
            following = agents[(i + 1) % 3]
            await store.routing.record_decision(group.id, Decision(seq, "selector", (following.id,), (following.name,),
                                                                   (following.name,), 1, 0.9, Usage(520, 2, 0),
                                                                   model="gpt-4o-mini"))
    await store.close()


async def child_export(db: str, fmt: str, out: str) -> None:
    from bot.core.record.export import write_export

    store = await SqliteStore.open(db)
    group = (await store.groups.list_groups())[0]
    before = rss_mib()
    start = time.perf_counter()
    with open(out, "w", encoding="utf-8") as file:
        totals = await write_export(store, group, fmt, file.write)
    elapsed = time.perf_counter() - start
    await store.close()
    print(json.dumps({"seconds": elapsed, "before_mib": before, "peak_mib": rss_mib(), "messages": totals.messages}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--max-rss", type=float, default=64.0, help="MiB; a peak above it exits 1")
    parser.add_argument("--child", nargs=3, metavar=("DB", "FORMAT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child_export(*args.child))
        return 0
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        start = time.perf_counter()
        asyncio.run(build(db, args.messages))
        print(f"built {args.messages:,} messages in {time.perf_counter() - start:.0f}s "
              f"({db.stat().st_size / 2**20:.0f} MiB database)")
        for fmt in ("json", "html", "md"):
            out = Path(tmp) / f"export.{fmt}"
            done = subprocess.run([sys.executable, __file__, "--child", str(db), fmt, str(out)],
                                  capture_output=True, text=True, check=True)
            figures = json.loads(done.stdout)
            worst = max(worst, figures["peak_mib"])
            rate = figures["messages"] / figures["seconds"]
            print(f"{fmt:>4}: {figures['messages']:,} messages in {figures['seconds']:5.1f}s ({rate:,.0f} msg/s), "
                  f"file {out.stat().st_size / 2**20:6.1f} MiB, peak RSS {figures['peak_mib']:5.1f} MiB "
                  f"(before exporting: {figures['before_mib']:5.1f} MiB)")
            os.unlink(out)
    within = worst <= args.max_rss
    print(f"peak RSS {worst:.1f} MiB: {'within' if within else 'OVER'} the bound of {args.max_rss:.0f} MiB")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
