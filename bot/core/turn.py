"""One agent run over a frozen snapshot: prompt, call, clean, post, stop rules.

`AgentTurn.run()` never raises for model or cap problems: it records the run's
outcome on the run row and returns it, so the dispatcher can move the cursor.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from bot.core.context import Trimmed, load_thread
from bot.core.errors import CapReached, DeliveryError, LLMError
from bot.core.models import Agent, ChatMessage, Group, Message, NewMessage, Run, Usage
from bot.core.ports import LLM, Store, Surface, TokenCounter
from bot.core.prompts import SYSTEM_AUTHOR, participant_prompt, system_message, thread_line
from bot.core.stop import ends_with_terminate, guard_impersonation, strip_terminate
from bot.core.tags import parse_tags

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnOutcome:
    run: Run
    message: Message | None
    terminated: bool


def others_in(thread: Sequence[Message], roster: Sequence[Agent], agent: Agent) -> list[str]:
    """The other participants: enabled agents, then the people who spoke in the thread."""
    names = [a.name for a in roster if a.enabled and a.id != agent.id]
    for message in thread:
        if message.author_type == "user" and message.author_name not in names:
            names.append(message.author_name)
    return names


def build_messages(
    group: Group, agent: Agent, roster: Sequence[Agent], trimmed: Trimmed, task: Message | None
) -> tuple[list[ChatMessage], list[str]]:
    shown = ([trimmed.task_pulled_up] if trimmed.task_pulled_up else []) + list(trimmed.kept)
    others = others_in(shown, roster, agent)
    task_text = task.text if task else "(no task yet: follow the conversation)"
    prompt = participant_prompt(agent, others, task_text, trimmed.render())
    return [ChatMessage("system", system_message(agent, group.settings.brief)), ChatMessage("user", prompt)], others


class AgentTurn:
    def __init__(self, store: Store, llm: LLM, surface: Surface, counter: TokenCounter) -> None:
        self.store = store
        self.llm = llm
        self.surface = surface
        self.counter = counter

    async def run(
        self, group: Group, agent: Agent, snapshot: int, *, selector_usage: Usage, source: str
    ) -> TurnOutcome:
        store = self.store
        run = await store.start_run(group.id, agent.id, "group", snapshot, group.episode_id)
        roster = await store.list_agents(group.id)
        task = await self._task(group)
        trimmed = await load_thread(store, group.id, through=snapshot, budget=group.settings.context_budget,
                                    task_seq=task.seq if task else None)
        messages, others = build_messages(group, agent, roster, trimmed, task)
        try:
            async with self.surface.working(group, agent):
                completion = await self.llm.complete(messages, model=agent.model)
        except LLMError as exc:
            log.warning("group=%s agent=%s run=%s failed: %s", group.id, agent.name, run.id, exc)
            run = await store.finish_run(run.id, "failed", selector_usage=selector_usage, error=str(exc))
            await self._notice(group, f"{agent.name} could not answer ({exc}); its turn was skipped.")
            return TurnOutcome(run, None, False)
        usage = completion.usage
        if group.episode_id is not None:
            await store.add_episode_usage(group.episode_id, usage + selector_usage)
        cleaned = guard_impersonation(completion.text, agent.name, others)
        terminated = ends_with_terminate(cleaned)
        if not strip_terminate(cleaned):
            log.info("group=%s agent=%s run=%s: empty reply after cleaning; nothing posted", group.id, agent.name, run.id)
            run = await store.finish_run(run.id, "empty", usage=usage, selector_usage=selector_usage)
            return TurnOutcome(run, None, terminated)
        if await self._episode_was_stopped(run):
            run = await store.finish_run(run.id, "discarded", usage=usage, selector_usage=selector_usage,
                                         error="the episode was stopped during the run")
            return TurnOutcome(run, None, False)
        new = NewMessage(
            author_type="agent",
            author_name=agent.name,
            text=cleaned,
            tags=parse_tags(cleaned, roster, author_agent_id=agent.id),
            author_agent_id=agent.id,
            source_run_id=run.id,
            token_count=self.counter.count(thread_line(agent.name, cleaned)),
        )
        try:
            message = await store.append_agent_message(
                group.id, new, snapshot_seq=snapshot, cap=group.settings.max_agent_turns
            )
        except CapReached as exc:
            log.info("group=%s agent=%s run=%s refused: %s", group.id, agent.name, run.id, exc)
            run = await store.finish_run(run.id, "refused", usage=usage, selector_usage=selector_usage, error=str(exc))
            return TurnOutcome(run, None, False)
        run = await store.finish_run(run.id, "posted", usage=usage, selector_usage=selector_usage, posted_seq=message.seq)
        log.info(
            "turn group=%s episode=%s speaker=%s source=%s selector_tokens=%d/%d/%d "
            "participant_tokens=%d/%d/%d%s message=%r",
            group.id, message.episode_id, agent.name, source,
            selector_usage.prompt_tokens, selector_usage.completion_tokens, selector_usage.cached_tokens,
            usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
            " (estimated)" if usage.estimated else "", cleaned[:300],
        )
        await publish(store, self.surface, group, message, agent)
        return TurnOutcome(run, message, terminated)

    async def _task(self, group: Group) -> Message | None:
        if group.episode_id is None:
            return None
        episode = await self.store.get_episode(group.episode_id)
        return await self.store.get_message(group.id, episode.task_seq)

    async def _episode_was_stopped(self, run: Run) -> bool:
        if run.episode_id is None:
            return False
        episode = await self.store.get_episode(run.episode_id)
        return episode.status == "stopped"

    async def _notice(self, group: Group, text: str) -> Message:
        return await post_notice(self.store, self.surface, self.counter, group, text)


async def publish(store: Store, surface: Surface, group: Group, message: Message, agent: Agent | None) -> bool:
    """Show a committed row and record the confirmation; False if the surface failed."""
    try:
        ids = await surface.publish(group, message, agent)
    except DeliveryError as exc:
        log.error("group=%s seq=%s could not be published: %s", group.id, message.seq, exc)
        return False
    if message.author_type != "user":
        await store.confirm_message(group.id, message.seq, list(ids))
    return True


async def post_notice(store: Store, surface: Surface, counter: TokenCounter, group: Group, text: str) -> Message:
    new = NewMessage(
        author_type="system",
        author_name=SYSTEM_AUTHOR,
        text=text,
        token_count=counter.count(thread_line(SYSTEM_AUTHOR, text)),
    )
    message = await store.append_system_message(group.id, new)
    await publish(store, surface, group, message, None)
    return message
