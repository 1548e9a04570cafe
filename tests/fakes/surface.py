"""A recording Surface: what the engine published, typed and reported, in order."""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

from bot.core.attachments import FileUnavailable
from bot.core.errors import DeliveryError
from bot.core.models import Agent, Episode, Group, Message, SharedFile
from bot.core.ports import Recorder


class RecordingSurface:
    def __init__(self) -> None:
        self.published: list[Message] = []
        self.episodes: list[Episode] = []
        self.working_for: list[str] = []
        self.fail_next = 0
        self.problem: str | None = None  # with fail_next: the failures are a lasting refusal
        self.alerts: list[str] = []
        self.events: list[str] = []  # "row N" when row N is shown, "episode E STATUS" when told
        self.delay = 0.0  # seconds each publish takes
        self.files: dict[str, bytes] = {}  # a shared file's url -> its bytes (file_data)
        self.fetched: list[str] = []  # the urls file_data was asked for, in order

    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise DeliveryError("surface down", problem=self.problem)
        if self.delay:
            await asyncio.sleep(self.delay)
        self.published.append(message)
        self.events.append(f"row {message.seq}")
        if message.author_type != "user":
            await record(f"ext-{group.id}-{message.seq}")

    async def alert(self, group: Group, text: str) -> None:
        self.alerts.append(text)

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        self.fetched.append(file.url)
        if file.url not in self.files:
            raise FileUnavailable(f"no file at {file.url}")
        return self.files[file.url]

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        self.working_for.append(agent.name)
        yield

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        self.episodes.append(episode)
        self.events.append(f"episode {episode.id} {episode.status}")

    def lines(self) -> list[str]:
        return [f"[{m.author_name}] {m.text}" for m in self.published]
