"""tests/support's waits and the worker count: every bound has a floor, a condition may be async,
and `-n auto` is one worker more than the cores, 4 at most (issue 28: 8 workers on 2 cores missed their waits;
issue 32: one a core left the machine idle 40% of the run)."""
from __future__ import annotations

import asyncio
import os

import pytest

from tests.conftest import MAX_WORKERS, pytest_xdist_auto_num_workers
from tests.support import WAIT, bound, eventually, eventually_sync, wait_event


@pytest.mark.parametrize("asked, allowed", [(None, WAIT), (0.5, WAIT), (5, WAIT), (WAIT, WAIT), (600, 600)])
def test_every_bound_is_at_least_the_floor(asked: float | None, allowed: float) -> None:
    assert bound(asked) == allowed
    assert WAIT >= 60  # a loaded 2-core machine took over 30 s to start a bot's gateway session


async def test_eventually_returns_the_first_truthy_value_of_a_plain_or_async_condition() -> None:
    seen: list[int] = []

    def plain() -> list[int]:
        seen.append(len(seen))
        return seen if len(seen) >= 3 else []

    async def later() -> str | None:
        await asyncio.sleep(0)
        return "done" if len(seen) >= 3 else None

    assert await eventually(plain, "three polls", interval=0) == [0, 1, 2]
    assert await eventually(later, "an async condition") == "done"
    assert eventually_sync(lambda: 7, "a value") == 7


async def test_wait_event_returns_once_the_event_is_set() -> None:
    event = asyncio.Event()
    asyncio.get_running_loop().call_soon(event.set)
    await wait_event(event, "the event")


def test_auto_workers_are_one_more_than_the_cores_up_to_four(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    for cores, workers in ((1, 2), (2, 3), (3, 4), (4, MAX_WORKERS), (16, MAX_WORKERS)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert pytest_xdist_auto_num_workers(None) == workers  # type: ignore[arg-type]
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert pytest_xdist_auto_num_workers(None) == 3  # type: ignore[arg-type]
    assert MAX_WORKERS == 4
