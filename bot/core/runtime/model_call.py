"""An agent's call of its model, for a run (`bot.core.runtime.turn`): one completion, streamed to the
surface's draft when the group streams, or with tools (granted ones, or memory_write with memory on)
the tool loop (`bot.core.features.tools`), streamed too: the draft shows a line per tool call
(`bot.core.rules.tool_lines`: running, then ✓ or ✗), then the text of the current step. A worker's
run offers `group_post` (`bot.core.features.worker`) and is not shown while it is written. The call
takes over the provisional messages an interrupted run of the agent left (its reply's row owns
them); a tool source's word to the group is a notice, a held tool call is asked of the surface.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol, TypeVar

from bot.core.errors import LLMError
from bot.core.features import memory
from bot.core.features.memory import Answer, run_agent_tools
from bot.core.features.tools import RunContext, ToolBox, ToolLoop, ToolRegistry
from bot.core.features.worker import TOOL_NAME as GROUP_POST
from bot.core.features.worker import GroupPost, Posts
from bot.core.models import (
    Agent,
    Approval,
    ApprovalAsk,
    ChatMessage,
    Completion,
    DraftPart,
    Group,
    JournaledCall,
    Message,
    NewMessage,
    Run,
    ToolOutput,
    Usage,
)
from bot.core.ports import (
    LLM,
    Draft,
    HasDrafts,
    HasGroups,
    HasNotes,
    HasReading,
    HasRuns,
    HasThread,
    HasTools,
    Surface,
    TokenCounter,
)
from bot.core.rules.draft import ReplyStream
from bot.core.rules.tool_lines import call_line
from bot.core.runtime.steering import Steer

T = TypeVar("T")


class CallStore(HasGroups, HasThread, HasRuns, HasDrafts, HasNotes, HasReading, HasTools, Protocol):
    """What a model call reads and writes: the provisional messages it takes over, the agent's tools and
    notes and their journal, a worker's posts (its group's cap, the names that tag people), notices."""


@dataclass(frozen=True)
class CallDeps:
    """What an agent's model call works with (`AgentTurn` composes it once for all groups)."""

    store: CallStore
    llm: LLM
    surface: Surface
    counter: TokenCounter
    notice: Callable[[str], NewMessage]  # a notice from the bot, ready to append
    starter: Callable[[int, int | None], Awaitable[Message | None]]  # who started an episode (`AgentTurn.starter`)
    tools: ToolRegistry | None = None  # the tool sources (bot.core.features.tools); None: memory_write only


class ToolSteps:
    """What the draft of a run with tools shows: a line per tool call (SPEC §6b "Visible": running,
    then ✓ or ✗), in the order they ran, then the text of the current step (a new model call's text
    replaces the step before's). Its methods are the tool loop's `on_call`, `on_text`, `on_step`."""

    def __init__(self, name: str, others: Sequence[str]) -> None:
        self.name, self.others = name, others
        self.reply = ReplyStream(name, others)  # the current step's text
        self.lines: dict[int, str] = {}  # journal id -> the call's line
        self.draft: Draft | None = None  # the surface's draft showing `visible`, when the group streams

    def visible(self) -> str:
        text = self.reply.visible()
        calls = "\n".join(self.lines.values())
        return f"{calls}\n\n{text}" if calls and text else calls or text

    def call(self, entry: JournaledCall, output: ToolOutput | None, seconds: float) -> None:
        self.lines[entry.id] = call_line(entry.tool, entry.arguments, done=output is not None,
                                         error=output is not None and output.error, seconds=seconds,
                                         result=output.text if output is not None else "")
        if self.draft is not None:
            self.draft.grew()

    def piece(self, text: str) -> None:
        self.reply.add(text)
        if self.draft is not None:
            self.draft.grew()

    def step(self) -> None:
        self.reply = ReplyStream(self.name, self.others)


async def _stopping(draft: Draft | None, work: Awaitable[T]) -> T:
    """`work`'s result; then `draft` (when there is one) stops, however `work` ended: cancelled
    (shutting down), without waiting for its last update (what was shown is recorded for the next run)."""
    if draft is None:
        return await work
    try:
        done = await work
    except asyncio.CancelledError:
        await draft.stop(wait=False)  # shutting down: what was shown is recorded for the next run
        raise
    except BaseException:  # anything else ends the draft too (KeyboardInterrupt); re-raised
        await draft.stop()
        raise
    await draft.stop()
    return done


class ModelCall:
    """An agent's call of its model (one for the process, as `AgentTurn` is)."""

    def __init__(self, deps: CallDeps) -> None:
        self.deps = deps

    async def answer(self, group: Group, agent: Agent, run: Run, messages: list[ChatMessage], others: Sequence[str],
                     *, key: str, posts: Posts | None, roster: Sequence[Agent], steer: Steer | None,
                     shown: Callable[[], None]) -> tuple[Answer, Draft | None]:
        """The agent's answer: one call (streamed to the surface's draft when the group streams),
        or with tools (granted, or memory_write with memory on) the tool loop
        (`bot.core.features.tools`), streamed too. The run takes over the provisional messages an
        interrupted run of the agent left, streamed or not (its reply's row owns them). `key`: the
        call's `prompt_cache_key`; `shown`: a worker's post was committed (the group's outbox wakes)."""
        deps = self.deps
        regenerating = run.kind == "regenerate"  # its reply edits the message it replaces: nothing to take over
        parts = [] if regenerating else await deps.store.drafts.adopt_drafts(group.id, agent.id, run.id)
        box = await self._offered(agent)
        if posts is not None:  # a worker: group_post offered, the run not shown while it is written
            box = self._group_post(group, agent, run, others, roster, posts, box, shown)
            return await self._with_tools(group, agent, run, messages, others, box, parts, key=key,
                                         private=True, steer=steer)
        if box:
            return await self._with_tools(group, agent, run, messages, others, box, parts, key=key, steer=steer)
        reply = ReplyStream(agent.name, others)
        draft = deps.surface.draft(group, agent, run.id, parts, reply.visible) if group.settings.stream else None
        if steer is not None:
            steer.draft, steer.shown, steer.prompt = draft, reply.visible, lambda: messages
            steer.raw = lambda: reply.text
        try:
            if draft is None:
                completion = await deps.llm.complete(messages, model=agent.model, cache_key=key,
                                                     max_tokens=agent.max_tokens, temperature=agent.temperature)
            else:
                completion = await self._streamed(agent, messages, key, reply, draft)
        except LLMError as exc:
            return Answer("", Usage(), "", False, 1, error=exc), draft
        return Answer(completion.text, completion.usage, completion.model, False, 1,
                      provider=completion.provider), draft

    async def _streamed(self, agent: Agent, messages: list[ChatMessage], key: str, reply: ReplyStream,
                        draft: Draft) -> Completion:
        """The model's answer, streamed: each piece grows the draft; the draft stops before it is settled."""
        def piece(text: str) -> None:
            reply.add(text)
            draft.grew()

        return await _stopping(draft, self.deps.llm.stream(messages, on_text=piece, model=agent.model, cache_key=key,
                                                            max_tokens=agent.max_tokens,
                                                            temperature=agent.temperature))

    async def _offered(self, agent: Agent) -> ToolBox:
        """The tools the agent's run offers: memory_write when memory is on, and what it was granted."""
        registry = self.deps.tools or ToolRegistry()
        if not any(isinstance(source, memory.MemoryTools) for source in registry.sources):
            registry.add(memory.MemoryTools(self.deps.store))
        grants = await self.deps.store.tools.tool_grants(agent.id)
        return registry.offered(grants, (memory.TOOL_NAME,) if agent.memory else ())

    def _group_post(self, group: Group, agent: Agent, run: Run, others: Sequence[str], roster: Sequence[Agent],
                    posts: Posts, box: ToolBox, shown: Callable[[], None]) -> ToolBox:
        """`box` with a worker's `group_post` (`bot.core.features.worker`), a source of this run's own;
        `shown`: each post is shown at once (the group's outbox wakes)."""
        store = self.deps.store

        async def post(cap: int, message: NewMessage) -> Message:
            posted = await store.runs.post_from_run(run.id, message, cap=cap)
            shown()
            return posted

        async def cap() -> int:
            return (await store.groups.get_group(group.id)).settings.max_agent_turns

        source = GroupPost(agent, others, posts, post=post, roster=roster,
                           people=lambda: store.reading.people(group.people_scope), count=self.deps.counter.count,
                           cap=cap)
        spec = source.tools()[0]
        return ToolBox({**box.entries, GROUP_POST: (source, spec, GROUP_POST)})

    async def _with_tools(self, group: Group, agent: Agent, run: Run, messages: list[ChatMessage],
                          others: Sequence[str], box: ToolBox, parts: Sequence[DraftPart], *, key: str,
                          private: bool = False, steer: Steer | None = None) -> tuple[Answer, Draft | None]:
        """The tool loop; with the group streaming, each step's text shown as it is written (not a
        worker's: `private`)."""
        deps = self.deps
        steps = ToolSteps(agent.name, others)
        if group.settings.stream and not private:
            steps.draft = deps.surface.draft(group, agent, run.id, parts, steps.visible)
        granted = private or any(not spec.builtin for _, spec, _ in box.entries.values())
        loop = ToolLoop(deps.llm, deps.store, box, agent, RunContext(group.id, agent.id, run.id),
                        cache_key=key, max_steps=group.settings.max_tool_steps if granted else memory.MAX_TOOL_STEPS,
                        final_call=granted, on_text=steps.piece if steps.draft is not None else None,
                        on_step=steps.step, notify=partial(self._notify, group), on_call=steps.call,
                        approve=partial(self._approve, group, agent, run), resume=run.kind != "regenerate")
        if steer is not None:
            steer.draft, steer.shown, steer.raw = steps.draft, lambda: steps.reply.visible(), lambda: steps.reply.text
            steer.prompt = lambda: loop.result.conversation if loop.result else messages
            steer.spent = lambda: loop.result.usage if loop.result else Usage()
            steer.calls = lambda: loop.result.calls if loop.result else 0
        return await _stopping(steps.draft, run_agent_tools(loop, messages, memory=agent.memory)), steps.draft

    async def _notify(self, group: Group, text: str) -> None:
        """A tool source's word to the group (`ToolLoop`'s `notify`): a notice."""
        await self.deps.store.thread.append_system_message(group.id, self.deps.notice(text))

    async def _approve(self, group: Group, agent: Agent, run: Run, tool: str, arguments: str, key: str) -> Approval:
        """A tool call held for a person's Approve or Deny (`ToolLoop`'s `approve`), asked of the surface;
        the person who started the run's episode may answer."""
        starter = await self.deps.starter(group.id, run.episode_id)
        ask = ApprovalAsk(key, agent.name, tool, arguments, float(group.settings.approval_timeout),
                          starter.author_user_id if starter else None, starter.author_name if starter else "")
        return await self.deps.surface.approve(group, agent, ask)
