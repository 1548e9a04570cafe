"""One agent run over a frozen snapshot: prompt, call, clean, settle.

`AgentTurn.run()` never raises for model or cap problems: it hands the run's
result to the store, which settles it in one transaction (status, tokens, the
reply or notice, the agent's cursor), and returns the outcome; the outbox shows
what was posted and the dispatcher applies the stop rules.

With the group's `stream` setting on, the reply is shown while the model writes it
(`bot.core.rules.draft`): the surface's draft shows what may be shown of it, paced by the
surface, and stops before the run is settled, so the committed row's publish has the
last word. The run first takes over the provisional messages an interrupted run of
the agent left (its reply replaces them); a run that posts nothing takes its own back.
An agent with tools (granted ones, or memory_write with memory on) runs the tool loop
(`bot.core.features.tools`), streamed too: the draft shows a line per tool call
(`bot.core.rules.tool_lines`: running, then ✓ or ✗), then the text of the current step.
A person may stop a group run while it works (`bot.core.runtime.steering`): it settles as
'stopped' with what its provisional message showed, followed by "(stopped)".

One `AgentTurn` serves every group of the process (its steering, the images it fetched and
what it told are the process's); the group's dispatcher calls `run` and passes its outbox's
`wake` as `shown`: the run wakes it when it commits rows (its reply or notice once settled, a
worker's posts and a line about people's files as they come).
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol, TypeVar

from bot.core.errors import (
    CapReached,
    LLMError,
    NotFound,
    ProviderMissing,
    StoreBusy,
    StoreError,
    StoreUnavailable,
    StoreUnwritable,
)
from bot.core.features import memory
from bot.core.features.context import (
    Trimmed,
    group_cache_key,
    group_header,
    load_thread,
    participant_step,
    window_of,
)
from bot.core.features.memory import Answer, load_memory, run_agent_tools
from bot.core.features.replies import quoted_thread
from bot.core.features.summary import Summaries
from bot.core.features.tasks import TaskChains, Tasks
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
    FinishedRun,
    Group,
    JournaledCall,
    Message,
    NewMessage,
    Run,
    RunResult,
    SharedFile,
    Tags,
    ToolOutput,
    Usage,
)
from bot.core.ports import (
    LLM,
    Draft,
    HasDrafts,
    HasEpisodes,
    HasGroups,
    HasNotes,
    HasReading,
    HasRoster,
    HasRuns,
    HasThread,
    HasTools,
    HealthStore,
    Surface,
    TokenCounter,
)
from bot.core.rules.attachments import ImageKey, ImageSource, PromptFiles, unused_line
from bot.core.rules.draft import ReplyStream
from bot.core.rules.prompts import (
    participant_part,
    participant_prompt,
    shared_messages,
    system_message,
    thread_line,
)
from bot.core.rules.stop import (
    cap_refusal_notice,
    guard_impersonation,
    strip_terminate,
    terminates,
    why_nothing_shown,
)
from bot.core.rules.tags import parse_tags
from bot.core.rules.tool_lines import call_line
from bot.core.runtime.steering import Steer, Steering, StopAnswer, stopped_text
from bot.core.runtime.worker import RetryPolicy, wait_for_store

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class TurnOutcome:
    run: Run
    message: Message | None  # the reply, when it was posted
    terminated: bool
    notice: Message | None = None


def others_in(thread: Sequence[Message], roster: Sequence[Agent], agent: Agent) -> list[str]:
    """The other participants: enabled agents, then the people who spoke in the thread."""
    names = [a.name for a in roster if a.enabled and a.id != agent.id]
    for message in thread:
        if message.author_type == "user" and message.author_name not in names:
            names.append(message.author_name)
    return names


CONTINUED = "(the conversation since then)"


def build_messages(
    group: Group, agent: Agent, roster: Sequence[Agent], trimmed: Trimmed, task: Message | Tasks | None,
    memory: str = "", files: PromptFiles | None = None,
) -> tuple[list[ChatMessage], list[str]]:
    """The agent's messages. Under `prompt_layout: shared` (the default): the group's shared header
    (with the Participant instructions every agent shares) and thread window, then the agent's own part
    (its system prompt, memory, who it is, its role, the others, "Write your next message.") last
    (`bot.core.rules.prompts.shared_messages`, `participant_part`). Under `seed`: the system message,
    the Participant prompt, and the episode's newer rows after it, as follows.

    The prompt's thread holds the window's rows up to the episode's task (fixed
    for the whole episode); the rows after the task follow in one more user
    message. So within an episode each call's messages extend the previous
    call's (until the window moves) and the provider's prompt cache keeps all
    of it: only the rows since the agent's last turn are new. `task`: the
    episode's task, or its `Tasks` (with the earlier requests it continues, all
    in the prompt's <task>). `memory` (the agent's `<memory>` block, when memory
    is on) ends the system message. `files` shows people's files
    (`bot.core.rules.attachments`): text inlined, images as parts still to fetch (`PromptFiles.fill_images`).
    """
    files = files or PromptFiles(group.settings, images=False)
    tasks = task if isinstance(task, Tasks) else Tasks(task)
    current = tasks.current
    others = others_in(tasks.earlier + trimmed.shown, roster, agent)
    if group.settings.prompt_layout == "shared":
        own = participant_part(agent, others, memory)
        shared = shared_messages(group_header(group, roster), tasks.slot(files.text), trimmed.render(files.text), own)
        return files.parts(shared), others
    task_text = tasks.slot(files.text)
    before, after = trimmed.split(current.seq) if current else (trimmed, ())
    prompt = participant_prompt(agent, others, task_text, before.render(files.text))
    messages = [ChatMessage("system", system_message(agent, group.settings.brief, memory)), ChatMessage("user", prompt)]
    if after:
        lines = "\n".join(thread_line(m.author_name, files.text(m)) for m in after)
        messages.append(ChatMessage("user", f"{CONTINUED}\n{lines}"))
    return files.parts(messages), others


def cache_key(group: Group, agent_id: int | None) -> str:
    """The `prompt_cache_key` of a (group, agent) pair, or of the group's selector (agent None); under the
    shared layout, one key for every caller of the group (their prompts share their first bytes)."""
    if group.settings.prompt_layout == "shared":
        return group_cache_key(group)
    return f"roundtable-{group.id}-{'selector' if agent_id is None else agent_id}"


class TurnStore(HasGroups, HasRoster, HasThread, HasEpisodes, HasRuns, HasDrafts, HasNotes, HasReading,
                HasTools, HealthStore, Protocol):
    """What a run reads and writes: its group, roster and thread, its episode, the run itself, the
    provisional messages it takes over, the agent's notes and tools, the names that tag people."""


@dataclass(frozen=True)
class TurnDeps:
    """What an agent's run works with (the engine composes it once for all groups)."""

    store: TurnStore
    llm: LLM
    surface: Surface
    counter: TokenCounter
    tasks: TaskChains
    summaries: Summaries
    notice: Callable[[str], NewMessage]  # a notice from the bot, ready to append
    tools: ToolRegistry | None = None  # the tool sources (bot.core.features.tools); None: memory_write only
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # waits between tries to settle a run


Unused = Mapping[tuple[int, int], tuple[str, str]]  # images a run could not send: (seq, index) -> (name, why)


def _nothing_shown() -> None:
    return None


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


class AgentTurn:
    def __init__(self, deps: TurnDeps) -> None:
        self.deps = deps
        self._told: set[tuple[int, str]] = set()  # (group, outage) told in that group
        self._missing: set[tuple[int, str]] = set()  # (group, model) told its provider is not set up
        self.steering = Steering()  # the runs working now, which people may stop
        self._images: OrderedDict[ImageKey, str] = OrderedDict()  # fetched images, as data URLs
        self._told_no_images: set[str | None] = set()  # models whose images were named only, logged once
        self._told_unused: set[tuple[int, int, int]] = set()  # (group, seq, file) a person was told agents lack

    async def run(
        self, group: Group, agent: Agent, snapshot: int, *, selector_usage: Usage, source: str,
        shown: Callable[[], None] = _nothing_shown,
    ) -> TurnOutcome:
        """`shown`: rows were committed before the run settled (the group's outbox wakes)."""
        run = await self.deps.store.runs.start_run(group.id, agent.id, "group", snapshot)
        posts = Posts() if agent.mode == "worker" else None  # a worker speaks through group_post only
        unused: dict[tuple[int, int], tuple[str, str]] = {}  # images the run could not send
        result, terminated, draft, cap = await self._work(group, agent, run, selector_usage, unused, posts, shown)
        finished = await self._finish(run, result, cap)
        if unused:
            await self.tell_unused(group, unused, shown)
        if draft is not None and finished.reply is None:
            await draft.discard()  # nothing will own what was shown
        reply, notice = await self._settled(group, agent, finished, result, cap, selector_usage, source)
        if reply is None and posts is not None:
            reply = posts.last  # the stop rules judge a worker's last post
        if reply is not None or notice is not None:
            shown()  # the group's outbox shows what the run committed
        return TurnOutcome(finished.run, reply, terminated, notice)

    async def _work(self, group: Group, agent: Agent, run: Run, selector_usage: Usage,
                    unused: dict[tuple[int, int], tuple[str, str]], posts: Posts | None, shown: Callable[[], None],
                    ) -> tuple[RunResult, bool, Draft | None, int]:
        """The run's result, still to be settled: whether it said TERMINATE, the draft that showed it, and
        the group's turn cap it is settled against. A person may stop it meanwhile (`Steering`). Cancelled
        (shutting down), or the database failing it midway, it is recorded as interrupted and re-raised."""
        steer = self.steering.begin(group.id, agent.id, run.id, run.episode_id)
        try:
            fresh = await self.deps.store.groups.get_group(group.id)
            cap = fresh.settings.max_agent_turns
            if run.episode_id is not None and run.episode_id == fresh.episode_id and fresh.agent_streak >= cap:
                # The cap was reached while this run waited (another agent posted): a model call
                # would only pay for a reply the store must refuse.
                refused = RunResult("refused", selector_usage=selector_usage, error=str(CapReached(cap)),
                                    notice=await self._refusal_notice(run, agent, cap))
                return refused, False, None, cap
            result, terminated, draft = await self._steered(fresh, agent, run, selector_usage, unused, posts,
                                                            steer, shown)
            return result, terminated, draft, cap
        except asyncio.CancelledError:
            # Shutting down: the run stays undone (its agent runs again on the next start).
            await self._interrupt(run, selector_usage)
            raise
        except (StoreBusy, StoreUnavailable, StoreUnwritable):
            # The database failed the run midway (its server restarts): recorded as interrupted once
            # it is back, never left 'running'; the dispatcher runs the agent again.
            await self._finish(run, RunResult("interrupted", selector_usage=selector_usage), 0)
            raise
        finally:
            self.steering.end(steer)

    async def _settled(self, group: Group, agent: Agent, finished: FinishedRun, result: RunResult, cap: int,
                       selector_usage: Usage, source: str) -> tuple[Message | None, Message | None]:
        """The reply and the notice of the run as the store settled it (logged), with a notice of why
        it was not posted when the store refused it (another agent posted first)."""
        run, reply, notice = finished.run, finished.reply, finished.notice
        if result.reply is not None and reply is None:
            log.info("group=%s agent=%s run=%s not posted: %s", group.id, agent.name, run.id, run.error)
        if run.status == "refused" and result.status != "refused":  # the store refused it: another agent posted first
            told = await self._refusal_notice(run, agent, cap)
            notice = await self.deps.store.thread.append_system_message(group.id, told) if told else notice
        if reply is not None:
            usage = result.usage
            log.info(
                "turn group=%s episode=%s speaker=%s source=%s selector_tokens=%d/%d/%d "
                "participant_tokens=%d/%d/%d%s message=%r",
                group.id, reply.episode_id, agent.name, source,
                selector_usage.prompt_tokens, selector_usage.completion_tokens, selector_usage.cached_tokens,
                usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                " (estimated)" if usage.estimated else "", reply.text[:300],
            )
        return reply, notice

    async def regenerate(self, group: Group, agent: Agent, target: Message, snapshot: int,
                         shown: Callable[[], None] = _nothing_shown) -> TurnOutcome:
        """Run `agent` again on `snapshot`, the rows its reply `target` answered (SPEC §8 "Regenerate
        reply"): a new run (kind 'regenerate', counted and priced as any) whose reply replaces
        `target`'s text when it is settled, the text before kept as a version; the outbox then edits
        the message in place. It is not streamed (the message shows its old text until the new one
        is whole), takes over nobody's provisional messages or tool journal, and posts no notice: a
        failed or empty answer leaves the message as it was (the outcome's run says why)."""
        store = self.deps.store
        run = await store.runs.start_run(group.id, agent.id, "regenerate", snapshot, replaces=target.seq)
        unused: dict[tuple[int, int], tuple[str, str]] = {}
        try:
            fresh = await store.groups.get_group(group.id)
            quiet = replace(fresh, settings=replace(fresh.settings, stream=False))
            result, terminated, _ = await self._call(quiet, agent, run, Usage(), unused)
        except asyncio.CancelledError:
            await self._interrupt(run, Usage())
            raise
        except (StoreBusy, StoreUnavailable, StoreUnwritable):
            await self._finish(run, RunResult("interrupted"), 0)
            raise
        finished = await self._finish(run, replace(result, notice=None), 0)
        if unused:
            await self.tell_unused(group, unused, shown)
        log.info("group=%s agent=%s run=%s regenerated seq=%s: %s", group.id, agent.name, run.id, target.seq,
                 finished.run.status if finished.run.error is None else f"{finished.run.status} ({finished.run.error})")
        return TurnOutcome(finished.run, finished.reply, terminated)

    async def _steered(self, group: Group, agent: Agent, run: Run, selector_usage: Usage,
                       unused: dict[tuple[int, int], tuple[str, str]], posts: Posts | None, steer: Steer,
                       shown: Callable[[], None]) -> tuple[RunResult, bool, Draft | None]:
        """`_call` as a task a person may stop (`Steering.stop` cancels it): then the run's result
        is 'stopped', with what its provisional message showed."""
        call = asyncio.ensure_future(self._call(group, agent, run, selector_usage, unused, posts, steer, shown))
        steer.task = call
        try:
            return await call
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not steer.stopped or (task is not None and task.cancelling()):
                raise  # shutting down, not a person's stop
        return await self._stopped(group, agent, run, selector_usage, steer), False, steer.draft

    async def _stopped(self, group: Group, agent: Agent, run: Run, selector_usage: Usage, steer: Steer) -> RunResult:
        """A stopped run's result: what its provisional message showed, then "(stopped)", and what
        it spent (the call it was stopped in estimated). Without a provisional message, a notice."""
        deps = self.deps
        if steer.draft is not None:
            await steer.draft.stop()  # its last update is finished, its ids recorded
        shown = steer.shown() if steer.draft is not None else ""
        provisional = bool(shown) or bool(await deps.store.drafts.draft_parts(run.id))
        reply = notice = None
        if provisional:
            text = stopped_text(shown)
            reply = NewMessage(author_type="agent", author_name=agent.name, text=text, tags=Tags(),
                               author_agent_id=agent.id, source_run_id=run.id,
                               token_count=deps.counter.count(thread_line(agent.name, text)))
        else:
            notice = deps.notice(f"⏹ {agent.name}'s turn was stopped by {steer.by}.")
        log.info("group=%s agent=%s run=%s stopped by %s", group.id, agent.name, run.id, steer.by)
        return RunResult("stopped", steer.usage(deps.counter), selector_usage, reply=reply, notice=notice,
                         error=f"stopped by {steer.by}", model=agent.model or "", calls=steer.calls())

    async def _finish(self, run: Run, result: RunResult, cap: int) -> FinishedRun:
        """Settle the run; while the database cannot take it (its server restarts, another process
        holds it, its disk is full) tried again until it can, at once when it is back, so the run is
        never left 'running' and its answer is neither lost nor paid for twice. When a try committed
        but its answer was lost (the connection dropped), the next finds the run settled: its reply
        is read back."""
        store, failures = self.deps.store, 0
        while True:
            try:
                finished = await store.runs.finish_run(run.id, result, cap=cap)
            except (StoreBusy, StoreUnavailable, StoreUnwritable) as exc:
                failures += 1
                delay = self.deps.retry.store_delay(failures, exc)
                log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,
                        "run=%s: its result is not stored yet (%s); trying again in %.1fs at the latest",
                        run.id, exc, delay)
                await wait_for_store(store.health, exc, delay)
                continue
            if failures and finished.reply is None and finished.run.posted_seq is not None:
                reply = await store.thread.get_message(finished.run.group_id, finished.run.posted_seq)
                return FinishedRun(finished.run, reply, finished.notice)
            return finished

    async def _refusal_notice(self, run: Run, agent: Agent, cap: int) -> NewMessage | None:
        """Why `agent` did not answer, unless its episode already ended at the cap (that notice says it)."""
        episodes = self.deps.store.episodes
        if run.episode_id is not None and (await episodes.get_episode(run.episode_id)).status == "max_turns":
            return None
        return self.deps.notice(cap_refusal_notice(agent.name, cap))

    async def _call(self, group: Group, agent: Agent, run: Run, selector_usage: Usage,
                    unused: dict[tuple[int, int], tuple[str, str]], posts: Posts | None = None,
                    steer: Steer | None = None, shown: Callable[[], None] = _nothing_shown,
                    ) -> tuple[RunResult, bool, Draft | None]:
        """Prompt the agent and turn its answer into the run's result (whether it said TERMINATE,
        and the draft that showed it while it was written); `unused` gets the images it could not send."""
        deps = self.deps
        store = deps.store
        roster = await store.roster.list_agents(group.id)
        tasks = await deps.tasks.of(group.id, run.episode_id)
        budget, step = window_of(group.settings, selector=False)
        if agent.context_budget:  # the agent's own window (SPEC §6): under the shared layout it shares less
            budget, step = agent.context_budget, participant_step(agent.context_budget)
        trimmed, replied_to = await quoted_thread(
            store, deps.counter, group.id, budget=budget, tasks=tasks.all,
            summaries=deps.summaries.source(group, roster, tasks),
            load=lambda quoted, summaries: load_thread(
                store, group.id, through=run.snapshot_seq, budget=budget,
                task_seq=tasks.current.seq if tasks.current else None, task_apart=tasks.current is not None,
                step=step, tasks=tasks.all, summaries=summaries, quoted=quoted))
        memory = await load_memory(store, agent, deps.counter)
        files = PromptFiles(group.settings, images=deps.llm.takes_images(agent.model),
                            task_seq=tasks.current.seq if tasks.current else None)
        messages, others = build_messages(group, agent, roster, trimmed, tasks, memory, files)
        if replied_to:  # last, so the prompt's prefix stays cached (bot.core.features.replies)
            messages.append(ChatMessage("user", replied_to))
        self.withheld_images(agent.model, files.withheld)
        async with deps.surface.working(group, agent):
            images = self.images(group)
            messages = await files.fill_images(messages, images)
            unused.update(images.unused)
            answer, draft = await self._complete(group, agent, run, messages, others, posts, roster, steer, shown)
        result, terminated = await self._result(group, agent, run, answer, roster, others, selector_usage, posts)
        return result, terminated, draft

    async def _result(self, group: Group, agent: Agent, run: Run, answer: Answer, roster: Sequence[Agent],
                      others: Sequence[str], selector_usage: Usage, posts: Posts | None = None,
                      ) -> tuple[RunResult, bool]:
        """The run's result from the agent's answer, cleaned (and whether it said TERMINATE). A worker's
        answer is kept private (status 'worked'); it said TERMINATE when one of its posts did."""
        deps, store = self.deps, self.deps.store
        if answer.error is not None:
            exc = answer.error
            log.warning("group=%s agent=%s run=%s failed: %s", group.id, agent.name, run.id, exc)
            failure = self._failure_notice(group, agent, exc)
            return RunResult("failed", answer.usage, selector_usage, error=str(exc), notice=failure,
                             model=answer.model, provider=answer.provider, calls=answer.calls), \
                bool(posts and posts.terminated)
        usage, skipped = answer.usage, (answer.skipped if agent.memory else None)
        if skipped:
            log.info("group=%s agent=%s run=%s: memory_skipped (no note after the reminder)",
                     group.id, agent.name, run.id)
        if posts is not None:
            log.info("group=%s agent=%s run=%s: worker run ended after %d post(s); its final text is private",
                     group.id, agent.name, run.id, len(posts.messages))
            return RunResult("worked", usage, selector_usage, model=answer.model, memory_skipped=skipped,
                             provider=answer.provider, calls=answer.calls, private_text=answer.text), posts.terminated
        cleaned = guard_impersonation(answer.text, agent.name, others)
        terminated = terminates(answer.text, cleaned)
        if not strip_terminate(cleaned):
            log.info("group=%s agent=%s run=%s: nothing left after cleaning (%s); nothing posted",
                     group.id, agent.name, run.id, why_nothing_shown(answer.text))
            notice = None if terminated else deps.notice(
                f"{agent.name} had nothing to add ({why_nothing_shown(answer.text)}).")
            return RunResult("empty", usage, selector_usage, notice=notice, model=answer.model,
                             memory_skipped=skipped, provider=answer.provider, calls=answer.calls), terminated
        reply = NewMessage(
            author_type="agent",
            author_name=agent.name,
            text=cleaned,
            tags=parse_tags(cleaned, roster, people=await store.reading.people(group.people_scope),
                            author_agent_id=agent.id),
            author_agent_id=agent.id,
            source_run_id=run.id,
            token_count=deps.counter.count(thread_line(agent.name, cleaned)),
        )
        return RunResult("posted", usage, selector_usage, reply=reply, model=answer.model,
                         memory_skipped=skipped, provider=answer.provider, calls=answer.calls), terminated

    def _failure_notice(self, group: Group, agent: Agent, exc: LLMError) -> NewMessage | None:
        """Why the agent did not answer. A provider that cannot be reached is told once per outage
        in a group: later turns on it are skipped quietly until it has answered again."""
        said = f"{agent.name} could not answer: {exc.public}. Its turn was skipped"
        if isinstance(exc, ProviderMissing):  # a set-up problem: told once per group and model, not per tag
            if (group.id, exc.model) in self._missing:
                return None
            self._missing.add((group.id, exc.model))
            return self.deps.notice(said + ".")
        if exc.outage is None:
            return self.deps.notice(said + ".")
        if (group.id, exc.outage) in self._told:
            return None
        self._told.add((group.id, exc.outage))
        return self.deps.notice(said + "; until the model service answers again, the turns of agents on it are "
                                       "skipped without another notice.")

    async def _complete(self, group: Group, agent: Agent, run: Run, messages: list[ChatMessage],
                        others: Sequence[str], posts: Posts | None = None, roster: Sequence[Agent] = (),
                        steer: Steer | None = None, shown: Callable[[], None] = _nothing_shown,
                        ) -> tuple[Answer, Draft | None]:
        """The agent's answer: one call (streamed to the surface's draft when the group streams),
        or with tools (granted, or memory_write with memory on) the tool loop
        (`bot.core.features.tools`), streamed too. The run takes over the provisional messages an
        interrupted run of the agent left, streamed or not (its reply's row owns them)."""
        deps = self.deps
        llm, key = deps.llm, cache_key(group, agent.id)
        regenerating = run.kind == "regenerate"  # its reply edits the message it replaces: nothing to take over
        parts = [] if regenerating else await deps.store.drafts.adopt_drafts(group.id, agent.id, run.id)
        box = await self._tools(agent)
        if posts is not None:  # a worker: group_post offered, the run not shown while it is written
            box = self._group_post(group, agent, run, others, roster, posts, box, shown)
            return await self._with_tools(group, agent, run, messages, others, box, parts, private=True, steer=steer)
        if box:
            return await self._with_tools(group, agent, run, messages, others, box, parts, steer=steer)
        reply = ReplyStream(agent.name, others)
        draft = deps.surface.draft(group, agent, run.id, parts, reply.visible) if group.settings.stream else None
        if steer is not None:
            steer.draft, steer.shown, steer.prompt = draft, reply.visible, lambda: messages
            steer.raw = lambda: reply.text
        try:
            if draft is None:
                completion = await llm.complete(messages, model=agent.model, cache_key=key,
                                                max_tokens=agent.max_tokens, temperature=agent.temperature)
            else:
                completion = await self._streamed(agent, messages, key, reply, draft)
        except LLMError as exc:
            return Answer("", Usage(), "", False, 1, error=exc), draft
        return Answer(completion.text, completion.usage, completion.model, False, 1,
                      provider=completion.provider), draft

    async def _tools(self, agent: Agent) -> ToolBox:
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
                          others: Sequence[str], box: ToolBox, parts: Sequence[DraftPart], *, private: bool = False,
                          steer: Steer | None = None) -> tuple[Answer, Draft | None]:
        """The tool loop; with the group streaming, each step's text shown as it is written (not a
        worker's: `private`)."""
        deps = self.deps
        steps = ToolSteps(agent.name, others)
        if group.settings.stream and not private:
            steps.draft = deps.surface.draft(group, agent, run.id, parts, steps.visible)
        granted = private or any(not spec.builtin for _, spec, _ in box.entries.values())
        loop = ToolLoop(deps.llm, deps.store, box, agent, RunContext(group.id, agent.id, run.id),
                        cache_key=cache_key(group, agent.id),
                        max_steps=group.settings.max_tool_steps if granted else memory.MAX_TOOL_STEPS,
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
        starter = await self.starter(group.id, run.episode_id)
        ask = ApprovalAsk(key, agent.name, tool, arguments, float(group.settings.approval_timeout),
                          starter.author_user_id if starter else None, starter.author_name if starter else "")
        return await self.deps.surface.approve(group, agent, ask)

    # people's files ------------------------------------------------------
    def images(self, group: Group) -> ImageSource:
        """People's images of `group`, fetched through the surface when a run is made (kept in memory a while)."""
        async def fetch(file: SharedFile) -> bytes:
            return await self.deps.surface.file_data(group, file)
        return ImageSource(fetch, group.id, self._images)

    def withheld_images(self, model: str | None, count: int) -> None:
        """A prompt named `count` images only, as `model` takes none: the log says so once per model."""
        if count and model not in self._told_no_images:
            self._told_no_images.add(model)
            log.info("model %s does not take images: its prompts name each image instead",
                     model or "(the default model)")

    async def tell_unused(self, group: Group, unused: Unused, shown: Callable[[], None]) -> None:
        """Images a run could not send ((seq, index) -> (name, why)): one short line per message to
        its person (SPEC §8), each file told once (several agents read the same message)."""
        store = self.deps.store
        fresh: dict[int, list[tuple[str, str]]] = {}
        for (seq, index), found in sorted(unused.items()):
            if (group.id, seq, index) not in self._told_unused:
                self._told_unused.add((group.id, seq, index))
                fresh.setdefault(seq, []).append(found)
        for seq, files in fresh.items():
            try:
                author = (await store.thread.get_message(group.id, seq)).author_name
                await store.thread.append_system_message(group.id, self.deps.notice(unused_line(author, files)))
            except (StoreError, NotFound) as exc:  # a courtesy: the run is settled either way
                log.warning("group=%s seq=%s: could not tell what agents cannot use: %s", group.id, seq, exc)
        if fresh:
            shown()

    # people steer a reply (SPEC §8; bot.core.runtime.steering) -------------
    async def stop(self, group_id: int, agent_id: int, *, user_id: str | None, operator: bool,
                   by: str) -> StopAnswer:
        """A person pressed ⏹ Stop on the agent's provisional message (or Ctrl-C on the console):
        stop its run when they started its episode or are an operator."""
        steer = self.steering.get(group_id, agent_id)
        if steer is None or steer.stopped:
            return StopAnswer(False)
        if not operator:
            starter = await self.starter(steer.group_id, steer.episode_id)
            if starter is None or starter.author_user_id != user_id:
                return StopAnswer(False, refused=True, starter=starter.author_user_id if starter else None)
        return StopAnswer(self.steering.stop(group_id, agent_id, by))

    def stop_all(self, group_id: int, by: str) -> int:
        """Stop every run working in the group now (the console's Ctrl-C); how many."""
        return sum(self.steering.stop(s.group_id, s.agent_id, by) for s in self.steering.running(group_id))

    async def starter(self, group_id: int, episode_id: int | None) -> Message | None:
        """The person's message that started the episode: who may stop its runs (`stop`) and approve
        their held tool calls (`_approve`); None without an episode or when no person started it."""
        if episode_id is None:
            return None
        episode = await self.deps.store.episodes.get_episode(episode_id)
        message = await self.deps.store.thread.get_message(group_id, episode.task_seq)
        return message if message.author_type == "user" else None

    async def _streamed(self, agent: Agent, messages: list[ChatMessage], key: str, reply: ReplyStream,
                        draft: Draft) -> Completion:
        """The model's answer, streamed: each piece grows the draft; the draft stops before it is settled."""
        def piece(text: str) -> None:
            reply.add(text)
            draft.grew()

        return await _stopping(draft, self.deps.llm.stream(messages, on_text=piece, model=agent.model, cache_key=key,
                                                            max_tokens=agent.max_tokens,
                                                            temperature=agent.temperature))

    async def _interrupt(self, run: Run, selector_usage: Usage) -> None:
        try:
            await self.deps.store.runs.finish_run(run.id, RunResult("interrupted", selector_usage=selector_usage),
                                                  cap=0)
        except Exception as exc:  # the next owner marks it interrupted anyway
            log.warning("run=%s: could not record the interruption: %s", run.id, exc)

