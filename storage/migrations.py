"""The schema, as an ordered registry of numbered migrations.

Each migration runs once, in its own `BEGIN IMMEDIATE` transaction, and is
recorded in `_migrations` with the time it was applied, so opening a file
twice (or from two processes at once) applies nothing the second time. A
step is either an SQL script (split into statements here, because
`executescript` would commit behind our back) or an async function taking
the connection. Never edit a released migration: append a new one.
"""
from __future__ import annotations

import logging
import sqlite3
import time
from typing import Awaitable, Callable, Union

import aiosqlite

from bot.core.errors import StoreError
from bot.core.models import token_cost

log = logging.getLogger(__name__)

Step = Union[str, Callable[[aiosqlite.Connection], Awaitable[None]]]

M001_CREATE_TABLES = """
CREATE TABLE groups (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    guild_id TEXT,
    channel_id TEXT,
    parent_channel_id TEXT,
    setup_message_id TEXT,
    settings_json TEXT NOT NULL DEFAULT '{}',
    enabled INTEGER NOT NULL DEFAULT 1,
    paused INTEGER NOT NULL DEFAULT 0,
    latest_seq INTEGER NOT NULL DEFAULT 0,
    agent_streak INTEGER NOT NULL DEFAULT 0,
    episode_id INTEGER REFERENCES episodes(id),
    routed_through INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX groups_guild ON groups(guild_id);

CREATE TABLE agents (
    id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL REFERENCES groups(id),
    name TEXT NOT NULL,
    role TEXT NOT NULL DEFAULT '',
    system_prompt TEXT NOT NULL DEFAULT '',
    model TEXT,
    avatar_url TEXT,
    enabled INTEGER NOT NULL DEFAULT 1,
    position INTEGER NOT NULL DEFAULT 0,
    delivered_through INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    removed_at REAL
);
-- lower() folds ASCII only; the store also compares str.casefold() first.
CREATE UNIQUE INDEX agents_roster_name ON agents(group_id, lower(name))
    WHERE removed_at IS NULL;

CREATE TABLE episodes (
    id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL REFERENCES groups(id),
    task_seq INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'running',
    agent_turns INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    started_at REAL NOT NULL,
    ended_at REAL
);
CREATE INDEX episodes_running ON episodes(group_id) WHERE status = 'running';

CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL REFERENCES groups(id),
    agent_id INTEGER NOT NULL REFERENCES agents(id),
    kind TEXT NOT NULL,
    snapshot_seq INTEGER NOT NULL,
    episode_id INTEGER REFERENCES episodes(id),
    status TEXT NOT NULL DEFAULT 'running',
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    estimated INTEGER NOT NULL DEFAULT 0,
    selector_prompt_tokens INTEGER NOT NULL DEFAULT 0,
    selector_completion_tokens INTEGER NOT NULL DEFAULT 0,
    selector_cached_tokens INTEGER NOT NULL DEFAULT 0,
    selector_estimated INTEGER NOT NULL DEFAULT 0,
    posted_seq INTEGER,
    error TEXT,
    started_at REAL NOT NULL,
    finished_at REAL
);
CREATE INDEX runs_group_started ON runs(group_id, started_at);
CREATE INDEX runs_running ON runs(status) WHERE status = 'running';

CREATE TABLE messages (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    seq INTEGER NOT NULL,
    author_type TEXT NOT NULL CHECK (author_type IN ('user', 'agent', 'system')),
    author_name TEXT NOT NULL,
    author_user_id TEXT,
    author_agent_id INTEGER REFERENCES agents(id),
    source_run_id INTEGER REFERENCES runs(id),
    text TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '{}',
    external_ids TEXT NOT NULL DEFAULT '[]',
    confirmed INTEGER NOT NULL DEFAULT 0,
    token_count INTEGER NOT NULL DEFAULT 0,
    reply_to_seq INTEGER,
    episode_id INTEGER REFERENCES episodes(id),
    created_at REAL NOT NULL,
    PRIMARY KEY (group_id, seq)
) WITHOUT ROWID;
CREATE INDEX messages_unconfirmed ON messages(group_id, seq) WHERE confirmed = 0;

CREATE TABLE message_external_ids (
    external_id TEXT PRIMARY KEY,
    group_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    FOREIGN KEY (group_id, seq) REFERENCES messages(group_id, seq)
) WITHOUT ROWID;
CREATE INDEX message_external_ids_group ON message_external_ids(group_id, seq);

CREATE TABLE decisions (
    group_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    source TEXT NOT NULL,
    agent_ids TEXT NOT NULL DEFAULT '[]',
    agent_names TEXT NOT NULL DEFAULT '[]',
    selector_raw TEXT NOT NULL DEFAULT '[]',
    attempts INTEGER NOT NULL DEFAULT 0,
    confidence REAL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    estimated INTEGER NOT NULL DEFAULT 0,
    terminate INTEGER NOT NULL DEFAULT 0,
    note TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    PRIMARY KEY (group_id, seq),
    FOREIGN KEY (group_id, seq) REFERENCES messages(group_id, seq)
) WITHOUT ROWID;
CREATE INDEX decisions_created ON decisions(group_id, created_at);

CREATE TABLE read_cursors (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    user_id TEXT NOT NULL,
    seen_through INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (group_id, user_id)
) WITHOUT ROWID;

CREATE TABLE webhooks (
    channel_id TEXT PRIMARY KEY,
    webhook_id TEXT NOT NULL,
    token TEXT NOT NULL
);
"""

M002_OWNERSHIP_AND_CATCH_UP = """
-- One owner per group across processes (SPEC §4): the process holding the row runs the group.
CREATE TABLE leases (
    group_id INTEGER PRIMARY KEY REFERENCES groups(id),
    owner TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
-- The newest channel message id with every earlier one ingested; NULL: from the setup.
ALTER TABLE groups ADD COLUMN watermark TEXT;
-- A lasting refusal of the surface (a missing permission), shown by /roundtable status.
ALTER TABLE groups ADD COLUMN delivery_problem TEXT;
CREATE INDEX runs_group_running ON runs(group_id) WHERE status = 'running';
"""

M003_PEOPLE_AND_SUMMARIES = """
-- People's names, so `@alice` tags alice (as `<@id>` does): per Discord guild, or per console group.
CREATE TABLE person_names (
    scope TEXT NOT NULL,
    name_key TEXT NOT NULL,
    name TEXT NOT NULL,
    user_id TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope, name_key)
) WITHOUT ROWID;
-- /catchup summaries of a range of rows, so the same range is not summarised twice.
CREATE TABLE summaries (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    after_seq INTEGER NOT NULL,
    through_seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    omitted INTEGER NOT NULL DEFAULT 0,
    model TEXT NOT NULL DEFAULT '',
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    PRIMARY KEY (group_id, after_seq, through_seq)
) WITHOUT ROWID;
"""

M004_TOKEN_POSITIONS = """
-- Running token sums, so a prompt's window is found by an indexed lookup, not by reading every row:
-- messages.tokens_before is the thread cost of the group's earlier rows; groups.tokens_total of all.
ALTER TABLE messages ADD COLUMN tokens_before INTEGER NOT NULL DEFAULT 0;
ALTER TABLE groups ADD COLUMN tokens_total INTEGER NOT NULL DEFAULT 0;
CREATE INDEX messages_tokens ON messages(group_id, tokens_before);
"""


async def _m004_fill_token_positions(conn: aiosqlite.Connection) -> None:
    """Schema, then the running sums of the rows already stored (one pass per group, in seq order)."""
    for statement in split_statements(M004_TOKEN_POSITIONS):
        await conn.execute(statement)
    groups = await conn.execute_fetchall("SELECT id FROM groups")
    for (group_id,) in groups:
        rows = await conn.execute_fetchall(
            "SELECT seq, token_count FROM messages WHERE group_id = ? ORDER BY seq", (group_id,))
        total, updates = 0, []
        for seq, token_count in rows:
            updates.append((total, group_id, seq))
            total += token_cost(int(token_count))
        await conn.executemany("UPDATE messages SET tokens_before = ? WHERE group_id = ? AND seq = ?", updates)
        await conn.execute("UPDATE groups SET tokens_total = ? WHERE id = ?", (total, group_id))


M005_MODELS_FOR_PRICES = """
-- The model that answered each run and each selector decision, so its cost can be priced
-- (NULL for rows written before: their cost shows as "no price known").
ALTER TABLE runs ADD COLUMN model TEXT;
ALTER TABLE decisions ADD COLUMN model TEXT;
-- How many model calls a stored catch-up summary took (one more each time its rows are summarised again).
ALTER TABLE summaries ADD COLUMN calls INTEGER NOT NULL DEFAULT 1;
-- Exports and replay page through a group's runs and episodes in order.
CREATE INDEX runs_group_snapshot ON runs(group_id, snapshot_seq);
CREATE INDEX episodes_group_task ON episodes(group_id, task_seq);
"""

M006_AGENT_MEMORY = """
-- Memory (per agent, off by default): the notes it saved with memory_write, and, per run,
-- whether a run with memory on ended without one (NULL: memory was off).
ALTER TABLE agents ADD COLUMN memory INTEGER NOT NULL DEFAULT 0;
CREATE TABLE agent_notes (
    id INTEGER PRIMARY KEY,
    agent_id INTEGER NOT NULL REFERENCES agents(id),
    created_at REAL NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX agent_notes_agent ON agent_notes(agent_id);
ALTER TABLE runs ADD COLUMN memory_skipped INTEGER;
"""

M007_SCHEDULES = """
-- An agent's routines (seed 002): every N seconds, or daily at HH:MM in a zone. A due row fires
-- when next_run_at has passed; firing appends its task and moves next_run_at in one transaction.
CREATE TABLE schedules (
    id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL REFERENCES groups(id),
    agent_id INTEGER NOT NULL REFERENCES agents(id),
    every_seconds INTEGER,
    at_time TEXT,
    tz TEXT,
    prompt TEXT NOT NULL,
    next_run_at REAL NOT NULL,
    last_run_at REAL,
    created_by TEXT,
    created_at REAL NOT NULL,
    removed_at REAL,
    CHECK ((every_seconds IS NULL) != (at_time IS NULL))
);
CREATE INDEX schedules_due ON schedules(next_run_at) WHERE removed_at IS NULL;
CREATE INDEX schedules_group ON schedules(group_id) WHERE removed_at IS NULL;
"""

M008_AGENT_ROWS = """
-- The newest agent row before a point (the rotation's last speaker) without walking back over people's rows.
CREATE INDEX messages_agent_rows ON messages(group_id, seq) WHERE author_type = 'agent';
"""

M009_INTERACTIONS = """
-- Slash commands, buttons and forms a process has taken (Discord sends each to every session of a
-- shard, so two processes on one database both receive it): the first to insert the id handles it.
-- Rows older than a day are deleted as new ones come (Discord's interaction tokens last 15 minutes).
CREATE TABLE interactions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    claimed_at REAL NOT NULL
);
CREATE INDEX interactions_claimed_at ON interactions(claimed_at);
"""

M010_FILES_AND_PROVIDERS = """
-- The files people shared with a message (name, type, size, Discord ids, a text file's content),
-- as a JSON list, immutable like the tags; and the provider each model call ran on (NULL before).
ALTER TABLE messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]';
ALTER TABLE runs ADD COLUMN provider TEXT;
ALTER TABLE decisions ADD COLUMN provider TEXT;
ALTER TABLE summaries ADD COLUMN provider TEXT;
"""

M011_MODEL_CALLS = """
-- How many model calls a run made: a memory run one per step, its reminder too; a run the cap refused
-- before its call none (rows written before count one, as /roundtable usage counted them).
ALTER TABLE runs ADD COLUMN calls INTEGER NOT NULL DEFAULT 1;
-- Model calls that are no run, decision or summary: the check that a model takes tool calls when
-- memory is turned on (purpose 'memory check'), in /roundtable usage with the agent's calls.
CREATE TABLE model_calls (
    id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL REFERENCES groups(id),
    agent_id INTEGER REFERENCES agents(id),
    purpose TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    provider TEXT NOT NULL DEFAULT '',
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    estimated INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX model_calls_group ON model_calls(group_id, created_at);
"""

M012_CONTEXT_SUMMARIES = """
-- Rolling summaries of what a prompt's window cut (SPEC §6): one per group and last row covered, written
-- by a model when a window moves past it and reused by every prompt whose window starts right after it.
-- Rows after_seq < seq <= through_seq are what it stands for (it extends the summary through after_seq);
-- omitted: the oldest of them it could not read. Usage and cost: kind 'summary', a call per `calls`.
CREATE TABLE context_summaries (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    through_seq INTEGER NOT NULL,
    after_seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    omitted INTEGER NOT NULL DEFAULT 0,
    token_count INTEGER NOT NULL DEFAULT 0,
    model TEXT NOT NULL DEFAULT '',
    provider TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    estimated INTEGER NOT NULL DEFAULT 0,
    calls INTEGER NOT NULL DEFAULT 1,
    created_at REAL NOT NULL,
    PRIMARY KEY (group_id, through_seq)
) WITHOUT ROWID;
CREATE INDEX context_summaries_created ON context_summaries(group_id, created_at);
"""

M013_DRAFTS = """
-- Provisional messages of replies being written (streaming): each one's Discord id is recorded
-- before it is edited, so a reply shown in part is finished in the same messages or taken back,
-- even after a crash. external_id is NULL while its post is on its way (text: what the post
-- carried, to find it after a crash). A committed reply owns the drafts of its run
-- (messages.source_run_id) until it is confirmed, when they are deleted.
CREATE TABLE drafts (
    id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL REFERENCES groups(id),
    agent_id INTEGER NOT NULL REFERENCES agents(id),
    run_id INTEGER NOT NULL REFERENCES runs(id),
    position INTEGER NOT NULL,
    author_name TEXT NOT NULL,
    external_id TEXT,
    text TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE INDEX drafts_run ON drafts(run_id);
CREATE INDEX drafts_group_agent ON drafts(group_id, agent_id);
"""

MIGRATIONS: list[tuple[int, str, Step]] = [
    (1, "create tables", M001_CREATE_TABLES),
    (2, "leases, ingest watermark, delivery problem", M002_OWNERSHIP_AND_CATCH_UP),
    (3, "people's names, catch-up summaries", M003_PEOPLE_AND_SUMMARIES),
    (4, "running token sums", _m004_fill_token_positions),
    (5, "models of runs and decisions (prices), calls of summaries, record indexes", M005_MODELS_FOR_PRICES),
    (6, "agent memory", M006_AGENT_MEMORY),
    (7, "schedules", M007_SCHEDULES),
    (8, "index of agent rows", M008_AGENT_ROWS),
    (9, "interactions taken by a process", M009_INTERACTIONS),
    (10, "files shared with messages; providers of model calls", M010_FILES_AND_PROVIDERS),
    (11, "model calls per run, and calls outside runs", M011_MODEL_CALLS),
    (12, "rolling summaries of what context windows cut", M012_CONTEXT_SUMMARIES),
    (13, "provisional messages of streamed replies", M013_DRAFTS),
]

_CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS _migrations (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at REAL NOT NULL
)
"""


def split_statements(script: str) -> list[str]:
    """Split an SQL script into complete statements (full-line `--` comments dropped)."""
    text = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))
    statements: list[str] = []
    buffer = ""
    for piece in text.split(";")[:-1]:
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):  # false while a quote or trigger body is open
            statements.append(buffer.strip())
            buffer = ""
    rest = buffer + text.split(";")[-1]
    if rest.strip():
        raise ValueError(f"incomplete SQL statement in migration: {rest.strip()[:60]!r}")
    return statements


async def _run_step(conn: aiosqlite.Connection, step: Step) -> None:
    if isinstance(step, str):
        for statement in split_statements(step):
            await conn.execute(statement)
    else:
        await step(conn)


async def applied_migrations(conn: aiosqlite.Connection) -> dict[int, float]:
    """Migration id -> time applied, for the migrations recorded in this file."""
    await conn.execute(_CREATE_LEDGER)
    rows = await conn.execute_fetchall("SELECT id, applied_at FROM _migrations")
    return {int(row[0]): float(row[1]) for row in rows}


async def apply_migrations(
    conn: aiosqlite.Connection,
    migrations: list[tuple[int, str, Step]] | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> list[int]:
    """Apply every migration not yet recorded, in order; return the ids applied.

    The connection must be in autocommit mode (`isolation_level=None`, as
    `storage.db.open_db` makes it). A file recorded with a migration this code
    does not know (written by a newer version) raises `StoreError`.
    """
    registry = MIGRATIONS if migrations is None else migrations
    ids = [mid for mid, _, _ in registry]
    if ids != sorted(set(ids)):
        raise ValueError(f"migration ids must be unique and increasing: {ids}")
    known = await applied_migrations(conn)
    unknown = sorted(set(known) - set(ids))
    if unknown:
        raise StoreError(
            f"the database was written by a newer version (migration {unknown[-1]}); upgrade Roundtable"
        )
    applied: list[int] = []
    for mid, name, step in registry:
        if mid in known:
            continue
        await conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while we were not holding the lock.
            done = await conn.execute_fetchall("SELECT 1 FROM _migrations WHERE id = ?", (mid,))
            if not done:
                await _run_step(conn, step)
                await conn.execute(
                    "INSERT INTO _migrations (id, name, applied_at) VALUES (?, ?, ?)",
                    (mid, name, clock()),
                )
                applied.append(mid)
            await conn.execute("COMMIT")
        except BaseException:
            try:
                await conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        if applied and applied[-1] == mid:
            log.info("applied migration %d: %s", mid, name)
    return applied
