"""The message log of each group: seq allocation, the streak, episodes opened by people's posts
(`Thread`), and what reached the surface (`Posting`). The appends themselves are
`storage.access.Access.append` and `append_task`, shared with runs and schedules."""
from __future__ import annotations

from collections.abc import Collection

from bot.core.errors import AlreadyStored, InvalidInput
from bot.core.models import Episode, Message, MessageVersion, NewMessage, token_cost
from bot.core.rules.secrets import mask
from storage.access import Access
from storage.codec import attachments_to_json, dumps, strings_from_json, to_message, unique
from storage.reading import Reading
from storage.sql import Db


class Thread:
    """The store's `ThreadStore` role (`bot.core.ports`), a part of `storage.store.SqlStore`: rows appended
    in seq order, read back."""

    def __init__(self, access: Access, reading: Reading) -> None:
        self._access = access
        self._reading = reading

    async def append_user_message(self, group_id: int, message: NewMessage) -> tuple[Message, Episode]:
        _require_author(message, "user")
        async with self._access.write(group_id) as db:
            stored, episode = await self._access.append_task(db, group_id, message)
            if message.author_user_id is not None:
                await self._reading.advance_seen(db, group_id, message.author_user_id, stored.seq)
        return stored, episode

    async def append_system_message(self, group_id: int, message: NewMessage) -> Message:
        """A notice: next seq, in the group's current episode; the streak is unchanged."""
        _require_author(message, "system")
        async with self._access.write(group_id) as db:
            group = await self._access.group_row(db, group_id)
            return await self._access.append(db, group_id, message, episode_id=group["episode_id"])

    async def get_message(self, group_id: int, seq: int) -> Message:
        async with self._access.read() as db:
            return to_message(await self._access.message_row(db, group_id, seq))

    # the author's own hand (SPEC §1) ------------------------------------------
    async def edit_message(self, group_id: int, seq: int, text: str, *,
                           attachment_ids: Collection[str] | None = None) -> Message | None:
        """A person edited row `seq`: its text is `text` now (masked), marked edited; its tags and token
        count stay as first parsed. `attachment_ids`: the files the message still has (None: unchanged).
        The summaries written from it are blanked (written again when next needed). None when nothing
        changed (same text and files) or the row is a tombstone."""
        async with self._access.write(group_id) as db:
            row = await self._access.message_row(db, group_id, seq)
            if row["deleted_at"] is not None:
                return None
            old = to_message(row)
            text = mask(text)
            files = old.attachments if attachment_ids is None else tuple(
                f for f in old.attachments if f.attachment_id is None or f.attachment_id in attachment_ids)
            if text == old.text and files == old.attachments:
                return None
            await db.exec("UPDATE messages SET text = ?, attachments = ?, edited_at = ? WHERE group_id = ? AND seq = ?",
                          (text, attachments_to_json(files), self._access.now(), group_id, seq))
            await self.forget_summaries(db, group_id, seq)
            return to_message(await self._access.message_row(db, group_id, seq))

    async def delete_message(self, group_id: int, seq: int) -> Message | None:
        """Row `seq` was deleted on the surface: it becomes a tombstone (seq, author, tags, ids kept; text
        and files purged; nothing left to show, so confirmed), its run's provisional messages forgotten,
        the summaries written from it blanked. The tombstone; None when it was one already."""
        async with self._access.write(group_id) as db:
            row = await self._access.message_row(db, group_id, seq)
            if row["deleted_at"] is not None:
                return None
            await db.exec("UPDATE messages SET text = '', attachments = '[]', deleted_at = ?, confirmed = 1"
                          " WHERE group_id = ? AND seq = ?", (self._access.now(), group_id, seq))
            if row["author_type"] == "agent" and row["source_run_id"] is not None:
                await db.exec("DELETE FROM drafts WHERE run_id = ?", (row["source_run_id"],))
            await self.forget_summaries(db, group_id, seq)
            return to_message(await self._access.message_row(db, group_id, seq))

    @staticmethod
    async def forget_summaries(db: Db, group_id: int, seq: int) -> None:
        """Blank the summaries that may hold row `seq`'s old text: the rolling ones through it or later (each
        rolls the one before), the catch-up ones of a range holding it. Their cost stays recorded; a blank
        one is never reused, and writing the same range again replaces its text."""
        await db.exec("UPDATE context_summaries SET text = '' WHERE group_id = ? AND through_seq >= ? AND text != ''",
                      (group_id, seq))
        await db.exec("UPDATE summaries SET text = '' WHERE group_id = ? AND after_seq < ? AND through_seq >= ?"
                      " AND text != ''", (group_id, seq, seq))

    async def message_versions(self, group_id: int, seqs: Collection[int] | None = None) -> list[MessageVersion]:
        """The earlier texts of the group's regenerated replies (of rows `seqs` when given), by seq and version."""
        async with self._access.read() as db:
            rows = await db.all("SELECT * FROM message_versions WHERE group_id = ? ORDER BY seq, version", (group_id,))
        wanted = None if seqs is None else set(seqs)
        return [MessageVersion(group_id=int(r["group_id"]), seq=int(r["seq"]), version=int(r["version"]),
                               text=r["text"], run_id=None if r["run_id"] is None else int(r["run_id"]),
                               created_at=float(r["created_at"]), replaced_at=float(r["replaced_at"]))
                for r in rows if wanted is None or int(r["seq"]) in wanted]

    async def find_message_by_external_id(self, external_id: str) -> Message | None:
        found = await self._access.messages_where(
            "(group_id, seq) IN (SELECT group_id, seq FROM message_external_ids WHERE external_id = ?)",
            (str(external_id),),
        )
        return found[0] if found else None

    async def messages(self, group_id: int, *, after: int = 0, through: int | None = None) -> list[Message]:
        if through is None:
            return await self._access.messages_where("group_id = ? AND seq > ?", (group_id, after))
        return await self._access.messages_where(
            "group_id = ? AND seq > ? AND seq <= ?", (group_id, after, through)
        )

    async def search_messages(self, group_id: int, query: str, *, limit: int) -> list[Message]:
        """Rows whose text or author contains `query` (case-insensitive; `%` and `_` taken literally),
        deleted rows excluded, the newest `limit` of them, newest first."""
        escaped = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        like = f"%{escaped}%"
        async with self._access.read() as db:
            rows = await db.all(
                "SELECT * FROM messages WHERE group_id = ? AND deleted_at IS NULL"
                " AND (LOWER(text) LIKE ? ESCAPE '\\' OR LOWER(author_name) LIKE ? ESCAPE '\\')"
                " ORDER BY seq DESC LIMIT ?", (group_id, like, like, int(limit)))
        return [to_message(row) for row in rows]

    async def thread_tokens(self, group_id: int, *, through: int) -> int:
        async with self._access.read() as db:
            row = await db.one(
                "SELECT tokens_before, token_count FROM messages WHERE group_id = ? AND seq <= ?"
                " ORDER BY seq DESC LIMIT 1", (group_id, through),
            )
        return 0 if row is None else int(row[0]) + token_cost(int(row[1]))

    async def first_seq_at(self, group_id: int, *, tokens: int) -> int | None:
        async with self._access.read() as db:
            row = await db.one(
                "SELECT seq FROM messages WHERE group_id = ? AND tokens_before >= ?"
                " ORDER BY tokens_before LIMIT 1", (group_id, tokens),
            )
        return None if row is None else int(row[0])

    async def last_agent_author(self, group_id: int, *, through: int) -> int | None:
        async with self._access.read() as db:
            row = await db.one(
                f"SELECT author_agent_id FROM messages{self._access.sql.indexed_by('messages_agent_rows')}"  # noqa: S608 (the dialect's index hint)
                " WHERE group_id = ? AND seq <= ? AND author_type = 'agent'"
                " ORDER BY seq DESC LIMIT 1", (group_id, through),
            )
        return None if row is None else int(row[0])

    async def last_external_id(self, group_id: int, *, before_seq: int | None = None) -> str | None:
        """The numerically largest all-digit external id of the group's rows (of rows
        before `before_seq` when given)."""
        sql = ("SELECT external_id FROM message_external_ids WHERE group_id = ?"  # noqa: S608 (the dialect's fragment)
               f" AND external_id != '' AND {self._access.sql.all_digits('external_id')}")
        params: list[object] = [group_id]
        if before_seq is not None:
            sql += " AND seq < ?"
            params.append(before_seq)
        async with self._access.read() as db:
            row = await db.one(
                sql + " ORDER BY length(ltrim(external_id, '0')) DESC, ltrim(external_id, '0') DESC LIMIT 1",
                params,
            )
        return None if row is None else str(row[0])


class Posting:
    """The store's `PostingStore` role (`bot.core.ports`), a part of `storage.store.SqlStore`: what reached
    the surface, each row's parts and their ids."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def record_posted(self, group_id: int, seq: int, external_id: str) -> None:
        """One more part of the row reached the surface (a chunk, with its id)."""
        async with self._access.write(group_id) as db:
            await self._add_part(db, group_id, seq, str(external_id))

    async def _add_part(self, db: Db, group_id: int, seq: int, external_id: str) -> None:
        row = await self._access.message_row(db, group_id, seq)
        merged = unique([*to_message(row).external_ids, external_id])
        await self._access.map_external_ids(db, group_id, seq, merged)
        await db.exec(
            "UPDATE messages SET external_ids = ? WHERE group_id = ? AND seq = ?",
            (dumps(list(merged)), group_id, seq),
        )

    async def take_posted(self, group_id: int, seq: int, external_id: str) -> int | None:
        """Like `record_posted`, for our own post that a process took in as a person's row of the
        group: the id moves to row `seq`, the person row keeps its text without it. The person
        row's seq (None: no row held the id); AlreadyStored when another kind of row holds it."""
        external_id = str(external_id)
        async with self._access.write(group_id) as db:
            held = await db.one(
                "SELECT m.seq, m.author_type, m.external_ids FROM message_external_ids x"
                " JOIN messages m ON m.group_id = x.group_id AND m.seq = x.seq"
                " WHERE x.external_id = ? AND x.group_id = ?", (external_id, group_id),
            )
            if held is not None and int(held["seq"]) == seq:
                return None  # recorded already
            if held is not None and held["author_type"] != "user":
                raise AlreadyStored(f"message {external_id} is already stored (group {group_id}, seq {held['seq']})")
            if held is not None:
                left = [i for i in strings_from_json(held["external_ids"]) if i != external_id]
                await db.exec("UPDATE messages SET external_ids = ? WHERE group_id = ? AND seq = ?",
                                 (dumps(left), group_id, held["seq"]))
                await db.exec("DELETE FROM message_external_ids WHERE external_id = ?", (external_id,))
            await self._add_part(db, group_id, seq, external_id)
        return None if held is None else int(held["seq"])

    async def confirm_message(self, group_id: int, seq: int) -> None:
        """Every part of the row reached the surface; the provisional messages of its run are
        its parts now, or gone."""
        async with self._access.write(group_id) as db:
            row = await self._access.message_row(db, group_id, seq)
            await db.exec(
                "UPDATE messages SET confirmed = 1 WHERE group_id = ? AND seq = ?", (group_id, seq)
            )
            if row["source_run_id"] is not None and row["author_type"] == "agent":
                await db.exec("DELETE FROM drafts WHERE run_id = ?", (row["source_run_id"],))

    async def unconfirmed_messages(self, group_id: int) -> list[Message]:
        # The partial index names the few unconfirmed rows; without statistics SQLite would walk
        # the primary key through the whole history instead (5 ms a call at 20,000 rows).
        return await self._access.messages_where(
            "group_id = ? AND confirmed = 0 AND author_type != 'user'", (group_id,), index="messages_unconfirmed"
        )


def _require_author(message: NewMessage, author_type: str) -> None:
    if message.author_type != author_type:
        raise InvalidInput(f"expected a {author_type} message, got author_type {message.author_type!r}")
