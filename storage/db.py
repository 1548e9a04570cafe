"""SQLite: opening the file (WAL, busy timeout, foreign keys, migrations) and the
store's backend over it (`SqliteBackend`).

Also the one place where sqlite3 exceptions become `StoreError`, so no
sqlite3 type escapes `storage/`.

aiosqlite runs a connection on one thread, so two coroutines sharing it must
never interleave their transactions: every operation (reads too, so a read
never sees a half-written transaction of its own connection) holds the
backend's lock. Writes run inside `BEGIN IMMEDIATE`, which also serialises them
against other processes on the same file (the bot and the console); a lock
that outlasts the busy timeout becomes `StoreError` after a rollback.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Callable, Sequence

import aiosqlite

from bot.core.errors import StoreError
from storage.migrations import apply_migrations
from storage.sql import SQLITE, Db, Params, Row

log = logging.getLogger(__name__)

DEFAULT_BUSY_TIMEOUT_MS = 5000
LOCKED_MESSAGE = "the database is locked by another process; try again"


def is_locked(exc: BaseException) -> bool:
    """True for SQLITE_BUSY / SQLITE_LOCKED (after the busy timeout ran out)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def store_error(exc: sqlite3.Error) -> StoreError:
    """Translate a sqlite3 failure into a one-line `StoreError`."""
    if is_locked(exc):
        return StoreError(LOCKED_MESSAGE)
    first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
    return StoreError(f"database error: {first_line}")


async def _thread_ended(pending: aiosqlite.Connection) -> None:
    """Wait for the worker thread of a connection that failed to open. aiosqlite stops it by
    posting its last answer to the event loop; a loop closed before that (the process exiting
    on the one-line error) made the thread print a traceback."""
    thread = getattr(pending, "_thread", None)  # aiosqlite keeps no public handle on it
    if thread is not None and thread.is_alive():
        await asyncio.to_thread(thread.join, 5)
    await asyncio.sleep(0)  # let the posted answer run while the loop is open


async def open_db(
    path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
) -> aiosqlite.Connection:
    """`open_db_migrated` without the list of migrations applied."""
    return (await open_db_migrated(path, busy_timeout_ms=busy_timeout_ms))[0]


async def open_db_migrated(
    path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
) -> tuple[aiosqlite.Connection, list[int]]:
    """Open (creating the file if needed) the database at `path` and bring its schema up to date.

    The file's directory must exist: no directory is ever made. The connection is
    in autocommit mode: the store issues its own `BEGIN IMMEDIATE` / `COMMIT`. Any
    failure raises `StoreError` with one line naming the path.
    """
    name = str(path)
    conn: aiosqlite.Connection | None = None
    try:
        if name != ":memory:":
            file = Path(name).expanduser()
            _check_place(file)
            name = str(file)
        pending = aiosqlite.connect(name, isolation_level=None, timeout=busy_timeout_ms / 1000)
        try:
            conn = await pending
        except BaseException:
            await _thread_ended(pending)
            raise
        conn.row_factory = aiosqlite.Row
        await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        rows = list(await conn.execute_fetchall("PRAGMA journal_mode = WAL"))
        mode = rows[0][0] if rows else "?"
        if str(mode).lower() != "wal" and name != ":memory:":
            log.warning("SQLite at %s runs in journal mode %s, not WAL", name, mode)
        await conn.execute("PRAGMA foreign_keys = ON")
        await conn.execute("PRAGMA synchronous = NORMAL")
        applied = await apply_migrations(conn)
    except (sqlite3.Error, OSError, StoreError) as exc:
        if conn is not None:
            await _close_quietly(conn)
        reason = LOCKED_MESSAGE if is_locked(exc) else _one_line(exc)
        raise StoreError(f"cannot open the database {path}: {reason}") from exc
    except BaseException:
        if conn is not None:
            await _close_quietly(conn)
        raise
    log.info("opened database %s (%d migration(s) applied)", name, len(applied))
    return conn, applied


def _check_place(file: Path) -> None:
    """The directory `file` goes in exists, and `file` is not itself a directory."""
    if file.is_dir():
        raise StoreError(f"it is a directory; name a file in it, e.g. {file / 'roundtable.db'}")
    parent = file.parent
    if not parent.exists():
        raise StoreError(f"the directory {parent} does not exist; create it first, or choose another file")
    if not parent.is_dir():
        raise StoreError(f"{parent} is not a directory")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


async def _close_quietly(conn: aiosqlite.Connection) -> None:
    try:
        await conn.close()
    except Exception:  # closing a half-opened connection: nothing more to do
        log.debug("closing a failed connection raised", exc_info=True)


class SqliteDb:
    """`storage.sql.Db` over an aiosqlite connection."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def one(self, sql: str, params: Params = ()) -> Row | None:
        rows = await self.conn.execute_fetchall(sql, params)
        return rows[0] if rows else None  # type: ignore[index]  # aiosqlite's rows are a list

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        return list(await self.conn.execute_fetchall(sql, params))

    async def exec(self, sql: str, params: Params = ()) -> int:
        cursor = await self.conn.execute(sql, params)
        count = cursor.rowcount
        await cursor.close()
        return count

    async def insert(self, sql: str, params: Params = ()) -> int:
        cursor = await self.conn.execute(sql, params)
        rowid = cursor.lastrowid
        await cursor.close()
        if rowid is None:
            raise StoreError("database error: insert returned no row id")
        return int(rowid)

    async def exec_many(self, sql: str, rows: Sequence[Params]) -> None:
        await self.conn.executemany(sql, rows)


class SqliteBackend:
    """One connection, one lock, one transaction at a time (see the module docstring)."""

    dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection, label: str = "", applied: list[int] | None = None) -> None:
        self.conn = conn
        self.label = label
        self.applied = applied or []
        self._db = SqliteDb(conn)
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> "SqliteBackend":
        conn, applied = await open_db_migrated(path, busy_timeout_ms=busy_timeout_ms)
        return cls(conn, str(path), applied)

    async def announce(self, db: Db, group_id: int, origin: str) -> None:
        """Nothing: on SQLite other processes poll (the lease keeper)."""

    async def watch(self, origin: str, appended: Callable[[int], None]) -> None:
        """Nothing: see `announce`."""

    async def close(self) -> None:
        async with self._lock:
            if not self._closed:
                self._closed = True
                await self.conn.close()

    @asynccontextmanager
    async def write(self, group_id: int | None = None) -> AsyncIterator[SqliteDb]:
        """One write transaction (`BEGIN IMMEDIATE` ... `COMMIT`), or nothing at all."""
        async with self._lock:
            self._check_open()
            try:
                await self.conn.execute("BEGIN IMMEDIATE")
                yield self._db
                await self.conn.execute("COMMIT")
            except BaseException as exc:
                # Shielded: a cancelled caller must still leave no open transaction.
                await asyncio.shield(self._rollback())
                if isinstance(exc, sqlite3.Error):
                    raise store_error(exc) from exc
                raise

    @asynccontextmanager
    async def read(self) -> AsyncIterator[SqliteDb]:
        """Hold the connection for reads (autocommit: each statement sees committed data)."""
        async with self._lock:
            self._check_open()
            try:
                yield self._db
            except sqlite3.Error as exc:
                raise store_error(exc) from exc

    async def _rollback(self) -> None:
        try:
            await self.conn.execute("ROLLBACK")
        except (sqlite3.Error, ValueError):
            # No transaction active (COMMIT got through) or the connection is gone.
            log.debug("rollback found nothing to undo", exc_info=True)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")
