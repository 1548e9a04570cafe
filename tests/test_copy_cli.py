"""`roundtable copy`: a database the engine wrote, copied SQLite -> PostgreSQL (and back), verified
by row counts and checksums; the engine then runs on the copy and answers. A destination that
holds rows is refused; a copy that differs is caught by the checksums."""
from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.errors import StoreError
from bot.core.models import Completion, ContextSummary, Summary, ToolCall, Usage
from bot.core.rules.schedule import When
from storage import describe, open_store
from storage.copy import NOT_COPIED, TABLES, table_sums
from tests.engine.conftest import Harness
from tests.fakes.databases import PostgresPlace, SqlitePlace
from tests.fakes.scripted_llm import ScriptedLLM
from tests.test_cli import roundtable


async def seeded(path: Path) -> Harness:
    """Two episodes of the group 'main' with selector decisions, runs, a notice, a webhook, people,
    a summary, a rolling summary, a read cursor, a memory note, a schedule, a provisional message left by
    a run, a tool grant, a journaled tool call and a regenerated reply: a row in every copied table."""
    harness = Harness(path)
    llm = ScriptedLLM(
        selector=[Completion("planner", Usage(300, 1, 0), model="gpt-4o-mini"),
                  Completion("TERMINATE", Usage(340, 2, 0), model="gpt-4o-mini"),
                  Completion("local", Usage(200, 1, 0), model="gpt-4o-mini"),
                  Completion("TERMINATE", Usage(210, 2, 0), model="gpt-4o-mini")],
        default_agent_reply=lambda name, n: f"{name} says {n} — ünïcödé | \\ '",
    )
    async with harness.running(llm):
        await harness.say("Plan a 3-day Tokyo trip")
        await harness.idle()
        await harness.say("What about food?", who="bob")
        await harness.idle()
        store, group_id = harness.store, harness.group.id
        await harness.engine.regenerate(await store.groups.get_group(group_id), None, user_id="bob", operator=False)
        await harness.idle()  # a regenerated reply: a version of its text kept
        await store.thread.append_system_message(group_id, harness.engine.notice("a notice"))
        await store.posting.record_posted(group_id, 1, "1234567890123")
        await store.webhooks.save_webhook("chan", "hook", "tok")
        await store.reading.remember_person("guild", "1", ["alice"])
        await store.reading.save_summary(group_id, Summary(0, 2, "a summary", model="m"), prompt_tokens=9)
        await store.summaries.save_context_summary(group_id, ContextSummary(2, 0, "rolling notes", 9, model="m"),
                                                   Usage(40, 9, 0))
        await store.reading.mark_seen(group_id, "bob", 2)
        planner = await store.roster.find_agent(group_id, "planner")
        assert planner is not None
        await store.notes.add_note(planner.id, "Alice likes temples.")
        await store.spending.record_call(group_id, planner.id, "memory check", Completion("", Usage(30, 5, 0), "m"))
        await store.episodes.break_tasks(group_id)
        await store.schedules.add_schedule(planner.id, When(at_time="09:00", tz="Asia/Tokyo"), "morning plan",
                                           next_run_at=9e9)
        run = next(iter(await store.record.runs_by_id([1])))
        await store.drafts.add_draft(group_id, planner.id, run, 0, "planner", "half a repl")
        await store.tools.grant_tools(planner.id, ["counter.*"])
        (call,) = await store.tools.journal_step(group_id, planner.id, run, 0, "Adding.",
                                                 [ToolCall("call_1", "counter__add", '{"n": 2}')])
        await store.tools.journal_result(call.id, "counter is 2")
        await store.leases.acquire_lease(group_id, 30)  # not copied: ownership stays with the old database
    return harness


async def test_sqlite_to_postgresql_and_back_is_verified_and_the_engine_answers_on_the_copy(
        tmp_path: Path, pg: PostgresPlace) -> None:
    source = tmp_path / "rt.db"
    await seeded(source)
    result = await roundtable(tmp_path, "copy", "--from", f"sqlite:///{source}", "--to", pg.target)
    assert result.code == 0 and result.err == "", result.err
    line = result.out.strip()
    assert line.startswith("roundtable: copied ") and f"to {describe(pg.target)} (groups 1, agents 3," in line
    assert line.endswith("; row counts and checksums match")
    async with await open_store(source) as lite, await open_store(pg.target) as postgres:
        sums = await table_sums(lite)
        assert sums == await table_sums(postgres)
        assert all(rows for rows, _ in sums.values()), sums  # every table had something to copy
        group = (await lite.groups.list_groups())[0]
        assert await postgres.thread.messages(group.id) == await lite.thread.messages(group.id)
        assert await postgres.groups.get_group(group.id) == await lite.groups.get_group(group.id)
        assert await postgres.routing.decisions(group.id, after=0, through=99) == await lite.routing.decisions(group.id,
                                                                                                               after=0,
                                                                                                                 through=99)
        assert await postgres.spending.spending(group.id, 0) == await lite.spending.spending(group.id, 0)
    assert await pg.fetch("SELECT COUNT(*) FROM leases") == [(0,)]

    back = tmp_path / "back.db"
    again = await roundtable(tmp_path, "copy", "--from", pg.target, "--to", str(back))
    assert again.code == 0, again.err
    async with await open_store(source) as lite, await open_store(back) as copied:
        assert await table_sums(lite) == await table_sums(copied)

    harness = Harness(pg)  # the engine on the copy: same group, new ids after the copied ones
    llm = ScriptedLLM(selector=[Completion("budget", Usage(5, 1, 0)), Completion("TERMINATE", Usage(5, 1, 0))],
                      default_agent_reply=lambda name, n: f"{name} on the copy")
    async with harness.running(llm):
        before = (await harness.store.groups.get_group(harness.group.id)).latest_seq
        await harness.say("And the budget?")
        await harness.idle()
        thread = await harness.thread()
        assert thread[before:] == ["[alice] And the budget?", "[budget] budget on the copy"]
        assert harness.group.id == group.id and len(await harness.store.roster.list_agents(group.id)) == 3


async def test_a_destination_with_rows_is_refused_and_left_alone(tmp_path: Path, pg: PostgresPlace) -> None:
    source = tmp_path / "rt.db"
    await seeded(source)
    first = await roundtable(tmp_path, "copy", "--from", str(source), "--to", pg.target)
    assert first.code == 0, first.err
    counts = await pg.fetch("SELECT COUNT(*) FROM messages")
    second = await roundtable(tmp_path, "copy", "--from", str(source), "--to", pg.target)
    assert second.problem == ("roundtable: the destination already holds rows (table groups); "
                              "copy into an empty database")
    assert await pg.fetch("SELECT COUNT(*) FROM messages") == counts


async def test_the_checksums_tell_a_changed_value_apart(tmp_path: Path) -> None:
    source = tmp_path / "rt.db"
    await seeded(source)
    other = SqlitePlace(tmp_path / "copy.db")
    result = await roundtable(tmp_path, "copy", "--from", str(source), "--to", other.target)
    assert result.code == 0, result.err
    async with await open_store(source) as lite:
        before = await table_sums(lite)
    await other.execute("UPDATE messages SET text = text || '.' WHERE seq = 2")
    async with await open_store(other.target) as copied:
        after = await table_sums(copied)
    assert [t for t, _ in TABLES if before[t] != after[t]] == ["messages"]
    assert before["messages"][0] == after["messages"][0]  # the same count: only the checksum tells


@pytest.mark.parametrize("args, expected", [
    (["--from", "missing.db", "--to", "b.db"], "roundtable: --from missing.db does not exist (no database there"),
    (["--from", "a.db", "--to", "a.db"], "roundtable: --from and --to name the same database"),
    (["--from", "a.db", "--to", "postgresql://rt:s3cr3t-pw@127.0.0.1:1/db"],
     "roundtable: --to: cannot open the database postgresql://rt:***@127.0.0.1:1/db: "),
])
async def test_bad_copies_are_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    await (await open_store(tmp_path / "a.db")).close()
    result = await roundtable(tmp_path, "copy", *args)
    assert result.problem.startswith(expected)
    assert "s3cr3t-pw" not in result.err


async def test_every_table_of_the_schema_is_copied_or_left_behind_on_purpose(tmp_path: Path) -> None:
    place = SqlitePlace(tmp_path / "rt.db")
    await (await place.open()).close()
    tables = {name for (name,) in await place.fetch("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {t for t, _ in TABLES} | set(NOT_COPIED)  # a new table needs a line in storage.copy.TABLES


async def test_a_column_whose_name_is_not_plain_is_refused_before_any_sql_is_built_from_it(tmp_path: Path) -> None:
    """The copy writes column names into its SQL text: only the plain names the migrations give."""
    async with await open_store(tmp_path / "odd.db") as store:
        async with store._write() as db:
            await db.exec('ALTER TABLE webhooks ADD COLUMN "x) VALUES (1); --" TEXT')
        with pytest.raises(StoreError, match="column named 'x\\) VALUES \\(1\\); --'; a copy takes plain names only"):
            await table_sums(store)
