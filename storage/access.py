"""The store's plumbing (`Access`, which every part of `storage.store.SqlStore` holds):
transactions over a backend, error translation, shared lookups and the appends.

A backend (`storage.db.SqliteBackend`, `storage.pg.PostgresBackend`) owns the
connections and gives out one `Db` per write transaction or read. Writes are
serialised across processes: SQLite by `BEGIN IMMEDIATE` (one writer for the whole
file), PostgreSQL by transaction-scoped advisory locks per group (`storage.pg`). A
write names its group (`write(group_id)`) when it reads and changes only that
group's rows; one that touches no group or several takes `write()`, which excludes
every other write. Either way a write sees every write of its group committed before
it, so seq allocation, leases and the checks inside a write are as safe as a single
process's. Reads see committed data.

Every write transaction's outcome goes to the store's `health` (`bot.core.rules.store_health`): the
one place that notices a database which takes no writes (a full disk, a read-only
file), whichever caller's write it was.
"""
from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal, Protocol

from bot.core.errors import AlreadyStored, NotFound, StoreError, StoreUnwritable
from bot.core.models import Episode, Message, NewMessage, token_cost
from bot.core.rules.attachments import masked_file
from bot.core.rules.secrets import mask
from bot.core.rules.store_health import StoreHealth
from storage.codec import attachments_to_json, dumps, tags_to_json, to_message, unique
from storage.sql import Db, Dialect, Params, Row

log = logging.getLogger(__name__)

Clock = Callable[[], float]
GROUPS_OF_KEPT = 20_000  # rows whose group `group_of` remembers


class Backend(Protocol):
    """Connections of one database, for one store."""

    dialect: Dialect
    label: str  # the database for messages: a path, or a URL without its password
    applied: list[int]  # the migrations applied when it was opened

    def write(self, group_id: int | None = None) -> AbstractAsyncContextManager[Db]:
        """One write transaction, serialised against every other writer of `group_id` (of
        the database, when None); rolled back when the block raises (a database failure
        becomes `StoreError`). A backend may serialise more (SQLite: every writer)."""
        ...

    def read(self) -> AbstractAsyncContextManager[Db]:
        """A connection for reads that see committed data."""
        ...

    async def close(self) -> None: ...

    async def announce(self, db: Db, group_id: int, origin: str) -> None:
        """A row was appended to `group_id` in this transaction (by the store `origin`): tell
        the other processes when it commits (PostgreSQL: NOTIFY; SQLite: nothing, they poll)."""
        ...

    async def watch(self, origin: str, appended: Callable[[int], None]) -> None:
        """From now on call `appended(group_id)` when another store announces an append."""
        ...

    def report_to(self, health: StoreHealth) -> None:
        """Tell `health` when the database server cannot be reached and when it can again
        (PostgreSQL; SQLite has no server: nothing)."""
        ...


class _Watched:
    """A write transaction's `Db` that remembers its write statements, for the store's health:
    which statement failed, or which a committed transaction ran."""

    __slots__ = ("db", "failed", "statements")

    def __init__(self, db: Db) -> None:
        self.db = db
        self.statements: set[str] = set()
        self.failed: str | None = None

    def blamed(self) -> set[str]:
        """The statement that failed; else (the commit failed) every write statement it ran."""
        return {self.failed} if self.failed is not None else self.statements

    async def one(self, sql: str, params: Params = ()) -> Row | None:
        return await self.db.one(sql, params)

    async def all(self, sql: str, params: Params = ()) -> list[Row]:
        return await self.db.all(sql, params)

    async def exec(self, sql: str, params: Params = ()) -> int:
        self.statements.add(sql)
        try:
            return await self.db.exec(sql, params)
        except BaseException:  # whatever ended it (a cancel too), this statement was in flight; re-raised
            self.failed = sql
            raise

    async def insert(self, sql: str, params: Params = ()) -> int:
        self.statements.add(sql)
        try:
            return await self.db.insert(sql, params)
        except BaseException:  # as in exec; re-raised
            self.failed = sql
            raise

    async def exec_many(self, sql: str, rows: Sequence[Params]) -> None:
        self.statements.add(sql)
        try:
            await self.db.exec_many(sql, rows)
        except BaseException:  # as in exec; re-raised
            self.failed = sql
            raise


class Access:
    """What every part of the store shares: the backend's transactions (each write's outcome told
    to `health`), the clock, who holds this store's leases, and the lookups and appends that
    several parts make inside their transactions."""

    def __init__(self, backend: Backend, *, clock: Clock = time.time, health: StoreHealth | None = None) -> None:
        """`health`: the tracker told of every write's outcome (default: one with the usual waits)."""
        self.backend = backend
        self.health = health or StoreHealth()
        backend.report_to(self.health)
        self.sql = backend.dialect
        self._clock = clock
        self._closed = False
        # Who holds this store's leases: host and pid (so a dead holder on this host is
        # recognised at once) and a random part (two stores in one process differ).
        self.owner = f"{socket.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:12]}"
        self.owner_label = "roundtable"
        self._groups_of: dict[tuple[str, int], int] = {}  # (table, row id) -> group (rows never move)

    @property
    def database(self) -> str:
        """The database, for messages (a URL's password masked)."""
        return self.backend.label

    async def close(self) -> None:
        """Close the connections; later calls raise `StoreError`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.backend.close()

    def now(self) -> float:
        return float(self._clock())

    # transactions -----------------------------------------------------------
    @asynccontextmanager
    async def write(self, group_id: int | None = None) -> AsyncIterator[Db]:
        """One write transaction, or nothing at all. With `group_id`, the block reads and
        changes that group's rows only (and rows of no group that no other write touches);
        without, it is alone among the database's writes."""
        self.check_open()
        watched: _Watched | None = None
        try:
            async with self.backend.write(group_id) as db:
                watched = _Watched(db)
                yield watched
        except StoreUnwritable as exc:
            self.health.failed(exc.public, watched.blamed() if watched is not None else ())
            raise
        self.health.committed(watched.statements if watched is not None else ())

    async def group_of(self, table: str, row_id: int) -> int | None:
        """The group of row `row_id` of `table` (agents, runs, episodes), read before a write
        about it and remembered (a row never moves to another group); None when there is no
        such row (the write then runs alone and finds it missing) or on SQLite (one writer
        anyway)."""
        if self.sql.name == "sqlite":
            return None
        found = self._groups_of.get((table, row_id))
        if found is None:
            async with self.read() as db:
                row = await db.one(f"SELECT group_id FROM {table} WHERE id = ?", (row_id,))  # noqa: S608 (table: a name from code)
            if row is None:
                return None
            found = self.remember_group(table, row_id, int(row[0]))
        return found

    def remember_group(self, table: str, row_id: int, group_id: int) -> int:
        """Keep the group of a row (a run this store started, say) for `group_of`."""
        if len(self._groups_of) >= GROUPS_OF_KEPT:
            self._groups_of.clear()
        self._groups_of[(table, row_id)] = group_id
        return group_id

    @asynccontextmanager
    async def read(self) -> AsyncIterator[Db]:
        """A connection for reads (each statement sees committed data)."""
        self.check_open()
        async with self.backend.read() as db:
            yield db

    def check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    # shared lookups ---------------------------------------------------------------
    async def update(
        self, db: Db, table: str, row_id: int, changes: dict[str, object]
    ) -> None:
        """UPDATE `table` SET the given columns (column names come from code, never input)."""
        if not changes:
            return
        assignments = ", ".join(f"{column} = ?" for column in changes)
        await db.exec(f"UPDATE {table} SET {assignments} WHERE id = ?", (*changes.values(), row_id))  # noqa: S608 (table and columns: names from code; values bound)

    async def group_row(self, db: Db, group_id: int) -> Row:
        row = await db.one("SELECT * FROM groups WHERE id = ?", (group_id,))
        if row is None:
            raise NotFound(f"no group with id {group_id}")
        return row

    async def agent_row(
        self, db: Db, agent_id: int, *, include_removed: bool = False
    ) -> Row:
        row = await db.one("SELECT * FROM agents WHERE id = ?", (agent_id,))
        if row is None or (row["removed_at"] is not None and not include_removed):
            raise NotFound(f"no agent with id {agent_id}")
        return row

    # appending rows ---------------------------------------------------------------
    async def append(
        self, db: Db, group_id: int, message: NewMessage, *, episode_id: int | None,
        streak: Literal["reset", "count", "keep"] = "keep",
    ) -> Message:
        """The group's next seq for `message`, inside the caller's transaction.

        `streak`: 'reset' (a person spoke), 'count' (an agent message of the current
        episode) or 'keep' (notices, replies to an older episode).
        """
        group = await self.group_row(db, group_id)
        await self.backend.announce(db.db if isinstance(db, _Watched) else db, group_id, self.owner)
        seq, now = int(group["latest_seq"]) + 1, self.now()
        before = int(group["tokens_total"])
        confirmed = message.author_type == "user" or bool(message.external_ids)
        stored = await self._insert_message(db, group_id, seq, message, episode_id, confirmed, now, before)
        change = {"reset": "0", "count": "agent_streak + 1", "keep": "agent_streak"}[streak]
        await db.exec(
            f"UPDATE groups SET latest_seq = ?, tokens_total = ?, agent_streak = {change} WHERE id = ?",  # noqa: S608 (change: one of the three expressions above)
            (seq, before + token_cost(message.token_count), group_id),
        )
        return stored

    async def append_task(
        self, db: Db, group_id: int, message: NewMessage
    ) -> tuple[Message, Episode]:
        """Append `message` as the task of a new episode (the running one is superseded),
        inside the caller's transaction; the streak starts again."""
        group = await self.group_row(db, group_id)
        now = self.now()
        await db.exec(  # (SQLite's planner would walk every episode of the group by episodes_group_task)
            f"UPDATE episodes{self.sql.indexed_by('episodes_running')} SET status = 'superseded', ended_at = ?"  # noqa: S608 (the dialect's index hint)
            " WHERE group_id = ? AND status = 'running'",
            (now, group_id),
        )
        episode_id = await db.insert(
            "INSERT INTO episodes (group_id, task_seq, status, started_at) VALUES (?, ?, 'running', ?)",
            (group_id, int(group["latest_seq"]) + 1, now),
        )
        stored = await self.append(db, group_id, message, episode_id=episode_id, streak="reset")
        await db.exec("UPDATE groups SET episode_id = ? WHERE id = ?", (episode_id, group_id))
        return stored, Episode(id=episode_id, group_id=group_id, task_seq=stored.seq, started_at=now)

    async def _insert_message(
        self,
        db: Db,
        group_id: int,
        seq: int,
        message: NewMessage,
        episode_id: int | None,
        confirmed: bool,
        now: float,
        tokens_before: int,
    ) -> Message:
        external_ids = unique(message.external_ids)
        text = mask(message.text)  # no secret the process knows is stored or shown (bot.core.rules.secrets)
        files = tuple(masked_file(f) for f in message.attachments)  # nor in a file's name or URL
        await db.exec(
            "INSERT INTO messages (group_id, seq, author_type, author_name, author_user_id,"
            " author_agent_id, source_run_id, text, tags, external_ids, confirmed, token_count,"
            " reply_to_seq, episode_id, created_at, tokens_before, attachments)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                group_id, seq, message.author_type, message.author_name, message.author_user_id,
                message.author_agent_id, message.source_run_id, text,
                tags_to_json(message.tags), dumps(list(external_ids)), int(confirmed),
                message.token_count, message.reply_to_seq, episode_id, now, tokens_before,
                attachments_to_json(files),
            ),
        )
        await self.map_external_ids(db, group_id, seq, external_ids)  # after the row: a foreign key
        return Message(
            group_id=group_id, seq=seq, author_type=message.author_type,
            author_name=message.author_name, text=text, tags=message.tags,
            author_user_id=message.author_user_id, author_agent_id=message.author_agent_id,
            source_run_id=message.source_run_id, external_ids=external_ids,
            confirmed=confirmed, token_count=message.token_count, episode_id=episode_id,
            created_at=now, tokens_before=tokens_before, attachments=files,
            reply_to_seq=message.reply_to_seq,
        )

    async def map_external_ids(
        self, db: Db, group_id: int, seq: int, external_ids: Sequence[str]
    ) -> None:
        """Map each external id to (group, seq); one already mapped elsewhere raises AlreadyStored.
        (A write of another group may map the same id at once: the insert then waits for it and
        inserts nothing, and the row it committed is read again.)"""
        for external_id in external_ids:
            find = "SELECT group_id, seq FROM message_external_ids WHERE external_id = ?"
            row = await db.one(find, (external_id,))
            if row is None and not await db.exec(
                "INSERT INTO message_external_ids (external_id, group_id, seq) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (external_id, group_id, seq),
            ):
                row = await db.one(find, (external_id,))
            if row is not None and (row["group_id"], row["seq"]) != (group_id, seq):
                raise AlreadyStored(
                    f"message {external_id} is already stored (group {row['group_id']}, seq {row['seq']})"
                )

    async def messages_where(self, where: str, params: Sequence[object], *, index: str | None = None,
                              limit: int | None = None) -> list[Message]:
        """The rows matching `where`, oldest first (the oldest `limit` of them, when given)."""
        indexed = self.sql.indexed_by(index)
        tail, params = ("", params) if limit is None else (" LIMIT ?", (*params, int(limit)))
        async with self.read() as db:
            rows = await db.all(f"SELECT * FROM messages{indexed} WHERE {where} ORDER BY seq{tail}", params)  # noqa: S608 (where: a condition from code; values bound)
        return [to_message(row) for row in rows]

    async def message_row(self, db: Db, group_id: int, seq: int) -> Row:
        row = await db.one(
            "SELECT * FROM messages WHERE group_id = ? AND seq = ?", (group_id, seq)
        )
        if row is None:
            raise NotFound(f"no message {seq} in group {group_id}")
        return row
