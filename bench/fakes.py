"""In-process stand-ins for the engine figures: a surface that timestamps what it shows and
an instant LLM that plays `bench.scenario.Script` (no HTTP, no sleep).

Copied in spirit from tests/fakes (bench imports nothing from tests/).
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from bench.scenario import Script, classify
from bot.core.models import (
    Agent,
    Approval,
    ApprovalAsk,
    ChatMessage,
    Completion,
    DraftPart,
    Episode,
    Group,
    Message,
    SharedFile,
    Usage,
)
from bot.core.ports import Draft, Recorder
from bot.core.rules.attachments import FileUnavailable


class RecordingSurface:
    """Implements `bot.core.ports.Surface`: keeps each published row with `time.perf_counter()`."""

    def __init__(self) -> None:
        self.published: list[tuple[float, Message]] = []
        self.episodes: list[Episode] = []
        self.alerts: list[str] = []
        self.agent_posted = asyncio.Event()  # set at each agent post (cleared by whoever waits)

    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        self.published.append((time.perf_counter(), message))
        if message.author_type == "agent":
            self.agent_posted.set()
        if message.author_type != "user":
            await record(f"bench-{group.id}-{message.seq}")

    async def alert(self, group: Group, text: str) -> None:
        self.alerts.append(text)

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        raise FileUnavailable("the bench shares no files")

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        yield

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        self.episodes.append(episode)

    def draft(self, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> Draft | None:
        return None  # the engine figures time whole posts

    async def remove_drafts(self, group: Group, parts: Sequence[DraftPart]) -> list[int]:
        return [p.id for p in parts]

    async def approve(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        return Approval(False, why="nobody can be asked")

    def agent_posts(self) -> list[tuple[float, Message]]:
        return [(t, m) for t, m in self.published if m.author_type == "agent"]


@dataclass
class LLMCall:
    kind: str
    agent: str | None
    start: float
    end: float = 0.0


@dataclass
class InstantLLM:
    """Implements `bot.core.ports.LLM` with no wait: the selector rotates, agents answer the scenario's
    replies. `hold` (when set) keeps the first participant call waiting until it is set; `entered`
    is set when that call arrives. `selector_override` answers every selector call (e.g. TERMINATE)."""

    script: Script
    calls: list[LLMCall] = field(default_factory=list)
    hold: asyncio.Event | None = None
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    selector_override: str | None = None

    async def complete(self, messages: Sequence[ChatMessage], *, model: str | None = None,
                       max_tokens: int | None = None, logprobs: bool = False, **_options: object) -> Completion:
        start = time.perf_counter()
        texts = [m.content for m in messages]
        kind, agent = classify(texts)
        call = LLMCall(kind, agent, start)
        self.calls.append(call)
        if kind == "participant" and self.hold is not None and not self.entered.is_set():
            self.entered.set()
            await self.hold.wait()
            call.start = time.perf_counter()  # the held time is not the model's
        if kind == "selector" and self.selector_override is not None:
            text = self.selector_override
        else:
            text = self.script.answer(kind, agent, texts)
        call.end = time.perf_counter()
        return Completion(text=text, usage=Usage(100, 20, 0), model=model or "bench-model")

    async def stream(self, messages: Sequence[ChatMessage], *, on_text: Callable[[str], None],
                     model: str | None = None, max_tokens: int | None = None, **_options: object) -> Completion:
        completion = await self.complete(messages, model=model, max_tokens=max_tokens)
        on_text(completion.text)
        return completion

    async def tools_refusal(self, model: str | None, *, spent: list[Completion] | None = None) -> str | None:
        return "the bench's scripted model does not take tool calls"

    def takes_images(self, model: str | None) -> bool:
        return False

    async def model_names(self) -> dict[str, list[str] | None]:
        return {"default": None}

    def participant_runs(self) -> dict[str, int]:
        runs: dict[str, int] = {}
        for c in self.calls:
            if c.kind == "participant" and c.agent is not None:
                runs[c.agent] = runs.get(c.agent, 0) + 1
        return runs

    def time_inside(self, start: float, end: float) -> float:
        """Seconds spent inside calls within [start, end]."""
        total = 0.0
        for c in self.calls:
            lo, hi = max(c.start, start), min(c.end or c.start, end)
            if hi > lo:
                total += hi - lo
        return total
