"""The engine: starts and stops the groups this process runs; the door surfaces knock at.

Surfaces (Discord, the console) call `start`, `post_user_message`, the admin
verbs (`bot.core.verbs.admin`), `wait_idle`, the stops (`stops`: a reply, a group's runs, an
episode; `bot.core.runtime.stops`) and `close`. The engine is not their
way to the store: wiring (`bot.wiring`) hands each surface and the verbs the store
typed by the roles they use, and the engine only the runtime's (`RuntimeStore`). A process runs only
the groups of its `scope` whose lease it holds (`bot.core.runtime.ownership`);
each of them has a runtime (`bot.core.runtime.group.GroupRuntime`: its dispatcher,
its outbox and its drafts, sharing events) that works in background tasks, as do the
lease keeper and the schedule ticker (`bot.core.runtime.scheduler`). When the
database takes no writes or cannot be reached for a while, people are told
(`bot.core.runtime.outage`). Background tasks are kept in a set with a done-callback
that logs failures.

The engine composes the parts once: each gets what it uses (a dataclass of store
roles, ports, settings and the few parts it works with: `DispatcherDeps`,
`OutboxDeps`, `TurnDeps`, `DirectDeps`, `SchedulerDeps`, `OwnershipDeps`, `StopDeps`, ...),
never the engine. A message's path (docs/layout.md) passes here once: `post_user_message`
hands it to the intake (`bot.core.runtime.intake`), then wakes its group's runtime.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from functools import partial
from typing import Protocol

from bot.core.features.history import HistoryTools
from bot.core.features.memory import MemoryTools
from bot.core.features.spending import Budgets
from bot.core.features.summary import Summaries
from bot.core.features.tasks import TaskChains
from bot.core.features.tools import ToolRegistry
from bot.core.models import Agent, EpisodeResult, Group, Message, NewMessage, SharedFile, Usage
from bot.core.ports import (
    LLM,
    HasDrafts,
    HasEpisodes,
    HasGroups,
    HasLeases,
    HasNotes,
    HasPosting,
    HasReading,
    HasRecord,
    HasRoster,
    HasRouting,
    HasRuns,
    HasSchedules,
    HasSpending,
    HasSummaries,
    HasThread,
    HasTools,
    HealthStore,
    Surface,
    TokenCounter,
)
from bot.core.rules.doctor import Probe
from bot.core.rules.pricing import DEFAULT_PRICES, Price
from bot.core.rules.prompts import bot_notice
from bot.core.rules.shards import Shards
from bot.core.rules.stop import strip_terminate
from bot.core.runtime.direct import DirectAnswer, DirectDeps, DirectRuns
from bot.core.runtime.dispatcher import DispatcherDeps
from bot.core.runtime.drafts import Drafts
from bot.core.runtime.group import GroupParts, Groups
from bot.core.runtime.intake import Intake, IntakeDeps
from bot.core.runtime.locks import AgentLocks
from bot.core.runtime.outage import OutageNotices
from bot.core.runtime.outbox import OutboxDeps
from bot.core.runtime.ownership import LEASE_TTL, Ownership, OwnershipDeps
from bot.core.runtime.regenerate import Regenerated, RegenerateDeps, Regenerations
from bot.core.runtime.scheduler import TICK, Scheduler, SchedulerDeps
from bot.core.runtime.stops import StopDeps, Stops
from bot.core.runtime.turn import AgentTurn, TurnDeps
from bot.core.runtime.worker import RetryPolicy

log = logging.getLogger(__name__)


class RuntimeStore(HasGroups, HasRoster, HasThread, HasPosting, HasRouting, HasEpisodes, HasRuns, HasSummaries,
                   HasDrafts, HasNotes, HasTools, HasSchedules, HasRecord, HasSpending, HasReading, HasLeases,
                   HealthStore, Protocol):
    """What the engine and the parts it composes read and write: each part is handed the roles it names
    (`DispatchStore`, `TurnStore`, `OutboxStore`, `IntakeStore`, `DirectStore`, `RegenerateStore`,
    `SchedulerStore`, `OwnershipStore`, `StopStore`, the features' stores); the engine itself asks the
    runs, posting, routing, episodes and thread roles (`resume`, `episode_result`).
    No webhooks, interactions or diagnosis: those are the surfaces' and the verbs' (their own store
    Protocols, handed them by wiring)."""


class Engine:
    def __init__(
        self, store: RuntimeStore, llm: LLM, surface: Surface, counter: TokenCounter, *,
        selector_model: str | None = None, scope: str = "", retry: RetryPolicy | None = None,
        lease_ttl: float = LEASE_TTL, prices: Mapping[str, Price] | None = None, shards: Shards | None = None,
        clock: Callable[[], float] = time.time, schedule_tick: float = TICK, summary_model: str | None = None,
        endpoint_checks: Probe | None = None, tools: ToolRegistry | None = None, tool_checks: Probe | None = None,
    ) -> None:
        """`scope`: the groups this process may run: a group key, or a key prefix ending
        in ':' ("discord:"); "" means every group in the store. `prices`: per model, for
        usage and budgets (default: `bot.core.rules.pricing.DEFAULT_PRICES`). `shards`: the bot
        runs as shards and this process serves those (only their guilds' groups).
        `clock` and `schedule_tick`: when schedules are due, and how often they are looked at.
        `summary_model`: the model that writes rolling summaries (default: the group's selector model).
        `endpoint_checks`: /roundtable doctor's check of the model endpoints. `tools`: the tool
        sources agents may be granted (MCP servers; memory_write is added); `tool_checks`:
        /roundtable doctor's lines of the MCP servers."""
        self._store = store  # the runtime's own: surfaces and verbs are handed theirs by wiring, never through here
        self.prices: Mapping[str, Price] = DEFAULT_PRICES if prices is None else prices
        self.llm = llm
        self.surface = surface
        self.counter = counter
        self.selector_model = selector_model
        self.summary_model = summary_model
        self.clock = clock
        self.endpoint_checks = endpoint_checks
        self.tool_checks = tool_checks
        self.retry = retry or RetryPolicy()
        self.notice: Callable[[str], NewMessage] = partial(bot_notice, counter.count)  # a notice, ready to append
        self.tasks = TaskChains(store)  # what each episode's prompts keep asking for (bot.core.features.tasks)
        self.summaries = Summaries(  # bot.core.features.summary; ROUNDTABLE_SUMMARY_MODEL, else the selector's
            store, llm, counter, lambda group: summary_model or group.settings.selector_model or selector_model)
        self.budgets = Budgets(store, self.prices, self.notice)  # bot.core.features.spending
        self.locks = AgentLocks()  # each agent's one lock (bot.core.runtime.locks)
        self.tools = tools or ToolRegistry()  # bot.core.features.tools
        self.tools.add(MemoryTools(store))
        self.tools.add(HistoryTools(store))  # history_search, history_read (granted)
        self.surface_connected = asyncio.Event()  # backlogs are routed once people can be answered
        self._tasks: set[asyncio.Task[object]] = set()
        self._closed = False
        self.ownership = Ownership(
            OwnershipDeps(store=store, spawn=self.spawn, resume=self.resume, wake=self.wake, drop=self.drop,
                          running_runs=lambda: self.locks.running),
            scope, ttl=lease_ttl, shards=shards)
        self.scheduler = Scheduler(
            SchedulerDeps(store=store, counter=counter, clock=clock, locks=self.locks, owns=self.owns, wake=self.wake,
                          spawn=self.spawn),
            schedule_tick)
        self.outages = OutageNotices(store, surface, lambda: self.ownership.owned, self.spawn)
        self._unsubscribe = store.health.subscribe(self.outages.changed)
        self.turn = AgentTurn(TurnDeps(
            store=store, llm=llm, surface=surface, counter=counter, tasks=self.tasks, summaries=self.summaries,
            notice=self.notice, tools=self.tools, retry=self.retry))
        self.groups = Groups(GroupParts(
            dispatching=DispatcherDeps(
                store=store, llm=llm, selector_model=selector_model, tasks=self.tasks, summaries=self.summaries,
                retry=self.retry, locks=self.locks, connected=self.surface_connected,
                backlog_turn=asyncio.Lock(),  # one group's backlog chunk at a time (FIFO: groups take turns)
                turn=self.turn.run, budgets=self.budgets, spawn=self.spawn, lost=self.drop, clock=clock,
                notice=self.notice),
            showing=OutboxDeps(store=store, surface=surface, retry=self.retry, clock=clock, spawn=self.spawn,
                               lost=self.drop),
            drafts=Drafts(store, surface)), owns=self.owns)
        self.intake = Intake(IntakeDeps(store=store, surface=surface, counter=counter, retry=self.retry,
                                        notice=self.notice, show=self.groups.show))
        self.direct = DirectRuns(DirectDeps(
            store=store, llm=llm, counter=counter, prices=self.prices, locks=self.locks, runtime=self.groups.get,
            tools=self.tools))
        self.regenerations = Regenerations(RegenerateDeps(
            store=store, locks=self.locks, runtime=self.groups.live, turn=self.turn.regenerate,
            budgets=self.budgets))
        self.stops = Stops(StopDeps(store=store, turn=self.turn, runtime=self.groups.live, surface=surface))

    # starting and stopping groups -----------------------------------------
    async def start(self, *, connected: bool = True) -> None:
        """Load the token counter, then take the leases of the groups in scope and resume each from the database.

        The counter loads its encoding (~0.1 s) here, off the event loop, not on the first message.
        A group's backlog (rows stored while no process ran it) is routed in the background, never
        during the start; with `connected=False` (a surface that connects after this, like Discord's
        gateway) only once `connect` is called. Fresh messages are routed at once either way."""
        if connected:
            self.connect()
        await asyncio.to_thread(self.counter.count, "warm up")
        await self.ownership.start()
        await self.scheduler.start()

    def connect(self) -> None:
        """The surface is connected: people can be answered, so backlogs may be routed now."""
        self.surface_connected.set()

    async def claim(self, group: Group) -> str | None:
        """Run `group` here from now on; None when done, else who runs it instead."""
        return await self.ownership.claim(group)

    async def resume(self, group: Group, *, backlog: bool = False) -> None:
        """A group this process has just taken: its left-over runs are interrupted (their
        agents run again), its unconfirmed rows are shown (after looking for any part
        that arrived before a crash), its runtime wakes. `backlog`: its rows not routed
        yet waited while no process ran it (this process is starting, or takes it over), and
        are routed as a backlog (`GroupDispatcher.route`)."""
        self.outages.seen(group)
        await self._store.runs.interrupt_running_runs(group.id)
        unsure = {m.seq for m in await self._store.posting.unconfirmed_messages(group.id)}
        if unsure:
            log.info("group=%s: %d row(s) not confirmed by the surface yet; showing them now", group.id, len(unsure))
        waited = backlog and bool(await self._store.routing.unrouted(group.id, through=group.latest_seq, limit=1))
        self.groups.get(group.id).resume(unsure, backlog=waited)
        self.wake(group.id)

    def wake(self, group_id: int) -> None:
        """Something changed in the group: route and deliver (claiming the group first
        when this process does not run it yet)."""
        if self._closed:
            return
        if not self.owns(group_id):
            self.ownership.claim_soon(group_id)
            return
        self.groups.get(group_id).wake()

    def owns(self, group_id: int) -> bool:
        return group_id in self.ownership.owned

    def drop(self, group_id: int) -> None:
        """Stop running a group here (another process holds its lease now)."""
        self.ownership.forget(group_id)
        self.groups.drop(group_id)

    async def close(self) -> None:
        """Stop taking work, interrupt the runs in flight (recorded as 'interrupted'),
        give up the leases. The store stays open (its owner closes it)."""
        self._closed = self.outages.closed = True
        self._unsubscribe()
        self.groups.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self.ownership.release()
        except Exception as exc:  # the store may already be gone; leases expire anyway
            log.warning("could not release group leases: %s", exc)

    def spawn(self, coro: Coroutine[object, object, object], name: str) -> asyncio.Task[object]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    # what surfaces ask of a group -------------------------------------------
    async def post_user_message(
        self,
        group: Group,
        *,
        author_name: str,
        user_id: str | None,
        text: str,
        extra_agents: Iterable[Agent] = (),
        external_ids: Iterable[str] = (),
        wake: bool = True,
        waiting: Callable[[str], None] | None = None,
        attachments: Iterable[SharedFile] = (),
        reply_to: int | None = None,
    ) -> Message:
        """Commit a person's message (tags parsed now, once), show it, wake the group's runtime.

        `wake=False` lets a caller ingest a batch (e.g. missed messages) and wake once
        after it, so the batch is routed together. AlreadyStored when one of
        `external_ids` is already a row. While another process holds the database
        (`StoreBusy`), it takes no writes (`StoreUnwritable`: a full disk) or it cannot be
        reached (`StoreUnavailable`: its server restarts; nothing was written in any case)
        the message is tried again, with the retry policy's waits,
        until it is stored (SPEC §4: ingest never drops); `waiting` is told why once, at
        the first wait. `attachments`: the files shared with it (`bot.core.rules.attachments`),
        counted in the row's tokens as agents' prompts show them (text within `max_text`, images at
        the provider's estimate). `reply_to`: the seq of the group's row it replies to (a Discord reply: it
        continues that row's work, SPEC §6).
        """
        self.outages.refresh(group)
        message = await self.intake.post(
            group, author_name=author_name, user_id=user_id, text=text, extra_agents=extra_agents,
            external_ids=external_ids, waiting=waiting, attachments=attachments, reply_to=reply_to)
        if wake:
            self.wake(group.id)
        return message

    def shown(self, group_id: int) -> None:
        """New rows were committed: show them."""
        self.groups.show(group_id)

    async def all_shown(self, group_id: int) -> None:
        """Until every row committed in the group so far is shown (its outbox is idle)."""
        await self.groups.get(group_id).all_shown()

    async def wait_idle(self, group_id: int, timeout: float | None = None) -> None:
        """Until the group has nothing left to route, run or show (or is paused, or run elsewhere)."""
        async def idle() -> None:
            await self.ownership.settled(group_id)
            while self.owns(group_id) and not self._closed:
                runtime = self.groups.get(group_id)
                await runtime.until_idle()
                if runtime.idle():
                    return
        async with asyncio.timeout(timeout):  # (not wait_for: on Python 3.11 it can lose a cancel)
            await idle()

    async def ask(self, group: Group, agent: Agent, prompt: str, *, asker: str, post: bool = False) -> DirectAnswer:
        """A direct run (`/ask`): `agent` answers `asker` privately (and in the group, with `post`)."""
        answer = await self.direct.ask(group, agent, prompt, asker=asker, post=post)
        await self.check_budget(group.id)
        return answer

    async def regenerate(self, group: Group, seq: int | None, *, user_id: str | None, operator: bool) -> Regenerated:
        """"Regenerate reply" (SPEC §8): `bot.core.runtime.regenerate`. `seq` None: the newest agent message."""
        return await self.regenerations.regenerate(group, seq, user_id=user_id, operator=operator)

    async def check_budget(self, group_id: int) -> bool:
        """After a run settles (or the budget changes): when this month's cost has reached the
        group's monthly_budget, pause it with one notice naming the budget. True when it paused."""
        paused = await self.budgets.check(group_id)
        if paused:
            self.groups.show(group_id)
        return paused

    # results -------------------------------------------------------------
    async def episode_result(self, episode_id: int) -> EpisodeResult:
        """Seed 000 step 6: the last substantive message as the answer, the thread, the status."""
        episode = await self._store.episodes.get_episode(episode_id)
        thread = [m for m in await self._store.thread.messages(episode.group_id, after=episode.task_seq - 1)
                  if m.episode_id == episode.id]
        answer = next((m for m in reversed(thread) if m.author_type == "agent" and strip_terminate(m.text)), None)
        usage = Usage(episode.prompt_tokens, episode.completion_tokens, episode.cached_tokens)
        return EpisodeResult(episode.status, answer, tuple(thread), episode.agent_turns, usage)
