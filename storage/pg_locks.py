"""The write locks of a PostgreSQL schema (see `storage.pg`): in the process (`WriteGate`)
and in the database (`lock_sql`), and the schema's migration version that tells a write
transaction to drop asyncpg's cached statements (`changed_sql`, `VERSION_SQL`).
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


def int4(value: int) -> int:
    """`value` wrapped into PostgreSQL's int4 range (the second key of a two-int advisory lock)."""
    return (value + 2**31) % 2**32 - 2**31


def lock_sql(schema_key: int, group_id: int | None) -> str:
    """The statements that take a write transaction's advisory locks: the schema's lock
    exclusive (no group), or shared and then the group's lock exclusive. Keys are ints.

    The keys are written into the SQL text, the one place in storage/ where values are: these
    statements run with `changed_sql`'s in one round trip, by the simple query protocol, which
    takes no parameters; each key passes through `int()`, so only a number reaches the text."""
    if group_id is None:
        return f"SELECT pg_advisory_xact_lock({int(schema_key)})"
    return (f"SELECT pg_advisory_xact_lock_shared({int(schema_key)});"
            f" SELECT pg_advisory_xact_lock({int(schema_key)}, {int4(group_id)})")


VERSION_SQL = "SELECT COALESCE(MAX(id), 0) FROM _migrations"


def changed_sql(version: int) -> str:
    """A statement that returns one row when the schema's migration version is no longer
    `version`, none otherwise (its status, 'SELECT 1' or 'SELECT 0', is the answer: no value
    to fetch). A read of a table of a handful of rows: no measurable cost per write.
    (`version` is written into the text as an `int()`, for the reason `lock_sql` gives.)"""
    return f"SELECT 1 FROM _migrations HAVING COALESCE(MAX(id), 0) <> {int(version)}"  # noqa: S608 (an int literal: see above)


class WriteGate:
    """The order of one process's writes before they reach the database: per group one at a
    time (a FIFO asyncio lock each); a schema-wide write alone, after the group writes in
    flight (group writes arriving meanwhile wait for it: it is never starved); and at most
    `slots` writes at once, so waiting writers hold no pool connection and reads keep some."""

    def __init__(self, slots: int) -> None:
        self._groups: dict[int, tuple[asyncio.Lock, list[int]]] = {}  # lock, [users]
        self._active = 0  # group writes past the gate
        self._exclusive = False
        self._exclusive_waiting = 0
        self._wakers: list[asyncio.Future[None]] = []
        self._slots = asyncio.Semaphore(max(1, slots))

    @asynccontextmanager
    async def group(self, group_id: int) -> AsyncIterator[None]:
        lock, users = self._groups.setdefault(group_id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                await self._until(lambda: not self._exclusive and not self._exclusive_waiting)
                self._active += 1
                try:
                    async with self._slots:
                        yield
                finally:
                    self._active -= 1
                    self._wake()
        finally:
            users[0] -= 1
            if not users[0]:
                del self._groups[group_id]

    @asynccontextmanager
    async def schema(self) -> AsyncIterator[None]:
        self._exclusive_waiting += 1
        try:
            await self._until(lambda: not self._exclusive and not self._active)
        finally:
            self._exclusive_waiting -= 1
            self._wake()  # a cancelled wait must let the group writes it held back go
        self._exclusive = True
        try:
            async with self._slots:
                yield
        finally:
            self._exclusive = False
            self._wake()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            waker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._wakers.append(waker)
            try:
                await waker
            finally:
                if waker in self._wakers:
                    self._wakers.remove(waker)

    def _wake(self) -> None:
        wakers, self._wakers = self._wakers, []
        for waker in wakers:
            if not waker.done():
                waker.set_result(None)
