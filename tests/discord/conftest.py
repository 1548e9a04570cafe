"""The real bot against the local Discord emulator and the local OpenAI-compatible server."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import discord
import pytest

from bot.core.models import GroupSettings
from bot.core.runtime.engine import Engine
from bot.core.runtime.worker import RetryPolicy
from bot.core.verbs.admin import verbs_of
from bot.llm.openai_llm import OpenAILLM
from bot.llm.tokens import make_token_counter
from bot.surfaces.discord.api import point_at
from bot.surfaces.discord.client import RoundtableBot
from bot.surfaces.discord.webhooks import DiscordSurface
from storage.store import SqliteStore, SqlStore
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript
from tests.support import WAIT, bound, eventually

FAST_RETRY = RetryPolicy(first=0.05, factor=2.0, cap=0.4)  # the default waits seconds: too slow for tests


class BotHarness:
    """The bot in this process. New groups stream replies only with `stream=True` (ROUNDTABLE_STREAM):
    the tests of other features check whole posts request by request; tests/discord/test_streaming.py
    checks streamed ones."""

    def __init__(self, emu: DiscordEmulator, llm_server: FakeOpenAI, db: Path, *, stream: bool = False) -> None:
        self.stream = stream
        self.emu = emu
        self.llm_server = llm_server
        self.db = db
        self.bot: RoundtableBot | None = None
        self.engine: Engine | None = None
        self.store: SqlStore | None = None
        self.surface: DiscordSurface | None = None
        self._task: asyncio.Task[None] | None = None
        self._llm: Any = None
        self.engine_options: dict[str, Any] = {}  # more Engine arguments (a clock, the schedule tick)
        self.open_store: Callable[[], Awaitable[SqlStore]] | None = None  # another database than the SQLite file
        self.store_options: dict[str, Any] = {}  # more SqliteStore.open arguments (its health tracker)
        self.make_llm: Any = None  # (token counter) -> the LLM port, instead of one client of llm_server
        self.retry = FAST_RETRY  # the engine's waits between tries

    async def start(self, *, wait_ready: bool = True, busy_timeout_ms: int = 5000) -> RoundtableBot:
        await point_at(self.emu.api_base)
        if self.open_store is not None:
            self.store = await self.open_store()
        else:
            self.store = await SqliteStore.open(self.db, busy_timeout_ms=busy_timeout_ms, **self.store_options)
        counter = make_token_counter()
        self._llm = self.make_llm(counter) if self.make_llm else OpenAILLM(
            api_key="sk-test", base_url=self.llm_server.base_url, default_model="fake-model",
            timeout=WAIT, max_retries=1, counter=counter)  # a loaded machine once stalled the loop 41 s
        self.surface = DiscordSurface(self.store)
        self.engine = Engine(self.store, self._llm, self.surface, counter, scope="discord:", retry=self.retry,
                             **self.engine_options)
        self.bot = RoundtableBot(self.engine, self.surface, GroupSettings(stream=self.stream), store=self.store,
                                 verbs=verbs_of(self.engine, self.store), guild_id=int(self.emu.guild_id),
                                 guild_ready_timeout=0.05)
        self._task = asyncio.create_task(self.bot.start(self.emu.token))
        if wait_ready:
            await asyncio.wait_for(self.bot.ready_once.wait(), bound(30))
        return self.bot

    async def stop(self) -> None:
        if self.bot is not None:
            await self.bot.close()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, bound(5))
        if self.engine is not None:
            await self.engine.close()
        if self.surface is not None:
            await self.surface.aclose()
        if self._llm is not None:
            await self._llm.aclose()
        if self.store is not None:
            await self.store.close()
        self.bot = self.engine = self.store = self.surface = None

    # helpers -------------------------------------------------------------
    async def command(self, name: str, options: dict[str, Any] | None = None, *,
                      user: str | None = None) -> dict[str, Any]:
        rec = await self.emu.invoke_command(self.emu.guild_id, self.emu.channel_id, user or self.emu.alice_id,
                                            name, options or {})
        return await rec.wait_response(5)

    async def setup_group(self, *agents: tuple[str, str], **config: object) -> None:
        reply = await self.command("roundtable setup")
        assert "Roundtable is on" in reply["data"]["content"], reply
        for name, role in agents:
            reply = await self.command("agent add", {"name": name, "role": role, "prompt": f"You are {name}."})
            assert reply["data"]["content"].startswith(f"Added {name}"), reply
        if config:
            reply = await self.command("roundtable config", config)
            assert reply["data"]["embeds"][0]["title"] == "Updated", reply

    async def views_ready(self, message: dict[str, Any]) -> None:
        """Until the bot holds the buttons of a message it sent with a view (the pages of an answer).
        The emulator stores the message before discord.py has read the answer to its request, and
        discord.py drops a click on a message whose view it has not stored yet, silently; a person's
        click comes later than that, a test's may not."""
        assert self.bot is not None
        views = self.bot._connection._view_store  # discord.py keeps no public way to ask

        def held() -> bool:
            return views.is_message_tracked(int(message["id"]))
        await eventually(held, f"the bot holding the view of message {message['id']}")

    @staticmethod
    def embed_fields(reply: dict[str, Any]) -> dict[str, str]:
        """The fields of an answer's first embed, by name."""
        return {f["name"]: f["value"] for f in reply["data"]["embeds"][0]["fields"]}

    def webhook_posts(self) -> list[dict[str, Any]]:
        """What the bot posted through channel webhooks (not interaction follow-ups)."""
        return [r.json for r in self.emu.requests_matching("POST", r"^/webhooks/\d+/[\w.\-]{60,}")
                if r.status == 200 and r.json and not r.path.startswith(f"/webhooks/{self.emu.application_id}/")]

    async def idle(self) -> None:
        """Until every group has nothing left to route, run or show (its dispatcher, then its outbox).
        A message still on its way (a gateway event the bot has not stored yet) is not covered: wait for
        its effect first. Nor is how a burst is routed: messages posted at once are routed together
        (the earlier untagged ones superseded) or one by one, as the bot happens to take them in."""
        assert self.engine is not None and self.store is not None
        for group in await self.store.groups.list_groups():
            await self.engine.wait_idle(group.id, bound(30))


@pytest.fixture
def original_discord_endpoints():
    base, gateway = discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    yield
    discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = base, gateway


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript()


@pytest.fixture
async def harness(tmp_path, script, original_discord_endpoints) -> AsyncIterator[BotHarness]:
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server:
        h = BotHarness(emu, llm_server, tmp_path / "roundtable.db")
        await h.start()
        try:
            yield h
        finally:
            await h.stop()


@pytest.fixture
async def streaming(tmp_path, script, original_discord_endpoints) -> AsyncIterator[BotHarness]:
    """A bot whose groups stream their replies (provisional messages grown by edits)."""
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server:
        harness = BotHarness(emu, llm_server, tmp_path / "roundtable.db", stream=True)
        await harness.start()
        try:
            yield harness
        finally:
            await harness.stop()
