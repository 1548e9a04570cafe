"""The verbs an engine offers the surfaces, each part made once from it (`verbs_of`).

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

Each verb validates its input (`bot.core.rules.validation`), acts through the store, and
returns its answer: text, or a `Card` when the answer is a table of facts. Refusals are
`UserFacingError`s. Who may run a verb is decided before it runs (`bot.core.verbs.commands.run`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.core.features.reading import Reading
from bot.core.models import Agent, Group
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


def verbs_of(engine: Engine) -> Verbs:
    """Each part of the verbs, given what it uses of the engine: its store (typed by the roles each
    part names), its model, prices, clock and tools, and the runtime's wake, stop and budget check."""
    store = engine.store
    reading = Reading(store, engine.llm, lambda group: group.settings.selector_model or engine.selector_model)
    schedules = ScheduleVerbs(store, engine.clock)
    return Verbs(
        groups=GroupVerbs(GroupVerbsDeps(
            store=store, llm=engine.llm, prices=engine.prices, wake=engine.wake, stop_episode=engine.stop_episode,
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
