"""Posting to Discord: agents through the channel's webhook, notices as the bot.

`DiscordSurface` implements the engine's `Surface` port by composing parts that each own one
concern and get only what they use (the store's roles, the connection, one another):

- `link.Link`: the connected client, the closing flag, the channels, background tasks.
- `hooks.Webhooks`: one webhook per group channel, created by `/roundtable setup`, stored,
  reused (threads post through the parent's with `thread_id`); which webhooks are the bot's.
- `hooks.HookHttp`: the requests to a webhook, each sent once, with its rate-limit state (shared
  by posts and drafts, per webhook); every transport failure becomes a `DeliveryError` here: a
  passing fault (429, 5xx, network) is retried by the engine's outbox; a lasting refusal (a
  missing permission) carries a `problem` text that names what to fix.
- `posting.Publisher`: a committed row, chunk by chunk, exactly once (a resumed publish reads
  the channel back first; a post that may land late is looked for and its copy deleted; Unknown
  Webhook or a moved webhook: recreated once and sent again).
- `provisional.DraftWire`: the provisional messages of streamed replies (`drafts`), posted,
  edited and deleted through the webhook; `asking.Asking`: the runs' drafts and the approvals
  asked on them; `asking.Asks`: the calls held and the lines shown for them.
- `notices.Notices`: alerts, typing, episode reactions; `cdn.Cdn`: shared files' bytes and
  fresh signed URLs.

Every post sets `allowed_mentions` explicitly: never @everyone, @here or roles; only the people
the agent tagged.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import discord

from bot.core.models import Agent, Approval, ApprovalAsk, DraftPart, Episode, Group, Message, SharedFile
from bot.core.ports import Draft, HasDrafts, HasThread, HasWebhooks, Recorder
from bot.surfaces.discord.asking import Asking, Asks
from bot.surfaces.discord.cdn import Cdn
from bot.surfaces.discord.drafts import remove_parts
from bot.surfaces.discord.hooks import HookHttp, Webhooks
from bot.surfaces.discord.link import Link
from bot.surfaces.discord.notices import Notices
from bot.surfaces.discord.posting import Publisher
from bot.surfaces.discord.provisional import DraftWire


class SurfaceStore(HasThread, HasDrafts, HasWebhooks, Protocol):
    """What the Discord surface asks of the store: the rows it shows (and finds again after a crash),
    the provisional messages of replies being written, and each channel's webhook."""


class DiscordSurface:
    """Implements the engine's Surface over a connected discord.py client, with its parts."""

    def __init__(self, store: SurfaceStore) -> None:
        self.link = Link()
        self.hooks = Webhooks(self.link, store)
        self.http = HookHttp(self.link, self.hooks)
        self.cdn = Cdn(self.link)
        self.asks = Asks()
        self.approvals = self.asks.approvals  # tool calls held for a press of Approve or Deny
        self.provisional = DraftWire(self.link, store, self.http, self.cdn, self.asks)
        self.asking = Asking(self.link, store, self.provisional, self.http, self.cdn, self.asks)
        self.posts = Publisher(self.link, store, self.hooks, self.http, self.cdn, self.provisional)
        self.notices = Notices(self.link, store)

    @property
    def client(self) -> discord.Client | None:
        return self.link.client

    @client.setter
    def client(self, client: discord.Client | None) -> None:
        self.link.client = client

    async def aclose(self) -> None:
        await self.link.close()
        await self.http.close()

    async def create_webhook(self, channel_id: str) -> tuple[str, str]:
        """Create and store the webhook of a channel (`/roundtable setup`). UserFacingError when not allowed."""
        return await self.hooks.create(channel_id)

    async def fresh_url(self, url: str) -> str:
        return await self.cdn.fresh_url(url)

    # Surface -------------------------------------------------------------
    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        if message.author_type == "agent" and message.source_run_id is not None:
            await self.asking.done(message.source_run_id)  # an approval's message ends its updates first
        await self.posts.publish(group, message, agent, resume=resume, record=record)

    def working(self, group: Group, agent: Agent) -> AbstractAsyncContextManager[None]:
        return self.notices.working(group, agent)

    def draft(self, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> Draft | None:
        return self.asking.draft(group, agent, run_id, parts, text)

    async def remove_drafts(self, group: Group, parts: Sequence[DraftPart]) -> list[int]:
        for run_id in {p.run_id for p in parts}:
            await self.asking.done(run_id)
        return await remove_parts(self.provisional, group, parts)

    async def approve(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        return await self.asking.approve(group, agent, ask)

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        await self.notices.episode_updated(group, episode)

    async def alert(self, group: Group, text: str) -> None:
        await self.notices.alert(group, text)

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        return await self.cdn.file_data(group, file)
