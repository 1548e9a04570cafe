"""Regenerate reply (SPEC §8 and §12): an agent's newest reply in a group, written again.

Who may: the person whose message started the reply's episode, and operators. What: the group's
newest agent message (not a person's, not a notice, not an `/ask` answer or a worker's post), while
no run is active or waiting in the group and the group is not paused (held, or at its monthly
budget). The same agent runs again over the same snapshot (the rows its reply answered, so the same
prompt inputs) as a new run of kind 'regenerate', counted and priced as any run
(`AgentTurn.regenerate`). Settling it replaces the row's text in one transaction, keeping the text
before as a version (`message_versions`); the outbox then edits the message in place, as it
finishes a streamed reply (after a crash too): nothing is posted twice. A run cut before it settled
(a crash, a shutdown) is marked interrupted on the next start and leaves the message as it was,
with no version. Every refusal is a `UserFacingError` saying why.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import Busy, Forbidden, InvalidInput, NotFound
from bot.core.features.spending import Budgets
from bot.core.models import Agent, Group, Message, Run
from bot.core.ports import HasEpisodes, HasGroups, HasRecord, HasRoster, HasRuns, HasThread
from bot.core.runtime.locks import AgentLocks
from bot.core.runtime.turn import TurnOutcome

log = logging.getLogger(__name__)

NOTHING_YET = "There is no agent message here to regenerate yet."


class RegenerateStore(HasGroups, HasThread, HasRuns, HasEpisodes, HasRoster, HasRecord, Protocol):
    """What a regenerate reads: the rows, the reply's run and episode, the agent."""


class Regenerate(Protocol):
    async def __call__(self, group: Group, agent: Agent, target: Message, snapshot: int,
                       shown: Callable[[], None]) -> TurnOutcome:
        """Run `agent` again on `snapshot`, its reply replacing `target`'s text (`AgentTurn.regenerate`)."""
        ...


class RegeneratedIn(Protocol):
    """What a regenerate asks of the group's runtime (`bot.core.runtime.group.GroupRuntime`)."""

    def busy(self) -> bool:
        """The group's dispatcher has rows to route or run."""

    def show(self) -> None:
        """Rows were committed (or edited): show them."""


@dataclass(frozen=True)
class RegenerateDeps:
    """What regenerating works with (the engine composes it)."""

    store: RegenerateStore
    locks: AgentLocks
    runtime: Callable[[int], RegeneratedIn | None]  # the group's runtime when this process runs the group
    turn: Regenerate  # `AgentTurn.regenerate`
    budgets: Budgets  # checked after the run settles


@dataclass(frozen=True)
class Regenerated:
    """A regenerate's outcome: the row with its new text, and the run that wrote it."""

    message: Message
    run: Run


class Regenerations:
    def __init__(self, deps: RegenerateDeps) -> None:
        self.deps = deps

    async def newest_agent_message(self, group: Group) -> Message | None:
        """The group's newest agent message that is not deleted (the one a regenerate may target)."""
        store = self.deps.store
        through = group.latest_seq
        while through > 0:
            rows = await store.thread.messages(group.id, after=max(0, through - 50), through=through)
            for row in reversed(rows):
                if row.author_type == "agent" and not row.deleted:
                    return row
            through -= 50
        return None

    async def regenerate(self, group: Group, seq: int | None, *, user_id: str | None, operator: bool) -> Regenerated:
        """Regenerate row `seq` (None: the newest agent message) for person `user_id`
        (`operator`: they run the group). See the module docstring; refusals raise."""
        store = self.deps.store
        group = await store.groups.get_group(group.id)  # as it is now
        newest = await self.newest_agent_message(group)
        if seq is None:
            if newest is None:
                raise InvalidInput(NOTHING_YET)
            seq = newest.seq
        try:
            target = await store.thread.get_message(group.id, seq)
        except NotFound:
            raise InvalidInput(f"There is no message #{seq} in this group.") from None
        run = await self._checked(group, target, newest)
        agent = await self._agent(target)
        await self._allowed(target, run, user_id, operator)
        roster = await store.roster.list_agents(group.id)
        if group.paused:  # held deliveries, or the monthly budget reached: no model call either
            raise Busy("The group is paused: /roundtable resume first, then regenerate.")
        runtime = self.deps.runtime(group.id)
        if runtime is None:
            raise Busy("This group is run by another process of the bot right now; try again in a moment.")
        if any(self.deps.locks.locked(a.id) for a in roster) or runtime.busy():
            raise Busy("An agent is still working in this group; regenerate once it is done.")
        async with self.deps.locks.holding(agent, "regenerating a reply"):
            outcome = await self.deps.turn(group, agent, target, run.snapshot_seq, runtime.show)
        runtime.show()
        if await self.deps.budgets.check(group.id):
            runtime.show()
        if outcome.message is None:
            why = outcome.run.error or {"empty": "its answer was empty after cleaning"}.get(
                outcome.run.status, outcome.run.status)
            raise InvalidInput(f"{agent.name} could not write #{target.seq} again ({why}); the message is unchanged.")
        return Regenerated(outcome.message, outcome.run)

    async def _checked(self, group: Group, target: Message, newest: Message | None) -> Run:
        """The run that wrote `target`, when `target` may be regenerated at all (else why not)."""
        seq = target.seq
        if target.deleted:
            raise InvalidInput(f"#{seq} was deleted; there is nothing to regenerate.")
        if target.author_type == "user":
            raise InvalidInput(f"#{seq} is a message from {target.author_name}, not an agent: only an agent's "
                               "reply can be regenerated.")
        if target.author_type != "agent":
            raise InvalidInput(f"#{seq} is a notice from the bot: only an agent's reply can be regenerated.")
        if newest is not None and newest.seq != seq:
            raise InvalidInput(f"Only the newest agent message can be regenerated: #{seq} is older (the newest is "
                               f"#{newest.seq}, by {newest.author_name}).")
        run = None
        if target.source_run_id is not None:
            run = (await self.deps.store.record.runs_by_id([target.source_run_id])).get(target.source_run_id)
        if run is None or run.kind == "direct":
            raise InvalidInput(f"#{seq} is an /ask answer posted in the group: only a reply of the group chat can "
                               "be regenerated.")
        if run.posted_seq != seq:
            raise InvalidInput(f"#{seq} is a post {target.author_name} made while working as a worker: only a reply "
                               "can be regenerated.")
        return run

    async def _agent(self, target: Message) -> Agent:
        if target.author_agent_id is None:
            raise InvalidInput(f"#{target.seq} has no agent to run again.")
        try:
            agent = await self.deps.store.roster.get_agent(target.author_agent_id)
        except NotFound:
            raise InvalidInput(f"{target.author_name} was removed, so its reply cannot be regenerated.") from None
        if not agent.enabled:
            raise InvalidInput(f"{agent.name} is disabled: /agent enable {agent.name} first.")
        if agent.mode == "worker":
            raise InvalidInput(f"{agent.name} works as a worker now (its runs are private): its reply cannot be "
                               "regenerated.")
        return agent

    async def _allowed(self, target: Message, run: Run, user_id: str | None, operator: bool) -> None:
        """Only the person whose message started the reply's episode, or an operator."""
        if operator:
            return
        starter = None
        if run.episode_id is not None:
            episode = await self.deps.store.episodes.get_episode(run.episode_id)
            task = await self.deps.store.thread.get_message(target.group_id, episode.task_seq)
            starter = task if task.author_type == "user" else None
        if starter is not None and user_id is not None and starter.author_user_id == str(user_id):
            return
        who = f"{starter.author_name} (who started this task)" if starter else "an operator"
        raise Forbidden(f"Only {who}{' or an operator' if starter else ''} can regenerate this reply.")
