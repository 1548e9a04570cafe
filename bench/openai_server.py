"""A local OpenAI-compatible HTTP server on a real socket (127.0.0.1, port 0): the tests' and the bench's.

    async with FakeOpenAI(responder) as srv:
        llm = OpenAILLM(api_key="k", base_url=srv.base_url, default_model="m")
        ...
        srv.requests[0]["messages"], srv.requests[0].headers["authorization"]

It serves POST /v1/chat/completions and GET /v1/models. Each chat request is answered by the responder, a callable
`(body) -> Reply | str | Awaitable[Reply | str]` (a str means `Reply(text=...)`),
or a list of replies answered in order. A `Reply` may carry `tool_calls`
(`tool_call("memory_write", note="...")`), sent as OpenAI sends them, or its own `usage`.
`text_only` models answer a request carrying image parts with OpenAI's 400 for them
(recorded, not passed to the responder); `image_urls(body)` lists the images a request carried.

A request with `stream: true` is answered as OpenAI streams: server-sent events (a reply's
`tool_calls` as `delta.tool_calls` pieces: the id and name, then the arguments 8 characters at a time), one
`chat.completion.chunk` per piece of the reply (`Reply.pieces`, else its words), the
finish reason, a usage chunk when `stream_options.include_usage` asks for it, `[DONE]`.
A reply paces its pieces (`first`, `every`), can break the stream off (`break_after`:
the connection is dropped after that many pieces) or hold its end (`hold_end`: an event
the test sets). `FakeOpenAI(streams=False)` answers a stream request with a 400 (a server
that does not stream), `streams="json"` with the whole completion as JSON (a server that
ignores `stream`); `stream_options=False` refuses the `stream_options` field with a 400;
`refuses=("temperature",)` refuses a request carrying one of those fields with OpenAI's 400 for a
reasoning model's temperature ("Unsupported value: 'temperature' ...", `param` naming it).
The times of a streamed request's first and last pieces, and of its end, are kept on its record.

It lives in the package (bench ships, tests/ does not) so that `roundtable bench` runs from an
install: the bench's `CacheServer` is this server billing cached tokens like a provider, and
the tests import it through tests/fakes/openai_server.py, beside their group-chat script.
Imports nothing from tests/.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import logging
import math
import re
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self

from aiohttp import web

log = logging.getLogger(__name__)


@dataclass
class Reply:
    """How to answer one chat-completion request."""

    text: str = ""
    status: int = 200
    headers: dict[str, str] | None = None
    error_body: dict[str, Any] | None = None  # non-200: default {"error": {...}} in OpenAI's shape
    delay: float = 0.0  # seconds to wait before answering (a hang, for timeout tests)
    trickle: float = 0.0  # with `delay`: headers at once, then a space (valid leading JSON whitespace)
    #                       every `trickle` seconds until `delay` has passed, then the body
    usage: dict[str, Any] | Literal["omit"] | None = None  # None: computed; "omit": no usage field
    logprobs: list[float] | None = None  # per-token log-probabilities of `text`
    finish_reason: str = "stop"
    raw_body: Any = None  # when set: sent as the JSON body instead of a chat.completion
    tool_calls: Sequence[dict[str, Any]] = ()  # each {"name": ..., "arguments": JSON text}; see `tool_call`
    # streamed answers (a request with stream: true)
    pieces: Sequence[str] | None = None  # the text's pieces in order (default: its words with their blanks)
    first: float = 0.0  # seconds from the headers to the first piece
    every: float = 0.0  # seconds between pieces
    break_after: int | None = None  # drop the connection after this many pieces
    hold_end: asyncio.Event | None = None  # after the last piece, wait for this before finishing


def tool_call(name: str, arguments: str | None = None, **args: Any) -> dict[str, Any]:
    """One scripted tool call: `tool_call("memory_write", note="x")`, or raw `arguments` text."""
    return {"name": name, "arguments": arguments if arguments is not None else json.dumps(args)}


def probe_tool(body: dict[str, Any]) -> str | None:
    """The function a request forces with `tool_choice` (as a tools probe does), else None."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and body.get("tools"):
        return (choice.get("function") or {}).get("name")
    return None


ReplyLike = Reply | str
Responder = Callable[[dict[str, Any]], ReplyLike | Awaitable[ReplyLike]]


class RecordedRequest(dict[str, Any]):
    """The parsed JSON body of one request; `.headers` (lower-case names), `.path`, `.at` (monotonic);
    for a streamed answer `.first_piece_at` and `.last_piece_at` (monotonic, None before), and `.ended_at`
    when its last event (`[DONE]`) was written."""

    headers: dict[str, str]
    path: str
    at: float
    first_piece_at: float | None = None
    last_piece_at: float | None = None
    ended_at: float | None = None


def rough_tokens(text: str) -> int:
    """The server's own rough count: ~4 characters a token, at least 1 for non-empty text."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def message_text(message: Any) -> str:
    """A message's content as text (plain string, or the text parts of a content list)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def image_urls(body: dict[str, Any]) -> list[str]:
    """The `image_url` parts' URLs of every message of a request, in order."""
    urls = []
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            urls += [p["image_url"]["url"] for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    return urls


IMAGES_REFUSED = "Invalid content type. image_url is only supported by certain models."


def closed_base_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class ReplyQueue:
    """A responder answering from a list in order; when it runs out, a loud 500."""

    def __init__(self, replies: Iterable[ReplyLike]) -> None:
        self._queue: deque[ReplyLike] = deque(replies)

    def __call__(self, body: dict[str, Any]) -> ReplyLike:
        if self._queue:
            return self._queue.popleft()
        return _ran_out("FakeOpenAI reply list ran out")


def _ran_out(message: str) -> Reply:
    # x-should-retry: false stops the openai client from retrying, so the test fails at once.
    return Reply(status=500, headers={"x-should-retry": "false"},
                 error_body={"error": {"message": message, "type": "fake_script_exhausted"}})


def _error_type(status: int) -> str:
    return {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
            404: "not_found_error", 429: "rate_limit_error"}.get(
        status, "server_error" if status >= 500 else "api_error")


class FakeOpenAI:
    """The server. `base_url` is "http://127.0.0.1:PORT/v1"; `requests` holds every chat body in order."""

    def __init__(
        self,
        responder: Responder | Sequence[ReplyLike] | None = None,
        *,
        models: Sequence[str] = ("fake-model",),
        text_only: Sequence[str] = (),
        streams: bool | Literal["json"] = True,
        stream_options: bool = True,
        refuses: Sequence[str] = (),
    ) -> None:
        if responder is None:
            responder = lambda body: Reply(text="ok")  # noqa: E731
        elif not callable(responder):
            responder = ReplyQueue(responder)
        self.responder: Responder = responder
        self.models = list(models)
        self.text_only = set(text_only)  # models that refuse image parts with a 400
        self.streams = streams
        self.stream_options = stream_options
        self.refuses = tuple(refuses)  # request fields answered with a 400 naming them
        self.requests: list[RecordedRequest] = []
        self.errors: list[BaseException] = []  # exceptions raised by the responder
        self.port = 0
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 2**20)  # the bench's long prompts
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        # Started again after `close`, it listens on its port again (a server back from an outage).
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        self._closing.clear()
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        self._closing.set()  # wake any reply still sleeping on its delay
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # handlers -----------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake-openai"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return self._error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return self._error(400, "request body must be a JSON object")
        recorded = RecordedRequest(body)
        recorded.headers = {k.lower(): v for k, v in request.headers.items()}
        recorded.path = request.path
        recorded.at = time.monotonic()
        self.requests.append(recorded)
        streamed = bool(body.get("stream")) and self.streams is True
        refusal = self._refusal(body)
        if refusal is not None:
            return refusal
        reply = await self._reply(recorded)
        if isinstance(reply, web.Response):
            return reply
        if streamed and reply.status == 200 and reply.raw_body is None:
            if reply.delay > 0:
                await self._pause(reply.delay)
            return await self._stream(request, reply, recorded)
        if reply.trickle > 0:
            return await self._trickle(request, reply, recorded)
        if reply.delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), reply.delay)
        return self._render(reply, recorded)

    async def _reply(self, recorded: RecordedRequest) -> Reply | web.Response:
        """The responder's reply to the request; a 500 (not retried) when it raises."""
        try:
            reply = self.responder(recorded)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:
            self.errors.append(exc)
            log.exception("FakeOpenAI responder raised")
            return self._error(500, f"FakeOpenAI responder raised {type(exc).__name__}: {exc}",
                               headers={"x-should-retry": "false"})
        return Reply(text=reply) if isinstance(reply, str) else reply

    def _refusal(self, body: dict[str, Any]) -> web.Response | None:
        """The 400 a request gets before the responder is asked: what this server was told not to take
        (streaming, stream_options, a parameter), a malformed request, images for a text-only model."""
        if body.get("stream") and not self.streams:
            return self._error(400, "FakeOpenAI(streams=False) does not support stream=true; send a non-streaming "
                                    "request")
        if "stream_options" in body and not self.stream_options:
            return self._error(400, "Unrecognized request argument supplied: stream_options")
        refused = next((p for p in self.refuses if p in body), None)
        if refused is not None:
            return web.json_response({"error": {
                "message": f"Unsupported value: '{refused}' does not support {body[refused]!r} with this model. "
                           "Only the default value is supported.",
                "type": "invalid_request_error", "param": refused, "code": "unsupported_value"}}, status=400)
        if not isinstance(body.get("messages"), list) or not body.get("model"):
            return self._error(400, "'model' and 'messages' are required")
        problem = _tool_sequence_problem(body["messages"])
        if problem:
            return self._error(400, problem)
        if body["model"] in self.text_only and image_urls(body):
            return self._error(400, IMAGES_REFUSED)
        return None

    async def _trickle(self, request: web.Request, reply: Reply, recorded: RecordedRequest) -> web.StreamResponse:
        rendered = self._render(reply, recorded)
        stream = web.StreamResponse(status=rendered.status, headers={"Content-Type": "application/json"})
        await stream.prepare(request)
        deadline = time.monotonic() + reply.delay
        while time.monotonic() < deadline and not self._closing.is_set():
            await stream.write(b" ")
            await asyncio.sleep(reply.trickle)
        await stream.write(rendered.body if isinstance(rendered.body, bytes) else b"")
        await stream.write_eof()
        return stream

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    async def _stream(self, request: web.Request, reply: Reply, recorded: RecordedRequest) -> web.StreamResponse:
        """The reply as server-sent events, piece by piece (see the module docstring)."""
        n = next(self._ids)
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "x-request-id": f"req_fake{n}",
                                             **(reply.headers or {})})
        await stream.prepare(request)
        base = {"id": f"chatcmpl-fake{n}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": recorded.get("model"), "system_fingerprint": "fp_fake"}

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            await stream.write(f"data: {json.dumps({**base, 'choices': choices, **extra})}\n\n".encode())

        await send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        if not await self._send_pieces(request, reply, recorded, send):
            return stream
        for i, call in enumerate(reply.tool_calls):  # as OpenAI streams them: id and name, then the arguments
            arguments = call.get("arguments", "{}")
            await send([{"index": 0, "delta": {"tool_calls": [
                {"index": i, "id": f"call_fake{n}_{i}", "type": "function",
                 "function": {"name": call["name"], "arguments": ""}}]}, "finish_reason": None}])
            for start in range(0, len(arguments), 8):
                await send([{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "function": {"arguments": arguments[start:start + 8]}}]}, "finish_reason": None}])
        if reply.hold_end is not None:
            waits = {asyncio.ensure_future(self._closing.wait()), asyncio.ensure_future(reply.hold_end.wait())}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
        finish = "tool_calls" if reply.tool_calls and reply.finish_reason == "stop" else reply.finish_reason
        await send([{"index": 0, "delta": {}, "finish_reason": finish}])
        if (recorded.get("stream_options") or {}).get("include_usage") and reply.usage != "omit":
            usage = reply.usage if reply.usage is not None else _usage(recorded, reply.text)
            await send([], usage=usage)
        await stream.write(b"data: [DONE]\n\n")
        await stream.write_eof()
        recorded.ended_at = time.monotonic()
        return stream

    async def _send_pieces(self, request: web.Request, reply: Reply, recorded: RecordedRequest,
                           send: Callable[[list[dict[str, Any]]], Awaitable[None]]) -> bool:
        """The reply's text, a piece at its time; False when the stream ends before it all went (a
        scripted break, or the server closing)."""
        pieces = list(reply.pieces) if reply.pieces is not None else re.findall(r"\S+\s*|\s+", reply.text)
        began = time.monotonic()
        for i, piece in enumerate(pieces):
            if reply.break_after is not None and i >= reply.break_after:
                if request.transport is not None:
                    request.transport.abort()  # the connection drops mid-stream
                return False
            # Each piece at its time from the start (no drift from the sleeps' own overshoot).
            await self._pause(max(0.0, began + reply.first + i * reply.every - time.monotonic()))
            if self._closing.is_set():
                return False
            await send([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
            recorded.last_piece_at = time.monotonic()
            if recorded.first_piece_at is None:
                recorded.first_piece_at = recorded.last_piece_at
        return True

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        body = {"error": {"message": message, "type": _error_type(status), "param": None, "code": None}}
        return web.json_response(body, status=status, headers=headers)

    def _render(self, reply: Reply, body: dict[str, Any]) -> web.Response:
        n = next(self._ids)
        headers = {"x-request-id": f"req_fake{n}", **(reply.headers or {})}
        if reply.raw_body is not None:
            return web.json_response(reply.raw_body, status=reply.status, headers=headers)
        if reply.status != 200:
            if reply.error_body is None:
                return self._error(reply.status, f"FakeOpenAI scripted HTTP {reply.status}", headers)
            return web.json_response(reply.error_body, status=reply.status, headers=headers)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        finish = reply.finish_reason
        if reply.tool_calls:
            message["content"] = reply.text or None  # as OpenAI sends a reply that only calls tools
            message["tool_calls"] = [
                {"id": f"call_fake{n}_{i}", "type": "function",
                 "function": {"name": c["name"], "arguments": c.get("arguments", "{}")}}
                for i, c in enumerate(reply.tool_calls)]
            finish = "tool_calls" if finish == "stop" else finish
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": _logprobs(reply.text, reply.logprobs) if reply.logprobs is not None else None,
            "finish_reason": finish,
        }
        payload: dict[str, Any] = {
            "id": f"chatcmpl-fake{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [choice],
            "system_fingerprint": "fp_fake",
        }
        if reply.usage != "omit":
            payload["usage"] = reply.usage if reply.usage is not None else _usage(body, reply.text)
        return web.json_response(payload, headers=headers)


def _tool_sequence_problem(messages: list[Any]) -> str | None:
    """OpenAI's 400s for a broken tool exchange: every assistant tool call answered by a `tool`
    message right after it, and no `tool` message that answers no call."""
    waiting: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "tool":
            if m.get("tool_call_id") not in waiting:
                return (f"Invalid parameter: messages[{i}] with role 'tool' must be a response to a preceding "
                        "message with 'tool_calls'.")
            waiting.discard(m["tool_call_id"])
            continue
        if waiting:
            return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {sorted(waiting)}")
        if role == "assistant":
            waiting = {c.get("id") for c in m.get("tool_calls") or ()}
    return None


def _usage(body: dict[str, Any], text: str) -> dict[str, Any]:
    prompt = "\n".join(message_text(m) for m in body.get("messages", []))
    p, c = rough_tokens(prompt), rough_tokens(text)
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def _logprobs(text: str, values: list[float]) -> dict[str, Any]:
    """Split `text` into len(values) consecutive pieces, one per log-probability."""
    k = len(values)
    size = math.ceil(len(text) / k) if k and text else 0
    pieces = [text[i * size:(i + 1) * size] for i in range(k)]
    content = [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
               for t, lp in zip(pieces, values)]
    return {"content": content, "refusal": None}
