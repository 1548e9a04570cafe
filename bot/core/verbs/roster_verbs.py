"""The verbs behind `/agent add|edit|rename|remove|enable|disable|mute|unmute|show|list` (declared in
`bot.core.verbs.commands`): the roster of a group.

Each finds the agent by name (`RosterVerbs.agent`, which the other agent verbs' handlers use too),
checks its input (`bot.core.rules.validation`), changes the roster through the store's `RosterStore`
and answers in a sentence or a `Card`. A model named for an agent is checked against the providers'
lists (`check_model`); memory and worker mode need a model that takes tool calls (`_check_tools`).
"""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

from bot.core.errors import InvalidInput, NotFound, UserFacingError
from bot.core.models import DEFAULT_PROVIDER, MUTED_FOREVER, Agent, Completion, Group
from bot.core.ports import LLM, AgentChanges, HasNotes, HasRoster, HasSpending
from bot.core.record.transcript import plural
from bot.core.rules import mute
from bot.core.rules import validation as v
from bot.core.rules.card import Card, Field

MODEL_SETTINGS = ("temperature", "max_tokens", "context_budget")  # an agent's; None (`default`) clears one


class ModelLists(Protocol):
    async def model_names(self) -> dict[str, list[str] | None]:
        """`LLM.model_names`: per provider, the models it lists (None: not known)."""
        ...


async def check_model(llm: ModelLists, model: str | None) -> None:
    """Refuse a model whose `name/` prefix names no provider, when the default provider (where
    such a model would run, as the whole string) lists its models and this is not one of them.
    Anything else is taken: a provider's list may not show every model it serves."""
    text = (model or "").strip()
    prefix, slash, _ = text.partition("/")
    if not slash:
        return
    lists = await llm.model_names()
    if prefix.lower() in lists:
        return
    default = lists.get(DEFAULT_PROVIDER)
    if default is None or text in default:
        return
    raise InvalidInput(
        f"No provider is named {prefix!r} (providers: {', '.join(lists)}), and the default provider has no "
        f"model {text!r}. Define it with ROUNDTABLE_PROVIDER_{prefix.upper()}_BASE_URL (and _API_KEY), "
        "or pick a model the list offers.")


def model_settings(agent: Agent) -> str:
    """An agent's model settings as /agent show gives them: 'temperature 0.3, max_tokens 800,
    context_budget the group's' ('default' for one not set)."""
    temperature = "default" if agent.temperature is None else f"{agent.temperature:g}"
    cap = "default (no cap)" if agent.max_tokens is None else f"{agent.max_tokens:,}"
    budget = "the group's" if agent.context_budget is None else f"{agent.context_budget:,}"
    return f"temperature {temperature}, max_tokens {cap}, context_budget {budget}"


def agent_flags(agent: Agent, now: float) -> str:
    """What a roster line adds to an agent's name: ' (disabled)', ' (muted until 14:30 UTC (1h left))', ' (worker)'."""
    flags = [] if agent.enabled else ["disabled"]
    flags += [muted] if (muted := mute.state(agent, now)) else []
    flags += ["worker"] if agent.mode == "worker" else []
    return "".join(f" ({f})" for f in flags)


def agent_card(agent: Agent, notes: int, now: float) -> Card:
    muted = mute.state(agent, now)
    return Card(
        title=agent.name + ("" if agent.enabled else " (disabled)") + (f" ({muted})" if muted else ""),
        description=agent.role,
        fields=(
            Field("model", agent.model or "(default)"),
            Field("model settings", model_settings(agent), inline=False),
            Field("avatar", agent.avatar_url or "(none)"),
            Field("delivered through", f"#{agent.delivered_through}"),
            Field("memory", f"{'on' if agent.memory else 'off'}, {plural(notes, 'note')}"),
            Field("mode", "worker (speaks only through group_post)" if agent.mode == "worker" else "talk"),
            Field("system prompt", agent.system_prompt, inline=False),
        ),
        tone="neutral" if agent.enabled and not muted else "warning",
        thumbnail_url=agent.avatar_url,
    )


# /agent edit, step by step: what changes, then the answer ------------------------
def setting_changes(agent: Agent, settings: Mapping[str, float | int | None]) -> AgentChanges:
    """The model settings given (None clears one) that differ from the agent's, each checked."""
    update: AgentChanges = {}
    for key, given in settings.items():
        value = v.agent_setting(key, "default" if given is None else given)
        if value == getattr(agent, key):
            continue
        if key == "temperature":
            update["temperature"] = value
        elif key == "max_tokens":
            update["max_tokens"] = None if value is None else int(value)
        elif key == "context_budget":
            update["context_budget"] = None if value is None else int(value)
    return update


def switch_changes(agent: Agent, memory: bool | None, mode: str | None) -> AgentChanges:
    """Memory on/off and the mode, where given and different from the agent's."""
    update: AgentChanges = {}
    if memory is not None and memory != agent.memory:
        update["memory"] = memory
    if mode is not None and mode != agent.mode:
        update["mode"] = mode
    return update


def unchanged_answer(agent: Agent, settings: Mapping[str, object] | None, memory: bool | None,
                     mode: str | None) -> str:
    """What /agent edit says when what it was given is what the agent has already (or nothing was)."""
    if settings:
        return f"{agent.name} has these model settings already: {model_settings(agent)}."
    if memory is not None:
        return f"Memory is already {'on' if memory else 'off'} for {agent.name}."
    if mode is not None:
        return f"{agent.name} is already in {mode} mode."
    return (f"Nothing to change for {agent.name}: give role, prompt, model, avatar, memory, mode, "
            "temperature, max_tokens or context_budget.")


def updated_answer(agent: Agent, update: AgentChanges) -> str:
    """What /agent edit says once `update` is made: the mode, memory or model settings when those changed."""
    if "mode" in update:
        if agent.mode == "worker":
            return f"Updated {agent.name}: worker mode: its runs are private and it speaks only through group_post."
        return f"Updated {agent.name}: talk mode: it posts its replies."
    if "memory" in update:
        return f"Updated {agent.name}: memory is {'on' if agent.memory else 'off'}."
    if set(update) & set(MODEL_SETTINGS):
        return f"Updated {agent.name}: {model_settings(agent)}."
    return f"Updated {agent.name}."


class RosterVerbsStore(HasRoster, HasNotes, HasSpending, Protocol):
    """What the roster verbs use: the roster, the agents' note counts (/agent show), and the spending
    where the tool-call check of a model is counted."""


class RosterVerbs:
    def __init__(self, store: RosterVerbsStore, llm: LLM, clock: Callable[[], float],
                 wake: Callable[[int], None]) -> None:
        """`llm`: the providers' model lists and whether a model takes tool calls. `clock`: now, for
        mutes. `wake`: an agent enabled may have something to answer (`Engine.wake`)."""
        self.store = store
        self.llm = llm
        self.clock = clock
        self.wake = wake

    async def agent(self, group: Group, name: str) -> Agent:
        agent = await self.store.roster.find_agent(group.id, name.strip().lstrip("@"))
        if agent is None:
            raise await self._no_agent(group, name)
        return agent

    async def _no_agent(self, group: Group, name: str) -> NotFound:
        names = ", ".join(a.name for a in await self.store.roster.list_agents(group.id)) or "none yet"
        return NotFound(f"No agent named {name!r} in this group (agents: {names}).")

    @contextlib.asynccontextmanager
    async def _still_there(self, group: Group, name: str) -> AsyncIterator[None]:
        """Around a change of an agent just looked up: one removed meanwhile (by another
        process, say) is answered as if it had been gone already, not with the store's id."""
        try:
            yield
        except NotFound:
            raise await self._no_agent(group, name) from None

    async def check_name_free(self, group: Group, name: str) -> None:
        v.check_name_free(name, [a.name for a in await self.store.roster.list_agents(group.id)])

    async def add_agent(self, group: Group, name: str, role: str, prompt: str,
                        model: str | None = None, avatar: str | None = None) -> str:
        await check_model(self.llm, v.model(model))
        agent = await self.store.roster.add_agent(
            group.id, v.agent_name(name), v.role(role), v.system_prompt(prompt),
            model=v.model(model), avatar_url=v.avatar_url(avatar),
        )
        return f"Added {agent.name}: {agent.role}. Tag it with @{agent.name}."

    async def edit_agent(self, group: Group, name: str, *, memory: bool | None = None, mode: str | None = None,
                         settings: Mapping[str, float | int | None] | None = None, **changes: str | None) -> str:
        """`settings`: model settings to set (temperature, max_tokens, context_budget; None clears one).
        `changes`: role, prompt, model, avatar (None: not given)."""
        agent = await self.agent(group, name)
        update = setting_changes(agent, settings or {})
        update.update(await self._field_changes(agent, changes))
        update.update(switch_changes(agent, memory, mode))
        if not update:
            return unchanged_answer(agent, settings, memory, mode)
        await self._check_tools(agent, update)
        async with self._still_there(group, name):
            agent = await self.store.roster.update_agent(agent.id, **update)
        return updated_answer(agent, update)

    async def _field_changes(self, agent: Agent, changes: Mapping[str, str | None]) -> AgentChanges:
        """Role, prompt (when it differs), model (checked against the providers' lists) and avatar, each
        checked in that order."""
        update: AgentChanges = {}
        if changes.get("role") is not None:
            update["role"] = v.role(changes["role"] or "")
        if changes.get("prompt") is not None and changes["prompt"] != agent.system_prompt:
            update["system_prompt"] = v.system_prompt(changes["prompt"] or "")
        if changes.get("model") is not None:
            update["model"] = v.model(changes["model"])
            await check_model(self.llm, update["model"])
        if changes.get("avatar") is not None:
            update["avatar_url"] = v.avatar_url(changes["avatar"])
        return update

    async def _check_tools(self, agent: Agent, update: AgentChanges) -> None:
        """Memory and worker mode need tool calls: refuse (changing nothing) to turn either on, or to
        change the model of an agent that has one on, when the model does not take them or that
        cannot be checked."""
        worker = update.get("mode", agent.mode) == "worker"
        if not (update.get("memory", agent.memory) or worker) or not ({"memory", "mode", "model"} & set(update)):
            return
        model = update.get("model", agent.model)
        spent: list[Completion] = []
        reason = await self.llm.tools_refusal(str(model) if model else None, spent=spent)
        for call in spent:  # a model call like any other: /roundtable usage counts it with the agent's
            await self.store.spending.record_call(agent.group_id, agent.id, "memory check", call)
        if reason is not None:
            if "mode" in update and worker:
                raise UserFacingError(f"{agent.name} stays in talk mode: {reason}.")
            raise UserFacingError(f"Memory stays off for {agent.name}: {reason}." if "memory" in update else
                                  f"{agent.name} keeps its model: {'worker mode' if worker else 'memory'} is on "
                                  f"for it, and {reason}.")

    async def rename_agent(self, group: Group, name: str, new_name: str) -> str:
        agent = await self.agent(group, name)
        async with self._still_there(group, name):
            renamed = await self.store.roster.update_agent(agent.id, name=v.agent_name(new_name))
        return (f"Renamed {agent.name} to {renamed.name}: tag it with @{renamed.name}. "
                f"Its earlier messages keep the name {agent.name}.")

    async def remove_agent(self, group: Group, name: str) -> str:
        agent = await self.agent(group, name)
        async with self._still_there(group, name):
            await self.store.roster.remove_agent(agent.id)
        return f"Removed {agent.name}. Its messages stay in the history."

    async def set_enabled(self, group: Group, name: str, enabled: bool) -> str:
        agent = await self.agent(group, name)
        async with self._still_there(group, name):
            await self.store.roster.update_agent(agent.id, enabled=enabled)
        if enabled:
            self.wake(group.id)
        return f"{agent.name} is {'enabled' if enabled else 'disabled'}."

    async def list_agents(self, group: Group) -> Card | str:
        agents = await self.store.roster.list_agents(group.id)
        if not agents:
            return "No agents yet: add one with /agent add."
        now = self.clock()
        fields = tuple(Field(a.name + agent_flags(a, now), a.role, inline=False) for a in agents)
        return Card(f"Agents of {group.name}", fields=fields)

    async def show_agent(self, group: Group, name: str) -> Card:
        agent = await self.agent(group, name)
        return agent_card(agent, await self.store.notes.note_count(agent.id), self.clock())

    async def mute_agent(self, group: Group, name: str, duration: str | None = None) -> str:
        """/agent mute: out of selection, rotation and @all until `duration` ('1h', '30m', '2d') has
        passed, or until /agent unmute (no duration). Kept as a time, so it ends by itself, also
        after a restart."""
        seconds = None if duration is None or not duration.strip() else mute.parse_duration(duration)
        agent = await self.agent(group, name)
        now = self.clock()
        until = MUTED_FOREVER if seconds is None else now + seconds
        async with self._still_there(group, name):
            agent = await self.store.roster.update_agent(agent.id, muted_until=until)
        return (f"{agent.name} is muted {mute.until(until, now)}: it is left out of selection, rotation and @all, "
                f"and a tag of it gets a notice instead of a reply. /agent unmute {agent.name} lifts it.")

    async def unmute_agent(self, group: Group, name: str) -> str:
        agent = await self.agent(group, name)
        if not agent.muted(self.clock()):
            return f"{agent.name} is not muted."
        async with self._still_there(group, name):
            await self.store.roster.update_agent(agent.id, muted_until=None)
        return f"{agent.name} is unmuted: it can be selected and tagged again."
