"""Databases that take no writes, for the tests of what people are told meanwhile.

- `FullDisk`: a real full disk. A small tmpfs is mounted under tmp_path (root with mount
  rights only: `FullDisk.unavailable()` says why not, and those tests skip), `fill()` takes
  every free block with a file, `free()` removes it. SQLite then fails for real with
  SQLITE_FULL ("database or disk is full").
- `read_only(store)`: SQLite's own `PRAGMA query_only` on the store's write connection: every
  write is refused (SQLITE_READONLY), as for a read-only file (which root could still write).
- `refusing_inserts(store)`: SQLITE_FULL on every INSERT of the store's write connection, raised
  at the sqlite3 level (as a file at its `PRAGMA max_page_count` does once no page has room),
  while updates in place still commit. Deterministic, anywhere.
- `pg_disk_full(place)`: PostgreSQL refuses every new message with SQLSTATE 53100 (disk_full),
  raised by a trigger in the test's own schema: the server's real error through the real driver.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storage import SqlStore
from storage.db import SqliteBackend
from tests.fakes.databases import Place


class FullDisk:
    def __init__(self, where: Path, size: str = "8m") -> None:
        self.where = where
        self.size = size
        self._filler = where / "filler"

    @staticmethod
    def unavailable(probe: Path) -> str | None:
        """None when a tmpfs can be mounted here; otherwise why not."""
        if os.geteuid() != 0:
            return "mounting a small tmpfs (a disk that fills up) needs root"
        probe.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            return f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}"
        subprocess.run(["umount", str(probe)], check=True)
        return None

    def __enter__(self) -> FullDisk:
        self.where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.where)], check=True)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", "-l", str(self.where)], check=False)

    def fill(self) -> None:
        """Take every free block (what SQLite writes next finds the disk full)."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            size = 1 << 20
            while size:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    size //= 2  # then the last blocks, in smaller pieces
        finally:
            os.close(fd)

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)


def writer(store: SqlStore) -> sqlite3.Connection:
    """The SQLite store's write connection (a file's store writes on one plain sqlite3 connection)."""
    backend: Any = store._backend  # the test reaches under the store, as a fault would
    assert isinstance(backend, SqliteBackend) and backend._writer is not None, "a SQLite file's store"
    return backend._writer.conn


@contextlib.contextmanager
def read_only(store: SqlStore) -> Iterator[None]:
    conn = writer(store)
    conn.execute("PRAGMA query_only = ON")
    try:
        yield
    finally:
        conn.execute("PRAGMA query_only = OFF")


def disk_full() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode, exc.sqlite_errorname = sqlite3.SQLITE_FULL, "SQLITE_FULL"  # as SQLite sets them
    return exc


class _RefusingInserts:
    """A sqlite3 connection whose INSERTs fail with SQLITE_FULL; everything else is the real one's."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if sql.lstrip()[:6].upper() == "INSERT":
            raise disk_full()
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        if sql.lstrip()[:6].upper() == "INSERT":
            raise disk_full()
        return self.conn.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@contextlib.contextmanager
def refusing_inserts(store: SqlStore) -> Iterator[None]:
    backend: Any = store._backend
    real = writer(store)
    backend._writer.conn = _RefusingInserts(real)
    try:
        yield
    finally:
        backend._writer.conn = real


@contextlib.asynccontextmanager
async def pg_disk_full(place: Place) -> Any:
    await place.execute("""
        CREATE FUNCTION refuse_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$""")
    await place.execute("CREATE TRIGGER disk_full BEFORE INSERT ON messages FOR EACH ROW "
                        "EXECUTE FUNCTION refuse_rows()")
    try:
        yield
    finally:
        await place.execute("DROP TRIGGER disk_full ON messages")
        await place.execute("DROP FUNCTION refuse_rows()")
