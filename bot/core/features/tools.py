"""Tools of agents (SPEC §6b): the registry of tool sources, grants, and the run's tool loop.

Tools come from sources (`bot.core.ports.ToolSource`): the built-ins (`memory_write`, from
`bot.core.features.memory`) and MCP servers (`bot.llm.mcp_tools`). In commands a tool is
`server.tool` (a built-in plainly); the model sees `server__tool` (`model_name`), in a stable order
(sorted), so the tool list a provider caches ahead of the messages changes only when grants do.

An agent has no tool until an admin grants it (`ToolGrant`: a name, or `server.*`); a built-in of a
feature that is on (memory) is offered without a grant.

The loop (`ToolLoop.run`): at most `max_steps` model calls offer the tools; an answer with tool
calls gets each call run and its result sent back, until an answer without calls is the reply
(after `max_steps`, one last call without tools asks for it). An answer runs at most
`MAX_CALLS_PER_ANSWER` of its calls (the first ones); each call past them is journaled with an
error result saying so (`too_many`) and never runs, so a model that asks for 50 calls at once
cannot run 50 tools unchecked. Each call is journaled before it runs
and its result when it returns (`bot.core.ports.ToolStore`), so a run cut by a crash or a restart
resumes from its journal: a result recorded is reused, never run again; a call that was running is
run again only when its tool is read-only or idempotent, else the model is told its outcome is
unknown (`UNKNOWN`) and the channel is told once. A tool's error, a timeout, a tool the agent was
not granted and arguments that are not a JSON object are results the model reads, never a failed
run. Arguments and results are masked (`bot.core.rules.secrets`) before they are stored or sent;
results over `result_max` characters are cut with a note.

Approval (SPEC §6b): a call of a tool whose grant says `confirm` (else the tool's own default,
`ToolSpec.confirm`: MCP's destructiveHint or mcp.json's "confirm") waits in its journal row
(`pending`) until `approve` returns a person's decision. Denied (by a person, or by the timeout),
the tool does not run and its result tells the model so (`denied`); approved, its result starts
with who approved it. The journal row keeps either. A run cut while it waited asks again when
it resumes (the row is still `pending`).

The pure parts (`model_name`, `granted`, `cut`, `offered`, `needs_approval`, `denied`, `decision_of`)
are table-tested; the loop runs over the LLM and ToolStore ports.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bot.core.errors import InvalidInput, LLMError
from bot.core.models import (
    Agent,
    Approval,
    ChatMessage,
    Completion,
    JournaledCall,
    Tool,
    ToolCall,
    ToolGrant,
    ToolOutput,
    ToolSpec,
    Usage,
)
from bot.core.ports import LLM, HasTools, ToolSource
from bot.core.rules.secrets import mask, mask_error

log = logging.getLogger(__name__)

MAX_TOOL_STEPS = 8  # model calls of a run that offer tools (then one last call without them)
TOOL_RESULT_MAX = 20_000  # characters of a tool's result sent to the model
MAX_CALLS_PER_ANSWER = 10  # calls of one model answer that run; the rest get an error result
FINAL_ASK = "You have used all your tool steps. Answer now, without tools, with what you have."
UNKNOWN = ("error: this call was cut by a restart before its result came back; its outcome is unknown and it "
           "was not repeated. Check before you call it again.")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_PATTERN = re.compile(r"^[A-Za-z0-9_-]+(\.([A-Za-z0-9_.-]+|\*))?$")


def model_name(name: str) -> str:
    """The name the model sees: `server.tool` as `server__tool`, other characters outside
    `[A-Za-z0-9_-]` as `_` (OpenAI's function names), at most 64 characters."""
    server, dot, tool = name.partition(".")
    joined = f"{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}" if dot else _UNSAFE.sub("_", name)
    return joined[:64]


def full_name(source: str, tool: str) -> str:
    """A tool's name in commands: `source.tool`, or the tool's own for a built-in (source '')."""
    return f"{source}.{tool}" if source else tool


def check_pattern(pattern: str) -> str:
    """A grant's pattern as written (`server.tool`, `server.*`, a built-in); InvalidInput otherwise."""
    pattern = pattern.strip()
    if not _PATTERN.match(pattern):
        raise InvalidInput(f"{pattern!r} is not a tool name: write server.tool, server.* or a built-in's name")
    return pattern


def matches(pattern: str, name: str) -> bool:
    """Whether grant `pattern` covers tool `name` (`server.*`: every tool of the server)."""
    if pattern.endswith(".*"):
        return name.startswith(pattern[:-1])
    return pattern == name


def granted(specs: Iterable[ToolSpec], grants: Sequence[ToolGrant]) -> list[ToolSpec]:
    """The tools of `specs` some grant covers, sorted by name (a stable order for the prompt cache)."""
    return sorted((s for s in specs if any(matches(g.pattern, s.name) for g in grants)), key=lambda s: s.name)


def needs_approval(spec: ToolSpec, name: str, grants: Sequence[ToolGrant]) -> bool:
    """Whether a call of `spec` (full name `name`) waits for a person: the `confirm` of the most
    specific grant covering it that sets one (a tool's own grant over `server.*`), else the
    tool's default. Built-ins never wait."""
    if spec.builtin:
        return False
    said = [g for g in grants if g.confirm is not None and matches(g.pattern, name)]
    if said:
        return bool(sorted(said, key=lambda g: g.pattern.endswith(".*"))[0].confirm)
    return spec.confirm


def denied(name: str, approval: Approval) -> str:
    """The result the model reads for a call a person denied, or that timed out waiting."""
    if approval.timed_out:
        return f"error: denied: nobody approved this call of {name} in time; it did not run."
    if not approval.by:
        return f"error: denied: {approval.why}; this call of {name} did not run."
    return f"error: denied by {approval.by}: this call of {name} did not run."


def too_many(limit: int = MAX_CALLS_PER_ANSWER) -> str:
    """The result the model reads for a call past the first `limit` of one answer (it did not run)."""
    return (f"error: too many calls in one answer; only the first {limit} ran and this one did not. "
            "Call it again in your next answer if you still need it.")


def approved(text: str, approval: Approval) -> str:
    return f"[approved by {approval.by}]\n{text}"


def decision_of(tool: str, result: str | None) -> str | None:
    """What a journaled call's result says of its approval (for "Why this reply?"), else None."""
    name = tool.replace("__", ".", 1)
    text = result or ""
    if text.startswith("[approved by ") and "]" in text:
        return f"{name}: approved by {text[len('[approved by '):text.index(']')]}"
    if text.startswith("error: denied by "):
        return f"{name}: denied by {text[len('error: denied by '):].split(':', 1)[0]}"
    if text.startswith("error: denied: nobody approved"):
        return f"{name}: denied (nobody approved it in time)"
    if text.startswith("error: denied: "):
        return f"{name}: denied ({text[len('error: denied: '):].split(';', 1)[0]})"
    return None


def cut(text: str, limit: int = TOOL_RESULT_MAX) -> str:
    """`text`, or its first `limit` characters and a note saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[cut: the result had {len(text):,} characters; only the first {limit:,} are shown]"


class ToolRegistry:
    """The tool sources of a process (the built-ins and the MCP servers), asked for their tools when
    a run starts (a server that is down offers none until it is back)."""

    def __init__(self, sources: Iterable[ToolSource] = ()) -> None:
        self._sources: dict[str, ToolSource] = {}
        for source in sources:
            self.add(source)

    def add(self, source: ToolSource) -> None:
        """Add `source` (one of the same name replaced; the built-in sources, named '', are kept side by side)."""
        key = source.name or f"builtin:{type(source).__qualname__}"
        self._sources[key] = source

    @property
    def sources(self) -> list[ToolSource]:
        return list(self._sources.values())

    def available(self) -> list[tuple[ToolSource, ToolSpec]]:
        """Every tool of every source, full names (`server.tool`), sorted by name."""
        found = [(source, spec) for source in self._sources.values() for spec in source.tools()]
        return sorted(found, key=lambda pair: full_name(pair[0].name, pair[1].name))

    def names(self, *, grantable: bool = True) -> list[str]:
        return [full_name(src.name, spec.name) for src, spec in self.available() if not (grantable and spec.builtin)]

    def offered(self, grants: Sequence[ToolGrant], builtins: Iterable[str] = ()) -> ToolBox:
        """The tools a run offers: the built-ins named in `builtins` (features that are on) and what
        `grants` cover, by the name the model sees."""
        wanted = set(builtins)
        entries: dict[str, tuple[ToolSource, ToolSpec, str]] = {}
        for source, spec in self.available():
            name = full_name(source.name, spec.name)
            if (spec.builtin and name in wanted) or (not spec.builtin and any(matches(g.pattern, name)
                                                                              for g in grants)):
                entries.setdefault(model_name(name), (source, spec, name))
        held = frozenset(shown for shown, (_, spec, name) in entries.items() if needs_approval(spec, name, grants))
        return ToolBox(entries, held)


@dataclass(frozen=True)
class ToolBox:
    """The tools one run offers, by the name the model sees: (source, spec, full name)."""

    entries: dict[str, tuple[ToolSource, ToolSpec, str]] = field(default_factory=dict)
    held: frozenset[str] = frozenset()  # the tools whose calls wait for a person's approval

    def __bool__(self) -> bool:
        return bool(self.entries)

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tuple(Tool(name, spec.description, spec.parameters)
                     for name, (_, spec, _) in sorted(self.entries.items()))

    def spec(self, name: str) -> ToolSpec | None:
        entry = self.entries.get(name)
        return entry[1] if entry else None

    def missing(self, name: str) -> str:
        names = sorted(self.entries)
        offered = f"the only tool is {names[0]}" if len(names) == 1 else f"the tools are {', '.join(names)}"
        return f"error: there is no tool named {name!r}; {offered}."


@dataclass(frozen=True)
class RunContext:
    """Who a tool call runs for (`bot.core.ports.ToolContext`)."""

    group_id: int
    agent_id: int
    run_id: int


@dataclass(frozen=True)
class Done:
    """A call of the run and what it returned (a reused result included)."""

    name: str
    result: str
    error: bool


@dataclass
class LoopResult:
    """A tool loop's outcome: the reply (the text of an answer without tool calls; None when the
    steps ran out without one), the conversation so far, the calls made and what they cost."""

    reply: str | None
    conversation: list[ChatMessage]
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    provider: str = ""
    calls: int = 0  # model calls
    error: LLMError | None = None
    done: list[Done] = field(default_factory=list)
    steps: int = 0  # answers with tool calls, the resumed ones included


Notify = Callable[[str], Awaitable[None]]
# A call starts (output None) or returns (its output, the seconds it took): for what the draft shows.
OnCall = Callable[[JournaledCall, ToolOutput | None, float], None]
Approve = Callable[[str, str, str], Awaitable[Approval]]  # (full tool name, masked arguments, key) -> decision


class ToolLoop:
    """One run's tool loop over the LLM and ToolStore ports (see the module docstring)."""

    def __init__(self, llm: LLM, store: HasTools, box: ToolBox, agent: Agent, context: RunContext, *,
                 cache_key: str | None = None, max_steps: int = MAX_TOOL_STEPS,
                 result_max: int = TOOL_RESULT_MAX, final_call: bool = True,
                 on_text: Callable[[str], None] | None = None, on_step: Callable[[], None] | None = None,
                 notify: Notify | None = None, on_call: OnCall | None = None, approve: Approve | None = None,
                 resume: bool = True, max_calls: int = MAX_CALLS_PER_ANSWER) -> None:
        self.llm, self.store, self.box, self.agent, self.context = llm, store, box, agent, context
        self.resume = resume  # take over an interrupted run's journal (group runs; not a direct run)
        self.cache_key, self.max_steps, self.result_max = cache_key, max_steps, result_max
        self.final_call, self.on_text, self.on_step, self.notify = final_call, on_text, on_step, notify
        self.on_call, self.max_calls = on_call, max_calls
        self.approve = approve  # None: nobody can be asked, so held calls are denied
        self.result: LoopResult | None = None  # the latest run's, while it runs too (what a stopped run spent)

    async def run(self, messages: Sequence[ChatMessage]) -> LoopResult:
        """Call the model until it answers without tool calls (see the module docstring), after
        taking over the journal an interrupted run of the agent left."""
        result = self.result = LoopResult(None, list(messages))
        if self.resume:
            await self._resume(result)
        while result.steps < self.max_steps or (self.final_call and result.steps == self.max_steps):
            offer = result.steps < self.max_steps
            if not offer:
                result.conversation.append(ChatMessage("user", FINAL_ASK))
            try:
                completion = await self.call(result, offer=offer)
            except LLMError as exc:
                result.error = exc
                return result
            if not completion.tool_calls or not offer:
                result.reply = completion.text
                return result
            await self.answer(result, completion)
        return result

    async def call(self, result: LoopResult, *, offer: bool = True) -> Completion:
        """One model call over the conversation (streamed when `on_text` is given), counted in `result`."""
        result.calls += 1  # a call that fails is a call made
        tools = self.box.tools if offer else None
        if self.on_step is not None:
            self.on_step()
        if self.on_text is not None:
            completion = await self.llm.stream(result.conversation, on_text=self.on_text, model=self.agent.model,
                                               cache_key=self.cache_key, tools=tools,
                                               max_tokens=self.agent.max_tokens, temperature=self.agent.temperature)
        else:
            completion = await self.llm.complete(result.conversation, model=self.agent.model,
                                                 cache_key=self.cache_key, tools=tools,
                                                 max_tokens=self.agent.max_tokens, temperature=self.agent.temperature)
        result.usage = result.usage + completion.usage
        result.model = completion.model or result.model
        result.provider = completion.provider or result.provider
        return completion

    async def answer(self, result: LoopResult, completion: Completion) -> None:
        """Journal the completion's tool calls, run each, and append them and their results."""
        calls = tuple(ToolCall(c.id or f"call_rt{self.context.run_id}_{result.steps}_{i}", c.name, mask(c.arguments))
                      for i, c in enumerate(completion.tool_calls))  # (a server that sends no ids gets ours)
        text = mask(completion.text)
        entries = await self.store.tools.journal_step(self.context.group_id, self.agent.id, self.context.run_id,
                                                      result.steps, text, calls)
        result.steps += 1
        result.conversation.append(ChatMessage("assistant", text, tool_calls=calls))
        if len(entries) > self.max_calls:
            log.warning("agent=%s run=%s asked for %d tool calls in one answer; only the first %d run",
                        self.agent.name, self.context.run_id, len(entries), self.max_calls)
        for entry in entries:
            await self._run_entry(result, entry)

    async def _run_entry(self, result: LoopResult, entry: JournaledCall) -> None:
        if entry.position >= self.max_calls:  # (by position, so a resumed answer keeps the same cap)
            text = too_many(self.max_calls)
            await self.store.tools.journal_result(entry.id, text)
            self._answered(result, entry, text, True)
            return
        decision = await self._decision(entry)
        if decision is not None and not decision.approved:
            text = denied(self.box.entries[entry.tool][2], decision)
            await self.store.tools.journal_result(entry.id, text)
            if self.on_call is not None:  # shown as a call that failed, with why
                self.on_call(entry, ToolOutput(text, error=True), 0.0)
            self._answered(result, entry, text, True)
            return
        await self.store.tools.journal_running(entry.id)
        started = time.monotonic()
        if self.on_call is not None:
            self.on_call(entry, None, 0.0)
        output = await self.execute(ToolCall(entry.call_id, entry.tool, entry.arguments))
        if self.on_call is not None:
            self.on_call(entry, output, time.monotonic() - started)
        text = output.text if decision is None else approved(output.text, decision)
        await self.store.tools.journal_result(entry.id, text)
        self._answered(result, entry, text, output.error)

    async def _decision(self, entry: JournaledCall) -> Approval | None:
        """A person's decision on the call when its tool is held (the row stays `pending` meanwhile);
        None when it is not."""
        if entry.tool not in self.box.held:
            return None
        name = self.box.entries[entry.tool][2]
        if self.approve is None:
            decision = Approval(False, why="nobody can be asked to approve it here")
        else:
            log.info("agent=%s run=%s: %s waits for approval", self.agent.name, self.context.run_id, name)
            decision = await self.approve(name, entry.arguments, f"{self.context.run_id}.{entry.id}")
        log.info("agent=%s run=%s: %s %s", self.agent.name, self.context.run_id, name,
                 f"approved by {decision.by}" if decision.approved else
                 f"denied by {decision.by}" if decision.by else
                 f"denied ({decision.why or 'nobody approved it in time'})")
        return decision

    def _answered(self, result: LoopResult, entry: JournaledCall, text: str, error: bool) -> None:
        result.conversation.append(ChatMessage("tool", text, tool_call_id=entry.call_id))
        result.done.append(Done(entry.tool, text, error))

    async def execute(self, call: ToolCall) -> ToolOutput:
        """Run one call: its result, masked and cut; every failure is an error result."""
        entry = self.box.entries.get(call.name)
        if entry is None:
            log.warning("agent=%s run=%s called %r, a tool it was not offered", self.agent.name,
                        self.context.run_id, call.name)
            return ToolOutput(self.box.missing(call.name), error=True)
        source, spec, name = entry
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            return ToolOutput(f"error: the arguments must be a JSON object such as {{\"name\": \"value\"}}; "
                              f"got {call.arguments[:200]!r}.", error=True)
        try:
            async with asyncio.timeout(spec.timeout):
                output = await source.call(spec.name, arguments, self.context)
        except TimeoutError:
            log.warning("agent=%s run=%s: %s did not answer within %gs", self.agent.name, self.context.run_id,
                        name, spec.timeout)
            output = ToolOutput(f"error: {name} did not answer within {spec.timeout:g} s.", error=True)
        except Exception as exc:
            why = mask_error(str(exc))[:300]
            log.warning("agent=%s run=%s: %s failed: %s: %s", self.agent.name, self.context.run_id, name,
                        type(exc).__name__, why)
            output = ToolOutput(f"error: {name} failed ({type(exc).__name__}: {why}).", error=True)
        return ToolOutput(cut(mask(output.text), self.result_max), output.error)

    async def _resume(self, result: LoopResult) -> None:
        """Take over the journal of the agent's interrupted runs of the episode and replay it into
        the conversation: recorded results reused, calls in flight re-run or told unknown."""
        journal = await self.store.tools.adopt_tool_calls(self.context.group_id, self.agent.id, self.context.run_id)
        if not journal:
            return
        steps: dict[int, list[JournaledCall]] = {}
        for entry in journal:
            steps.setdefault(entry.step, []).append(entry)
        log.info("agent=%s run=%s resumes %d tool step(s) from its journal", self.agent.name,
                 self.context.run_id, len(steps))
        for step in sorted(steps):
            entries = sorted(steps[step], key=lambda e: e.position)
            calls = tuple(ToolCall(e.call_id, e.tool, e.arguments) for e in entries)
            result.conversation.append(ChatMessage("assistant", entries[0].assistant_text, tool_calls=calls))
            result.steps += 1
            for entry in entries:
                await self._resume_entry(result, entry)

    async def _resume_entry(self, result: LoopResult, entry: JournaledCall) -> None:
        if entry.status == "done":
            text = entry.result or ""
            self._answered(result, entry, text, text.startswith("error:"))
        elif entry.status == "unknown":
            self._answered(result, entry, UNKNOWN, True)
        elif entry.status == "pending":  # never started: run it now
            await self._run_entry(result, entry)
        else:  # running when the process stopped
            spec = self.box.spec(entry.tool)
            if spec is not None and (spec.read_only or spec.idempotent):
                log.info("agent=%s run=%s: %s was cut by a restart; run again (it is %s)", self.agent.name,
                         self.context.run_id, entry.tool, "read-only" if spec.read_only else "idempotent")
                await self._run_entry(result, entry)
                return
            log.warning("agent=%s run=%s: %s was cut by a restart; its outcome is unknown, not repeated",
                        self.agent.name, self.context.run_id, entry.tool)
            await self.store.tools.journal_result(entry.id, UNKNOWN, status="unknown")
            self._answered(result, entry, UNKNOWN, True)
            if self.notify is not None:
                shown = self.box.entries[entry.tool][2] if entry.tool in self.box.entries else entry.tool
                await self.notify(f"{self.agent.name}'s call of {shown} was cut by a restart: its outcome is "
                                  "unknown and it was not repeated.")
