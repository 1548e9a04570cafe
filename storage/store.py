"""`SqlStore`: the `bot.core.ports.Store` port over SQL; `SqliteStore` over one SQLite file.

This module owns groups, the roster and the message log (seq allocation,
streak, episodes opened by user posts, agent cursors, what reached the
surface, the ingest watermark). Routing decisions live in `storage.routing`;
episodes in `storage.episode`; model calls and their tokens in `storage.usage`;
webhooks in `storage.webhook`; taken interactions in `storage.interaction`; read
cursors and people's names in `storage.reading`; runs in `storage.run`; leases in
`storage.lease`; schedules in `storage.schedule`; the record read in pages
(exports) in `storage.record`; agents' notes (memory) in `storage.notes`; rolling
summaries and the episodes a task continues in `storage.summary`; the
connection, lock, transactions and appends in `storage.base`.

Usage::

    async with await SqliteStore.open("roundtable.db") as store:
        group = await store.create_group("guild:channel", "general", GroupSettings())
"""
from __future__ import annotations

import logging
import time
import unicodedata
from pathlib import Path

from bot.core.errors import AlreadyStored, InvalidInput
from bot.core.models import Agent, Episode, Group, GroupSettings, Message, NewMessage, token_cost
from bot.core.secrets import mask_error
from bot.core.store_health import StoreHealth
from bot.core.validation import check_name_free
from storage.base import Clock
from storage.codec import dumps, settings_to_json, strings_from_json, to_agent, to_group, to_message, unique
from storage.db import DEFAULT_BUSY_TIMEOUT_MS, SqliteBackend
from storage.draft import DraftMixin
from storage.episode import EpisodeMixin
from storage.interaction import InteractionMixin
from storage.notes import NotesMixin
from storage.reading import ReadingMixin
from storage.record import RecordMixin
from storage.report import DiagnosisMixin
from storage.routing import RoutingMixin
from storage.run import RunMixin
from storage.schedule import ScheduleMixin
from storage.sql import Db
from storage.summary import SummaryMixin
from storage.usage import UsageMixin
from storage.webhook import WebhookMixin

log = logging.getLogger(__name__)

AGENT_FIELDS = ("name", "role", "system_prompt", "model", "avatar_url", "enabled", "position", "memory")


class SqlStore(NotesMixin, DraftMixin, RecordMixin, ReadingMixin, RoutingMixin, EpisodeMixin, UsageMixin, WebhookMixin,
               InteractionMixin, RunMixin, ScheduleMixin, SummaryMixin, DiagnosisMixin):
    """Implements `bot.core.ports.Store` over a backend: `SqliteStore` or `storage.pg.PostgresStore`
    (or `storage.open_store(target)`, which picks one)."""

    # groups -------------------------------------------------------------
    async def create_group(
        self,
        key: str,
        name: str,
        settings: GroupSettings,
        *,
        guild_id: str | None = None,
        channel_id: str | None = None,
        parent_channel_id: str | None = None,
        setup_message_id: str | None = None,
    ) -> Group:
        """Create the group, or re-enable an existing one with this key: its id,
        history and settings are kept (`settings` is then ignored); name and the
        given Discord ids are updated."""
        if not key:
            raise InvalidInput("a group needs a key")
        ids = {
            "guild_id": guild_id,
            "channel_id": channel_id,
            "parent_channel_id": parent_channel_id,
            "setup_message_id": setup_message_id,
        }
        async with self._write() as db:  # the key is looked up across groups: alone
            row = await self._one(db, "SELECT id FROM groups WHERE key = ?", (key,))
            if row is None:
                group_id = await self._insert(
                    db,
                    "INSERT INTO groups (key, name, settings_json, guild_id, channel_id,"
                    " parent_channel_id, setup_message_id, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, name, settings_to_json(settings), *ids.values(), self._now()),
                )
                log.info("created group %s (%s)", group_id, key)
            else:
                group_id = int(row["id"])
                changes = {"enabled": 1, "name": name} | {k: v for k, v in ids.items() if v is not None}
                await self._update(db, "groups", group_id, changes)
                log.info("re-enabled group %s (%s)", group_id, key)
            return to_group(await self._group_row(db, group_id))

    async def get_group(self, group_id: int) -> Group:
        async with self._read() as db:
            return to_group(await self._group_row(db, group_id))

    async def find_group(self, key: str) -> Group | None:
        async with self._read() as db:
            row = await self._one(db, "SELECT * FROM groups WHERE key = ?", (key,))
        return None if row is None else to_group(row)

    async def list_groups(self, *, enabled_only: bool = True, guild_id: str | None = None) -> list[Group]:
        sql, params = "SELECT * FROM groups WHERE 1 = 1", []
        if enabled_only:
            sql += " AND enabled = 1"
        if guild_id is not None:
            sql += " AND guild_id = ?"
            params.append(guild_id)
        async with self._read() as db:
            rows = await self._all(db, sql + " ORDER BY id", params)
        return [to_group(row) for row in rows]

    async def update_group(
        self,
        group_id: int,
        *,
        settings: GroupSettings | None = None,
        enabled: bool | None = None,
        paused: bool | None = None,
    ) -> Group:
        changes: dict[str, object] = {}
        if settings is not None:
            changes["settings_json"] = settings_to_json(settings)
        if enabled is not None:
            changes["enabled"] = int(bool(enabled))
        if paused is not None:
            changes["paused"] = int(bool(paused))
        async with self._write(group_id) as db:
            await self._group_row(db, group_id)
            await self._update(db, "groups", group_id, changes)
            return to_group(await self._group_row(db, group_id))

    # agents -------------------------------------------------------------
    async def add_agent(
        self,
        group_id: int,
        name: str,
        role: str,
        system_prompt: str,
        *,
        model: str | None = None,
        avatar_url: str | None = None,
    ) -> Agent:
        """Append to the roster; the cursor starts at the group's latest seq."""
        name = _clean_name(name)
        async with self._write(group_id) as db:
            group = await self._group_row(db, group_id)
            await self._check_name_free(db, group_id, name)
            row = await self._one(
                db,
                "SELECT COALESCE(MAX(position), 0) FROM agents WHERE group_id = ? AND removed_at IS NULL",
                (group_id,),
            )
            position = int(row[0]) + 1 if row is not None else 1
            agent_id = await self._insert(
                db,
                "INSERT INTO agents (group_id, name, role, system_prompt, model, avatar_url,"
                " position, delivered_through, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (group_id, name, role, system_prompt, model, avatar_url, position,
                 int(group["latest_seq"]), self._now()),
            )
            return to_agent(await self._agent_row(db, agent_id))

    async def update_agent(self, agent_id: int, **fields: object) -> Agent:
        """Change any of name, role, system_prompt, model, avatar_url, enabled, position, memory."""
        unknown = sorted(set(fields) - set(AGENT_FIELDS))
        if unknown:
            raise InvalidInput(f"an agent has no field {unknown[0]!r}; use {', '.join(AGENT_FIELDS)}")
        changes = dict(fields)
        if "name" in changes:
            changes["name"] = _clean_name(str(changes["name"]))
        for flag in ("enabled", "memory"):
            if flag in changes:
                changes[flag] = int(bool(changes[flag]))
        if "position" in changes and not isinstance(changes["position"], int):
            raise InvalidInput(f"position must be a whole number, not {changes['position']!r}")
        async with self._write(await self._group_of("agents", agent_id)) as db:
            agent = await self._agent_row(db, agent_id)
            if "name" in changes:
                await self._check_name_free(db, int(agent["group_id"]), str(changes["name"]), agent_id)
            await self._update(db, "agents", agent_id, changes)
            return to_agent(await self._agent_row(db, agent_id))

    async def remove_agent(self, agent_id: int) -> None:
        """Take the agent off the roster (and its schedules); the row stays for old messages' references."""
        async with self._write(await self._group_of("agents", agent_id)) as db:
            await self._agent_row(db, agent_id)
            await self._exec(db, "UPDATE agents SET removed_at = ? WHERE id = ?", (self._now(), agent_id))
            await self._exec(db, "UPDATE schedules SET removed_at = ? WHERE agent_id = ? AND removed_at IS NULL",
                             (self._now(), agent_id))

    async def get_agent(self, agent_id: int) -> Agent:
        """An agent on the roster; a removed agent is NotFound."""
        async with self._read() as db:
            return to_agent(await self._agent_row(db, agent_id))

    async def find_agent(self, group_id: int, name: str) -> Agent | None:
        wanted = unicodedata.normalize("NFC", name.strip().lstrip("@")).casefold()
        for agent in await self.list_agents(group_id):
            if unicodedata.normalize("NFC", agent.name).casefold() == wanted:
                return agent
        return None

    async def list_agents(self, group_id: int, *, enabled_only: bool = False) -> list[Agent]:
        sql = "SELECT * FROM agents WHERE group_id = ? AND removed_at IS NULL"
        if enabled_only:
            sql += " AND enabled = 1"
        async with self._read() as db:
            rows = await self._all(db, sql + " ORDER BY position, id", (group_id,))
        return [to_agent(row) for row in rows]

    async def set_delivered_through(self, agent_id: int, seq: int) -> None:
        """Forward only, and never past the group's latest seq. Works on a removed
        agent too (a run that finishes after its agent was removed)."""
        async with self._write(await self._group_of("agents", agent_id)) as db:
            agent = await self._agent_row(db, agent_id, include_removed=True)
            group = await self._group_row(db, int(agent["group_id"]))
            target = min(int(seq), int(group["latest_seq"]))
            await self._exec(
                db,
                f"UPDATE agents SET delivered_through = {self._sql.greatest}(delivered_through, ?) WHERE id = ?",
                (target, agent_id),
            )

    async def _check_name_free(
        self, db: Db, group_id: int, name: str, agent_id: int | None = None
    ) -> None:
        """InvalidInput when `name` reads the same as another agent's on the roster
        (case, accents and look-alike letters aside): decided here, inside the write."""
        rows = await self._all(
            db, "SELECT id, name FROM agents WHERE group_id = ? AND removed_at IS NULL", (group_id,)
        )
        check_name_free(name, [row["name"] for row in rows if row["id"] != agent_id])

    # messages -----------------------------------------------------------
    async def append_user_message(self, group_id: int, message: NewMessage) -> tuple[Message, Episode]:
        _require_author(message, "user")
        async with self._write(group_id) as db:
            stored, episode = await self._append_task(db, group_id, message)
            if message.author_user_id is not None:
                await self._advance_seen(db, group_id, message.author_user_id, stored.seq)
        return stored, episode

    async def append_system_message(self, group_id: int, message: NewMessage) -> Message:
        """A notice: next seq, in the group's current episode; the streak is unchanged."""
        _require_author(message, "system")
        async with self._write(group_id) as db:
            group = await self._group_row(db, group_id)
            return await self._append(db, group_id, message, episode_id=group["episode_id"])

    async def record_posted(self, group_id: int, seq: int, external_id: str) -> None:
        """One more part of the row reached the surface (a chunk, with its id)."""
        async with self._write(group_id) as db:
            await self._add_part(db, group_id, seq, str(external_id))

    async def _add_part(self, db: Db, group_id: int, seq: int, external_id: str) -> None:
        row = await self._message_row(db, group_id, seq)
        merged = unique([*to_message(row).external_ids, external_id])
        await self._map_external_ids(db, group_id, seq, merged)
        await self._exec(
            db, "UPDATE messages SET external_ids = ? WHERE group_id = ? AND seq = ?",
            (dumps(list(merged)), group_id, seq),
        )

    async def take_posted(self, group_id: int, seq: int, external_id: str) -> int | None:
        """Like `record_posted`, for our own post that a process took in as a person's row of the
        group: the id moves to row `seq`, the person row keeps its text without it. The person
        row's seq (None: no row held the id); AlreadyStored when another kind of row holds it."""
        external_id = str(external_id)
        async with self._write(group_id) as db:
            held = await self._one(
                db, "SELECT m.seq, m.author_type, m.external_ids FROM message_external_ids x"
                " JOIN messages m ON m.group_id = x.group_id AND m.seq = x.seq"
                " WHERE x.external_id = ? AND x.group_id = ?", (external_id, group_id),
            )
            if held is not None and int(held["seq"]) == seq:
                return None  # recorded already
            if held is not None and held["author_type"] != "user":
                raise AlreadyStored(f"message {external_id} is already stored (group {group_id}, seq {held['seq']})")
            if held is not None:
                left = [i for i in strings_from_json(held["external_ids"]) if i != external_id]
                await self._exec(db, "UPDATE messages SET external_ids = ? WHERE group_id = ? AND seq = ?",
                                 (dumps(left), group_id, held["seq"]))
                await self._exec(db, "DELETE FROM message_external_ids WHERE external_id = ?", (external_id,))
            await self._add_part(db, group_id, seq, external_id)
        return None if held is None else int(held["seq"])

    async def confirm_message(self, group_id: int, seq: int) -> None:
        """Every part of the row reached the surface; the provisional messages of its run are
        its parts now, or gone."""
        async with self._write(group_id) as db:
            row = await self._message_row(db, group_id, seq)
            await self._exec(
                db, "UPDATE messages SET confirmed = 1 WHERE group_id = ? AND seq = ?", (group_id, seq)
            )
            if row["source_run_id"] is not None and row["author_type"] == "agent":
                await self._exec(db, "DELETE FROM drafts WHERE run_id = ?", (row["source_run_id"],))

    async def unconfirmed_messages(self, group_id: int) -> list[Message]:
        # The partial index names the few unconfirmed rows; without statistics SQLite would walk
        # the primary key through the whole history instead (5 ms a call at 20,000 rows).
        return await self._messages_where(
            "group_id = ? AND confirmed = 0 AND author_type != 'user'", (group_id,), index="messages_unconfirmed"
        )

    async def get_message(self, group_id: int, seq: int) -> Message:
        async with self._read() as db:
            return to_message(await self._message_row(db, group_id, seq))

    async def find_message_by_external_id(self, external_id: str) -> Message | None:
        found = await self._messages_where(
            "(group_id, seq) IN (SELECT group_id, seq FROM message_external_ids WHERE external_id = ?)",
            (str(external_id),),
        )
        return found[0] if found else None

    async def messages(self, group_id: int, *, after: int = 0, through: int | None = None) -> list[Message]:
        if through is None:
            return await self._messages_where("group_id = ? AND seq > ?", (group_id, after))
        return await self._messages_where(
            "group_id = ? AND seq > ? AND seq <= ?", (group_id, after, through)
        )

    async def thread_tokens(self, group_id: int, *, through: int) -> int:
        async with self._read() as db:
            row = await self._one(
                db, "SELECT tokens_before, token_count FROM messages WHERE group_id = ? AND seq <= ?"
                " ORDER BY seq DESC LIMIT 1", (group_id, through),
            )
        return 0 if row is None else int(row[0]) + token_cost(int(row[1]))

    async def first_seq_at(self, group_id: int, *, tokens: int) -> int | None:
        async with self._read() as db:
            row = await self._one(
                db, "SELECT seq FROM messages WHERE group_id = ? AND tokens_before >= ?"
                " ORDER BY tokens_before LIMIT 1", (group_id, tokens),
            )
        return None if row is None else int(row[0])

    async def last_agent_author(self, group_id: int, *, through: int) -> int | None:
        async with self._read() as db:
            row = await self._one(
                db, f"SELECT author_agent_id FROM messages{self._sql.indexed_by('messages_agent_rows')}"
                " WHERE group_id = ? AND seq <= ? AND author_type = 'agent'"
                " ORDER BY seq DESC LIMIT 1", (group_id, through),
            )
        return None if row is None else int(row[0])

    async def last_external_id(self, group_id: int, *, before_seq: int | None = None) -> str | None:
        """The numerically largest all-digit external id of the group's rows (of rows
        before `before_seq` when given)."""
        sql = ("SELECT external_id FROM message_external_ids WHERE group_id = ?"
               f" AND external_id != '' AND {self._sql.all_digits('external_id')}")
        params: list[object] = [group_id]
        if before_seq is not None:
            sql += " AND seq < ?"
            params.append(before_seq)
        async with self._read() as db:
            row = await self._one(
                db, sql + " ORDER BY length(ltrim(external_id, '0')) DESC, ltrim(external_id, '0') DESC LIMIT 1",
                params,
            )
        return None if row is None else str(row[0])

    async def advance_watermark(self, group_id: int, message_id: str) -> None:
        """Move the group's ingest watermark forward to `message_id` (a decimal
        Discord id); never backwards."""
        key = str(int(message_id))  # canonical digits, so length then text orders numerically
        async with self._write(group_id) as db:
            await self._group_row(db, group_id)
            await self._exec(
                db,
                "UPDATE groups SET watermark = ? WHERE id = ? AND (watermark IS NULL"
                " OR length(watermark) < length(CAST(? AS TEXT))"
                " OR (length(watermark) = length(CAST(? AS TEXT)) AND watermark < ?))",
                (key, group_id, key, key, key),
            )

    async def set_delivery_problem(self, group_id: int, problem: str | None) -> bool:
        """Record (or clear, with None) a lasting refusal of the surface; True when it changed."""
        async with self._write(group_id) as db:
            return bool(await self._exec(
                db, "UPDATE groups SET delivery_problem = ? WHERE id = ?"
                    f" AND delivery_problem {self._sql.is_distinct} ?",
                (problem and mask_error(problem), group_id, problem and mask_error(problem)),
            ))



def _clean_name(name: str) -> str:
    cleaned = name.strip()
    if not cleaned:
        raise InvalidInput("an agent needs a name")
    return cleaned


def _require_author(message: NewMessage, author_type: str) -> None:
    if message.author_type != author_type:
        raise InvalidInput(f"expected a {author_type} message, got author_type {message.author_type!r}")


class SqliteStore(SqlStore):
    """The store over one SQLite file. Open with `await SqliteStore.open(path)`."""

    @classmethod
    async def open(
        cls, path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, clock: Clock = time.time,
        health: StoreHealth | None = None,
    ) -> "SqliteStore":
        """Open the file at `path` (migrating it) and wrap it in a store (`health`: see `StoreBase`)."""
        return cls(await SqliteBackend.open(path, busy_timeout_ms=busy_timeout_ms), clock=clock, health=health)


__all__ = ["SqlStore", "SqliteStore"]
