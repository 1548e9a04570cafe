"""What the bot shows as itself, outside the thread's rows: alerts about a lasting delivery
problem, the typing indicator while an agent works, and each episode's state as a reaction on
its task. All best effort, and none of it holds up a run or ingest."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import discord
from discord.http import Route

from bot.core.models import Agent, Episode, Group
from bot.core.ports import HasThread
from bot.surfaces.discord.link import TRANSPORT_ERRORS, Link

log = logging.getLogger(__name__)

TYPING_EVERY = 8.0  # Discord shows typing for 10 s per request
EPISODE_REACTIONS = {"running": "⏳", "terminated": "✅", "max_turns": "🛑", "stopped": "⏹️",
                     "quiet": "💬", "stalled": "🔁", "superseded": None}


class Notices:
    """Alerts, typing and episode reactions, as the bot."""

    def __init__(self, link: Link, store: HasThread) -> None:
        self.link = link
        self.store = store

    async def alert(self, group: Group, text: str) -> None:
        """A plain message from the bot (outside the thread and its queue); best effort."""
        try:
            await self.link.bot.http.request(
                Route("POST", "/channels/{channel_id}/messages", channel_id=int(group.channel_id or 0)),
                json={"content": text[:2000], "allowed_mentions": {"parse": []}},
            )
        except (discord.HTTPException, *TRANSPORT_ERRORS) as exc:
            log.warning("group=%s could not post the alert: %s", group.id, type(exc).__name__)

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        """Typing in the channel while the agent works, sent from a task of its own:
        a slow or failing typing endpoint never delays the model call."""
        task = asyncio.create_task(self._typing(group), name=f"typing-{group.id}")
        try:
            yield
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                # The typing task's own end is expected; a cancel of this task (a shutdown that came while
                # the typing task was ending) is not ours to swallow: swallowed, the run went on and its
                # dispatcher back to waiting for work, and `Engine.close` waited for it forever.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise

    async def _typing(self, group: Group) -> None:
        channel = self.link.channel(group.channel_id or "0")
        while True:
            try:
                async with asyncio.timeout(TYPING_EVERY):
                    await channel.typing()
            except Exception as exc:  # cosmetic: nothing about typing may fail the run
                log.debug("group=%s typing indicator failed: %s", group.id, type(exc).__name__)
            await asyncio.sleep(TYPING_EVERY)

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        """The episode's state as a reaction on its task, set in the background: a slow
        reactions endpoint never holds up ingest or the next run."""
        task = await self.store.thread.get_message(group.id, episode.task_seq)
        if task.external_ids:
            self.link.spawn(self._react(group, int(task.external_ids[0]), episode), f"react-{group.id}")

    async def _react(self, group: Group, message_id: int, episode: Episode) -> None:
        try:
            target = self.link.channel(group.channel_id or "0").get_partial_message(message_id)  # type: ignore[attr-defined]  # text channels, threads and partials all have it
            errors = (discord.HTTPException, *TRANSPORT_ERRORS)
            if not episode.running:
                with contextlib.suppress(*errors):
                    await target.remove_reaction(EPISODE_REACTIONS["running"], self.link.bot.user)
            emoji = EPISODE_REACTIONS.get(episode.status)
            if emoji:
                with contextlib.suppress(*errors):
                    await target.add_reaction(emoji)
        except Exception as exc:
            if not self.link.shutting_down:
                raise  # unexpected: logged with its traceback
            log.debug("group=%s: episode %s's reaction not set: shutting down (%s)", group.id, episode.id,
                      str(exc) or type(exc).__name__)
