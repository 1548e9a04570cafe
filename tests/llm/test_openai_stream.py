"""OpenAILLM.stream with the real openai client against FakeOpenAI's server-sent events: pieces as they
come, usage as a plain call reports it, and servers that do not stream or break the stream off."""
from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from bot.core.errors import LLMUnavailable
from bot.core.models import ChatMessage, Tool
from bot.core.ports import LLM
from bot.core.rules.secrets import SECRETS
from bot.llm.openai_llm import OpenAILLM
from bot.llm.tokens import make_token_counter
from tests.fakes.openai_server import FakeOpenAI, Reply, tool_call

MESSAGES = [ChatMessage("system", "You are terse."), ChatMessage("user", "Say hello to the group.")]
TEXT = "Hello all, here is the plan for the three days."
USAGE = {"prompt_tokens": 20, "completion_tokens": 11, "total_tokens": 31,
         "prompt_tokens_details": {"cached_tokens": 7}}


def make_llm(srv: FakeOpenAI, **kwargs: Any) -> OpenAILLM:
    return OpenAILLM(api_key="sk-test", base_url=srv.base_url, default_model="agent-model", timeout=5.0,
                     counter=make_token_counter(), **kwargs)


async def test_pieces_arrive_in_order_and_usage_is_the_servers() -> None:
    async with FakeOpenAI(lambda body: Reply(text=TEXT, usage=USAGE)) as srv:
        async with make_llm(srv) as llm:
            port: LLM = llm
            pieces: list[str] = []
            streamed = await port.stream(MESSAGES, on_text=pieces.append, cache_key="rt-1-2")
            whole = await port.complete(MESSAGES, cache_key="rt-1-2")
    assert len(pieces) == len(TEXT.split()) and "".join(pieces) == TEXT == streamed.text
    assert streamed.usage == whole.usage and not streamed.usage.estimated and streamed.usage.cached_tokens == 7
    assert streamed.model == "agent-model" and streamed.finish_reason == "stop"
    body = srv.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["prompt_cache_key"] == "rt-1-2" and "stream" not in srv.requests[1]


async def test_without_usage_in_the_stream_it_is_estimated_as_for_a_plain_call() -> None:
    async with FakeOpenAI(lambda body: Reply(text=TEXT, usage="omit")) as srv:
        async with make_llm(srv) as llm:
            streamed = await llm.stream(MESSAGES, on_text=lambda piece: None)
            whole = await llm.complete(MESSAGES)
    assert streamed.usage == whole.usage and streamed.usage.estimated and streamed.usage.completion_tokens > 5


async def test_a_server_refusing_stream_options_is_asked_without_them() -> None:
    async with FakeOpenAI(lambda body: Reply(text=TEXT), stream_options=False) as srv:
        async with make_llm(srv) as llm:
            first = await llm.stream(MESSAGES, on_text=lambda piece: None)
            await llm.stream(MESSAGES, on_text=lambda piece: None)
    assert first.text == TEXT and first.usage.estimated
    assert ["stream_options" in r for r in srv.requests] == [True, False, False]


@pytest.mark.parametrize("streams", [False, "json"])
async def test_a_server_that_does_not_stream_is_asked_plainly_and_said_once(streams, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="bot.llm.openai_llm")
    async with FakeOpenAI(lambda body: Reply(text=TEXT, usage=USAGE), streams=streams) as srv:
        async with make_llm(srv) as llm:
            pieces: list[str] = []
            first = await llm.stream(MESSAGES, on_text=pieces.append)
            second = await llm.stream(MESSAGES, on_text=pieces.append)
    assert first.text == second.text == TEXT and pieces == [] and first.usage.completion_tokens == 11
    asked = [bool(r.get("stream")) for r in srv.requests]
    assert asked == ([True, False, False] if streams is False else [True, False])  # remembered after the first
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "agent-model" in lines[0] and "does not stream" in lines[0], lines


async def test_a_stream_broken_off_is_asked_again_plainly_and_said_once_per_model(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="bot.llm.openai_llm")
    replies = iter([Reply(text="Half a repl and then", break_after=3), Reply(text=TEXT),
                    Reply(text="Broken again", break_after=1), Reply(text=TEXT)])
    async with FakeOpenAI(lambda body: next(replies)) as srv:
        async with make_llm(srv) as llm:
            pieces: list[str] = []
            first = await llm.stream(MESSAGES, on_text=pieces.append)
            second = await llm.stream(MESSAGES, on_text=pieces.append)
    assert pieces == ["Half ", "a ", "repl ", "Broken "]
    assert first.text == second.text == TEXT and [bool(r.get("stream")) for r in srv.requests] == [True, False] * 2
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "broke its stream off" in warned[0]


async def test_a_server_error_is_an_error_not_a_reason_to_stop_streaming() -> None:
    async with FakeOpenAI(lambda body: Reply(status=503, headers={"x-should-retry": "false"})) as srv:
        async with make_llm(srv, max_retries=0) as llm:
            with pytest.raises(LLMUnavailable):
                await llm.stream(MESSAGES, on_text=lambda piece: None)
    assert len(srv.requests) == 1


async def test_what_on_text_raises_comes_out_unchanged() -> None:
    def refuse(piece: str) -> None:
        raise KeyError(piece)

    async with FakeOpenAI(lambda body: Reply(text=TEXT)) as srv:
        async with make_llm(srv) as llm:
            with pytest.raises(KeyError, match="Hello"):
                await llm.stream(MESSAGES, on_text=refuse)


async def test_providers_stream_on_the_agents_provider_and_say_which() -> None:
    from bot.llm.providers import Providers

    async with FakeOpenAI(lambda body: Reply(text=TEXT)) as default, \
            FakeOpenAI(lambda body: Reply(text="From the local one.")) as local, \
            FakeOpenAI(lambda body: Reply(status=503, headers={"x-should-retry": "false"})) as down:
        clients = {name: OpenAILLM(api_key="sk-test", base_url=srv.base_url, default_model="agent-model", timeout=5.0,
                                   counter=make_token_counter(), provider=name, max_retries=0)
                   for name, srv in (("default", default), ("local", local), ("down", down))}
        providers = Providers(clients, default_model="agent-model")
        try:
            pieces: list[str] = []
            there = await providers.stream(MESSAGES, on_text=pieces.append, model="local/llama3.1:8b")
            here = await providers.stream(MESSAGES, on_text=pieces.append)
            with pytest.raises(LLMUnavailable) as failed:
                await providers.stream(MESSAGES, on_text=pieces.append, model="down/m")
        finally:
            await providers.aclose()
    assert (there.text, there.provider, here.text, here.provider) == ("From the local one.", "local", TEXT, "default")
    assert "".join(pieces) == "From the local one." + TEXT
    assert [r["model"] for r in local.requests] == ["llama3.1:8b"] and local.requests[0]["stream"] is True
    assert "provider down" in failed.value.public


async def test_a_stream_of_garbage_is_a_broken_stream_asked_again_plainly(caplog) -> None:
    """A server (a proxy in the way) whose event stream turns into text that is not JSON: the
    stream is broken off, as a dropped connection is, and the model is asked again plainly (an
    exception the openai client lets out, JSONDecodeError, was not an LLMError and failed the turn)."""
    from aiohttp import web

    caplog.set_level(logging.DEBUG, logger="bot.llm.openai_llm")
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "agent-model",
             "choices": [{"index": 0, "delta": {"content": "Hello "}, "finish_reason": None}]}

    async def chat(request: web.Request) -> web.StreamResponse:
        if not (await request.json()).get("stream"):
            return web.json_response({"id": "c2", "object": "chat.completion", "created": 1, "model": "agent-model",
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": TEXT}}],
                                      "usage": USAGE})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: {<html>502 Bad Gateway</html>\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with OpenAILLM(api_key="sk-test", base_url=f"http://127.0.0.1:{port}/v1", default_model="agent-model",
                             timeout=5.0, counter=make_token_counter()) as llm:
            pieces: list[str] = []
            answer = await llm.stream(MESSAGES, on_text=pieces.append)
    finally:
        await runner.cleanup()
    assert pieces == ["Hello "] and answer.text == TEXT and answer.usage.prompt_tokens == 20
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "broke its stream off" in warned[0]


async def test_streamed_tool_calls_are_assembled_from_their_pieces_with_usage() -> None:
    """Issue 29: a streamed answer may call tools; the ids, names and argument pieces come as
    `delta.tool_calls` by index, and the exchange goes back on the wire as a plain call's does."""
    counter = Tool("counter__add", "Add to the counter", {"type": "object", "properties": {"n": {"type": "integer"}}})
    secret = "sk-live-streamed-secret-9f8e7d6c5b4a"
    replies = [Reply(text="Let me count.", usage=USAGE,
                     tool_calls=[tool_call("counter__add", n=2, note="a long argument, cut into many pieces"),
                                 tool_call("counter__add", arguments=json.dumps({"n": 3, "key": secret}))]),
               Reply(text="Done: 5.")]
    async with FakeOpenAI(replies) as srv, make_llm(srv) as llm:
        SECRETS.register(secret)
        pieces: list[str] = []
        first = await llm.stream(MESSAGES, on_text=pieces.append, tools=[counter])
        follow = [*MESSAGES, ChatMessage("assistant", first.text, tool_calls=first.tool_calls),
                  *(ChatMessage("tool", "ok", tool_call_id=c.id) for c in first.tool_calls)]
        second = await llm.stream(follow, on_text=pieces.append, tools=[counter])
    assert first.text == "Let me count." and first.finish_reason == "tool_calls"
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("counter__add", {"n": 2, "note": "a long argument, cut into many pieces"}),
        ("counter__add", {"n": 3, "key": "***"})]
    assert secret not in first.tool_calls[1].arguments
    assert len({c.id for c in first.tool_calls}) == 2 and all(c.id for c in first.tool_calls)
    assert first.usage.prompt_tokens == 20 and not first.usage.estimated
    assert second.text == "Done: 5." and second.tool_calls == () and "".join(pieces) == "Let me count.Done: 5."
    assert srv.requests[0]["stream"] is True and srv.requests[0]["tools"][0]["function"]["name"] == "counter__add"
    assert [m["role"] for m in srv.requests[1]["messages"]] == ["system", "user", "assistant", "tool", "tool"]
