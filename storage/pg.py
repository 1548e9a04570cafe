"""PostgreSQL: the store's backend over an asyncpg pool (`PostgresStore`).

Writes are serialised per group, across processes, by transaction-scoped advisory
locks in two levels:

- a write about one group (`write(group_id)`: appends, runs, decisions, the group's
  lease, ...) takes the schema's write lock SHARED, then the group's lock EXCLUSIVE;
- a write about no group or several (`write()`: creating a group, renewing or
  releasing leases, people's names, webhooks, a copy; and each migration) takes the
  schema's write lock EXCLUSIVE, so it still excludes every other write.

The schema's lock is the bigint key `hashtext('roundtable.write:<schema>')` (the one
key every write took before, so an older process still excludes all of them); a
group's lock is the two-int key `(hashtext('roundtable.write:<schema>'), group id)`
(an id wrapped into int4: ids 2**32 apart would share a lock, which only makes them
wait for each other). PostgreSQL keeps the one-bigint and two-int key spaces apart.
A transaction takes the shared lock before its group's lock and never a second
group's, so these locks cannot deadlock. So seq allocation, "append serialised per
group", lease checks and everything else a write reads and then changes hold per
group as on SQLite (where `BEGIN IMMEDIATE` admits one writer of any group): a write
reads only its own group's rows, or takes the exclusive lock. (The one table two
groups' writes share is the map of external ids, unique across groups: an insert there
waits for the other group's and the mapping is read again, `storage.access.Access.map_external_ids`.)

In a process, writers of one group queue on an asyncio lock of the group, schema-wide
writers wait for the group writers in flight (and keep new ones out until they have
run), and at most half the pool holds write transactions at once; so a waiting writer
does not hold a pool connection, writes of different groups run on different
connections, and reads keep connections of their own. Reads run outside transactions:
each statement sees committed data, and never queues behind a write. A wait for a lock
longer than the lock timeout is `StoreError` (`LOCKED_MESSAGE`), like SQLite's busy
timeout.

asyncpg caches prepared statements per connection; once another process changed a
table (a migration), a cached `SELECT *` fails inside a transaction ("cached plan must
not change result type"), where asyncpg cannot retry it. So each write transaction,
in the round trip that takes its locks, also compares the schema's migration version
(the newest id in `_migrations`) with the one last seen, and drops the pool's statement
cache before running any statement when it changed. Migrations hold the schema's
exclusive write lock, so one never commits between that check and the statements after
it. DDL run by hand, outside a migration, is not seen: a write it breaks fails once
(`StoreError`, which the engine's loops retry), and asyncpg has dropped the cache for
the next. (A first version compared a fingerprint of every column's `pg_attribute` row,
which also saw DDL by hand, at 0.1-0.3 ms of server time per write: a quarter of one
process's write throughput.)

A restart of the server (`storage.pg_outage`): operations fail with `StoreUnavailable`
until it is back, logged as one WARNING when it starts and one when it ends; a pooled connection
the server ended while idle is closed and replaced before a statement runs on it (a BEGIN or a
read's first statement that finds it ended runs once more on a fresh connection); the LISTEN
connection is opened again as soon as the server takes connections. While the server is away the
backend itself tries a `SELECT 1` every `PROBE_EVERY` seconds, so its return is noticed within
that and the store's health (`report_to`) wakes whatever waits to try the store again. The pool keeps no floor of
connections (`min_size=0`): asyncpg's task that restores one logged every failed try.

Also the one place where asyncpg's exceptions become `StoreError`, so no asyncpg
type escapes `storage/`. A URL's password never appears in a message.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from bot.core.errors import StoreBusy, StoreError, StoreUnavailable, StoreUnwritable
from bot.core.rules.secrets import MASK, mask_error, mask_url, url_secrets
from bot.core.rules.store_health import StoreHealth
from storage.access import Clock
from storage.db import DEFAULT_BUSY_TIMEOUT_MS, LOCKED_MESSAGE
from storage.pg_locks import VERSION_SQL, WriteGate, changed_sql, lock_sql
from storage.pg_migrations import apply_pg_migrations, schema_of
from storage.pg_outage import GONE, ServerOutage, gone_reason, server_gone
from storage.sql import POSTGRESQL, Db, Params, Row, numbered
from storage.store import SqlStore

log = logging.getLogger(__name__)

POOL_SIZE = 8
CONNECT_TIMEOUT = 10.0
CLOSE_TIMEOUT = 10.0
RELISTEN_FIRST, RELISTEN_MAX = 0.5, 5.0  # seconds between tries to LISTEN again after its connection was lost
PROBE_EVERY = 0.5  # seconds between the backend's own tries to reach a server that went away
PROBE_TIMEOUT = 2.0  # seconds one such try may take
_CONNECTION_ERRORS = (OSError, asyncio.TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError)


def one_line(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """The failure's first line, for a message: `secrets` (a URL's, `url_secrets`) and every
    registered secret masked."""
    text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    for secret in secrets:
        text = text.replace(secret, MASK)
    return mask_error(text)


def unwritable_reason(exc: BaseException) -> str | None:
    """What is wrong, for people, when the server refused a write for a reason someone has to
    fix (its disk is full, the database is read-only, the user may not write); else None."""
    if isinstance(exc, asyncpg.DiskFullError):
        return "the database server's disk is full"
    if isinstance(exc, asyncpg.InsufficientResourcesError):
        return "the database server is out of resources (disk, memory or connections)"
    if isinstance(exc, asyncpg.ReadOnlySQLTransactionError):
        return "the database is read-only"
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return "the database user may not write"
    return None


def pg_store_error(exc: BaseException) -> StoreError:
    """Translate an asyncpg failure (or a lost connection) into a one-line `StoreError`
    (`StoreBusy` for a lock held too long, `StoreUnwritable` for a write the server refuses,
    `StoreUnavailable` when the server or the connection is gone)."""
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return StoreBusy(LOCKED_MESSAGE)
    reason = unwritable_reason(exc)
    if reason is not None:
        return StoreUnwritable(f"database error: {one_line(exc)}", public=reason)
    if server_gone(exc):
        return StoreUnavailable(f"database error: the connection to PostgreSQL failed: {gone_reason(exc)}")
    return StoreError(f"database error: {one_line(exc)}")


@functools.lru_cache(maxsize=2048)
def _pg_sql(sql: str) -> str:
    return numbered(sql)


def _args(params: Params) -> list[Any]:
    """PostgreSQL's text cannot hold NUL (SQLite's can): it is stored as U+FFFD, so a message
    carrying one is kept rather than refused on every retry."""
    return [p.replace("\x00", "\ufffd") if isinstance(p, str) and "\x00" in p else p for p in params]


async def _keep_session(conn: Any) -> None:
    """A connection back in the pool keeps its session: the store leaves nothing in it (no
    LISTEN (the watcher's connection is kept until close), no session locks or settings), and
    asyncpg still rolls back an open transaction.
    Its default reset would cost a round trip per read and per write."""


class PgDb:
    """`storage.sql.Db` over an asyncpg connection; `?` placeholders become `$n`."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def _run(self, statement: Callable[[Any], Awaitable[Any]]) -> Any:
        return await statement(self.conn)

    async def one(self, sql: str, params: Params = ()) -> Row | None:
        row: Row | None = await self._run(lambda conn: conn.fetchrow(_pg_sql(sql), *_args(params)))
        return row

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        return list(await self._run(lambda conn: conn.fetch(_pg_sql(sql), *_args(params))))

    async def exec(self, sql: str, params: Params = ()) -> int:
        status = await self._run(lambda conn: conn.execute(_pg_sql(sql), *_args(params)))  # "UPDATE 3", "INSERT 0 1"
        last = str(status).rpartition(" ")[2]
        return int(last) if last.isdigit() else 0

    async def insert(self, sql: str, params: Params = ()) -> int:
        new_id = await self._run(lambda conn: conn.fetchval(_pg_sql(sql) + " RETURNING id", *_args(params)))
        if new_id is None:
            raise StoreError("database error: insert returned no row id")
        return int(new_id)

    async def exec_many(self, sql: str, rows: Sequence[Params]) -> None:
        await self._run(lambda conn: conn.executemany(_pg_sql(sql), [_args(row) for row in rows]))


class _ReadDb(PgDb):
    """A read's `Db`: its connection is taken from the pool at its first statement and given back by
    `release`. When that first statement finds the connection ended by the server while it sat in
    the pool (a restart: `storage.pg_outage`), the connection is closed and the statement runs once
    more on a fresh one (a read changes nothing)."""

    def __init__(self, pool: Any) -> None:
        super().__init__(None)
        self.pool = pool
        self.answered = False  # a statement reached the server

    async def _run(self, statement: Callable[[Any], Awaitable[Any]]) -> Any:
        if self.conn is None:
            self.conn = await self.pool.acquire()
            try:
                result = await statement(self.conn)
            except Exception as exc:
                if not server_gone(exc):
                    raise
                log.debug("a pooled connection was ended by the server (%s); reading on a fresh one", gone_reason(exc))
                await self.release(broken=True)
                await self.pool.expire_connections()  # it ended the others too: each is replaced when next taken
                self.conn = await self.pool.acquire()
                result = await statement(self.conn)
        else:
            result = await statement(self.conn)
        self.answered = True
        return result

    async def release(self, *, broken: bool = False) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            if broken:
                _terminate(conn)  # never back into the pool as it is
            await self.pool.release(conn)


class PostgresBackend:
    """A pool of connections to one schema of one PostgreSQL database."""

    dialect = POSTGRESQL

    def __init__(
        self, pool: Any, label: str, write_key: str, applied: list[int] | None = None, *,
        schema_key: int = 0, version: int = 0, pool_size: int = POOL_SIZE,
    ) -> None:
        self.pool = pool
        self.label = label
        self.applied = applied or []
        self._write_key = write_key
        self._schema_key = schema_key  # hashtext(write_key): the schema's advisory lock
        self._version = version  # the schema's migration version when the statement cache was last valid
        self._gate = WriteGate(pool_size // 2)
        self._closed = False
        # Appends are announced on a channel of this schema (stores of other schemas never hear them).
        self.channel = "roundtable_" + hashlib.sha1(write_key.encode(), usedforsecurity=False).hexdigest()[:24]
        self.outage = ServerOutage(label)
        self.outage.on_down = self._probe_soon
        self._probe: asyncio.Task[None] | None = None
        self._listener: Any = None  # a pool connection kept for LISTEN, while watching
        self._on_notify: Callable[..., None] | None = None
        self._on_lost: Callable[..., None] = self._lost
        self._relisten: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, url: str, *, lock_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, schema: str | None = None,
        pool_size: int = POOL_SIZE, migrate: bool = True,
    ) -> PostgresBackend:
        """Connect to `url` (a pool), apply the migrations, and check the schema is usable.
        `schema`: the schema to use (default: the server's search_path, i.e. `public`).
        Any failure raises `StoreError` with one line naming the URL without its password."""
        label = mask_url(url)
        settings = {"lock_timeout": f"{int(lock_timeout_ms)}ms", "application_name": "roundtable"}
        if schema is not None:
            settings["search_path"] = schema
        pool = None
        try:
            pool = await asyncpg.create_pool(
                # min_size=0: no background task keeps a floor of connections (it logged a WARNING with a
                # traceback for every failed reconnection while the server restarted); they open on demand
                url, min_size=0, max_size=pool_size, timeout=CONNECT_TIMEOUT, server_settings=settings,
                command_timeout=None, reset=_keep_session,
            )
            async with pool.acquire() as conn:
                # A migration waits as long as it takes (for another process's, for table locks);
                # the lock timeout is for the store's writes.
                await conn.execute("SET lock_timeout = 0")
                try:
                    applied = await apply_pg_migrations(conn) if migrate else []
                finally:
                    await conn.execute("RESET lock_timeout")
                write_key = f"roundtable.write:{await schema_of(conn)}"
                schema_key = int(await conn.fetchval("SELECT hashtext($1)", write_key))
                version = int(await conn.fetchval(VERSION_SQL))
        except BaseException as exc:  # a cancel too must end the pool; the rest is re-raised below
            if pool is not None:
                pool.terminate()
            if isinstance(exc, StoreError):
                raise StoreError(f"cannot open the database {label}: {one_line(exc, url_secrets(url))}") from None
            if isinstance(exc, (asyncpg.PostgresError, ValueError, *_CONNECTION_ERRORS)):
                reason = one_line(exc, url_secrets(url))
                raise StoreError(f"cannot open the database {label}: {reason}") from None
            raise
        log.info("opened database %s (%d migration(s) applied)", label, len(applied))
        return cls(pool, label, write_key, applied, schema_key=schema_key, version=version, pool_size=pool_size)

    def report_to(self, health: StoreHealth) -> None:
        """Tell `health` when the server cannot be reached and when it can again."""
        self.outage.report_to(health)

    def _probe_soon(self) -> None:
        """The server went away: try to reach it every `PROBE_EVERY` seconds until it answers."""
        if self._closed or (self._probe is not None and not self._probe.done()):
            return
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to probe from
            self._probe = asyncio.get_running_loop().create_task(self._probing(), name="pg-probe")
            self._probe.add_done_callback(_log_failure)

    async def _probing(self) -> None:
        while not self._closed and self.outage.down:
            await asyncio.sleep(PROBE_EVERY)
            try:
                async with asyncio.timeout(PROBE_TIMEOUT), self.read() as db:
                    await db.one("SELECT 1")
            except (StoreError, TimeoutError) as exc:
                log.debug("PostgreSQL %s not back yet: %s", self.label, type(exc).__name__)

    async def announce(self, db: Db, group_id: int, origin: str) -> None:
        """NOTIFY the schema's channel with "GROUP ORIGIN"; PostgreSQL delivers it at commit (and
        never for a rolled-back transaction)."""
        if not isinstance(db, PgDb):
            raise TypeError(f"PostgreSQL announces on its own connection, not on a {type(db).__name__}")
        await db.conn.execute("SELECT pg_notify($1, $2)", self.channel, f"{group_id} {origin}")

    async def watch(self, origin: str, appended: Callable[[int], None]) -> None:
        """LISTEN on one pooled connection kept until `close`; appends announced by other
        stores call `appended(group_id)`. When that connection is lost (a restart of the server)
        it listens again, on a fresh connection, as soon as the server takes one (the keeper's
        polling notices the rows of the gap)."""
        if self._on_notify is not None:
            return

        def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            group, _, sender = payload.partition(" ")
            if sender != origin and group.isdigit():
                appended(int(group))

        self._on_notify = on_notify
        try:
            await self._listen()
        except StoreUnavailable:  # the server is away already: listen once it is back
            self._listen_again()
        except BaseException:  # a cancel too: no callback left behind; re-raised
            self._on_notify = None
            raise

    async def _listen(self) -> None:
        began = self.outage.began()
        try:
            conn = await self.pool.acquire()
            try:
                await conn.add_listener(self.channel, self._on_notify)
                conn.add_termination_listener(self._on_lost)
            except BaseException as exc:  # a cancel too: the connection goes back; re-raised
                if server_gone(exc):
                    _terminate(conn)
                await self.pool.release(conn)
                raise
        except (asyncpg.PostgresError, asyncpg.InterfaceError, *GONE) as exc:
            raise self._failed(exc) from exc
        self._listener = conn
        self.outage.reached(began)

    def _lost(self, _conn: Any) -> None:
        """The listening connection closed under us (the server restarts, the network failed)."""
        self._listener = None
        if not self._closed:
            log.debug("the connection listening for other processes' messages was lost; listening again")
            self._listen_again()

    def _listen_again(self) -> None:
        if self._relisten is None or self._relisten.done():
            self._relisten = asyncio.get_running_loop().create_task(self._relistening(), name="pg-listen-again")
            self._relisten.add_done_callback(_log_failure)

    async def _relistening(self) -> None:
        delay = RELISTEN_FIRST
        while not self._closed and self._listener is None:
            try:
                await self._listen()
            except StoreError as exc:
                log.debug("cannot listen again yet (%s); trying again in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RELISTEN_MAX)
                continue
            log.info("listening for other processes' messages again (PostgreSQL %s)", self.label)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in (self._relisten, self._probe):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):  # the connection may be gone; the pool ends it anyway
                listener.remove_termination_listener(self._on_lost)  # closing is not losing it
            try:
                await listener.remove_listener(self.channel, self._on_notify)
            except Exception:  # the server ended it: there is nothing to stop listening on
                _terminate(listener)
            with contextlib.suppress(Exception):
                await self.pool.release(listener)
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):  # (not wait_for: on Python 3.11 it can lose a cancel)
                await self.pool.close()
        except (TimeoutError, *_CONNECTION_ERRORS, asyncpg.PostgresError):
            log.warning("closing the PostgreSQL pool took too long; connections ended", exc_info=True)
            self.pool.terminate()

    def _failed(self, exc: BaseException) -> StoreError:
        """`exc` as a `StoreError`; an operation that could not reach the server counts toward an outage."""
        error = pg_store_error(exc)
        if isinstance(error, StoreUnavailable):
            self.outage.failed(gone_reason(exc))
        return error

    @asynccontextmanager
    async def write(self, group_id: int | None = None) -> AsyncIterator[PgDb]:
        """One write transaction, or nothing at all: about `group_id` (holding the schema's
        write lock shared and the group's exclusive), or about no group or several (holding
        the schema's write lock exclusive)."""
        gate = self._gate.schema() if group_id is None else self._gate.group(group_id)
        async with gate:
            self._check_open()
            began = self.outage.began()
            try:
                async with contextlib.AsyncExitStack() as stack:
                    conn = await self._begin(stack)
                    # One round trip: the locks, then (a statement of its own, so it sees what
                    # committed while it waited) whether a migration ran since.
                    status = await conn.execute(f"{lock_sql(self._schema_key, group_id)}; {changed_sql(self._version)}")
                    if status != "SELECT 0":
                        await self._statements_outdated(conn)
                    yield PgDb(conn)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, *GONE) as exc:
                raise self._failed(exc) from exc
            self.outage.reached(began)

    async def _begin(self, stack: contextlib.AsyncExitStack) -> Any:
        """A pooled connection with a transaction begun on it, both ended by `stack`. When its BEGIN
        finds it ended by the server while it sat in the pool (a restart: `storage.pg_outage`), the
        connection is closed and a fresh one tried, once."""
        for attempt in (1, 2):
            taken = contextlib.AsyncExitStack()
            conn = await taken.enter_async_context(self.pool.acquire())
            try:
                await taken.enter_async_context(conn.transaction())
            except BaseException as exc:  # a cancel too: the connection goes back; re-raised unless retried
                gone = server_gone(exc)
                if gone:
                    _terminate(conn)  # never back into the pool as it is
                    await self.pool.expire_connections()  # it ended the others too: each is replaced when next taken
                await taken.aclose()
                if attempt == 2 or not gone:
                    raise
                log.debug("a pooled connection was ended by the server (%s); writing on a fresh one", gone_reason(exc))
                continue
            stack.push_async_exit(taken)
            return conn
        raise AssertionError("unreachable")

    async def _statements_outdated(self, conn: Any) -> None:
        """Another process migrated the schema: drop the statements cached by the pool's
        connections before any of them fails inside a transaction (where asyncpg cannot retry)."""
        await conn.reload_schema_state()
        self._version = int(await conn.fetchval(VERSION_SQL))
        log.info("the database's tables changed (another process migrated them); prepared statements dropped")

    @asynccontextmanager
    async def read(self) -> AsyncIterator[PgDb]:
        """A pooled connection outside any transaction (taken at the first statement): each
        statement sees committed data."""
        self._check_open()
        began = self.outage.began()
        db = _ReadDb(self.pool)
        try:
            yield db
        except (asyncpg.PostgresError, asyncpg.InterfaceError, *GONE) as exc:
            await db.release(broken=server_gone(exc))
            raise self._failed(exc) from exc
        finally:
            await db.release()
        if db.answered:
            self.outage.reached(began)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")


def _terminate(conn: Any) -> None:
    """Close a pooled connection at once (the pool opens a new one when needed)."""
    with contextlib.suppress(asyncpg.InterfaceError):  # closed and released already (asyncpg saw it end)
        conn.terminate()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s failed", task.get_name(), exc_info=task.exception())


class PostgresStore(SqlStore):
    """The store over a PostgreSQL database. Open with `await PostgresStore.open(url)`."""

    @classmethod
    async def open(
        cls, url: str, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, clock: Clock = time.time,
        schema: str | None = None, health: StoreHealth | None = None,
    ) -> PostgresStore:
        return cls(await PostgresBackend.open(url, lock_timeout_ms=busy_timeout_ms, schema=schema), clock=clock,
                   health=health)


__all__ = ["PostgresBackend", "PostgresStore", "mask_url", "pg_store_error"]
