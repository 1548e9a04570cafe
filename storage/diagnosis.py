"""A database's diagnosis, read without changing it: schema version, the outbox, the leases.

`inspect(target)` reads it (`storage.report`) for `roundtable doctor` and `roundtable init`
without opening a store: opening one would create a missing SQLite file and apply migrations,
and a diagnosis must not change what it looks at. It also returns the enabled groups and the
stored webhooks, which the command line checks against Discord, and the enabled agents that
have a model of their own, which it checks against their model endpoints. (An open store reads the same
report with `store.diagnosis.database_report()`.)
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.core.errors import StoreError
from bot.core.models import Group, GroupSettings
from bot.core.rules.doctor import AgentModel, DatabaseReport
from bot.core.rules.secrets import mask_url, url_secrets
from storage import is_postgres, sqlite_path
from storage.migrations import MIGRATIONS
from storage.report import FIRST_READABLE, read_report
from storage.sql import Db

CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Inspection:
    """What `inspect` found: the report, and what the command line checks against Discord."""

    report: DatabaseReport
    groups: tuple[Group, ...] = ()  # the enabled groups (their settings are not read)
    webhooks: dict[str, tuple[str, str]] = field(default_factory=dict)  # channel id -> (webhook id, token)
    agents: tuple[AgentModel, ...] = ()  # the enabled agents of those groups that have a model of their own


async def inspect(target: str, now: float) -> Inspection:
    """The database at `target` (a SQLite path or `sqlite:///`, or a `postgresql://` URL), read
    only. A SQLite file that does not exist yet is reported as such (its directory must exist).
    Problems raise `StoreError`: one line naming the database, never a password."""
    if is_postgres(target):
        return await _inspect_postgres(target, now)
    path = Path(sqlite_path(target)).expanduser()  # noqa: ASYNC240 - CLI verbs doctor and init: stats, nothing else on the loop
    if path.is_dir():
        raise StoreError(f"{path} is a directory; name a file in it, e.g. {path / 'roundtable.db'}")
    if not path.exists():
        if not path.parent.is_dir():
            raise StoreError(f"the directory {path.parent} of {path} does not exist; create it first, "
                             "or choose another file")
        return Inspection(DatabaseReport(str(path), False, 0, MIGRATIONS[-1][0]))
    try:
        conn = sqlite3.connect(str(path), timeout=5, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the database {path}: {exc}") from None
    try:
        conn.execute("PRAGMA query_only = ON")
        from storage.db import LoopDb

        return await _read(LoopDb(conn), str(path), now, has_ledger=bool(conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = '_migrations'").fetchall()))
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the database {path}: {str(exc).splitlines()[0]}") from None
    finally:
        conn.close()


async def _read(db: Db, where: str, now: float, *, has_ledger: bool) -> Inspection:
    if not has_ledger:  # an empty database: the first start creates the tables
        return Inspection(DatabaseReport(where, True, 0, MIGRATIONS[-1][0]))
    report = await read_report(db, where, now)
    if report.version < FIRST_READABLE:
        return Inspection(report)
    groups = tuple(Group(int(r[0]), r[1], r[2], GroupSettings(), guild_id=r[3], channel_id=r[4],
                         parent_channel_id=r[5], paused=bool(r[6]), delivery_problem=r[7]) for r in await db.all(
        "SELECT id, key, name, guild_id, channel_id, parent_channel_id, paused, delivery_problem FROM groups"
        " WHERE enabled = 1 ORDER BY id"))
    webhooks = {r[0]: (r[1], r[2]) for r in await db.all("SELECT channel_id, webhook_id, token FROM webhooks")}
    agents = tuple(AgentModel(r[0], r[1], r[2]) for r in await db.all(
        "SELECT g.name, a.name, a.model FROM agents a JOIN groups g ON g.id = a.group_id WHERE g.enabled = 1"
        " AND a.enabled = 1 AND a.removed_at IS NULL AND a.model IS NOT NULL AND a.model <> ''"
        " ORDER BY g.id, a.position, a.id"))
    return Inspection(report, groups, webhooks, agents)


async def _inspect_postgres(url: str, now: float) -> Inspection:
    import asyncpg

    from storage.pg import PgDb, one_line

    where = mask_url(url)
    conn: Any = None
    try:
        conn = await asyncpg.connect(url, timeout=CONNECT_TIMEOUT)
        await conn.execute("SET default_transaction_read_only = on")
        has_ledger = await conn.fetchval("SELECT to_regclass('_migrations') IS NOT NULL")
        return await _read(PgDb(conn), where, now, has_ledger=bool(has_ledger))
    except (asyncpg.PostgresError, OSError, ValueError, TimeoutError, asyncpg.InterfaceError) as exc:
        raise StoreError(f"cannot read the database {where}: {one_line(exc, url_secrets(url))}") from None
    finally:
        if conn is not None:
            await conn.close()
