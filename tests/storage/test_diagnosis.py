"""A database's health read without changing it (`storage.diagnosis`), on SQLite and PostgreSQL (`place`):
through an open store (`/roundtable doctor`) and by `inspect` (`roundtable doctor`, `init`), which opens
no store (no file created, no migration applied)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.core.errors import StoreError
from bot.core.models import GroupSettings, NewMessage
from storage.diagnosis import inspect
from storage.migrations import MIGRATIONS
from tests.fakes.databases import Place

KNOWN = MIGRATIONS[-1][0]


async def test_health_through_a_store_and_by_inspecting_agree(place: Place) -> None:
    clock = [1000.0]
    async with await place.open(clock=lambda: clock[0]) as store:
        talk = await store.groups.create_group("discord:1", "#talk", GroupSettings(), guild_id="9", channel_id="1")
        quiet = await store.groups.create_group("discord:2", "#quiet", GroupSettings(), guild_id="9", channel_id="2")
        gone = await store.groups.create_group("discord:3", "#gone", GroupSettings(), guild_id="9", channel_id="3")
        await store.groups.update_group(gone.id, enabled=False)
        await store.webhooks.save_webhook("1", "111", "secret-webhook-token")
        for text in ("one", "two"):
            await store.thread.append_system_message(talk.id, NewMessage("system", "roundtable", text))
        await store.thread.append_user_message(quiet.id, NewMessage("user", "ann", "people's rows are never waiting"))
        await store.thread.append_system_message(gone.id, NewMessage("system", "roundtable", "a disabled group's"))
        store.owner_label = "console"
        assert await store.leases.acquire_lease(quiet.id, 30) is None
        clock[0] = 1060.0
        health = await store.diagnosis.database_report()
        inspection = await inspect(place.target, 1060.0)
    assert health == inspection.report
    assert (health.version, health.known, health.exists) == (KNOWN, KNOWN, True)
    [waiting] = health.waiting
    assert (waiting.group, waiting.rows, waiting.oldest_age) == ("#talk", 2, 60.0)
    [lease] = health.leases
    assert lease.group == "#quiet" and lease.holder == f"console (pid {os.getpid()})"
    assert lease.expires_in == pytest.approx(-30.0) and not lease.gone  # the store's clock ran 60 s
    assert [g.name for g in inspection.groups] == ["#talk", "#quiet"]  # enabled ones
    assert inspection.groups[0].channel_id == "1" and inspection.groups[0].guild_id == "9"
    assert inspection.webhooks == {"1": ("111", "secret-webhook-token")}


async def test_inspecting_a_newer_database_reads_its_version(place: Place) -> None:
    async with await place.open():
        pass
    await place.execute("INSERT INTO _migrations (id, name, applied_at) VALUES (?, ?, ?)", (KNOWN + 5, "future", 0))
    health = (await inspect(place.target, 0.0)).report
    assert health.version == KNOWN + 5 and health.known == KNOWN


async def test_inspecting_an_empty_database_creates_nothing(place: Place) -> None:
    if place.kind == "sqlite":
        health = (await inspect(place.target, 0.0)).report
        assert not health.exists and not Path(place.target).exists()
    else:
        health = (await inspect(place.target, 0.0)).report
        assert health.exists and health.version == 0
        assert await place.fetch("SELECT to_regclass('_migrations') IS NULL") == [(True,)]


async def test_inspecting_where_no_database_can_be(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"the directory .*nowhere of .* does not exist"):
        await inspect(str(tmp_path / "nowhere" / "rt.db"), 0.0)
    with pytest.raises(StoreError, match="is a directory"):
        await inspect(str(tmp_path), 0.0)
    with pytest.raises(StoreError, match=r"cannot read the database postgresql://rt:\*\*\*@127\.0\.0\.1:9/x"):
        await inspect("postgresql://rt:hunter2@127.0.0.1:9/x", 0.0)
