"""`roundtable doctor`: check an existing set-up, one line per check, exit 0 only when every check passes
(a `!` warning passes: the set-up works, but could work better).

    ✓ settings: .env read; every value is well-formed
    ✓ Discord token: the bot is Roundtable (id ..., application ...)
    ✓ Message Content intent: on (the bot can read what people write)
    ! DISCORD_GUILD_ID: not set: the slash commands are registered for every server, ...; fix: ...
    ✓ #general webhook: 'Roundtable' exists and posts there
    ✗ #general permissions: the bot lacks Manage Webhooks; fix: give the bot's role ...
    ✓ database: roundtable.db is reachable, at schema version 9 (this version's)
    ...

In order: the settings, Discord (the token, the Message Content intent, the server
of DISCORD_GUILD_ID, then each enabled Discord group's webhook, the bot's
permissions in its channel and its delivery problem), the database (schema
version, the outbox, the leases), each model endpoint, the agents' own models
(each enabled agent with a model of its own: its endpoint lists it), and each MCP
server of ROUNDTABLE_MCP_CONFIG (started, its tools listed, stopped). Nothing is
changed: the database is read without opening it as a store (no file created, no
migration), Discord is asked over REST without connecting to the gateway, the
model servers are asked for their model lists.
A check that cannot run because an earlier one failed is left out; a malformed
setting leaves out only the checks that need it (Discord's, the model endpoints').
"""
from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from bot.core.errors import ConfigError, StoreError
from bot.core.rules.doctor import Check, all_passed, database_checks, delivery_check

if TYPE_CHECKING:  # (not imported at run time: `roundtable doctor` starts fast)
    from bot.config import Settings
    from bot.core.models import Group

Say = Callable[[Check], None]
GUILD_UNSET = Check("DISCORD_GUILD_ID", True, "not set: the slash commands are registered for every server, which "
                                              "Discord can take up to an hour to show", "set it to your server's id "
                                              "for them at once there (roundtable init --discord-guild-id ID; "
                                              "Developer Mode > right-click the server > Copy Server ID)", warn=True)


# The settings each later check needs: a malformed one leaves that check out (the others run).
DISCORD_KEYS = ("DISCORD_TOKEN", "DISCORD_API_BASE_URL")
ENDPOINT_KEYS = ("OPENAI_", "ROUNDTABLE_PROVIDER_", "ROUNDTABLE_MODEL", "ROUNDTABLE_SELECTOR_MODEL")
OURS = ("ROUNDTABLE_", "OPENAI_", "DISCORD_")


def settings_check(env_file: str | None) -> tuple[Check, Settings | None, frozenset[str]]:
    """The settings file is read and every value in it is well-formed (missing keys are judged by
    the checks that need them). With malformed values, the settings without them (their defaults)
    and their keys, so that the checks that do not need them still run; None when the file cannot
    be read, or the rest does not parse either."""
    from bot.config import DEFAULT_ENV_FILE, load_env_file, load_settings
    from bot.masking import register_settings

    try:
        not_found = load_env_file(env_file)
    except ConfigError as exc:
        return Check("settings", False, str(exc).rstrip(".")), None, frozenset()
    register_settings(None, os.environ)  # the file's secrets too: never in a line
    env = dict(os.environ)
    try:
        settings = load_settings(env, need_discord=False, need_llm=False)
    except ConfigError as exc:
        problem = str(exc).rstrip(".")
        malformed = frozenset(k for k in env if k.startswith(OURS) and re.search(rf"\b{re.escape(k)}\b", problem))
        try:
            settings = load_settings({k: v for k, v in env.items() if k not in malformed}, need_discord=False,
                                     need_llm=False)
        except ConfigError:
            return Check("settings", False, problem), None, malformed
        register_settings(settings, {})
        left_out = [name for name, keys in (("Discord", DISCORD_KEYS), ("model endpoint", ENDPOINT_KEYS))
                    if any(k.startswith(keys) for k in malformed)]
        them = "it" if len(malformed) == 1 else "them"
        after = (f"; the {' and '.join(left_out)} checks need {them} and are left out, the others ran" if left_out
                 else f"; the other checks ran without {them}")
        return Check("settings", False, problem + after), settings, malformed
    register_settings(settings, {})
    source = (f"no {DEFAULT_ENV_FILE} here, the environment only" if not_found
              else f"{env_file or DEFAULT_ENV_FILE} read")
    return Check("settings", True, f"{source}; every value is well-formed"), settings, frozenset()


async def run_doctor(env_file: str | None, db: str | None, say: Say) -> list[Check]:
    """Every check, each passed to `say` as soon as it is known."""
    checks: list[Check] = []

    def tell(found: Sequence[Check]) -> None:
        for check in found:
            checks.append(check)
            say(check)

    check, settings, malformed = settings_check(env_file)
    tell([check])
    if settings is None:
        return checks
    from storage import is_postgres
    from storage.diagnosis import Inspection, inspect

    inspection: Inspection | None = None
    target = db or settings.db_path
    try:
        inspection = await inspect(target, time.time())
        database = database_checks(inspection.report)
    except StoreError as exc:
        fix = ("check the URL (--db, ROUNDTABLE_DB), that the PostgreSQL server runs and that it lets this user in"
               if is_postgres(target) else
               "point --db or ROUNDTABLE_DB at a SQLite file this user can read and write, in a directory that "
               "exists (a file not there yet is created by the first start)")
        database = [Check("database", False, f"{'--db' if db else 'ROUNDTABLE_DB'}: {exc}", fix)]
    groups = inspection.groups if inspection else ()
    on_discord = [g for g in groups if g.key.startswith("discord:")]
    if not malformed.intersection(DISCORD_KEYS):
        await discord_checks(settings, on_discord, inspection.webhooks if inspection else {}, tell,
                             guild_known="DISCORD_GUILD_ID" not in malformed)
    tell(database)
    tell([delivery_check(g) for g in groups if not g.key.startswith("discord:") and g.delivery_problem])
    if not any(k.startswith(ENDPOINT_KEYS) for k in malformed):
        from bot.llm.endpoints import agent_models_check, endpoint_checks

        tell(await endpoint_checks(settings))
        agents = inspection.agents if inspection else ()
        if agents:
            tell([await agent_models_check(settings, agents)])
    from bot.llm.mcp_tools import doctor_checks

    tell(await doctor_checks({"ROUNDTABLE_MCP_CONFIG": settings.mcp_config or ""}))
    return checks


async def discord_checks(settings: Settings, groups: Sequence[Group], webhooks: dict[str, tuple[str, str]],
                         tell: Callable[[Sequence[Check]], None], *, guild_known: bool = True) -> None:
    """The token and the intent, the server of DISCORD_GUILD_ID (a warning when unset), then each
    Discord group's webhook, permissions and delivery problem."""
    if not settings.discord_token:
        if groups:
            tell([Check("Discord token", False, f"DISCORD_TOKEN is not set, but the database has "
                                                f"{len(groups)} Discord group(s)",
                        "set DISCORD_TOKEN (roundtable init asks for it and checks it)")])
        else:
            tell([Check("Discord", True, "no DISCORD_TOKEN: a console-only set-up (roundtable init adds Discord)")])
        return
    from bot.surfaces.discord.doctor import RestDoctor

    async with RestDoctor(settings) as rest:
        identity = await rest.identify()
        tell(identity)
        if not identity[0].ok:
            return
        if settings.discord_guild_id is not None:
            tell([await rest.guild_check(settings.discord_guild_id)])
        elif guild_known:
            tell([GUILD_UNSET])
        for group in groups:
            tell([*await rest.groups([group], webhooks), delivery_check(group)])


def print_check(check: Check) -> None:
    from bot.core.rules.secrets import mask_error

    print(mask_error(check.line()), flush=True)


def main(env_file: str | None, db: str | None) -> int:
    import asyncio

    try:
        checks = asyncio.run(run_doctor(env_file, db, print_check))
    except KeyboardInterrupt:
        print("roundtable: doctor stopped", file=sys.stderr)
        return 130
    failed, warned = sum(not c.ok for c in checks), sum(c.warn for c in checks)
    print(f"{failed} of {len(checks)} checks failed." if failed else
          f"All {len(checks)} checks passed" + (f"; {warned} with a warning." if warned else "."))
    return 0 if all_passed(checks) else 1

