"""Cross-process wake-up: a row stored by another process wakes the owner's dispatcher. On
PostgreSQL at once (LISTEN/NOTIFY); on SQLite by the lease keeper's poll."""
from __future__ import annotations

from bot.core.models import GroupSettings, NewMessage, Tags
from bot.core.runtime.engine import Engine
from bot.llm.tokens import make_token_counter
from tests.engine.conftest import FAST_RETRY
from tests.fakes.databases import Place, PostgresPlace
from tests.fakes.scripted_llm import ScriptedLLM
from tests.fakes.surface import RecordingSurface
from tests.support import bound, eventually, quiet_period


async def answered_after_a_foreign_post(place: Place, keeper_tick: float) -> None:
    """Another store's post wakes the owner, who answers it (else AssertionError after a generous bound)."""
    async with await place.open() as owner_store, await place.open() as other_store:
        group = await owner_store.groups.create_group("console:main", "main", GroupSettings(mode="tags"))
        planner = await owner_store.roster.add_agent(group.id, "planner", "plans", "You plan.")
        llm = ScriptedLLM(agents={"planner": ["On it."]})
        engine = Engine(owner_store, llm, RecordingSurface(), make_token_counter(), retry=FAST_RETRY)
        engine.ownership.tick = keeper_tick
        await engine.start()
        try:
            assert engine.owns(group.id)
            await engine.wait_idle(group.id, bound())  # its dispatcher rests: only a wake-up can start it
            await quiet_period(0.2)  # and has rested a while (the keeper's poll, if any, came and went)
            await other_store.thread.append_user_message(group.id, NewMessage(
                "user", "bob", "@planner plan it", author_user_id="bob",
                tags=Tags(agent_ids=(planner.id,), agent_names=("planner",))))
            await eventually(lambda: llm.participant_order, "the owner woken")
            assert llm.participant_order == ["planner"], "the owner never woke"
            await engine.wait_idle(group.id, bound())
        finally:
            await engine.close()


async def test_postgresql_wakes_the_owner_at_once(pg: PostgresPlace) -> None:
    # the keeper would look only after an hour: the NOTIFY is what wakes it
    await answered_after_a_foreign_post(pg, keeper_tick=3600)


async def test_a_store_hears_other_stores_appends_not_its_own(pg: PostgresPlace) -> None:
    calls: list[int] = []
    async with await pg.open() as store, await pg.open() as other:
        await store.leases.watch(calls.append)
        group = await store.groups.create_group("console:main", "main", GroupSettings())
        await store.thread.append_user_message(group.id, NewMessage("user", "alice", "mine"))
        await other.thread.append_user_message(group.id, NewMessage("user", "bob", "theirs"))
        await eventually(lambda: calls, "bob's row heard")
        await quiet_period(0.1)  # and nothing more: no later notification to wait for
        assert calls == [group.id]  # bob's row only, once


async def test_sqlite_is_woken_by_the_keepers_poll(tmp_path) -> None:
    from tests.fakes.databases import SqlitePlace

    await answered_after_a_foreign_post(SqlitePlace(tmp_path / "rt.db"), keeper_tick=0.2)


async def test_closing_a_watching_store_warns_of_nothing(pg: PostgresPlace, caplog) -> None:
    import logging

    with caplog.at_level(logging.WARNING, logger="storage.pg"):
        async with await pg.open() as store:
            await store.leases.watch(lambda group_id: None)
        await quiet_period(0.1)  # a warning would come after the close, if at all
    assert [r.getMessage() for r in caplog.records] == []
