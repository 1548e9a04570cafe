"""What the tests share for waiting: `eventually` (a condition, polled), and `quiet_period` (the
one named pause, for "nothing more happened" checks that have no later event to wait for).

A bound is only how long a broken test takes to say so: every wait allows at least `WAIT`
seconds, so a machine busy with other work (2 cores, several xdist workers, a bot in a
subprocess starting) never fails a test that would pass. Never assert how long something took.
"""
from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

# The least any wait allows, in seconds. A bot process's gateway session once took over 30 s on a
# loaded 2-core machine (issue 28); failing tests only, so generous costs nothing on a pass.
WAIT = 90.0
# How often a condition is polled.
INTERVAL = 0.01


def bound(timeout: float | None = None) -> float:
    """`timeout`, raised to WAIT at the least (None: WAIT)."""
    return WAIT if timeout is None else max(timeout, WAIT)


@overload
async def eventually(condition: Callable[[], Awaitable[T]], what: str = ..., *,
                     timeout: float | None = ..., interval: float = ...) -> T: ...
@overload
async def eventually(condition: Callable[[], T], what: str = ..., *,
                     timeout: float | None = ..., interval: float = ...) -> T: ...
async def eventually(condition: Callable[[], Any], what: str = "the condition", *,
                     timeout: float | None = None, interval: float = INTERVAL) -> Any:
    """Poll `condition()` (a plain or async callable) until it is truthy; return that value.

    Raises TimeoutError naming `what` after `timeout` seconds (WAIT at the least)."""
    limit = bound(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {limit:g}s waiting for {what}")
        await asyncio.sleep(interval)


def eventually_sync(condition: Callable[[], T], what: str = "the condition", *,
                    timeout: float | None = None, interval: float = INTERVAL) -> T:
    """`eventually` for code without an event loop (a thread, a subprocess read from plain code)."""
    limit = bound(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {limit:g}s waiting for {what}")
        time.sleep(interval)


async def wait_event(event: asyncio.Event, what: str = "the event", *, timeout: float | None = None) -> None:
    """`event.wait()` bounded like every other wait (WAIT at the least)."""
    try:
        await asyncio.wait_for(event.wait(), bound(timeout))
    except TimeoutError:
        raise TimeoutError(f"timed out after {bound(timeout):g}s waiting for {what}") from None


async def quiet_period(seconds: float = 0.3) -> None:
    """Let the code under test run on for `seconds` before a test checks that nothing (more) happened.

    The one fixed pause the tests keep, named so it is never mistaken for a synchroniser: use it
    only where no later event proves the earlier thing had its chance (a test that waits for
    something must use `eventually`). A slow machine can only make such a check pass when it
    should have failed, never the reverse."""
    await asyncio.sleep(seconds)


__all__ = ["INTERVAL", "WAIT", "bound", "eventually", "eventually_sync", "quiet_period", "wait_event"]

