"""The engine: one place that owns the dispatchers, outboxes, agent locks and posting.

Surfaces (Discord, the console) call `start`, `post_user_message`, the admin
verbs (`bot.core.verbs.admin`), `wait_idle` and `close`; everything else happens in
background tasks: per owned group a dispatcher (routing and runs) and an
outbox (showing committed rows), plus the lease keeper and the schedule
ticker (`bot.core.runtime.scheduler`). A process runs only
the groups of its `scope` whose lease it holds (`bot.core.runtime.ownership`).
When the database takes no writes or cannot be reached for a while (the store's
`health`), the people of every group run here are told once, on the surface directly
(the notice cannot be stored; where the group is, as last read, when the store cannot
say), and once more when it works again.
Background tasks are kept in a set with a done-callback that logs failures.

The engine composes its parts: each gets what it uses (a dataclass of store
roles, ports, settings and callbacks: `DispatcherDeps`, `OutboxDeps`,
`TurnDeps`, `DirectDeps`, `SchedulerDeps`, `OwnershipDeps`), never the engine.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from bot.core.errors import DeliveryError, NotFound, StoreBusy, StoreError, StoreUnavailable, StoreUnwritable
from bot.core.features.history import HistoryTools
from bot.core.features.memory import MemoryTools
from bot.core.features.spending import budget_reached_notice, month_cost
from bot.core.features.summary import Summaries
from bot.core.features.tasks import TaskChains
from bot.core.features.tools import ToolRegistry
from bot.core.models import Agent, Episode, EpisodeResult, Group, Message, NewMessage, SharedFile, Usage
from bot.core.ports import LLM, Store, Surface, TokenCounter
from bot.core.rules.attachments import ImageKey, ImageSource, counted_text, images_tokens, unused_files, unused_line
from bot.core.rules.doctor import Probe
from bot.core.rules.pricing import DEFAULT_PRICES, Price, dollars, exact_dollars
from bot.core.rules.prompts import SYSTEM_AUTHOR, thread_line
from bot.core.rules.secrets import mask_error
from bot.core.rules.shards import Shards
from bot.core.rules.stop import strip_terminate
from bot.core.rules.store_health import Outage, fixed_notice, outage_notice
from bot.core.rules.tags import parse_tags, with_agents
from bot.core.runtime.direct import DirectAnswer, DirectDeps, DirectRuns
from bot.core.runtime.dispatcher import DispatcherDeps, GroupDispatcher
from bot.core.runtime.locks import AgentLocks
from bot.core.runtime.outbox import Outbox, OutboxDeps
from bot.core.runtime.ownership import LEASE_TTL, Ownership, OwnershipDeps
from bot.core.runtime.regenerate import Regenerated, RegenerateDeps, Regenerations
from bot.core.runtime.scheduler import TICK, Scheduler, SchedulerDeps
from bot.core.runtime.steering import StopAnswer
from bot.core.runtime.turn import AgentTurn, TurnDeps, TurnOutcome
from bot.core.runtime.worker import GroupWorker, RetryPolicy, wait_for_store

log = logging.getLogger(__name__)
W = TypeVar("W", bound=GroupWorker)


async def _nothing(_external_id: str) -> None:
    return None


class Engine:
    def __init__(
        self, store: Store, llm: LLM, surface: Surface, counter: TokenCounter, *, selector_model: str | None = None,
        scope: str = "", retry: RetryPolicy | None = None, lease_ttl: float = LEASE_TTL,
        prices: Mapping[str, Price] | None = None, shards: Shards | None = None,
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
        self.store = store
        self.prices: Mapping[str, Price] = DEFAULT_PRICES if prices is None else prices
        self.llm = llm
        self.surface = surface
        self.counter = counter
        self.selector_model = selector_model
        self.summary_model = summary_model
        self.tasks = TaskChains(store)  # what each episode's prompts keep asking for (bot.core.features.tasks)
        self.summaries = Summaries(store, llm, counter, self.summary_model_of)  # bot.core.features.summary
        self.retry = retry or RetryPolicy()
        self.locks = AgentLocks()  # each agent's one lock (bot.core.runtime.locks)
        self.ownership = Ownership(
            OwnershipDeps(store=store, spawn=self.spawn, resume=self.resume, wake=self.wake, drop=self.drop,
                          running_runs=lambda: self.running_runs),
            scope, ttl=lease_ttl, shards=shards)
        self._dispatchers: dict[int, GroupDispatcher] = {}
        self._outboxes: dict[int, Outbox] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._closed = False
        self.clock = clock
        self.scheduler = Scheduler(
            SchedulerDeps(store=store, counter=counter, clock=clock, locks=self.locks, owns=self.owns, wake=self.wake,
                          spawn=self.spawn),
            schedule_tick)
        self._told = asyncio.Lock()  # store outage notices go out one after the other, in order
        self._unsubscribe = store.health.subscribe(self._store_health_changed)
        self._groups_seen: dict[int, Group] = {}  # each group run here as last read (for the notices above)
        self._images: OrderedDict[ImageKey, str] = OrderedDict()  # fetched images, as data URLs
        self._told_no_images: set[str | None] = set()  # models whose images were named only, logged once
        self._told_unused: set[tuple[int, int, int]] = set()  # (group, seq, file) a person was told agents lack
        self.endpoint_checks = endpoint_checks
        self.tool_checks = tool_checks
        self.surface_connected = asyncio.Event()  # backlogs are routed once people can be answered
        self._backlog_turn = asyncio.Lock()  # one group's backlog chunk at a time (FIFO: groups take turns)
        self.tools = tools or ToolRegistry()  # bot.core.features.tools
        self.tools.add(MemoryTools(store))
        self.tools.add(HistoryTools(store))  # history_search, history_read (granted)
        self._turn = AgentTurn(TurnDeps(
            store=store, llm=llm, surface=surface, counter=counter, tasks=self.tasks, summaries=self.summaries,
            notice=self.notice, images=self.images, withheld_images=self.withheld_images,
            tell_unused=self.tell_unused, tools=self.tools, retry=self.retry, shown=self.shown))
        self._direct = DirectRuns(DirectDeps(
            store=store, llm=llm, counter=counter, prices=self.prices, locks=self.locks, after_turn=self.after_turn,
            wake=self.wake, all_shown=self.all_shown, tools=self.tools))
        self._dispatching = DispatcherDeps(
            store=store, llm=llm, selector_model=selector_model, tasks=self.tasks, summaries=self.summaries,
            retry=self.retry, locks=self.locks, connected=self.surface_connected, backlog_turn=self._backlog_turn,
            deliver=self.deliver, end_episode=self.end_episode, shown=self.shown, all_shown=self.all_shown,
            sweep_drafts=self.sweep_drafts, lost=self.drop, clock=clock, notice=self.notice)
        self.regenerations = Regenerations(RegenerateDeps(
            store=store, locks=self.locks, owns=self.owns, active=self.active, turn=self._turn.regenerate,
            after=self._regenerated))
        self._showing = OutboxDeps(store=store, surface=surface, retry=self.retry, clock=clock,
                                   episode_changed=self.episode_changed, lost=self.drop)

    def summary_model_of(self, group: Group) -> str | None:
        """The model that writes a group's rolling summaries: ROUNDTABLE_SUMMARY_MODEL, else its selector's."""
        return self.summary_model or group.settings.selector_model or self.selector_model

    # life cycle ----------------------------------------------------------
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

    def backlog_turn(self) -> asyncio.Lock:
        """Held while a dispatcher reads or stores a chunk of its group's backlog: one chunk at a
        time in the process, groups in turn, so backlogs never crowd out fresh messages' reads and
        writes (which do not take it)."""
        return self._backlog_turn

    async def claim(self, group: Group) -> str | None:
        """Run `group` here from now on; None when done, else who runs it instead."""
        return await self.ownership.claim(group)

    async def resume(self, group: Group, *, backlog: bool = False) -> None:
        """A group this process has just taken: its left-over runs are interrupted (their
        agents run again), its unconfirmed rows are shown (after looking for any part
        that arrived before a crash), its dispatcher wakes. `backlog`: its rows not routed
        yet waited while no process ran it (this process is starting, or takes it over), and
        are routed as a backlog (`GroupDispatcher.route`)."""
        self._seen(group)
        await self.store.runs.interrupt_running_runs(group.id)
        unsure = {m.seq for m in await self.store.posting.unconfirmed_messages(group.id)}
        if unsure:
            log.info("group=%s: %d row(s) not confirmed by the surface yet; showing them now", group.id, len(unsure))
        self.outbox(group.id).unsure |= unsure
        if backlog and await self.store.routing.unrouted(group.id, through=group.latest_seq, limit=1):
            self.dispatcher(group.id).catching_up = True
        self.wake(group.id)

    async def close(self) -> None:
        """Stop taking work, interrupt the runs in flight (recorded as 'interrupted'),
        give up the leases. The store stays open (its owner closes it)."""
        self._closed = True
        self._unsubscribe()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._dispatchers.clear()
        self._outboxes.clear()
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

    def drop(self, group_id: int) -> None:
        """Stop running a group here (another process holds its lease now)."""
        self.ownership.forget(group_id)
        for worker in (self._dispatchers.pop(group_id, None), self._outboxes.pop(group_id, None)):
            if worker is not None and worker.task is not None:
                worker.task.cancel()

    # dispatch ------------------------------------------------------------
    def owns(self, group_id: int) -> bool:
        return group_id in self.ownership.owned

    def dispatcher(self, group_id: int) -> GroupDispatcher:
        return self._running(self._dispatchers, group_id, lambda: GroupDispatcher(self._dispatching, group_id))

    def outbox(self, group_id: int) -> Outbox:
        return self._running(self._outboxes, group_id, lambda: Outbox(self._showing, group_id))

    async def all_shown(self, group_id: int) -> None:
        """Until every row committed in the group so far is shown (its outbox is idle)."""
        await self.outbox(group_id).idle.wait()

    async def after_turn(self, outcome: TurnOutcome) -> None:
        """The stop rules after a run posted outside the dispatcher (a direct run's answer)."""
        await self.dispatcher(outcome.run.group_id).after_turn(outcome)

    def _running(self, workers: dict[int, W], group_id: int, make: Callable[[], W]) -> W:
        """The group's worker of that kind, started (and woken once) when it is not running."""
        worker = workers.get(group_id)
        if worker is None or worker.task is None or worker.task.done():
            worker = worker or make()
            workers[group_id] = worker
            worker.task = self.spawn(worker.loop(), f"{worker.kind}-{group_id}")
            worker.wake()
        return worker

    def wake(self, group_id: int) -> None:
        """Something changed in the group: route and deliver (claiming the group first
        when this process does not run it yet)."""
        if self._closed:
            return
        if not self.owns(group_id):
            self.ownership.claim_soon(group_id)
            return
        self.outbox(group_id).wake()
        self.dispatcher(group_id).wake()

    def shown(self, group_id: int) -> None:
        """New rows were committed: show them."""
        if not self._closed and self.owns(group_id):
            self.outbox(group_id).wake()

    async def wait_idle(self, group_id: int, timeout: float | None = None) -> None:
        """Until the group has nothing left to route, run or show (or is paused, or run elsewhere)."""
        async def idle() -> None:
            await self.ownership.settled(group_id)
            while self.owns(group_id) and not self._closed:
                dispatcher, outbox = self.dispatcher(group_id), self.outbox(group_id)
                await dispatcher.idle.wait()
                await outbox.idle.wait()
                if dispatcher.idle.is_set() and outbox.idle.is_set():
                    return
        await asyncio.wait_for(idle(), timeout)

    @property
    def running_runs(self) -> int:
        """Runs (group or direct) in flight in this process."""
        return self.locks.running

    def agent_lock(self, agent_id: int) -> asyncio.Lock:
        return self.locks.lock(agent_id)

    async def wait_unlocked(self, agent_id: int) -> None:
        await self.locks.wait_unlocked(agent_id)

    def holding(self, agent: Agent, what: str) -> AbstractAsyncContextManager[None]:
        """The agent's one lock (`AgentLocks.holding`): Busy at once when another run holds it."""
        return self.locks.holding(agent, what)

    async def deliver(
        self, group: Group, agent: Agent, snapshot: int, *, selector_usage: Usage, source: str
    ) -> TurnOutcome:
        async with self.locks.holding(agent, "a group run"):
            outcome = await self._turn.run(group, agent, snapshot, selector_usage=selector_usage, source=source)
        if outcome.run.status == "stopped" and outcome.run.episode_id is not None:
            await self._stopped(group, outcome.run.episode_id)
        await self.check_budget(group.id)
        return outcome

    def active(self, group: Group, roster: Iterable[Agent]) -> bool:
        """A run of the group is in flight here, or its dispatcher has rows to route or run."""
        dispatcher = self._dispatchers.get(group.id)
        return any(self.locks.locked(a.id) for a in roster) or (dispatcher is not None and not dispatcher.idle.is_set())

    async def regenerate(self, group: Group, seq: int | None, *, user_id: str | None, operator: bool) -> Regenerated:
        """"Regenerate reply" (SPEC §8): `bot.core.runtime.regenerate`. `seq` None: the newest agent message."""
        return await self.regenerations.regenerate(group, seq, user_id=user_id, operator=operator)

    async def _regenerated(self, group_id: int) -> None:
        self.shown(group_id)
        await self.check_budget(group_id)
    async def _stopped(self, group: Group, episode_id: int) -> None:
        """A person stopped a run: its episode ended as `stopped` with the run (shown as any end is)."""
        episode = await self.store.episodes.get_episode(episode_id)
        log.info("episode group=%s episode=%s ended: %s after %d agent turns, %d tokens", group.id, episode.id,
                 episode.status, episode.agent_turns, episode.total_tokens)
        if self.owns(group.id) and not self._closed:
            self.outbox(group.id).announce(episode)
        else:
            await self.episode_changed(group, episode)

    # people steer a reply (SPEC §8; bot.core.runtime.steering) -------------
    async def stop_reply(self, group_id: int, agent_id: int, *, user_id: str | None, operator: bool,
                         by: str) -> StopAnswer:
        """A person pressed ⏹ Stop on the agent's provisional message (or Ctrl-C on the console):
        stop its run when they started its episode or are an operator."""
        steer = self._turn.steering.get(group_id, agent_id)
        if steer is None or steer.stopped:
            return StopAnswer(False)
        if not operator:
            starter = await self._turn.starter_of(steer)
            if starter is None or starter.author_user_id != user_id:
                return StopAnswer(False, refused=True, starter=starter.author_user_id if starter else None)
        return StopAnswer(self._turn.steering.stop(group_id, agent_id, by))

    def stop_running(self, group_id: int, by: str) -> int:
        """Stop every run working in the group now (the console's Ctrl-C); how many."""
        return sum(self._turn.steering.stop(s.group_id, s.agent_id, by) for s in self._turn.steering.running(group_id))

    def images(self, group: Group) -> ImageSource:
        """People's images of `group`, fetched through the surface when a run is made (kept in memory a while)."""
        async def fetch(file: SharedFile) -> bytes:
            return await self.surface.file_data(group, file)
        return ImageSource(fetch, group.id, self._images)

    def withheld_images(self, model: str | None, count: int) -> None:
        """A prompt named `count` images only, as `model` takes none: the log says so once per model."""
        if count and model not in self._told_no_images:
            self._told_no_images.add(model)
            log.info("model %s does not take images: its prompts name each image instead",
                     model or "(the default model)")

    async def tell_unused(self, group: Group, unused: Mapping[tuple[int, int], tuple[str, str]]) -> None:
        """Images a run could not send ((seq, index) -> (name, why)): one short line per message to
        its person (SPEC §8), each file told once (several agents read the same message)."""
        fresh: dict[int, list[tuple[str, str]]] = {}
        for (seq, index), found in sorted(unused.items()):
            if (group.id, seq, index) not in self._told_unused:
                self._told_unused.add((group.id, seq, index))
                fresh.setdefault(seq, []).append(found)
        for seq, files in fresh.items():
            try:
                author = (await self.store.thread.get_message(group.id, seq)).author_name
                await self.store.thread.append_system_message(group.id, self.notice(unused_line(author, files)))
            except (StoreError, NotFound) as exc:  # a courtesy: the run is settled either way
                log.warning("group=%s seq=%s: could not tell what agents cannot use: %s", group.id, seq, exc)
        if fresh:
            self.shown(group.id)

    async def ask(self, group: Group, agent: Agent, prompt: str, *, asker: str, post: bool = False) -> DirectAnswer:
        """A direct run (`/ask`): `agent` answers `asker` privately (and in the group, with `post`)."""
        answer = await self._direct.ask(group, agent, prompt, asker=asker, post=post)
        await self.check_budget(group.id)
        return answer

    async def check_budget(self, group_id: int) -> bool:
        """After a run settles (or the budget changes): when this month's cost has reached the
        group's monthly_budget, pause it with one notice naming the budget. True when it paused."""
        group = await self.store.groups.get_group(group_id)
        budget = group.settings.monthly_budget
        if not budget or group.paused:
            return False
        cost = await month_cost(self.store, group, self.prices)
        if cost < budget:
            return False
        await self.store.groups.update_group(group.id, paused=True)
        await self.store.thread.append_system_message(group.id, self.notice(budget_reached_notice(cost, budget)))
        log.warning("group=%s paused: this month's cost %s reached its monthly budget %s", group.id, dollars(cost),
                    exact_dollars(budget))
        self.shown(group.id)
        return True

    # posting -------------------------------------------------------------
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
        """Commit a person's message (tags parsed now, once), show it, wake the dispatcher.

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
        files = tuple(attachments)
        settings = group.settings
        if group.id in self._groups_seen:
            self._seen(group)
        failures = 0
        while True:
            try:
                roster = await self.store.roster.list_agents(group.id)
                people = await self.store.reading.people(group.people_scope)
                tags = with_agents(parse_tags(text, roster, people=people), [a for a in extra_agents if a.enabled])
                new = NewMessage(
                    author_type="user",
                    author_name=author_name,
                    text=text,
                    tags=tags,
                    author_user_id=user_id,
                    external_ids=tuple(external_ids),
                    token_count=self.counter.count(
                        thread_line(author_name, counted_text(text, files, settings.max_text)))
                    + images_tokens(files, settings.max_images),
                    attachments=files,
                    reply_to_seq=reply_to,
                )
                message, episode = await self.store.thread.append_user_message(group.id, new)
                break
            except (StoreBusy, StoreUnwritable, StoreUnavailable) as exc:
                failures += 1
                delay = self.retry.store_delay(failures, exc)  # the store logs an outage; tried once it is over
                log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,
                        "group=%s: a message from %s is not stored yet (%s); trying again in %.1fs at the latest",
                        group.id, author_name, exc, delay)
                if failures == 1 and waiting is not None:
                    waiting(exc.public if isinstance(exc, StoreUnwritable) else str(exc))
                await wait_for_store(self.store.health, exc, delay)
        try:
            await self.surface.publish(group, message, None, record=_nothing)
        except (StoreError, DeliveryError) as exc:  # expected (the database or the surface away): one line
            log.warning("group=%s seq=%s: could not echo the message: %s", group.id, message.seq, exc)
        except Exception:  # a person's own row is stored; echoing it is only a courtesy
            log.warning("group=%s seq=%s: could not echo the message", group.id, message.seq, exc_info=True)
        await self.episode_changed(group, episode)
        unused = unused_files(message.attachments, settings.max_images)
        if unused:  # what agents cannot use is told to the person too, not only to the model (SPEC §8)
            try:
                await self.store.thread.append_system_message(group.id, self.notice(unused_line(author_name, unused)))
                self.shown(group.id)
            except StoreError as exc:  # the message is stored; the line is a courtesy
                log.warning("group=%s seq=%s: could not tell %s what agents cannot use: %s", group.id,
                            message.seq, author_name, exc)
        if wake:
            self.wake(group.id)
        return message

    def notice(self, text: str) -> NewMessage:
        """A notice from the bot, ready to append."""
        return NewMessage(author_type="system", author_name=SYSTEM_AUTHOR, text=text,
                          token_count=self.counter.count(thread_line(SYSTEM_AUTHOR, text)))

    async def end_episode(self, episode_id: int | None, status: str, notice: str | None = None) -> Episode | None:
        """End the episode with `status` (and post `notice` with it); None when it had ended already."""
        if episode_id is None:
            return None
        ended = await self.store.episodes.end_episode(episode_id, status,
                                                      notice=self.notice(notice) if notice else None)
        if ended is None:
            return None
        episode, shown = ended
        log.info(
            "episode group=%s episode=%s ended: %s after %d agent turns, %d tokens",
            episode.group_id, episode.id, episode.status, episode.agent_turns, episode.total_tokens,
        )
        group = await self.store.groups.get_group(episode.group_id)
        if shown is not None:
            self.shown(group.id)
        if self.owns(group.id) and not self._closed:
            self.outbox(group.id).announce(episode)  # after the rows before it are shown
        else:
            await self.episode_changed(group, episode)
        return episode

    async def episode_changed(self, group: Group, episode: Episode) -> None:
        """Tell the surface that `episode` started or ended (never raises)."""
        try:
            await self.surface.episode_updated(group, episode)
        except (StoreError, DeliveryError) as exc:  # expected (the database or Discord away): one line
            log.warning("group=%s could not show episode %s state: %s", group.id, episode.id, exc)
        except Exception:  # a reaction failing must never stop the chat
            log.warning("group=%s could not show episode %s state", group.id, episode.id, exc_info=True)

    async def stop_episode(self, group: Group) -> Episode | None:
        """Operator stop: end the episode and skip every pending delivery."""
        fresh = await self.store.groups.get_group(group.id)
        episode = await self.end_episode(fresh.episode_id, "stopped")
        fresh = await self.store.groups.get_group(group.id)
        for agent in await self.store.roster.list_agents(group.id):
            await self.store.roster.set_delivered_through(agent.id, fresh.latest_seq)
        return episode

    def _store_health_changed(self, outage: Outage) -> None:
        """The database stopped taking writes for a while, or takes them again: tell people."""
        if self._closed:
            return
        text = outage_notice(outage) if outage.fixed_at is None else fixed_notice(outage)
        self.spawn(self._tell_groups(text), "store-health")

    async def _tell_groups(self, text: str) -> None:
        """`text` on the surface of every group run here, directly (not a row: it may not be storable).
        A group the store cannot read now (its server is away) is told where it was last seen."""
        async with self._told:
            for group_id in sorted(self.ownership.owned):
                group: Group | None
                try:
                    group = self._seen(await self.store.groups.get_group(group_id))
                except StoreError as exc:
                    group = self._groups_seen.get(group_id)
                    if group is None:
                        log.warning("group=%s: could not tell people about the database: %s", group_id, exc)
                        continue
                try:
                    if group.enabled:
                        await self.surface.alert(group, mask_error(text))
                except Exception:  # best effort: /roundtable status shows it too
                    log.warning("group=%s: could not tell people about the database", group_id, exc_info=True)

    def _seen(self, group: Group) -> Group:
        """Remember where a group is, to tell its people about the database when the store cannot say."""
        self._groups_seen[group.id] = group
        return group

    async def sweep_drafts(self, group: Group) -> None:
        """Take back the provisional messages that no row owns and no run will use (a run
        that ended without a reply and could not take its own back, e.g. it died mid-stream
        and its agent has nothing left to answer). Called when the group has nobody pending."""
        parts = await self.store.drafts.orphan_drafts(group.id)
        if not parts:
            return
        try:
            gone = await self.surface.remove_drafts(group, parts)
        except DeliveryError as exc:
            log.warning("group=%s: %d provisional message(s) could not be taken back yet: %s", group.id, len(parts),
                        exc)
            return
        await self.store.drafts.drop_drafts(gone)
        log.info("group=%s: took back %d provisional message(s) of replies never posted", group.id, len(gone))

    # results -------------------------------------------------------------
    async def episode_result(self, episode_id: int) -> EpisodeResult:
        """Seed 000 step 6: the last substantive message as the answer, the thread, the status."""
        episode = await self.store.episodes.get_episode(episode_id)
        thread = [m for m in await self.store.thread.messages(episode.group_id, after=episode.task_seq - 1)
                  if m.episode_id == episode.id]
        answer = next((m for m in reversed(thread) if m.author_type == "agent" and strip_terminate(m.text)), None)
        usage = Usage(episode.prompt_tokens, episode.completion_tokens, episode.cached_tokens)
        return EpisodeResult(episode.status, answer, tuple(thread), episode.agent_turns, usage)
