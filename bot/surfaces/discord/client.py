"""The discord.py client: intents, start-up, command sync, events.

Dependencies are passed in; command sync happens in `setup_hook` (one guild
when DISCORD_GUILD_ID is set, else global), never in `on_ready`. Start-up
problems (bad token, missing privileged intent, unreachable API) end in one
readable line.

The client builds the parts its events go to, handing each what it uses: the
ingest (`events`) and the slash commands (`commands`) get the engine, the
surface, this client and the store typed by the roles each reads (`IngestStore`,
`SlashStore`; the engine is no way to the store) as arguments, the commands the
verbs too, and import none of this module back.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import aiohttp
import discord
from discord import app_commands

from bot.config import Settings
from bot.core.errors import ConfigError
from bot.core.models import GroupSettings
from bot.core.rules.shards import Shards
from bot.core.runtime.engine import Engine
from bot.core.verbs.admin import Verbs
from bot.surfaces.discord.api import point_at
from bot.surfaces.discord.commands import SlashCommands, SlashStore
from bot.surfaces.discord.events import Ingest, IngestStore
from bot.surfaces.discord.webhooks import DiscordSurface

log = logging.getLogger(__name__)


def make_intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.guild_reactions = True
    intents.message_content = True
    return intents


class BotStore(SlashStore, IngestStore, Protocol):
    """What the bot's parts ask of the store: the slash commands' roles and ingest's (and, at the
    start, the webhooks' tokens to mask)."""


class RoundtableBot(discord.Client):
    def __init__(self, engine: Engine, surface: DiscordSurface, group_defaults: GroupSettings, *,
                 store: BotStore, verbs: Verbs, guild_id: int | None = None, shards: Shards | None = None,
                 **options: Any) -> None:
        if shards is not None:
            options.update(shard_ids=list(shards.ids), shard_count=shards.count)
        super().__init__(intents=make_intents(), chunk_guilds_at_startup=False, **options)
        self.serving = shards  # (AutoShardedClient's own `shards` is its connections)
        self.engine = engine
        surface.client = self
        self.guild_id = guild_id
        self.tree = app_commands.CommandTree(self)
        self.ingest = Ingest(self, engine, store, own_post=surface.hooks.is_own_post, serves=self.serves,
                             take_down=surface.provisional.draft_delete)
        self.slash = SlashCommands(self, engine, surface, self.ingest, group_defaults, store=store, verbs=verbs)
        self.ready_once = asyncio.Event()
        self.slash.register(self.tree)
        self.tree.on_error = self.on_app_command_error  # type: ignore[method-assign]  # the tree calls it with our bot as client
        self.tree.interaction_check = self.slash.interactions.take  # type: ignore[method-assign]  # each process of a shard gets every command

    def serves(self, guild_id: str | int | None) -> bool:
        """Whether this process takes in that guild's channels (all of them, unless it runs some shards)."""
        return self.serving is None or self.serving.serves(guild_id)

    async def setup_hook(self) -> None:
        """After login, before the gateway: sync the commands, take the groups, resume them
        (replies that never reached the channel go out now). Backlogs of rows not routed yet are
        routed once the gateway session is ready (`on_ready`), in the background."""
        try:
            if self.guild_id is not None:
                guild = discord.Object(self.guild_id)
                self.tree.copy_global_to(guild=guild)
                synced = await self.tree.sync(guild=guild)
            else:
                synced = await self.tree.sync()
        except discord.Forbidden as exc:
            if self.guild_id is None:
                raise ConfigError(f"Discord refused to register the slash commands ({exc.status}, code {exc.code}); "
                                  "check the bot's applications.commands scope") from None
            raise ConfigError(f"DISCORD_GUILD_ID={self.guild_id}: the bot is not in that server (Discord answered "
                              f"{exc.status} Missing Access); invite it there, or clear DISCORD_GUILD_ID") from None
        where = f"to guild {self.guild_id}" if self.guild_id else "globally"
        log.info("synced %d slash commands %s", len(synced), where)
        await self.engine.start(connected=False)

    async def on_connect(self) -> None:
        # A new gateway session: messages of the gap before it are only in the channels' history.
        await self.ingest.resync()

    async def on_ready(self) -> None:
        log.info("connected as %s", self.user)
        self.engine.connect()
        await self.ingest.resync()
        self.ready_once.set()

    async def on_resumed(self) -> None:
        await self.ingest.resync()

    async def on_message(self, message: discord.Message) -> None:
        self.ingest.push(message)

    # Raw events: they come for messages the client never cached (older, or from before a restart).
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        self.ingest.push_edit(payload)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self.ingest.push_removed(payload.channel_id, payload.guild_id, [payload.message_id])

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        self.ingest.push_removed(payload.channel_id, payload.guild_id, payload.message_ids)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        await self.ingest.on_reaction(payload)

    async def on_app_command_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        await self.slash.failed(interaction, error)


class ShardedRoundtableBot(RoundtableBot, discord.AutoShardedClient):
    """The bot as some shards of a sharded bot (`roundtable run --shards 0,1 --shard-count 4`):
    one gateway connection per shard; Discord sends each only its guilds' events."""


def make_bot(engine: Engine, surface: DiscordSurface, group_defaults: GroupSettings, *, store: BotStore,
             verbs: Verbs, guild_id: int | None = None, shards: Shards | None = None, **options: Any) -> RoundtableBot:
    kind = RoundtableBot if shards is None else ShardedRoundtableBot
    return kind(engine, surface, group_defaults, store=store, verbs=verbs, guild_id=guild_id, shards=shards,
                **options)


OpenEngine = Callable[..., contextlib.AbstractAsyncContextManager[tuple[Engine, BotStore, Verbs]]]
"""`bot.wiring.open_engine`: the engine, the store (the bot asks its `BotStore` roles) and the verbs."""


async def run_bot(settings: Settings, open_engine: OpenEngine, defaults: GroupSettings) -> int:
    """Run until stopped. Returns the exit code: 0 after SIGTERM, 130 after Ctrl-C (both stop
    gracefully: no new work, the run in flight interrupted, leases released, the store closed).
    Start-up problems raise ConfigError (one line)."""
    if settings.discord_api_base_url:
        await point_at(settings.discord_api_base_url)
    stopped_by: list[int] = []
    async with open_engine(settings, DiscordSurface, scope="discord:", label="discord bot",
                           before_store=functools.partial(check_token, settings.discord_token or "")) as opened:
        engine, store, verbs = opened
        await store.webhooks.register_webhook_tokens()  # masked from the start (bot.core.rules.secrets)
        surface = engine.surface
        if not isinstance(surface, DiscordSurface):
            raise TypeError(f"the engine opened for the Discord bot has a {type(surface).__name__} surface")
        bot = make_bot(engine, surface, defaults, store=store, verbs=verbs, guild_id=settings.discord_guild_id,
                       shards=settings.shards)
        if settings.shards is not None:
            log.info("running %s", settings.shards)
        try:
            async with bot:
                with stop_on_signals(bot, stopped_by):
                    await bot.start(settings.discord_token or "")
        except discord.LoginFailure:
            raise ConfigError(LOGIN_REFUSED) from None
        except discord.PrivilegedIntentsRequired:
            raise ConfigError("Discord refused the Message Content intent: enable it in the Developer Portal "
                              "(Bot > Privileged Gateway Intents > Message Content) and start again") from None
        except (aiohttp.ClientConnectorError, OSError) as exc:
            raise ConfigError(f"could not reach Discord ({type(exc).__name__}); check the network "
                              "or DISCORD_API_BASE_URL") from None
        finally:
            await surface.aclose()
    if stopped_by:
        log.info("stopped by %s", signal.Signals(stopped_by[0]).name)
    return 130 if stopped_by and stopped_by[0] == signal.SIGINT else 0


async def check_token(token: str) -> None:
    """Discord takes the token (one REST call, no gateway session): checked before the store is
    opened, so a start with a rejected token creates no database. ConfigError when it does not."""
    client = discord.Client(intents=discord.Intents(guilds=True))  # (without guilds, discord.py warns)
    try:
        await client.login(token)
    except discord.LoginFailure:
        raise ConfigError(LOGIN_REFUSED) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise ConfigError(f"could not reach Discord ({type(exc).__name__}); check the network "
                          "or DISCORD_API_BASE_URL") from None
    finally:
        await client.close()


LOGIN_REFUSED = ("Discord rejected DISCORD_TOKEN: copy a fresh token from the Developer Portal "
                 "(Bot > Reset Token) into .env")


@contextlib.contextmanager
def stop_on_signals(bot: discord.Client, stopped_by: list[int]) -> Iterator[None]:
    """SIGTERM and SIGINT close the bot (the caller then closes the engine and the store)."""
    loop = asyncio.get_running_loop()
    closing: list[asyncio.Task[None]] = []

    def stop(signum: int) -> None:
        stopped_by.append(signum)
        if not closing:
            closing.append(loop.create_task(bot.close()))

    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT) if os.name == "posix" else ():  # Unix loops take handlers
        try:
            loop.add_signal_handler(signum, stop, signum)
            installed.append(signum)
        except (RuntimeError, ValueError):  # not the main thread: the caller stops the bot itself
            pass
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
