"""The statements of a person's post and of an agent's turn find their rows by index on SQLite:
none walks a table, and a post supersedes the running episode through `episodes_running`
(SQLite's planner preferred `episodes_group_task`, walking every episode of the group, so an
append cost grew with the history: 0.2 ms at 1,000 rows, 1.3 ms at 20,000)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from bot.core.models import Decision, GroupSettings, NewMessage, RunResult, Usage
from storage.store import SqliteStore


def _person(text: str) -> NewMessage:
    return NewMessage("user", "alice", text, author_user_id="1", token_count=3)


async def test_a_post_and_a_turn_use_indexes_only(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "rt.db")
    try:
        group = await store.groups.create_group("g", "g", GroupSettings())
        agent = await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
        for i in range(30):  # a history of many episodes
            await store.thread.append_user_message(group.id, _person(f"task {i}"))
        statements: list[str] = []
        for db in (store._backend._writer, store._backend._reader):  # type: ignore[attr-defined]
            db.conn.set_trace_callback(statements.append)
        message, _ = await store.thread.append_user_message(group.id, _person("@planner one more"))
        await store.routing.record_decision(group.id, Decision(message.seq, "tags", (agent.id,), ("planner",)))
        run = await store.runs.start_run(group.id, agent.id, "group", message.seq)
        reply = NewMessage("agent", "planner", "Done.", author_agent_id=agent.id, source_run_id=run.id,
                           token_count=2)
        await store.runs.finish_run(run.id, RunResult("posted", Usage(10, 2, 0), Usage(), reply=reply), cap=10)
        await store.routing.unrouted(group.id, through=message.seq + 1)
        await store.posting.unconfirmed_messages(group.id)
        await store.thread.messages(group.id, after=message.seq - 5, through=message.seq + 1)
    finally:
        for db in (store._backend._writer, store._backend._reader):  # type: ignore[attr-defined]
            db.conn.set_trace_callback(None)
        await store.close()
    plans: dict[str, list[str]] = {}
    with sqlite3.connect(tmp_path / "rt.db") as conn:
        for sql in statements:
            if sql.split()[0].upper() in {"SELECT", "UPDATE", "DELETE"} and "sqlite_" not in sql:
                plans[sql] = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
    walks = {sql: plan for sql, plan in plans.items()
             if any(step.startswith("SCAN") and "CONSTANT" not in step for step in plan)}
    assert walks == {}
    supersede = [plan for sql, plan in plans.items() if sql.startswith("UPDATE episodes") and "superseded" in sql]
    assert supersede and all(any("episodes_running" in step for step in plan) for plan in supersede)
