"""The store's schedules (SQLite file and PostgreSQL schema): add, list, remove, due, firing in one transaction."""
from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.core.errors import AlreadyStored, InvalidInput, NotFound
from bot.core.models import GroupSettings, NewMessage, Tags
from bot.core.rules.schedule import When
from storage.store import SqlStore
from tests.fakes.databases import Place

HOURLY = When(every_seconds=3600)


@pytest.fixture
async def store(place: Place) -> AsyncIterator[SqlStore]:
    async with await place.open() as opened:
        yield opened


async def setup(store: SqlStore) -> tuple[int, int]:
    group = await store.groups.create_group("test:g", "g", GroupSettings())
    agent = await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
    return group.id, agent.id


def task(agent_id: int, text: str = "⏰ Scheduled for @planner: sum up", **extra: object) -> NewMessage:
    return NewMessage("system", "roundtable", text, tags=Tags(agent_ids=(agent_id,), agent_names=("planner",)),
                      **extra)  # type: ignore[arg-type]


async def test_add_list_remove(store: SqlStore) -> None:
    group_id, agent_id = await setup(store)
    daily = await store.schedules.add_schedule(agent_id, When(at_time="09:00", tz="Europe/Paris"), "plan the day",
                                               next_run_at=500.0, created_by="alice")
    hourly = await store.schedules.add_schedule(agent_id, HOURLY, "sum up", next_run_at=100.0)
    assert daily.group_id == group_id and daily.when.tz == "Europe/Paris" and daily.created_by == "alice"
    assert [s.id for s in await store.schedules.schedules(group_id)] == [daily.id, hourly.id]
    assert [s.id for s in await store.schedules.due_schedules(200.0)] == [hourly.id]
    assert [s.id for s in await store.schedules.due_schedules(500.0)] == [hourly.id, daily.id]  # earliest first
    assert (await store.schedules.next_schedule(group_id)) == hourly
    assert (await store.schedules.remove_schedule(group_id, hourly.id)).id == hourly.id
    assert [s.id for s in await store.schedules.schedules(group_id)] == [daily.id]
    with pytest.raises(NotFound, match=f"no schedule #{hourly.id} here"):
        await store.schedules.remove_schedule(group_id, hourly.id)  # removed already
    with pytest.raises(NotFound, match="no schedule #99 here"):
        await store.schedules.remove_schedule(group_id, 99)
    other = await store.groups.create_group("test:other", "other", GroupSettings())
    with pytest.raises(NotFound):
        await store.schedules.remove_schedule(other.id, daily.id)  # another group's schedule is not removed from here


async def test_a_schedule_needs_one_rule_and_an_agent_on_the_roster(store: SqlStore) -> None:
    _group_id, agent_id = await setup(store)
    with pytest.raises(InvalidInput):
        await store.schedules.add_schedule(agent_id, When(), "x", next_run_at=1.0)
    with pytest.raises(InvalidInput):
        await store.schedules.add_schedule(agent_id, When(every_seconds=3600, at_time="09:00"), "x", next_run_at=1.0)
    with pytest.raises(NotFound):
        await store.schedules.add_schedule(agent_id + 1, HOURLY, "x", next_run_at=1.0)


async def test_firing_appends_the_task_as_a_new_episode_and_moves_the_schedule(store: SqlStore) -> None:
    group_id, agent_id = await setup(store)
    await store.thread.append_user_message(group_id, NewMessage("user", "alice", "hello", author_user_id="alice"))
    before = await store.groups.get_group(group_id)
    schedule = await store.schedules.add_schedule(agent_id, HOURLY, "sum up", next_run_at=100.0)
    fired = await store.schedules.fire_schedule(schedule, task(agent_id), ran_at=150.0, next_run_at=3700.0)
    assert fired is not None
    message, episode = fired
    assert message.seq == 2 and message.author_type == "system" and message.tags.agent_ids == (agent_id,)
    assert episode.task_seq == 2 and message.episode_id == episode.id != before.episode_id
    assert (await store.episodes.get_episode(before.episode_id or 0)).status == "superseded"
    group = await store.groups.get_group(group_id)
    assert group.episode_id == episode.id and group.agent_streak == 0
    moved = await store.schedules.get_schedule(schedule.id)
    assert (moved.next_run_at, moved.last_run_at) == (3700.0, 150.0)
    assert not (await store.thread.get_message(group_id, 2)).confirmed  # the surface shows it (the bot posts it)


async def test_a_slot_fires_once(store: SqlStore) -> None:
    """Two firings of the same slot (a restart racing a tick, two processes): the second writes nothing."""
    group_id, agent_id = await setup(store)
    schedule = await store.schedules.add_schedule(agent_id, HOURLY, "sum up", next_run_at=100.0)
    assert await store.schedules.fire_schedule(schedule, task(agent_id), ran_at=150.0, next_run_at=3700.0) is not None
    assert await store.schedules.fire_schedule(schedule, task(agent_id), ran_at=151.0, next_run_at=3700.0) is None
    assert (await store.groups.get_group(group_id)).latest_seq == 1
    removed = await store.schedules.add_schedule(agent_id, HOURLY, "gone", next_run_at=100.0)
    await store.schedules.remove_schedule(group_id, removed.id)
    assert await store.schedules.fire_schedule(removed, task(agent_id), ran_at=150.0, next_run_at=3700.0) is None
    assert (await store.groups.get_group(group_id)).latest_seq == 1


async def test_a_failed_append_leaves_the_schedule_due(store: SqlStore) -> None:
    """Either both happen or neither: a task that cannot be stored does not move the schedule."""
    group_id, agent_id = await setup(store)
    await store.thread.append_user_message(group_id, NewMessage("user", "alice", "hi", external_ids=("42",)))
    schedule = await store.schedules.add_schedule(agent_id, HOURLY, "sum up", next_run_at=100.0)
    with pytest.raises(AlreadyStored):
        await store.schedules.fire_schedule(schedule, task(agent_id, external_ids=("42",)), ran_at=150.0,
                                            next_run_at=3700.0)
    still = await store.schedules.get_schedule(schedule.id)
    assert (still.next_run_at, still.last_run_at) == (100.0, None)
    assert (await store.groups.get_group(group_id)).latest_seq == 1
    assert [s.id for s in await store.schedules.due_schedules(150.0)] == [schedule.id]


async def test_removing_an_agent_removes_its_schedules(store: SqlStore) -> None:
    group_id, agent_id = await setup(store)
    await store.schedules.add_schedule(agent_id, HOURLY, "sum up", next_run_at=100.0)
    await store.roster.remove_agent(agent_id)
    assert await store.schedules.schedules(group_id) == [] and await store.schedules.due_schedules(1e12) == []


async def test_schedules_survive_reopening(place: Place) -> None:
    async with await place.open() as store:
        group_id, agent_id = await setup(store)
        added = await store.schedules.add_schedule(agent_id, When(at_time="07:30", tz="Asia/Tokyo"), "news",
                                                   next_run_at=9.0)
    async with await place.open() as store:
        assert await store.schedules.schedules(group_id) == [added]
