"""PostgreSQL ending this store's connections (as a restart does), staged through a TCP proxy so
that other tests on the shared server are untouched: a connection the server ended while it sat
in the pool is never used for a statement again, and a lease renewal or a read right after it
simply succeeds on a fresh connection."""
from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest

from bot.core.models import GroupSettings
from storage import SqlStore, open_store
from tests.fakes.databases import PostgresPlace
from tests.fakes.tcp_proxy import TcpProxy


@pytest.fixture
async def proxy(pg: PostgresPlace) -> AsyncIterator[TcpProxy]:
    async with TcpProxy.to_url(pg.url) as running:
        yield running


@pytest.fixture
async def admin(pg: PostgresPlace) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg.url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.mark.parametrize("first", ["a lease renewal", "a read"])
async def test_a_connection_the_server_ended_in_the_pool_is_not_used_again(
        pg: PostgresPlace, proxy: TcpProxy, admin: asyncpg.Connection, first: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="storage.pg")
    store: SqlStore = await open_store(proxy.url(pg.target))
    try:
        group = await store.groups.create_group("console:main", "main", GroupSettings())
        assert await store.leases.acquire_lease(group.id, 30) is None
        await store.leases.watch(lambda group_id: None)  # the listening connection is one the server ends too
        assert [g.id for g in await store.groups.list_groups()] == [group.id]  # a second connection, idle in the pool
        for _ in range(2):
            assert await proxy.end_backends(admin) >= 1  # the idle connection (the first time the listener too)
            if first == "a lease renewal":
                assert await store.leases.renew_leases([group.id], 30) == {group.id}
                assert [g.id for g in await store.groups.list_groups()] == [group.id]
            else:
                assert [g.id for g in await store.groups.list_groups()] == [group.id]
                assert await store.leases.renew_leases([group.id], 30) == {group.id}
    finally:
        await store.close()
    logged = [r.getMessage() for r in caplog.records]
    assert not [line for line in logged if "another operation" in line]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # no outage: the server answered
