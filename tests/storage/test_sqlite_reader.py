"""A SQLite file's store works on the loop's thread: reads on a read-only connection of their
own never wait behind a write transaction and see only committed rows; a write waits for
another process's write lock with async sleeps (the loop keeps running), up to the busy
timeout. An in-memory database (no second connection can see it) keeps one connection."""
from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from bot.core.errors import StoreError
from bot.core.models import GroupSettings, NewMessage
from storage.store import SqliteStore
from tests.support import bound, eventually


def _person(text: str) -> NewMessage:
    return NewMessage("user", "alice", text, author_user_id="1", token_count=3)


async def test_a_read_sees_committed_rows_and_never_waits_for_an_open_write(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "rt.db")
    try:
        group = await store.groups.create_group("g", "g", GroupSettings())
        await store.thread.append_user_message(group.id, _person("first"))
        inside = asyncio.Event()
        release = asyncio.Event()

        async def hold_a_write() -> None:
            async with store._write() as db:
                await db.exec("UPDATE groups SET name = ? WHERE id = ?", ("renamed", group.id))
                inside.set()
                await release.wait()

        writer = asyncio.create_task(hold_a_write())
        try:
            await inside.wait()
            # The write connection's lock is held: a read through it would wait for the release.
            seen = await asyncio.wait_for(store.groups.get_group(group.id), bound(1.0))
            assert seen.name == "g"  # the open transaction's change is not visible yet
            assert [m.text for m in await store.thread.messages(group.id)] == ["first"]
        finally:
            release.set()
            await writer
        assert (await store.groups.get_group(group.id)).name == "renamed"
    finally:
        await store.close()


async def test_the_read_connection_cannot_write(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "rt.db")
    try:
        group = await store.groups.create_group("g", "g", GroupSettings())
        async with store._read() as db:
            row = await db.one("SELECT id FROM groups WHERE id = ?", (group.id,))
            assert row is not None and row[0] == group.id
        with pytest.raises(StoreError, match="readonly database"):
            async with store._read() as db:
                await db.exec("DELETE FROM groups")
        assert (await store.groups.get_group(group.id)).id == group.id  # nothing was deleted
    finally:
        await store.close()


async def test_a_write_reports_the_rows_it_changed_and_the_id_it_made(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "rt.db")
    try:
        a = await store.groups.create_group("a", "a", GroupSettings())
        b = await store.groups.create_group("b", "b", GroupSettings())
        assert b.id == a.id + 1
        async with store._write() as db:
            assert await db.exec("UPDATE groups SET name = name WHERE id IN (?, ?)", (a.id, b.id)) == 2
            assert await db.exec("UPDATE groups SET name = name WHERE id = ?", (999,)) == 0
    finally:
        await store.close()


async def test_an_in_memory_database_reads_its_own_writes() -> None:
    store = await SqliteStore.open(":memory:")
    try:
        group = await store.groups.create_group("g", "g", GroupSettings())
        message, _ = await store.thread.append_user_message(group.id, _person("hello"))
        assert (await store.thread.get_message(group.id, message.seq)).text == "hello"
    finally:
        await store.close()


async def test_a_write_waits_for_another_process_without_blocking_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "rt.db"
    store = await SqliteStore.open(path, busy_timeout_ms=3000)
    other = sqlite3.connect(path, isolation_level=None)  # another process's connection, in effect
    try:
        group = await store.groups.create_group("g", "g", GroupSettings())
        other.execute("BEGIN IMMEDIATE")  # it holds the write lock
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        append = asyncio.create_task(store.thread.append_user_message(group.id, _person("waits")))
        # the loop runs meanwhile: ten ticks
        await eventually(lambda: ticks >= 10 or append.done(), "ten ticks of the loop")
        assert not append.done() and ticks >= 10  # still waiting for the lock after them
        other.execute("COMMIT")
        message, _ = await asyncio.wait_for(append, bound())
        ticker.cancel()
        assert message.seq == 1
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError, match="locked by another process"):  # it waited (above), then gives up
            await asyncio.wait_for(store.thread.append_user_message(group.id, _person("gives up")), 60)
        other.execute("ROLLBACK")
        assert [m.text for m in await store.thread.messages(group.id)] == ["waits"]  # nothing half-written
    finally:
        other.close()
        await store.close()


async def test_many_store_calls_in_a_row_still_let_other_tasks_run(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "rt.db")
    try:
        group = await store.groups.create_group("g", "g", GroupSettings())
        ran = asyncio.Event()

        async def other_task() -> None:
            ran.set()

        other = asyncio.create_task(other_task())
        started = time.monotonic()
        while not ran.is_set() and time.monotonic() - started < 5:
            await store.groups.get_group(group.id)  # statements on the loop's thread: no suspension of their own
        assert ran.is_set()
        await other
    finally:
        await store.close()
