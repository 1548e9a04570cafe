"""Discord interactions taken: each is answered by the first process that claims it."""
from __future__ import annotations

from storage.access import Access

INTERACTIONS_KEPT = 24 * 3600.0  # seconds a taken interaction's id is kept (Discord answers one for 15 minutes)


class Interactions:
    """The store's `InteractionStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def claim_interaction(self, interaction_id: str) -> bool:
        """Take a Discord interaction for this process: True for the first store to ask, False for
        every later one (another process, or a second delivery). Ids older than a day are dropped
        on the way (an index range of the few expired rows)."""
        now = self._access.now()
        async with self._access.write() as db:  # of no group: alone
            taken = await db.exec(
                "INSERT INTO interactions (id, owner, claimed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (interaction_id, self._access.owner, now),
            )
            await db.exec("DELETE FROM interactions WHERE claimed_at < ?", (now - INTERACTIONS_KEPT,))
        return taken == 1
