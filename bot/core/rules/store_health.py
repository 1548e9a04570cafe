"""Whether the database takes writes: one tracker per store (`StoreHealth`), told the outcome of
every write transaction by the store, and watched by the engine, which tells people.

A write the database refuses for a reason someone has to fix (`StoreUnwritable`: a full disk, a
read-only file, a write the server refused) starts a *streak*. The streak becomes an *outage*
once it has lasted `after` seconds with nothing fixed (checked by a timer, and at every failure);
the outage ends when the database shows it takes writes again. Other writes may well succeed
meanwhile: on a full SQLite file an update in place still works while every insert fails. So
each failure is keyed by the statement that failed (a refused commit: the statements of its
transaction; a refused BEGIN: any write), and the streak ends when a transaction that ran one
of those statements commits, or when writes commit and none has failed for `quiet_after`
seconds (longer than the engine's longest wait between two tries of a write).

A database server that cannot be reached (PostgreSQL restarting: the store calls `unreachable`)
is a streak too, with the same rule: told once when it has lasted `after` seconds, once at its
end, which is the first operation that reaches the server again (`reachable`). Whoever waits to
try the store again (`until_back`) is woken at that moment, not at its next back-off step.

Subscribers hear of an outage twice: when it starts and when it ends (`fixed_at` set); once
each per outage, never per failed write. A streak that ends before `after` is never told.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

log = logging.getLogger(__name__)

UNWRITABLE_AFTER = 10.0  # seconds of failing writes before people are told
QUIET_AFTER = 120.0  # writes commit and none failed this long: the database takes writes again
AGAIN_SOON = 0.05  # seconds before trying again an operation the server failed after it answered again
ANY_WRITE = "*"  # the key of a failure no statement is to blame for (the transaction could not begin)
SERVER = "server"  # the key of the failure to reach the database server at all
UNREACHABLE = "the database server cannot be reached"  # the outage's reason, for people


@dataclass(frozen=True)
class Outage:
    since: float  # the clock's time of the first failed write
    reason: str  # what is wrong, for people ("the database file or its disk is full")
    fixed_at: float | None = None  # set in the notice that it ended


Listener = Callable[[Outage], None]


class StoreHealth:
    def __init__(self, *, after: float = UNWRITABLE_AFTER, quiet_after: float = QUIET_AFTER,
                 clock: Callable[[], float] = time.time) -> None:
        """`after`: seconds of failing writes before an outage is told; `clock`: the time
        (seconds) for `Outage.since` and for measuring both waits."""
        self.after = after
        self.quiet_after = quiet_after
        self.clock = clock
        self.outage: Outage | None = None  # while people have been told the database takes no writes
        self._failing: set[str] = set()  # statements that failed in this streak
        self._since: float | None = None
        self._last_failure = 0.0
        self._reason = ""
        self._streak = 0  # which streak a timer was armed for
        self._timer: asyncio.TimerHandle | None = None
        self._listeners: list[Listener] = []
        self._writable = asyncio.Event()  # set while no streak is on
        self._writable.set()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(outage)` when an outage starts and when it ends; returns the unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    @property
    def failing(self) -> bool:
        """A write failed and nothing has shown since that the database takes writes again."""
        return bool(self._failing)

    @property
    def down(self) -> bool:
        """The database server could not be reached, and no operation has reached it since."""
        return SERVER in self._failing

    async def until_writable(self, timeout: float) -> None:
        """Wait `timeout` seconds before trying a refused write again, less when the database takes
        writes again meanwhile (another write showed it): what waits is stored at once."""
        if not self.failing:  # nothing to wait for but the time (the refusal was not a write's)
            await asyncio.sleep(timeout)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # (not wait_for: on Python 3.11 it can lose a cancel)
                await self._writable.wait()

    async def until_reachable(self, timeout: float) -> None:
        """Wait `timeout` seconds before trying an operation the server could not take again, less
        when an operation reaches the server meanwhile; hardly any when one has reached it already
        (the server answers: try again now, after `AGAIN_SOON` so that nothing can spin)."""
        if not self.down:
            await asyncio.sleep(min(timeout, AGAIN_SOON))
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._writable.wait()

    # what the store says ---------------------------------------------------
    def unreachable(self, detail: str) -> None:
        """An operation could not reach the database server (`detail`: why, for the log)."""
        log.debug("the database server cannot be reached: %s", detail)
        self.failed(UNREACHABLE, (SERVER,))

    def reachable(self) -> None:
        """An operation reached the database server again: the streak it started ends (unless
        writes still fail for another reason), and whoever waits for it tries again now."""
        if SERVER not in self._failing:
            return
        self._failing.discard(SERVER)
        if not self._failing:
            self._ended()

    def failed(self, reason: str, statements: Collection[str]) -> None:
        """A write transaction was refused (`reason`, for people); `statements`: the statement
        that failed, or (a refused commit) those the transaction ran; none: it could not begin."""
        now = self.clock()
        if self._since is None:
            self._since = now
            self._streak += 1
            self._writable.clear()
            self._arm()
        self._failing.update(statements or (ANY_WRITE,))
        self._last_failure = now
        self._reason = reason
        self.check()

    def committed(self, statements: Collection[str]) -> None:
        """A write transaction that ran `statements` committed."""
        if not self._failing:
            return
        if ANY_WRITE not in self._failing and self._failing.isdisjoint(statements) \
                and self.clock() - self._last_failure < self.quiet_after:
            return  # another kind of write works; the one that failed may not yet
        self._ended()

    def _ended(self) -> None:
        outage, since, now = self.outage, self._since or 0.0, self.clock()
        self._end_streak()
        if outage is None:
            log.info("the database takes writes again (they failed for %s)", span(now - since))
            return
        log.warning("the database takes writes again, after %s", span(now - since))
        self._tell(replace(outage, fixed_at=now))

    def check(self) -> None:
        """Start the outage when the streak has lasted `after` seconds."""
        if self.outage is None and self._since is not None and self.clock() - self._since >= self.after:
            self._start_outage(self._since)

    # inside ------------------------------------------------------------------
    def _arm(self) -> None:
        """The timer that starts the outage `after` seconds into the streak, should no write
        fail (and so call `check`) at that moment."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): `check` at each failure only
            return
        streak = self._streak
        self._timer = loop.call_later(self.after, lambda: self._due(streak))

    def _due(self, streak: int) -> None:
        self._timer = None
        if streak == self._streak and self._since is not None and self.outage is None:
            self._start_outage(self._since)

    def _start_outage(self, since: float) -> None:
        self.outage = Outage(since, self._reason)
        log.error("the database takes no writes (%s) for %s now; people are told, and what they post is "
                  "stored once it works again", self._reason, span(self.clock() - since))
        self._tell(self.outage)

    def _end_streak(self) -> None:
        self._writable.set()
        self._failing.clear()
        self._since = None
        self.outage = None
        self._streak += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tell(self, outage: Outage) -> None:
        for listener in list(self._listeners):
            try:
                listener(outage)
            except Exception:  # one subscriber's bug must not stop the store's write path
                log.exception("a listener of the database's health failed")


# what people read ---------------------------------------------------------------
def span(seconds: float) -> str:
    """A duration in words: `45 s`, `3 min`, `1 h 5 min`."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{round(whole / 60)} min"
    hours, minutes = divmod(round(whole / 60), 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def outage_notice(outage: Outage) -> str:
    """Told once where people are when an outage starts."""
    return (f"I can't save anything to my database: {outage.reason}. Messages posted now are not lost: they are "
            "saved and answered as soon as it works again. (This notice is posted directly and is not in the "
            "history: the database cannot store it.)")


def fixed_notice(outage: Outage) -> str:
    """Told once when the outage has ended."""
    lasted = span((outage.fixed_at or outage.since) - outage.since)
    return f"My database works again (it could not be written for {lasted}): messages posted meanwhile are " \
           "saved and answered now."


def outage_status(outage: Outage, now: float) -> str:
    """The line of `/roundtable status` while the outage lasts."""
    return (f"nothing can be saved for {span(now - outage.since)} now: {outage.reason}; messages posted "
            "meanwhile are saved and answered once it works again")
