"""Where a benchmark (or a test: tests/fakes/databases.py) measures on PostgreSQL: a throwaway schema of the
given database."""
from __future__ import annotations

import contextlib
from typing import AsyncIterator


def with_schema(url: str, schema: str) -> str:
    """`url` with its connections' search_path set to `schema` (what `open_store` takes)."""
    return f"{url}{'&' if '?' in url else '?'}search_path={schema}"


@contextlib.asynccontextmanager
async def scratch_schema(url: str, schema: str) -> AsyncIterator[str]:
    """Create `schema` in the database at `url`, yield the URL that opens a store in it, drop it afterwards."""
    import asyncpg

    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE SCHEMA {schema}")
        try:
            yield with_schema(url, schema)
        finally:
            await admin.execute(f"DROP SCHEMA {schema} CASCADE")
    finally:
        await admin.close()
