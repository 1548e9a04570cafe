"""Storage for Roundtable: `SqlStore` implements `bot.core.ports.Store` over SQLite
(`SqliteStore`, the embedded default) or PostgreSQL (`storage.pg.PostgresStore`).

    store = await open_store("roundtable.db")                  # or sqlite:///roundtable.db
    store = await open_store("postgresql://user@host/db")      # asyncpg pool, migrations
    ...
    await store.close()
"""
from __future__ import annotations

import time
from pathlib import Path

from bot.core.errors import StoreError
from bot.core.rules.secrets import mask_url
from bot.core.rules.store_health import StoreHealth
from storage.access import Clock
from storage.db import DEFAULT_BUSY_TIMEOUT_MS, LOCKED_MESSAGE, open_db
from storage.migrations import MIGRATIONS, apply_migrations
from storage.store import SqliteStore, SqlStore

SQLITE_PREFIX = "sqlite:///"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def is_postgres(target: str | Path) -> bool:
    return str(target).startswith(POSTGRES_PREFIXES)


def sqlite_path(target: str | Path) -> str:
    """The file a SQLite target names: a plain path, or `sqlite:///path` (`sqlite:////abs/path`).
    Any other URL raises `StoreError`."""
    text = str(target)
    if text.startswith(SQLITE_PREFIX):
        path = text[len(SQLITE_PREFIX):]
        if not path:
            raise StoreError(f"{text}: name a file after sqlite:///, e.g. sqlite:///roundtable.db")
        return path
    scheme, sep, _ = text.partition("://")
    if sep and scheme.replace("+", "").isalnum():
        raise StoreError(f"unknown database URL scheme {scheme}://: use a file path, sqlite:///FILE "
                         "or postgresql://USER@HOST/DATABASE")
    return text


def describe(target: str | Path) -> str:
    """The target for messages: a path, or a URL with its password masked."""
    if is_postgres(target):
        return mask_url(str(target))
    return str(target)


async def open_store(
    target: str | Path, *, clock: Clock = time.time, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    health: StoreHealth | None = None,
) -> SqlStore:
    """The store at `target`: a `postgresql://` URL opens PostgreSQL; a path or `sqlite:///path`
    opens (creating) that SQLite file. Migrations are applied; problems raise `StoreError` (one
    line, no password). `health`: the tracker of whether it takes writes (default: the usual)."""
    if is_postgres(target):
        from storage.pg import PostgresStore

        return await PostgresStore.open(str(target), clock=clock, busy_timeout_ms=busy_timeout_ms, health=health)
    return await SqliteStore.open(sqlite_path(target), clock=clock, busy_timeout_ms=busy_timeout_ms, health=health)


__all__ = ["LOCKED_MESSAGE", "MIGRATIONS", "SqlStore", "SqliteStore", "apply_migrations", "describe",
           "is_postgres", "open_db", "open_store", "sqlite_path"]
