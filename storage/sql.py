"""What the store's SQL needs from a database: a connection wrapper (`Db`) and the few
fragments that differ between SQLite and PostgreSQL (`Dialect`).

The store's parts write their SQL once, with `?` placeholders (never a `?` inside a string
literal) and `ON CONFLICT ... DO NOTHING` / `DO UPDATE` (both databases accept them);
where the dialects part (a scalar maximum, JSON, index hints) they take a fragment
from the store's `Dialect` (`storage.access.Access.sql`).

SQL text is never built from values: a value is always a bound parameter. Where a statement's
text is assembled (an f-string), what goes in comes from code (a table or column name, an index,
a dialect's fragment, a condition written in the store, a run of `?`), and the line says so
(`# noqa: S608 (...)`: ruff's S608 flags every such line in storage/). The one exception, ints
written into PostgreSQL's lock statements, is `storage.pg_locks.lock_sql`'s to explain.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.core.errors import StoreError

Params = Sequence[Any]


class Row(Protocol):
    """A result row: by column name or position (sqlite3.Row and asyncpg.Record both are)."""

    def __getitem__(self, key: Any, /) -> Any: ...


class Db(Protocol):
    """One connection inside a store transaction (`_write`) or read (`_read`)."""

    async def one(self, sql: str, params: Params = ()) -> Row | None: ...

    async def all(self, sql: str, params: Params = ()) -> list[Row]: ...

    async def exec(self, sql: str, params: Params = ()) -> int:
        """Run a write statement; return the number of rows it changed."""
        ...

    async def insert(self, sql: str, params: Params = ()) -> int:
        """Run an INSERT into a table with an `id` column; return the new row's id."""
        ...

    async def exec_many(self, sql: str, rows: Sequence[Params]) -> None:
        """Run one write statement once per parameter row."""
        ...


@dataclass(frozen=True)
class Dialect:
    name: str
    greatest: str  # the scalar maximum of two values: greatest(a, b)
    is_distinct: str  # NULL-aware inequality
    index_hints: bool  # SQLite's INDEXED BY (PostgreSQL's planner has statistics)

    def indexed_by(self, index: str | None) -> str:
        return f" INDEXED BY {index}" if index and self.index_hints else ""

    def all_digits(self, column: str) -> str:
        """`column` is made of decimal digits only (or empty)."""
        if self.name == "sqlite":
            return f"{column} NOT GLOB '*[^0-9]*'"
        return f"{column} !~ '[^0-9]'"

    def tags_user(self, tags: str) -> str:
        """The tags JSON in column `tags` names the user id given as the next parameter."""
        if self.name == "sqlite":
            return f"EXISTS (SELECT 1 FROM json_each({tags}, '$.user_ids') WHERE json_each.value = ?)"  # noqa: S608 (tags: a column name from code)
        return f"(({tags})::jsonb -> 'user_ids') @> jsonb_build_array(CAST(? AS TEXT))"

    def tags_operators(self, tags: str) -> str:
        """The tags JSON in column `tags` tags every operator."""
        if self.name == "sqlite":
            return f"json_extract({tags}, '$.operators') = 1"
        return f"(({tags})::jsonb ->> 'operators') = 'true'"


SQLITE = Dialect(name="sqlite", greatest="MAX", is_distinct="IS NOT", index_hints=True)
POSTGRESQL = Dialect(name="postgresql", greatest="GREATEST", is_distinct="IS DISTINCT FROM", index_hints=False)


async def the_one(db: Db, sql: str, params: Params = ()) -> Row:
    """The row of a query that always has one (an aggregate, a row this transaction wrote)."""
    row = await db.one(sql, params)
    if row is None:
        raise StoreError("database error: a query that always returns a row returned none")
    return row


def numbered(sql: str) -> str:
    """`?` placeholders as PostgreSQL's `$1, $2, ...` (a `?` inside a quoted literal is kept)."""
    out: list[str] = []
    count = 0
    quote: str | None = None
    for char in sql:
        if quote is not None:
            if char == quote:
                quote = None
        elif char in ("'", '"'):
            quote = char
        elif char == "?":
            count += 1
            out.append(f"${count}")
            continue
        out.append(char)
    return "".join(out)
