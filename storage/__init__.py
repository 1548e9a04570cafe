"""SQLite storage for Roundtable: `SqliteStore` implements `bot.core.ports.Store`.

    store = await SqliteStore.open("roundtable.db")   # WAL, busy timeout, migrations
    ...
    await store.close()
"""
from storage.db import LOCKED_MESSAGE, open_db
from storage.migrations import MIGRATIONS, apply_migrations
from storage.store import SqliteStore

__all__ = ["LOCKED_MESSAGE", "MIGRATIONS", "SqliteStore", "apply_migrations", "open_db"]
