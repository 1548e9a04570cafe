"""The databases the store tests run on: a SQLite file in tmp_path, or a fresh schema of the
PostgreSQL server named by ROUNDTABLE_TEST_PG (dropped afterwards).

A `Place` opens stores on its database (two opens are two processes' stores) and runs raw
SQL beside them (`?` placeholders on both), the way another process or an operator would.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from bench.places import scratch_schema, unreachable, with_schema
from storage import SqlStore, open_store
from storage.sql import numbered

PG_ENV = "ROUNDTABLE_TEST_PG"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
KINDS = ("sqlite", "postgresql")


def pg_url() -> str:
    return os.environ.get(PG_ENV, DEFAULT_PG).strip()


def pg_unavailable() -> str | None:
    """None when the PostgreSQL test server answers; otherwise why its tests are skipped."""
    from storage.pg import mask_url

    url = pg_url()
    if url.lower() in ("", "0", "off", "no", "none"):
        return f"{PG_ENV}={url or '(empty)'} turns the PostgreSQL tests off"
    reason = unreachable(url, timeout=3)
    if reason is None:
        return None
    return (f"no PostgreSQL server answers at {mask_url(url)} ({reason}); "
            f"set {PG_ENV}=postgresql://USER@HOST:PORT/DATABASE to run them")


class Place:
    kind: str
    target: str  # what `open_store` (and --db / ROUNDTABLE_DB) takes

    async def open(self, **kwargs: Any) -> SqlStore:
        return await open_store(self.target, **kwargs)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def hold_write_lock(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Another process in the middle of a write: every store write waits (and times out)."""
        raise NotImplementedError


class SqlitePlace(Place):
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.target = str(path)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as raw, raw:
            raw.execute(sql, tuple(params))

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.path, timeout=30)) as raw:
            return [tuple(r) for r in raw.execute(sql, tuple(params)).fetchall()]

    @contextlib.asynccontextmanager
    async def hold_write_lock(self) -> AsyncIterator[None]:
        other = sqlite3.connect(self.path, isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()


class PostgresPlace(Place):
    kind = "postgresql"

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.target = with_schema(url, schema)

    async def _connect(self) -> Any:
        import asyncpg

        return await asyncpg.connect(self.target)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        conn = await self._connect()
        try:
            await conn.execute(numbered(sql), *params)
        finally:
            await conn.close()

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        conn = await self._connect()
        try:
            return [tuple(r) for r in await conn.fetch(numbered(sql), *params)]
        finally:
            await conn.close()

    @contextlib.asynccontextmanager
    async def hold_write_lock(self) -> AsyncIterator[None]:
        conn = await self._connect()
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"roundtable.write:{self.schema}")
                yield
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def postgres_place() -> AsyncIterator[PostgresPlace]:
    """A fresh schema on the test server, dropped afterwards."""
    url, schema = pg_url(), f"rt_test_{uuid.uuid4().hex[:12]}"
    async with scratch_schema(url, schema):
        yield PostgresPlace(url, schema)


# The system catalogs a store test's schema churns (its tables, columns, defaults, indexes, constraints,
# triggers, sequences): every test creates a schema and drops it.
CHURNED = ("pg_attribute", "pg_class", "pg_depend", "pg_type", "pg_attrdef", "pg_constraint", "pg_index",
           "pg_trigger", "pg_sequence", "pg_namespace")


async def vacuum_catalogs(url: str) -> bool:
    """VACUUM the catalogs the tests churned, when the server's autovacuum is off (as on the machine CI runs
    on): the dead rows of each run's dropped schemas stayed, 145 MB a run, and a day of runs made the test
    database 1.8 GB. True when it vacuumed. A role that may not vacuum a catalog is only warned by the server."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        if await conn.fetchval("SHOW autovacuum") == "on":
            return False
        await conn.execute("VACUUM " + ", ".join(f"pg_catalog.{name}" for name in CHURNED))
        return True
    finally:
        await conn.close()
