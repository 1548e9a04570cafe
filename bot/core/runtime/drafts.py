"""A group's provisional messages that no reply will own: taken back when the group is quiet.

A streamed run shows its reply on a provisional message (`Surface.draft`) and its reply's row
takes it over; a run that posts nothing takes its own back (`bot.core.runtime.turn`). One that
could not (it died mid-stream and its agent has nothing left to answer) leaves parts that no row
owns: when nobody is pending in the group, its dispatcher has them taken back here.
"""
from __future__ import annotations

import logging

from bot.core.errors import DeliveryError
from bot.core.models import Group
from bot.core.ports import HasDrafts, Surface

log = logging.getLogger(__name__)


class Drafts:
    def __init__(self, store: HasDrafts, surface: Surface) -> None:
        self.store = store
        self.surface = surface

    async def sweep(self, group: Group) -> None:
        """Take back the provisional messages that no row owns and no run will use."""
        parts = await self.store.drafts.orphan_drafts(group.id)
        if not parts:
            return
        try:
            gone = await self.surface.remove_drafts(group, parts)
        except DeliveryError as exc:
            log.warning("group=%s: %d provisional message(s) could not be taken back yet: %s", group.id, len(parts),
                        exc)
            return
        await self.store.drafts.drop_drafts(gone)
        log.info("group=%s: took back %d provisional message(s) of replies never posted", group.id, len(gone))
