"""Episodes: a task and the turns that answer it, until it ends (its status says how)."""
from __future__ import annotations

from typing import get_args

from bot.core.errors import InvalidInput, NotFound
from bot.core.models import Episode, EpisodeStatus, Message, NewMessage
from storage.base import StoreBase
from storage.codec import to_episode
from storage.sql import Db

EPISODE_END_STATUSES = frozenset(get_args(EpisodeStatus)) - {"running"}


class EpisodeMixin(StoreBase):
    async def _episode_row(self, db: Db, episode_id: int) -> Episode:
        row = await self._one(db, "SELECT * FROM episodes WHERE id = ?", (episode_id,))
        if row is None:
            raise NotFound(f"no episode with id {episode_id}")
        return to_episode(row)

    async def get_episode(self, episode_id: int) -> Episode:
        async with self._read() as db:
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
        async with self._write(await self._group_of("episodes", episode_id)) as db:
            episode = await self._episode_row(db, episode_id)
            if not episode.running:
                return None
            await self._exec(
                db, "UPDATE episodes SET status = ?, ended_at = ? WHERE id = ?", (status, self._now(), episode_id)
            )
            shown = None
            if notice is not None:
                shown = await self._append(db, episode.group_id, notice, episode_id=episode_id)
            return await self._episode_row(db, episode_id), shown
