"""The engine: one place that owns the dispatchers, agent locks and posting.

Surfaces (Discord, the console) call `post_user_message`, the admin verbs
(`bot.core.admin`) and `wait_idle`; everything else happens in the per-group
dispatcher tasks. Background tasks are kept in a set with a done-callback that
logs failures.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Iterable

from bot.core.errors import Busy, NotFound
from bot.core.models import Agent, Episode, EpisodeResult, Group, Message, NewMessage, Usage
from bot.core.ports import LLM, Store, Surface, TokenCounter
from bot.core.prompts import thread_line
from bot.core.stop import strip_terminate
from bot.core.tags import parse_tags, with_agents
from bot.core.turn import AgentTurn, TurnOutcome, publish
from bot.core.dispatcher import GroupDispatcher

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self, store: Store, llm: LLM, surface: Surface, counter: TokenCounter, *, selector_model: str | None = None
    ) -> None:
        self.store = store
        self.llm = llm
        self.surface = surface
        self.counter = counter
        self.selector_model = selector_model
        self._dispatchers: dict[int, GroupDispatcher] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._released: dict[int, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._turn = AgentTurn(store, llm, surface, counter)
        self._closed = False

    # life cycle ----------------------------------------------------------
    async def start(self) -> None:
        """Resume from the database: `recover()`, then wake every group."""
        await self.recover()
        await self.wake_all()

    async def recover(self) -> None:
        """Mark runs a crashed process left running, and send rows the surface never confirmed."""
        interrupted = await self.store.interrupt_running_runs()
        if interrupted:
            log.info("marked %d run(s) left running by a previous process as interrupted", interrupted)
        for group in await self.store.list_groups():
            await self.republish_unconfirmed(group)

    async def wake_all(self) -> None:
        for group in await self.store.list_groups():
            self.wake(group.id)

    async def republish_unconfirmed(self, group: Group) -> None:
        for message in await self.store.unconfirmed_messages(group.id):
            agent = await self._author(message)
            log.info("group=%s seq=%s was never confirmed by the surface; sending it now", group.id, message.seq)
            await publish(self.store, self.surface, group, message, agent)

    async def _author(self, message: Message) -> Agent | None:
        """The agent who wrote a row, or a stand-in with its snapshot name when it was removed since."""
        if message.author_agent_id is None:
            return None
        try:
            return await self.store.get_agent(message.author_agent_id)
        except NotFound:
            return Agent(message.author_agent_id, message.group_id, message.author_name, "", "")

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._dispatchers.clear()

    def spawn(self, coro: Coroutine[object, object, object], name: str) -> asyncio.Task[object]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    # dispatch ------------------------------------------------------------
    def dispatcher(self, group_id: int) -> GroupDispatcher:
        dispatcher = self._dispatchers.get(group_id)
        if dispatcher is None or dispatcher.task is None or dispatcher.task.done():
            dispatcher = dispatcher or GroupDispatcher(self, group_id)
            self._dispatchers[group_id] = dispatcher
            dispatcher.task = self.spawn(dispatcher.loop(), f"dispatcher-{group_id}")  # type: ignore[assignment]
        return dispatcher

    def wake(self, group_id: int) -> None:
        if not self._closed:
            self.dispatcher(group_id).wake()

    async def wait_idle(self, group_id: int, timeout: float | None = None) -> None:
        """Until the group's dispatcher has nothing left to do (or is paused)."""
        dispatcher = self.dispatcher(group_id)
        await asyncio.wait_for(dispatcher.idle.wait(), timeout)

    def agent_lock(self, agent_id: int) -> asyncio.Lock:
        return self._locks.setdefault(agent_id, asyncio.Lock())

    async def wait_unlocked(self, agent_id: int) -> None:
        while self.agent_lock(agent_id).locked():
            event = self._released.setdefault(agent_id, asyncio.Event())
            await event.wait()

    async def deliver(self, group: Group, agent: Agent, snapshot: int, *, selector_usage: Usage, source: str) -> TurnOutcome:
        lock = self.agent_lock(agent.id)
        if lock.locked():
            raise Busy(f"{agent.name} is busy with another run; try again when it has answered.")
        async with lock:
            try:
                return await self._turn.run(group, agent, snapshot, selector_usage=selector_usage, source=source)
            finally:
                self._released.pop(agent.id, asyncio.Event()).set()

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
    ) -> Message:
        """Commit a person's message (tags parsed now, once), show it, wake the dispatcher.

        `wake=False` lets a caller ingest a batch (e.g. missed messages) and wake once
        after it, so the batch is routed together.
        """
        roster = await self.store.list_agents(group.id)
        tags = with_agents(parse_tags(text, roster), [a for a in extra_agents if a.enabled])
        new = NewMessage(
            author_type="user",
            author_name=author_name,
            text=text,
            tags=tags,
            author_user_id=user_id,
            external_ids=tuple(external_ids),
            token_count=self.counter.count(thread_line(author_name, text)),
        )
        message, episode = await self.store.append_user_message(group.id, new)
        await publish(self.store, self.surface, group, message, None)
        await self._episode_changed(group, episode)
        if wake:
            self.wake(group.id)
        return message

    async def end_episode(self, group: Group, status: str) -> Episode | None:
        """End the group's current episode with `status`; None when none was running."""
        fresh = await self.store.get_group(group.id)
        if fresh.episode_id is None:
            return None
        current = await self.store.get_episode(fresh.episode_id)
        if not current.running:
            return None
        episode = await self.store.end_episode(current.id, status)
        log.info(
            "episode group=%s episode=%s ended: %s after %d agent turns, %d tokens",
            group.id, episode.id, episode.status, episode.agent_turns, episode.total_tokens,
        )
        await self._episode_changed(fresh, episode)
        return episode

    async def _episode_changed(self, group: Group, episode: Episode) -> None:
        try:
            await self.surface.episode_updated(group, episode)
        except Exception:  # a reaction failing must never stop the chat
            log.warning("group=%s could not show episode %s state", group.id, episode.id, exc_info=True)

    async def stop_episode(self, group: Group) -> Episode | None:
        """Operator stop: end the episode and skip every pending delivery."""
        episode = await self.end_episode(group, "stopped")
        fresh = await self.store.get_group(group.id)
        for agent in await self.store.list_agents(group.id):
            await self.store.set_delivered_through(agent.id, fresh.latest_seq)
        return episode

    # results -------------------------------------------------------------
    async def episode_result(self, episode_id: int) -> EpisodeResult:
        """Seed 000 step 6: the last substantive message as the answer, the thread, the status."""
        episode = await self.store.get_episode(episode_id)
        thread = [m for m in await self.store.messages(episode.group_id, after=episode.task_seq - 1)
                  if m.episode_id == episode.id]
        answer = next((m for m in reversed(thread) if m.author_type == "agent" and strip_terminate(m.text)), None)
        usage = Usage(episode.prompt_tokens, episode.completion_tokens, episode.cached_tokens)
        return EpisodeResult(episode.status, answer, tuple(thread), episode.agent_turns, usage)
