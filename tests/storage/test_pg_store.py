"""What only PostgreSQL has: a pool (reads never wait for a write; a connection the server
ended is replaced), and one write lock per schema (two deployments in one database do not
wait for each other)."""
from __future__ import annotations

import asyncio

import pytest

from bot.core.errors import StoreError
from bot.core.models import GroupSettings, NewMessage
from storage import LOCKED_MESSAGE
from tests.fakes.databases import PostgresPlace, postgres_place, vacuum_catalogs
from tests.support import eventually


async def test_a_connection_the_server_ended_is_replaced(pg: PostgresPlace) -> None:
    async with await pg.open() as store:
        group = await store.groups.create_group("k", "n", GroupSettings())
        async with store._read() as db:
            row = await db.one("SELECT pg_backend_pid()")
        assert row is not None
        await pg.execute("SELECT pg_terminate_backend(?)", (row[0],))  # e.g. the server restarted

        async def ended() -> bool:
            return (await pg.fetch("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ?", (row[0],)))[0][0] == 0
        await eventually(ended, "the server ending the connection")
        assert (await store.groups.get_group(group.id)).id == group.id
        stored, _ = await store.thread.append_user_message(group.id, NewMessage("user", "u", "after",
                                                                                author_user_id="u"))
        assert stored.seq == 1


async def test_reads_go_on_while_another_process_holds_the_write_lock(pg: PostgresPlace) -> None:
    async with await pg.open(busy_timeout_ms=200) as store:
        group = await store.groups.create_group("k", "n", GroupSettings())
        async with pg.hold_write_lock():
            write = asyncio.create_task(store.groups.update_group(group.id, paused=True))
            for _ in range(5):
                assert not (await store.groups.get_group(group.id)).paused  # answered at once, the write waits
            with pytest.raises(StoreError) as info:
                await write
            assert str(info.value) == LOCKED_MESSAGE
        assert (await store.groups.update_group(group.id, paused=True)).paused


async def test_two_schemas_in_one_database_write_independently(pg: PostgresPlace) -> None:
    async with postgres_place() as other:
        async with await pg.open(busy_timeout_ms=200) as mine, await other.open(busy_timeout_ms=200) as theirs:
            group = await theirs.groups.create_group("k", "n", GroupSettings())
            async with pg.hold_write_lock():  # a long write in this schema
                assert (await theirs.groups.update_group(group.id, paused=True)).paused
                with pytest.raises(StoreError, match="locked"):
                    await mine.groups.create_group("k", "n", GroupSettings())
            assert await mine.groups.list_groups() == []


async def test_the_suite_vacuums_the_catalogs_it_churns_only_where_autovacuum_is_off(pg: PostgresPlace) -> None:
    autovacuum, before = (await pg.fetch("SELECT current_setting('autovacuum'), now()"))[0]
    assert await vacuum_catalogs(pg.url) is (autovacuum == "off")
    if autovacuum == "off":
        async def vacuumed() -> bool:  # (the server's statistics may lag a moment behind its vacuum)
            rows = await pg.fetch("SELECT last_vacuum >= ? FROM pg_stat_sys_tables WHERE relname = 'pg_attribute'",
                                  (before,))
            return bool(rows[0][0])
        await eventually(vacuumed, "pg_attribute vacuumed")
