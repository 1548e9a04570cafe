"""`roundtable copy`: every row of one database into another, empty one (SQLite -> PostgreSQL to
move a deployment; any direction works), verified afterwards by row counts and checksums.

The destination is written in one transaction (nothing of a failed copy remains), table by
table in foreign-key order, `groups.episode_id` set once the episodes exist (the two refer to
each other). Leases and taken interactions are not copied: they belong to the processes of the old
database. The
migration ledger is not copied either: the destination has its own, at the same version (both
are migrated when opened). Identity sequences on PostgreSQL continue after the copied ids.

The checksum of a table is the sum (mod 2^128) of a SHA-256 of each row's canonical text
(columns by name; numbers compared by value, so SQLite's 0 and PostgreSQL's 0.0 agree), read
back from each database after the copy: independent of row order and of the database engine.
"""
from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.errors import StoreError
from storage.sql import Db
from storage.store import SqlStore

log = logging.getLogger(__name__)

PAGE = 2000
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")  # the column names the migrations create

# (table, primary key): the order rows are written in (foreign keys first).
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("groups", ("id",)),
    ("agents", ("id",)),
    ("episodes", ("id",)),
    ("runs", ("id",)),
    ("messages", ("group_id", "seq")),
    ("message_external_ids", ("external_id",)),
    ("message_versions", ("group_id", "seq", "version")),
    ("decisions", ("group_id", "seq")),
    ("read_cursors", ("group_id", "user_id")),
    ("webhooks", ("channel_id",)),
    ("person_names", ("scope", "name_key")),
    ("summaries", ("group_id", "after_seq", "through_seq")),
    ("context_summaries", ("group_id", "through_seq")),
    ("agent_notes", ("id",)),
    ("schedules", ("id",)),
    ("model_calls", ("id",)),
    ("drafts", ("id",)),
    ("task_breaks", ("group_id", "after_seq")),
    ("tool_grants", ("agent_id", "pattern")),
    ("tool_calls", ("id",)),
)
NOT_COPIED = ("leases", "interactions", "_migrations")
IDENTITY_TABLES = ("groups", "agents", "episodes", "runs", "agent_notes", "schedules", "model_calls", "drafts",
                   "tool_calls")


@dataclass(frozen=True)
class TableCopy:
    table: str
    rows: int
    checksum: str


async def columns(db: Db, dialect: str, table: str) -> dict[str, str]:
    """Column name -> its type's family ('text', 'int', 'real'), in table order. `table` is a name from
    code (`TABLES`); a column whose name is not a plain identifier is `StoreError`."""
    if dialect == "sqlite":
        rows = await db.all(f"PRAGMA table_info({table})")  # (a PRAGMA takes no parameter; a name from code)
        kinds = {str(r[1]): str(r[2]).upper() for r in rows}
    else:
        rows = await db.all(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position", (table,))
        kinds = {str(r[0]): str(r[1]).upper() for r in rows}
    odd = [name for name in kinds if not _PLAIN_NAME.fullmatch(name)]
    if odd:  # names go into the copy's SQL text: only the plain names the migrations give
        raise StoreError(f"table {table} has a column named {odd[0]!r}; a copy takes plain names only")
    return {name: "int" if "INT" in kind else "real" if kind in ("REAL", "DOUBLE PRECISION") else "text"
            for name, kind in kinds.items()}


def _canonical(value: Any) -> str:
    if value is None:
        return "N"
    if isinstance(value, (int, float)):
        number = float(value)
        return f"n{int(number)}" if number.is_integer() and abs(number) < 2**63 else f"n{number!r}"
    if isinstance(value, bytes):
        return "b" + value.hex()
    return "s" + str(value).replace("\\", "\\\\").replace("|", "\\|")


def row_digest(names: Sequence[str], row: Sequence[Any]) -> int:
    text = "|".join(f"{name}={_canonical(value)}" for name, value in sorted(zip(names, row)))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "big")


async def _pages(store: SqlStore, table: str, key: tuple[str, ...], names: Sequence[str]
                 ) -> AsyncIterator[list[tuple[Any, ...]]]:
    """The table's rows in primary-key order, a page at a time (keyset paging)."""
    select = ", ".join(names)
    order = ", ".join(key)
    positions = [names.index(k) for k in key]
    last: tuple[Any, ...] | None = None
    while True:
        where, params = "", []
        if last is not None:
            where = f" WHERE ({order}) > ({', '.join('?' * len(key))})"
            params = list(last)
        async with store._read() as db:
            rows = [tuple(r[i] for i in range(len(names))) for r in await db.all(
                f"SELECT {select} FROM {table}{where} ORDER BY {order} LIMIT ?", [*params, PAGE])]  # noqa: S608 (names from TABLES and the checked catalog; values bound)
        if not rows:
            return
        yield rows
        last = tuple(rows[-1][p] for p in positions)


def _coerce(kind: str) -> Callable[[Any], Any]:
    def to(value: Any) -> Any:
        if value is None:
            return None
        if kind == "int":
            return int(value)
        if kind == "real":
            return float(value)
        return value if isinstance(value, str) else str(value)
    return to


async def table_sums(store: SqlStore) -> dict[str, tuple[int, str]]:
    """Table -> (rows, checksum) of every copied table."""
    dialect = store._sql.name
    out: dict[str, tuple[int, str]] = {}
    for table, key in TABLES:
        async with store._read() as db:
            names = list(await columns(db, dialect, table))
        count, total = 0, 0
        async for page in _pages(store, table, key, names):
            count += len(page)
            total = (total + sum(row_digest(names, row) for row in page)) % 2**128
        out[table] = (count, f"{total:032x}")
    return out


async def copy_database(source: SqlStore, target: SqlStore) -> list[TableCopy]:
    """Copy every row of `source` into the empty `target`, then compare both; return what each
    table holds. StoreError when the target holds rows, or when the comparison fails."""
    await _check_empty(target)
    source_columns, target_columns = await _same_columns(source, target)
    episodes: list[tuple[Any, Any]] = []
    async with target._write() as db:  # every table: alone
        for table, key in TABLES:
            await _copy_table(db, source, table, key, list(source_columns[table]), target_columns[table], episodes)
            if table == "episodes" and episodes:
                await db.exec_many("UPDATE groups SET episode_id = ? WHERE id = ?", episodes)
        if target._sql.name == "postgresql":
            for table in IDENTITY_TABLES:
                await db.exec(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), COALESCE(MAX(id), 1),"  # noqa: S608 (table: from IDENTITY_TABLES)
                              f" MAX(id) IS NOT NULL) FROM {table}")
    after = await _compared(source, target)
    log.info("copied %d rows", sum(n for n, _ in after.values()))
    return [TableCopy(t, *after[t]) for t, _ in TABLES]


async def _check_empty(target: SqlStore) -> None:
    """StoreError when any table of `target` holds a row."""
    async with target._read() as db:
        for table, _ in TABLES:
            row = await db.one(f"SELECT COUNT(*) FROM {table}")  # noqa: S608 (table: from TABLES)
            if row is not None and int(row[0]):
                raise StoreError(f"the destination already holds rows (table {table}); copy into an empty database")


Columns = dict[str, dict[str, str]]  # table -> its columns (name -> kind)


async def _same_columns(source: SqlStore, target: SqlStore) -> tuple[Columns, Columns]:
    """Each table's columns (name: kind) in `source` and in `target`; StoreError when they differ."""
    async with source._read() as db:
        source_columns = {t: await columns(db, source._sql.name, t) for t, _ in TABLES}
    async with target._read() as db:
        target_columns = {t: await columns(db, target._sql.name, t) for t, _ in TABLES}
    for table, _ in TABLES:
        if set(source_columns[table]) != set(target_columns[table]):
            raise StoreError(f"table {table} has other columns in the destination; are both at one schema version?")
    return source_columns, target_columns


async def _copy_table(db: Db, source: SqlStore, table: str, key: tuple[str, ...], names: list[str],
                      kinds: dict[str, str], episodes: list[tuple[Any, Any]]) -> None:
    """Insert `source`'s rows of `table` through `db`, a page at a time, each value as the target's
    column kind wants it; a group's episode is left out, added to `episodes` (set once they exist)."""
    coerce = [_coerce(kinds[n]) for n in names]
    episode_at = names.index("episode_id") if table == "groups" else -1
    insert = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"  # noqa: S608 (names from TABLES and the checked catalog; values bound)
    async for page in _pages(source, table, key, names):
        rows = []
        for row in page:
            values = [c(v) for c, v in zip(coerce, row)]
            if episode_at >= 0 and values[episode_at] is not None:  # set once episodes exist
                episodes.append((values[episode_at], values[0]))
                values[episode_at] = None
            rows.append(values)
        await db.exec_many(insert, rows)


async def _compared(source: SqlStore, target: SqlStore) -> dict[str, tuple[int, str]]:
    """Each table's rows and checksum in `target`; StoreError when they differ from `source`'s."""
    before, after = await table_sums(source), await table_sums(target)
    for table, _ in TABLES:
        if before[table] != after[table]:
            raise StoreError(f"table {table} differs after the copy: {before[table][0]} rows (checksum "
                             f"{before[table][1]}) in the source, {after[table][0]} ({after[table][1]}) in the copy")
    return after
