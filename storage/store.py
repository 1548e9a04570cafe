"""`SqlStore`: the `bot.core.ports.Store` port over SQL, composed of one part per role; `SqliteStore`
over one SQLite file.

Each part owns one concept and holds the `storage.access.Access` they share (transactions, clock,
health, the lease owner, the appends): `storage.group` (groups), `storage.roster` (agents and their
cursors), `storage.thread` (the message log; what reached the surface), `storage.routing`
(decisions), `storage.episode`, `storage.run`, `storage.lease`, `storage.reading` (read cursors,
people, catch-up summaries), `storage.summary` (rolling summaries), `storage.draft`,
`storage.notes` (agents' memory), `storage.tools` (agents' tools: grants, the calls' journal),
`storage.schedule`, `storage.record` (the record in pages, for exports), `storage.usage` (model calls
and their tokens), `storage.webhook`,
`storage.interaction` and `storage.report` (the database report, the schema version). `SqlStore`
builds them and holds each as the attribute its role is named by in the port (`store.thread`,
`store.runs`, ...): a caller asks the part, `await store.thread.messages(group_id)`.

Usage::

    async with await SqliteStore.open("roundtable.db") as store:
        group = await store.groups.create_group("guild:channel", "general", GroupSettings())
"""
from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from bot.core.rules.store_health import StoreHealth
from storage.access import Access, Backend, Clock
from storage.db import DEFAULT_BUSY_TIMEOUT_MS, SqliteBackend
from storage.draft import Drafts
from storage.episode import Episodes
from storage.group import Groups
from storage.interaction import Interactions
from storage.lease import Leases
from storage.notes import Notes
from storage.reading import Reading
from storage.record import Record
from storage.report import Diagnosis
from storage.roster import Roster
from storage.routing import Routing
from storage.run import Runs
from storage.schedule import Schedules
from storage.summary import Summaries
from storage.thread import Posting, Thread
from storage.tools import Tools
from storage.usage import Spending
from storage.webhook import Webhooks

S = TypeVar("S", bound="SqlStore")


class SqlStore:
    """Implements `bot.core.ports.Store` over a backend: `SqliteStore` or `storage.pg.PostgresStore`
    (or `storage.open_store(target)`, which picks one)."""

    def __init__(self, backend: Backend, *, clock: Clock = time.time, health: StoreHealth | None = None) -> None:
        """`health`: the tracker told of every write's outcome (default: one with the usual waits)."""
        access = self._access = Access(backend, clock=clock, health=health)
        self.health = access.health
        self.leases = Leases(access)
        self.reading = Reading(access)
        self.groups = Groups(access)
        self.roster = Roster(access)
        self.thread = Thread(access, self.reading)
        self.posting = Posting(access)
        self.routing = Routing(access)
        self.episodes = Episodes(access)
        self.runs = Runs(access, self.leases)
        self.summaries = Summaries(access)
        self.drafts = Drafts(access)
        self.notes = Notes(access)
        self.tools = Tools(access)
        self.schedules = Schedules(access)
        self.record = Record(access)
        self.spending = Spending(access)
        self.webhooks = Webhooks(access)
        self.interactions = Interactions(access)
        self.diagnosis = Diagnosis(access)
        # What tests and the bench reach under the store for (a transaction of their own, the dialect).
        self._backend, self._sql = backend, access.sql
        self._write, self._read = access.write, access.read

    @property
    def owner(self) -> str:
        """Who holds this store's leases (host, pid and a random part)."""
        return self._access.owner

    @property
    def owner_label(self) -> str:
        """This process for people, in who-holds-a-lease messages ('console', 'discord bot')."""
        return self._access.owner_label

    @owner_label.setter
    def owner_label(self, label: str) -> None:
        self._access.owner_label = label

    @property
    def database(self) -> str:
        """The database, for messages (a URL's password masked)."""
        return self._access.database

    @property
    def migrations_applied(self) -> list[int]:
        """The ids of the migrations that opening this store applied."""
        return self.diagnosis.migrations_applied

    async def close(self) -> None:
        """Close the connections; later calls raise `StoreError`. Idempotent."""
        await self._access.close()

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class SqliteStore(SqlStore):
    """The store over one SQLite file. Open with `await SqliteStore.open(path)`."""

    @classmethod
    async def open(
        cls, path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, clock: Clock = time.time,
        health: StoreHealth | None = None,
    ) -> SqliteStore:
        """Open the file at `path` (migrating it) and wrap it in a store (`health`: see `SqlStore`)."""
        return cls(await SqliteBackend.open(path, busy_timeout_ms=busy_timeout_ms), clock=clock, health=health)


__all__ = ["SqlStore", "SqliteStore"]
