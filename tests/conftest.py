"""Session-wide test set-up: is the PostgreSQL test server there (ROUNDTABLE_TEST_PG)? And each test
finds the secrets registry as the test before it found it.

The store tests run on SQLite and on PostgreSQL (the `place` fixture). Without a server
the PostgreSQL half is skipped, and the summary says so in one line, never silently.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.core.rules.secrets import SECRETS
from tests.fakes.databases import (
    KINDS,
    PG_ENV,
    Place,
    PostgresPlace,
    SqlitePlace,
    pg_unavailable,
    pg_url,
    postgres_place,
    vacuum_catalogs,
)

_PG_SKIP: dict[str, str | None] = {}

# A shell without job control that starts the suite in the background (`.ci/run &`) has it ignore SIGINT, and
# every process a test starts would inherit that: the tests that press Ctrl-C on `roundtable console` or `init`
# would wait for an end that never comes. A handler of our own is not inherited: those processes get the default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pg_skip_reason() -> str | None:
    if "reason" not in _PG_SKIP:
        _PG_SKIP["reason"] = pg_unavailable()
    return _PG_SKIP["reason"]


# With PYTHONDONTWRITEBYTECODE set, each of the hundreds of processes the suite starts (`roundtable`, the bench's
# scripts, the fake servers, the xdist workers) compiled the checkout's modules again: about 0.25 s of CPU each
# (issue 32). For the suite's processes the bytecode is cached outside the checkout instead, in the system's temp
# directory (PYTHONPYCACHEPREFIX: nothing is written in the checkout, as that variable asked). Set here, at import
# in the main process, before xdist starts its workers: they and every process they start inherit it.
if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), f"roundtable-tests-pycache-{os.getuid()}")


# Workers for `-n auto` (pyproject.toml's addopts): one more than the cores this process may use, MAX_WORKERS
# at the most. The tests wait on servers, processes and timers: with one worker a core a quiet 2-core machine
# idled 40% of the default run (4:14-4:45); with three, 2:53 (issue 32; four: 3:25, and eight once made a loaded
# machine miss its waits, issue 28). PYTEST_XDIST_AUTO_NUM_WORKERS (or `-n N`) overrides it.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    asked = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")
    if asked.isdigit():
        return int(asked)
    return max(1, min(len(os.sched_getaffinity(0)) + 1, MAX_WORKERS))


# The longest first (issue 32): xdist hands tests to its workers in collection order, and the files that start
# processes (the bench's runs, the CLI, console, init and secrets tests at the top of tests/) were collected last:
# a run ended with one worker on them and the other idle. They go first now, then the emulator and engine tests;
# the many short pure and store tests (core, storage) fill the end. A stable sort: each file keeps its order.
RUN_FIRST = ("tests/bench/", "tests/test_", "tests/discord/", "tests/engine/", "tests/llm/", "tests/surfaces/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, prefix in enumerate(RUN_FIRST) if item.nodeid.startswith(prefix)), len(RUN_FIRST))

    items.sort(key=rank)


def pytest_sessionstart(session: pytest.Session) -> None:
    pg_skip_reason()  # once, before any event loop runs
    if not hasattr(session.config, "workerinput") and _PG_SKIP["reason"] is None:
        # The main process (not an xdist worker) clears what earlier runs' dropped schemas left in the server's
        # catalogs when nothing else does (`vacuum_catalogs`), beside the run rather than after it.
        _VACUUM.append(threading.Thread(target=_vacuum, name="vacuum-catalogs", daemon=True))
        _VACUUM[0].start()


_VACUUM: list[threading.Thread] = []


def _vacuum() -> None:
    with contextlib.suppress(Exception):  # (no server, or it went away: nothing to clear, nothing to say)
        asyncio.run(vacuum_catalogs(pg_url()))


def pytest_sessionfinish(session: pytest.Session) -> None:
    for thread in _VACUUM:
        thread.join()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    reason = _PG_SKIP.get("reason")
    if reason is None:
        return
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "PostgreSQL" in str(r.longrepr)]
    terminalreporter.write_line(f"PostgreSQL tests skipped ({len(skipped)}): {reason}", yellow=True, bold=True)


@pytest.fixture(autouse=True)
def _secrets_of_the_test() -> Iterator[None]:
    """The process's secrets registry as the test found it, again after it: a bot a test started in
    process registers its tokens, and a registered secret changes what a later test on the same
    worker sees (a reply's tail that may begin a secret is held back while it streams)."""
    before = SECRETS.known()
    yield
    SECRETS.clear()
    SECRETS.register_all(before)


@pytest.fixture(params=KINDS)
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Place]:
    """The database a store test runs on: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield SqlitePlace(tmp_path / "roundtable.db")
        return
    reason = pg_skip_reason()
    if reason is not None:
        pytest.skip(f"PostgreSQL: {reason}")
    async with postgres_place() as found:
        yield found


@pytest.fixture
async def pg() -> AsyncIterator[PostgresPlace]:
    """A fresh PostgreSQL schema, for tests of PostgreSQL alone (skipped without a server)."""
    reason = pg_skip_reason()
    if reason is not None:
        pytest.skip(f"PostgreSQL: {reason}")
    async with postgres_place() as found:
        yield found


__all__ = ["PG_ENV", "pg", "place"]
