"""PostgreSQL's write locks per group (`storage.pg`, `storage.pg_locks`): writes of different
groups run at once, writes of one group and schema-wide writes wait, in one process and
across processes (two stores, two pools); and a write after another process changed a table
runs on fresh prepared statements."""
from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from bot.core.errors import AlreadyStored
from bot.core.models import GroupSettings, NewMessage
from storage import MIGRATIONS, SqlStore
from storage.pg_locks import WriteGate
from storage.pg_migrations import apply_pg_migrations
from tests.fakes.databases import PostgresPlace
from tests.support import bound, eventually, quiet_period

WAIT = 0.3  # long enough for a write that is not blocked to finish


def ask(text: str) -> NewMessage:
    return NewMessage("user", "u", text, author_user_id="u")


async def two_stores(pg: PostgresPlace, stack: AsyncExitStack, same: bool) -> tuple[SqlStore, SqlStore]:
    """The store holding a write and the store writing beside it: one store, or two (two processes)."""
    first = await stack.enter_async_context(await pg.open())
    second = first if same else await stack.enter_async_context(await pg.open())
    return first, second


@pytest.mark.parametrize("same", [True, False], ids=["one-process", "two-processes"])
async def test_a_write_of_another_group_goes_on_while_one_of_the_same_group_waits(
    pg: PostgresPlace, same: bool
) -> None:
    async with AsyncExitStack() as stack:
        holder, writer = await two_stores(pg, stack, same)
        a = await holder.groups.create_group("a", "a", GroupSettings())
        b = await holder.groups.create_group("b", "b", GroupSettings())
        async with holder._write(a.id):  # a long write of group A (e.g. in the middle of a turn)
            stored, _ = await asyncio.wait_for(writer.thread.append_user_message(b.id, ask("in B")), bound(5))
            assert stored.seq == 1
            same_group = asyncio.create_task(writer.thread.append_user_message(a.id, ask("in A")))
            await quiet_period(WAIT)
            assert not same_group.done()  # behind the open write of A
        stored, _ = await asyncio.wait_for(same_group, bound(5))
        assert stored.seq == 1


@pytest.mark.parametrize("same", [True, False], ids=["one-process", "two-processes"])
async def test_a_schema_wide_write_waits_for_a_group_write(pg: PostgresPlace, same: bool) -> None:
    async with AsyncExitStack() as stack:
        holder, writer = await two_stores(pg, stack, same)
        a = await holder.groups.create_group("a", "a", GroupSettings())
        async with holder._write(a.id):
            creating = asyncio.create_task(writer.groups.create_group("c", "c", GroupSettings()))
            await quiet_period(WAIT)
            assert not creating.done()
        assert (await asyncio.wait_for(creating, bound(5))).key == "c"


@pytest.mark.parametrize("same", [True, False], ids=["one-process", "two-processes"])
async def test_a_group_write_waits_for_a_schema_wide_write(pg: PostgresPlace, same: bool) -> None:
    async with AsyncExitStack() as stack:
        holder, writer = await two_stores(pg, stack, same)
        a = await holder.groups.create_group("a", "a", GroupSettings())
        async with holder._write():
            appending = asyncio.create_task(writer.thread.append_user_message(a.id, ask("x")))
            await quiet_period(WAIT)
            assert not appending.done()
        assert (await asyncio.wait_for(appending, bound(5)))[0].seq == 1


async def test_two_processes_appending_to_one_group_allocate_every_seq_once(pg: PostgresPlace) -> None:
    rounds = 40
    async with await pg.open() as one, await pg.open() as two:
        group = await one.groups.create_group("g", "g", GroupSettings())
        other = await one.groups.create_group("h", "h", GroupSettings())

        async def append(store: SqlStore, group_id: int, name: str) -> list[int]:
            return [(await store.thread.append_user_message(group_id,
                                                            ask(f"{name} {i}")))[0].seq for i in range(rounds)]

        seqs = await asyncio.gather(
            append(one, group.id, "one"), append(two, group.id, "two"),
            append(one, group.id, "one again"), append(two, group.id, "two again"),
            append(one, other.id, "one"), append(two, other.id, "two"),
        )
        assert sorted(seqs[0] + seqs[1] + seqs[2] + seqs[3]) == list(range(1, 4 * rounds + 1))
        assert sorted(seqs[4] + seqs[5]) == list(range(1, 2 * rounds + 1))
        for found, count in ((group, 4 * rounds), (other, 2 * rounds)):
            rows = await one.thread.messages(found.id)
            assert [m.seq for m in rows] == list(range(1, count + 1))
            assert (await one.groups.get_group(found.id)).latest_seq == count


async def test_one_external_id_posted_in_two_groups_at_once_is_refused_in_the_second(pg: PostgresPlace) -> None:
    async with await pg.open() as one, await pg.open() as two:
        a = await one.groups.create_group("a", "a", GroupSettings())
        b = await one.groups.create_group("b", "b", GroupSettings())
        for group in (a, b):
            await one.thread.append_user_message(group.id, ask("q"))
        async with one._write(a.id) as db:  # group A maps the id and has not committed yet
            await one._access.map_external_ids(db, a.id, 1, ["555"])
            other = asyncio.create_task(two.posting.record_posted(b.id, 1, "555"))
            await quiet_period(WAIT)
            assert not other.done()  # its insert waits for A's
        with pytest.raises(AlreadyStored):
            await asyncio.wait_for(other, bound(5))
        mapped = await pg.fetch("SELECT group_id, seq FROM message_external_ids WHERE external_id = '555'")
        assert mapped == [(a.id, 1)]
        assert (await one.thread.get_message(b.id, 1)).external_ids == ()


@pytest.mark.parametrize("table", ["messages", "groups"])
async def test_a_write_after_another_process_altered_a_table_succeeds(pg: PostgresPlace, table: str) -> None:
    async with await pg.open() as store:
        group = await store.groups.create_group("g", "g", GroupSettings())
        await store.thread.append_user_message(group.id, ask("q"))
        await store.posting.confirm_message(group.id, 1)  # prepares SELECT * FROM messages (and groups)
        # another process migrates (a newer release's migration, as storage.pg_migrations applies one)
        await pg.execute(f"BEGIN; ALTER TABLE {table} ADD COLUMN extra_{table} TEXT;"
                         " INSERT INTO _migrations (id, name, applied_at) VALUES (999, 'extra', 0); COMMIT")
        await store.posting.confirm_message(group.id, 1)
        stored, _ = await store.thread.append_user_message(group.id, ask("after"))
        assert stored.seq == 2


async def test_writers_waiting_for_their_group_hold_no_connection(pg: PostgresPlace) -> None:
    async with await pg.open() as store:
        a = await store.groups.create_group("a", "a", GroupSettings())
        b = await store.groups.create_group("b", "b", GroupSettings())
        async with store._write(a.id):
            waiting = [asyncio.create_task(store.thread.append_user_message(a.id, ask(f"{i}"))) for i in range(20)]
            await quiet_period(WAIT)
            # a read still gets a connection
            assert (await asyncio.wait_for(store.groups.get_group(a.id), bound(5))).latest_seq == 0
            assert (await asyncio.wait_for(store.thread.append_user_message(b.id, ask("b")), bound(5)))[0].seq == 1
            assert not any(task.done() for task in waiting)
        seqs = [stored.seq for stored, _ in await asyncio.wait_for(asyncio.gather(*waiting), bound(10))]
        assert seqs == list(range(1, 21))  # in the order they asked


async def test_the_gate_orders_one_process_s_writes() -> None:
    gate, log = WriteGate(4), []

    async def write(name: str, group: int | None, hold: float = 0.05) -> None:
        async with gate.schema() if group is None else gate.group(group):
            log.append(f"+{name}")
            await asyncio.sleep(hold)
            log.append(f"-{name}")

    first = asyncio.create_task(write("a1", 1, 0.1))
    await eventually(lambda: log, "a1 holding its group")
    others = [asyncio.create_task(w) for w in (write("a2", 1), write("b", 2), write("all", None), write("c", 3))]
    await asyncio.gather(first, *others)
    assert log.index("-a1") < log.index("+a2")  # one group: one at a time
    assert log.index("+b") < log.index("-a1")  # another group: at once
    assert log.index("-a1") < log.index("+all") and log.index("-b") < log.index("+all")  # alone...
    assert log.index("-all") < log.index("+c")  # ...and not starved by writes arriving after it
    assert log.index("+all") + 1 == log.index("-all")
    assert not gate._groups


async def test_a_migration_waits_for_writes_and_the_next_write_runs_after_it(pg: PostgresPlace) -> None:
    import asyncpg

    async with await pg.open() as store:
        group = await store.groups.create_group("g", "g", GroupSettings())
        await store.thread.append_user_message(group.id, ask("q"))
        await store.posting.confirm_message(group.id, 1)
        newer = (MIGRATIONS[-1][0] + 1, "a column more", "ALTER TABLE messages ADD COLUMN extra TEXT")
        conn = await asyncpg.connect(pg.target)  # another process, a newer version, starting
        try:
            async with store._write(group.id):
                migrating = asyncio.create_task(apply_pg_migrations(conn, [*MIGRATIONS, newer]))
                await quiet_period(WAIT)
                assert not migrating.done()  # no table changes under a write
            assert await asyncio.wait_for(migrating, bound(5)) == [newer[0]]
        finally:
            await conn.close()
        await store.posting.confirm_message(group.id, 1)
        assert (await store.thread.append_user_message(group.id, ask("after")))[0].seq == 2
