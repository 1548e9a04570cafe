"""Print engine figures: append throughput, per-turn overhead at several history sizes, memory.

    .venv/bin/python bench/bench_engine.py [--sizes 1000,10000,50000]

Each size runs in this one process, so max RSS only grows across sizes. Uses a real
SQLite file in a temporary directory and the scripted LLM fake (no
network), so the figures are the engine's and the store's own cost per turn.
Figures only: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.adapters.tokens import make_token_counter  # noqa: E402
from bot.core.engine import Engine  # noqa: E402
from bot.core.models import GroupSettings, NewMessage  # noqa: E402
from storage.store import SqliteStore  # noqa: E402
from tests.fakes.scripted_llm import ScriptedLLM  # noqa: E402
from tests.fakes.surface import RecordingSurface  # noqa: E402


async def fill(store: SqliteStore, group_id: int, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        text = f"message {i}: " + "words " * 20
        await store.append_user_message(group_id, NewMessage("user", "alice", text, author_user_id="alice",
                                                             token_count=30))
    return time.perf_counter() - start


async def one_size(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = await SqliteStore.open(Path(tmp) / "bench.db")
        llm = ScriptedLLM(selector_default="planner", default_agent_reply=lambda name, k: f"{name} reply {k}")
        engine = Engine(store, llm, RecordingSurface(), make_token_counter())
        group = await store.create_group("bench", "bench", GroupSettings(max_agent_turns=10))
        for name in ("planner", "budget", "local"):
            await store.add_agent(group.id, name, "role", "prompt")
        seconds = await fill(store, group.id, n)
        start = time.perf_counter()
        engine.wake(group.id)  # route the filled history once (all superseded), like a long-lived channel
        await engine.wait_idle(group.id, 600)
        routed = time.perf_counter() - start
        llm.history.clear()
        start = time.perf_counter()
        await engine.post_user_message(await store.get_group(group.id), author_name="alice", user_id="alice",
                                       text="go")
        await engine.wait_idle(group.id, 600)
        elapsed = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        turns = len(llm.participant_order)
        print(f"history {n:>6}: append {n / seconds:6.0f} msg/s, route {n / routed:6.0f} msg/s | "
              f"{turns} turns (+{turns} selector calls) "
              f"in {elapsed:6.2f}s = {1000 * elapsed / max(turns, 1):7.1f} ms/turn | max RSS {peak / 2**20:6.1f} MiB")
        await engine.close()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    for n in sizes:
        asyncio.run(one_size(n))


if __name__ == "__main__":
    main()
