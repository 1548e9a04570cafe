"""Ingest: people's messages in enabled groups become user rows; missed ones are caught up.

The group's own webhook and the bot itself are never re-ingested; other bots
and webhooks are ignored unless the group allows them. A Discord reply to an
agent's message tags that agent. Attachments are noted by name and URL.
Live messages and catch-up share a per-group lock and dedupe by message id,
so each Discord message becomes exactly one row, in order.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import discord

from bot.core.errors import RoundtableError
from bot.core.models import Agent, Group

if TYPE_CHECKING:
    from bot.adapters.discord.client import RoundtableBot

log = logging.getLogger(__name__)

INGESTED_TYPES = (discord.MessageType.default, discord.MessageType.reply)


def message_text(message: discord.Message) -> str:
    parts = [message.content] if message.content else []
    parts.extend(f"[attachment: {a.filename} ({a.url})]" for a in message.attachments)
    return "\n".join(parts)


class Ingest:
    def __init__(self, bot: "RoundtableBot") -> None:
        self.bot = bot
        self.store = bot.engine.store
        self._locks: dict[int, asyncio.Lock] = {}

    def lock(self, group_id: int) -> asyncio.Lock:
        return self._locks.setdefault(group_id, asyncio.Lock())

    async def group_for(self, message: discord.Message) -> Group | None:
        if message.guild is None:
            return None
        group = await self.store.find_group(f"discord:{message.channel.id}")
        return group if group is not None and group.enabled else None

    async def accepts(self, group: Group, message: discord.Message) -> bool:
        if message.type not in INGESTED_TYPES:
            return False
        if self.bot.user is not None and message.author.id == self.bot.user.id:
            return False
        if message.webhook_id is not None:
            if await self.bot.surface.is_own_webhook(group, message.webhook_id):
                return False
            return group.settings.allow_bots
        if message.author.bot and not group.settings.allow_bots:
            return False
        return bool(message.content or message.attachments)

    async def on_message(self, message: discord.Message) -> None:
        group = await self.group_for(message)
        if group is None:
            return
        async with self.lock(group.id):
            await self._ingest(group, message)

    async def _ingest(self, group: Group, message: discord.Message, *, wake: bool = True) -> bool:
        """Store one Discord message as a user row; False when it is not for us or already stored."""
        if not await self.accepts(group, message):
            return False
        if await self.store.find_message_by_external_id(str(message.id)) is not None:
            return False
        replied: list[Agent] = []
        if message.reference is not None and message.reference.message_id is not None:
            target = await self.store.find_message_by_external_id(str(message.reference.message_id))
            if target is not None and target.author_type == "agent" and target.author_agent_id is not None:
                replied.append(await self.store.get_agent(target.author_agent_id))
        try:
            await self.bot.engine.post_user_message(
                group, author_name=message.author.display_name, user_id=str(message.author.id),
                text=message_text(message)[:8000], extra_agents=replied, external_ids=[str(message.id)], wake=wake,
            )
        except RoundtableError as exc:
            log.error("group=%s message %s was not stored: %s", group.id, message.id, exc)
            return False
        return True

    async def catch_up(self) -> int:
        """Read each group's channel history after the last stored id and ingest what is missing."""
        count = 0
        for group in await self.store.list_groups():
            if group.channel_id is None or not group.key.startswith("discord:"):
                continue
            after = await self.store.last_external_id(group.id) or group.setup_message_id
            channel = self.bot.get_channel(int(group.channel_id))
            if not isinstance(channel, (discord.TextChannel, discord.Thread)) or after is None:
                continue
            async with self.lock(group.id):
                try:
                    async for message in channel.history(limit=None, after=discord.Object(int(after)), oldest_first=True):
                        count += await self._ingest(group, message, wake=False)
                except discord.HTTPException as exc:
                    log.warning("group=%s could not read the channel history: %s", group.id, exc)
            self.bot.engine.wake(group.id)  # the whole batch is routed together
        if count:
            log.info("caught up %d message(s) posted while the bot was away", count)
        return count

    async def on_reaction(self, payload: discord.RawReactionActionEvent) -> None:
        """A person's reaction on a message moves their read cursor through it."""
        if self.bot.user is not None and payload.user_id == self.bot.user.id:
            return
        found = await self.store.find_message_by_external_id(str(payload.message_id))
        if found is not None:
            await self.store.mark_seen(found.group_id, str(payload.user_id), found.seq)
