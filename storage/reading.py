"""Store methods for "what did I miss": people's names, the rows that tag a person,
stored catch-up summaries, and read cursors (how far each person has seen a group)."""
from __future__ import annotations

import logging
from collections.abc import Iterable

from bot.core.models import Message, Summary
from bot.core.rules.secrets import mask
from bot.core.rules.validation import name_key
from storage.access import Access
from storage.codec import to_message
from storage.sql import Db, the_one

log = logging.getLogger(__name__)


class Reading:
    """The store's `ReadingStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    # people ---------------------------------------------------------------
    async def remember_person(self, scope: str, user_id: str, names: Iterable[str]) -> None:
        """`names` are how the person is tagged in `scope` (a guild, a console group) from now on."""
        usable = {name_key(n): n for n in names if n and n.strip()}
        if not usable:
            return
        async with self._access.write() as db:  # a guild's names, of no one group: alone
            for key, name in usable.items():
                await db.exec(
                    "INSERT INTO person_names (scope, name_key, name, user_id, updated_at) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (scope, name_key) DO UPDATE SET name = excluded.name,"
                    " user_id = excluded.user_id, updated_at = excluded.updated_at"
                    " WHERE person_names.user_id != excluded.user_id OR person_names.name != excluded.name",
                    (scope, key, name, user_id, self._access.now()),
                )

    async def people(self, scope: str) -> dict[str, str]:
        """Name -> user id of the people known in `scope`."""
        async with self._access.read() as db:
            rows = await db.all("SELECT name, user_id FROM person_names WHERE scope = ?", (scope,))
        return {str(r[0]): str(r[1]) for r in rows}

    # rows that tag a person ---------------------------------------------------
    async def tagging(self, group_id: int, user_id: str, *, after: int, operators: bool, limit: int) -> list[Message]:
        """Rows after `after` that tag `user_id` (or every operator, when `operators`), oldest first."""
        dialect = self._access.sql
        sql = f"SELECT * FROM messages WHERE group_id = ? AND seq > ? AND ({dialect.tags_user('messages.tags')}"  # noqa: S608 (the dialect's fragment; values bound)
        params: list[object] = [group_id, after, user_id]
        if operators:
            sql += f" OR {dialect.tags_operators('messages.tags')}"
        sql += ") ORDER BY seq LIMIT ?"
        params.append(limit)
        async with self._access.read() as db:
            rows = await db.all(sql, params)
        return [to_message(row) for row in rows]

    # catch-up summaries ------------------------------------------------------
    async def get_summary(self, group_id: int, after: int, through: int, *, newer_than: float) -> Summary | None:
        async with self._access.read() as db:
            row = await db.one(
                "SELECT * FROM summaries WHERE group_id = ? AND after_seq = ? AND through_seq = ?"
                    " AND created_at > ? AND text != ''", (group_id, after, through, newer_than))
        if row is None:
            return None
        return Summary(int(row["after_seq"]), int(row["through_seq"]), row["text"], int(row["omitted"]),
                       row["model"], float(row["created_at"]), row["provider"] or "")

    async def save_summary(self, group_id: int, summary: Summary, *, prompt_tokens: int = 0,
                           completion_tokens: int = 0) -> None:
        async with self._access.write(group_id) as db:
            await db.exec(
                "INSERT INTO summaries (group_id, after_seq, through_seq, text, omitted, model, prompt_tokens,"
                " completion_tokens, created_at, provider) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (group_id, after_seq, through_seq) DO UPDATE SET text = excluded.text,"
                " omitted = excluded.omitted, model = excluded.model, created_at = excluded.created_at,"
                " provider = excluded.provider,"
                " prompt_tokens = summaries.prompt_tokens + excluded.prompt_tokens,"  # what every call cost
                " completion_tokens = summaries.completion_tokens + excluded.completion_tokens,"
                " calls = summaries.calls + 1",
                (group_id, summary.after, summary.through, mask(summary.text), summary.omitted, summary.model,
                 prompt_tokens, completion_tokens, self._access.now(), summary.provider or None),
            )

    # read cursors -------------------------------------------------------
    async def get_seen(self, group_id: int, user_id: str) -> int | None:
        async with self._access.read() as db:
            row = await db.one(
                "SELECT seen_through FROM read_cursors WHERE group_id = ? AND user_id = ?",
                (group_id, user_id),
            )
        return None if row is None else int(row[0])

    async def mark_seen(self, group_id: int, user_id: str, seq: int) -> int:
        """Clamp to 0..latest seq, never backwards; return the stored value."""
        async with self._access.write(group_id) as db:
            group = await self._access.group_row(db, group_id)
            target = max(0, min(int(seq), int(group["latest_seq"])))
            await self.advance_seen(db, group_id, user_id, target)
            row = await the_one(
                db,
                "SELECT seen_through FROM read_cursors WHERE group_id = ? AND user_id = ?",
                (group_id, user_id),
            )
            return int(row[0])

    async def advance_seen(self, db: Db, group_id: int, user_id: str, seq: int) -> None:
        await db.exec(
            "INSERT INTO read_cursors (group_id, user_id, seen_through, updated_at) VALUES (?, ?, ?, ?)"  # noqa: S608 (the dialect's function)
            " ON CONFLICT (group_id, user_id) DO UPDATE"
            f" SET seen_through = {self._access.sql.greatest}(read_cursors.seen_through, excluded.seen_through),"
            " updated_at = excluded.updated_at",
            (group_id, user_id, seq, self._access.now()),
        )
