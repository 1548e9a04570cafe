"""The Discord surface's hold on the connected client: the client once it connects, whether the
surface is closing, the channels it reads and posts in, and its background tasks (reactions,
late-copy checks, drafts). Every part of the surface (`bot.surfaces.discord.webhooks`) shares one."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine

import aiohttp
import discord

from bot.core.errors import DeliveryError
from bot.core.models import Group

log = logging.getLogger(__name__)

TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
SCAN_LIMIT = 500  # channel messages read back when looking for posts that arrived unrecorded


class Link:
    """The connected discord.py client (None until it connects), the closing flag and the tasks in flight."""

    def __init__(self) -> None:
        self.client: discord.Client | None = None
        self.closed = False
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def bot(self) -> discord.Client:
        if self.client is None:
            raise DeliveryError("the Discord client is not connected yet")
        return self.client

    @property
    def shutting_down(self) -> bool:
        """The surface or its client is closed or closing ("Session is closed" is expected then)."""
        return self.closed or self.client is None or self.client.is_closed()

    def channel(self, channel_id: str) -> discord.abc.Messageable:
        channel = self.bot.get_channel(int(channel_id))
        return channel if channel is not None else self.bot.get_partial_messageable(int(channel_id))  # type: ignore[return-value]  # a partial messageable sends and reads history too

    def where(self, group: Group) -> str:
        channel = self.bot.get_channel(int(group.channel_id or 0))
        return f"#{channel.name}" if channel is not None and hasattr(channel, "name") else "this channel"

    def spawn(self, coro: Coroutine[object, object, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    async def close(self) -> None:
        """Closing: no new request goes out; the tasks in flight are cancelled and awaited."""
        self.closed = True
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
