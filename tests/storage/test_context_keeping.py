"""The store's part of what prompts keep (issue 22): rolling summaries by the last row they cover, and
the earlier episodes a follow-up continues (`bot.core.features.tasks.TaskChains` over a real store)."""
from __future__ import annotations

import pytest

from bot.core.features.tasks import LOOKBACK, MAX_EARLIER, TaskChains
from bot.core.models import ContextSummary, GroupSettings, NewMessage, Tags, Usage
from bot.core.rules.schedule import When
from storage import SqlStore
from tests.fakes.databases import Place


@pytest.fixture
async def store(place: Place):
    async with await place.open() as opened:
        yield opened


async def test_a_summary_is_found_by_its_last_row_and_a_second_call_adds_its_cost(store: SqlStore):
    group = await store.groups.create_group("g", "g", GroupSettings())
    assert await store.summaries.context_summary(group.id, through=50) is None
    await store.summaries.save_context_summary(group.id, ContextSummary(10, 0, "first ten", 12, model="m"), Usage(100,
                                                                                                                  20,
                                                                                                                  0))
    await store.summaries.save_context_summary(group.id, ContextSummary(30, 10, "through thirty", 14, 2, "m"), Usage(90,
                                                                                                                     20,
                                                                                                                     64))
    assert (await store.summaries.context_summary(group.id, through=9)) is None
    assert (await store.summaries.context_summary(group.id, through=10)).text == "first ten"  # type: ignore[union-attr]
    found = await store.summaries.context_summary(group.id, through=29)  # the newest at or before: the one to roll from
    assert found is not None and (found.through, found.after, found.text) == (10, 0, "first ten")
    newest = await store.summaries.context_summary(group.id, through=99)
    assert newest is not None and (newest.through, newest.after, newest.omitted, newest.token_count) == (30, 10, 2, 14)
    await store.summaries.save_context_summary(group.id, ContextSummary(30, 10, "again", 5, model="m2"), Usage(80, 10,
                                                                                                               0))
    again = await store.summaries.context_summary(group.id, through=30)
    assert again is not None and (again.text, again.model) == ("again", "m2")
    spent = [s for s in await store.spending.spending(group.id, 0) if s.kind == "summary"]
    assert [(s.who, s.model, s.calls, s.usage) for s in spent] == [
        ("rolling summary", "m", 1, Usage(100, 20, 0)), ("rolling summary", "m2", 2, Usage(170, 30, 64))]


async def say(store: SqlStore, group_id: int, text: str) -> int:
    _message, episode = await store.thread.append_user_message(group_id, NewMessage("user", "alice", text,
                                                                                   author_user_id="alice"))
    return episode.id


async def test_a_follow_up_continues_the_open_tasks_back_to_one_that_was_done(store: SqlStore):
    group = await store.groups.create_group("g", "g", GroupSettings(followup_window=0))  # by how episodes ended only
    done = await say(store, group.id, "an old task")
    await store.episodes.end_episode(done, "terminated")
    capped = await say(store, group.id, "Plan Tokyo")
    await store.episodes.end_episode(capped, "max_turns")
    stalled = await say(store, group.id, "cheaper please")
    await store.episodes.end_episode(stalled, "stalled")
    await say(store, group.id, "and add a museum")  # superseded by the next
    current = await say(store, group.id, "keep going")
    tasks = await TaskChains(store).of(group.id, current)
    assert tasks.current is not None and tasks.current.text == "keep going"
    assert [m.text for m in tasks.earlier] == ["Plan Tokyo", "cheaper please", "and add a museum"]
    assert [m.text for m in tasks.all][-1] == "keep going"
    slot = tasks.slot()
    assert slot.startswith("Earlier requests this continues (oldest first):\n[alice] Plan Tokyo\n")
    assert slot.endswith("Current request:\n[alice] keep going")
    first = await TaskChains(store).of(group.id, capped)
    assert first.earlier == () and first.slot() == "Plan Tokyo"  # the terminated one is not continued


async def test_a_quiet_episode_or_a_schedules_task_breaks_the_chain(store: SqlStore):
    group = await store.groups.create_group("g", "g", GroupSettings(followup_window=0))  # by how episodes ended only
    quiet = await say(store, group.id, "asked and answered")
    await store.episodes.end_episode(quiet, "quiet")
    current = await say(store, group.id, "next")
    assert (await TaskChains(store).of(group.id, current)).earlier == ()
    agent = await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
    await say(store, group.id, "open before the schedule")
    schedule = await store.schedules.add_schedule(agent.id, When(every_seconds=3600), "sum up", next_run_at=100.0)
    fired = await store.schedules.fire_schedule(schedule, NewMessage("system", "roundtable",
                                                                     "Scheduled for @planner: sum up",
                                                                     tags=Tags((agent.id,), ("planner",))),
                                                ran_at=150.0, next_run_at=3700.0)
    assert fired is not None
    assert (await TaskChains(store).of(group.id, fired[1].id)).earlier == ()  # a schedule continues nothing
    follow = await say(store, group.id, "after it")
    assert (await TaskChains(store).of(group.id, follow)).earlier == ()  # nor is it continued, nor past it


async def test_the_chain_is_bounded_the_original_and_the_newest_kept(store: SqlStore):
    group = await store.groups.create_group("g", "g", GroupSettings())
    for i in range(LOOKBACK + 5):
        await say(store, group.id, f"ask {i}")  # each supersedes the one before
    current = await say(store, group.id, "now")
    earlier = [m.text for m in (await TaskChains(store).of(group.id, current)).earlier]
    assert len(earlier) == MAX_EARLIER
    assert earlier[0] == "ask 5"  # the oldest within LOOKBACK episodes: the original as far as the chain reaches
    assert earlier[1:] == [f"ask {i}" for i in range(LOOKBACK + 5 - MAX_EARLIER + 1, LOOKBACK + 5)]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def chain(store: SqlStore, group_id: int, episode_id: int) -> list[str]:
    """The earlier tasks the episode continues, read afresh (as after a restart), oldest first."""
    return [m.text for m in (await TaskChains(store).of(group_id, episode_id)).earlier]


@pytest.mark.parametrize("ended", ["terminated", "quiet"])
@pytest.mark.parametrize("window, after_minutes, continued", [
    (120, 1, True), (120, 119.5, True), (120, 120.5, False), (30, 31, False), (0, 0.01, False)])
async def test_a_follow_up_within_followup_window_continues_work_however_it_ended(
        place: Place, ended: str, window: int, after_minutes: float, continued: bool):
    clock = Clock()
    async with await place.open(clock=clock) as store:
        group = await store.groups.create_group("g", "g", GroupSettings(followup_window=window))
        first = await say(store, group.id, "[TASK1] Plan a 3-day Tokyo trip")
        clock.now += 600
        await store.episodes.end_episode(first,
                                         ended)  # TERMINATE, or tags mode's quiet end: both used to end the chain
        clock.now += after_minutes * 60
        follow = await say(store, group.id, "now make it 4 days")
        assert await chain(store, group.id, follow) == (["[TASK1] Plan a 3-day Tokyo trip"] if continued else [])


async def test_each_link_of_the_chain_is_judged_by_its_own_gap(place: Place):
    clock = Clock()
    async with await place.open(clock=clock) as store:
        group = await store.groups.create_group("g", "g", GroupSettings(followup_window=60))
        old = await say(store, group.id, "an old task")
        await store.episodes.end_episode(old, "terminated")
        clock.now += 3 * 3600  # past the window: the next one starts fresh
        first = await say(store, group.id, "[TASK1] Plan Tokyo")
        clock.now += 300
        await store.episodes.end_episode(first, "terminated")
        clock.now += 1800
        second = await say(store, group.id, "now make it 4 days")
        clock.now += 300
        await store.episodes.end_episode(second, "quiet")
        clock.now += 1800
        third = await say(store, group.id, "and cheaper")
        assert await chain(store, group.id, third) == ["[TASK1] Plan Tokyo", "now make it 4 days"]


async def test_newtask_makes_the_next_message_start_fresh_and_it_holds_after_a_restart(place: Place):
    clock = Clock()
    async with await place.open(clock=clock) as store:
        group = await store.groups.create_group("g", "g", GroupSettings())
        first = await say(store, group.id, "[TASK1] Plan Tokyo")
        await store.episodes.end_episode(first, "terminated")
        await store.episodes.break_tasks(group.id)
        await store.episodes.break_tasks(group.id)  # twice with nothing between: one break
        fresh = await say(store, group.id, "Plan Osaka instead")  # within the window, yet fresh
        await store.episodes.end_episode(fresh, "max_turns")  # unfinished work would continue at any time, too
        follow = await say(store, group.id, "and add Nara")  # continues Osaka, not Tokyo
        await store.episodes.end_episode(follow, "terminated")
        await store.episodes.break_tasks(group.id)
        later = await say(store, group.id, "something else")
    async with await place.open(clock=clock) as store:  # a restart: the breaks are kept
        assert await chain(store, group.id, fresh) == []
        assert await chain(store, group.id, follow) == ["Plan Osaka instead"]
        assert await chain(store, group.id, later) == []
        assert await store.episodes.task_breaks(group.id, from_seq=0, before_seq=99) == [1, 3]


async def test_a_reply_to_a_message_of_earlier_work_continues_it_past_the_window(place: Place):
    clock = Clock()
    async with await place.open(clock=clock) as store:
        group = await store.groups.create_group("g", "g", GroupSettings(followup_window=30))
        first = await say(store, group.id, "[TASK1] Plan Tokyo")
        answer = await store.thread.append_system_message(group.id, NewMessage("system", "roundtable",
                                                                               "a row of that work"))
        await store.episodes.end_episode(first, "terminated")
        clock.now += 5 * 3600
        other = await say(store, group.id, "unrelated: what is the weather?")
        await store.episodes.end_episode(other, "terminated")
        clock.now += 5 * 3600
        _m, episode = await store.thread.append_user_message(group.id, NewMessage(
            "user", "bob", "make it 4 days", author_user_id="bob", reply_to_seq=answer.seq))
        assert (await store.thread.get_message(group.id, episode.task_seq)).reply_to_seq == answer.seq
        assert await chain(store, group.id, episode.id) == ["[TASK1] Plan Tokyo"]  # over the unrelated one
        await store.episodes.end_episode(episode.id, "terminated")
        clock.now += 5 * 3600
        plain = await say(store, group.id, "and then?")  # neither a reply nor within the window
        assert await chain(store, group.id, plain) == []
