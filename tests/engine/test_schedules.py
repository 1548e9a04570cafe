"""Schedules with an injected clock: a real SQLite file, the scripted LLM, the real engine and ticker."""
from __future__ import annotations

import asyncio
import io
import logging

import pytest

from bot.core.errors import InvalidInput
from bot.core.models import Agent, Message
from bot.core.record.export import write_export
from bot.core.record.replay import replay_message
from bot.core.rules.schedule import When
from bot.core.runtime.scheduler import task_text
from tests.engine.conftest import Harness
from tests.support import eventually

HOUR = 3600.0
T0 = 1_800_000_000.0  # 2027-01-15, a fixed point for the fake clock


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def scheduled(harness: Harness, clock: FakeClock) -> Harness:
    harness.engine_options = {"clock": clock}
    return harness


async def planner(h: Harness) -> Agent:
    agent = await h.store.roster.find_agent(h.group.id, "planner")
    assert agent is not None
    return agent


async def tasks(h: Harness) -> list[Message]:
    """The rows fired by schedules: the bot's rows that tag an agent."""
    return [m for m in await h.store.thread.messages(h.group.id) if m.author_type == "system" and m.tags.agent_ids]


def asked(h: Harness, name: str, text: str) -> int:
    """How many of `name`'s model calls carried `text`."""
    return sum(1 for kind, who, messages in h.llm.history
               if kind == "participant" and who == name and any(text in m.content for m in messages))


async def test_due_while_busy_is_delayed_then_runs_once(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bot.core.runtime.scheduler")
    clock = FakeClock()
    h = scheduled(harness, clock)
    h.llm.agents = {"planner": ["Day one: Asakusa.", "Today: we settled on Asakusa."]}
    async with h.running():
        agent = await planner(h)
        schedule = await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up the day",
                                                        next_run_at=T0 + HOUR)
        h.llm.gate = asyncio.Event()
        await h.say("@planner draft day one")
        await h.until_called(1)  # planner's group run is in flight: it holds its lock
        assert h.engine.locks.lock(agent.id).locked()

        clock.advance(HOUR + 1)
        assert await h.engine.scheduler.tick() == []
        clock.advance(30)
        assert await h.engine.scheduler.tick() == []  # retried, still busy: still waiting
        waiting = await h.store.schedules.get_schedule(schedule.id)
        assert waiting.next_run_at == T0 + HOUR and waiting.last_run_at is None  # not advanced
        assert await tasks(h) == []  # not queued behind the run
        waits = [r for r in caplog.records if "waits: planner is busy" in r.getMessage()]
        assert len(waits) == 1 and waits[0].levelno == logging.INFO  # said once per delay, not every tick

        h.llm.gate.set()
        await h.idle()
        clock.advance(30)
        fired = await h.engine.scheduler.tick()
        assert [m.text for m in fired] == [task_text("planner", "sum up the day")]
        await h.idle()
        assert await h.engine.scheduler.tick() == []  # fired once; the next slot is in the future
        assert len(await tasks(h)) == 1
        assert asked(h, "planner", "sum up the day") == 1
        ran = await h.store.schedules.get_schedule(schedule.id)
        assert ran.next_run_at == T0 + 2 * HOUR and ran.last_run_at == clock.now
        decision = await h.store.routing.get_decision(h.group.id, fired[0].seq)
        assert decision is not None and decision.agent_names == ("planner",) and decision.note == "a scheduled task"
        assert (await h.thread())[-1] == "[planner] Today: we settled on Asakusa."


async def test_a_scheduled_run_tags_others_who_continue(harness: Harness) -> None:
    clock = FakeClock()
    h = scheduled(harness, clock)
    h.llm.agents = {"planner": ["@budget does the weekly plan fit?"], "budget": ["It fits. TERMINATE"]}
    async with h.running():
        agent = await planner(h)
        await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "weekly plan",
                                             next_run_at=T0 + HOUR)
        clock.advance(HOUR)
        fired = await h.engine.scheduler.tick()
        await h.idle()
        assert h.llm.participant_order == ["planner", "budget"]
        episode = await h.store.episodes.get_episode(fired[0].episode_id or 0)
        assert episode.task_seq == fired[0].seq and episode.status == "terminated" and episode.agent_turns == 2


async def test_the_task_row_in_exports_and_replay(harness: Harness) -> None:
    clock = FakeClock()
    h = scheduled(harness, clock)
    h.llm.agents = {"planner": ["Summary. TERMINATE"]}
    async with h.running():
        agent = await planner(h)
        await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up", next_run_at=T0 + HOUR)
        clock.advance(HOUR)
        [task] = await h.engine.scheduler.tick()
        await h.idle()
        out = io.StringIO()
        await write_export(h.store, h.group, "md", out.write, now=clock.now)
        assert f"**roundtable** (schedule) · #{task.seq}" in out.getvalue()
        with pytest.raises(InvalidInput, match="a schedule's task"):
            await replay_message(h.store, h.llm, h.group, task.seq, model=None)


async def test_waits_while_paused_or_disabled_without_advancing(harness: Harness) -> None:
    clock = FakeClock()
    h = scheduled(harness, clock)
    h.llm.agents = {"planner": ["Summary."]}
    async with h.running():
        agent = await planner(h)
        schedule = await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up",
                                                        next_run_at=T0 + HOUR)
        clock.advance(2 * HOUR)
        await h.store.groups.update_group(h.group.id, paused=True)
        assert await h.engine.scheduler.tick() == []
        await h.store.groups.update_group(h.group.id, paused=False)
        await h.store.roster.update_agent(agent.id, enabled=False)
        assert await h.engine.scheduler.tick() == []
        assert (await h.store.schedules.get_schedule(schedule.id)).next_run_at == T0 + HOUR
        await h.store.roster.update_agent(agent.id, enabled=True)
        assert len(await h.engine.scheduler.tick()) == 1
        await h.idle()
        assert asked(h, "planner", "sum up") == 1


async def test_a_broken_schedule_waits_and_the_others_fire(harness: Harness) -> None:
    clock = FakeClock()
    h = scheduled(harness, clock)
    h.llm.default_agent_reply = lambda name, n: "Done."
    async with h.running():
        agent = await planner(h)
        broken = await h.store.schedules.add_schedule(agent.id, When(at_time="09:00", tz="Gone/Zone"), "x",
                                                      next_run_at=T0)  # a zone this host no longer knows
        fine = await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up", next_run_at=T0)
        clock.advance(1)
        fired = await h.engine.scheduler.tick()
        assert [m.text for m in fired] == [task_text("planner", "sum up")]
        assert (await h.store.schedules.get_schedule(broken.id)).next_run_at == T0  # still due, not lost
        assert (await h.store.schedules.get_schedule(fine.id)).next_run_at == T0 + HOUR
        await h.idle()


async def test_removing_the_agent_removes_its_schedules(harness: Harness) -> None:
    clock = FakeClock()
    h = scheduled(harness, clock)
    async with h.running():
        agent = await planner(h)
        await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up", next_run_at=T0 + HOUR)
        await h.store.roster.remove_agent(agent.id)
        clock.advance(2 * HOUR)
        assert await h.engine.scheduler.tick() == []
        assert await h.store.schedules.schedules(h.group.id) == []


async def test_restart_between_ticks_neither_loses_nor_doubles(harness: Harness) -> None:
    """Fired, then the bot stops while the agent's run is in flight: after the restart the
    run happens (the task row and cursor are durable) and the schedule does not fire again."""
    clock = FakeClock()
    h = scheduled(harness, clock)
    async with h.running():
        agent = await planner(h)
        schedule = await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up the day",
                                                        next_run_at=T0 + HOUR)
        h.llm.gate = asyncio.Event()
        clock.advance(HOUR + 5)
        assert len(await h.engine.scheduler.tick()) == 1
        await h.until_called(1)  # the scheduled run is in flight when the bot stops

    h.llm.gate = None
    h.llm.default_agent_reply = lambda name, n: "Summary of the day."
    async with h.running():
        assert await h.engine.scheduler.tick() == []  # the slot already fired before the restart
        await h.idle()
        assert len(await tasks(h)) == 1
        assert (await h.thread())[-1] == "[planner] Summary of the day."
        assert (await h.store.schedules.get_schedule(schedule.id)).next_run_at == T0 + 2 * HOUR

        clock.advance(HOUR)  # the next slot
        assert len(await h.engine.scheduler.tick()) == 1
        await h.idle()
        assert len(await tasks(h)) == 2


async def test_due_at_stop_runs_once_after_restart(harness: Harness) -> None:
    """Due, but the bot stopped before its next tick: the slot is not lost."""
    clock = FakeClock()
    h = scheduled(harness, clock)
    h.llm.agents = {"planner": ["Summary."]}
    async with h.running():
        agent = await planner(h)
        await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up", next_run_at=T0 + HOUR)
    clock.advance(HOUR + 10)
    async with h.running():
        await until_fired(h, 1)
        assert await h.engine.scheduler.tick() == []
        await h.idle()
        assert asked(h, "planner", "sum up") == 1


async def test_three_missed_intervals_while_down_run_once(harness: Harness) -> None:
    clock = FakeClock()
    h = scheduled(harness, clock)
    h.llm.default_agent_reply = lambda name, n: f"Summary {n}."
    async with h.running():
        agent = await planner(h)
        schedule = await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up",
                                                        next_run_at=T0 + HOUR)
    clock.advance(3 * HOUR + 600)  # down through the slots at T0+1h, +2h and +3h
    async with h.running():
        await until_fired(h, 1)  # the start's own tick ran it
        assert await h.engine.scheduler.tick() == []
        await h.idle()
        assert len(await tasks(h)) == 1
        assert asked(h, "planner", "sum up") == 1
        assert (await h.store.schedules.get_schedule(schedule.id)).next_run_at == T0 + 4 * HOUR


async def test_a_group_run_elsewhere_is_not_fired_here(harness: Harness) -> None:
    clock = FakeClock()
    h = scheduled(harness, clock)
    async with h.running():
        agent = await planner(h)
        schedule = await h.store.schedules.add_schedule(agent.id, When(every_seconds=int(HOUR)), "sum up",
                                                        next_run_at=T0 + HOUR)
        h.engine.drop(h.group.id)  # as when another process took the group's lease
        clock.advance(HOUR)
        assert await h.engine.scheduler.tick() == []
        assert (await h.store.schedules.get_schedule(schedule.id)).next_run_at == T0 + HOUR


async def until_fired(h: Harness, count: int) -> None:
    async def fired() -> bool:
        return len(await tasks(h)) >= count
    await eventually(fired, f"{count} schedule(s) fired")
