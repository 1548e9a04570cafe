"""The schema on PostgreSQL: `storage.migrations.MIGRATIONS` (the one list, written once for
both databases) rendered for PostgreSQL, recorded in the same `_migrations` ledger.

What PostgreSQL gets where SQLite differs is said in each migration's SQL (`storage.migrations`
lists the words): SQLite's INTEGER is BIGINT (64 bits on both; flags stay 0/1 numbers, as the
row conversions expect), REAL is DOUBLE PRECISION, an `id INTEGER PRIMARY KEY` is an identity
column, text that the store orders or compares by value (names, models, Discord ids) is
`COLLATE "C"`: bytewise, as SQLite compares, whatever the database's locale.

Migrations are applied under a session advisory lock (keyed by the schema), each
in its own transaction, so two processes starting together apply each one once. Each
transaction also holds the schema's write lock exclusive (see `storage.pg`): no store
write runs while a table changes, and the next one sees the change before it runs a
cached statement.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from bot.core.errors import StoreError
from storage.migrations import LEDGER, MIGRATIONS, Params, Step, pending, render, run_step
from storage.sql import numbered

log = logging.getLogger(__name__)

Conn = Any  # an asyncpg.Connection (asyncpg ships no type information)


class PgMigrationDb:
    """`storage.migrations.MigrationDb` over the asyncpg connection that applies the migrations
    (`?` placeholders become `$n`)."""

    dialect = "postgresql"

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    async def script(self, sql: str) -> None:
        await self.conn.execute(render(sql, self.dialect))  # several statements in one round trip

    async def all(self, sql: str, params: Params = ()) -> list[Any]:
        return list(await self.conn.fetch(numbered(sql), *params))

    async def exec(self, sql: str, params: Params = ()) -> None:
        await self.conn.execute(numbered(sql), *params)

    async def exec_many(self, sql: str, rows: Sequence[Params]) -> None:
        await self.conn.executemany(numbered(sql), rows)


async def schema_of(conn: Conn) -> str:
    """The schema the store's tables live in (the first of search_path that exists)."""
    schema = await conn.fetchval("SELECT current_schema()")
    if schema is None:
        path = await conn.fetchval("SHOW search_path")
        raise StoreError(f"no schema of the search_path ({path}) exists; create it first")
    return str(schema)


async def applied_pg_migrations(conn: Conn) -> dict[int, float]:
    """Migration id -> time applied (an empty ledger when none is there yet)."""
    exists = await conn.fetchval("SELECT to_regclass('_migrations') IS NOT NULL")
    if not exists:
        return {}
    return {int(r[0]): float(r[1]) for r in await conn.fetch("SELECT id, applied_at FROM _migrations")}


async def apply_pg_migrations(
    conn: Conn,
    migrations: Sequence[tuple[int, str, Step]] | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> list[int]:
    """Apply every migration not yet recorded, in order; return the ids applied.
    A database recorded with a migration this code does not know raises `StoreError`."""
    registry = MIGRATIONS if migrations is None else migrations
    schema = await schema_of(conn)
    key = f"roundtable.migrate:{schema}"
    await conn.execute("SELECT pg_advisory_lock(hashtext($1))", key)
    try:
        async with conn.transaction():
            await conn.execute(render(LEDGER, "postgresql"))
        applied: list[int] = []
        for mid, name, step in pending(registry, await applied_pg_migrations(conn)):
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"roundtable.write:{schema}")
                await run_step(PgMigrationDb(conn), step)
                await conn.execute(
                    "INSERT INTO _migrations (id, name, applied_at) VALUES ($1, $2, $3)", mid, name, clock()
                )
            applied.append(mid)
            log.info("applied migration %d: %s", mid, name)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", key)
