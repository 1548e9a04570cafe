"""The store against real databases (`place`: a SQLite file in tmp_path, a fresh PostgreSQL schema):
the Store port's semantics, the same assertions on both."""
from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import subprocess
import sys
import time
import unicodedata
from collections.abc import AsyncIterator

import pytest

from bot.core.errors import AlreadyStored, InvalidInput, LeaseLost, NotFound, StoreBusy, StoreError
from bot.core.models import MUTED_FOREVER, Decision, GroupSettings, NewMessage, RunResult, Tags, Usage
from storage import LOCKED_MESSAGE, SqlStore
from tests.fakes.databases import Place
from tests.fakes.rows import agent_reply, posted


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
async def store(place: Place) -> AsyncIterator[SqlStore]:
    async with await place.open(clock=FakeClock()) as opened:
        yield opened


@pytest.fixture
async def group_id(store: SqlStore) -> int:
    return (await store.groups.create_group("guild:chan", "general", GroupSettings())).id


def user(text: str = "hello", who: str = "u1", ids: tuple[str, ...] = ()) -> NewMessage:
    return NewMessage("user", who, text, author_user_id=who, external_ids=ids)


def agent_msg(agent_id: int, text: str = "reply", ids: tuple[str, ...] = ()) -> NewMessage:
    return NewMessage("agent", f"agent{agent_id}", text, author_agent_id=agent_id, external_ids=ids)


def notice(text: str = "notice") -> NewMessage:
    return NewMessage("system", "roundtable", text)


# groups -----------------------------------------------------------------


async def test_create_group_again_re_enables_and_keeps_id_history_and_settings(store: SqlStore) -> None:
    first = await store.groups.create_group("k", "general", GroupSettings(max_agent_turns=3), guild_id="g1")
    await store.thread.append_user_message(first.id, user())
    await store.groups.update_group(first.id, enabled=False)
    assert await store.groups.list_groups() == []
    again = await store.groups.create_group("k", "renamed", GroupSettings(max_agent_turns=9), channel_id="c2")
    assert (again.id, again.latest_seq, again.settings.max_agent_turns) == (first.id, 1, 3)
    assert (again.enabled, again.name, again.guild_id, again.channel_id) == (True, "renamed", "g1", "c2")
    assert await store.groups.find_group("k") == again and await store.groups.find_group("nope") is None


async def test_settings_round_trip_and_unknown_stored_keys_are_ignored(store: SqlStore, place: Place) -> None:
    settings = GroupSettings(mode="tags", pace=1.5, selector_model="m", min_confidence=0.4, brief="Ünïcode")
    group = await store.groups.create_group("k", "n", settings)
    assert (await store.groups.get_group(group.id)).settings == settings
    await place.execute("UPDATE groups SET settings_json = ?", ('{"mode": "tags", "from_the_future": 1}',))
    assert (await store.groups.get_group(group.id)).settings == GroupSettings(mode="tags")


async def test_list_groups_filters(store: SqlStore) -> None:
    a = await store.groups.create_group("a", "a", GroupSettings(), guild_id="g1")
    b = await store.groups.create_group("b", "b", GroupSettings(), guild_id="g2")
    await store.groups.update_group(b.id, enabled=False, paused=True)
    assert [g.id for g in await store.groups.list_groups()] == [a.id]
    assert [g.id for g in await store.groups.list_groups(enabled_only=False)] == [a.id, b.id]
    assert [g.id for g in await store.groups.list_groups(enabled_only=False, guild_id="g2")] == [b.id]
    assert (await store.groups.get_group(b.id)).paused
    with pytest.raises(NotFound):
        await store.groups.get_group(999)


# seq allocation -----------------------------------------------------------


async def test_concurrent_appends_from_two_processes_get_seqs_without_gaps(place: Place) -> None:
    bot = await place.open()
    console = await place.open()
    try:
        group = await bot.groups.create_group("k", "n", GroupSettings())
        agent = await bot.roster.add_agent(group.id, "planner", "plans", "p")
        rng = random.Random(7)

        async def append(i: int) -> int:
            store = bot if i % 2 else console
            if rng.random() < 0.5:
                return (await store.thread.append_user_message(group.id, user(f"u{i}", who=f"p{i % 3}")))[0].seq
            if rng.random() < 0.5:
                return (await store.thread.append_system_message(group.id, notice(f"n{i}"))).seq
            return (await posted(store, group.id, agent.id, f"a{i}", snapshot=0)).seq

        seqs = await asyncio.gather(*(append(i) for i in range(50)))
        assert sorted(seqs) == list(range(1, 51))
        rows = await console.thread.messages(group.id)
        assert [m.seq for m in rows] == list(range(1, 51))
        assert (await bot.groups.get_group(group.id)).latest_seq == 50
        assert await place.fetch("SELECT COUNT(*) FROM episodes WHERE status = 'running'") == [(1,)]
    finally:
        await bot.close()
        await console.close()


# streak and cap -----------------------------------------------------------


async def test_replies_up_to_the_cap_then_the_run_is_refused_and_adds_nothing(
    store: SqlStore, group_id: int
) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    await store.thread.append_user_message(group_id, user())
    for _ in range(3):
        await posted(store, group_id, agent.id, cap=3)
    await store.thread.append_system_message(group_id, notice("max_turns"))  # the streak is unchanged
    group = await store.groups.get_group(group_id)
    assert (group.agent_streak, group.latest_seq) == (3, 5)
    refused = await agent_reply(store, group_id, agent.id, cap=3)
    assert (refused.run.status, refused.reply, refused.run.posted_seq) == ("refused", None, None)
    assert "cap of 3" in (refused.run.error or "")
    assert (await store.groups.get_group(group_id)).latest_seq == 5
    assert (await store.roster.get_agent(agent.id)).delivered_through == 5  # a refusal settles the run too
    assert (await store.episodes.get_episode(group.episode_id or 0)).agent_turns == 3
    await store.thread.append_user_message(group_id, user("go on"))
    assert (await store.groups.get_group(group_id)).agent_streak == 0
    assert (await posted(store, group_id, agent.id, cap=3)).seq == 7


@pytest.mark.parametrize(
    "between, snapshot, cursor_before, expected_cursor",
    [
        ([], 2, 0, 3),  # nothing after the snapshot: through the new row
        (["user"], 2, 0, 2),  # a user message came in between: through the snapshot only
        (["notice"], 2, 0, 2),
        ([], 1, 0, 1),  # an older snapshot while row 2 exists
        (["user"], 2, 3, 3),  # never backwards
    ],
)
async def test_a_posted_run_moves_the_author_cursor(
    store: SqlStore, group_id: int, between: list[str], snapshot: int, cursor_before: int, expected_cursor: int
) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    await store.thread.append_user_message(group_id, user("one"))
    await store.thread.append_user_message(group_id, user("two"))
    for kind in between:
        if kind == "user":
            await store.thread.append_user_message(group_id, user("three"))
        else:
            await store.thread.append_system_message(group_id, notice())
    await store.roster.set_delivered_through(agent.id, cursor_before)
    await posted(store, group_id, agent.id, snapshot=snapshot, cap=5)
    assert (await store.roster.get_agent(agent.id)).delivered_through == expected_cursor


async def test_finish_run_settles_everything_in_one_piece(store: SqlStore, group_id: int) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    _, episode = await store.thread.append_user_message(group_id, user())
    run = await store.runs.start_run(group_id, agent.id, "group", 1)
    assert (run.status, run.episode_id, run.finished_at) == ("running", episode.id, None)
    result = RunResult("posted", Usage(100, 20, 50), Usage(9, 1), reply=agent_msg(agent.id, "done"),
                       notice=notice("and a notice"))
    done = await store.runs.finish_run(run.id, result, cap=5)
    assert done.reply is not None and done.notice is not None
    assert (done.reply.seq, done.notice.seq) == (2, 3)
    assert done.reply.episode_id == done.notice.episode_id == episode.id
    assert (done.run.status, done.run.posted_seq, done.run.usage, done.run.selector_usage) == (
        "posted", 2, Usage(100, 20, 50), Usage(9, 1))
    assert (await store.roster.get_agent(agent.id)).delivered_through == 2
    ended = await store.episodes.get_episode(episode.id)
    assert (ended.agent_turns, ended.prompt_tokens, ended.completion_tokens, ended.cached_tokens) == (1, 109, 21, 50)
    again = await store.runs.finish_run(run.id, RunResult("failed"), cap=5)  # settled once
    assert again.run == done.run and again.reply is None
    failed_run = await store.runs.start_run(group_id, agent.id, "group", 3)
    failed = await store.runs.finish_run(failed_run.id, RunResult("failed", error="timeout", notice=notice("x failed")),
                                         cap=5)
    assert (failed.run.status, failed.run.error, failed.notice and failed.notice.seq) == ("failed", "timeout", 4)
    assert (await store.roster.get_agent(agent.id)).delivered_through == 3
    with pytest.raises(InvalidInput):
        await store.runs.finish_run(failed_run.id, RunResult("running"), cap=5)


async def test_an_interrupted_run_posts_nothing_and_leaves_the_cursor(store: SqlStore, group_id: int) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    await store.thread.append_user_message(group_id, user())
    run = await store.runs.start_run(group_id, agent.id, "group", 1)
    stopped = await store.runs.finish_run(run.id, RunResult("interrupted", reply=agent_msg(agent.id)), cap=5)
    assert (stopped.run.status, stopped.reply) == ("interrupted", None)
    assert (await store.roster.get_agent(agent.id)).delivered_through == 0
    assert (await store.groups.get_group(group_id)).latest_seq == 1


async def test_a_reply_to_an_older_task_stays_in_its_episode_and_does_not_count(
    store: SqlStore, group_id: int
) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    _, first = await store.thread.append_user_message(group_id, user("task A"))
    run = await store.runs.start_run(group_id, agent.id, "group", 1)
    _, second = await store.thread.append_user_message(group_id, user("task B"))  # posted during the run
    late = await store.runs.finish_run(run.id, RunResult("posted", Usage(10, 1), reply=agent_msg(agent.id)), cap=1)
    assert late.reply is not None and late.reply.episode_id == first.id and late.run.episode_id == first.id
    group = await store.groups.get_group(group_id)
    assert (group.episode_id, group.agent_streak) == (second.id, 0)  # cap 1 is not used up by the old reply
    assert (await store.episodes.get_episode(first.id)).prompt_tokens == 10
    assert (await store.episodes.get_episode(second.id)).prompt_tokens == 0
    assert (await store.roster.get_agent(agent.id)).delivered_through == 1  # task B is still news to it
    assert (await posted(store, group_id, agent.id, cap=1)).episode_id == second.id


async def test_a_reply_to_a_stopped_episode_is_discarded(store: SqlStore, group_id: int) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    _, episode = await store.thread.append_user_message(group_id, user())
    run = await store.runs.start_run(group_id, agent.id, "group", 1)
    await store.episodes.end_episode(episode.id, "stopped")
    done = await store.runs.finish_run(run.id, RunResult("posted", reply=agent_msg(agent.id)), cap=5)
    assert (done.run.status, done.reply) == ("discarded", None)
    assert (await store.groups.get_group(group_id)).latest_seq == 1


async def test_a_stopped_run_keeps_what_it_showed_ends_its_episode_and_skips_what_waits(
    store: SqlStore, group_id: int
) -> None:
    """SPEC §8 ⏹ Stop: in one transaction the reply (past the cap), the run's spend, the episode
    ended `stopped` and every agent's pending deliveries skipped, so a restart runs nothing again."""
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    other = await store.roster.add_agent(group_id, "b", "r", "p")  # pending too: it has not read row 1
    _, episode = await store.thread.append_user_message(group_id, user())
    run = await store.runs.start_run(group_id, agent.id, "group", 1)
    spent = Usage(120, 7, 0, True)
    done = await store.runs.finish_run(run.id, RunResult("stopped", spent, reply=agent_msg(agent.id,
                                                                                           "Half\n\n(stopped)"),
                                                         error="stopped by Bob"), cap=0)
    assert done.run.status == "stopped" and done.reply is not None and done.reply.text == "Half\n\n(stopped)"
    assert (done.run.usage, done.run.error) == (spent, "stopped by Bob")
    ended = await store.episodes.get_episode(episode.id)
    assert (ended.status, ended.prompt_tokens, ended.agent_turns) == ("stopped", 120, 1)
    assert [a.delivered_through for a in (await store.roster.get_agent(agent.id),
                                          await store.roster.get_agent(other.id))] == [2, 2]


async def test_a_stopped_run_ends_its_running_episode_as_stopped(store: SqlStore, group_id: int) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    _, episode = await store.thread.append_user_message(group_id, user())
    run = await store.runs.start_run(group_id, agent.id, "group", 1)
    done = await store.runs.finish_run(run.id, RunResult("stopped", notice=None), cap=5)
    assert (done.run.status, done.reply) == ("stopped", None)
    assert (await store.episodes.get_episode(episode.id)).status == "stopped"
    assert (await store.roster.get_agent(agent.id)).delivered_through == 1


async def test_bad_appends_are_refused(store: SqlStore, group_id: int) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    with pytest.raises(InvalidInput):
        await store.thread.append_user_message(group_id, agent_msg(agent.id))
    with pytest.raises(InvalidInput):
        await store.runs.start_run(group_id, agent.id, "group", 4)  # beyond the latest seq
    with pytest.raises(NotFound):
        await store.thread.append_user_message(999, user())
    assert (await store.groups.get_group(group_id)).latest_seq == 0


async def test_a_nul_in_a_message_is_kept_not_refused(store: SqlStore, group_id: int, place: Place) -> None:
    stored, _ = await store.thread.append_user_message(group_id, user("a\x00b"))
    shown = "a\x00b" if place.kind == "sqlite" else "a\ufffdb"  # PostgreSQL's text cannot hold NUL
    assert (await store.thread.get_message(group_id, stored.seq)).text == shown


# episodes -----------------------------------------------------------------


async def test_a_user_message_supersedes_the_running_episode(store: SqlStore, group_id: int) -> None:
    first_msg, first = await store.thread.append_user_message(group_id, user("task one"))
    assert (first.task_seq, first.status, first_msg.episode_id) == (1, "running", first.id)
    _, second = await store.thread.append_user_message(group_id, user("task two"))
    old = await store.episodes.get_episode(first.id)
    assert (old.status, old.ended_at is not None) == ("superseded", True)
    assert (await store.groups.get_group(group_id)).episode_id == second.id
    assert (second.task_seq, second.running) == (2, True)


async def test_end_episode_once_with_its_notice(store: SqlStore, group_id: int) -> None:
    _, episode = await store.thread.append_user_message(group_id, user())
    ended = await store.episodes.end_episode(episode.id, "max_turns", notice=notice("Stopped (max_turns)."))
    assert ended is not None
    shown, note = ended
    assert (shown.status, note and note.seq, note and note.episode_id) == ("max_turns", 2, episode.id)
    assert await store.episodes.end_episode(episode.id, "terminated",
                                            notice=notice("again")) is None  # no-op once ended
    assert (await store.groups.get_group(group_id)).latest_seq == 2
    _, later = await store.thread.append_user_message(group_id, user())
    assert (await store.episodes.get_episode(episode.id)).status == "max_turns"  # not superseded
    with pytest.raises(InvalidInput):
        await store.episodes.end_episode(later.id, "running")


async def test_notices_and_agent_rows_belong_to_the_current_episode(store: SqlStore, group_id: int) -> None:
    early = await store.thread.append_system_message(group_id, notice("before any task"))
    assert early.episode_id is None
    _, episode = await store.thread.append_user_message(group_id, user())
    assert (await store.thread.append_system_message(group_id, notice())).episode_id == episode.id


# read cursors ---------------------------------------------------------------


async def test_read_cursor_clamps_and_never_moves_back(store: SqlStore, group_id: int) -> None:
    assert await store.reading.get_seen(group_id, "u2") is None
    for _ in range(3):
        await store.thread.append_user_message(group_id, user(who="u1"))
    assert await store.reading.get_seen(group_id, "u1") == 3  # own posts advance it
    assert await store.reading.mark_seen(group_id, "u2", 99) == 3
    assert await store.reading.mark_seen(group_id, "u2", 1) == 3
    assert await store.reading.mark_seen(group_id, "u3", 2) == 2
    assert await store.reading.get_seen(group_id, "u3") == 2
    with pytest.raises(NotFound):
        await store.reading.mark_seen(999, "u1", 1)


# agents ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "existing, new", [("planner", "PLANNER"), ("Émile", "émile"), ("Straße", "STRASSE"), ("Ωmega", "ωMEGA"),
                      ("planner", "pl\u0430nner"), ("Café", "CAFE\u0301"), ("copy", "\u0441\u043e\u0440\u0443")]
)
async def test_duplicate_agent_names_are_case_insensitive(
    store: SqlStore, group_id: int, existing: str, new: str
) -> None:
    await store.roster.add_agent(group_id, existing, "r", "p")
    with pytest.raises(InvalidInput, match=existing):
        await store.roster.add_agent(group_id, new, "r", "p")
    if unicodedata.normalize("NFC", new).casefold() == existing.casefold():  # a look-alike is refused, not found
        found = await store.roster.find_agent(group_id, new)
        assert found is not None and found.name == existing


async def test_roster_order_removal_and_name_reuse(store: SqlStore, group_id: int) -> None:
    await store.thread.append_user_message(group_id, user())
    a = await store.roster.add_agent(group_id, "alpha", "r", "p", model="m1", avatar_url="http://x/a.png")
    b = await store.roster.add_agent(group_id, "beta", "r", "p")
    c = await store.roster.add_agent(group_id, "gamma", "r", "p")
    assert (a.position, b.position, c.position, a.delivered_through) == (1, 2, 3, 1)
    assert (a.model, a.avatar_url) == ("m1", "http://x/a.png")
    await store.roster.update_agent(c.id, position=0)
    await store.roster.update_agent(b.id, enabled=False)
    assert [x.name for x in await store.roster.list_agents(group_id)] == ["gamma", "alpha", "beta"]
    assert [x.name for x in await store.roster.list_agents(group_id, enabled_only=True)] == ["gamma", "alpha"]
    said = await posted(store, group_id, a.id, snapshot=1)
    await store.roster.remove_agent(a.id)
    assert await store.roster.find_agent(group_id, "alpha") is None
    with pytest.raises(NotFound):
        await store.roster.get_agent(a.id)
    with pytest.raises(NotFound):
        await store.roster.remove_agent(a.id)
    again = await store.roster.add_agent(group_id, "ALPHA", "new role", "p")
    assert again.id != a.id and again.position == 3 and again.delivered_through == 2  # beta (2) is last
    assert (await store.thread.get_message(group_id, said.seq)).author_agent_id == a.id


async def test_update_agent_fields_and_collisions(store: SqlStore, group_id: int) -> None:
    a = await store.roster.add_agent(group_id, "alpha", "r", "p")
    await store.roster.add_agent(group_id, "Émile", "r", "p")
    with pytest.raises(InvalidInput, match="Émile"):
        await store.roster.update_agent(a.id, name="ÉMILE")
    with pytest.raises(InvalidInput, match="colour"):
        await store.roster.update_agent(a.id, colour="red")  # type: ignore[call-arg]  # what an untyped caller may pass
    renamed = await store.roster.update_agent(a.id, name="Alpha", role="lead", system_prompt="s", model=None)
    assert (renamed.name, renamed.role, renamed.system_prompt) == ("Alpha", "lead", "s")
    with pytest.raises(InvalidInput):
        await store.roster.add_agent(group_id, "  ", "r", "p")
    with pytest.raises(NotFound):
        await store.roster.update_agent(999, role="x")


async def test_mute_and_model_settings_round_trip_and_clear(store: SqlStore, group_id: int) -> None:
    a = await store.roster.add_agent(group_id, "alpha", "r", "p")
    assert (a.muted_until, a.temperature, a.max_tokens, a.context_budget) == (None, None, None, None)
    changed = await store.roster.update_agent(a.id, muted_until=MUTED_FOREVER, temperature=0.25, max_tokens=128_000,
                                              context_budget=1500)
    again = await store.roster.get_agent(a.id)
    assert changed == again
    assert (again.muted_until, again.temperature, again.max_tokens, again.context_budget) == (
        MUTED_FOREVER, 0.25, 128_000, 1500)
    assert again.muted(now=2e9) and not again.available(now=2e9)
    timed = await store.roster.update_agent(a.id, muted_until=1000.5, temperature=None)
    assert (timed.muted_until, timed.temperature, timed.max_tokens) == (1000.5, None, 128_000)
    assert timed.muted(now=1000.0) and not timed.muted(now=1000.5)  # over by itself when the time is up
    cleared = await store.roster.update_agent(a.id, muted_until=None, max_tokens=None, context_budget=None)
    assert (cleared.muted_until, cleared.max_tokens, cleared.context_budget) == (None, None, None)
    assert cleared.available(now=1000.0)


async def test_delivered_through_only_moves_forward_and_stops_at_latest(store: SqlStore, group_id: int) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    for _ in range(4):
        await store.thread.append_user_message(group_id, user())
    await store.roster.set_delivered_through(agent.id, 3)
    await store.roster.set_delivered_through(agent.id, 1)
    assert (await store.roster.get_agent(agent.id)).delivered_through == 3
    await store.roster.set_delivered_through(agent.id, 50)
    assert (await store.roster.get_agent(agent.id)).delivered_through == 4


# decisions ------------------------------------------------------------------


async def test_decisions_round_trip_once(store: SqlStore, group_id: int) -> None:
    await store.thread.append_user_message(group_id, user())
    decision = Decision(
        seq=1, source="selector", agent_ids=(3, 1), agent_names=("c", "a"), selector_raw=("??", "c"),
        attempts=2, confidence=None, usage=Usage(40, 3, 8, estimated=True), terminate=True, note="retried",
        created_at=55.0,
    )
    await store.routing.record_decision(group_id, decision)
    await store.routing.record_decision(group_id, Decision(seq=1, source="tags"))
    assert await store.routing.get_decision(group_id, 1) == decision
    assert await store.routing.get_decision(group_id, 2) is None
    with pytest.raises(NotFound):
        await store.routing.record_decision(group_id, Decision(seq=2, source="none"))
    stamped = Decision(seq=1, source="x", confidence=0.25)
    assert stamped.created_at == 0.0


async def test_rows_stay_unrouted_until_a_gap_fills(store: SqlStore, group_id: int) -> None:
    for _ in range(5):
        await store.thread.append_user_message(group_id, user())
    assert [m.seq for m in await store.routing.unrouted(group_id, through=5)] == [1, 2, 3, 4, 5]
    assert [m.seq for m in await store.routing.unrouted(group_id, through=3)] == [1, 2, 3]
    for seq, routed in [(1, 1), (2, 2), (4, 2), (5, 2), (3, 5)]:
        await store.routing.record_decision(group_id, Decision(seq=seq, source="tags", confidence=0.5))
        assert [m.seq for m in await store.routing.unrouted(group_id, through=5)] == list(range(routed + 1, 6))
    got = await store.routing.decisions(group_id, after=1, through=4)
    assert sorted(got) == [2, 3, 4] and got[2].confidence == 0.5 and got[2].created_at > 0



async def test_a_chunk_of_decisions_is_one_write_and_routes_through_what_follows(
        store: SqlStore, group_id: int) -> None:
    for _ in range(250):
        await store.thread.append_user_message(group_id, user())
    await store.routing.record_decisions(group_id, [Decision(seq=s, source="none") for s in range(200,
                                                                                                  251)])  # after a gap
    assert [m.seq for m in await store.routing.unrouted(group_id, through=250, limit=3)] == [1, 2, 3]
    await store.routing.record_decisions(group_id, [Decision(seq=s, source="superseded") for s in range(1, 200)]
                                         + [Decision(seq=200, source="tags")])  # 200 is decided already: kept
    assert await store.routing.unrouted(group_id, through=250) == []  # the gap filled: routed through 250
    decisions = await store.routing.decisions(group_id, after=0, through=250)
    assert len(decisions) == 250 and decisions[200].source == "none" and decisions[199].source == "superseded"
    with pytest.raises(NotFound):
        await store.routing.record_decisions(group_id, [Decision(seq=251, source="none")])


# confirmation and external ids ------------------------------------------------


async def test_parts_recorded_confirmation_and_external_id_lookups(store: SqlStore, group_id: int) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    mine, _ = await store.thread.append_user_message(group_id, user(ids=("900",)))
    first = await posted(store, group_id, agent.id)
    second = await posted(store, group_id, agent.id)
    note = await store.thread.append_system_message(group_id, notice())
    assert (mine.confirmed, first.confirmed, second.confirmed, note.confirmed) == (True, False, False, False)
    assert [m.seq for m in await store.posting.unconfirmed_messages(group_id)] == [2, 3, 4]
    await store.posting.record_posted(group_id, 2, "10000")
    await store.posting.record_posted(group_id, 2, "999")
    await store.posting.record_posted(group_id, 2, "999")  # recorded once
    assert [m.seq for m in await store.posting.unconfirmed_messages(group_id)] == [2, 3, 4]  # parts are not the whole
    await store.posting.confirm_message(group_id, 2)
    assert [m.seq for m in await store.posting.unconfirmed_messages(group_id)] == [3, 4]
    confirmed = await store.thread.get_message(group_id, 2)
    assert (confirmed.confirmed, confirmed.external_ids) == (True, ("10000", "999"))
    found = await store.thread.find_message_by_external_id("999")
    assert found is not None and found.seq == 2
    assert await store.thread.find_message_by_external_id("nope") is None
    assert await store.thread.last_external_id(group_id) == "10000"
    assert await store.thread.last_external_id(group_id, before_seq=2) == "900"
    assert await store.thread.last_external_id(group_id, before_seq=1) is None
    with pytest.raises(AlreadyStored, match="already stored"):
        await store.thread.append_user_message(group_id, user(ids=("900",)))
    with pytest.raises(AlreadyStored):
        await store.posting.record_posted(group_id, 3, "900")
    assert (await store.groups.get_group(group_id)).latest_seq == 4
    with pytest.raises(NotFound):
        await store.posting.confirm_message(group_id, 99)


async def test_our_post_taken_in_as_a_persons_row_moves_to_the_agent_row(store: SqlStore, group_id: int) -> None:
    agent = await store.roster.add_agent(group_id, "a", "r", "p")
    reply = await posted(store, group_id, agent.id)
    copy, _ = await store.thread.append_user_message(group_id, user("reply", ids=("500", "501")))
    with pytest.raises(AlreadyStored):
        await store.posting.record_posted(group_id, reply.seq, "500")
    assert await store.posting.take_posted(group_id, reply.seq, "500") == copy.seq
    assert (await store.thread.get_message(group_id, reply.seq)).external_ids == ("500",)
    assert (await store.thread.get_message(group_id, copy.seq)).external_ids == ("501",)  # the row stays
    assert (await store.thread.find_message_by_external_id("500")).seq == reply.seq  # type: ignore[union-attr]
    assert await store.posting.take_posted(group_id, reply.seq, "500") is None  # recorded already
    assert await store.posting.take_posted(group_id, reply.seq, "502") is None  # nobody held it: recorded
    assert (await store.thread.get_message(group_id, reply.seq)).external_ids == ("500", "502")
    note = await store.thread.append_system_message(group_id, notice())
    with pytest.raises(AlreadyStored):  # another row of ours holds it: left alone
        await store.posting.take_posted(group_id, note.seq, "500")
    assert (await store.thread.get_message(group_id, note.seq)).external_ids == ()


async def test_watermark_moves_forward_only(store: SqlStore, group_id: int) -> None:
    assert (await store.groups.get_group(group_id)).watermark is None
    for message_id, expected in [("1000", "1000"), ("999", "1000"), ("20000", "20000"), ("3000", "20000"),
                                 ("100000000000000000", "100000000000000000")]:
        await store.groups.advance_watermark(group_id, message_id)
        assert (await store.groups.get_group(group_id)).watermark == expected
    with pytest.raises(ValueError, match="invalid literal"):
        await store.groups.advance_watermark(group_id, "not-a-number")


async def test_delivery_problem_is_set_once_and_cleared(store: SqlStore, group_id: int) -> None:
    assert await store.groups.set_delivery_problem(group_id, "Missing Permissions") is True
    assert await store.groups.set_delivery_problem(group_id, "Missing Permissions") is False
    assert (await store.groups.get_group(group_id)).delivery_problem == "Missing Permissions"
    assert await store.groups.set_delivery_problem(group_id, None) is True
    assert await store.groups.set_delivery_problem(group_id, None) is False


async def test_messages_round_trip_and_ranges(store: SqlStore, group_id: int) -> None:
    tags = Tags(agent_ids=(1, 2), agent_names=("a", "b"), user_ids=("u9",), operators=True, all_agents=True)
    msg = NewMessage("user", "Zoë", "hi @a 🎉", tags=tags, author_user_id="u1", token_count=7)
    stored, _ = await store.thread.append_user_message(group_id, msg)
    for _ in range(3):
        await store.thread.append_system_message(group_id, notice())
    assert await store.thread.get_message(group_id, 1) == stored
    assert stored.tags == tags and stored.token_count == 7
    assert [m.seq for m in await store.thread.messages(group_id, after=1)] == [2, 3, 4]
    assert [m.seq for m in await store.thread.messages(group_id, after=1, through=3)] == [2, 3]
    assert await store.thread.last_external_id(group_id) is None
    with pytest.raises(NotFound):
        await store.thread.get_message(group_id, 5)


# runs and usage ---------------------------------------------------------------


async def test_runs_usage_and_interrupts(place: Place) -> None:
    clock = FakeClock(0.0)
    async with await place.open(clock=clock) as store:
        group = await store.groups.create_group("k", "n", GroupSettings())
        other = await store.groups.create_group("k2", "n2", GroupSettings())
        a = await store.roster.add_agent(group.id, "a", "r", "p")
        b = await store.roster.add_agent(group.id, "b", "r", "p")
        c = await store.roster.add_agent(other.id, "c", "r", "p")
        await store.thread.append_user_message(group.id, user())
        await store.thread.append_user_message(other.id, user())
        await agent_reply(store, group.id, a.id, usage=Usage(1000, 1000))
        since = clock.now
        await store.routing.record_decision(group.id, Decision(seq=1, source="selector", usage=Usage(7, 1, 2)))
        await agent_reply(store, group.id, a.id, usage=Usage(100, 20, 50))
        failed = await store.runs.start_run(group.id, b.id, "direct", 1)
        await store.runs.finish_run(failed.id, RunResult("failed", Usage(5, 0, estimated=True), error="timeout"), cap=5)
        stuck = await store.runs.start_run(group.id, b.id, "group", 1)
        elsewhere = await store.runs.start_run(other.id, c.id, "group", 1)
        assert await store.runs.interrupt_running_runs(group.id) == 1  # only that group's
        assert await store.runs.interrupt_running_runs(group.id) == 0
        usage = await store.spending.usage_since(group.id, since)
        assert usage == {"a": Usage(100, 20, 50), "b": Usage(5, 0, 0, True), "selector": Usage(7, 1, 2)}
        assert (await store.runs.get_run(stuck.id)).status == "interrupted"
        assert (await store.runs.get_run(elsewhere.id)).status == "running"
        with pytest.raises(InvalidInput):
            await store.runs.start_run(group.id, a.id, "solo", 1)
        with pytest.raises(NotFound):
            await store.runs.start_run(group.id, 999, "group", 1)
        with pytest.raises(NotFound):
            await store.runs.start_run(group.id, c.id, "group", 1)  # an agent of another group


# leases -----------------------------------------------------------------------


async def test_one_owner_per_group_until_released_or_expired(place: Place) -> None:
    clock = FakeClock(0.0)
    async with await place.open(clock=clock) as bot, await place.open(clock=clock) as console:
        bot.owner_label, console.owner_label = "discord bot", "console"
        group = await bot.groups.create_group("k", "n", GroupSettings())
        agent = await bot.roster.add_agent(group.id, "a", "r", "p")
        await bot.thread.append_user_message(group.id, user())
        assert await bot.leases.acquire_lease(group.id, ttl=30) is None
        assert await bot.leases.acquire_lease(group.id, ttl=30) is None  # ours already
        holder = await console.leases.acquire_lease(group.id, ttl=30)
        assert holder is not None and holder.startswith("discord bot (pid ")
        assert await console.leases.leased_elsewhere(group.id) and not await bot.leases.leased_elsewhere(group.id)
        with pytest.raises(LeaseLost):
            await console.runs.start_run(group.id, agent.id, "group", 1)
        run = await bot.runs.start_run(group.id, agent.id, "group", 1)
        assert await console.leases.renew_leases([group.id], ttl=30) == set()
        assert await bot.leases.renew_leases([group.id, 999], ttl=30) == {group.id}
        clock.now += 100  # the bot stopped renewing: the lease expires
        assert await console.leases.acquire_lease(group.id, ttl=30) is None
        assert await bot.leases.renew_leases([group.id], ttl=30) == set()
        with pytest.raises(LeaseLost):  # the old owner can no longer post for the group
            await bot.runs.finish_run(run.id, RunResult("posted", reply=agent_msg(agent.id)), cap=5)
        assert (await bot.groups.get_group(group.id)).latest_seq == 1
        await console.leases.release_leases()
        assert await bot.leases.acquire_lease(group.id, ttl=30) is None


async def test_a_dead_holder_on_this_host_is_taken_over_at_once(place: Place) -> None:
    async with await place.open() as store:
        group = await store.groups.create_group("k", "n", GroupSettings())
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        await place.execute(
            "INSERT INTO leases (group_id, owner, label, acquired_at, expires_at) VALUES (?, ?, ?, ?, ?)",
            (group.id, f"{socket.gethostname()}|{dead.pid}|x", "console", time.time(), time.time() + 999))
        assert await store.leases.acquire_lease(group.id, ttl=30) is None
        await place.execute("UPDATE leases SET owner = ?, label = 'console' WHERE group_id = ?",
                            (f"elsewhere|{dead.pid}|x", group.id))
        assert await store.leases.acquire_lease(group.id, ttl=30) == f"console (pid {dead.pid} on elsewhere)"


# webhooks -------------------------------------------------------------------


async def test_webhooks_save_replace_forget(store: SqlStore) -> None:
    assert await store.webhooks.get_webhook("c1") is None
    await store.webhooks.save_webhook("c1", "w1", "t1")
    await store.webhooks.save_webhook("c1", "w2", "t2")
    assert await store.webhooks.get_webhook("c1") == ("w2", "t2")
    await store.webhooks.forget_webhook("c1")
    await store.webhooks.forget_webhook("c1")
    assert await store.webhooks.get_webhook("c1") is None


# interactions ---------------------------------------------------------------


async def test_an_interaction_is_taken_by_one_of_two_processes_and_old_ids_are_dropped(place: Place) -> None:
    clock = FakeClock(0.0)
    async with await place.open(clock=clock) as a, await place.open(clock=clock) as b:
        taken = await asyncio.gather(*(s.interactions.claim_interaction(f"i{n}") for n in range(5) for s in (a, b)))
        assert [taken[i] + taken[i + 1] for i in range(0, 10, 2)] == [1] * 5  # one of the two, for each id
        assert not await a.interactions.claim_interaction("i0") and not await b.interactions.claim_interaction("i0")
        clock.now += 2 * 24 * 3600
        assert await a.interactions.claim_interaction("new")
        assert await place.fetch("SELECT id FROM interactions") == [("new",)]


# failures -------------------------------------------------------------------


async def test_a_locked_database_is_a_store_error_and_loses_no_seq(place: Place) -> None:
    async with await place.open(busy_timeout_ms=50) as store:
        group = await store.groups.create_group("k", "n", GroupSettings())
        agent = await store.roster.add_agent(group.id, "a", "r", "p")
        await store.thread.append_user_message(group.id, user())
        async with place.hold_write_lock():
            with pytest.raises(StoreBusy, match="locked") as info:  # nothing was written: safe to try again
                await store.thread.append_user_message(group.id, user("blocked"))
            assert str(info.value) == LOCKED_MESSAGE
            with pytest.raises(StoreError, match="locked"):
                await store.runs.start_run(group.id, agent.id, "group", 1)
            assert (await store.groups.get_group(group.id)).latest_seq == 1  # reads still work (WAL)
        second, _ = await store.thread.append_user_message(group.id, user("after"))
        assert second.seq == 2
        assert [m.seq for m in await store.thread.messages(group.id)] == [1, 2]


async def test_a_closed_store_raises_store_error(place: Place) -> None:
    store = await place.open()
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.groups.list_groups()
    with pytest.raises(StoreError, match="closed"):
        await store.groups.create_group("k", "n", GroupSettings())


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 5, 8])
async def test_a_cancelled_append_leaves_no_open_transaction(store: SqlStore, group_id: int, steps: int) -> None:
    task = asyncio.create_task(store.thread.append_user_message(group_id, user("maybe")))
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    latest = (await store.groups.get_group(group_id)).latest_seq
    stored, _ = await store.thread.append_user_message(group_id, user("next"))
    assert stored.seq == latest + 1
    assert [m.seq for m in await store.thread.messages(group_id)] == list(range(1, latest + 2))
