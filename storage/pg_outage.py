"""Whether this process reaches its PostgreSQL server (`ServerOutage`), and which asyncpg failures
mean it does not (`server_gone`).

A restart of the server (or a cut network) fails every operation in flight and every new one
until the server is back. That is expected, not a bug: the store says so in one WARNING line
when the first operation fails and one when an operation begun after that reaches the server
again; the operations that fail meanwhile raise `StoreUnavailable`, which the engine's loops
retry quietly (they log them at DEBUG). An operation that began before the outage and ends
after its start says nothing about its end, so a late success never ends it early.

A restart also leaves connections in the pool that the server has ended but asyncpg has not
seen close yet: the server's "terminating connection" arrives on an idle connection, asyncpg
puts its protocol in a state that waits for an answer that never comes, and the next operation
on it fails with "cannot switch to state N; another operation (2) is in progress" (no second
operation runs on it: the first one was the server's). The backend closes such a connection,
has every other pooled one replaced when next taken (the server ended them too), and runs that
first statement once more on a fresh connection (`storage.pg`).

The store's health (`bot.core.rules.store_health.StoreHealth`, `report_to`) hears of both ends:
people are told of an outage that lasts, and whatever waits to try the store again is woken the
moment an operation reaches the server. While the server is away the backend tries to reach it
every `PROBE_EVERY` seconds itself (`storage.pg`), so its return is noticed even when every
other operation waits.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import asyncpg

from bot.core.rules.secrets import mask_error
from bot.core.rules.store_health import StoreHealth

log = logging.getLogger("storage.pg")

# What an operation meets when the server is gone or going: a refused or reset connection, a
# connection closed under it, the server's own "terminating connection"/"shutting down"/"starting
# up" (57P0x), a protocol left waiting by an ended connection.
GONE = (OSError, asyncio.TimeoutError, asyncpg.PostgresConnectionError, asyncpg.OperatorInterventionError,
        asyncpg.InternalClientError)


def server_gone(exc: BaseException) -> bool:
    """Whether `exc` means the connection or the server is gone (not a bad statement). asyncpg's
    InterfaceError counts only when it is about a closed connection (it also means misuse)."""
    return isinstance(exc, GONE) or (isinstance(exc, asyncpg.InterfaceError) and "closed" in str(exc))


def gone_reason(exc: BaseException) -> str:
    """One line on why, for the log: the protocol's own words are no help for a connection the
    server ended while it sat in the pool."""
    if isinstance(exc, asyncpg.InternalClientError):
        return "the server ended the connection"
    return mask_error((str(exc).strip() or type(exc).__name__).splitlines()[0])


class ServerOutage:
    """One WARNING when operations start failing to reach the server, one when they reach it again."""

    def __init__(self, label: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label  # the database, without its password
        self.clock = clock
        self.since: float | None = None  # when the first operation failed; None while the server answers
        self.failures = 0
        self.health: StoreHealth | None = None  # told of both ends (`report_to`)
        self.on_down: Callable[[], None] | None = None  # called when operations start failing (the backend's probe)

    def report_to(self, health: StoreHealth) -> None:
        self.health = health

    @property
    def down(self) -> bool:
        return self.since is not None

    def began(self) -> float:
        """An operation begins: the time to hand to `reached` when it got through."""
        return self.clock()

    def failed(self, reason: str) -> None:
        """An operation could not reach the server."""
        self.failures += 1
        if self.since is None:
            self.since = self.clock()
            log.warning("lost the connection to PostgreSQL %s (%s); the store's work waits and is tried "
                        "again until it is back", self.label, reason)
            if self.on_down is not None:
                self.on_down()
        else:
            log.debug("PostgreSQL %s still unreachable: %s", self.label, reason)
        if self.health is not None:
            self.health.unreachable(reason)

    def reached(self, began: float) -> None:
        """An operation begun at `began` reached the server."""
        if self.since is None or began < self.since:
            return
        seconds, failures = self.clock() - self.since, self.failures
        self.since, self.failures = None, 0
        log.warning("PostgreSQL %s is reachable again after %.1fs (%d operation(s) failed meanwhile and are "
                    "tried again)", self.label, seconds, failures)
        if self.health is not None:
            self.health.reachable()
