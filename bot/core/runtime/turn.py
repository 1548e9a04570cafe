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
The model is called by `bot.core.runtime.model_call` (`ModelCall`): one completion, or for an
agent with tools (granted ones, or memory_write with memory on) the tool loop
(`bot.core.features.tools`), streamed too: the draft shows a line per tool call
(`bot.core.rules.tool_lines`: running, then ✓ or ✗), then the text of the current step.
A person may stop a group run while it works (`bot.core.runtime.steering`): it settles as
'stopped' with what its provisional message showed, followed by "(stopped)".

One `AgentTurn` serves every group of the process (its steering, and its `PeoplesFiles`: the images
it fetched and what it told, are the process's); the group's dispatcher calls `run` and passes its outbox's
`wake` as `shown`: the run wakes it when it commits rows (its reply or notice once settled, a
worker's posts and a line about people's files as they come).
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

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
from bot.core.features.context import (
    Trimmed,
    group_cache_key,
    group_header,
    load_thread,
    participant_step,
    window_of,
)
from bot.core.features.memory import Answer, load_memory
from bot.core.features.replies import quoted_thread
from bot.core.features.summary import Summaries
from bot.core.features.tasks import TaskChains, Tasks
from bot.core.features.tools import ToolRegistry
from bot.core.features.worker import Posts
from bot.core.models import (
    Agent,
    ChatMessage,
    FinishedRun,
    Group,
    Message,
    NewMessage,
    Run,
    RunResult,
    SharedFile,
    Tags,
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
from bot.core.runtime.model_call import CallDeps, ModelCall
from bot.core.runtime.steering import Steer, Steering, StopAnswer, stopped_text
from bot.core.runtime.worker import RetryPolicy, wait_for_store

log = logging.getLogger(__name__)


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


class PeoplesFiles:
    """People's files as agents' runs see them (one for the process: the images it fetched and what it
    told are the process's): images fetched through the surface, a model that takes none said once in the
    log, and the files a run could not send told once to their person."""

    def __init__(self, store: HasThread, surface: Surface, notice: Callable[[str], NewMessage]) -> None:
        self.store = store
        self.surface = surface
        self.notice = notice
        self._images: OrderedDict[ImageKey, str] = OrderedDict()  # fetched images, as data URLs
        self._told_no_images: set[str | None] = set()  # models whose images were named only, logged once
        self._told_unused: set[tuple[int, int, int]] = set()  # (group, seq, file) a person was told agents lack

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

    async def tell_unused(self, group: Group, unused: Unused, shown: Callable[[], None]) -> None:
        """Images a run could not send ((seq, index) -> (name, why)): one short line per message to
        its person (SPEC §8), each file told once (several agents read the same message)."""
        store = self.store
        fresh: dict[int, list[tuple[str, str]]] = {}
        for (seq, index), found in sorted(unused.items()):
            if (group.id, seq, index) not in self._told_unused:
                self._told_unused.add((group.id, seq, index))
                fresh.setdefault(seq, []).append(found)
        for seq, files in fresh.items():
            try:
                author = (await store.thread.get_message(group.id, seq)).author_name
                await store.thread.append_system_message(group.id, self.notice(unused_line(author, files)))
            except (StoreError, NotFound) as exc:  # a courtesy: the run is settled either way
                log.warning("group=%s seq=%s: could not tell what agents cannot use: %s", group.id, seq, exc)
        if fresh:
            shown()


class AgentTurn:
    def __init__(self, deps: TurnDeps) -> None:
        self.deps = deps
        self._told: set[tuple[int, str]] = set()  # (group, outage) told in that group
        self._missing: set[tuple[int, str]] = set()  # (group, model) told its provider is not set up
        self.steering = Steering()  # the runs working now, which people may stop
        self.peoples_files = PeoplesFiles(deps.store, deps.surface, deps.notice)
        self.model_call = ModelCall(CallDeps(deps.store, deps.llm, deps.surface, deps.counter, deps.notice,
                                             self.starter, deps.tools))

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
            await self.peoples_files.tell_unused(group, unused, shown)
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
            await self.peoples_files.tell_unused(group, unused, shown)
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
        self.peoples_files.withheld_images(agent.model, files.withheld)
        async with deps.surface.working(group, agent):
            images = self.peoples_files.images(group)
            messages = await files.fill_images(messages, images)
            unused.update(images.unused)
            answer, draft = await self.model_call.answer(group, agent, run, messages, others,
                                                          key=cache_key(group, agent.id), posts=posts,
                                                          roster=roster, steer=steer, shown=shown)
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

    async def _interrupt(self, run: Run, selector_usage: Usage) -> None:
        try:
            await self.deps.store.runs.finish_run(run.id, RunResult("interrupted", selector_usage=selector_usage),
                                                  cap=0)
        except Exception as exc:  # the next owner marks it interrupted anyway
            log.warning("run=%s: could not record the interruption: %s", run.id, exc)

