"""The tests' OpenAI-compatible server and a responder that plays a group chat.

    async with FakeOpenAI(GroupChatScript(selector=["planner", "TERMINATE"], agents={"planner": ["a plan"]})) as srv:
        llm = OpenAILLM(api_key="k", base_url=srv.base_url, default_model="m")

The server is `bench.openai_server` (one fake for the tests and the bench, in the package so the
bench runs from an install), re-exported here; `GroupChatScript` tells selector, participant,
direct (/ask), tool-probe and other calls apart by the seed prompts' lines and answers each from
its queue.
"""
from __future__ import annotations

import re
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench.openai_server import (
    IMAGES_REFUSED,
    FakeOpenAI,
    RecordedRequest,
    Reply,
    ReplyLike,
    ReplyQueue,
    Responder,
    _ran_out,
    closed_base_url,
    image_urls,
    message_text,
    probe_tool,
    rough_tokens,
    tool_call,
)

__all__ = [
    "IMAGES_REFUSED", "FakeOpenAI", "RecordedRequest", "Reply", "ReplyLike", "ReplyQueue", "Responder",
    "closed_base_url", "image_urls", "message_text", "probe_tool", "rough_tokens", "tool_call",
    "SELECTOR_MARK", "DIRECT_LINE", "PARTICIPANT_LINE", "GroupChatScript",
]

SELECTOR_MARK = "You are coordinating a group chat. Choose who speaks next."
DIRECT_LINE = re.compile(r"asks you \((?P<name>[^)]+)\) directly \(")  # an /ask (bot.core.runtime.direct)
PARTICIPANT_LINE = re.compile(
    r"^You are (?P<name>.+?), the (?P<role>.+?) in a group chat working on the task (?:below|above)\.", re.MULTILINE
)
AgentDefault = str | Callable[[str, int], str] | None


class GroupChatScript:
    """A responder that plays a scripted group chat.

    A request is a SELECTOR call when any message holds `SELECTOR_MARK`, a
    PARTICIPANT call when a line reads "You are NAME, the ROLE in a group chat
    working on the task below.", a DIRECT call (/ask) when the last message reads "... asks
    you (NAME) directly (...)", a PROBE when it forces a tool with `tool_choice`
    (answered with that tool's call, unless `takes_tools` is False), else an OTHER
    call (a summary, ...). Queues pop
    in order; entries are str or `Reply` (to script faults). An exhausted
    selector answers "TERMINATE"; an exhausted agent answers `default_agent_reply`
    (a str, or `(name, n) -> str` with n the agent's 1-based call count) or else a
    500 saying the script ran out (not retried by the client, so tests fail loudly).
    """

    def __init__(
        self,
        selector: Sequence[ReplyLike] | Responder = (),
        agents: dict[str, Sequence[ReplyLike]] | None = None,
        *,
        default_agent_reply: AgentDefault = None,
        summary: Sequence[ReplyLike] = (),
        other_default: str = "(no reply scripted for this call)",
        takes_tools: bool = True,
    ) -> None:
        self.takes_tools = takes_tools
        self._selector_fn = selector if callable(selector) else None
        self._selector: deque[ReplyLike] = deque(() if callable(selector) else selector)
        self._agents: dict[str, deque[ReplyLike]] = {k: deque(v) for k, v in (agents or {}).items()}
        self.default_agent_reply = default_agent_reply
        self._summary: deque[ReplyLike] = deque(summary)
        self._direct: dict[str, deque[ReplyLike]] = {}
        self.other_default = other_default
        self.calls: list[tuple[str, str | None]] = []  # ("selector" | "participant" | "other", name)
        self.participant_order: list[str] = []
        self._agent_calls: dict[str, int] = {}

    def set_agent(self, name: str, replies: Sequence[ReplyLike]) -> None:
        """Replace an agent's queue of replies."""
        self._agents[name] = deque(replies)

    def set_direct(self, name: str, replies: Sequence[ReplyLike]) -> None:
        """Replace the queue of an agent's direct (/ask) answers."""
        self._direct[name] = deque(replies)

    def set_summary(self, replies: Sequence[ReplyLike]) -> None:
        """Replace the queue of OTHER calls' replies (summaries ...)."""
        self._summary = deque(replies)

    def set_selector(self, selector: Sequence[ReplyLike] | Responder) -> None:
        """Replace the selector's queue (or make it a function of the request body)."""
        self._selector_fn = selector if callable(selector) else None
        self._selector = deque(() if callable(selector) else selector)

    @staticmethod
    def classify(body: dict[str, Any]) -> tuple[str, str | None]:
        forced = probe_tool(body)
        if forced is not None:
            return "probe", forced
        texts = [message_text(m) for m in body.get("messages", [])]
        if any(SELECTOR_MARK in t for t in texts):
            return "selector", None
        for t in texts:
            match = PARTICIPANT_LINE.search(t)
            if match:
                return "participant", match.group("name").strip()
        asks = [message_text(m) for m in body.get("messages", []) if m.get("role") == "user"]
        direct = DIRECT_LINE.search(asks[-1]) if asks else None  # (the last user message: tool results follow it)
        if direct:
            return "direct", direct.group("name")
        return "other", None

    def __call__(self, body: dict[str, Any]) -> ReplyLike | Awaitable[ReplyLike]:  # a Responder
        kind, name = self.classify(body)
        self.calls.append((kind, name))
        if kind == "selector":
            if self._selector_fn is not None:
                return self._selector_fn(body)
            return self._selector.popleft() if self._selector else "TERMINATE"
        if kind == "participant":
            assert name is not None
            return self._participant(name)
        if kind == "direct":
            assert name is not None
            queue = self._direct.get(name)
            return queue.popleft() if queue else _ran_out(f"GroupChatScript: no direct answer for {name!r}")
        if kind == "probe":
            assert name is not None
            return Reply(tool_calls=[tool_call(name, ok=True)]) if self.takes_tools else Reply(text="I cannot.")
        return self._summary.popleft() if self._summary else self.other_default

    def _participant(self, name: str) -> ReplyLike:
        self.participant_order.append(name)
        n = self._agent_calls[name] = self._agent_calls.get(name, 0) + 1
        queue = self._agents.get(name)
        if queue is None:
            queue = next((q for k, q in self._agents.items() if k.lower() == name.lower()), None)
        if queue:
            return queue.popleft()
        default = self.default_agent_reply
        if isinstance(default, str):
            return default
        if default is not None:
            return default(name, n)
        why = "has no script" if queue is None else f"ran out of replies (call #{n})"
        return _ran_out(f"GroupChatScript: agent {name!r} {why}")
