"""A per-group background loop: woken, it drains until nothing is left, then rests.

The dispatcher (routing and runs) and the outbox (showing committed rows) are
both one of these. A failure is logged and retried with the engine's backoff (`RetryPolicy`; a
database that cannot be reached, which the store logs itself, quietly and at
least every `RetryPolicy.unreachable` seconds, and at once when the store's health hears that an
operation reached it again: `wait_for_store`);
`LeaseLost` (another process runs the group now) stops the loop for good.
Also here, shared by the intake and the outbox: `tell_episode` (the surface told that an
episode started or ended, never raising).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from dataclasses import dataclass

from bot.core.errors import DeliveryError, LeaseLost, StoreBusy, StoreError, StoreUnavailable, StoreUnwritable
from bot.core.models import Episode, Group
from bot.core.ports import Surface
from bot.core.rules.store_health import StoreHealth

log = logging.getLogger(__name__)

UNREACHABLE_RETRY = 2.0  # seconds between two tries at most while the database cannot be reached

Spawn = Callable[[Coroutine[object, object, object], str], asyncio.Task[object]]  # the engine's kept background tasks


@dataclass(frozen=True)
class RetryPolicy:
    """Seconds to wait after the n-th failure in a row: first, first*factor, ... at most `cap`;
    at most `unreachable` while the database cannot be reached (woken sooner when it is back)."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 60.0
    unreachable: float = UNREACHABLE_RETRY

    def delay(self, failures: int, hint: float | None = None) -> float:
        """`hint`: the other side's own wait (a 429's Retry-After), honoured as given: neither
        lengthened by the back-off nor cut to the cap."""
        if hint is not None:
            return max(0.0, hint)
        return min(self.cap, self.first * self.factor ** max(0, failures - 1))

    def store_delay(self, failures: int, exc: BaseException) -> float:
        """The longest wait before trying a store operation again after `exc`, its n-th failure in a row."""
        delay = self.delay(failures)
        return min(delay, self.unreachable) if isinstance(exc, StoreUnavailable) else delay


async def wait_for_store(health: StoreHealth, exc: StoreError, delay: float) -> None:
    """Wait up to `delay` seconds before trying a store operation that failed with `exc` again, less
    when the store shows it works again meanwhile (its server answers again, or it takes writes
    again): what waits is tried at once, not at its next back-off step."""
    if isinstance(exc, StoreUnavailable):
        await health.until_reachable(delay)
    elif isinstance(exc, StoreUnwritable):
        await health.until_writable(delay)
    else:  # locked by another process: its transaction ends in its own time
        await asyncio.sleep(delay)


async def tell_episode(surface: Surface, group: Group, episode: Episode) -> None:
    """Tell the surface that `episode` started or ended (never raises)."""
    try:
        await surface.episode_updated(group, episode)
    except (StoreError, DeliveryError) as exc:  # expected (the database or Discord away): one line
        log.warning("group=%s could not show episode %s state: %s", group.id, episode.id, exc)
    except Exception:  # a reaction failing must never stop the chat
        log.warning("group=%s could not show episode %s state", group.id, episode.id, exc_info=True)


class Pulse:
    """Something recovered (a post went through): whoever waits on it (`wait`) stops waiting."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        """Until the next `fire`, at most `timeout` seconds."""
        event = self._event
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # (not wait_for: on Python 3.11 it can lose a cancel)
                await event.wait()


class GroupWorker(ABC):
    """`retry`: the backoff after failures; `lost(group_id)`: another process runs the group now
    (the engine stops running the group here); `spawn`: starts the loop as a kept background task."""

    kind = "worker"  # in task names and log lines

    def __init__(self, group_id: int, *, retry: RetryPolicy, lost: Callable[[int], None], spawn: Spawn,
                 health: StoreHealth | None = None) -> None:
        """`health`: the store's, which wakes a loop waiting for the database when it is back."""
        self.retry = retry
        self.health = health or StoreHealth()
        self.lost = lost
        self.group_id = group_id
        self.idle = asyncio.Event()  # set when a pass found nothing left and nobody woke it since
        self.task: asyncio.Task[object] | None = None
        self.stopped = False  # the group is not run here any more: the loop is never started again
        self._spawn = spawn
        self._wake = asyncio.Event()

    def start(self) -> None:
        """Run the loop (woken once) when it does not run yet, or ended; never once `stop`ped."""
        if self.stopped or (self.task is not None and not self.task.done()):
            return
        self.task = self._spawn(self.loop(), f"{self.kind}-{self.group_id}")
        self._nudge()

    def wake(self) -> None:
        """Something changed: drain again (the loop started first when it does not run)."""
        if self.stopped:
            return
        self.start()
        self._nudge()

    def stop(self) -> None:
        """Stop the loop for good (the group is dropped here, or the process closes)."""
        self.stopped = True
        if self.task is not None:
            self.task.cancel()

    def _nudge(self) -> None:
        self.idle.clear()
        self._wake.set()

    @abstractmethod
    async def drain(self) -> None:
        """Do everything there is to do now."""

    async def loop(self) -> None:
        failures = 0
        # Not `while True`: a pass that lost the cancel `stop` sent (a part swallowing it; Python 3.11's
        # `asyncio.wait_for` does when what it waits for ends in the same moment) must not go back to
        # waiting for work: `Engine.close` waits for this task.
        while not self.stopped:
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
                delay = self.retry.store_delay(failures, exc)
                log.debug("group=%s %s waits for the database (%s); retrying in %.1fs at the latest",
                          self.group_id, self.kind, exc, delay)
                await wait_for_store(self.health, exc, delay)
                self._wake.set()
                continue
            except (StoreBusy, StoreUnwritable) as exc:  # expected (another process's lock, a full disk): one line
                failures += 1
                delay = self.retry.delay(failures)
                log.warning("group=%s %s waits for the database (%s); retrying in %.1fs at the latest",
                            self.group_id, self.kind, exc, delay)
                await wait_for_store(self.health, exc, delay)
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
