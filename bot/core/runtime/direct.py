"""Direct runs (`/ask`): one agent answers one person, privately, over the group's recent rows.

Seed 002: a direct run is a private session whose opening context is the
agent's system prompt and the last 10 public rows of the group, then the
person's prompt. It takes the agent's one lock (`bot.core.runtime.locks`): an agent
in a group run is reported busy at once (nothing is queued), and the group's
deliveries to that agent wait until the direct run ends. With `post`, the
answer is also posted in the group as an ordinary agent message: the cap,
the stop rules and the routing of whom it tags apply as to any reply.

The run is recorded (kind 'direct': its tokens count in usage and budgets);
its private answer is given to the asker, not stored. A private run never
moves the agent's cursor: what waits for the agent in the group still does.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import LeaseLost, LLMError, UserFacingError
from bot.core.features.memory import load_memory
from bot.core.features.spending import budget_refusal, month_cost
from bot.core.features.tools import MAX_TOOL_STEPS, RunContext, ToolLoop, ToolRegistry
from bot.core.models import Agent, ChatMessage, Completion, Group, Message, NewMessage, RunResult, Usage
from bot.core.ports import (
    LLM,
    HasGroups,
    HasNotes,
    HasReading,
    HasRecord,
    HasRoster,
    HasRuns,
    HasSpending,
    HasThread,
    HasTools,
    TokenCounter,
)
from bot.core.rules.attachments import brief_text
from bot.core.rules.pricing import Price
from bot.core.rules.prompts import system_message, thread_line
from bot.core.rules.stop import guard_impersonation, strip_terminate, terminates, why_nothing_shown
from bot.core.rules.tags import parse_tags
from bot.core.runtime.locks import AgentLocks
from bot.core.runtime.turn import TurnOutcome, cache_key, others_in

log = logging.getLogger(__name__)

RECENT_ROWS = 10  # seed 002: the opening snapshot holds the last 10 public rows
RECENT_HEADER = "(the latest messages of the group chat, for context)"
NO_RECENT = "(the group chat has no messages yet)"
SHOWN_WAIT = 10.0  # seconds a posted answer may take to reach the surface before the asker is told


@dataclass(frozen=True)
class DirectAnswer:
    agent: Agent
    text: str  # as shown to people (TERMINATE removed); "" when the agent had nothing to say
    usage: Usage
    posted: Message | None = None  # with post: the row it became
    not_posted: str | None = None  # with post: why it was not posted


def direct_messages(group: Group, agent: Agent, recent: Sequence[Message], asker: str, prompt: str, *,
                    post: bool, memory: str = "") -> list[ChatMessage]:
    """The system message (with the agent's `<memory>` notes when memory is on), the group's
    recent rows, then the person's prompt. A direct run reads the notes; only group runs write them."""
    lines = "\n".join(thread_line(m.author_name, brief_text(m)) for m in recent) or NO_RECENT
    where = ("your answer will also be posted in the group chat" if post
             else "only they will see your answer")
    return [
        ChatMessage("system", system_message(agent, group.settings.brief, memory)),
        ChatMessage("user", f"{RECENT_HEADER}\n{lines}"),
        ChatMessage("user", f"{asker} asks you ({agent.name}) directly ({where}):\n{prompt}"),
    ]


class DirectStore(HasGroups, HasRoster, HasThread, HasRuns, HasNotes, HasReading, HasRecord, HasSpending, HasTools,
                  Protocol):
    """What a direct run reads and writes: the group's recent rows and roster, the run, the agent's
    notes, the names that tag people, this month's spending, its tools' grants and journal."""


class PostedIn(Protocol):
    """What an answer posted in the group asks of the group's runtime (`bot.core.runtime.group`)."""

    async def after_turn(self, outcome: TurnOutcome) -> None:
        """The stop rules, as after any reply (the dispatcher's); its row is shown."""

    def wake(self) -> None:
        """Route the answer (it may tag agents) and deliver."""

    async def all_shown(self) -> None:
        """Until every row committed in the group so far is shown."""


@dataclass(frozen=True)
class DirectDeps:
    """What direct runs work with (the engine composes it)."""

    store: DirectStore
    llm: LLM
    counter: TokenCounter
    prices: Mapping[str, Price]
    locks: AgentLocks
    runtime: Callable[[int], PostedIn]  # the group's runtime, for an answer posted in it
    tools: ToolRegistry | None = None  # the tool sources: a direct run offers what the agent was granted


class DirectRuns:
    def __init__(self, deps: DirectDeps) -> None:
        self.deps = deps

    async def ask(self, group: Group, agent: Agent, prompt: str, *, asker: str, post: bool = False) -> DirectAnswer:
        """Run `agent` for `asker` now. Busy when the agent is in another run; UserFacingError
        when the model fails (the run is recorded as failed)."""
        deps = self.deps
        store = deps.store
        if not agent.enabled:
            raise UserFacingError(f"{agent.name} is disabled; an admin can turn it back on with /agent enable.")
        budget = group.settings.monthly_budget
        if budget:  # a direct run spends the group's money too
            cost = await month_cost(store, group, deps.prices)
            if cost >= budget:
                raise UserFacingError(budget_refusal(cost, budget))
        async with deps.locks.holding(agent, "a direct run"):
            group = await store.groups.get_group(group.id)
            snapshot = group.latest_seq
            recent = await store.thread.messages(group.id, after=max(0, snapshot - RECENT_ROWS), through=snapshot)
            roster = await store.roster.list_agents(group.id)
            memory = await load_memory(store, agent, deps.counter)
            messages = direct_messages(group, agent, recent, asker, prompt, post=post, memory=memory)
            run = await store.runs.start_run(group.id, agent.id, "direct", snapshot)
            try:
                completion, calls = await self._answer(group, agent, run.id, messages)
            except LLMError as exc:
                log.warning("group=%s agent=%s direct run=%s failed: %s", group.id, agent.name, run.id, exc)
                await store.runs.finish_run(run.id, RunResult("failed", error=str(exc), calls=1), cap=0)
                raise UserFacingError(f"{agent.name} could not answer: {exc.public}. Try again later.") from None
            except asyncio.CancelledError:
                await store.runs.finish_run(run.id, RunResult("interrupted"), cap=0)
                raise
            others = others_in(recent, roster, agent)
            cleaned = guard_impersonation(completion.text, agent.name, others)
            text = strip_terminate(cleaned)
            if not text:
                await store.runs.finish_run(run.id, RunResult("empty", completion.usage, model=completion.model,
                                                              provider=completion.provider, calls=calls), cap=0)
                return DirectAnswer(agent, "", completion.usage,
                                    not_posted=why_nothing_shown(completion.text) if post else None)
            if not post:
                await store.runs.finish_run(run.id, RunResult("answered", completion.usage, model=completion.model,
                                                      provider=completion.provider, calls=calls),
                                            cap=0)
                log.info("group=%s agent=%s direct run=%s answered %s privately", group.id, agent.name, run.id, asker)
                return DirectAnswer(agent, text, completion.usage)
            return await self._post(group, agent, run.id, cleaned, text, completion, roster, calls)

    async def _answer(self, group: Group, agent: Agent, run_id: int, messages: list[ChatMessage]
                      ) -> tuple[Completion, int]:
        """The model's answer and the model calls it took: one call, or with tools the agent was
        granted (SPEC §6b: direct runs use the agent's grants) the tool loop, journaled in the run."""
        deps = self.deps
        key = cache_key(group, agent.id) + "-direct"
        box = deps.tools.offered(await deps.store.tools.tool_grants(agent.id)) if deps.tools is not None else None
        if not box:
            return await deps.llm.complete(messages, model=agent.model, cache_key=key, max_tokens=agent.max_tokens,
                                           temperature=agent.temperature), 1
        loop = ToolLoop(deps.llm, deps.store, box, agent, RunContext(group.id, agent.id, run_id), cache_key=key,
                        max_steps=MAX_TOOL_STEPS, resume=False)
        result = await loop.run(messages)
        if result.error is not None:
            raise result.error
        log.info("group=%s agent=%s direct run=%s: %d tool call(s)", group.id, agent.name, run_id, len(result.done))
        return Completion(result.reply or "", result.usage, result.model, provider=result.provider), result.calls

    async def _post(self, group: Group, agent: Agent, run_id: int, cleaned: str, text: str, completion: Completion,
                    roster: Sequence[Agent], calls: int = 1) -> DirectAnswer:
        """Settle the run with its answer as a group reply, under the rules of any reply."""
        usage, model, provider = completion.usage, completion.model, completion.provider
        deps = self.deps
        store = deps.store
        reply = NewMessage(
            author_type="agent", author_name=agent.name, text=cleaned,
            tags=parse_tags(cleaned, roster, people=await store.reading.people(group.people_scope),
                            author_agent_id=agent.id),
            author_agent_id=agent.id, source_run_id=run_id,
            token_count=deps.counter.count(thread_line(agent.name, cleaned)),
        )
        fresh = await store.groups.get_group(group.id)
        try:
            finished = await store.runs.finish_run(
                run_id, RunResult("posted", usage, reply=reply, model=model, provider=provider, calls=calls),
                cap=fresh.settings.max_agent_turns)
        except LeaseLost:
            await store.runs.finish_run(run_id, RunResult("answered", usage, model=model, provider=provider,
                                                          calls=calls,
                                                          error="another process runs the group"), cap=0)
            return DirectAnswer(agent, text, usage, not_posted="another process runs this group right now")
        if finished.reply is None:
            return DirectAnswer(agent, text, usage, not_posted=finished.run.error or finished.run.status)
        log.info("group=%s agent=%s direct run=%s posted #%s", group.id, agent.name, run_id, finished.reply.seq)
        outcome = TurnOutcome(finished.run, finished.reply, terminates(completion.text, cleaned), finished.notice)
        runtime = deps.runtime(group.id)
        await runtime.after_turn(outcome)
        runtime.wake()
        with contextlib.suppress(TimeoutError):  # shown: the asker gets a link that works
            async with asyncio.timeout(SHOWN_WAIT):  # (not wait_for: on Python 3.11 it can lose a cancel)
                await runtime.all_shown()
        return DirectAnswer(agent, text, usage, posted=await store.thread.get_message(group.id, finished.reply.seq))
