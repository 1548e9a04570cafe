"""`roundtable doctor`: check an existing set-up, one line per check, exit 0 only when every check passes.

    ✓ settings: .env read; every value is well-formed
    ✓ Discord token: the bot is Roundtable (id ..., application ...)
    ✓ Message Content intent: on (the bot can read what people write)
    ✓ #general webhook: 'Roundtable' exists and posts there
    ✗ #general permissions: the bot lacks Manage Webhooks; fix: give the bot's role ...
    ✓ database: roundtable.db is reachable, at schema version 9 (this version's)
    ...

In order: the settings, Discord (the token, the Message Content intent, then each
enabled Discord group's webhook, the bot's permissions in its channel and its
delivery problem), the database (schema version, the outbox, the leases), each
model endpoint. Nothing is changed: the database is read without opening it as a
store (no file created, no migration), Discord is asked over REST without
connecting to the gateway, the model servers are asked for their model lists.
A check that cannot run because an earlier one failed is left out.
"""
from __future__ import annotations

import os
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


def settings_check(env_file: str | None) -> tuple[Check, Settings | None]:
    """The settings file is read and every value in it is well-formed (missing keys are judged by
    the checks that need them)."""
    from bot.config import DEFAULT_ENV_FILE, load_env_file, load_settings
    from bot.masking import register_settings

    try:
        not_found = load_env_file(env_file)
        register_settings(None, os.environ)  # the file's secrets too: never in a line
        settings = load_settings(os.environ, need_discord=False, need_llm=False)
        register_settings(settings, {})
    except ConfigError as exc:
        return Check("settings", False, str(exc).rstrip(".")), None
    source = (f"no {DEFAULT_ENV_FILE} here, the environment only" if not_found
              else f"{env_file or DEFAULT_ENV_FILE} read")
    return Check("settings", True, f"{source}; every value is well-formed"), settings


async def run_doctor(env_file: str | None, db: str | None, say: Say) -> list[Check]:
    """Every check, each passed to `say` as soon as it is known."""
    checks: list[Check] = []

    def tell(found: Sequence[Check]) -> None:
        for check in found:
            checks.append(check)
            say(check)

    check, settings = settings_check(env_file)
    tell([check])
    if settings is None:
        return checks
    from storage.diagnosis import Inspection, inspect

    inspection: Inspection | None = None
    try:
        inspection = await inspect(db or settings.db_path, time.time())
        database = database_checks(inspection.report)
    except StoreError as exc:
        database = [Check("database", False, f"{'--db' if db else 'ROUNDTABLE_DB'}: {exc}",
                          "check the path or URL (--db, ROUNDTABLE_DB), or that the database server runs")]
    groups = inspection.groups if inspection else ()
    on_discord = [g for g in groups if g.key.startswith("discord:")]
    await discord_checks(settings, on_discord, inspection.webhooks if inspection else {}, tell)
    tell(database)
    tell([delivery_check(g) for g in groups if not g.key.startswith("discord:") and g.delivery_problem])
    from bot.adapters.endpoints import endpoint_checks

    tell(await endpoint_checks(settings))
    return checks


async def discord_checks(settings: Settings, groups: Sequence[Group], webhooks: dict[str, tuple[str, str]],
                         tell: Callable[[Sequence[Check]], None]) -> None:
    """The token and the intent, then each Discord group's webhook, permissions and delivery problem."""
    if not settings.discord_token:
        if groups:
            tell([Check("Discord token", False, f"DISCORD_TOKEN is not set, but the database has "
                                                f"{len(groups)} Discord group(s)",
                        "set DISCORD_TOKEN (roundtable init asks for it and checks it)")])
        else:
            tell([Check("Discord", True, "no DISCORD_TOKEN: a console-only set-up (roundtable init adds Discord)")])
        return
    from bot.adapters.discord.doctor import RestDoctor

    async with RestDoctor(settings) as rest:
        identity = await rest.identify()
        tell(identity)
        if not identity[0].ok:
            return
        if settings.discord_guild_id is not None:
            tell([await rest.guild_check(settings.discord_guild_id)])
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
    failed = sum(not c.ok for c in checks)
    print(f"{failed} of {len(checks)} checks failed." if failed else f"All {len(checks)} checks passed.")
    return 0 if all_passed(checks) else 1

