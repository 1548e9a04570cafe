"""Where a benchmark (or a test: tests/fakes/databases.py) measures on PostgreSQL: whether the server
answers, and a throwaway schema of the given database."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


def unreachable(url: str, timeout: float) -> str | None:
    """None when the PostgreSQL server at `url` answers within `timeout` seconds; otherwise the first
    line of why not (call it outside an event loop)."""

    async def connect() -> None:
        import asyncpg

        conn = await asyncpg.connect(url, timeout=timeout)
        await conn.close()

    try:
        asyncio.run(connect())
    except Exception as exc:  # any failure means: no usable server; say why
        return (str(exc).strip() or type(exc).__name__).splitlines()[0]
    return None


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
