"""The database report (`bot.core.rules.doctor.DatabaseReport`): schema version, the outbox, the leases.

`read_report` reads it over any `Db`, written once for both databases: through an open store
(`store.diagnosis.database_report()`, `/roundtable doctor` in the running bot) and without one
(`storage.diagnosis.inspect`, for `roundtable doctor` and `roundtable init`).

The queries read tables that exist from migration 2 on; an older database has
only its version read.
"""
from __future__ import annotations

from bot.core.rules.doctor import DatabaseReport, Holder, Waiting
from storage.access import Access
from storage.lease import describe_owner, owner_alive
from storage.migrations import MIGRATIONS
from storage.sql import Db

FIRST_READABLE = 2  # the leases table and delivery_problem arrive with migration 2


async def read_report(db: Db, where: str, now: float) -> DatabaseReport:
    row = await db.one("SELECT COALESCE(MAX(id), 0) FROM _migrations")
    version = int(row[0]) if row is not None else 0
    known = MIGRATIONS[-1][0]
    if version < FIRST_READABLE:
        return DatabaseReport(where, True, version, known)
    waiting = [Waiting(r[0], int(r[1]), now - float(r[2])) for r in await db.all(
        "SELECT g.name, COUNT(*), MIN(m.created_at) FROM messages m JOIN groups g ON g.id = m.group_id"
        " WHERE m.confirmed = 0 AND m.author_type <> 'user' AND g.enabled = 1 GROUP BY g.id, g.name ORDER BY g.id")]
    leases = [Holder(r[0], describe_owner(r[1], r[2]), float(r[3]) - now, not owner_alive(r[1])) for r in await db.all(
        "SELECT g.name, l.owner, l.label, l.expires_at FROM leases l JOIN groups g ON g.id = l.group_id ORDER BY g.id")]
    return DatabaseReport(where, True, version, known, tuple(waiting), tuple(leases))


class Diagnosis:
    """The store's `DiagnosisStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    @property
    def migrations_applied(self) -> list[int]:
        """The ids of the migrations that opening this store applied."""
        return list(self._access.backend.applied)

    async def schema_version(self) -> int:
        """The highest migration recorded in the database (0: none)."""
        async with self._access.read() as db:
            row = await db.one("SELECT COALESCE(MAX(id), 0) FROM _migrations")
        return 0 if row is None else int(row[0])

    async def database_report(self) -> DatabaseReport:
        """The database's schema version, outbox and leases (`bot.core.rules.doctor`)."""
        async with self._access.read() as db:
            return await read_report(db, self._access.database, self._access.now())
