"""The numbered migrations on PostgreSQL: the same ids and the same schema as SQLite's, applied
once (also by two processes starting together), refused when written by a newer version."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.core.errors import StoreError
from bot.core.models import NewMessage
from storage import MIGRATIONS
from storage.pg import PostgresStore
from storage.pg_migrations import PG_MIGRATIONS, apply_pg_migrations
from tests.fakes.databases import PostgresPlace, SqlitePlace


async def connect(place: PostgresPlace) -> Any:
    import asyncpg

    return await asyncpg.connect(place.target)


def test_the_registries_have_the_same_ids_and_names() -> None:
    assert [(mid, name) for mid, name, _ in PG_MIGRATIONS] == [(mid, name) for mid, name, _ in MIGRATIONS]


async def test_the_schema_has_the_tables_and_columns_of_sqlites(pg: PostgresPlace, tmp_path) -> None:
    await (await pg.open()).close()
    sqlite = SqlitePlace(tmp_path / "rt.db")
    await (await sqlite.open()).close()
    lite: dict[str, set[str]] = {}
    for (table,) in await sqlite.fetch("SELECT name FROM sqlite_master WHERE type = 'table'"):
        lite[table] = {r[1] for r in await sqlite.fetch(f"PRAGMA table_info({table})")}
    postgres: dict[str, set[str]] = {}
    for table, column in await pg.fetch(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = ?", (pg.schema,)):
        postgres.setdefault(table, set()).add(column)
    assert postgres == lite
    lite_indexes = {r[0] for r in await sqlite.fetch(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex%'")}
    pg_indexes = {r[0] for r in await pg.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = ?", (pg.schema,))}
    assert lite_indexes <= pg_indexes  # PostgreSQL also names its primary keys and unique constraints


async def test_fresh_schema_gets_a_row_per_migration_and_applying_again_is_a_no_op(pg: PostgresPlace) -> None:
    await (await pg.open()).close()
    rows = await pg.fetch("SELECT id, name, applied_at FROM _migrations ORDER BY id")
    assert [(r[0], r[1]) for r in rows] == [(mid, name) for mid, name, _ in PG_MIGRATIONS]
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
    assert await pg.fetch("SELECT COUNT(*), COUNT(DISTINCT id) FROM _migrations") == [(len(PG_MIGRATIONS),) * 2]


async def test_a_later_migration_runs_once_and_a_failing_one_leaves_nothing(pg: PostgresPlace) -> None:
    conn = await connect(pg)
    try:
        assert await apply_pg_migrations(conn) == [mid for mid, _, _ in PG_MIGRATIONS]
        calls: list[int] = []

        async def add_column(db: Any) -> None:
            calls.append(1)
            await db.execute("ALTER TABLE webhooks ADD COLUMN note TEXT")

        extended = [*PG_MIGRATIONS, (900, "webhook note", add_column)]
        assert await apply_pg_migrations(conn, extended) == [900]
        assert await apply_pg_migrations(conn, extended) == []
        assert calls == [1]
        broken = [*extended, (901, "broken", "CREATE TABLE half (x TEXT); SELECT nope FROM nowhere;")]
        with pytest.raises(Exception, match="nowhere"):
            await apply_pg_migrations(conn, broken)
        assert await conn.fetchval("SELECT to_regclass('half')") is None
        assert max(r[0] for r in await conn.fetch("SELECT id FROM _migrations")) == 900
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
        await apply_pg_migrations(conn, [m for m in PG_MIGRATIONS if m[0] < 4])
        await conn.execute("INSERT INTO groups (id, key, name, created_at, latest_seq) VALUES (1, 'k', 'g', 0, 3)")
        await conn.execute("SELECT setval(pg_get_serial_sequence('groups', 'id'), 1)")
        for seq, tokens in ((1, 10), (2, 0), (3, 5)):
            await conn.execute("INSERT INTO messages (group_id, seq, author_type, author_name, text, token_count,"
                               " created_at) VALUES (1, $1, 'user', 'a', 't', $2, 0)", seq, tokens)
    finally:
        await conn.close()
    async with await pg.open() as store:
        rows = await store.messages(1)
        assert [m.tokens_before for m in rows] == [0, 11, 13]
        assert await store.thread_tokens(1, through=3) == 19
        added, _ = await store.append_user_message(1, NewMessage("user", "a", "more", token_count=3))
        assert added.seq == 4 and added.tokens_before == 19


async def test_a_missing_schema_is_one_store_error(pg: PostgresPlace) -> None:
    with pytest.raises(StoreError, match="no schema") as info:
        await PostgresStore.open(pg.url, schema="rt_test_does_not_exist")
    assert "\n" not in str(info.value)

