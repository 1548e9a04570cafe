"""The numbered migrations on PostgreSQL: applied once (also by two processes starting together),
refused when written by a newer version (tests/storage/test_schema.py: the same schema as SQLite's)."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.core.errors import StoreError
from bot.core.models import NewMessage
from storage import MIGRATIONS
from storage.migrations import MigrationDb
from storage.pg import PostgresStore
from storage.pg_migrations import apply_pg_migrations
from tests.fakes.databases import PostgresPlace


async def connect(place: PostgresPlace) -> Any:
    import asyncpg

    return await asyncpg.connect(place.target)


async def test_fresh_schema_gets_a_row_per_migration_and_applying_again_is_a_no_op(pg: PostgresPlace) -> None:
    await (await pg.open()).close()
    rows = await pg.fetch("SELECT id, name, applied_at FROM _migrations ORDER BY id")
    assert [(r[0], r[1]) for r in rows] == [(mid, name) for mid, name, _ in MIGRATIONS]
    conn = await connect(pg)
    try:
        assert await apply_pg_migrations(conn) == []
    finally:
        await conn.close()
    assert await pg.fetch("SELECT id, name, applied_at FROM _migrations ORDER BY id") == rows


async def test_two_processes_starting_together_apply_each_migration_once(pg: PostgresPlace) -> None:
    stores = await asyncio.gather(*(pg.open() for _ in range(4)))
    for store in stores:
        await store.close()
    assert await pg.fetch("SELECT COUNT(*), COUNT(DISTINCT id) FROM _migrations") == [(len(MIGRATIONS),) * 2]


async def test_a_later_migration_runs_once_and_a_failing_one_leaves_nothing(pg: PostgresPlace) -> None:
    conn = await connect(pg)
    try:
        assert await apply_pg_migrations(conn) == [mid for mid, _, _ in MIGRATIONS]
        calls: list[str] = []

        async def add_column(db: MigrationDb) -> None:
            calls.append(db.dialect)
            await db.script("ALTER TABLE webhooks ADD COLUMN note TEXT;")

        extended = [*MIGRATIONS, (900, "webhook note", add_column), (901, "webhook label", "ALTER TABLE webhooks"
                                                                     " ADD COLUMN label {text_c} NOT NULL DEFAULT ''")]
        assert await apply_pg_migrations(conn, extended) == [900, 901]
        assert await apply_pg_migrations(conn, extended) == []
        assert calls == ["postgresql"]
        assert await conn.fetchval("SELECT collation_name FROM information_schema.columns WHERE table_schema ="
                                   " current_schema() AND table_name = 'webhooks' AND column_name = 'label'") == "C"
        broken = [*extended, (902, "broken", "CREATE TABLE half (x TEXT); SELECT nope FROM nowhere;")]
        with pytest.raises(Exception, match="nowhere"):
            await apply_pg_migrations(conn, broken)
        assert await conn.fetchval("SELECT to_regclass('half')") is None
        assert max(r[0] for r in await conn.fetch("SELECT id FROM _migrations")) == 901
    finally:
        await conn.close()


async def test_a_database_from_a_newer_version_is_refused(pg: PostgresPlace) -> None:
    await (await pg.open()).close()
    await pg.execute("INSERT INTO _migrations (id, name, applied_at) VALUES (999, 'future', 0)")
    with pytest.raises(StoreError, match="newer version") as info:
        await pg.open()
    assert "\n" not in str(info.value)


async def test_running_token_sums_are_filled_for_rows_written_before_migration_4(pg: PostgresPlace) -> None:
    conn = await connect(pg)
    try:
        await apply_pg_migrations(conn, [m for m in MIGRATIONS if m[0] < 4])
        await conn.execute("INSERT INTO groups (id, key, name, created_at, latest_seq) VALUES (1, 'k', 'g', 0, 3)")
        await conn.execute("SELECT setval(pg_get_serial_sequence('groups', 'id'), 1)")
        for seq, tokens in ((1, 10), (2, 0), (3, 5)):
            await conn.execute("INSERT INTO messages (group_id, seq, author_type, author_name, text, token_count,"
                               " created_at) VALUES (1, $1, 'user', 'a', 't', $2, 0)", seq, tokens)
    finally:
        await conn.close()
    async with await pg.open() as store:
        rows = await store.thread.messages(1)
        assert [m.tokens_before for m in rows] == [0, 11, 13]
        assert await store.thread.thread_tokens(1, through=3) == 19
        added, _ = await store.thread.append_user_message(1, NewMessage("user", "a", "more", token_count=3))
        assert added.seq == 4 and added.tokens_before == 19


async def test_a_missing_schema_is_one_store_error(pg: PostgresPlace) -> None:
    with pytest.raises(StoreError, match="no schema") as info:
        await PostgresStore.open(pg.url, schema="rt_test_does_not_exist")
    assert "\n" not in str(info.value)

