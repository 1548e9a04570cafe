"""The verbs behind `/agent schedule add|list|remove` (declared in `bot.core.verbs.commands`).

Each checks its input with the pure rules of `bot.core.rules.schedule`, acts through
the store, and answers in words people can check: the next run is shown in
the schedule's zone and in UTC. The ticker that fires schedules is
`bot.core.runtime.scheduler`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from bot.core.models import Agent, Group
from bot.core.ports import HasRoster, HasSchedules
from bot.core.rules.card import Card, Field
from bot.core.rules.schedule import Schedule, first_run, format_time, parse_when, schedule_prompt

PROMPT_SHOWN = 80  # characters of a prompt in the list


def when_line(schedule: Schedule) -> str:
    return f"{schedule.when.describe()}; next run {format_time(schedule.next_run_at, schedule.when.tz)}"


class ScheduleVerbsStore(HasSchedules, HasRoster, Protocol):
    """What the verbs read and write: the schedules, and the roster that names their agents."""


class ScheduleVerbs:
    def __init__(self, store: ScheduleVerbsStore, clock: Callable[[], float]) -> None:
        """`clock`: now, as the schedule ticker sees it (`Engine.clock`)."""
        self.store = store
        self.clock = clock

    async def add(self, group: Group, agent: Agent, *, every: str | None, at: str | None, tz: str | None,
                  prompt: str, created_by: str | None) -> str:
        when = parse_when(every, at, tz)
        text = schedule_prompt(prompt)
        next_run = first_run(when, self.clock())
        schedule = await self.store.schedules.add_schedule(agent.id, when, text, next_run_at=next_run,
                                                           created_by=created_by)
        waits = "" if agent.enabled else f" ({agent.name} is disabled: it waits until /agent enable {agent.name})"
        return (f"Scheduled #{schedule.id} for {agent.name}, {when.describe()}: next run "
                f"{format_time(next_run, when.tz)}{waits}. /agent schedule remove id:{schedule.id} removes it.")

    async def list(self, group: Group, agent: Agent | None) -> Card | str:
        schedules = await self.store.schedules.schedules(group.id, agent_id=None if agent is None else agent.id)
        if not schedules:
            whose = f" for {agent.name}" if agent is not None else ""
            return f"No schedules{whose} here: add one with /agent schedule add."
        names = {a.id: a.name for a in await self.store.roster.list_agents(group.id)}
        fields = tuple(
            Field(f"#{s.id} {names.get(s.agent_id, '?')}", f"{when_line(s)}\n{_shortened(s.prompt)}", inline=False)
            for s in schedules)
        title = f"Schedules of {agent.name}" if agent is not None else f"Schedules of {group.name}"
        return Card(title, fields=fields, footer="/agent schedule remove id:N removes one.", page_size=10)

    async def describe(self, schedule: Schedule) -> str:
        """'planner, every 2h; next run ...' (for /roundtable status)."""
        names = {a.id: a.name for a in await self.store.roster.list_agents(schedule.group_id)}
        return f"{names.get(schedule.agent_id, '?')}, {when_line(schedule)}"

    async def remove(self, group: Group, schedule_id: int) -> str:
        schedule = await self.store.schedules.remove_schedule(group.id, schedule_id)
        names = {a.id: a.name for a in await self.store.roster.list_agents(group.id)}
        return f"Removed schedule #{schedule.id} ({names.get(schedule.agent_id, '?')}, {schedule.when.describe()})."


def _shortened(prompt: str) -> str:
    line = " ".join(prompt.split())
    return line if len(line) <= PROMPT_SHOWN else line[:PROMPT_SHOWN - 1] + "…"
