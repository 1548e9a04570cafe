"""The store's plumbing: one connection, one lock, one transaction at a time.

aiosqlite runs a connection on one thread, so two coroutines sharing it must
never interleave their transactions: every operation (reads too, so a read
never sees a half-written transaction of its own connection) holds
`self._lock`. Writes run inside `BEGIN IMMEDIATE`, which also serialises them
against other processes on the same file (the bot and the console); a lock
that outlasts the busy timeout becomes `StoreError` after a rollback.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import sqlite3
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Literal, Sequence, TypeVar

import aiosqlite

from bot.core.errors import AlreadyStored, NotFound, StoreError
from bot.core.models import Episode, Message, NewMessage, token_cost
from storage.db import DEFAULT_BUSY_TIMEOUT_MS, open_db, store_error
from storage.rows import dumps, tags_to_json, unique

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Params = Sequence[Any]
S = TypeVar("S", bound="StoreBase")


class StoreBase:
    """Connection ownership, transactions, error translation, shared lookups."""

    def __init__(self, conn: aiosqlite.Connection, *, clock: Clock = time.time) -> None:
        self._conn = conn
        self._clock = clock
        self._lock = asyncio.Lock()
        self._closed = False
        # Who holds this store's leases: host and pid (so a dead holder on this host is
        # recognised at once) and a random part (two stores in one process differ).
        self.owner = f"{socket.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:12]}"
        self.owner_label = "roundtable"

    @classmethod
    async def open(
        cls: type[S],
        path: str | Path,
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        clock: Clock = time.time,
    ) -> S:
        """Open the file at `path` (migrating it) and wrap it in a store."""
        conn = await open_db(path, busy_timeout_ms=busy_timeout_ms)
        return cls(conn, clock=clock)

    async def close(self) -> None:
        """Close the connection; later calls raise `StoreError`. Idempotent."""
        if self._closed:
            return
        async with self._lock:
            self._closed = True
            await self._conn.close()

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _now(self) -> float:
        return float(self._clock())

    # transactions -----------------------------------------------------------
    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction (`BEGIN IMMEDIATE` ... `COMMIT`), or nothing at all."""
        async with self._lock:
            self._check_open()
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
                yield self._conn
                await self._conn.execute("COMMIT")
            except BaseException as exc:
                # Shielded: a cancelled caller must still leave no open transaction.
                await asyncio.shield(self._rollback())
                if isinstance(exc, sqlite3.Error):
                    raise store_error(exc) from exc
                raise

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        """Hold the connection for reads (autocommit: each statement sees committed data)."""
        async with self._lock:
            self._check_open()
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise store_error(exc) from exc

    async def _rollback(self) -> None:
        try:
            await self._conn.execute("ROLLBACK")
        except (sqlite3.Error, ValueError):
            # No transaction active (COMMIT got through) or the connection is gone.
            log.debug("rollback found nothing to undo", exc_info=True)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    # queries ------------------------------------------------------------------
    @staticmethod
    async def _one(db: aiosqlite.Connection, sql: str, params: Params = ()) -> sqlite3.Row | None:
        rows = await db.execute_fetchall(sql, params)
        return rows[0] if rows else None  # type: ignore[index]  # aiosqlite's rows are a list

    @staticmethod
    async def _all(db: aiosqlite.Connection, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        return list(await db.execute_fetchall(sql, params))

    @staticmethod
    async def _exec(db: aiosqlite.Connection, sql: str, params: Params = ()) -> int:
        """Run a write statement; return the number of rows it changed."""
        cursor = await db.execute(sql, params)
        count = cursor.rowcount
        await cursor.close()
        return count

    @staticmethod
    async def _insert(db: aiosqlite.Connection, sql: str, params: Params = ()) -> int:
        """Run an INSERT; return the new rowid."""
        cursor = await db.execute(sql, params)
        rowid = cursor.lastrowid
        await cursor.close()
        if rowid is None:
            raise StoreError("database error: insert returned no row id")
        return int(rowid)

    async def _update(
        self, db: aiosqlite.Connection, table: str, row_id: int, changes: dict[str, object]
    ) -> None:
        """UPDATE `table` SET the given columns (column names come from code, never input)."""
        if not changes:
            return
        assignments = ", ".join(f"{column} = ?" for column in changes)
        await self._exec(db, f"UPDATE {table} SET {assignments} WHERE id = ?", (*changes.values(), row_id))

    async def _group_row(self, db: aiosqlite.Connection, group_id: int) -> sqlite3.Row:
        row = await self._one(db, "SELECT * FROM groups WHERE id = ?", (group_id,))
        if row is None:
            raise NotFound(f"no group with id {group_id}")
        return row

    async def _agent_row(
        self, db: aiosqlite.Connection, agent_id: int, *, include_removed: bool = False
    ) -> sqlite3.Row:
        row = await self._one(db, "SELECT * FROM agents WHERE id = ?", (agent_id,))
        if row is None or (row["removed_at"] is not None and not include_removed):
            raise NotFound(f"no agent with id {agent_id}")
        return row

    # appending rows ---------------------------------------------------------------
    async def _append(
        self, db: aiosqlite.Connection, group_id: int, message: NewMessage, *, episode_id: int | None,
        streak: Literal["reset", "count", "keep"] = "keep",
    ) -> Message:
        """The group's next seq for `message`, inside the caller's transaction.

        `streak`: 'reset' (a person spoke), 'count' (an agent message of the current
        episode) or 'keep' (notices, replies to an older episode).
        """
        group = await self._group_row(db, group_id)
        seq, now = int(group["latest_seq"]) + 1, self._now()
        before = int(group["tokens_total"])
        confirmed = message.author_type == "user" or bool(message.external_ids)
        stored = await self._insert_message(db, group_id, seq, message, episode_id, confirmed, now, before)
        change = {"reset": "0", "count": "agent_streak + 1", "keep": "agent_streak"}[streak]
        await self._exec(
            db, f"UPDATE groups SET latest_seq = ?, tokens_total = ?, agent_streak = {change} WHERE id = ?",
            (seq, before + token_cost(message.token_count), group_id),
        )
        return stored

    async def _append_task(
        self, db: aiosqlite.Connection, group_id: int, message: NewMessage
    ) -> tuple[Message, Episode]:
        """Append `message` as the task of a new episode (the running one is superseded),
        inside the caller's transaction; the streak starts again."""
        group = await self._group_row(db, group_id)
        now = self._now()
        await self._exec(
            db,
            "UPDATE episodes SET status = 'superseded', ended_at = ?"
            " WHERE group_id = ? AND status = 'running'",
            (now, group_id),
        )
        episode_id = await self._insert(
            db,
            "INSERT INTO episodes (group_id, task_seq, status, started_at) VALUES (?, ?, 'running', ?)",
            (group_id, int(group["latest_seq"]) + 1, now),
        )
        stored = await self._append(db, group_id, message, episode_id=episode_id, streak="reset")
        await self._exec(db, "UPDATE groups SET episode_id = ? WHERE id = ?", (episode_id, group_id))
        return stored, Episode(id=episode_id, group_id=group_id, task_seq=stored.seq, started_at=now)

    async def _insert_message(
        self,
        db: aiosqlite.Connection,
        group_id: int,
        seq: int,
        message: NewMessage,
        episode_id: int | None,
        confirmed: bool,
        now: float,
        tokens_before: int,
    ) -> Message:
        external_ids = unique(message.external_ids)
        await self._exec(
            db,
            "INSERT INTO messages (group_id, seq, author_type, author_name, author_user_id,"
            " author_agent_id, source_run_id, text, tags, external_ids, confirmed, token_count,"
            " reply_to_seq, episode_id, created_at, tokens_before)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)",
            (
                group_id, seq, message.author_type, message.author_name, message.author_user_id,
                message.author_agent_id, message.source_run_id, message.text,
                tags_to_json(message.tags), dumps(list(external_ids)), int(confirmed),
                message.token_count, episode_id, now, tokens_before,
            ),
        )
        await self._map_external_ids(db, group_id, seq, external_ids)  # after the row: a foreign key
        return Message(
            group_id=group_id, seq=seq, author_type=message.author_type,
            author_name=message.author_name, text=message.text, tags=message.tags,
            author_user_id=message.author_user_id, author_agent_id=message.author_agent_id,
            source_run_id=message.source_run_id, external_ids=external_ids,
            confirmed=confirmed, token_count=message.token_count, episode_id=episode_id,
            created_at=now, tokens_before=tokens_before,
        )

    async def _map_external_ids(
        self, db: aiosqlite.Connection, group_id: int, seq: int, external_ids: Sequence[str]
    ) -> None:
        """Map each external id to (group, seq); one already mapped elsewhere raises AlreadyStored."""
        for external_id in external_ids:
            row = await self._one(
                db, "SELECT group_id, seq FROM message_external_ids WHERE external_id = ?", (external_id,)
            )
            if row is not None and (row["group_id"], row["seq"]) != (group_id, seq):
                raise AlreadyStored(
                    f"message {external_id} is already stored (group {row['group_id']}, seq {row['seq']})"
                )
            await self._exec(
                db,
                "INSERT OR IGNORE INTO message_external_ids (external_id, group_id, seq) VALUES (?, ?, ?)",
                (external_id, group_id, seq),
            )

    async def _message_row(self, db: aiosqlite.Connection, group_id: int, seq: int) -> sqlite3.Row:
        row = await self._one(
            db, "SELECT * FROM messages WHERE group_id = ? AND seq = ?", (group_id, seq)
        )
        if row is None:
            raise NotFound(f"no message {seq} in group {group_id}")
        return row
