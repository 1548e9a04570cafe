"""The verbs an engine offers the surfaces, each part made once from it and the store (`verbs_of`).

A command's handler (`bot.core.verbs.commands`) calls the part it needs through its
`Invocation`: `inv.verbs.roster.add_agent(...)`, `inv.verbs.groups.pause(...)`. Each part
gets the store roles and the few services it uses, never the engine:

  groups     GroupVerbs     /roundtable setup, disable, config, pause, resume, stop, newtask, doctor
  roster     RosterVerbs    /agent add, edit, rename, remove, enable, disable, mute, unmute, show, list
  memory     MemoryVerbs    /agent memory show, clear
  tools      ToolVerbs      /agent tools
  schedules  ScheduleVerbs  /agent schedule add, list, remove
  record     RecordVerbs    /roundtable status, why, usage, export
  reading    Reading        /unread, /inbox, /read, /catchup (`bot.core.features.reading`)
  ask        Engine.ask     /ask (a direct run)

Wiring (`bot.wiring`) makes them once, from the engine and the store typed `VerbsStore` (the
roles the parts name, no more), and hands them to the surface: the engine is no way to the store.

Each verb validates its input (`bot.core.rules.validation`), acts through the store, and
returns its answer: text, or a `Card` when the answer is a table of facts. Refusals are
`UserFacingError`s. Who may run a verb is decided before it runs (`bot.core.verbs.commands.run`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.core.features.reading import Reading
from bot.core.models import Agent, Group
from bot.core.ports import (
    HasDiagnosis,
    HasEpisodes,
    HasGroups,
    HasNotes,
    HasReading,
    HasRecord,
    HasRoster,
    HasRouting,
    HasSchedules,
    HasSpending,
    HasSummaries,
    HasThread,
    HasTools,
    HealthStore,
)
from bot.core.runtime.direct import DirectAnswer
from bot.core.runtime.engine import Engine
from bot.core.verbs.group_verbs import GroupVerbs, GroupVerbsDeps
from bot.core.verbs.memory_verbs import MemoryVerbs
from bot.core.verbs.record_verbs import RecordVerbs
from bot.core.verbs.roster_verbs import RosterVerbs
from bot.core.verbs.schedule_verbs import ScheduleVerbs
from bot.core.verbs.tool_verbs import ToolVerbs


class Ask(Protocol):
    async def __call__(self, group: Group, agent: Agent, prompt: str, *, asker: str,
                       post: bool = False) -> DirectAnswer:
        """`Engine.ask`: `agent` answers `asker` privately (and in the group, with `post`)."""
        ...


class VerbsStore(HasGroups, HasRoster, HasThread, HasRouting, HasEpisodes, HasSummaries, HasNotes, HasTools,
                 HasSchedules, HasRecord, HasSpending, HasReading, HasDiagnosis, HealthStore, Protocol):
    """What the verbs' parts ask of the store, together: the roles of their own stores (`GroupVerbsStore`,
    `RosterVerbsStore`, `ScheduleVerbsStore`, `RecordVerbsStore`, `CatchUpStore`, memory's notes,
    the tools' grants), never the runs, posting, drafts, leases, webhooks or interactions."""


@dataclass(frozen=True)
class Verbs:
    groups: GroupVerbs
    roster: RosterVerbs
    memory: MemoryVerbs
    tools: ToolVerbs
    schedules: ScheduleVerbs
    record: RecordVerbs
    reading: Reading
    ask: Ask


def verbs_of(engine: Engine, store: VerbsStore) -> Verbs:
    """Each part of the verbs, given the roles it names of `store` and what it uses of the engine:
    its model, prices, clock and tools, and the runtime's wake, stop and budget check."""
    reading = Reading(store, engine.llm, lambda group: group.settings.selector_model or engine.selector_model)
    schedules = ScheduleVerbs(store, engine.clock)
    return Verbs(
        groups=GroupVerbs(GroupVerbsDeps(
            store=store, llm=engine.llm, prices=engine.prices, wake=engine.wake, stop_episode=engine.stops.episode,
            check_budget=engine.check_budget, endpoint_checks=engine.endpoint_checks,
            tool_checks=engine.tool_checks)),
        roster=RosterVerbs(store, engine.llm, engine.clock, engine.wake),
        memory=MemoryVerbs(store),
        tools=ToolVerbs(store, engine.tools),
        schedules=schedules,
        record=RecordVerbs(store, engine.prices, engine.clock, schedules, reading),
        reading=reading,
        ask=engine.ask,
    )
