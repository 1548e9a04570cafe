"""The server's answers read into `Completion`s (`bot.llm.openai_llm`): a whole completion, a
streamed one (its chunks), or a streamed request answered whole.

What the server answers (reply text, tool call arguments) is masked (`bot.core.rules.secrets.mask`),
so a server echoing a secret cannot have it posted or stored. `usage` -> `Usage`, estimated with the
injected `TokenCounter` when the server sends none; the sum of token log-probabilities when asked for.
A stream's tool calls come in pieces by index (the id and name first, the arguments in pieces) and
are assembled into `tool_calls`.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from bot.core.errors import LLMError
from bot.core.models import ChatMessage, Completion, ToolCall, Usage
from bot.core.ports import TokenCounter
from bot.core.rules.secrets import mask

# Chat-format overhead when estimating: ~3 tokens framing each message, 3 priming the reply.
_PER_MESSAGE = 3
_PER_REPLY = 3


class StreamBroken(Exception):
    """A streamed answer that began and then broke off."""


class CallerFailed(Exception):
    """What `on_text` raised, carried out of the stream unchanged (`error`)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class AnswerReader:
    """Reads one server's (`host`) answers into `Completion`s; `counter` estimates usage it does not send."""

    def __init__(self, counter: TokenCounter, host: str) -> None:
        self.counter = counter
        self.host = host

    def completion(self, response: Any, messages: Sequence[ChatMessage], model: str) -> Completion:
        """A whole completion (`messages`: its prompt, for an estimate of its usage)."""
        choices = getattr(response, "choices", None)
        if not choices:
            raise LLMError(f"model {model} at {self.host} returned no choices")
        choice = choices[0]
        message = getattr(choice, "message", None)
        text = mask((getattr(message, "content", None) or "") if message is not None else "")
        calls = tuple(_tool_call(c) for c in getattr(message, "tool_calls", None) or ())
        return Completion(
            text=text,
            usage=self.usage(getattr(response, "usage", None), messages, text),
            model=getattr(response, "model", None) or model,
            logprob=_logprob_sum(choice),
            finish_reason=getattr(choice, "finish_reason", None),
            tool_calls=calls,
        )

    def whole(self, body: bytes, messages: Sequence[ChatMessage], model: str) -> Completion:
        """A streamed request's answer sent whole (a server that ignored `stream`): `body`, as it is."""
        try:
            return self.completion(ChatCompletion.model_validate(json.loads(body)), messages, model)
        except (ValueError, TypeError) as exc:
            raise LLMError(f"malformed response from model {model} at {self.host}: {type(exc).__name__}") from None

    async def chunks(self, response: Any, messages: Sequence[ChatMessage], model: str,
                     on_text: Callable[[str], None]) -> Completion:
        """A streamed completion, its chunks read as they come: `on_text(piece)` for each piece of text
        (what it raises comes out as `CallerFailed`). A stream that breaks off (the connection drops, an
        error event, an event that is not JSON, no finish reason) raises `StreamBroken`."""
        pieces: list[str] = []
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments so far]
        usage: Any = None
        finish: str | None = None
        answered_by: str | None = None
        try:
            async for chunk in response:
                answered_by = getattr(chunk, "model", None) or answered_by
                usage = getattr(chunk, "usage", None) or usage
                for choice in getattr(chunk, "choices", None) or ():
                    if getattr(choice, "index", 0) == 0:
                        finish = _take_choice(choice, calls, pieces, on_text) or finish
        except openai.APITimeoutError:
            raise
        except (openai.APIConnectionError, openai.APIError) as exc:  # the response had begun: it broke off
            raise StreamBroken(f"{type(exc).__name__} after {len(pieces)} pieces") from None
        except ValueError as exc:  # an event that is not JSON (the client's json.loads): as broken off
            raise StreamBroken(f"an event that is not JSON ({type(exc).__name__}), after {len(pieces)} pieces") \
                from None
        if finish is None:
            raise StreamBroken(f"it ended without a finish reason after {len(pieces)} pieces")
        text = "".join(pieces)
        tool_calls = tuple(ToolCall(id=c[0], name=c[1], arguments=mask(c[2] or "{}"))
                           for _, c in sorted(calls.items()))
        written = text + "".join(c[2] for c in calls.values())
        return Completion(text=mask(text), usage=self.usage(usage, messages, written), model=answered_by or model,
                          finish_reason=finish, tool_calls=tool_calls)

    def usage(self, usage: Any, messages: Sequence[ChatMessage], text: str) -> Usage:
        """The server's `usage`; without one, estimated from the prompt (`messages`) and the `text` written."""
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
        if usage is not None and prompt is not None and completion is not None:
            details = getattr(usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", None) or 0
            return Usage(int(prompt), int(completion), int(cached), estimated=False)
        count = self.counter.count
        prompt_est = sum(count(m.content) + _PER_MESSAGE + sum(i.tokens for i in m.images) for m in messages)
        prompt_est += _PER_REPLY
        return Usage(prompt_est, count(text), 0, estimated=True)


def _take_choice(choice: Any, calls: dict[int, list[str]], pieces: list[str],
                 on_text: Callable[[str], None]) -> str | None:
    """A streamed chunk's first choice: its tool calls' pieces into `calls`, its text into `pieces`
    and to `on_text` (whose error is the caller's: `CallerFailed`); its finish reason, if it has one."""
    for delta in getattr(getattr(choice, "delta", None), "tool_calls", None) or ():
        _add_call_piece(calls, delta)
    piece = getattr(getattr(choice, "delta", None), "content", None)
    if piece:
        pieces.append(piece)
        try:
            on_text(piece)
        except Exception as exc:
            raise CallerFailed(exc) from exc
    return getattr(choice, "finish_reason", None)


def _add_call_piece(calls: dict[int, list[str]], delta: Any) -> None:
    """One streamed piece of a tool call into `calls` (index -> [id, name, arguments]): the id and
    name come once (a server may repeat them), the arguments in pieces to join."""
    index = getattr(delta, "index", None)
    call = calls.setdefault(int(index) if isinstance(index, int) else len(calls), ["", "", ""])
    call[0] = str(getattr(delta, "id", None) or call[0])
    function = getattr(delta, "function", None)
    call[1] = str(getattr(function, "name", None) or call[1])
    call[2] += str(getattr(function, "arguments", None) or "")


def _tool_call(call: Any) -> ToolCall:
    function = getattr(call, "function", None)
    return ToolCall(id=str(getattr(call, "id", "") or ""), name=str(getattr(function, "name", "") or ""),
                    arguments=mask(str(getattr(function, "arguments", None) or "{}")))


def _logprob_sum(choice: Any) -> float | None:
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    values = [getattr(item, "logprob", None) for item in content]
    return float(sum(v for v in values if v is not None))
