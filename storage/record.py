"""Store methods that read a group's record in pages, for exports: rows, runs and episodes
of a seq range, oldest first, a page at a time (so a long history is never all in memory),
and the roster as it ever was. A part of `storage.store.SqlStore`."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from bot.core.models import Agent, Episode, Message, Run
from storage.access import Access
from storage.codec import to_agent, to_episode, to_message, to_run

PAGE = 500


class Record:
    """The store's `RecordStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def message_pages(self, group_id: int, *, after: int = 0, through: int | None = None,
                            size: int = PAGE) -> AsyncIterator[list[Message]]:
        """Rows after < seq <= through (None: to the newest), oldest first, `size` at a time."""
        last = after
        while True:
            async with self._access.read() as db:
                rows = await db.all(
                    "SELECT * FROM messages WHERE group_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                    (group_id, last, 2**62 if through is None else through, size))
            if not rows:
                return
            page = [to_message(row) for row in rows]
            last = page[-1].seq
            yield page

    async def run_pages(self, group_id: int, *, after: int = 0, through: int | None = None,
                        size: int = PAGE) -> AsyncIterator[list[Run]]:
        """Runs whose snapshot is in after < snapshot_seq <= through, in the order they started."""
        last_id = 0
        while True:
            async with self._access.read() as db:
                rows = await db.all(
                    "SELECT * FROM runs WHERE group_id = ? AND id > ? AND snapshot_seq > ? AND snapshot_seq <= ?"
                        " ORDER BY id LIMIT ?",
                    (group_id, last_id, after, 2**62 if through is None else through, size))
            if not rows:
                return
            page = [to_run(row) for row in rows]
            last_id = page[-1].id
            yield page

    async def episode_pages(self, group_id: int, *, after: int = 0, through: int | None = None,
                            size: int = PAGE) -> AsyncIterator[list[Episode]]:
        """The episodes of the rows after < seq <= through: those they open, and the one the
        first of them belongs to when it opened earlier; in order."""
        async with self._access.read() as db:
            row = await db.one(
                "SELECT episode_id FROM messages WHERE group_id = ? AND seq > ? ORDER BY seq LIMIT 1",
                (group_id, after))
        earlier = row[0] if row is not None and row[0] is not None else 0
        last_id = 0
        while True:
            async with self._access.read() as db:
                rows = await db.all(
                    "SELECT * FROM episodes WHERE group_id = ? AND id > ?"
                        " AND ((task_seq > ? AND task_seq <= ?) OR id = ?) ORDER BY id LIMIT ?",
                    (group_id, last_id, after, 2**62 if through is None else through, earlier, size))
            if not rows:
                return
            page = [to_episode(row) for row in rows]
            last_id = page[-1].id
            yield page

    async def runs_by_id(self, run_ids: Iterable[int]) -> dict[int, Run]:
        ids = sorted(set(run_ids))
        if not ids:
            return {}
        async with self._access.read() as db:
            rows = await db.all(f"SELECT * FROM runs WHERE id IN ({','.join('?' * len(ids))})", ids)  # noqa: S608 (placeholders only)
        return {int(row["id"]): to_run(row) for row in rows}

    async def episodes_by_id(self, episode_ids: Iterable[int]) -> dict[int, Episode]:
        ids = sorted(set(episode_ids))
        if not ids:
            return {}
        async with self._access.read() as db:
            rows = await db.all(f"SELECT * FROM episodes WHERE id IN ({','.join('?' * len(ids))})", ids)  # noqa: S608 (placeholders only)
        return {int(row["id"]): to_episode(row) for row in rows}

    async def roster_ever(self, group_id: int) -> list[tuple[Agent, float | None]]:
        """Every agent the group ever had, in roster order, each with when it was removed (None: on it)."""
        async with self._access.read() as db:
            rows = await db.all(
                "SELECT * FROM agents WHERE group_id = ? ORDER BY removed_at IS NOT NULL, position, id",
                (group_id,))
        return [(to_agent(row), row["removed_at"]) for row in rows]
