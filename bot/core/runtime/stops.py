"""What people stop (SPEC §8, §12): one agent's reply (⏹ Stop on its provisional message), every run
working in a group (the console's Ctrl-C), a whole episode (an operator's stop: `/roundtable stop`).

A reply or a group's runs are stopped by the process's agent runs (`AgentTurn.stop`,
`AgentTurn.stop_all`: the runs settle as 'stopped'); an episode is ended in the store, its pending
deliveries skipped, and the surface told of its end after the rows before it are shown. The engine
composes it (`Engine.stops`): the surfaces and the verbs call it there.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bot.core.models import Episode, Group
from bot.core.ports import HasEpisodes, HasGroups, HasRoster, Surface
from bot.core.runtime.dispatcher import end_episode
from bot.core.runtime.steering import StopAnswer
from bot.core.runtime.turn import AgentTurn
from bot.core.runtime.worker import tell_episode


class StopStore(HasGroups, HasEpisodes, HasRoster, Protocol):
    """What a stop reads and writes: the group (its episode, its newest row), the episode ended, the
    agents' delivery cursors moved past what was pending."""


class Announcer(Protocol):
    """What an episode's stop asks of a running group's outbox (`bot.core.runtime.outbox.Outbox`)."""

    async def announce(self, group: Group, episode: Episode) -> None:
        """Tell the surface of `episode`'s change once the rows committed before it are shown."""


class StoppedIn(Protocol):
    """What an episode's stop asks of the group's runtime (`bot.core.runtime.group.GroupRuntime`)."""

    @property
    def outbox(self) -> Announcer: ...


@dataclass(frozen=True)
class StopDeps:
    """What stopping works with (the engine composes it)."""

    store: StopStore
    turn: AgentTurn  # the process's agent runs: `stop` (one reply), `stop_all` (a group's)
    runtime: Callable[[int], StoppedIn | None]  # the group's runtime when this process runs the group
    surface: Surface  # told of an episode's end when no runtime here shows the group


class Stops:
    def __init__(self, deps: StopDeps) -> None:
        self.deps = deps

    async def reply(self, group_id: int, agent_id: int, *, user_id: str | None, operator: bool,
                    by: str) -> StopAnswer:
        """A person pressed ⏹ Stop on the agent's provisional message (or Ctrl-C on the console):
        stop its run when they started its episode or are an operator (`AgentTurn.stop`)."""
        return await self.deps.turn.stop(group_id, agent_id, user_id=user_id, operator=operator, by=by)

    def running(self, group_id: int, by: str) -> int:
        """Stop every run working in the group now (the console's Ctrl-C); how many."""
        return self.deps.turn.stop_all(group_id, by)

    async def episode(self, group: Group) -> Episode | None:
        """Operator stop: end the episode and skip every pending delivery."""
        store = self.deps.store
        fresh = await store.groups.get_group(group.id)
        ended = await end_episode(store, fresh.episode_id, "stopped")
        fresh = await store.groups.get_group(group.id)
        episode = ended[0] if ended is not None else None
        if episode is not None:
            runtime = self.deps.runtime(group.id)
            if runtime is not None:  # told after the rows before it are shown
                await runtime.outbox.announce(fresh, episode)
            else:
                await tell_episode(self.deps.surface, fresh, episode)
        for agent in await store.roster.list_agents(group.id):
            await store.roster.set_delivered_through(agent.id, fresh.latest_seq)
        return episode
