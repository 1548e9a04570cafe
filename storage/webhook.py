"""The webhooks the bot posts agents' messages through, one per channel; their tokens are secrets
(registered in `bot.core.rules.secrets` as soon as they are read)."""
from __future__ import annotations

from bot.core.rules.secrets import SECRETS
from storage.access import Access


class Webhooks:
    """The store's `WebhookStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def get_webhook(self, channel_id: str) -> tuple[str, str] | None:
        async with self._access.read() as db:
            row = await db.one(
                "SELECT webhook_id, token FROM webhooks WHERE channel_id = ?", (channel_id,)
            )
        if row is None:
            return None
        SECRETS.register(row["token"])  # masked wherever it could show from now on
        return row["webhook_id"], row["token"]

    async def register_webhook_tokens(self) -> int:
        async with self._access.read() as db:
            rows = await db.all("SELECT token FROM webhooks")
        SECRETS.register_all(row[0] for row in rows)
        return len(rows)

    async def save_webhook(self, channel_id: str, webhook_id: str, token: str) -> None:
        SECRETS.register(token)
        async with self._access.write() as db:  # a channel's, of no group: alone
            await db.exec(
                "INSERT INTO webhooks (channel_id, webhook_id, token) VALUES (?, ?, ?)"
                " ON CONFLICT (channel_id) DO UPDATE SET webhook_id = excluded.webhook_id,"
                " token = excluded.token",
                (channel_id, webhook_id, token),
            )

    async def forget_webhook(self, channel_id: str) -> None:
        async with self._access.write() as db:  # a channel's, of no group: alone
            await db.exec("DELETE FROM webhooks WHERE channel_id = ?", (channel_id,))
