"""A per-group background loop: woken, it drains until nothing is left, then rests.

The dispatcher (routing and runs) and the outbox (showing committed rows) are
both one of these. A failure is logged and retried with the engine's backoff (`RetryPolicy`; a
database that cannot be reached, which the store logs itself, quietly and at
least every `UNREACHABLE_RETRY` seconds);
`LeaseLost` (another process runs the group now) stops the loop for good.
"""
from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from dataclasses import dataclass

from bot.core.errors import LeaseLost, StoreUnavailable

log = logging.getLogger(__name__)

UNREACHABLE_RETRY = 2.0  # seconds between two tries at most while the database cannot be reached

Spawn = Callable[[Coroutine[object, object, object], str], asyncio.Task[object]]  # the engine's kept background tasks


@dataclass(frozen=True)
class RetryPolicy:
    """Seconds to wait after the n-th failure in a row: first, first*factor, ... at most `cap`."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 60.0

    def delay(self, failures: int, hint: float | None = None) -> float:
        base = min(self.cap, self.first * self.factor ** max(0, failures - 1))
        return min(self.cap, max(base, hint or 0.0))


class GroupWorker(ABC):
    """`retry`: the backoff after failures; `lost(group_id)`: another process runs the group now
    (the engine stops running it here)."""

    kind = "worker"  # in task names and log lines

    def __init__(self, group_id: int, *, retry: RetryPolicy, lost: Callable[[int], None]) -> None:
        self.retry = retry
        self.lost = lost
        self.group_id = group_id
        self.idle = asyncio.Event()  # set when a pass found nothing left and nobody woke it since
        self.task: asyncio.Task[object] | None = None
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self.idle.clear()
        self._wake.set()

    @abstractmethod
    async def drain(self) -> None:
        """Do everything there is to do now."""

    async def loop(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.drain()
                failures = 0
            except asyncio.CancelledError:
                raise
            except LeaseLost:
                log.warning("group=%s: another process runs this group now; its %s stops here",
                            self.group_id, self.kind)
                self.lost(self.group_id)
                return
            except StoreUnavailable as exc:  # the store logged the outage; tried often, to be back soon after it
                failures += 1
                delay = min(self.retry.delay(failures), UNREACHABLE_RETRY)
                log.debug("group=%s %s waits for the database (%s); retrying in %.1fs",
                          self.group_id, self.kind, exc, delay)
                await asyncio.sleep(delay)
                self._wake.set()
                continue
            except Exception:
                failures += 1
                delay = self.retry.delay(failures)
                log.exception("group=%s %s failed; retrying in %.1fs", self.group_id, self.kind, delay)
                await asyncio.sleep(delay)
                self._wake.set()
                continue
            if not self._wake.is_set():
                self.idle.set()
