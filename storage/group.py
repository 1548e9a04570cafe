"""The groups: create, find, list, change; a group's ingest watermark and delivery problem."""
from __future__ import annotations

import logging

from bot.core.errors import InvalidInput
from bot.core.models import Group, GroupSettings
from bot.core.rules.secrets import mask_error
from storage.access import Access
from storage.codec import settings_to_json, to_group

log = logging.getLogger(__name__)


class Groups:
    """The store's `GroupStore` role (`bot.core.ports`), a part of `storage.store.SqlStore`: a Discord
    channel or thread, a console group; their settings, ingest watermark and what the surface refuses them."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def create_group(
        self,
        key: str,
        name: str,
        settings: GroupSettings,
        *,
        guild_id: str | None = None,
        channel_id: str | None = None,
        parent_channel_id: str | None = None,
        setup_message_id: str | None = None,
    ) -> Group:
        """Create the group, or re-enable an existing one with this key: its id,
        history and settings are kept (`settings` is then ignored); name and the
        given Discord ids are updated."""
        if not key:
            raise InvalidInput("a group needs a key")
        ids = {
            "guild_id": guild_id,
            "channel_id": channel_id,
            "parent_channel_id": parent_channel_id,
            "setup_message_id": setup_message_id,
        }
        async with self._access.write() as db:  # the key is looked up across groups: alone
            row = await db.one("SELECT id FROM groups WHERE key = ?", (key,))
            if row is None:
                group_id = await db.insert(
                    "INSERT INTO groups (key, name, settings_json, guild_id, channel_id,"
                    " parent_channel_id, setup_message_id, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, name, settings_to_json(settings), *ids.values(), self._access.now()),
                )
                log.info("created group %s (%s)", group_id, key)
            else:
                group_id = int(row["id"])
                changes = {"enabled": 1, "name": name} | {k: v for k, v in ids.items() if v is not None}
                await self._access.update(db, "groups", group_id, changes)
                log.info("re-enabled group %s (%s)", group_id, key)
            return to_group(await self._access.group_row(db, group_id))

    async def get_group(self, group_id: int) -> Group:
        async with self._access.read() as db:
            return to_group(await self._access.group_row(db, group_id))

    async def find_group(self, key: str) -> Group | None:
        async with self._access.read() as db:
            row = await db.one("SELECT * FROM groups WHERE key = ?", (key,))
        return None if row is None else to_group(row)

    async def list_groups(self, *, enabled_only: bool = True, guild_id: str | None = None) -> list[Group]:
        sql, params = "SELECT * FROM groups WHERE 1 = 1", []
        if enabled_only:
            sql += " AND enabled = 1"
        if guild_id is not None:
            sql += " AND guild_id = ?"
            params.append(guild_id)
        async with self._access.read() as db:
            rows = await db.all(sql + " ORDER BY id", params)
        return [to_group(row) for row in rows]

    async def update_group(
        self,
        group_id: int,
        *,
        settings: GroupSettings | None = None,
        enabled: bool | None = None,
        paused: bool | None = None,
    ) -> Group:
        changes: dict[str, object] = {}
        if settings is not None:
            changes["settings_json"] = settings_to_json(settings)
        if enabled is not None:
            changes["enabled"] = int(bool(enabled))
        if paused is not None:
            changes["paused"] = int(bool(paused))
        async with self._access.write(group_id) as db:
            await self._access.group_row(db, group_id)
            await self._access.update(db, "groups", group_id, changes)
            return to_group(await self._access.group_row(db, group_id))

    async def advance_watermark(self, group_id: int, message_id: str) -> None:
        """Move the group's ingest watermark forward to `message_id` (a decimal
        Discord id); never backwards."""
        key = str(int(message_id))  # canonical digits, so length then text orders numerically
        async with self._access.write(group_id) as db:
            await self._access.group_row(db, group_id)
            await db.exec(
                "UPDATE groups SET watermark = ? WHERE id = ? AND (watermark IS NULL"
                " OR length(watermark) < length(CAST(? AS TEXT))"
                " OR (length(watermark) = length(CAST(? AS TEXT)) AND watermark < ?))",
                (key, group_id, key, key, key),
            )

    async def set_delivery_problem(self, group_id: int, problem: str | None) -> bool:
        """Record (or clear, with None) a lasting refusal of the surface; True when it changed."""
        async with self._access.write(group_id) as db:
            return bool(await db.exec(
                "UPDATE groups SET delivery_problem = ? WHERE id = ?"  # noqa: S608 (the dialect's operator)
                    f" AND delivery_problem {self._access.sql.is_distinct} ?",
                (problem and mask_error(problem), group_id, problem and mask_error(problem)),
            ))
