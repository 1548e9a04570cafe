"""People are told when the database stops taking writes, or cannot be reached, for a while.

When the store's `health` says so, the people of every group run here are told once, on the
surface directly (the notice cannot be stored; where the group is, as last read, when the store
cannot say), and once more when it works again (`bot.core.rules.store_health`).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection

from bot.core.errors import StoreError
from bot.core.models import Group
from bot.core.ports import HasGroups, Surface
from bot.core.rules.secrets import mask_error
from bot.core.rules.store_health import Outage, fixed_notice, outage_notice
from bot.core.runtime.worker import Spawn

log = logging.getLogger(__name__)


class OutageNotices:
    """`owned()`: the groups run here now; `spawn`: the notices go out in the background."""

    def __init__(self, store: HasGroups, surface: Surface, owned: Callable[[], Collection[int]],
                 spawn: Spawn) -> None:
        self.store = store
        self.surface = surface
        self.owned = owned
        self.spawn = spawn
        self.closed = False
        self._told = asyncio.Lock()  # the notices go out one after the other, in order
        self._groups_seen: dict[int, Group] = {}  # each group run here as last read

    def seen(self, group: Group) -> Group:
        """Remember where a group is, to tell its people about the database when the store cannot say."""
        self._groups_seen[group.id] = group
        return group

    def refresh(self, group: Group) -> None:
        """A newer read of a group already remembered."""
        if group.id in self._groups_seen:
            self.seen(group)

    def changed(self, outage: Outage) -> None:
        """The database stopped taking writes for a while, or takes them again: tell people."""
        if self.closed:
            return
        text = outage_notice(outage) if outage.fixed_at is None else fixed_notice(outage)
        self.spawn(self._tell_groups(text), "store-health")

    async def _tell_groups(self, text: str) -> None:
        """`text` on the surface of every group run here, directly (not a row: it may not be storable).
        A group the store cannot read now (its server is away) is told where it was last seen."""
        async with self._told:
            for group_id in sorted(self.owned()):
                group: Group | None
                try:
                    group = self.seen(await self.store.groups.get_group(group_id))
                except StoreError as exc:
                    group = self._groups_seen.get(group_id)
                    if group is None:
                        log.warning("group=%s: could not tell people about the database: %s", group_id, exc)
                        continue
                try:
                    if group.enabled:
                        await self.surface.alert(group, mask_error(text))
                except Exception:  # best effort: /roundtable status shows it too
                    log.warning("group=%s: could not tell people about the database", group_id, exc_info=True)
