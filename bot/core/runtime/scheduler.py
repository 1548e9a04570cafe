"""The schedule ticker (seed 002): fire due schedules as tasks in their groups.

Every `interval` seconds (and once at start, so a slot missed while the bot
was down runs once on start) `tick` looks at the due schedules of the groups
this process runs. A schedule waits, without moving `next_run_at`, while its
agent is busy (holds its lock: a group or direct run), disabled, or its group
is paused or off; the next tick tries again, so it is delayed, never queued
twice and never skipped for good. Otherwise it fires: in one store
transaction its task row is appended (the bot's row that tags the agent,
opening a new episode as a person's message does) and `next_run_at` moves to
the first slot after now, so missed slots run once. Then the group's
dispatcher routes the row to the agent like any tagged message.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import NotFound, RoundtableError, StoreUnavailable, UserFacingError
from bot.core.models import Message, NewMessage, Tags
from bot.core.ports import HasGroups, HasRoster, HasSchedules, TokenCounter
from bot.core.rules.prompts import SYSTEM_AUTHOR, thread_line
from bot.core.rules.schedule import Schedule, format_time, next_after
from bot.core.runtime.locks import AgentLocks
from bot.core.runtime.worker import Spawn

log = logging.getLogger(__name__)

TICK = 30.0  # seconds between looks at the due schedules


def task_text(agent_name: str, prompt: str) -> str:
    """The row people see when a schedule fires (and the agent gets as its task)."""
    return f"⏰ Scheduled for @{agent_name}: {prompt}"


class SchedulerStore(HasSchedules, HasGroups, HasRoster, Protocol):
    """What the ticker reads and writes: the due schedules, their groups and agents."""


@dataclass(frozen=True)
class SchedulerDeps:
    """What the schedule ticker works with (the engine composes it)."""

    store: SchedulerStore
    counter: TokenCounter
    clock: Callable[[], float]
    locks: AgentLocks  # a busy agent's schedule waits
    owns: Callable[[int], bool]  # whether this process runs the group
    wake: Callable[[int], None]  # a task row was appended: route and deliver
    spawn: Spawn


class Scheduler:
    def __init__(self, deps: SchedulerDeps, interval: float = TICK) -> None:
        if interval <= 0:
            raise ValueError(f"the schedule tick must be positive, not {interval!r}")
        self.deps = deps
        self.interval = interval
        self._waiting: dict[int, str] = {}  # schedule id -> why it waits (logged once per delay)
        self._ticking = asyncio.Lock()  # one tick at a time

    async def start(self) -> None:
        """The first tick now (what came due while the bot was down fires once, before start-up
        ends), then one every `interval` seconds in the background."""
        await self._tick_logged()
        self.deps.spawn(self._loop(), "scheduler")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self._tick_logged()

    async def _tick_logged(self) -> None:
        try:
            await self.tick()
        except RoundtableError as exc:  # the database may be locked for a while: try again next tick
            log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,  # (the store logs it)
                    "could not look at the schedules: %s", exc)

    async def tick(self) -> list[Message]:
        """Fire every due schedule of the groups run here whose agent is free; the task rows appended."""
        async with self._ticking:
            now = self.deps.clock()
            fired: list[Message] = []
            for schedule in await self.deps.store.schedules.due_schedules(now):
                if not self.deps.owns(schedule.group_id):
                    continue  # another process runs that group (and its schedules)
                try:
                    message = await self._try(schedule, now)
                except UserFacingError as exc:  # e.g. its time zone is gone from this host: the others go on
                    self._wait(schedule, str(exc))
                    continue
                if message is not None:
                    fired.append(message)
            return fired

    async def _try(self, schedule: Schedule, now: float) -> Message | None:
        store = self.deps.store
        group = await store.groups.get_group(schedule.group_id)
        try:
            agent = await store.roster.get_agent(schedule.agent_id)
        except NotFound:
            return None  # removed meanwhile: its schedules went with it
        reason = ("its group is off" if not group.enabled else "its group is paused" if group.paused
                  else f"{agent.name} is disabled" if not agent.enabled
                  else f"{agent.name} is busy" if self.deps.locks.locked(agent.id) else None)
        if reason is not None:
            self._wait(schedule, reason)
            return None
        text = task_text(agent.name, schedule.prompt)
        task = NewMessage(author_type="system", author_name=SYSTEM_AUTHOR, text=text,
                          tags=Tags(agent_ids=(agent.id,), agent_names=(agent.name,)),
                          token_count=self.deps.counter.count(thread_line(SYSTEM_AUTHOR, text)))
        following = next_after(schedule.when, now, schedule.next_run_at)
        fired = await store.schedules.fire_schedule(schedule, task, ran_at=now, next_run_at=following)
        self._waiting.pop(schedule.id, None)
        if fired is None:
            log.debug("group=%s schedule=%s fired elsewhere or was removed", group.id, schedule.id)
            return None
        message, _episode = fired
        log.info("group=%s schedule=%s fired as #%s for %s; next run %s", group.id, schedule.id, message.seq,
                 agent.name, format_time(following, schedule.when.tz))
        self.deps.wake(group.id)
        return message

    def _wait(self, schedule: Schedule, reason: str) -> None:
        """The schedule stays due (next_run_at unchanged); said once per reason, not every tick."""
        if self._waiting.get(schedule.id) != reason:
            log.info("group=%s schedule=%s is due but waits: %s", schedule.group_id, schedule.id, reason)
        self._waiting[schedule.id] = reason
