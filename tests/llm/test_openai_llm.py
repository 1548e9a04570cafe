"""OpenAILLM with the real openai client against FakeOpenAI on 127.0.0.1 (no internet)."""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from bot.core.errors import ConfigError, LLMError, LLMRateLimited, LLMRejected, LLMTimeout, LLMUnavailable
from bot.core.models import ChatMessage, ImagePart, Usage
from bot.core.ports import LLM
from bot.llm.openai_llm import OpenAILLM
from tests.fakes.openai_server import FakeOpenAI, Reply, closed_base_url
from tests.fakes.strict_openai import StrictOpenAI
from tests.support import bound

KEY = "sk-test-ZZ9-PLURAL-Z-ALPHA-7c1e"  # distinctive: must never leak
MESSAGES = [ChatMessage("system", "You are terse."), ChatMessage("user", "Say hello to the group.")]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ambient OpenAI/proxy settings, and only loopback connections (a violation fails the test)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_CUSTOM_HEADERS", "OPENAI_ORG_ID",
                 "OPENAI_PROJECT_ID", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    real_connect = socket.socket.connect
    violations: list[object] = []

    def loopback_only(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not ipaddress.ip_address(address[0]).is_loopback:
            violations.append(address)
            raise ConnectionRefusedError(f"test tried to reach {address!r}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", loopback_only)
    yield
    assert not violations, f"network access attempted: {violations}"


def make_llm(srv_or_url: FakeOpenAI | str, **kwargs: Any) -> OpenAILLM:
    base_url = srv_or_url if isinstance(srv_or_url, str) else srv_or_url.base_url
    kwargs.setdefault("timeout", 5.0)
    return OpenAILLM(api_key=KEY, base_url=base_url, default_model="agent-model", **kwargs)


async def test_usage_models_and_request_shape() -> None:
    usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25,
             "prompt_tokens_details": {"cached_tokens": 7}}
    async with FakeOpenAI(lambda body: Reply(text="hello all", usage=usage)) as srv:
        async with make_llm(srv) as llm:
            port: LLM = llm
            first = await port.complete(MESSAGES)
            second = await port.complete(MESSAGES, model="selector-model", max_tokens=50)
    assert first.text == "hello all"
    assert first.usage == Usage(20, 5, 7, estimated=False)
    assert (first.model, first.finish_reason, first.logprob) == ("agent-model", "stop", None)
    assert second.model == "selector-model"
    one, two = srv.requests
    assert one["model"] == "agent-model" and two["model"] == "selector-model"
    assert one["messages"] == [{"role": "system", "content": "You are terse."},
                               {"role": "user", "content": "Say hello to the group."}]
    assert "max_tokens" not in one and "logprobs" not in one and "stream" not in one
    assert two["max_tokens"] == 50
    assert one.headers["authorization"] == f"Bearer {KEY}"


async def test_missing_usage_is_estimated() -> None:
    async with FakeOpenAI([Reply(text="a short reply", usage="omit"), Reply(text="", usage="omit")]) as srv:
        async with make_llm(srv) as llm:
            done = await llm.complete(MESSAGES)
            empty = await llm.complete(MESSAGES)
    assert done.usage.estimated is True
    assert done.usage.prompt_tokens > 10 and done.usage.completion_tokens > 0
    assert done.usage.cached_tokens == 0
    assert empty.text == "" and empty.usage.estimated and empty.usage.completion_tokens == 0


async def test_logprobs_are_requested_and_summed() -> None:
    async with FakeOpenAI([Reply(text="planner", logprobs=[-0.25, -0.5, -0.125])]) as srv:
        async with make_llm(srv) as llm:
            done = await llm.complete(MESSAGES, logprobs=True)
    assert srv.requests[0]["logprobs"] is True
    assert done.logprob == pytest.approx(-0.875)


@pytest.mark.parametrize(
    "headers, low",
    [({"Retry-After": "1"}, 0.9), ({"retry-after-ms": "300", "Retry-After": "100"}, 0.25)],
    ids=["retry-after", "retry-after-ms-wins"],
)
async def test_retry_after_is_honoured(headers: dict[str, str], low: float) -> None:
    # The retry waits at least what the server asked (the SDK's own first backoff is under 0.5 s); where
    # both headers come, the milliseconds win: the 100 s of Retry-After would outlast the generous bound.
    async with FakeOpenAI([Reply(status=429, headers=headers), Reply(text="ok")]) as srv:
        async with make_llm(srv, max_retries=2) as llm:
            done = await asyncio.wait_for(llm.complete(MESSAGES), bound(30))
    assert done.text == "ok"
    assert len(srv.requests) == 2
    assert srv.requests[1].at - srv.requests[0].at >= low


async def test_rate_limited_every_time() -> None:
    always = lambda body: Reply(status=429, headers={"retry-after-ms": "20"})  # noqa: E731
    async with FakeOpenAI(always) as srv:
        async with make_llm(srv, max_retries=2) as llm:
            with pytest.raises(LLMRateLimited) as info:
                await llm.complete(MESSAGES)
    assert len(srv.requests) == 3
    assert "429" in str(info.value) and "agent-model" in str(info.value)
    assert info.value.retryable


async def test_hang_times_out_within_bound() -> None:
    async with FakeOpenAI([Reply(text="late", delay=3600)]) as srv:
        async with make_llm(srv, timeout=1.0, max_retries=0) as llm:
            with pytest.raises(LLMTimeout) as info:  # its own timeout, long before the generous bound
                await asyncio.wait_for(llm.complete(MESSAGES), bound(30))
    assert "timed out" in str(info.value)


async def test_server_error_is_retried_then_unavailable() -> None:
    always = lambda body: Reply(status=500, headers={"retry-after-ms": "10"})  # noqa: E731
    async with FakeOpenAI(always) as srv:
        async with make_llm(srv, max_retries=1) as llm:
            with pytest.raises(LLMUnavailable) as info:
                await llm.complete(MESSAGES)
    assert len(srv.requests) == 2
    assert "500" in str(info.value)


async def test_server_error_then_success() -> None:
    async with FakeOpenAI([Reply(status=503, headers={"retry-after-ms": "10"}), "recovered"]) as srv:
        async with make_llm(srv) as llm:
            assert (await llm.complete(MESSAGES)).text == "recovered"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_rejected_without_retry(status: int) -> None:
    async with FakeOpenAI(lambda body: Reply(status=status)) as srv:
        async with make_llm(srv, max_retries=2) as llm:
            with pytest.raises(LLMRejected) as info:
                await llm.complete(MESSAGES, model="no-such-model")
    assert len(srv.requests) == 1
    text = str(info.value)
    assert str(status) in text and "no-such-model" in text and f"127.0.0.1:{srv.port}" in text
    assert not info.value.retryable


async def test_connection_refused_is_unavailable() -> None:
    async with make_llm(closed_base_url(), max_retries=0) as llm:
        with pytest.raises(LLMUnavailable) as info:
            await llm.complete(MESSAGES)
    assert "could not connect" in str(info.value)


async def test_no_choices_is_an_error() -> None:
    raw = {"id": "x", "object": "chat.completion", "created": 0, "model": "agent-model", "choices": []}
    async with FakeOpenAI([Reply(raw_body=raw)]) as srv:
        async with make_llm(srv) as llm:
            with pytest.raises(LLMError, match="no choices"):
                await llm.complete(MESSAGES)


async def test_falls_back_to_max_completion_tokens() -> None:
    msg = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
    error = {"error": {"message": msg, "type": "invalid_request_error", "param": "max_tokens",
                       "code": "unsupported_parameter"}}

    def responder(body: dict[str, Any]) -> Reply:
        return Reply(status=400, error_body=error) if "max_tokens" in body else Reply(text="fine")

    async with FakeOpenAI(responder) as srv:
        async with make_llm(srv) as llm:
            assert (await llm.complete(MESSAGES, max_tokens=64)).text == "fine"
            assert (await llm.complete(MESSAGES, max_tokens=32)).text == "fine"
    assert [("max_tokens" in r, r.get("max_completion_tokens")) for r in srv.requests] == [
        (True, None), (False, 64), (False, 32)]


@pytest.mark.parametrize("setting", ["temperature", "max_tokens"])
async def test_a_refused_agent_setting_is_dropped_for_that_model_streamed_or_not(
        setting: str, caplog: pytest.LogCaptureFixture) -> None:
    """An agent's temperature (or reply cap) that a model refuses (HTTP 400 naming it): asked again at
    once without it, said once at WARNING, and never sent to that model again; other models still get it."""
    caplog.set_level(logging.WARNING, logger="bot.llm.openai_llm")
    given = {"temperature": 0.4} if setting == "temperature" else {"max_tokens": 300}

    def responder(body: dict[str, Any]) -> Reply:
        return Reply(text=f"{body['model']} fine")

    async with FakeOpenAI(responder, refuses=(setting,)) as srv:
        async with make_llm(srv) as llm:
            assert (await llm.complete(MESSAGES, model="reasoner", **given)).text == "reasoner fine"
            streamed = await llm.stream(MESSAGES, on_text=lambda piece: None, model="reasoner", **given)
            assert streamed.text == "reasoner fine"
            srv.refuses = ()
            await llm.complete(MESSAGES, model="other", **given)
    assert [(r["model"], setting in r) for r in srv.requests] == [
        ("reasoner", True), ("reasoner", False), ("reasoner", False), ("other", True)]
    said = [r.getMessage() for r in caplog.records if f"refuses {setting}" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("model reasoner at 127.0.0.1:") and KEY not in said[0]


async def test_prompt_cache_key_is_sent_and_dropped_where_refused() -> None:
    error = {"error": {"message": "Unrecognized request argument supplied: prompt_cache_key",
                       "type": "invalid_request_error"}}
    refuse = {"strict-model"}

    def responder(body: dict[str, Any]) -> Reply:
        if body["model"] in refuse and "prompt_cache_key" in body:
            return Reply(status=400, error_body=error)
        return Reply(text="fine")

    async with FakeOpenAI(responder) as srv:
        async with make_llm(srv) as llm:
            assert (await llm.complete(MESSAGES, cache_key="roundtable-1-2")).text == "fine"
            assert (await llm.complete(MESSAGES, model="strict-model", cache_key="roundtable-1-2")).text == "fine"
            assert (await llm.complete(MESSAGES, model="strict-model", cache_key="roundtable-1-2")).text == "fine"
            assert (await llm.complete(MESSAGES)).text == "fine"
    assert [(r["model"], r.get("prompt_cache_key")) for r in srv.requests] == [
        ("agent-model", "roundtable-1-2"), ("strict-model", "roundtable-1-2"), ("strict-model", None),
        ("strict-model", None), ("agent-model", None)]


async def test_api_key_never_leaks(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}. Bearer {KEY}", "type": "invalid_request_error"}}
    faults = [Reply(status=401, error_body=echo), Reply(status=404, error_body=echo),
              Reply(status=429, error_body=echo), Reply(status=500, error_body=echo), Reply(delay=30)]
    errors: list[LLMError] = []
    async with FakeOpenAI(faults) as srv:
        # a short timeout only for the last (the hang): under load a refusal may take over half a second
        async with make_llm(srv, timeout=60, max_retries=0) as llm, make_llm(srv, timeout=0.5, max_retries=0) as short:
            for fault in faults:
                with pytest.raises(LLMError) as info:
                    await (short if fault.delay else llm).complete(MESSAGES)
                errors.append(info.value)
    assert [type(e) for e in errors] == [LLMRejected, LLMRejected, LLMRateLimited, LLMUnavailable, LLMTimeout]
    assert "Incorrect API key provided: ***" in str(errors[0])
    for err in errors:
        assert err.__cause__ is None and len(str(err)) < 300
        shown = str(err) + repr(err) + "".join(traceback.format_exception(err))
        assert KEY not in shown and KEY[-8:] not in shown
    assert caplog.records and KEY not in caplog.text and KEY[-8:] not in caplog.text


async def test_a_server_that_trickles_bytes_is_cut_at_the_deadline() -> None:
    # The SDK's timeout restarts with every byte: one space every 0.1 s would hold the call an hour.
    async with FakeOpenAI([Reply("late", delay=3600, trickle=0.1), Reply("on time")]) as srv:
        async with make_llm(srv, timeout=0.3, max_retries=1) as llm:
            with pytest.raises(LLMTimeout, match=r"did not finish within 1.6s") as info:
                await asyncio.wait_for(llm.complete(MESSAGES), 60)  # an hour without the deadline
            assert info.value.public == "the model did not answer in time"
            assert (await llm.complete(MESSAGES)).text == "on time"


def test_constructor_checks_arguments() -> None:
    with pytest.raises(ValueError, match="api_key"):
        OpenAILLM(api_key="", base_url=None, default_model="m")
    with pytest.raises(ValueError, match="timeout"):
        OpenAILLM(api_key=KEY, base_url=None, default_model="m", timeout=0)


async def test_error_names_host_but_not_url_credentials() -> None:
    async with FakeOpenAI(lambda body: Reply(status=404)) as srv:
        url = srv.base_url.replace("http://", f"http://user:{KEY}@") + f"?api-key={KEY}"
        async with make_llm(url) as llm:
            with pytest.raises(LLMRejected) as info:
                await llm.complete(MESSAGES)
    assert f"127.0.0.1:{srv.port}" in str(info.value) and KEY not in str(info.value)


# the start-up check --------------------------------------------------------------

async def test_check_passes_on_a_server_that_lists_models() -> None:
    async with StrictOpenAI(key=KEY) as srv:
        async with make_llm(srv) as llm:
            await llm.check()
    assert srv.model_list_calls == 1 and srv.requests == []  # no tokens spent


async def test_check_names_an_unreachable_base_url() -> None:
    url = closed_base_url()
    async with make_llm(url, max_retries=0) as llm:
        with pytest.raises(ConfigError) as info:
            await llm.check()
    assert str(info.value) == f"OPENAI_BASE_URL={url} did not answer (connection refused); check that the server runs"
    assert info.value.__cause__ is None and info.value.__suppress_context__


async def test_check_without_a_base_url_names_the_default() -> None:
    llm = make_llm(closed_base_url(), max_retries=0)
    async with OpenAILLM(api_key=KEY, base_url=None, default_model="m") as default:
        default._client = llm._client  # the default's name, but a local closed port: no internet
        with pytest.raises(ConfigError) as info:
            await default.check()
    assert str(info.value).startswith(
        "https://api.openai.com/v1 (OPENAI_BASE_URL is not set) did not answer (connection refused)")


async def test_check_times_out_as_not_answering() -> None:
    async with StrictOpenAI(models_delay=30) as srv:
        async with make_llm(srv, timeout=0.5, max_retries=0) as llm:
            with pytest.raises(ConfigError) as info:
                await llm.check()
    assert str(info.value) == (f"OPENAI_BASE_URL={srv.base_url} did not answer (timed out after 0.5s); "
                               "check that the server runs")


async def test_check_names_a_refused_key_without_showing_it() -> None:
    async with StrictOpenAI(key="sk-the-right-one") as srv:
        url = srv.base_url.replace("http://", f"http://user:{KEY}@")
        async with make_llm(url) as llm:
            with pytest.raises(ConfigError) as info:
                await llm.check()
    text = str(info.value)
    assert text == (f"OPENAI_API_KEY was refused by 127.0.0.1:{srv.port}: HTTP 401: Incorrect API key provided: ***. "
                    "You can find your API key at https://platform.openai.com/account/api-keys.; set the right key")
    assert KEY not in text and KEY[-8:] not in text and "\n" not in text
    assert srv.model_list_calls == 1 and srv.requests == []  # a 401 is not retried, no completion tried


async def test_check_asks_a_completion_when_models_are_forbidden() -> None:
    """A key limited to chat may not list models (403): one 1-token completion decides."""
    async with StrictOpenAI(["pong"], models_status=403) as srv:
        async with make_llm(srv) as llm:
            await llm.check()
    assert [(r["model"], r.get("max_tokens")) for r in srv.requests] == [("agent-model", 1)]

    async with StrictOpenAI([Reply(status=403)], models_status=403) as srv:
        async with make_llm(srv) as llm:
            with pytest.raises(ConfigError, match=rf"^OPENAI_API_KEY was refused by 127.0.0.1:{srv.port}: HTTP 403"):
                await llm.check()


@pytest.mark.parametrize("status", [404, 405, 500, 503])
async def test_check_only_warns_on_other_answers(status: int, caplog: pytest.LogCaptureFixture) -> None:
    async with StrictOpenAI(models_status=status) as srv:
        async with make_llm(srv, max_retries=0) as llm:
            await llm.check()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"start-up check: GET /models at 127.0.0.1:{srv.port} failed (HTTP {status}); starting anyway"]
    assert srv.requests == []


async def test_one_image_the_provider_cannot_read_is_left_out_of_that_call_only(caplog) -> None:
    """A provider that refuses one image it cannot decode (OpenAI's 400 'Invalid image', a PNG
    cut short): the call is repeated without its images, and the model still gets images after
    it. (The refusal names an image, so the model was taken as one that takes none, for good.)"""
    caplog.set_level(logging.INFO, logger="bot.llm.openai_llm")
    broken, good = "data:image/png;base64,iVBORw0KGgoAAAA=", "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="

    def provider(body: dict[str, Any]) -> Reply:
        if broken in str(body["messages"]):
            return Reply(status=400, error_body={"error": {
                "message": "You uploaded an unsupported image. Please make sure your image is valid.",
                "type": "invalid_request_error", "param": None, "code": "invalid_image_format"}})
        return Reply(text="Seen.")

    def looking_at(url: str) -> list[ChatMessage]:
        return [ChatMessage("user", "Look: [image: a.png]", parts=("Look: [image: a.png]",
                                                                   ImagePart(url, " (not shown)", 85)))]

    async with FakeOpenAI(provider) as srv:
        async with make_llm(srv, max_retries=0) as llm:
            first = await llm.complete(looking_at(broken))
            second = await llm.complete(looking_at(good))
            assert llm.takes_images("agent-model")
    assert first.text == second.text == "Seen."
    carried = [good in str(r["messages"]) or broken in str(r["messages"]) for r in srv.requests]
    assert carried == [True, False, True]
    assert not [r for r in caplog.records if "does not take images" in r.getMessage()]
