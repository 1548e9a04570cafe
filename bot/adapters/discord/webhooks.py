"""Posting to Discord: agents through the channel's webhook, notices as the bot.

One webhook per group channel, created by `/roundtable setup`, stored, reused;
threads post through the parent's webhook with `thread`. Every post sets
`allowed_mentions` explicitly: never @everyone, @here or roles; only the
people the agent tagged. Unknown Webhook (10015) -> recreate once and resend.
"""
from __future__ import annotations

import contextlib
import logging
from typing import AsyncIterator

import discord

from bot.adapters.discord.render import mention_policy, neutralize_mass_mentions, split_message
from bot.core.errors import DeliveryError, UserFacingError
from bot.core.models import Agent, Episode, Group, Message
from bot.core.ports import Store
from bot.core.stop import strip_terminate

log = logging.getLogger(__name__)

WEBHOOK_NAME = "Roundtable"
UNKNOWN_WEBHOOK = 10015
EPISODE_REACTIONS = {"running": "⏳", "terminated": "✅", "max_turns": "🛑", "stopped": "⏹️",
                     "quiet": "💬", "stalled": "🔁", "superseded": None}


def allowed_mentions(text: str, tagged_user_ids: tuple[str, ...]) -> discord.AllowedMentions:
    policy = mention_policy(text, tagged_user_ids)
    return discord.AllowedMentions(
        everyone=False, roles=False, replied_user=False, users=[discord.Object(int(u)) for u in policy.users]
    )


class DiscordSurface:
    """Implements the engine's Surface over a connected discord.py client."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.client: discord.Client | None = None
        self._webhooks: dict[str, discord.Webhook] = {}

    @property
    def bot(self) -> discord.Client:
        if self.client is None:
            raise DeliveryError("the Discord client is not connected yet")
        return self.client

    def channel(self, channel_id: str) -> discord.abc.Messageable:
        channel = self.bot.get_channel(int(channel_id))
        return channel if channel is not None else self.bot.get_partial_messageable(int(channel_id))  # type: ignore[return-value]

    # webhooks ------------------------------------------------------------
    async def create_webhook(self, channel_id: str) -> discord.Webhook:
        """Create and store the webhook of a channel (a thread's parent). UserFacingError when not allowed."""
        channel = self.bot.get_channel(int(channel_id)) or await self.bot.fetch_channel(int(channel_id))
        if not isinstance(channel, discord.TextChannel):
            raise UserFacingError("Roundtable works in text channels and their threads.")
        try:
            webhook = await channel.create_webhook(name=WEBHOOK_NAME, reason="Roundtable group chat")
        except discord.Forbidden:
            raise UserFacingError(
                f"I need the Manage Webhooks permission in #{channel.name} to post as agents; "
                "grant it to my role and run /roundtable setup again.") from None
        except discord.HTTPException as exc:
            raise UserFacingError(f"Discord refused to create the webhook ({exc.status}); try again.") from None
        assert webhook.token is not None
        await self.store.save_webhook(channel_id, str(webhook.id), webhook.token)
        self._webhooks[channel_id] = webhook
        return webhook

    async def webhook(self, channel_id: str) -> discord.Webhook:
        cached = self._webhooks.get(channel_id)
        if cached is not None:
            return cached
        stored = await self.store.get_webhook(channel_id)
        if stored is None:
            return await self.create_webhook(channel_id)
        webhook = discord.Webhook.partial(int(stored[0]), stored[1], client=self.bot)
        self._webhooks[channel_id] = webhook
        return webhook

    async def is_own_webhook(self, group: Group, webhook_id: int) -> bool:
        stored = await self.store.get_webhook(group.parent_channel_id or group.channel_id or "")
        return stored is not None and stored[0] == str(webhook_id)

    # Surface -------------------------------------------------------------
    async def publish(self, group: Group, message: Message, agent: Agent | None) -> list[str]:
        if message.author_type == "user":
            return list(message.external_ids)
        try:
            if message.author_type == "agent" and agent is not None:
                return await self._post_as_agent(group, message, agent)
            return await self._post_notice(group, message)
        except UserFacingError as exc:
            raise DeliveryError(str(exc)) from None
        except discord.HTTPException as exc:
            raise DeliveryError(f"Discord answered {exc.status} (code {exc.code})") from None

    async def _post_as_agent(self, group: Group, message: Message, agent: Agent) -> list[str]:
        text = neutralize_mass_mentions(strip_terminate(message.text))
        mentions = allowed_mentions(text, message.tags.user_ids)
        hook_channel = group.parent_channel_id or group.channel_id or ""
        thread = discord.Object(int(group.channel_id)) if group.parent_channel_id and group.channel_id else discord.utils.MISSING
        ids: list[str] = []
        for chunk in split_message(text):
            for attempt in (1, 2):
                webhook = await self.webhook(hook_channel)
                try:
                    sent = await webhook.send(chunk, username=agent.name, avatar_url=agent.avatar_url or discord.utils.MISSING,
                                              allowed_mentions=mentions, wait=True, thread=thread)
                    ids.append(str(sent.id))
                    break
                except discord.NotFound as exc:
                    if exc.code != UNKNOWN_WEBHOOK or attempt == 2:
                        raise
                    log.warning("group=%s webhook was deleted; creating a new one", group.id)
                    self._webhooks.pop(hook_channel, None)
                    await self.store.forget_webhook(hook_channel)
                    await self.create_webhook(hook_channel)
        return ids

    async def _post_notice(self, group: Group, message: Message) -> list[str]:
        ids = []
        for chunk in split_message(neutralize_mass_mentions(message.text)):
            sent = await self.channel(group.channel_id or "").send(chunk, allowed_mentions=discord.AllowedMentions.none())
            ids.append(str(sent.id))
        return ids

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        try:
            typing = self.channel(group.channel_id or "").typing()
            await typing.__aenter__()
        except discord.HTTPException:
            log.debug("group=%s typing indicator failed", group.id)
            yield
            return
        try:
            yield
        finally:
            await typing.__aexit__(None, None, None)

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        task = await self.store.get_message(group.id, episode.task_seq)
        if not task.external_ids:
            return
        target = self.channel(group.channel_id or "").get_partial_message(int(task.external_ids[0]))  # type: ignore[attr-defined]
        if not episode.running:
            with contextlib.suppress(discord.HTTPException):
                await target.remove_reaction(EPISODE_REACTIONS["running"], self.bot.user)  # type: ignore[arg-type]
        emoji = EPISODE_REACTIONS.get(episode.status)
        if emoji:
            with contextlib.suppress(discord.HTTPException):
                await target.add_reaction(emoji)
