"""A backlog of rows not routed yet does not hold up the start: the bot identifies to the
gateway first, routes the backlog afterwards in the background, and answers a fresh message in
another channel meanwhile; the log says what is being caught up."""
from __future__ import annotations

import asyncio
import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.discord_emulator._gateway import GatewayConnection
from tests.fakes.openai_server import GroupChatScript

BACKLOG = 1200  # rows: more than two chunks


def query(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read or write the database as another process would, at once (no await)."""
    with closing(sqlite3.connect(db, timeout=30)) as conn, conn:
        return conn.execute(sql, params).fetchall()


def routed_through(db: Path, group_id: int) -> tuple[int, int]:
    [(routed, latest)] = query(db, "SELECT routed_through, latest_seq FROM groups WHERE id = ?", (group_id,))
    return routed, latest


def add_backlog(db: Path, group_id: int, rows: int) -> int:
    """`rows` people's messages after the group's last, written by SQL (none routed; the agents'
    cursors at the end: nobody owes an answer to them). Returns the new latest seq."""
    routed, latest = routed_through(db, group_id)
    assert routed == latest  # everything before is routed
    query(db, "WITH RECURSIVE s(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM s WHERE x < ?)"
              " INSERT INTO messages (group_id, seq, author_type, author_name, author_user_id, text, confirmed,"
              " token_count, created_at, tokens_before)"
              " SELECT ?, x, 'user', 'alice', 'alice', 'old message ' || x, 1, 5, 0, (x - 1) * 6 FROM s",
          (latest + 1, latest + rows, group_id))
    query(db, "UPDATE groups SET latest_seq = ?, tokens_total = ? WHERE id = ?",
          (latest + rows, (latest + rows) * 6, group_id))
    query(db, "UPDATE agents SET delivered_through = ? WHERE group_id = ?", (latest + rows, group_id))
    return latest + rows


async def test_the_bot_identifies_before_routing_a_backlog_and_answers_another_channel_meanwhile(
        harness, script: GroupChatScript, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bot.core.runtime.dispatcher")
    emu = harness.emu
    other = emu.add_channel(emu.guild_id, "second")
    await emu.wait_for(lambda: harness.bot.get_channel(int(other)) is not None, timeout=5)
    await harness.setup_group(("planner", "plans"), mode="selector")  # group 1: the backlog
    for command, options in (("roundtable setup", {"mode": "tags"}),
                             ("agent add", {"name": "planner", "role": "plans", "prompt": "You plan."})):
        await (await emu.invoke_command(emu.guild_id, other, emu.alice_id, command, options)).wait_response(5)
    await harness.idle()
    await harness.stop()
    latest = add_backlog(harness.db, 1, BACKLOG)

    at_identify: list[tuple[int, int]] = []
    identify = emu._identify

    async def identify_seen(conn: GatewayConnection, d: dict[str, Any]) -> None:
        at_identify.append(routed_through(harness.db, 1))  # the database as the session starts
        await identify(conn, d)

    emu._identify = identify_seen
    release = asyncio.Event()

    async def held_selector() -> str:  # the backlog's newest row is routed by this call
        await release.wait()
        return "planner"

    script.set_selector(lambda body: held_selector())
    script.set_agent("planner", ["Here is the plan."])
    await harness.start()
    await emu.user_post(other, emu.alice_id, "@planner plan the trip")
    await emu.wait_for_messages(other, lambda m: bool(m.get("webhook_id")), timeout=20)
    assert routed_through(harness.db, 1)[0] < latest  # the backlog's last decision still waits
    release.set()
    await emu.wait_for(lambda: routed_through(harness.db, 1)[0] == latest, timeout=60, what="the backlog routed")

    assert at_identify == [(latest - BACKLOG, latest)]  # not one backlog row was routed before IDENTIFY
    lines = [r.getMessage() for r in caplog.records]
    assert lines.count(f"group=1: routing a backlog of {BACKLOG} row(s) (seq {latest - BACKLOG + 1}-{latest})"
                       " in the background") == 1
    assert len([line for line in lines if line.startswith(f"group=1: backlog of {BACKLOG} row(s) routed in ")]) == 1
    assert not [line for line in lines if line.startswith("group=2:")]
