"""Store methods for an agent's memory: the notes it saved with memory_write.
A part of `storage.store.SqlStore` (SQLite and PostgreSQL)."""
from __future__ import annotations

from bot.core.errors import InvalidInput
from bot.core.models import Note
from bot.core.rules.secrets import mask
from storage.access import Access
from storage.codec import to_note
from storage.sql import the_one


class Notes:
    """The store's `NoteStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def add_note(self, agent_id: int, text: str) -> Note:
        """Keep a note of the agent (removed agents included: a run may end after a removal)."""
        if not text.strip():
            raise InvalidInput("a note needs text")
        async with self._access.write(await self._access.group_of("agents", agent_id)) as db:
            await self._access.agent_row(db, agent_id, include_removed=True)
            note_id = await db.insert(
                "INSERT INTO agent_notes (agent_id, created_at, text) VALUES (?, ?, ?)",
                (agent_id, self._access.now(), mask(text)))
            row = await the_one(db, "SELECT * FROM agent_notes WHERE id = ?", (note_id,))
            return to_note(row)

    async def notes(self, agent_id: int, *, limit: int | None = None) -> list[Note]:
        """Oldest first: every note, or the newest `limit`."""
        sql, params = "SELECT * FROM agent_notes WHERE agent_id = ? ORDER BY id DESC", [agent_id]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(limit, 0))
        async with self._access.read() as db:
            rows = await db.all(sql, params)
        return [to_note(row) for row in reversed(rows)]

    async def note_count(self, agent_id: int) -> int:
        async with self._access.read() as db:
            row = await db.one("SELECT COUNT(*) FROM agent_notes WHERE agent_id = ?", (agent_id,))
        return int(row[0]) if row is not None else 0

    async def clear_notes(self, agent_id: int) -> int:
        async with self._access.write(await self._access.group_of("agents", agent_id)) as db:
            await self._access.agent_row(db, agent_id, include_removed=True)
            return await db.exec("DELETE FROM agent_notes WHERE agent_id = ?", (agent_id,))
