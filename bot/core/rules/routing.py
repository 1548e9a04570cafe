"""Who gets a message: explicit tags always; otherwise the group's mode.

Pure functions; the selector's model call lives in `selector.py` and the
dispatcher puts the two together.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from bot.core.models import Agent, Message
from bot.core.rules.tags import named_agents

Plan = Literal["explicit", "superseded", "mode", "stale", "none", "deleted"]


def explicit_recipients(message: Message, enabled_ids: set[int]) -> tuple[int, ...]:
    """Agents a message selects by its own tags (author excluded, enabled only). The bot's
    notices tag nobody, except a schedule's task, which tags the agent it runs."""
    ids = message.tags.agent_ids
    if message.author_type == "agent":
        ids = tuple(i for i in ids if i != message.author_agent_id)
    return tuple(i for i in ids if i in enabled_ids)


def muted_tagged(message: Message, muted: Sequence[Agent]) -> list[Agent]:
    """The agents of `muted` (enabled, muted now) that a message tags itself: by name, as the
    author of the message it replies to, or as a schedule's agent; not through `@all`, which leaves
    muted agents out. None of them runs; the message gets one notice naming them."""
    if not muted:
        return []
    ids = set(message.tags.agent_ids) - {message.author_agent_id}
    if message.tags.all_agents:  # @all tagged every agent: only those also named count
        ids &= set(named_agents(message.text, muted))
    return [a for a in muted if a.id in ids]


def routable(message: Message, current_episode: int | None) -> bool:
    """Whether a message can be the one a batch routes by the mode (see `plan_batch`)."""
    return message.author_type == "user" or (message.author_type == "agent" and message.episode_id == current_episode)


def plan_batch(
    messages: Sequence[Message], enabled_ids: set[int], current_episode: int | None = None, *,
    newer_follows: bool = False, muted: Sequence[Agent] = (),
) -> list[tuple[Message, Plan]]:
    """How each not-yet-routed message is routed.

    Explicit agent tags decide (a schedule's task is the bot's row tagging its
    agent). Only the newest person/agent message of the batch is routed by the
    mode; earlier untagged ones are superseded. An agent
    reply to an earlier task (its episode is not `current_episode`: a person
    posted during its run) is 'stale': it selects only whom it tags and never
    supersedes the newer task. `newer_follows`: the batch is a chunk of a longer
    one and a later chunk holds that newest message (every untagged one here is superseded).
    A message deleted before it was routed (a tombstone) selects nobody; as the newest, it still
    supersedes the ones before it (its episode is the running one: its task is gone).
    `enabled_ids`: the agents routing may pick (enabled, not muted). A message that tags only
    `muted` agents (`muted_tagged`) is 'explicit' too: it selects nobody (they were asked, not the group).
    """
    def stale(m: Message) -> bool:
        return m.author_type == "agent" and m.episode_id != current_episode

    newest = None if newer_follows else next((m for m in reversed(messages) if routable(m, current_episode)), None)
    plans: list[tuple[Message, Plan]] = []
    for message in messages:
        if message.deleted:
            plans.append((message, "deleted"))
        elif explicit_recipients(message, enabled_ids) or muted_tagged(message, muted):
            plans.append((message, "explicit"))
        elif message.author_type == "system":
            plans.append((message, "none"))
        elif stale(message):
            plans.append((message, "stale"))
        elif message is not newest:
            plans.append((message, "superseded"))
        else:
            plans.append((message, "mode"))
    return plans


def next_in_rotation(
    roster: Sequence[Agent], after_agent_id: int | None, *, exclude: set[int] = frozenset()  # type: ignore[assignment]  # a frozenset reads as a set here
) -> Agent | None:
    """The next enabled agent in roster order after `after_agent_id`, skipping `exclude`."""
    enabled = [a for a in roster if a.enabled]
    if not enabled:
        return None
    ordered = sorted(roster, key=lambda a: (a.position, a.id))
    start = 0
    for i, agent in enumerate(ordered):
        if agent.id == after_agent_id:
            start = i + 1
            break
    for k in range(len(ordered)):
        agent = ordered[(start + k) % len(ordered)]
        if agent.enabled and agent.id not in exclude:
            return agent
    return None


def unmuted(roster: Sequence[Agent], now: float) -> list[Agent]:
    """The roster as the mode routes it at `now`: a muted agent is as a disabled one (left out of
    selection, rotation, tags mode and @all), in its place."""
    return [replace(a, enabled=False) if a.enabled and a.muted(now) else a for a in roster]


def eligible_speakers(roster: Sequence[Agent], message: Message, allow_repeat: bool) -> list[Agent]:
    """Who may speak next after `message`: enabled agents, minus its author unless repeats are allowed."""
    excluded = message.author_agent_id if message.author_type == "agent" and not allow_repeat else None
    return [a for a in roster if a.enabled and a.id != excluded]
