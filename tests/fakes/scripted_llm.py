"""A scripted LLM fake (the shape of simonw/llm's MockModel): enqueue replies, read `.history`.

Selector calls and participant calls are told apart the same way as
`tests/fakes/openai_server.GroupChatScript` does: by the seed prompts' first lines.
"""
from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bot.core.errors import LLMError
from bot.core.models import ChatMessage, Completion, Tool, Usage

SELECTOR_MARK = "You are coordinating a group chat. Choose who speaks next."
DIRECT = re.compile(r"asks you \((?P<name>[^)]+)\) directly \(")
_PARTICIPANT = re.compile(r"^You are (\S+), the .* in a group chat working on the task (?:below|above)\.$",
                          re.MULTILINE)

Reply = str | Completion | LLMError | Callable[[Sequence[ChatMessage]], str]


def kind_of(messages: Sequence[ChatMessage]) -> tuple[str, str | None]:
    text = "\n".join(m.content for m in messages)
    if SELECTOR_MARK in text:
        return "selector", None
    match = _PARTICIPANT.search(text)
    if match:
        return "participant", match.group(1).rstrip(",")
    direct = DIRECT.search(messages[-1].content) if messages else None
    if direct:
        return "direct", direct.group("name")
    return "other", None


@dataclass
class ScriptedLLM:
    selector: list[Reply] = field(default_factory=list)
    agents: dict[str, list[Reply]] = field(default_factory=dict)
    default_agent_reply: Callable[[str, int], str] | None = None
    selector_default: str = "TERMINATE"
    usage: Usage = field(default_factory=lambda: Usage(100, 20, 10))
    history: list[tuple[str, str | None, list[ChatMessage]]] = field(default_factory=list)
    gate: asyncio.Event | None = None  # when set, participant calls wait for it
    selector_gate: asyncio.Event | None = None  # when set, selector calls wait for it
    direct: dict[str, list[Reply]] = field(default_factory=dict)  # /ask answers per agent
    direct_gate: asyncio.Event | None = None  # when set, direct calls wait for it
    tools_reason: str | None = None  # tools_refusal's answer (None: every model takes tool calls)
    tools_asked: list[str | None] = field(default_factory=list)
    text_only: set[str | None] = field(default_factory=set)  # models takes_images says no for
    models: dict[str, list[str] | None] = field(default_factory=lambda: {"default": None})  # model_names
    piece: int = 3  # characters per streamed piece
    streamed: int = 0  # calls answered by `stream`

    async def tools_refusal(self, model: str | None, *, spent: list[Completion] | None = None) -> str | None:
        self.tools_asked.append(model)
        if spent is not None:
            spent.append(Completion("", Usage(30, 5, 0), model or "fake"))
        return self.tools_reason

    def takes_images(self, model: str | None) -> bool:
        return model not in self.text_only

    async def model_names(self) -> dict[str, list[str] | None]:
        return dict(self.models)

    @property
    def participant_order(self) -> list[str]:
        return [name or "" for kind, name, _ in self.history if kind == "participant"]

    async def complete(self, messages: Sequence[ChatMessage], *, model: str | None = None,
                       max_tokens: int | None = None, logprobs: bool = False,
                       cache_key: str | None = None, tools: Sequence[Tool] | None = None,
                       temperature: float | None = None) -> Completion:
        kind, name = kind_of(messages)
        self.history.append((kind, name, list(messages)))
        if kind == "selector":
            if self.selector_gate is not None:
                await self.selector_gate.wait()
            reply: Reply = self.selector.pop(0) if self.selector else self.selector_default
        elif kind == "participant":
            if self.gate is not None:
                await self.gate.wait()
            reply = self._participant_reply(name or "")
        elif kind == "direct":
            if self.direct_gate is not None:
                await self.direct_gate.wait()
            queue = self.direct.get(name or "", [])
            if not queue:
                raise AssertionError(f"the script has no direct answer left for {name}")
            reply = queue.pop(0)
        else:
            reply = "summary"
        await asyncio.sleep(0)
        if isinstance(reply, LLMError):
            raise reply
        if isinstance(reply, Completion):
            return reply
        text = reply(messages) if callable(reply) else reply
        return Completion(text=text, usage=self.usage, model=model or "fake")

    def _participant_reply(self, name: str) -> Reply:
        """The agent's next scripted reply, else the default one; AssertionError when it has none."""
        queue = self.agents.get(name, [])
        if queue:
            return queue.pop(0)
        if self.default_agent_reply is not None:
            return self.default_agent_reply(name, len(self.participant_order))
        raise AssertionError(f"the script has no reply left for {name}")

    async def stream(self, messages: Sequence[ChatMessage], *, on_text: Callable[[str], None],
                     model: str | None = None, max_tokens: int | None = None,
                     cache_key: str | None = None, tools: Sequence[Tool] | None = None,
                     temperature: float | None = None) -> Completion:
        """`complete`, its text handed to `on_text` a few characters at a time first."""
        completion = await self.complete(messages, model=model, max_tokens=max_tokens, cache_key=cache_key,
                                         tools=tools)
        self.streamed += 1
        for i in range(0, len(completion.text), self.piece):
            on_text(completion.text[i:i + self.piece])
            await asyncio.sleep(0)
        return completion
