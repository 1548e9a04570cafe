"""The bench server's cache rule (pure, fast) and its wire format through the real openai client."""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import openai
import pytest

from bench.cache_server import (
    BLOCK_TOKENS,
    MIN_CACHED_PROMPT,
    CacheServer,
    CallRecord,
    PromptCache,
    PromptTokenizer,
    Tokenizer,
    block_hashes,
    common_prefix,
)
from bench.openai_server import Reply, tool_call
from bench.scenario import Script
from bench.tokyo import run_roundtable


def ids(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def test_a_prompt_under_1024_tokens_has_nothing_cached() -> None:
    cache = PromptCache()
    prompt = ids(0, MIN_CACHED_PROMPT - 1)
    assert cache.bill(prompt) == 0
    assert cache.bill(prompt) == 0  # the very same prompt again: still too short


def test_cached_tokens_are_whole_128_token_blocks() -> None:
    cache = PromptCache()
    first = ids(0, 1100)  # 8 full blocks and 76 tokens
    assert cache.bill(first) == 0  # nothing seen before
    assert cache.bill(first + ids(5000, 50)) == 1024  # the partial 9th block is never cached
    assert cache.bill(first + ids(5000, 50)) == 1024  # 1150 tokens: still 8 full blocks


def test_a_prefix_of_an_earlier_different_prompt_is_cached() -> None:
    cache = PromptCache()
    cache.bill(ids(0, 3000))
    cache.bill(ids(90000, 2000))  # something else in between
    prompt = ids(0, 1500) + ids(70000, 600)  # shares 1500 tokens with the first prompt
    assert cache.bill(prompt) == (1500 // BLOCK_TOKENS) * BLOCK_TOKENS == 1408


def test_a_change_in_the_first_block_caches_nothing() -> None:
    cache = PromptCache()
    cache.bill(ids(0, 4000))
    changed = ids(0, 4000)
    changed[5] = 999_999
    assert cache.bill(changed) == 0
    changed_later = ids(0, 4000)
    changed_later[BLOCK_TOKENS * 10 + 3] = 999_999  # block 10 differs: blocks 0..9 still hit
    assert cache.bill(changed_later) == 10 * BLOCK_TOKENS


def test_blocks_are_chained_and_models_do_not_share() -> None:
    cache = PromptCache()
    base = ids(0, 2048)
    cache.bill(base, "model-a")
    assert cache.bill(base, "model-b") == 0
    moved = ids(0, 1152) + ids(50000, 128) + base[1280:]  # blocks 10.. equal, block 9 not: blocks 0..8 hit
    assert cache.bill(moved, "model-a") == 1152
    assert block_hashes(base)[:3] == block_hashes(base[:400])


def test_nothing_is_cached_unless_the_first_1024_tokens_match() -> None:
    """OpenAI's rule: a shared prefix under 1,024 tokens caches nothing, however long the prompt."""
    cache = PromptCache()
    cache.bill(ids(0, 3000))
    assert cache.bill(ids(0, 900) + ids(70000, 2000)) == 0  # 7 shared blocks: under the minimum
    assert cache.bill(ids(0, 1023) + ids(71000, 2000)) == 0  # 7 full blocks and 127 tokens
    assert cache.bill(ids(0, 1024) + ids(72000, 2000)) == 1024  # exactly the first 1,024
    assert cache.bill(ids(0, 1151) + ids(73000, 2000)) == 1024  # then in 128-token steps
    assert cache.bill(ids(0, 1152) + ids(74000, 2000)) == 1152


def test_common_prefix() -> None:
    a, b = array("I", ids(0, 1000)), array("I", ids(0, 700) + [7] * 10)
    assert common_prefix(a, b) == 700
    assert common_prefix(a, a) == 1000
    assert common_prefix(a, array("I")) == 0


def test_the_serialization_keeps_a_grown_conversation_as_its_prefix() -> None:
    tokens = PromptTokenizer(Tokenizer())
    head = [{"role": "system", "content": "You plan."}, {"role": "user", "name": "alice", "content": "Tokyo, 3 days"}]
    grown = [*head, {"role": "user", "name": "budget", "content": "Keep it under $1,500."}]
    short, long = tokens.prompt(head), tokens.prompt(grown)
    assert long[: len(short)] == short and len(long) > len(short)
    assert tokens.prompt([{"role": "user", "content": "x"}]) != tokens.prompt([{"role": "system", "content": "x"}])


def classify(texts: Sequence[str]) -> tuple[str, str | None]:
    if any("choose who speaks" in t for t in texts):
        return "selector", None
    return ("participant", "planner") if any("You plan." in t for t in texts) else ("other", None)


async def test_usage_cached_tokens_and_records_through_the_openai_client() -> None:
    def respond(record: CallRecord, body: dict[str, Any]) -> str:
        return "budget" if record.kind == "selector" else f"reply {record.index}"

    long_text = " ".join(f"word{i}" for i in range(1500))  # well over 1,024 tokens
    async with CacheServer(respond, classify) as server:
        client = openai.AsyncOpenAI(api_key="bench", base_url=server.base_url, max_retries=0)
        try:
            messages: list[Any] = [{"role": "system", "content": "You plan."}, {"role": "user", "content": long_text}]
            first = await client.chat.completions.create(model="bench-model", messages=messages)
            second = await client.chat.completions.create(
                model="bench-model", messages=[*messages, {"role": "user", "content": "more"}],
                extra_body={"prompt_cache_key": "group-1"})
            pick = await client.chat.completions.create(
                model="bench-model", messages=[{"role": "user", "content": "choose who speaks"}], max_tokens=20)
            models = await client.models.list()
        finally:
            await client.close()
    assert first.choices[0].message.content == "reply 0" and pick.choices[0].message.content == "budget"
    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens > MIN_CACHED_PROMPT
    assert first.usage.prompt_tokens_details is not None and first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens if second.usage.prompt_tokens_details else None
    assert cached == (first.usage.prompt_tokens // BLOCK_TOKENS) * BLOCK_TOKENS
    assert [m.id for m in models.data] == ["bench-model"]
    r0, r1, r2 = server.records
    assert (r0.kind, r0.agent, r0.prefix_kept, r0.cache_key) == ("participant", "planner", None, None)
    assert (r1.prefix_kept, r1.cache_key, r1.completion_tokens) == (1.0, "group-1", first.usage.completion_tokens)
    assert (r2.kind, r2.max_tokens, r2.cached_tokens) == ("selector", 20, 0)
    assert (r0.caller, r2.caller) == ("planner", "selector")
    assert r0.shared_prefix == r1.shared_prefix == 0  # only another caller's prompt counts
    assert r2.shared_prefix < 3  # the selector's prompt opens otherwise (at most the role's framing)


async def test_a_responder_error_is_a_500_and_named_in_the_run_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server answers a responder's exception with a 500 the client does not retry; the run's
    note names it after how the run ended."""
    real = Script.reply

    def reply(self: Script, agent: str) -> str:
        if sum(self.replies.values()) >= 2:
            raise RuntimeError("the script broke")
        return real(self, agent)

    monkeypatch.setattr(Script, "reply", reply)
    report = await run_roundtable(4, Tokenizer())
    assert report.note == "2 agent posts; episode quiet; server: RuntimeError: the script broke"
    assert [r.kind for r in report.records].count("participant") == 3 and len(report.turns) == 3


def test_tool_definitions_are_billed_ahead_of_the_messages_and_tool_calls_count() -> None:
    """A provider puts the tools' definitions ahead of the messages: the same definitions in the same
    order keep a prompt's prefix (cached); in another order they do not. An assistant message's tool
    calls are tokens of the prompt too."""
    tokens = PromptTokenizer(Tokenizer())
    tools = [{"type": "function", "function": {"name": f"bench__tool{k}", "description": "word " * 400}}
             for k in range(3)]
    messages = [{"role": "system", "content": "You plan."}, {"role": "user", "content": "Tokyo"}]
    plain, with_tools = tokens.prompt(messages), tokens.prompt(messages, tools)
    assert len(with_tools) > len(plain) + 1200 and with_tools[-len(plain):] == plain
    cache = PromptCache()
    cache.bill(with_tools)
    assert cache.bill(tokens.prompt([*messages, {"role": "user", "content": "more"}], tools)) >= MIN_CACHED_PROMPT
    assert cache.bill(tokens.prompt(messages, tools[::-1])) == 0
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bench__tool0", "arguments": '{"city": "Tokyo"}'}}]}
    assert len(tokens.prompt([*messages, call])) > len(tokens.prompt([*messages, {**call, "tool_calls": []}]))


async def test_a_responder_may_answer_with_tool_calls() -> None:
    def respond(record: CallRecord, body: dict[str, Any]) -> str | Reply:
        return Reply(tool_calls=[tool_call("bench__wait", ms=0)]) if record.index == 0 else "done"

    async with CacheServer(respond) as server:
        client = openai.AsyncOpenAI(api_key="bench", base_url=server.base_url, max_retries=0)
        try:
            first = await client.chat.completions.create(model="bench-model",
                                                         messages=[{"role": "user", "content": "wait"}])
        finally:
            await client.close()
    calls = first.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "bench__wait"  # type: ignore[union-attr]  # (a function call)
    assert first.usage is not None and first.usage.completion_tokens == server.records[0].completion_tokens > 0
