"""The verbs behind the slash commands, shared by Discord and the console.

Each verb validates its input (`bot.core.validation`), acts through the
engine's store, and returns the answer's text. Refusals are `UserFacingError`s.
Permission checks belong to the surface (it knows who is an operator).
"""
from __future__ import annotations

import time
from dataclasses import fields
from typing import Mapping

from bot.core import validation as v
from bot.core.engine import Engine
from bot.core.errors import InvalidInput, NotFound
from bot.core.models import Agent, Group, GroupSettings

CONFIG_OPTIONS = (
    "mode", "max_turns", "allow_repeat", "context_budget", "pace", "selector_model",
    "operator_role", "allow_bots", "brief", "min_confidence",
)


def parse_config(changes: Mapping[str, object]) -> dict[str, object]:
    """Option values (typed or text) -> GroupSettings field values, each validated."""
    out: dict[str, object] = {}
    for key, value in changes.items():
        if key == "mode":
            out["mode"] = v.mode(str(value))
        elif key == "max_turns":
            out["max_agent_turns"] = v.max_turns(value)
        elif key in ("allow_repeat", "allow_bots"):
            out[key] = v.boolean(key, value)
        elif key == "context_budget":
            out[key] = v.integer(key, value, *v.CONTEXT_BUDGET_RANGE)
        elif key == "pace":
            out[key] = v.number(key, value, *v.PACE_RANGE)
        elif key == "selector_model":
            out[key] = v.model(str(value) if value is not None else None)
        elif key == "operator_role":
            out[key] = (str(value).strip() or None) if value is not None else None
        elif key == "brief":
            out[key] = v.brief(str(value))
        elif key == "min_confidence":
            text = str(value).strip().lower()
            out[key] = None if text in ("", "off", "none") else v.number(key, value, 0.0, 1.0)
        else:
            raise InvalidInput(f"Unknown option {key!r}: the options are {', '.join(CONFIG_OPTIONS)}.")
    return out


def describe_settings(settings: GroupSettings) -> str:
    shown = {f.name: getattr(settings, f.name) for f in fields(settings)}
    shown["max_turns"] = shown.pop("max_agent_turns")
    shown["brief"] = (settings.brief[:60] + "...") if len(settings.brief) > 60 else (settings.brief or "(none)")
    return "\n".join(f"{k}: {'(default)' if val is None else val}" for k, val in shown.items())


def describe_agent(agent: Agent, *, full: bool = False) -> str:
    state = "" if agent.enabled else " (disabled)"
    line = f"{agent.name}{state}: {agent.role}"
    if not full:
        return line
    return "\n".join([
        line,
        f"model: {agent.model or '(default)'}",
        f"avatar: {agent.avatar_url or '(none)'}",
        f"delivered through: #{agent.delivered_through}",
        "system prompt:",
        agent.system_prompt,
    ])


class Admin:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = engine.store

    async def setup(self, key: str, name: str, settings: GroupSettings, **ids: str | None) -> Group:
        group = await self.store.create_group(key, name, settings, **ids)
        self.engine.wake(group.id)
        return group

    async def disable(self, group: Group) -> str:
        await self.engine.stop_episode(group)
        await self.store.update_group(group.id, enabled=False)
        return "Roundtable is off in this channel. The history is kept; /roundtable setup turns it back on."

    async def config(self, group: Group, changes: Mapping[str, object]) -> str:
        if not changes:
            return describe_settings(group.settings)
        parsed = parse_config(changes)
        updated = await self.store.update_group(group.id, settings=group.settings.with_changes(**parsed))
        self.engine.wake(group.id)
        return "Updated.\n" + describe_settings(updated.settings)

    async def pause(self, group: Group) -> str:
        await self.store.update_group(group.id, paused=True)
        return "Paused: messages are still recorded, agents wait until /roundtable resume."

    async def resume(self, group: Group) -> str:
        await self.store.update_group(group.id, paused=False)
        self.engine.wake(group.id)
        return "Resumed: waiting deliveries go out now."

    async def stop(self, group: Group) -> str:
        episode = await self.engine.stop_episode(group)
        if episode is None:
            return "No episode is running."
        return f"Stopped the episode after {episode.agent_turns} agent messages."

    async def status(self, group: Group) -> str:
        group = await self.store.get_group(group.id)
        lines = [f"group: {group.name} ({'paused' if group.paused else 'on' if group.enabled else 'off'})",
                 f"messages: {group.latest_seq}; consecutive agent messages: {group.agent_streak}"]
        if group.delivery_problem:
            lines.append(f"delivery problem: {group.delivery_problem}")
        if group.episode_id is not None:
            ep = await self.store.get_episode(group.episode_id)
            lines.append(f"episode: #{ep.id} {ep.status}, task #{ep.task_seq}, {ep.agent_turns} agent turns, "
                         f"{ep.total_tokens} tokens ({ep.cached_tokens} cached)")
        agents = await self.store.list_agents(group.id)
        lines.append("agents: " + (", ".join(
            f"{a.name}{'' if a.enabled else ' (disabled)'} @#{a.delivered_through}" for a in agents) or "(none)"))
        decision = await self.store.get_decision(group.id, group.latest_seq) if group.latest_seq else None
        if decision is not None:
            lines.append(f"last decision: #{decision.seq} {decision.source} -> "
                         f"{', '.join(decision.agent_names) or ('TERMINATE' if decision.terminate else 'nobody')}")
        lines.append(describe_settings(group.settings))
        return "\n".join(lines)

    async def why(self, group: Group, seq: int | None = None) -> str:
        group = await self.store.get_group(group.id)
        seq = seq or group.latest_seq
        if not 1 <= seq <= group.latest_seq:
            raise NotFound(f"There is no message #{seq} in this group (it has {group.latest_seq}).")
        decision = await self.store.get_decision(group.id, seq)
        if decision is None:
            return f"#{seq} is not routed yet."
        chosen = ", ".join(decision.agent_names) or ("TERMINATE" if decision.terminate else "nobody")
        parts = [f"#{seq}: {decision.source} -> {chosen}"]
        if decision.selector_raw:
            parts.append(f"selector replies: {' | '.join(decision.selector_raw)} (attempts {decision.attempts})")
        if decision.confidence is not None:
            parts.append(f"confidence: {decision.confidence:.2f}")
        if decision.usage.prompt_tokens:
            u = decision.usage
            parts.append(f"selector tokens: {u.prompt_tokens} prompt, {u.completion_tokens} completion, {u.cached_tokens} cached")
        if decision.note:
            parts.append(decision.note)
        return "\n".join(parts)

    async def usage(self, group: Group, days: int = 7) -> str:
        days = v.integer("days", days, 1, 365)
        totals = await self.store.usage_since(group.id, time.time() - days * 86400)
        if not totals:
            return f"No model calls in the last {days} days."
        return "\n".join(f"{who}: {u.prompt_tokens} prompt, {u.completion_tokens} completion, {u.cached_tokens} cached"
                         for who, u in sorted(totals.items()))

    # agents --------------------------------------------------------------
    async def agent(self, group: Group, name: str) -> Agent:
        agent = await self.store.find_agent(group.id, name.strip().lstrip("@"))
        if agent is None:
            names = ", ".join(a.name for a in await self.store.list_agents(group.id)) or "none yet"
            raise NotFound(f"No agent named {name!r} in this group (agents: {names}).")
        return agent

    async def add_agent(self, group: Group, name: str, role: str, prompt: str,
                        model: str | None = None, avatar: str | None = None) -> str:
        agent = await self.store.add_agent(
            group.id, v.agent_name(name), v.role(role), v.system_prompt(prompt),
            model=v.model(model), avatar_url=v.avatar_url(avatar),
        )
        return f"Added {agent.name}: {agent.role}. Tag it with @{agent.name}."

    async def edit_agent(self, group: Group, name: str, **changes: str | None) -> str:
        agent = await self.agent(group, name)
        update: dict[str, object] = {}
        if changes.get("role") is not None:
            update["role"] = v.role(changes["role"] or "")
        if changes.get("prompt") is not None:
            update["system_prompt"] = v.system_prompt(changes["prompt"] or "")
        if changes.get("model") is not None:
            update["model"] = v.model(changes["model"])
        if changes.get("avatar") is not None:
            update["avatar_url"] = v.avatar_url(changes["avatar"])
        if not update:
            return "Nothing to change: give role, prompt, model or avatar."
        agent = await self.store.update_agent(agent.id, **update)
        return f"Updated {agent.name}."

    async def remove_agent(self, group: Group, name: str) -> str:
        agent = await self.agent(group, name)
        await self.store.remove_agent(agent.id)
        return f"Removed {agent.name}. Its messages stay in the history."

    async def set_enabled(self, group: Group, name: str, enabled: bool) -> str:
        agent = await self.agent(group, name)
        await self.store.update_agent(agent.id, enabled=enabled)
        if enabled:
            self.engine.wake(group.id)
        return f"{agent.name} is {'enabled' if enabled else 'disabled'}."

    async def list_agents(self, group: Group) -> str:
        agents = await self.store.list_agents(group.id)
        if not agents:
            return "No agents yet: add one with /agent add."
        return "\n".join(describe_agent(a) for a in agents)

    async def show_agent(self, group: Group, name: str) -> str:
        return describe_agent(await self.agent(group, name), full=True)
