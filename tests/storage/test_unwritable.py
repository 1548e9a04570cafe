"""A database that takes no writes, for real: a SQLite file at its page limit, a read-only
database, a full disk, a PostgreSQL server refusing rows. The write is `StoreUnwritable` (saying
what is wrong in words for people), nothing is half-written, and the store's health sees the
outage start and end whichever write failed."""
from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.errors import StoreUnwritable
from bot.core.models import GroupSettings, NewMessage
from bot.core.rules.store_health import Outage, StoreHealth
from storage import SqliteStore, SqlStore
from storage.pg import PostgresStore
from tests.fakes.databases import PostgresPlace
from tests.fakes.faults import FullDisk, pg_disk_full, read_only, writer

FULL = "the database file or its disk is full"


def user(text: str) -> NewMessage:
    return NewMessage("user", "alice", text, author_user_id="alice")


def watched(store: SqlStore) -> list[Outage]:
    told: list[Outage] = []
    store.health.subscribe(told.append)
    return told


async def append_until_refused(store: SqlStore, group_id: int, tries: int = 500) -> StoreUnwritable:
    for i in range(tries):
        try:
            await store.thread.append_user_message(group_id, user(f"message {i} " + "x" * 2000))
        except StoreUnwritable as exc:
            return exc
    raise AssertionError(f"{tries} appends and the database never said it was full")


async def assert_whole(store: SqlStore, group_id: int) -> None:
    """Every seq the group counts is a row: the refused write left nothing half-done."""
    group = await store.groups.get_group(group_id)
    assert [m.seq for m in await store.thread.messages(group_id)] == list(range(1, group.latest_seq + 1))


async def test_a_sqlite_file_at_its_page_limit(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "rt.db", health=StoreHealth(after=0)) as store:
        told = watched(store)
        group = await store.groups.create_group("k", "general", GroupSettings())
        conn = writer(store)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite itself: not one page more
        refused = await append_until_refused(store, group.id)
        assert (str(refused), refused.public) == ("database error: database or disk is full", FULL)
        assert [(o.reason, o.fixed_at) for o in told] == [(FULL, None)]
        await store.groups.update_group(group.id, paused=True)  # an update in place still commits ...
        assert store.health.outage is not None  # ... and says nothing about the rows that fail
        await append_until_refused(store, group.id, tries=1)  # a second failure: told once only
        conn.execute("PRAGMA max_page_count = 1073741823")  # room again
        await store.thread.append_user_message(group.id, user("after"))
        assert len(told) == 2 and told[1].fixed_at is not None and store.health.outage is None
        await assert_whole(store, group.id)


async def test_a_read_only_sqlite_database(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "rt.db", health=StoreHealth(after=0)) as store:
        told = watched(store)
        group = await store.groups.create_group("k", "general", GroupSettings())
        with read_only(store):
            with pytest.raises(StoreUnwritable) as refused:
                await store.thread.append_user_message(group.id, user("hello"))
            assert refused.value.public == "the database file is read-only"
            with pytest.raises(StoreUnwritable):  # nothing at all is written
                await store.leases.renew_leases([group.id], 30)
        await store.leases.renew_leases([group.id], 30)
        assert [o.fixed_at is not None for o in told] == [False, True]
        await assert_whole(store, group.id)


async def test_a_full_disk(tmp_path: Path) -> None:
    reason = FullDisk.unavailable(tmp_path / "probe")
    if reason is not None:
        pytest.skip(reason)
    with FullDisk(tmp_path / "disk") as disk:
        async with await SqliteStore.open(disk.where / "rt.db", health=StoreHealth(after=0)) as store:
            told = watched(store)
            group = await store.groups.create_group("k", "general", GroupSettings())
            await store.thread.append_user_message(group.id, user("before"))
            disk.fill()
            refused = await append_until_refused(store, group.id)
            assert refused.public == FULL
            disk.free()
            await store.thread.append_user_message(group.id, user("after"))
            assert [o.fixed_at is not None for o in told] == [False, True]
            assert next(m.text for m in await store.thread.messages(group.id)) == "before"
            assert (await store.thread.messages(group.id))[-1].text == "after"
            await assert_whole(store, group.id)


async def test_a_postgresql_server_that_refuses_rows(pg: PostgresPlace) -> None:
    store = await PostgresStore.open(pg.target, health=StoreHealth(after=0))
    try:
        told = watched(store)
        group = await store.groups.create_group("k", "general", GroupSettings())
        async with pg_disk_full(pg):
            refused = await append_until_refused(store, group.id, tries=1)
            assert refused.public == "the database server's disk is full"
            assert "No space left on device" in str(refused)
            assert await store.leases.acquire_lease(group.id, 30) is None  # other writes still commit
            assert store.health.outage is not None
        await store.thread.append_user_message(group.id, user("after"))
        assert [o.fixed_at is not None for o in told] == [False, True]
        await assert_whole(store, group.id)
    finally:
        await store.close()
