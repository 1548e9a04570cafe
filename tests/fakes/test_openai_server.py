"""FakeOpenAI speaks OpenAI's wire format; GroupChatScript tells selector, participant and other calls apart."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from bot.core.errors import LLMUnavailable
from bot.core.models import ChatMessage
from bot.llm.openai_llm import OpenAILLM
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply
from tests.support import bound

SELECTOR = "You are coordinating a group chat. Choose who speaks next.\n\n<roles>\n...</roles>"


def participant(name: str, role: str = "expert") -> list[ChatMessage]:
    prompt = f"You are {name}, the {role} in a group chat working on the task below.\nThe other participants are: x."
    return [ChatMessage("system", f"I am {name}."), ChatMessage("user", prompt)]


def llm_for(srv: FakeOpenAI) -> OpenAILLM:
    return OpenAILLM(api_key="sk-fake", base_url=srv.base_url, default_model="m", timeout=5.0)


async def test_wire_format() -> None:
    async with FakeOpenAI(lambda body: "hi") as srv, aiohttp.ClientSession() as http:
        async with http.post(f"{srv.base_url}/chat/completions",
                             json={"model": "m1", "messages": [{"role": "user", "content": "hello"}]}) as r:
            assert r.status == 200 and r.content_type == "application/json"
            data = await r.json()
        async with http.post(f"{srv.base_url}/chat/completions",
                             json={"model": "m1", "messages": [], "stream": True,
                                   "stream_options": {"include_usage": True}}) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            events = [line.removeprefix("data: ") for line in (await r.text()).split("\n\n") if line]
        async with http.get(f"{srv.base_url}/models") as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["fake-model"]
    assert data["object"] == "chat.completion" and data["model"] == "m1"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "hi", "refusal": None}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"]["prompt_tokens"] > 0 and data["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 0, "audio_tokens": 0}
    assert len(srv.requests) == 2 and srv.requests[0]["model"] == "m1"
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "hi"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 1


async def test_a_server_that_does_not_stream_says_so() -> None:
    async with FakeOpenAI(lambda body: "hi", streams=False) as srv, aiohttp.ClientSession() as http:
        async with http.post(f"{srv.base_url}/chat/completions",
                             json={"model": "m1", "messages": [], "stream": True}) as r:
            assert r.status == 400 and "stream" in (await r.json())["error"]["message"]


async def test_close_does_not_wait_for_a_hanging_reply() -> None:
    srv = FakeOpenAI([Reply(delay=3600)])
    await srv.start()
    async with aiohttp.ClientSession() as http:
        call = asyncio.ensure_future(http.post(f"{srv.base_url}/chat/completions",
                                               json={"model": "m", "messages": []}))
        while not srv.requests:
            await asyncio.sleep(0.01)
        await asyncio.wait_for(srv.close(), bound(30))  # the reply would come in an hour
        (await call).close()


async def test_seed_scenario_order() -> None:
    script = GroupChatScript(
        selector=["planner", "budget", "planner", "TERMINATE"],
        agents={"planner": ["draft plan", "revised plan"], "budget": ["over by $200"]},
        summary=["the summary"],
    )
    selector_msgs = [ChatMessage("user", SELECTOR)]
    said: list[str] = []
    async with FakeOpenAI(script) as srv, llm_for(srv) as llm:
        while (choice := (await llm.complete(selector_msgs)).text) != "TERMINATE":
            said.append((await llm.complete(participant(choice))).text)
        assert (await llm.complete([ChatMessage("user", "Summarise.")])).text == "the summary"
        assert (await llm.complete(selector_msgs)).text == "TERMINATE"  # exhausted selector
    assert said == ["draft plan", "over by $200", "revised plan"]
    assert script.participant_order == ["planner", "budget", "planner"]
    assert script.calls[:3] == [("selector", None), ("participant", "planner"), ("selector", None)]
    assert script.calls[-2:] == [("other", None), ("selector", None)]


async def test_exhausted_agent_fails_loudly_without_retries() -> None:
    script = GroupChatScript(agents={"planner": []})
    async with FakeOpenAI(script) as srv, llm_for(srv) as llm:
        with pytest.raises(LLMUnavailable, match="ran out"):
            await llm.complete(participant("planner"))
    assert len(srv.requests) == 1


async def test_dynamic_selector_faults_and_defaults() -> None:
    names: list[tuple[str, int]] = []

    def default(name: str, n: int) -> str:
        names.append((name, n))
        return f"{name} #{n}"

    script = GroupChatScript(
        selector=lambda body: "planner",
        agents={"Planner": [Reply(status=429, headers={"retry-after-ms": "10"}), "first"]},
        default_agent_reply=default,
    )
    async with FakeOpenAI(script) as srv, llm_for(srv) as llm:
        assert (await llm.complete([ChatMessage("system", SELECTOR)])).text == "planner"
        assert (await llm.complete(participant("Planner"))).text == "first"  # after the scripted 429
        assert (await llm.complete(participant("Planner"))).text == "Planner #3"
    assert names == [("Planner", 3)]
    assert script.participant_order == ["Planner"] * 3


def test_classify() -> None:
    def body(*texts: Any) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": t} for t in texts]}

    assert GroupChatScript.classify(body("x", SELECTOR)) == ("selector", None)
    assert GroupChatScript.classify(body("hi\nYou are Ada Lovelace, the analyst in a group chat working on "
                                         "the task below.")) == ("participant", "Ada Lovelace")
    parts = [{"type": "text", "text": "You are bob, the critic in a group chat working on the task below."}]
    assert GroupChatScript.classify(body(parts)) == ("participant", "bob")
    assert GroupChatScript.classify(body("Summarise the thread.")) == ("other", None)
