"""The numbered migrations: a fresh file, a second application, a reopened file."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import aiosqlite
import pytest

from bot.core.errors import StoreError
from bot.core.models import GroupSettings, NewMessage
from storage import MIGRATIONS, SqliteStore, apply_migrations, open_db
from storage.migrations import MigrationDb, split_statements

TABLES = {
    "groups", "agents", "messages", "message_external_ids", "decisions",
    "episodes", "runs", "read_cursors", "webhooks", "agent_notes", "schedules", "_migrations",
}


def table_names(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name for (name,) in rows}


async def test_fresh_database_gets_every_table_and_a_row_per_migration(tmp_path: Path) -> None:
    path = tmp_path / "rt.db"
    conn = await open_db(path)
    try:
        rows = await conn.execute_fetchall("SELECT id, name, applied_at FROM _migrations ORDER BY id")
        assert [(r["id"], r["name"]) for r in rows] == [(mid, name) for mid, name, _ in MIGRATIONS]
        assert all(r["applied_at"] > 0 for r in rows)
        pragmas = {p: next(iter(await conn.execute_fetchall(f"PRAGMA {p}")))[0]
                   for p in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")}
        assert pragmas == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 5000, "synchronous": 1}
    finally:
        await conn.close()
    assert table_names(path) >= TABLES


async def test_applying_again_is_a_no_op(tmp_path: Path) -> None:
    conn = await open_db(tmp_path / "rt.db")
    try:
        before = await conn.execute_fetchall("SELECT id, applied_at FROM _migrations")
        assert await apply_migrations(conn) == []
        after = await conn.execute_fetchall("SELECT id, applied_at FROM _migrations")
        assert [tuple(r) for r in after] == [tuple(r) for r in before]
    finally:
        await conn.close()


async def test_apply_returns_what_it_applied_and_later_migrations_run_once(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "rt.db", isolation_level=None) as conn:
        assert await apply_migrations(conn) == [mid for mid, _, _ in MIGRATIONS]
        calls: list[str] = []

        async def add_column(db: MigrationDb) -> None:
            calls.append(db.dialect)
            await db.script("ALTER TABLE webhooks ADD COLUMN note TEXT;")

        extended = [*MIGRATIONS, (900, "webhook note", add_column),
                    (901, "webhook count", "ALTER TABLE webhooks ADD COLUMN uses {int} NOT NULL DEFAULT 0;")]
        assert await apply_migrations(conn, extended) == [900, 901]
        assert await apply_migrations(conn, extended) == []
        assert calls == ["sqlite"]
        columns = await conn.execute_fetchall("SELECT name, type FROM pragma_table_info('webhooks')")
        assert [tuple(c) for c in columns][-2:] == [("note", "TEXT"), ("uses", "INTEGER")]


async def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "rt.db", isolation_level=None) as conn:
        await apply_migrations(conn)
        broken = [*MIGRATIONS, (900, "broken", "CREATE TABLE half (x); SELECT nope FROM nowhere;")]
        with pytest.raises(sqlite3.OperationalError):
            await apply_migrations(conn, broken)
        names = {r[0] for r in await conn.execute_fetchall("SELECT name FROM sqlite_master")}
        assert "half" not in names
        assert [r[0] for r in await conn.execute_fetchall("SELECT id FROM _migrations")] == [m[0] for m in MIGRATIONS]


async def test_a_file_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rt.db"
    await (await open_db(path)).close()
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO _migrations (id, name, applied_at) VALUES (999, 'future', 0)")
    with pytest.raises(StoreError, match="newer version"):
        await open_db(path)


async def test_reopening_an_existing_file_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "rt.db"
    async with await SqliteStore.open(path) as store:
        group = await store.groups.create_group("g", "general", GroupSettings(max_agent_turns=5))
        await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
    async with await SqliteStore.open(path) as store:
        reopened = await store.groups.get_group(group.id)
        assert reopened.settings.max_agent_turns == 5
        assert [a.name for a in await store.roster.list_agents(group.id)] == ["planner"]


@pytest.mark.parametrize(
    "make_bad_path, reason",
    [
        (lambda tmp: (tmp / "junk.db", b"this is not a database" * 100), "not a database"),
        (lambda tmp: (tmp / "file" / "rt.db", None), ""),
    ],
    ids=["not-a-database", "parent-is-a-file"],
)
async def test_an_unusable_path_is_one_store_error_naming_it(tmp_path: Path, make_bad_path, reason) -> None:
    path, junk = make_bad_path(tmp_path)
    if junk is not None:
        path.write_bytes(junk)
    else:
        (tmp_path / "file").write_text("a file where a directory should be")
    with pytest.raises(StoreError) as info:
        await open_db(path)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    assert reason in message


def test_split_statements_keeps_whole_statements() -> None:
    script = "-- a comment\nCREATE TABLE a (x TEXT DEFAULT ';');\n\nCREATE INDEX i ON a(x);\n"
    assert split_statements(script) == ["CREATE TABLE a (x TEXT DEFAULT ';');", "CREATE INDEX i ON a(x);"]


async def test_running_token_sums_are_filled_for_rows_written_before_migration_4(tmp_path: Path) -> None:
    """A file written by a version without migration 4: its rows get their running sums, and rows
    appended afterwards continue them."""
    path = tmp_path / "old.db"
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        await apply_migrations(conn, [m for m in MIGRATIONS if m[0] < 4])
        await conn.execute("INSERT INTO groups (id, key, name, created_at, latest_seq) VALUES (1, 'k', 'g', 0, 3)")
        for seq, tokens in ((1, 10), (2, 0), (3, 5)):
            await conn.execute("INSERT INTO messages (group_id, seq, author_type, author_name, text, token_count,"
                               " created_at) VALUES (1, ?, 'user', 'a', 't', ?, 0)", (seq, tokens))
    async with await SqliteStore.open(path) as store:
        rows = await store.thread.messages(1)
        assert [m.tokens_before for m in rows] == [0, 11, 13]  # costs: 10+1, max(0,1)+1, 5+1
        assert await store.thread.thread_tokens(1, through=3) == 19
        assert await store.thread.first_seq_at(1, tokens=12) == 3
        added, _ = await store.thread.append_user_message(1, NewMessage("user", "a", "more", token_count=3))
        assert added.seq == 4 and added.tokens_before == 19
        assert await store.thread.thread_tokens(1, through=4) == 23


async def test_migration_6_gives_agents_memory_off_and_old_runs_no_memory_verdict(tmp_path: Path) -> None:
    """A file written before agent memory: its agents have memory off and no notes, its runs
    memory_skipped NULL; notes are kept per agent afterwards, and cleared per agent."""
    path = tmp_path / "old.db"
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        await apply_migrations(conn, [m for m in MIGRATIONS if m[0] < 6])
        await conn.execute("INSERT INTO groups (id, key, name, created_at) VALUES (1, 'k', 'g', 0)")
        for agent_id in (1, 2):
            await conn.execute("INSERT INTO agents (id, group_id, name, created_at) VALUES (?, 1, ?, 0)",
                               (agent_id, f"a{agent_id}"))
        await conn.execute("INSERT INTO runs (id, group_id, agent_id, kind, snapshot_seq, status, started_at)"
                           " VALUES (1, 1, 1, 'group', 0, 'posted', 0)")
    async with await SqliteStore.open(path) as store:
        assert [a.memory for a in await store.roster.list_agents(1)] == [False, False]
        assert (await store.record.runs_by_id([1]))[1].memory_skipped is None
        assert (await store.roster.update_agent(1, memory=True)).memory is True
        for text in ("first", "second", "third"):
            await store.notes.add_note(1, text)
        await store.notes.add_note(2, "other agent")
        assert [n.text for n in await store.notes.notes(1)] == ["first", "second", "third"]
        assert [n.text for n in await store.notes.notes(1, limit=2)] == ["second", "third"]  # the newest, oldest first
        assert await store.notes.note_count(1) == 3
        assert await store.notes.clear_notes(1) == 3
        assert await store.notes.notes(1) == [] and await store.notes.note_count(2) == 1
