"""Open the real parts (the store: SQLite or PostgreSQL; OpenAI client, token counter) and run a surface."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple

from bot.config import Settings
from bot.core.errors import StoreError
from bot.core.models import DEFAULT_PROVIDER
from bot.core.ports import Store, Surface, TokenCounter
from bot.core.rules.secrets import register_url
from bot.core.runtime.engine import Engine
from bot.core.verbs.admin import Verbs, verbs_of
from bot.masking import register_settings
from storage.store import SqlStore

if TYPE_CHECKING:
    from bot.llm.providers import Providers

log = logging.getLogger(__name__)


class Opened(NamedTuple):
    """What `open_engine` yields: the engine (handed the runtime's roles of the store), the store itself,
    which only wiring holds whole (a surface is handed it typed by the roles it uses: `ConsoleStore`,
    the Discord bot's `BotStore`), and the verbs made from both (`verbs_of`)."""

    engine: Engine
    store: SqlStore
    verbs: Verbs


def make_providers(settings: Settings, counter: TokenCounter) -> Providers:
    """One OpenAI client per provider: the default (OPENAI_*) and each ROUNDTABLE_PROVIDER_<NAME>_*."""
    from bot.llm.openai_llm import OpenAILLM  # here, not at the top: the verbs that need only the
    from bot.llm.providers import Providers  # database (migrate, copy, export) start without them

    def client(provider: str, api_key: str, base_url: str | None) -> OpenAILLM:
        return OpenAILLM(api_key=api_key, base_url=base_url, default_model=settings.model,
                         timeout=settings.llm_timeout, max_retries=settings.llm_max_retries, counter=counter,
                         provider=provider)

    clients = {DEFAULT_PROVIDER: client(DEFAULT_PROVIDER, settings.openai_api_key, settings.openai_base_url)}
    for provider in settings.providers:
        clients[provider.name] = client(provider.name, provider.api_key, provider.base_url)
    return Providers(clients, default_model=settings.model)


@contextlib.asynccontextmanager
async def open_engine(
    settings: Settings, make_surface: Callable[[Store], Surface], *, scope: str, label: str, db: str | None = None,
    strict_models: bool = False, before_store: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[Opened]:
    """The engine over the store, the OpenAI client and a surface built on the store; with the store
    and the verbs (`Opened`), which the surface is handed, never through the engine.

    `db` (--db) or else `settings.db_path` (ROUNDTABLE_DB) names the database: a
    SQLite file (its directory must exist) or a `postgresql://` URL. The model servers
    (every provider) are checked (reachable, key accepted, ROUNDTABLE_MODEL and
    ROUNDTABLE_SELECTOR_MODEL listed: a start-up error when `strict_models`, else a warning),
    then `before_store` (the bot's Discord token), all before the store is opened (a start
    that fails creates no database file) and before the engine exists, so nothing is taken
    in: problems raise `ConfigError` / `StoreError` (one line).
    `scope`: the groups this process runs (see `Engine`); `label` names the process
    to another one that finds a group taken ("console", "discord bot"). The MCP servers of
    `ROUNDTABLE_MCP_CONFIG` (`bot.llm.mcp_tools`) start with the engine (a malformed file is
    a `ConfigError`; a server that does not start, one ERROR line) and stop after it."""
    from bot.core.features.tools import ToolRegistry
    from bot.llm.endpoints import endpoint_checks
    from bot.llm.fetch_url import FetchTools
    from bot.llm.mcp_tools import McpServers
    from bot.llm.tokens import make_token_counter  # here, not at the top (see make_providers)

    register_settings(settings, {})  # (the command line also registered the environment's)
    register_url(db)
    servers = McpServers.from_environment({"ROUNDTABLE_MCP_CONFIG": settings.mcp_config or ""})
    counter = make_token_counter(allow_download=True)
    llm = make_providers(settings, counter)
    try:
        await llm.check({"ROUNDTABLE_MODEL": settings.model, "ROUNDTABLE_SELECTOR_MODEL": settings.selector_model},
                        strict=strict_models)
        if before_store is not None:
            await before_store()
        store = await open_store(db, settings.db_path)
        try:
            store.owner_label = label
            await servers.start()
            surface = make_surface(store)
            engine = Engine(store, llm, surface, counter, selector_model=settings.selector_model, scope=scope,
                            prices=settings.prices, shards=settings.shards if scope == "discord:" else None,
                            summary_model=settings.summary_model,
                            endpoint_checks=functools.partial(endpoint_checks, settings),
                            tool_checks=servers.checks,
                            tools=ToolRegistry([FetchTools(allow_private=settings.fetch_private),
                                                *servers.servers]))
            try:
                yield Opened(engine, store, verbs_of(engine, store))
            finally:
                await engine.close()
        finally:
            await servers.close()
            await store.close()
    finally:
        await llm.aclose()


async def open_store(db: str | None, configured: str) -> SqlStore:
    """The store at `db` (--db) or else `configured` (ROUNDTABLE_DB): a SQLite path or
    `sqlite:///path`, or a `postgresql://` URL (`storage.open_store` decides); a failure
    names the setting (never a password)."""
    import storage

    source = "--db" if db else "ROUNDTABLE_DB"
    try:
        return await storage.open_store(db or configured)
    except StoreError as exc:
        raise StoreError(f"{source}: {exc}") from None


async def copy(source: str, target: str) -> int:
    """`roundtable copy --from SOURCE --to TARGET`: every row into an empty database, verified."""
    from pathlib import Path

    import storage
    from bot.core.errors import InvalidInput, NotFound
    from storage.copy import copy_database

    if source == target:
        raise InvalidInput("--from and --to name the same database")
    if not storage.is_postgres(source) and not Path(storage.sqlite_path(source)).is_file():  # noqa: ASYNC240 - the CLI verb copy, before anything runs
        raise NotFound(f"--from {source} does not exist (no database there to copy)")
    stores: list[SqlStore] = []
    try:
        for option, where in (("--from", source), ("--to", target)):
            try:
                stores.append(await storage.open_store(where))
            except StoreError as exc:
                raise StoreError(f"{option}: {exc}") from None
        tables = await copy_database(stores[0], stores[1])
    finally:
        for store in stores:
            await store.close()
    counts = ", ".join(f"{t.table} {t.rows}" for t in tables)
    print(f"roundtable: copied {sum(t.rows for t in tables)} rows from {storage.describe(source)} to "
          f"{storage.describe(target)} ({counts}); row counts and checksums match")
    return 0


async def migrate(db: str | None, configured: str) -> int:
    """`roundtable migrate`: apply the migrations the database lacks; print its schema version."""
    import storage

    store = await open_store(db, configured)
    try:
        version = await store.diagnosis.schema_version()
        applied = len(store.migrations_applied)
    finally:
        await store.close()
    print(f"roundtable: {storage.describe(db or configured)} is at schema version {version} (applied {applied} now)")
    return 0


async def run_console(settings: Settings, *, db: str | None, group: str, person: str) -> int:
    """The console over stdin/stdout: on a terminal with a prompt, line editing, history beside
    the database, a typing status and colour (`bot.surfaces.console.terminal`). Ctrl-C cancels this
    coroutine: the engine's close records the run in flight as interrupted (asyncio.run then
    raises KeyboardInterrupt: exit 130); a second Ctrl-C meanwhile ends the process at once."""
    from bot.surfaces.console.surface import Console, ConsoleSurface
    from bot.surfaces.console.terminal import history_path, open_terminal

    with open_terminal(sys.stdin, sys.stdout, person=person, history=history_path(db or settings.db_path)) as term:
        surface = ConsoleSurface(term.screen)
        async with open_engine(settings, lambda store: surface, scope=f"console:{group}", label="console",
                               db=db, strict_models=True) as (engine, store, verbs):
            console = Console(engine, surface, store=store, verbs=verbs, person=person, group_name=group,
                              defaults=settings.new_groups, interactive=sys.stdin.isatty())
            term.read_line.interrupt = console.interrupts.interrupter(asyncio.get_running_loop())
            await console.run(term.read_line, greet=term.is_tty)
    return console.exit_code(sys.stderr)


async def run_discord(settings: Settings) -> int:
    from bot.surfaces.discord.client import run_bot

    return await run_bot(settings, open_engine, settings.new_groups)
