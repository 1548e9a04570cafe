"""The engine's own cost, in-process with an instant LLM (no HTTP): figures only, nothing passes or fails here.

Per history size n (a real SQLite file in a temporary directory, or with `pg_url` a fresh
schema of that PostgreSQL database, `bench_<pid>_<n>`, dropped afterwards):

- append: n person messages stored one by one (`store.append_user_message`), msg/s;
- route: a first engine routes that history once (all but the newest superseded; the
  selector answers TERMINATE so nobody runs), msg/s; then it is closed;
- turns: `repeats` times, in a new Python process each (a real fresh start: nothing loaded
  yet, the engine's token counter included), an engine is started (`Engine.start`, then
  idle), a person posts and the agents take `turns` turns (the selector rotates; replies
  are the Tokyo scenario's, ~150 tokens by the 4-characters estimate, so the bench itself
  loads no tokenizer). A turn's overhead is the time between two consecutive agent posts
  reaching the surface (the first from just before the person's post) minus the time spent
  inside LLM calls. p50/p99 over turns 2..T of every repeat; "first" and "tenth" are the
  medians over the repeats of turn 1 and turn 10; "warm" is the same first turn once more
  in the same process afterwards (a person posts a second task; the time to the first agent
  post), so first vs warm is what starting costs and warm vs tenth what storing and routing
  the person's own message costs; posts/s is agent posts over the timed wall time;
- max RSS of those timed processes.

`runs_mid_run()`: in "tags" mode (every agent answers a person), the first participant
call is held until 100 more person messages are stored; then each agent should run once.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fakes import InstantLLM, RecordingSurface
from bench.places import scratch_schema
from bench.scenario import AGENTS, PERSON, TASK, Script
from bot.core.models import GroupSettings, NewMessage
from bot.core.runtime.engine import Engine
from bot.llm.tokens import estimate_tokens, make_token_counter
from storage import SqlStore, open_store
from storage.store import SqliteStore

DEFAULT_SIZES = (1000, 10000, 50000)
QUICK_SIZES = (1000, 5000)
TURNS = 50
QUICK_TURNS = 30
REPEATS = 3
MID_RUN_MESSAGES = 100
TIMEOUT = 900.0


SQLITE = "sqlite"
POSTGRESQL = "postgresql"
_SCHEMAS = itertools.count(1)


@dataclass
class SizeFigures:
    size: int
    database: str = SQLITE  # "sqlite" or "postgresql"
    append_per_s: float = 0.0
    route_per_s: float = 0.0
    overhead_ms: list[float] = field(default_factory=list)  # turns 2..T of every repeat
    first_ms: list[float] = field(default_factory=list)  # turn 1 of each repeat
    tenth_ms: list[float] = field(default_factory=list)  # turn 10 of each repeat
    warm_first_ms: list[float] = field(default_factory=list)  # turn 1 of a second task, same process
    posts_per_s: float = 0.0
    rss_mib: float = 0.0
    note: str = ""

    def percentile(self, p: float) -> float:
        return percentile(self.overhead_ms, p)

    @property
    def first(self) -> float:
        return statistics.median(self.first_ms) if self.first_ms else float("nan")

    @property
    def tenth(self) -> float:
        return statistics.median(self.tenth_ms) if self.tenth_ms else float("nan")

    @property
    def warm_first(self) -> float:
        return statistics.median(self.warm_first_ms) if self.warm_first_ms else float("nan")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def _engine(store: SqlStore, llm: InstantLLM, surface: RecordingSurface) -> Engine:
    """An engine over the bench's surface, connected from the start: the recording surface is always
    there, and an engine not connected never routes a backlog (a history longer than a routing chunk
    waited forever: `roundtable bench` hung at "history 1,000")."""
    engine = Engine(store, llm, surface, make_token_counter(), selector_model="bench-model")
    engine.connect()
    return engine


async def _setup(store: SqlStore, key: str, settings: GroupSettings) -> int:
    group = await store.groups.create_group(key, key, settings)
    for spec in AGENTS:
        await store.roster.add_agent(group.id, spec.name, spec.role, spec.system_prompt)
    return group.id


async def _fill(store: SqlStore, group_id: int, n: int) -> float:
    """n person messages appended one at a time; their rate per second."""
    start = time.perf_counter()
    for i in range(n):
        text = f"message {i}: " + "words " * 20
        await store.thread.append_user_message(group_id, NewMessage("user", PERSON, text, author_user_id=PERSON,
                                                                    token_count=30))
    return n / max(time.perf_counter() - start, 1e-9)


async def timed_turns(db: str, group_id: int, turns: int, repeat: int) -> dict[str, Any]:
    """One fresh engine over the store at `db` (a SQLite path or a PostgreSQL URL): start, a
    person posts, `turns` turns.

    Returns {"overheads": [ms per turn], "wall": seconds, "posts": n, "rss_mib": ...}."""
    store = await open_store(db)
    llm = InstantLLM(Script(estimate_tokens))
    surface = RecordingSurface()
    engine = _engine(store, llm, surface)
    try:
        await engine.start()
        await engine.wait_idle(group_id, TIMEOUT)
        group = await store.groups.get_group(group_id)
        begin = time.perf_counter()
        await engine.post_user_message(group, author_name=PERSON, user_id=PERSON, text=f"{TASK} (round {repeat})")
        await engine.wait_idle(group_id, TIMEOUT)
        posts = [t for t, _ in surface.agent_posts() if t >= begin]
        # The same first turn again in this warm process: a person posts, one agent answers.
        surface.agent_posted.clear()
        again = time.perf_counter()
        await engine.post_user_message(group, author_name=PERSON, user_id=PERSON,
                                       text=f"{TASK} (round {repeat}, again)")
        await asyncio.wait_for(surface.agent_posted.wait(), TIMEOUT)
        warm = [t for t, _ in surface.agent_posts() if t >= again][:1]
        await engine.stops.episode(group)
        await engine.wait_idle(group_id, TIMEOUT)
    finally:
        await engine.close()
        await store.close()
    edges = [begin, *posts]
    overheads = [1000 * ((b - a) - llm.time_inside(a, b)) for a, b in itertools.pairwise(edges)]
    warm_first = [1000 * ((t - again) - llm.time_inside(again, t)) for t in warm]
    return {"overheads": overheads, "warm_first": warm_first, "wall": (posts[-1] - begin) if posts else 0.0,
            "posts": len(posts), "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


async def _cold_start(db: str, group_id: int, turns: int, repeat: int) -> dict[str, Any]:
    """`timed_turns` in a new Python process: a real fresh start (nothing loaded or cached yet)."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.engine_figures", db, str(group_id), str(turns), str(repeat),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:  # reaped here, not left to the garbage collector
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the timed engine process failed ({proc.returncode}): {tail[0]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@contextlib.asynccontextmanager
async def _database(pg_url: str | None) -> AsyncIterator[str]:
    """Where one size is measured: a SQLite file in a temporary directory, or (with `pg_url`) a
    fresh schema of that PostgreSQL database, dropped afterwards. Yields what `open_store` takes."""
    if pg_url is None:
        with tempfile.TemporaryDirectory(prefix="roundtable-bench-") as tmp:
            yield str(Path(tmp) / "bench.db")
        return
    async with scratch_schema(pg_url, f"bench_{os.getpid()}_{next(_SCHEMAS)}") as target:
        yield target


async def measure_size(n: int, turns: int = TURNS, repeats: int = REPEATS, pg_url: str | None = None) -> SizeFigures:
    """The figures of history size `n` on a SQLite file, or with `pg_url` on PostgreSQL."""
    figures = SizeFigures(n, POSTGRESQL if pg_url else SQLITE)
    async with _database(pg_url) as db:
        store = await open_store(db)
        try:
            group_id = await _setup(store, "bench:engine", GroupSettings(max_agent_turns=turns))
            figures.append_per_s = await _fill(store, group_id, n)
            router = InstantLLM(Script(estimate_tokens), selector_override="TERMINATE")
            engine = _engine(store, router, RecordingSurface())
            try:
                start = time.perf_counter()
                engine.wake(group_id)  # route the filled history once, like a long-lived channel
                await engine.wait_idle(group_id, TIMEOUT)
                figures.route_per_s = n / max(time.perf_counter() - start, 1e-9)
            finally:
                await engine.close()
        finally:
            await store.close()
        wall = 0.0
        posted = 0
        for r in range(repeats):
            result = await _cold_start(db, group_id, turns, r + 1)
            overheads = [float(x) for x in result["overheads"]]
            if result["posts"] != turns:
                figures.note = f"{result['posts']} of {turns} turns ran"
            if overheads:
                figures.first_ms.append(overheads[0])
                figures.overhead_ms.extend(overheads[1:])
            if len(overheads) >= 10:
                figures.tenth_ms.append(overheads[9])
            figures.warm_first_ms.extend(float(x) for x in result.get("warm_first", []))
            wall += float(result["wall"])
            posted += int(result["posts"])
            figures.rss_mib = max(figures.rss_mib, float(result["rss_mib"]))
        figures.posts_per_s = posted / wall if wall > 0 else 0.0
    return figures


@dataclass
class MidRun:
    messages: int
    held_agent: str
    runs_after: dict[str, int]  # participant calls per agent after the held one was released
    note: str = ""

    @property
    def most(self) -> int:
        return max(self.runs_after.values(), default=0)

    @property
    def met(self) -> bool:
        return all(self.runs_after.get(spec.name, 0) == 1 for spec in AGENTS)


async def runs_mid_run(messages: int = MID_RUN_MESSAGES) -> MidRun:
    """Hold the first participant call while `messages` person messages are posted; count the runs after it."""
    with tempfile.TemporaryDirectory(prefix="roundtable-bench-") as tmp:
        store = await SqliteStore.open(str(Path(tmp) / "bench.db"))
        hold = asyncio.Event()
        llm = InstantLLM(Script(estimate_tokens), hold=hold)
        engine = _engine(store, llm, RecordingSurface())
        try:
            group_id = await _setup(store, "bench:midrun", GroupSettings(mode="tags", max_agent_turns=10))
            await engine.post_user_message(await store.groups.get_group(group_id), author_name=PERSON, user_id=PERSON,
                                           text=TASK)
            await asyncio.wait_for(llm.entered.wait(), TIMEOUT)
            held = next(c.agent for c in llm.calls if c.kind == "participant")
            before = len(llm.calls)
            for i in range(messages):
                await engine.post_user_message(await store.groups.get_group(group_id), author_name=PERSON,
                                               user_id=PERSON,
                                               text=f"one more thing ({i + 1}): keep it cheap")
            hold.set()
            await engine.wait_idle(group_id, TIMEOUT)
            runs: dict[str, int] = {spec.name: 0 for spec in AGENTS}
            for c in llm.calls[before:]:
                if c.kind == "participant" and c.agent is not None:
                    runs[c.agent] = runs.get(c.agent, 0) + 1
            # the held call itself counts for its agent's first run, not for the messages that arrived during it
            return MidRun(messages, held or "?", runs)
        finally:
            hold.set()
            await engine.close()
            await store.close()


def _timed_main(argv: list[str]) -> None:
    """`python -m bench.engine_figures DB GROUP_ID TURNS REPEAT`: one cold start; prints its figures as JSON."""
    import logging

    logging.basicConfig(level=logging.ERROR)
    db, group_id, turns, repeat = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    print(json.dumps(asyncio.run(timed_turns(db, group_id, turns, repeat))))


if __name__ == "__main__":
    _timed_main(sys.argv[1:])
