"""The one list of migrations, rendered for each database: both end with the same tables,
columns (kind, nullability, default), keys and indexes; released migrations never change;
the words a migration leaves to the database are rendered as `storage.migrations` says."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from storage.copy import IDENTITY_TABLES
from storage.migrations import DIALECTS, MIGRATIONS, Step, render, split_statements
from tests.fakes.databases import PostgresPlace, SqlitePlace

# What each database's column types mean here: one kind per type, so a type the mapping does not
# know fails the comparison instead of passing unexamined.
KINDS = {"INTEGER": "int", "REAL": "real", "TEXT": "text",
         "bigint": "int", "double precision": "real", "text": "text"}


@dataclass
class Schema:
    """A database's schema in terms both databases share."""

    # table -> its columns in order: (name, kind, NOT NULL, default)
    columns: dict[str, list[tuple[str, str, bool, str | None]]] = field(default_factory=dict)
    primary_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unique: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    foreign_keys: set[tuple[str, tuple[str, ...], str, tuple[str, ...]]] = field(default_factory=set)
    checks: dict[str, int] = field(default_factory=dict)  # table -> how many CHECK constraints
    indexes: dict[str, tuple[str, tuple[str, ...], bool, str]] = field(default_factory=dict)  # table exprs unique where


def expression(text: str | None) -> str:
    """An index column or predicate, or a default, as both databases can say it: PostgreSQL's
    casts (`'running'::text`) and parentheses gone, no spaces, lower case."""
    if text is None:
        return ""
    text = re.sub(r"::[a-z ]+", "", text.lower())
    return re.sub(r"[\s()]", "", text)


def split_columns(text: str) -> tuple[str, ...]:
    """`group_id, lower(name)` -> ('group_id', 'lower(name)'): commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return tuple(p.strip() for p in [*parts, current])


async def sqlite_schema(place: SqlitePlace) -> tuple[Schema, set[tuple[str, str]]]:
    """The schema of a SQLite file, and its rowid aliases (INTEGER PRIMARY KEY: ids it assigns)."""
    schema, aliases = Schema(), set()
    tables = await place.fetch("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name")
    for table, sql in tables:
        rows = await place.fetch('SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_xinfo(?)'
                                 " ORDER BY cid", (table,))
        # A key column counts as NOT NULL, as PostgreSQL makes it (SQLite leaves a rowid table's
        # non-integer key nullable, an old quirk; the store never writes NULL there).
        schema.columns[table] = [(name, KINDS.get(kind, kind), bool(notnull or pk), expression(default) or None)
                                 for name, kind, notnull, default, pk in rows]
        keys = sorted((pk, name, kind) for name, kind, _, _, pk in rows if pk)
        schema.primary_keys[table] = tuple(name for _, name, _ in keys)
        if len(keys) == 1 and keys[0][2] == "INTEGER" and "WITHOUT ROWID" not in sql.upper():
            aliases.add((table, keys[0][1]))
        schema.checks[table] = sql.upper().count("CHECK (")
        for index, origin in await place.fetch("SELECT name, origin FROM pragma_index_list(?)", (table,)):
            if origin == "u":
                names = await place.fetch("SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,))
                schema.unique.add((table, tuple(n for (n,) in names)))
        by_id: dict[int, tuple[str, list[str], list[str]]] = {}
        for fk_id, _, target, source, to in await place.fetch(
                'SELECT id, seq, "table", "from", "to" FROM pragma_foreign_key_list(?) ORDER BY id, seq', (table,)):
            by_id.setdefault(fk_id, (target, [], []))
            by_id[fk_id][1].append(source)
            by_id[fk_id][2].append(to)
        schema.foreign_keys |= {(table, tuple(s), target, tuple(t)) for target, s, t in by_id.values()}
    for name, table, sql in await place.fetch(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"):
        head, _, where = re.sub(r"\s+", " ", sql).partition(" WHERE ")
        columns = split_columns(head[head.index("(") + 1:head.rindex(")")])
        unique = head.upper().startswith("CREATE UNIQUE")
        schema.indexes[name] = (table, tuple(expression(c) for c in columns), unique, expression(where))
    return schema, aliases


PG_COLUMNS = """
SELECT table_name, column_name, data_type, is_nullable = 'NO', column_default, is_identity = 'YES'
FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position
"""
# Each constraint with its columns (and the referenced table's), in key order.
PG_CONSTRAINTS = """
SELECT c.relname, k.contype,
       ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, i)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.i),
       r.relname,
       ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY u(n, i)
             JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.i)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid LEFT JOIN pg_class r ON r.oid = k.confrelid
WHERE k.connamespace = current_schema()::regnamespace
"""
# The indexes made by CREATE INDEX (not those behind a primary key or a unique constraint).
PG_INDEXES = """
SELECT i.relname, t.relname, x.indisunique, pg_get_expr(x.indpred, x.indrelid),
       ARRAY(SELECT pg_get_indexdef(x.indexrelid, k, true) FROM generate_series(1, x.indnatts) k ORDER BY k)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
WHERE t.relnamespace = current_schema()::regnamespace
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid)
"""


async def pg_schema(place: PostgresPlace) -> tuple[Schema, set[tuple[str, str]]]:
    """The schema of a PostgreSQL schema, and its identity columns."""
    schema, identities = Schema(), set()
    for table, name, kind, notnull, default, identity in await place.fetch(PG_COLUMNS):
        schema.columns.setdefault(table, []).append((name, KINDS.get(kind, kind), notnull, expression(default) or None))
        schema.checks.setdefault(table, 0)
        if identity:
            identities.add((table, name))
    for table, kind, columns, target, target_columns in await place.fetch(PG_CONSTRAINTS):
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "p":
            schema.primary_keys[table] = tuple(columns)
        elif kind == "u":
            schema.unique.add((table, tuple(columns)))
        elif kind == "f":
            schema.foreign_keys.add((table, tuple(columns), target, tuple(target_columns)))
        elif kind == "c":
            schema.checks[table] += 1
    for table in schema.columns:
        schema.primary_keys.setdefault(table, ())
    for name, table, unique, where, columns in await place.fetch(PG_INDEXES):
        schema.indexes[name] = (table, tuple(expression(c) for c in columns), unique, expression(where))
    return schema, identities


async def test_both_databases_end_with_the_same_tables_columns_keys_and_indexes(pg: PostgresPlace, tmp_path) -> None:
    sqlite = SqlitePlace(tmp_path / "rt.db")
    await (await sqlite.open()).close()
    await (await pg.open()).close()
    (lite, aliases), (postgres, identities) = await sqlite_schema(sqlite), await pg_schema(pg)
    # Not vacuous: the tables, a partial index on an expression, a composite key and reference are there.
    assert len(lite.columns) >= 22 and "context_summaries" in lite.columns and "tool_calls" in lite.columns
    assert lite.indexes["agents_roster_name"] == ("agents", ("group_id", "lowername"), True, "removed_atisnull")
    assert ("decisions", ("group_id", "seq"), "messages", ("group_id", "seq")) in lite.foreign_keys
    assert lite.checks["schedules"] == 1 and ("groups", ("key",)) in lite.unique
    for part in ("columns", "primary_keys", "unique", "foreign_keys", "checks", "indexes"):
        assert getattr(postgres, part) == getattr(lite, part), part
    # PostgreSQL assigns ids where SQLite does (its rowid aliases; leases and the ledger take given
    # ids on both), and `roundtable copy` moves the identity of each table that has one.
    assert identities == {(table, "id") for table in IDENTITY_TABLES}
    assert identities <= aliases and aliases - identities == {("leases", "group_id"), ("_migrations", "id")}


class Recorder:
    """A `MigrationDb` that records the SQL a step in Python runs (on a database with no rows)."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.sql: list[str] = []

    async def script(self, sql: str) -> None:
        self.sql.append(render(sql, self.dialect))

    async def all(self, sql: str, params: Any = ()) -> list[Any]:
        self.sql.append(sql + ";")
        return []

    async def exec(self, sql: str, params: Any = ()) -> None:
        self.sql.append(sql + ";")

    async def exec_many(self, sql: str, rows: Any) -> None:
        self.sql.append(sql + ";")


async def rendered(step: Step, dialect: str) -> str:
    if isinstance(step, str):
        return render(step, dialect)
    recorder = Recorder(dialect)
    await step(recorder)
    return "\n".join(recorder.sql)


def fingerprint(sqlite: str, postgresql: str) -> str:
    """What a migration does on both databases, comments and spacing aside."""
    statements = [" ".join(s.split()) for sql in (sqlite, postgresql) for s in split_statements(sql)]
    return hashlib.sha256("\n".join(statements).encode()).hexdigest()[:16]


# Released migrations: a database that applied one never applies it again, so changing one would
# leave existing databases with another schema than new ones. A new migration gets its line here.
RELEASED = {
    1: "ee186e534cd05cdb",
    2: "eeab9d20c3e315a1",
    3: "d4aba92463f56a41",
    4: "be44bd7cbb249546",
    5: "1152cb3b5a06231a",
    6: "0ebe53bcaf8713e7",
    7: "1833ddfe8f561be2",
    8: "45470ddf3cd6b092",
    9: "a4d928839d7370d0",
    10: "4618d191c42970c2",
    11: "e5648fb684c6daab",
    12: "55035f9b0cd8fe88",
    13: "f85da07597dfd600",
    14: "e2365c769eae6834",
    15: "f938c329f0d47254",
    16: "9d24657416eba733",
    17: "f97cf4cbafc6174d",
    18: "16fb4818f9d02ec8",
    19: "6eb6dba92dc2a5ef",
    20: "78fdea4035f0d78b",
}


async def test_released_migrations_are_never_changed() -> None:
    found = {mid: fingerprint(await rendered(step, "sqlite"), await rendered(step, "postgresql"))
             for mid, _, step in MIGRATIONS}
    lines = "".join(f'    {mid}: "{value}",\n' for mid, value in found.items())
    assert found == RELEASED, f"a released migration changed, or a new one needs its line in RELEASED:\n{lines}"


@pytest.mark.parametrize("sql, sqlite, postgresql", [
    ("id {id}", "id INTEGER PRIMARY KEY", "id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    ("n {int}, x {real}, name {text_c}", 'n INTEGER, x REAL, name TEXT',
     'n BIGINT, x DOUBLE PRECISION, name TEXT COLLATE "C"'),
    (") {sqlite: WITHOUT ROWID};", ") WITHOUT ROWID;", ") ;"),
    ("{postgresql: ALTER TABLE t ADD COLUMN c {int};}", "", "ALTER TABLE t ADD COLUMN c BIGINT;"),
    ("tags TEXT NOT NULL DEFAULT '{}'", "tags TEXT NOT NULL DEFAULT '{}'", "tags TEXT NOT NULL DEFAULT '{}'"),
])
def test_words_are_rendered_per_database(sql: str, sqlite: str, postgresql: str) -> None:
    assert (render(sql, "sqlite"), render(sql, "postgresql")) == (sqlite, postgresql)


@pytest.mark.parametrize("sql, dialect, error", [
    ("n {integer}", "sqlite", "unknown word in migration SQL: '{integer}'"),
    ("{mysql: ENGINE=InnoDB}", "postgresql", "unknown dialect in migration SQL"),
    ("n {int}", "oracle", "unknown dialect 'oracle'"),
])
def test_a_word_or_dialect_not_known_is_an_error(sql: str, dialect: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        render(sql, dialect)


async def test_every_migration_renders_for_both_databases() -> None:
    for mid, _, step in MIGRATIONS:
        for dialect in DIALECTS:
            sql = await rendered(step, dialect)
            assert re.search(r"\{\w", sql) is None, (mid, dialect)
            assert split_statements(sql), (mid, dialect)
