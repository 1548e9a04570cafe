"""Tool calling through OpenAILLM: the real openai client against FakeOpenAI on 127.0.0.1."""
from __future__ import annotations

import json
from typing import Any

import pytest

from bot.core.errors import LLMRejected
from bot.core.features.memory import MEMORY_TOOL
from bot.core.models import ChatMessage
from bot.llm.openai_llm import OpenAILLM
from tests.fakes.openai_server import FakeOpenAI, Reply, closed_base_url, tool_call

KEY = "sk-test-tools-key-5151"
MESSAGES = [ChatMessage("system", "You plan."), ChatMessage("user", "Plan a trip.")]


def make_llm(base_url: str, **kwargs: object) -> OpenAILLM:
    return OpenAILLM(api_key=KEY, base_url=base_url, default_model="agent-model", timeout=5.0, **kwargs)  # type: ignore[arg-type]


async def test_tools_go_out_and_tool_calls_come_back_and_the_exchange_goes_back_on_the_wire() -> None:
    replies = [Reply(tool_calls=[tool_call("memory_write", note="Alice likes trains.")]), Reply(text="Done.")]
    async with FakeOpenAI(replies) as srv, make_llm(srv.base_url) as llm:
        first = await llm.complete(MESSAGES, tools=[MEMORY_TOOL])
        assert first.text == "" and first.finish_reason == "tool_calls"
        assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
            ("memory_write", {"note": "Alice likes trains."})]
        follow = [*MESSAGES, ChatMessage("assistant", first.text, tool_calls=first.tool_calls),
                  ChatMessage("tool", "Saved.", tool_call_id=first.tool_calls[0].id)]
        second = await llm.complete(follow, tools=[MEMORY_TOOL])
    assert second.text == "Done." and second.tool_calls == ()
    assert srv.requests[0]["tools"] == [{"type": "function", "function": {
        "name": "memory_write", "description": "Save a short note to remember in later runs",
        "parameters": MEMORY_TOOL.parameters}}]
    assert "tool_choice" not in srv.requests[0]
    sent = srv.requests[1]["messages"]
    call_id = first.tool_calls[0].id
    assert sent[2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "memory_write", "arguments": first.tool_calls[0].arguments}}]}
    assert sent[3] == {"role": "tool", "tool_call_id": call_id, "content": "Saved."}


async def test_a_call_without_tools_sends_no_tools_key() -> None:
    async with FakeOpenAI(["hi"]) as srv, make_llm(srv.base_url) as llm:
        await llm.complete(MESSAGES)
    assert "tools" not in srv.requests[0] and "tool_choice" not in srv.requests[0]


async def test_a_broken_tool_exchange_is_refused_as_openai_does() -> None:
    """The fake holds the client to OpenAI's rule: a tool message answers a call just before it."""
    async with FakeOpenAI(["hi"]) as srv, make_llm(srv.base_url, max_retries=0) as llm:
        with pytest.raises(LLMRejected) as info:
            await llm.complete([*MESSAGES, ChatMessage("tool", "Saved.", tool_call_id="call_x")])
    assert "HTTP 400" in str(info.value)
    assert "must be a response to a preceding message with 'tool_calls'" in str(info.value)


async def test_tools_refusal_none_for_a_model_that_calls_the_probe_and_asked_once() -> None:
    def answer(body: dict[str, Any]) -> Reply:
        forced = body["tool_choice"]["function"]["name"]
        return Reply(tool_calls=[tool_call(forced, ok=True)])

    async with FakeOpenAI(answer) as srv, make_llm(srv.base_url) as llm:
        assert await llm.tools_refusal(None) is None
        assert await llm.tools_refusal("agent-model") is None  # the default model, remembered
    assert len(srv.requests) == 1
    probe = srv.requests[0]
    assert probe["model"] == "agent-model" and probe["max_tokens"] == 16
    assert probe["tool_choice"] == {"type": "function", "function": {"name": probe["tools"][0]["function"]["name"]}}


async def test_tools_refusal_names_the_endpoint_refusal_and_remembers_it() -> None:
    refusal = Reply(status=400, error_body={"error": {"message": "tools is not supported for this model",
                                                      "type": "invalid_request_error"}})
    async with FakeOpenAI([refusal]) as srv, make_llm(srv.base_url) as llm:
        first = await llm.tools_refusal("tiny-model")
        again = await llm.tools_refusal("tiny-model")
    assert first == again == ("model tiny-model does not take tool calls (the endpoint said: tools is not "
                              "supported for this model); memory needs them")
    assert len(srv.requests) == 1


async def test_tools_refusal_when_the_reply_carries_no_tool_call() -> None:
    async with FakeOpenAI(["I would rather talk."]) as srv, make_llm(srv.base_url) as llm:
        reason = await llm.tools_refusal("chatty-model")
    assert reason == ("model chatty-model answered without the tool call it was asked for, so it does not take "
                      "tool calls; memory needs them")


async def test_tools_refusal_that_could_not_check_is_not_remembered() -> None:
    url = closed_base_url()
    async with make_llm(url, max_retries=0) as llm:
        reason = await llm.tools_refusal("agent-model")
        assert reason == ("could not check whether model agent-model takes tool calls (the model service could not "
                          "be reached); try again later")
        assert "agent-model" not in llm._tools_answers
    busy = Reply(status=503, headers={"x-should-retry": "false"})
    async with FakeOpenAI([busy, Reply(tool_calls=[tool_call("roundtable_probe", ok=True)])]) as srv, \
            make_llm(srv.base_url, max_retries=0) as llm:
        assert (await llm.tools_refusal(None) or "").startswith("could not check whether model agent-model")
        assert await llm.tools_refusal(None) is None  # asked again, and this time it answered
    assert KEY not in (reason or "")


async def test_messages_and_tools_skip_the_sdks_per_message_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK walks a request's parameters against its type hints before sending (a few ms a request,
    growing with the messages: most of the product's time between a tool's result and the next model
    call, docs/benchmarks.md "Tools"); the messages and tools skip that walk and go out as built."""
    import openai.resources.chat.completions.completions as sdk
    from openai._utils import async_maybe_transform as real  # the function the chat module imports

    walked: list[dict[str, object]] = []

    async def spy(data: object, expected: object) -> object:
        if isinstance(data, dict):
            walked.append(data)
        return await real(data, expected)

    monkeypatch.setattr(sdk, "async_maybe_transform", spy)
    replies = [Reply(tool_calls=[tool_call("memory_write", note="x")]), Reply(text="Done.")]
    async with FakeOpenAI(replies) as srv, make_llm(srv.base_url) as llm:
        await llm.complete(MESSAGES, tools=[MEMORY_TOOL])
        await llm.stream(MESSAGES, on_text=lambda piece: None, tools=[MEMORY_TOOL], cache_key="g1")
    assert len(walked) == 2 and all(not w.get("messages") and not w.get("tools") for w in walked)
    for sent in srv.requests:
        assert sent["messages"] == [{"role": "system", "content": "You plan."},
                                    {"role": "user", "content": "Plan a trip."}]
        assert [t["function"]["name"] for t in sent["tools"]] == ["memory_write"]
    assert srv.requests[1]["stream"] is True and srv.requests[1]["prompt_cache_key"] == "g1"
