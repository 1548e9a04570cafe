"""The per-group delivery loop (SPEC §3–4, §7; seed 002).

The durable queue is the group's latest seq plus each agent's
`delivered_through`; there is no job row per message x agent. One
`GroupDispatcher` task per group:

  0. route every message not yet routed (decisions are stored, never recomputed; a
     backlog, e.g. what waited while no process ran the group, is routed in the background
     in chunks, taking turns with other groups' backlogs: see `route`);
  1. find agents whose cursor is behind; 2. freeze the latest seq as snapshot;
  3-4. keep the agents that a message after their cursor selects, skip-advance
  the rest; 5. skip agents holding their lock; 6. pick the furthest-behind idle
  one (tie: oldest agent); 7. run it once over the snapshot and wait;
  8. advance its cursor through the snapshot; 9. repeat until nobody is pending
  (then provisional messages that no reply will own are taken back: `Drafts.sweep`).

It works with its group's other parts directly (`bot.core.runtime.group`): before a run it waits
for the outbox's `idle` (people see the conversation in step); the run is the turn's
(`AgentTurn.run`, holding the agent's lock), which wakes the outbox when it commits; the rows
the dispatcher commits itself (a notice, the end of an episode) wake it too.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import Busy
from bot.core.features.selector import selector_decision
from bot.core.features.spending import Budgets
from bot.core.features.summary import Summaries
from bot.core.features.tasks import TaskChains
from bot.core.models import Agent, Decision, Episode, Group, Message, NewMessage, Usage
from bot.core.ports import LLM, HasEpisodes, HasGroups, HasRoster, HasRouting, HasThread, HealthStore
from bot.core.rules.mute import tag_notice
from bot.core.rules.routing import (
    eligible_speakers,
    explicit_recipients,
    muted_tagged,
    next_in_rotation,
    plan_batch,
    routable,
    unmuted,
)
from bot.core.rules.stop import cap_notice, near_repeat
from bot.core.runtime.drafts import Drafts
from bot.core.runtime.locks import AgentLocks
from bot.core.runtime.turn import TurnOutcome, cache_key
from bot.core.runtime.worker import GroupWorker, RetryPolicy, Spawn

log = logging.getLogger(__name__)

SELECTOR_SOURCES = ("selector", "fallback", "low_confidence")  # a selector call was made
REPEAT_WINDOW = 24  # rows looked back at for near-repeats
ROUTE_CHUNK = 500  # rows read and routed at once; a backlog is routed chunk by chunk
PLANNED = {  # the plans that decide a row without the mode (`plan_batch`): (source, note)
    "superseded": ("superseded", "a newer message arrived before routing"),
    "stale": ("none", "a reply to an earlier task; a newer one is open"),
    "none": ("none", "notices select nobody"),
    "deleted": ("none", "deleted before it was routed"),
}
STALLED_NOTICE = ("Stopped: the last two agent messages repeat earlier ones (stalled). "
                  "Post a message to continue.")


class DispatchStore(HasGroups, HasRoster, HasThread, HasRouting, HasEpisodes, HealthStore, Protocol):
    """What the dispatcher reads and writes: the group, its roster and cursors, the thread, the routing
    decisions, the episodes (the selector's reads included)."""


class Turn(Protocol):
    async def __call__(self, group: Group, agent: Agent, snapshot: int, *, selector_usage: Usage, source: str,
                       shown: Callable[[], None]) -> TurnOutcome:
        """Run `agent` once over rows 1..`snapshot` (`AgentTurn.run`); it calls `shown` when it commits rows."""
        ...


class Showing(Protocol):
    """What the dispatcher asks of its group's outbox (`bot.core.runtime.outbox.Outbox`)."""

    def wake(self) -> None:
        """New rows were committed: show them."""

    async def all_shown(self) -> None:
        """Until every row committed so far is shown."""

    async def announce(self, group: Group, episode: Episode) -> None:
        """Tell the surface about `episode` once the rows committed before it are shown."""


@dataclass(frozen=True)
class DispatcherDeps:
    """What every group's dispatcher works with (the engine composes it once for all groups)."""

    store: DispatchStore
    llm: LLM
    selector_model: str | None  # the process's default (ROUNDTABLE_SELECTOR_MODEL)
    tasks: TaskChains
    summaries: Summaries
    retry: RetryPolicy
    locks: AgentLocks
    connected: asyncio.Event  # the surface is connected: people can be answered, so backlogs may be routed
    backlog_turn: asyncio.Lock  # held while reading or storing a chunk of a backlog: one group's chunk at a time
    turn: Turn  # an agent's run (`AgentTurn.run`)
    budgets: Budgets  # checked after each run
    spawn: Spawn  # its loop, as a kept background task
    lost: Callable[[int], None]  # another process runs the group now: stop running it here
    clock: Callable[[], float]  # now, for mutes (an agent muted until a time is routed again after it)
    notice: Callable[[str], NewMessage]  # a notice from the bot, ready to append (`bot_notice`)


async def end_episode(store: HasEpisodes, episode_id: int | None, status: str,
                      notice: NewMessage | None = None) -> tuple[Episode, bool] | None:
    """End the episode with `status` (and post `notice` with it): the episode, and whether a notice
    row was committed; None when it had ended already (or there is none)."""
    if episode_id is None:
        return None
    ended = await store.episodes.end_episode(episode_id, status, notice=notice)
    if ended is None:
        return None
    episode, shown = ended
    log.info("episode group=%s episode=%s ended: %s after %d agent turns, %d tokens",
             episode.group_id, episode.id, episode.status, episode.agent_turns, episode.total_tokens)
    return episode, shown is not None


def selecting(agent: Agent, decisions: dict[int, Decision], snapshot: int) -> tuple[Usage, str] | None:
    """(selector usage, source) of the newest decision after the cursor that selects `agent`."""
    found: tuple[Usage, str] | None = None
    for seq in range(agent.delivered_through + 1, snapshot + 1):
        decision = decisions.get(seq)
        if decision is not None and agent.id in decision.agent_ids:
            usage = decision.usage if decision.source in SELECTOR_SOURCES else Usage()
            found = (usage, decision.source)
    return found


def by_tags(message: Message, enabled_ids: set[int], roster: Sequence[Agent], silent: Sequence[Agent]) -> Decision:
    """The decision for a row that tags agents: the enabled ones it tags; the `silent` (muted) ones noted."""
    ids = explicit_recipients(message, enabled_ids)
    note = "a scheduled task" if message.author_type == "system" else ""
    if silent:
        note = "; ".join(filter(None, (note, "muted: " + ", ".join(a.name for a in silent))))
    return Decision(message.seq, "tags", ids, names_of(roster, ids), note=note)


def names_of(roster: Sequence[Agent], ids: Sequence[int]) -> tuple[str, ...]:
    """The names of the agents `ids` in `roster` (those still in it)."""
    by_id = {a.id: a.name for a in roster}
    return tuple(by_id[i] for i in ids if i in by_id)


class GroupDispatcher(GroupWorker):
    kind = "dispatcher"
    catching_up = False  # set when the group was taken here with rows that waited: its next routing pass is a backlog

    def __init__(self, deps: DispatcherDeps, group_id: int, *, outbox: Showing, drafts: Drafts) -> None:
        super().__init__(group_id, retry=deps.retry, lost=deps.lost, spawn=deps.spawn, health=deps.store.health)
        self.deps = deps
        self.outbox = outbox
        self.drafts = drafts

    # the loop body ------------------------------------------------------
    async def drain(self) -> None:
        """Until nobody is pending (the steps in the module's docstring): route, pick who answers, run it."""
        store = self.deps.store
        while True:
            group = await store.groups.get_group(self.group_id)
            if not group.enabled or group.paused:
                return
            snapshot = group.latest_seq
            if await self.route(group, snapshot):
                group = await store.groups.get_group(self.group_id)  # it may have changed while routing
            roster = await store.roster.list_agents(group.id)
            pending = [a for a in roster if a.delivered_through < snapshot]
            if not pending:
                if await self._settled(snapshot):
                    return
                continue  # a message arrived meanwhile: route it before settling anything
            selected = await self._select(group, pending, snapshot)
            if selected:
                await self._run_next(group, selected, snapshot)

    async def _settled(self, snapshot: int) -> bool:
        """Nobody is pending through `snapshot`: unless a row arrived meanwhile (False), a running episode
        is over for now and the provisional messages no reply will own are taken back."""
        group = await self.deps.store.groups.get_group(self.group_id)
        if group.latest_seq != snapshot:
            return False
        await self._settle_episode(group)
        await self.drafts.sweep(group)
        return True

    async def _select(self, group: Group, pending: Sequence[Agent], snapshot: int) -> list[tuple[Agent, Usage, str]]:
        """Steps 3-4: the pending agents a message after their cursor selects, with (selector usage, source);
        the others' cursors skip to `snapshot`."""
        store = self.deps.store
        low = min(a.delivered_through for a in pending)
        decisions = await store.routing.decisions(group.id, after=low, through=snapshot)
        selected: list[tuple[Agent, Usage, str]] = []
        now = self.deps.clock()
        for agent in pending:
            chosen = selecting(agent, decisions, snapshot)
            if agent.available(now) and chosen is not None:  # one muted since it was chosen does not run
                selected.append((agent, *chosen))
            else:
                await store.roster.set_delivered_through(agent.id, snapshot)
        return selected

    async def _run_next(self, group: Group, selected: Sequence[tuple[Agent, Usage, str]], snapshot: int) -> None:
        """Steps 5-8: the furthest-behind of the `selected` agents not running now (tie: the oldest agent)
        runs once over `snapshot`, then the stop rules; while every one of them runs, until one is done."""
        idle = [s for s in selected if not self.deps.locks.locked(s[0].id)]
        if not idle:
            await self._wait_for_a_lock([s[0] for s in selected])
            return
        # People see the conversation in step: no new run while earlier rows wait to be shown.
        await self.outbox.all_shown()
        agent, selector_usage, source = min(idle, key=lambda s: (s[0].delivered_through, s[0].created_at, s[0].id))
        try:
            outcome = await self._run(group, agent, snapshot, selector_usage, source)
        except Busy:
            return  # a direct run took the agent meanwhile: wait for it on the next pass
        await self.after_turn(outcome)
        if group.settings.pace > 0 and outcome.message is not None:
            await asyncio.sleep(group.settings.pace)

    async def _run(self, group: Group, agent: Agent, snapshot: int, selector_usage: Usage,
                   source: str) -> TurnOutcome:
        """Run `agent` once over rows 1..`snapshot`, holding its lock (Busy when another run holds it);
        then a stopped run's episode is told, and the budget checked."""
        deps = self.deps
        async with deps.locks.holding(agent, "a group run"):
            outcome = await deps.turn(group, agent, snapshot, selector_usage=selector_usage, source=source,
                                      shown=self.outbox.wake)
        if outcome.run.status == "stopped" and outcome.run.episode_id is not None:
            # A person stopped it: its episode ended as `stopped` with the run (shown as any end is).
            episode = await deps.store.episodes.get_episode(outcome.run.episode_id)
            log.info("episode group=%s episode=%s ended: %s after %d agent turns, %d tokens", group.id, episode.id,
                     episode.status, episode.agent_turns, episode.total_tokens)
            await self.outbox.announce(group, episode)
        if await deps.budgets.check(group.id):
            self.outbox.wake()
        return outcome

    async def _wait_for_a_lock(self, agents: Sequence[Agent]) -> None:
        waits = [asyncio.create_task(self.deps.locks.wait_unlocked(a.id)) for a in agents]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    # routing ------------------------------------------------------------
    async def route(self, group: Group, snapshot: int) -> bool:
        """Decide who answers each row not routed yet, up to `snapshot`; False when there was none.

        A backlog (the rows that waited while no process ran the group, when this process
        starts or takes the group over: `catching_up`; or more than a chunk of rows at once)
        is routed by `_catch_up`: once the surface is connected, in chunks, one group's chunk
        at a time. Otherwise the rows are routed now, together."""
        store = self.deps.store
        catching_up, self.catching_up = self.catching_up, False
        batch = await store.routing.unrouted(group.id, through=snapshot, limit=1 if catching_up else ROUTE_CHUNK)
        if not batch:
            return False
        if catching_up or (len(batch) == ROUTE_CHUNK and batch[-1].seq < snapshot):
            await self._catch_up(group.id, batch[0].seq, snapshot)
        else:
            await self._route_rows(group, batch)
        return True

    async def _catch_up(self, group_id: int, first: int, snapshot: int) -> None:
        """Route the backlog `first`..`snapshot`: once the surface is connected (people can be
        answered), chunk by chunk, each chunk read, decided and stored while holding the engine's
        backlog turn, so fresh messages of other groups (routed without it) never queue behind a
        backlog, groups with backlogs take turns, and a process holds one chunk at a time. The
        one row routed by the mode (the newest) is decided first, its model call outside the turn."""
        store, deps = self.deps.store, self.deps
        await deps.connected.wait()
        log.info("group=%s: routing a backlog of %d row(s) (seq %d-%d) in the background",
                 group_id, snapshot - first + 1, first, snapshot)
        began = time.monotonic()
        group = await store.groups.get_group(group_id)
        newest = await self._newest_routable(group, first, snapshot)
        decided: dict[int, Decision] = {}
        if newest is not None:
            now = deps.clock()
            listed = await store.roster.list_agents(group.id)
            roster = unmuted(listed, now)
            [(_, plan)] = plan_batch([newest], {a.id for a in roster if a.enabled}, group.episode_id,
                                     muted=[a for a in listed if a.enabled and a.muted(now)])
            if plan == "mode":
                decided[newest.seq] = await self._route_by_mode(group, roster, newest)
        while True:
            async with deps.backlog_turn:
                batch = await store.routing.unrouted(group_id, through=snapshot, limit=ROUTE_CHUNK)
                if not batch:
                    break
                await self._route_rows(group, batch, decided=decided,
                                       newer_follows=newest is not None and newest.seq > batch[-1].seq)
            if batch[-1].seq >= snapshot:
                break
        log.info("group=%s: backlog of %d row(s) routed in %.1fs", group_id, snapshot - first + 1,
                 time.monotonic() - began)

    async def _newest_routable(self, group: Group, first: int, snapshot: int) -> Message | None:
        """The newest row in `first`..`snapshot` that the mode may route (see `plan_batch`)."""
        through = snapshot
        while through >= first:
            after = max(first - 1, through - ROUTE_CHUNK)
            async with self.deps.backlog_turn:
                rows = await self.deps.store.thread.messages(group.id, after=after, through=through)
            found = next((m for m in reversed(rows) if routable(m, group.episode_id)), None)
            if found is not None:
                return found
            through = after
        return None

    async def _route_rows(self, group: Group, batch: Sequence[Message], *, newer_follows: bool = False,
                          decided: Mapping[int, Decision] | None = None) -> None:
        """Decide and store who answers each row of `batch` (consecutive rows, the oldest unrouted
        first). Decisions are stored together, before and after the one that may call a model
        (unless `decided` holds it already)."""
        now = self.deps.clock()
        listed = await self.deps.store.roster.list_agents(group.id)
        muted = [a for a in listed if a.enabled and a.muted(now)]
        roster = unmuted(listed, now)  # muted agents as disabled ones: routing never picks them
        enabled_ids = {a.id for a in roster if a.enabled}
        routed: list[tuple[Message, Decision]] = []
        told: list[tuple[Message, list[Agent]]] = []
        for message, plan in plan_batch(batch, enabled_ids, group.episode_id, newer_follows=newer_follows,
                                        muted=muted):
            if plan == "explicit":
                silent = muted_tagged(message, muted)
                if silent:
                    told.append((message, silent))
                decision = by_tags(message, enabled_ids, roster, silent)
            elif plan in PLANNED:
                source, note = PLANNED[plan]
                decision = Decision(message.seq, source, note=note)
            elif decided and message.seq in decided:
                decision = decided[message.seq]
            else:
                await self._record(group, routed)
                routed = []
                decision = await self._route_by_mode(group, roster, message)
            routed.append((message, decision))
        await self._record(group, routed)
        await self._tell_muted(group, told, now)  # after the decisions: a message is told once, never on a re-route

    async def _tell_muted(self, group: Group, told: Sequence[tuple[Message, list[Agent]]], now: float) -> None:
        """One notice per row that tagged muted agents: they will not answer it."""
        for message, silent in told:
            await self.deps.store.thread.append_system_message(group.id, self.deps.notice(tag_notice(silent, now)))
            log.info("group=%s seq=%s tags muted agent(s) %s: told once", group.id, message.seq,
                     ", ".join(a.name for a in silent))
        if told:
            self.outbox.wake()

    async def _record(self, group: Group, routed: list[tuple[Message, Decision]]) -> None:
        if not routed:
            return
        await self.deps.store.routing.record_decisions(group.id, [decision for _, decision in routed])
        for message, decision in routed:
            log.debug("group=%s seq=%s routed: %s %s %s", group.id, message.seq, decision.source,
                      decision.agent_names, decision.note)
            if decision.terminate:
                await self.end_episode(message.episode_id, "terminated")

    async def _route_by_mode(self, group: Group, roster: list[Agent], message: Message) -> Decision:
        store = self.deps.store
        mode = group.settings.mode
        if message.author_type == "agent" and message.episode_id is not None:
            episode = await store.episodes.get_episode(message.episode_id)
            if not episode.running:
                return Decision(message.seq, "none", note=f"the episode ended ({episode.status})")
        if mode == "tags":
            if message.author_type == "agent":
                return Decision(message.seq, "none", note="tags mode: an agent message starts nobody")
            ids = tuple(a.id for a in roster if a.enabled)
            return Decision(message.seq, "tags", ids, names_of(roster, ids), note="tags mode: every enabled agent")
        if mode == "round_robin":
            eligible = eligible_speakers(roster, message, group.settings.allow_repeat)
            exclude = {a.id for a in roster if a not in eligible}
            agent = next_in_rotation(roster, await store.thread.last_agent_author(group.id, through=message.seq),
                                     exclude=exclude)
            if agent is None:
                return Decision(message.seq, "none", note="no agent is eligible")
            return Decision(message.seq, "rotation", (agent.id,), (agent.name,))
        return await selector_decision(store, self.deps.llm, group, roster, message,
                                       model=group.settings.selector_model or self.deps.selector_model,
                                       cache_key=cache_key(group, None), tasks=self.deps.tasks,
                                       summaries=self.deps.summaries)

    # stop rules ---------------------------------------------------------
    async def after_turn(self, outcome: TurnOutcome) -> None:
        """Stop rules after a run (whose rows the turn has shown). They judge the run's own episode:
        a reply to an older task (a person posted during the run) never ends the newer one."""
        deps, run, message = self.deps, outcome.run, outcome.message
        if outcome.terminated:
            await self.end_episode(run.episode_id, "terminated")
            return
        if message is None:
            return
        fresh = await deps.store.groups.get_group(run.group_id)
        if fresh.episode_id != message.episode_id:
            return  # an older episode's reply: it does not count toward the current streak
        cap = fresh.settings.max_agent_turns
        if fresh.agent_streak >= cap:
            await self.end_episode(message.episode_id, "max_turns", cap_notice(cap))
        elif await self._stalled(message):
            await self.end_episode(message.episode_id, "stalled", STALLED_NOTICE)

    async def end_episode(self, episode_id: int | None, status: str, notice: str | None = None) -> None:
        """End the episode with `status` (and post `notice` with it); the outbox shows the notice and
        tells the surface of the end after the rows before it."""
        ended = await end_episode(self.deps.store, episode_id, status, self.deps.notice(notice) if notice else None)
        if ended is None:
            return
        episode, shown = ended
        group = await self.deps.store.groups.get_group(episode.group_id)
        if shown:
            self.outbox.wake()
        await self.outbox.announce(group, episode)

    async def _stalled(self, message: Message) -> bool:
        """Seed 003's parrot check: two agent messages in a row nearly repeat earlier ones."""
        if message.episode_id is None:
            return False
        earlier = await self.deps.store.thread.messages(
            message.group_id, after=max(0, message.seq - REPEAT_WINDOW), through=message.seq - 1)
        agent_rows = [m for m in earlier if m.author_type == "agent" and m.episode_id == message.episode_id]
        if not agent_rows or not near_repeat(message.text, [m.text for m in agent_rows]):
            return False
        previous, before = agent_rows[-1], agent_rows[:-1]
        return near_repeat(previous.text, [m.text for m in before])

    async def _settle_episode(self, group: Group) -> None:
        """Nobody is pending: a still-running episode is over for now ('quiet')."""
        if group.episode_id is not None:
            await self.end_episode(group.episode_id, "quiet")
