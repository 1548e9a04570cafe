"""Episodes: a task and the turns that answer it, until it ends (its status says how)."""
from __future__ import annotations

from typing import get_args

from bot.core.errors import InvalidInput, NotFound
from bot.core.models import Episode, EpisodeStatus, Message, NewMessage
from storage.access import Access
from storage.codec import to_episode, to_message
from storage.sql import Db

EPISODE_END_STATUSES = frozenset(get_args(EpisodeStatus)) - {"running"}


class Episodes:
    """The store's `EpisodeStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def _episode_row(self, db: Db, episode_id: int) -> Episode:
        row = await db.one("SELECT * FROM episodes WHERE id = ?", (episode_id,))
        if row is None:
            raise NotFound(f"no episode with id {episode_id}")
        return to_episode(row)

    async def get_episode(self, episode_id: int) -> Episode:
        async with self._access.read() as db:
            return await self._episode_row(db, episode_id)

    async def end_episode(
        self, episode_id: int, status: str, *, notice: NewMessage | None = None
    ) -> tuple[Episode, Message | None] | None:
        """Set a running episode's final status and, in the same transaction, append
        `notice` (e.g. the max_turns notice). None when the episode had already
        ended (nothing changes, no notice)."""
        if status not in EPISODE_END_STATUSES:
            raise InvalidInput(
                f"unknown episode status {status!r}; use one of {', '.join(sorted(EPISODE_END_STATUSES))}"
            )
        async with self._access.write(await self._access.group_of("episodes", episode_id)) as db:
            episode = await self._episode_row(db, episode_id)
            if not episode.running:
                return None
            await db.exec(
                "UPDATE episodes SET status = ?, ended_at = ? WHERE id = ?", (status, self._access.now(), episode_id)
            )
            shown = None
            if notice is not None:
                shown = await self._access.append(db, episode.group_id, notice, episode_id=episode_id)
            return await self._episode_row(db, episode_id), shown

    async def earlier_tasks(self, group_id: int, *, before_seq: int, limit: int) -> list[tuple[Episode, Message]]:
        """The group's episodes opened before row `before_seq`, each with its task row, newest first,
        at most `limit` (one query over the episodes' index)."""
        async with self._access.read() as db:
            episodes = await db.all(
                "SELECT * FROM episodes WHERE group_id = ? AND task_seq < ? ORDER BY task_seq DESC LIMIT ?",
                (group_id, before_seq, limit))
            if not episodes:
                return []
            seqs = [int(e["task_seq"]) for e in episodes]
            rows = await db.all(
                f"SELECT * FROM messages WHERE group_id = ? AND seq IN ({', '.join('?' * len(seqs))})",  # noqa: S608 (placeholders only)
                [group_id, *seqs])
        tasks = {int(r["seq"]): to_message(r) for r in rows}
        return [(to_episode(e), tasks[int(e["task_seq"])]) for e in episodes if int(e["task_seq"]) in tasks]

    async def break_tasks(self, group_id: int) -> int:
        async with self._access.write(group_id) as db:
            seq = int((await self._access.group_row(db, group_id))["latest_seq"])
            await db.exec("INSERT INTO task_breaks (group_id, after_seq, created_at) VALUES (?, ?, ?)"
                          " ON CONFLICT (group_id, after_seq) DO NOTHING", (group_id, seq, self._access.now()))
        return seq

    async def task_breaks(self, group_id: int, *, from_seq: int, before_seq: int) -> list[int]:
        async with self._access.read() as db:
            rows = await db.all("SELECT after_seq FROM task_breaks WHERE group_id = ? AND after_seq >= ?"
                                " AND after_seq < ? ORDER BY after_seq", (group_id, from_seq, before_seq))
        return [int(r["after_seq"]) for r in rows]
