"""SQLite: opening the file (WAL, busy timeout, foreign keys, migrations) and the
store's backend over it (`SqliteBackend`).

Also the one place where sqlite3 exceptions become `StoreError`, so no
sqlite3 type escapes `storage/`.

A file's store works on the event loop's thread: two plain sqlite3 connections,
one for writes and one read-only. An indexed statement over a few rows takes
tens of microseconds, less than one hop to a worker thread and back; a turn
makes dozens of them, and those hops were most of the engine's own time per
turn. Nothing on the loop ever waits for another process: a reader never waits
for a writer in WAL mode, and the writer's `BEGIN IMMEDIATE` is tried with no
busy timeout and, while another process holds the write lock, retried after
async sleeps until the busy timeout runs out (then `StoreError`, after nothing
was written). Writes of this process queue on the backend's lock, one
transaction at a time; reads never queue and see committed data only (the
read connection is not the one a transaction is open on). A statement does not
suspend the caller, so after `FAIR_SHARE` of store work the backend lets other
tasks run before the next read or write; one long statement (a big export page)
holds the loop for its own duration.

aiosqlite opens the file and applies the migrations (`open_db_migrated`); an
in-memory database, which no second connection can see, stays on that one
aiosqlite connection for everything, every operation under the lock.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import aiosqlite

from bot.core.errors import StoreBusy, StoreError, StoreUnwritable
from bot.core.rules.store_health import StoreHealth
from storage.migrations import apply_migrations
from storage.sql import SQLITE, Db, Params, Row

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT_MS = 5000
LOCKED_MESSAGE = "the database is locked by another process; try again"
FAIR_SHARE = 0.002  # seconds of store work on the loop's thread before other tasks get a turn


def is_locked(exc: BaseException) -> bool:
    """True for SQLITE_BUSY / SQLITE_LOCKED (after the busy timeout ran out)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc).lower()
    return "locked" in text or "busy" in text


# SQLite's primary result codes that mean "nothing can be written until someone fixes the file or
# its disk", and what each tells people (`StoreUnwritable.public`).
UNWRITABLE = {
    13: "the database file or its disk is full",  # SQLITE_FULL
    8: "the database file is read-only",  # SQLITE_READONLY
    10: "the disk failed to write (an I/O error)",  # SQLITE_IOERR
    14: "the database file cannot be opened for writing",  # SQLITE_CANTOPEN
    3: "access to the database file is denied",  # SQLITE_PERM
}


def unwritable_reason(exc: sqlite3.Error) -> str | None:
    """What is wrong, for people, when `exc` says the file cannot be written; else None."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return UNWRITABLE.get(code & 0xFF)  # an extended code carries its primary one in the low byte
    text = str(exc).lower()
    if "disk is full" in text:
        return UNWRITABLE[13]
    if "readonly database" in text:
        return UNWRITABLE[8]
    return None


def store_error(exc: sqlite3.Error) -> StoreError:
    """Translate a sqlite3 failure into a one-line `StoreError` (`StoreBusy` for a lock held too
    long, `StoreUnwritable` for a file that takes no writes)."""
    if is_locked(exc):
        return StoreBusy(LOCKED_MESSAGE)
    first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
    reason = unwritable_reason(exc)
    if reason is not None:
        return StoreUnwritable(f"database error: {first_line}", public=reason)
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


def open_loop_connection(name: str, *, read_only: bool,
                         busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """A connection of `SqliteBackend` for the loop's thread: autocommit, rows by name, foreign
    keys on, the same durability as the migrating one, and no busy timeout once open (SQLite
    would wait for a lock by sleeping on the loop's thread; the backend waits with async sleeps
    instead). Blocking: it reads the schema (waiting up to `busy_timeout_ms` for another
    process's checkpoint), so the first message does not; call it off the loop."""
    conn = sqlite3.connect(name, isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = NORMAL")
        if read_only:
            conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT 1 FROM groups LIMIT 1").fetchall()
        conn.execute("PRAGMA busy_timeout = 0")
    except BaseException:  # Ctrl-C too: the connection is closed; re-raised
        conn.close()
        raise
    return conn


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
            file = Path(name).expanduser()  # noqa: ASYNC240 - once, at open: $HOME, no disk
            _check_place(file)
            name = str(file)
        pending = aiosqlite.connect(name, isolation_level=None, timeout=busy_timeout_ms / 1000)
        try:
            conn = await pending
        except BaseException:  # a cancel too: aiosqlite's thread is ended; re-raised
            await _thread_ended(pending)
            raise
        conn.row_factory = aiosqlite.Row
        await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")  # (a PRAGMA takes no parameter: an int)
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
    except BaseException:  # a cancel too: the connection is closed; re-raised
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
        # One hop: the statement runs and its cursor is done with on the connection's thread.
        # The count of changed rows is read off the connection (the caller holds the
        # backend's lock, so no other statement ran in between).
        before = self.conn.total_changes
        await self.conn.execute_fetchall(sql, params)
        return int(self.conn.total_changes - before)

    async def insert(self, sql: str, params: Params = ()) -> int:
        row = await self.conn.execute_insert(sql, params)
        if row is None or row[0] is None:
            raise StoreError("database error: insert returned no row id")
        return int(row[0])

    async def exec_many(self, sql: str, rows: Sequence[Params]) -> None:
        await self.conn.executemany(sql, rows)


async def when_free(attempt: Callable[[], T], timeout: float) -> T:
    """`attempt()` now, or again after async sleeps (2 ms doubling to 50 ms) while SQLite says
    the database is busy, for up to `timeout` seconds; then its error."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            return attempt()
        except sqlite3.Error as exc:
            left = deadline - time.monotonic()
            if not is_locked(exc) or left <= 0:
                raise
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)


class LoopDb:
    """`storage.sql.Db` over a plain sqlite3 connection used on the loop's thread."""

    def __init__(self, conn: sqlite3.Connection, busy_timeout: float = DEFAULT_BUSY_TIMEOUT_MS / 1000) -> None:
        self.conn = conn
        self.busy_timeout = busy_timeout

    def _rows(self, sql: str, params: Params) -> list[Row]:
        cursor = self.conn.execute(sql, params)
        try:
            return cursor.fetchall()
        finally:
            cursor.close()  # ends the statement: no read snapshot is left open

    async def _read(self, sql: str, params: Params) -> list[Row]:
        """The rows; a reader is busy only in rare moments (another connection recovering the
        WAL after a crash): then it tries again, up to the busy timeout (inside a write
        transaction it never is)."""
        if self.conn.in_transaction:
            return self._rows(sql, params)
        return await when_free(lambda: self._rows(sql, params), self.busy_timeout)

    async def one(self, sql: str, params: Params = ()) -> Row | None:
        rows = await self._read(sql, params)
        return rows[0] if rows else None

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._read(sql, params)

    async def exec(self, sql: str, params: Params = ()) -> int:
        cursor = self.conn.execute(sql, params)
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()

    async def insert(self, sql: str, params: Params = ()) -> int:
        cursor = self.conn.execute(sql, params)
        try:
            rowid = cursor.lastrowid
        finally:
            cursor.close()
        if rowid is None:
            raise StoreError("database error: insert returned no row id")
        return int(rowid)

    async def exec_many(self, sql: str, rows: Sequence[Params]) -> None:
        self.conn.executemany(sql, rows).close()


class SqliteBackend:
    """A file: a writer and a reader on the loop's thread; in memory: one aiosqlite connection
    (see the module docstring)."""

    dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection | None, label: str = "", applied: list[int] | None = None, *,
                 writer: sqlite3.Connection | None = None, reader: sqlite3.Connection | None = None,
                 busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> None:
        """`conn` (in memory) or `writer` and `reader` (a file)."""
        self.conn = conn
        self.label = label
        self.applied = applied or []
        self._threaded = SqliteDb(conn) if conn is not None else None
        self._busy_timeout = busy_timeout_ms / 1000
        self._writer = LoopDb(writer, self._busy_timeout) if writer is not None else None
        self._reader = LoopDb(reader, self._busy_timeout) if reader is not None else None
        self._lock = asyncio.Lock()
        self._closed = False
        self._ran_since = time.monotonic()  # when this backend last let other tasks run

    @classmethod
    async def open(cls, path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> SqliteBackend:
        conn, applied = await open_db_migrated(path, busy_timeout_ms=busy_timeout_ms)
        if str(path) == ":memory:":
            return cls(conn, str(path), applied, busy_timeout_ms=busy_timeout_ms)
        await conn.close()
        name = str(Path(str(path)).expanduser())  # noqa: ASYNC240 - once, at open: $HOME, no disk
        opened: list[sqlite3.Connection] = []
        try:
            for read_only in (False, True):
                opened.append(await asyncio.to_thread(open_loop_connection, name, read_only=read_only,
                                                      busy_timeout_ms=busy_timeout_ms))
        except BaseException as exc:  # a cancel too closes them; re-raised below
            for c in opened:
                c.close()
            if isinstance(exc, sqlite3.Error):
                reason = LOCKED_MESSAGE if is_locked(exc) else _one_line(exc)
                raise StoreError(f"cannot open the database {path}: {reason}") from exc
            raise
        writer, reader = opened
        return cls(None, str(path), applied, writer=writer, reader=reader, busy_timeout_ms=busy_timeout_ms)

    async def announce(self, db: Db, group_id: int, origin: str) -> None:
        """Nothing: on SQLite other processes poll (the lease keeper)."""

    async def watch(self, origin: str, appended: Callable[[int], None]) -> None:
        """Nothing: see `announce`."""

    def report_to(self, health: StoreHealth) -> None:
        """Nothing: a file has no server to lose (its refused writes reach `health` through `Access`)."""

    async def close(self) -> None:
        async with self._lock:
            if not self._closed:
                self._closed = True
                for db in (self._writer, self._reader):
                    if db is not None:
                        db.conn.close()
                if self.conn is not None:
                    await self.conn.close()

    @asynccontextmanager
    async def write(self, group_id: int | None = None) -> AsyncIterator[Db]:
        """One write transaction (`BEGIN IMMEDIATE` ... `COMMIT`), or nothing at all. `group_id` is
        not used: SQLite has one writer at a time (PostgreSQL's backend locks per group)."""
        async with self._lock:
            self._check_open()
            if self._writer is None:
                async with self._write_threaded() as db:
                    yield db
                return
            await self._take_turns()
            conn = self._writer.conn
            await self._begin(conn)
            try:
                yield self._writer
                conn.execute("COMMIT")
            except BaseException as exc:  # a cancel too: no transaction left open; re-raised
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise store_error(exc) from exc
                raise

    async def _take_turns(self) -> None:
        """Let other tasks run when this backend has not for a while: statements on the loop's
        thread never suspend, so a task making many store calls in a row (a page-by-page export,
        a polling loop) would otherwise keep every other task waiting."""
        now = time.monotonic()
        if now - self._ran_since >= FAIR_SHARE:
            await asyncio.sleep(0)
            self._ran_since = time.monotonic()

    async def _begin(self, conn: sqlite3.Connection) -> None:
        """`BEGIN IMMEDIATE`, waiting (asynchronously) up to the busy timeout for another process's write."""
        try:
            await when_free(lambda: conn.execute("BEGIN IMMEDIATE"), self._busy_timeout)
        except sqlite3.Error as exc:
            raise store_error(exc) from exc

    @asynccontextmanager
    async def _write_threaded(self) -> AsyncIterator[Db]:
        db = self._in_memory()
        try:
            await db.conn.execute("BEGIN IMMEDIATE")
            yield db
            await db.conn.execute("COMMIT")
        except BaseException as exc:  # re-raised below
            # Shielded: a cancelled caller must still leave no open transaction.
            await asyncio.shield(self._rollback(db.conn))
            if isinstance(exc, sqlite3.Error):
                raise store_error(exc) from exc
            raise

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Db]:
        """The read connection (autocommit: each statement sees committed data); in memory, the
        one connection under the lock."""
        if self._reader is None:
            async with self._lock:
                self._check_open()
                try:
                    yield self._in_memory()
                except sqlite3.Error as exc:
                    raise store_error(exc) from exc
            return
        self._check_open()
        await self._take_turns()
        try:
            yield self._reader
        except sqlite3.Error as exc:
            raise store_error(exc) from exc

    def _in_memory(self) -> SqliteDb:
        """The one connection of a database in memory (a file's backend has a writer and a reader)."""
        if self._threaded is None:
            raise RuntimeError("a SQLite backend with neither a writer and a reader nor a connection in memory")
        return self._threaded

    @staticmethod
    async def _rollback(conn: aiosqlite.Connection) -> None:
        try:
            await conn.execute("ROLLBACK")
        except (sqlite3.Error, ValueError):
            # No transaction active (COMMIT got through) or the connection is gone.
            log.debug("rollback found nothing to undo", exc_info=True)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")
