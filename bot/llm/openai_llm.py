"""The `LLM` port over the official `openai` client (any OpenAI-compatible server).

What this file owns:

- one `openai.AsyncOpenAI` with our timeout (seconds per connect/read/write,
  default 60 rather than the SDK's 600) and the SDK's own retries. The SDK's timeout
  restarts with every byte received, so a server that trickles bytes would hold a call
  for ever: each request (its retries included) also has a deadline of
  timeout x (retries + 1) + 1 s, after which it is an `LLMTimeout` like any other
  (`max_retries`, default 2). The SDK retries 408/409/429/5xx, timeouts and
  connection errors with exponential backoff (0.5 s doubling, capped at 8 s,
  up to 25 % jitter) and honours a server's `retry-after-ms` / `Retry-After`
  (seconds or HTTP date) when it is in (0, 120] s; a longer Retry-After is not
  retried at all. We add no retry loop of our own on top.
- translating every failure into the `LLMError` tree at this boundary
  (`bot.llm.openai_errors.ErrorTranslator`), with a short message for the log (what happened,
  HTTP status, model, server host) that never holds a secret: the server's own error text is
  masked (`bot.core.rules.secrets.mask_error`: every secret the process registered, the API
  key among them, and anything shaped like a key or token) and trimmed, and the
  SDK exception is not chained (`from None`), so a logged traceback cannot carry
  it either. What the server answers (reply text, tool call arguments) is masked
  too (`bot.llm.openai_answers.AnswerReader`), so a server echoing a secret cannot have it posted or stored.
  People see only `LLMError.public` (the kind
  of failure and the HTTP status, and for a refused request other than 401/403 the server's reason, masked,
  without URLs, at most 100 characters: "model not found, try pulling it"), never the host.
- `usage` -> `Usage` (`AnswerReader`), estimating with the injected `TokenCounter` when the
  server sends none; the sum of token log-probabilities when asked for.
- what each model refused, remembered (`RefusedSettings`: images, `max_tokens`, `prompt_cache_key`,
  `stream_options`, an agent's settings; below).

`check()` is the start-up check: GET {base}/models (no tokens spent, served
by OpenAI, llama.cpp, Ollama, vLLM, LM Studio, LiteLLM, ...) tells that the
server answers and takes the key. A refused connection or a 401 stops start-up
(`ConfigError`, one line naming OPENAI_BASE_URL or OPENAI_API_KEY); a 403 may
only mean a restricted key may not list models, so one 1-token completion
decides; anything else (404: no /models, 5xx, 429) is a warning and start-up
goes on, the model calls will tell. A listed answer is returned: `Providers.check` looks for
the configured models in it.

Tools (`complete(tools=...)`) are sent as OpenAI function tools, and only when
given, so a call without tools has no `tools` key; `tool_calls` in the reply
become `Completion.tool_calls` (its content may then be null). `tools_refusal()`
asks once per model, with one tiny forced tool call, whether the model takes
tools: a definite answer is remembered, a failure to ask is not.

Images (`ChatMessage.parts`) are sent as `image_url` content parts (data URLs). A model
known not to take them (`TEXT_ONLY`: OpenAI's text-only chat models), or one that refused
them once (a 400/415/422/500 naming images, vision or multimodal input while the request
carried images), gets each image's fallback text instead: the refused call is repeated
at once without them, the model remembered and the log says so once per model. A refusal of
one image the model could not read (`_BAD_IMAGE`: "Invalid image", `invalid_image_format`) is
not a refusal of images: that call is repeated without its images, and nothing is remembered.
`model_names()` lists the server's models for autocompletion (cached `MODEL_LIST_TTL`).

`max_tokens` is sent as `max_tokens` (what llama.cpp, Ollama, vLLM, LM Studio
and OpenAI's chat models all accept). OpenAI's reasoning models reject it with
a 400 naming `max_completion_tokens`; then the call is repeated once with that
parameter, and the model is remembered so later calls use it directly.
An agent's `temperature` (and `max_tokens`) is sent when it has one; a model that
refuses it (a 400 naming the parameter, as OpenAI's reasoning models answer a
temperature) is asked again at once without it, the log says so once (WARNING),
and that model is sent it no more: never a failed turn.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import re
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai

from bot.core.errors import ConfigError, LLMError
from bot.core.models import DEFAULT_PROVIDER, ChatMessage, Completion, Tool, Usage
from bot.core.ports import TokenCounter
from bot.core.rules.secrets import SECRETS, mask_error, redact_url
from bot.llm.openai_answers import AnswerReader, CallerFailed, StreamBroken
from bot.llm.openai_errors import ErrorTranslator, Overdue, connection_problem
from bot.llm.tokens import make_token_counter

log = logging.getLogger(__name__)

_OPENAI_API = "https://api.openai.com/v1"  # the SDK's default base URL
# OpenAI's chat models that take no images (others are tried, and remembered when they refuse).
TEXT_ONLY = re.compile(r"^(gpt-3\.5|gpt-4(-0314|-0613|-32k.*)?$|o1-mini|o1-preview|o3-mini|gpt-oss|text-|davinci)",
                       re.IGNORECASE)
_IMAGEISH = re.compile(r"(?i)image|vision|multimodal|multi-modal")
# A refusal of one image the model could not read (not of images): OpenAI's invalid_image_format and
# image_parse_error, "Invalid image", "unsupported image", "could not process image".
_BAD_IMAGE = re.compile(r"(?i)invalid[_ ]image|image_parse_error|unsupported image|could not (?:process|decode|parse) "
                        r"(?:the )?image")
MODEL_LIST_TTL = 600.0  # seconds a provider's list of models is kept
MODEL_LIST_TIMEOUT = 3.0  # seconds to list them (autocomplete answers within Discord's 3 s)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context every model client of this process shares, as httpx2 builds it by default (the
    system's certificates, SSL_CERT_FILE / SSL_CERT_DIR): a client built its own, reading the certificates
    again, some 17 ms of CPU each (issue 32: the tests build hundreds)."""
    return httpx2.create_ssl_context()


class OpenAILLM:
    """Implements `bot.core.ports.LLM`."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        default_model: str,
        timeout: float = 60.0,
        max_retries: int = 2,
        counter: TokenCounter | None = None,
        provider: str = DEFAULT_PROVIDER,
    ) -> None:
        """`provider`: the name of the provider this client serves (`bot.llm.providers`); its
        settings are named in start-up problems (OPENAI_* for the default one)."""
        if not api_key:
            raise ValueError("api_key is required (any non-empty string for servers that ignore it)")
        if not default_model:
            raise ValueError("default_model is required")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        self.default_model = default_model
        self.timeout = float(timeout)
        self.max_retries = max_retries
        # A whole request, retries and their waits included (a second more, so that a plain hang
        # is still the SDK's own timeout).
        self.deadline = self.timeout * (max_retries + 1) + 1.0
        SECRETS.register(api_key)
        # base_url=None: the SDK reads OPENAI_BASE_URL, else uses api.openai.com.
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=self.timeout, max_retries=max_retries,
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),  # the SDK's defaults, one TLS context
        )
        self.host = _host(str(self._client.base_url))
        self.provider = provider
        self._errors = ErrorTranslator(self.host, self.timeout)
        self._answers = AnswerReader(counter if counter is not None else make_token_counter(), self.host)
        self._refused = RefusedSettings(self.host, self._errors.detail)
        if provider == DEFAULT_PROVIDER:
            url_setting, self.key_setting = "OPENAI_BASE_URL", "OPENAI_API_KEY"
        else:
            prefix = f"ROUNDTABLE_PROVIDER_{provider.upper()}"
            url_setting, self.key_setting = f"{prefix}_BASE_URL", f"{prefix}_API_KEY"
        # How start-up problems name the server: the setting when there is one (never its credentials).
        url = redact_url(str(self._client.base_url).rstrip("/"))
        self._server = f"{url} ({url_setting} is not set)" if url == _OPENAI_API else f"{url_setting}={url}"
        self._models: list[str] | None = None
        self._models_at = 0.0
        self._models_lock = asyncio.Lock()
        self._unstreamed_models: set[str] = set()  # models whose server does not stream: asked whole
        self._broken_streams: set[str] = set()  # models whose stream broke off once (said once in the log)
        self._tools_answers: dict[str, str | None] = {}  # model -> tools_refusal's definite answer

    async def aclose(self) -> None:
        await self._client.close()

    async def check(self) -> list[str] | None:
        """Start-up: the server answers and accepts the key. Raises `ConfigError` (one line) when it does not.
        Returns the models it lists (None: it gave no list; the caller checks its models against them).

        GET /models, with the client's timeout and retries. 401 is a refused key; 403
        is asked again with a 1-token completion of the default model (a key limited
        to chat may not list models). Other answers log a warning and return."""
        try:
            listed = [model.id async for model in self._client.models.list()]
        except openai.PermissionDeniedError:
            await self._check_by_completion()
        except openai.OpenAIError as exc:
            self._check_failed(exc, "GET /models")
        else:
            log.info("model server %s answered and accepted the key", self.host)
            return listed
        return None

    async def model_ids(self) -> list[str]:
        """GET /models: the ids the server lists (`roundtable doctor`, `roundtable init`). An
        unreachable server or a refused key (401) raises `ConfigError` as `check` does; any other
        failure (a 403 for a key that may not list models, a server without /models) `LLMError`."""
        try:
            return [model.id async for model in self._client.models.list()]
        except openai.OpenAIError as exc:
            if isinstance(exc, (openai.APIConnectionError, openai.AuthenticationError)):
                self._check_failed(exc, "GET /models")  # raises ConfigError
            raise self._errors.translate(exc, self.default_model) from None

    async def _check_by_completion(self) -> None:
        try:
            await self._create([ChatMessage("user", "ping")], self.default_model, 1, False)
        except openai.OpenAIError as exc:
            self._check_failed(exc, f"a 1-token call of model {self.default_model}")
        else:
            log.info("model server %s accepted the key (it may not list models)", self.host)

    def _check_failed(self, exc: openai.OpenAIError, what: str) -> None:
        """Raise `ConfigError` for an unreachable server or a refused key; log anything else."""
        if isinstance(exc, openai.APITimeoutError):
            raise ConfigError(f"{self._server} did not answer (timed out after {self.timeout:g}s); "
                              "check that the server runs") from None
        if isinstance(exc, openai.APIConnectionError):
            raise ConfigError(f"{self._server} did not answer ({connection_problem(exc)}); "
                              "check that the server runs") from None
        if isinstance(exc, openai.APIStatusError) and exc.status_code in (401, 403):
            raise ConfigError(f"{self.key_setting} was refused by {self.host}: HTTP {exc.status_code}"
                              f"{self._errors.detail(exc)}; set the right key") from None
        status = f"HTTP {exc.status_code}" if isinstance(exc, openai.APIStatusError) else type(exc).__name__
        log.warning("start-up check: %s at %s failed (%s); starting anyway", what, self.host, status)

    async def __aenter__(self) -> OpenAILLM:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        logprobs: bool = False,
        cache_key: str | None = None,
        tools: Sequence[Tool] | None = None,
        temperature: float | None = None,
    ) -> Completion:
        """One chat completion. Raises `LLMError` subclasses; never other errors."""
        name = model or self.default_model
        if not self.takes_images(name):
            messages = [m.without_images() for m in messages]
        started = time.monotonic()
        try:
            response = await self._create(messages, name, max_tokens, logprobs, cache_key,
                                          tools=[_tool_json(t) for t in tools or ()], temperature=temperature)
        except openai.OpenAIError as exc:
            err = self._errors.translate(exc, name)
        except Exception as exc:  # the port promises LLMError only; keep the type, drop the text
            log.warning("unexpected %s from the openai client (model %s)", type(exc).__name__, name)
            err = LLMError(f"unexpected {type(exc).__name__} calling model {name} at {self.host}")
        else:
            try:
                completion = self._answers.completion(response, messages, name)
            except (TypeError, ValueError, AttributeError) as exc:
                raise LLMError(f"malformed response from model {name} at {self.host}: "
                               f"{type(exc).__name__}") from None
            log.debug(
                "llm %s: prompt=%d completion=%d cached=%d%s finish=%s in %.2fs",
                completion.model, completion.usage.prompt_tokens, completion.usage.completion_tokens,
                completion.usage.cached_tokens, " (estimated)" if completion.usage.estimated else "",
                completion.finish_reason, time.monotonic() - started,
            )
            return completion
        log.debug("llm %s failed after %.2fs: %s", name, time.monotonic() - started, err)
        raise err

    async def _send(self, body: dict[str, Any]) -> Any:
        """POST /chat/completions with `body` as built. Its messages and tools go in `extra_body`, which
        the SDK sends as they are: given as parameters, the SDK would first walk every message against
        its type hints (a few ms a request, growing with the messages; between a tool's result and the
        next model call it was most of the product's time: the tools bench, docs/benchmarks.md)."""
        heavy = {key: body[key] for key in ("messages", "tools") if key in body}
        params = {key: value for key, value in body.items() if key not in heavy}
        return await self._client.chat.completions.create(**params, messages=[], extra_body=heavy)

    async def _create(
        self, messages: Sequence[ChatMessage], model: str, max_tokens: int | None, logprobs: bool,
        cache_key: str | None = None, *, tools: list[dict[str, Any]] | None = None,
        tool_choice: dict[str, Any] | None = None, stream: bool = False, temperature: float | None = None,
    ) -> Any:
        """One request; a 400 naming `max_completion_tokens`, `prompt_cache_key` or (`stream`)
        `stream_options` is repeated adapted (each at most once), and so is a refusal of images
        (without them); so is a 400 naming `temperature` or `max_tokens` (an agent's settings: sent
        no more to that model, said once at WARNING). The model is remembered so later calls are
        sent right. With `stream`, the SDK's stream, its response begun."""
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [_message_json(m) for m in messages],
        }
        images = any(m.images for m in messages)
        if logprobs:
            kwargs["logprobs"] = True
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        if stream:
            kwargs["stream"] = True
        while True:
            attempt = self._refused.applied(kwargs, model, cache_key, max_tokens, temperature, stream)
            try:
                async with asyncio.timeout(self.deadline):
                    return await self._send(attempt)
            except TimeoutError:
                raise Overdue(self.deadline, self._client.base_url) from None
            except openai.APIStatusError as exc:
                if images and self._refused.refused_images(model, exc):
                    images = False
                    kwargs["messages"] = [_message_json(m.without_images()) for m in messages]
                elif not self._refused.adapted_to(model, attempt, exc):
                    raise

    def takes_images(self, model: str | None) -> bool:
        """False for OpenAI's text-only models and for a model that refused images before."""
        return self._refused.takes_images(model or self.default_model)

    async def model_names(self) -> dict[str, list[str] | None]:
        """This provider's models (`list_models`), as the `LLM` port gives them."""
        return {self.provider: await self.list_models()}

    async def list_models(self) -> list[str] | None:
        """The server's models (GET /models), kept `MODEL_LIST_TTL` seconds; None when it cannot list them."""
        async with self._models_lock:
            if self._models is not None and time.monotonic() - self._models_at < MODEL_LIST_TTL:
                return self._models
            try:
                quick = self._client.with_options(timeout=MODEL_LIST_TIMEOUT, max_retries=0)
                async with asyncio.timeout(MODEL_LIST_TIMEOUT + 1):
                    page = await quick.models.list()
                self._models = sorted({str(m.id) for m in page.data if getattr(m, "id", None)})
            except (openai.OpenAIError, TimeoutError, AttributeError, TypeError) as exc:
                log.info("could not list the models at %s (%s)", self.host, type(exc).__name__)
                if self._models is None:
                    return None
            self._models_at = time.monotonic()
            return self._models

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        on_text: Callable[[str], None],
        model: str | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
        tools: Sequence[Tool] | None = None,
        temperature: float | None = None,
    ) -> Completion:
        """One chat completion, streamed (`bot.core.ports.LLM.stream`): `on_text(piece)` for each
        piece of text as it arrives; with `tools`, the tool calls' pieces (`delta.tool_calls`, by
        index: the id and name first, the arguments in pieces) assembled into `tool_calls`; usage
        from the stream's last chunk (`stream_options`), else estimated. A server that refuses to
        stream (HTTP 400/404/405/415/422/501) or answers the whole completion at once is remembered
        and asked plainly from then on; a stream that breaks off (the connection drops, an error
        event, no finish reason) is asked again plainly. Either is said in the log once per model.
        Raises `LLMError` subclasses (and what `on_text` raises)."""
        name = model or self.default_model
        if name in self._unstreamed_models:
            return await self.complete(messages, model=name, max_tokens=max_tokens, cache_key=cache_key, tools=tools,
                                       temperature=temperature)
        if not self.takes_images(name):
            messages = [m.without_images() for m in messages]
        started = time.monotonic()
        try:
            completion = await self._streamed(messages, name, max_tokens, cache_key, on_text,
                                              [_tool_json(t) for t in tools or ()], temperature)
        except CallerFailed as wrapped:
            raise wrapped.error from None
        except openai.APIStatusError as exc:
            if exc.status_code not in _NOT_STREAMING:
                raise self._errors.translate(exc, name) from None
            completion = await self.complete(messages, model=name, max_tokens=max_tokens, cache_key=cache_key,
                                             tools=tools, temperature=temperature)
            self._unstreamed_models.add(name)  # the plain request worked: the refusal was about streaming
            log.warning("model %s at %s does not stream (HTTP %d to a streamed request); its replies are posted "
                        "whole", name, self.host, exc.status_code)
            return completion
        except StreamBroken as exc:
            level = logging.DEBUG if name in self._broken_streams else logging.WARNING
            self._broken_streams.add(name)
            log.log(level, "model %s at %s broke its stream off (%s); asked again without streaming, the reply is "
                           "posted whole", name, self.host, exc)
            return await self.complete(messages, model=name, max_tokens=max_tokens, cache_key=cache_key, tools=tools,
                                       temperature=temperature)
        except openai.OpenAIError as exc:
            err = self._errors.translate(exc, name)
            log.debug("llm %s stream failed after %.2fs: %s", name, time.monotonic() - started, err)
            raise err from None
        log.debug("llm %s streamed: prompt=%d completion=%d cached=%d%s finish=%s in %.2fs", completion.model,
                  completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.cached_tokens,
                  " (estimated)" if completion.usage.estimated else "", completion.finish_reason,
                  time.monotonic() - started)
        return completion

    async def _streamed(self, messages: Sequence[ChatMessage], model: str, max_tokens: int | None,
                        cache_key: str | None, on_text: Callable[[str], None],
                        tools: list[dict[str, Any]], temperature: float | None = None) -> Completion:
        """The streamed request and its chunks (`stream`'s body); the whole of it within the deadline."""
        try:
            async with asyncio.timeout(self.deadline):
                response = await self._create(messages, model, max_tokens, False, cache_key, stream=True,
                                              tools=tools, temperature=temperature)
                async with response:
                    if "text/event-stream" in response.response.headers.get("content-type", ""):
                        return await self._answers.chunks(response, messages, model, on_text)
                    completion = self._answers.whole(await response.response.aread(), messages, model)
        except TimeoutError:
            raise Overdue(self.deadline, self._client.base_url) from None
        # A server that ignored `stream` and sent the whole completion: taken as it is, remembered.
        self._unstreamed_models.add(model)
        log.warning("model %s at %s does not stream (it answered a streamed request whole); its replies are posted "
                    "whole", model, self.host)
        return completion

    async def tools_refusal(self, model: str | None, *, spent: list[Completion] | None = None) -> str | None:
        """None when `model` takes tool calls, else why not (or that it could not be checked).

        One tiny request: a probe tool, a `tool_choice` forcing it, a few tokens. A reply
        carrying the call says yes; a reply without one, or a 400/404/422 that names tools or
        functions, says no; both are remembered for the model. Any other failure is not. A reply's
        model and tokens are appended to `spent` (a call is a call, whatever it was for)."""
        name = model or self.default_model
        if name in self._tools_answers:
            return self._tools_answers[name]
        probe = Tool(_PROBE, "Answer the probe.",
                     {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
        ask = [ChatMessage("user", f"Call {_PROBE} with ok set to true.")]
        used, answered_by = Usage(), name  # a call that failed is counted too, without tokens
        try:
            response = await self._create(
                ask, name, 16, False,
                tools=[_tool_json(probe)], tool_choice={"type": "function", "function": {"name": _PROBE}})
            used = self._answers.usage(getattr(response, "usage", None), ask, "")
            answered_by = getattr(response, "model", None) or name
            calls = getattr(getattr(response.choices[0], "message", None), "tool_calls", None)
        except openai.APIStatusError as exc:
            detail = self._errors.detail(exc)
            if exc.status_code in (400, 404, 422) and _TOOLISH.search(detail):
                answer: str | None = (f"model {name} does not take tool calls (the endpoint said: "
                                      f"{detail.removeprefix(': ')}); memory needs them")
            else:
                return self._unchecked(exc, name)
        except openai.OpenAIError as exc:
            return self._unchecked(exc, name)
        except (AttributeError, IndexError, TypeError):
            answer = f"model {name} sent a reply that cannot carry tool calls; memory needs them"
        else:
            answer = None if calls else (f"model {name} answered without the tool call it was asked for, "
                                         "so it does not take tool calls; memory needs them")
        finally:
            if spent is not None:
                spent.append(Completion("", used, answered_by))
        self._tools_answers[name] = answer
        log.info("model %s %s tool calls", name, "takes" if answer is None else "does not take")
        return answer

    def _unchecked(self, exc: openai.OpenAIError, model: str) -> str:
        err = self._errors.translate(exc, model)
        log.warning("could not check whether model %s takes tool calls: %s", model, err)
        return f"could not check whether model {model} takes tool calls ({err.public}); try again later"

    @staticmethod
    def redact(text: str) -> str:
        """`text` without any registered secret (the API key among them) or anything shaped like one."""
        return mask_error(text)


class RefusedSettings:
    """What each model refused, remembered so later calls are sent right (`OpenAILLM._create`): its
    images (each image's fallback text sent instead), `max_tokens` (sent as `max_completion_tokens`),
    `prompt_cache_key`, `stream_options` and an agent's `temperature` or `max_tokens` (sent no more).
    Each is said in the log when it is learnt. `host` names the server in the log; `detail` is the
    server's own error text (`ErrorTranslator.detail`)."""

    def __init__(self, host: str, detail: Callable[[openai.APIStatusError], str]) -> None:
        self.host = host
        self._detail = detail
        self._no_image_models: set[str] = set()
        self._completion_tokens_models: set[str] = set()
        self._dropped_settings: dict[str, set[str]] = {}  # model -> agent settings it refused (sent no more)
        self._no_cache_key_models: set[str] = set()
        self._no_stream_options_models: set[str] = set()

    def takes_images(self, model: str) -> bool:
        """False for OpenAI's text-only models and for a model that refused images before."""
        return model not in self._no_image_models and not TEXT_ONLY.match(model)

    def applied(self, kwargs: dict[str, Any], model: str, cache_key: str | None, max_tokens: int | None,
                temperature: float | None, stream: bool) -> dict[str, Any]:
        """`kwargs` with the settings this model is sent (what it refused before left out or renamed)."""
        attempt = dict(kwargs)
        if cache_key and model not in self._no_cache_key_models:
            attempt["prompt_cache_key"] = cache_key
        dropped = self._dropped_settings.get(model, set())
        if max_tokens is not None and "max_tokens" not in dropped:
            limit = "max_completion_tokens" if model in self._completion_tokens_models else "max_tokens"
            attempt[limit] = max_tokens
        if temperature is not None and "temperature" not in dropped:
            attempt["temperature"] = temperature
        if stream and model not in self._no_stream_options_models:
            attempt["stream_options"] = {"include_usage": True}
        return attempt

    def refused_images(self, model: str, exc: openai.APIStatusError) -> bool:
        """Whether `exc` refuses a request's images: this one's (it could not read one), or any (the
        model takes none: remembered). Said at WARNING; the caller asks again without them."""
        if exc.status_code in (400, 422) and _BAD_IMAGE.search(self._detail(exc)):
            log.warning("model %s at %s could not read an image (HTTP %s%s); asked again without the "
                        "images", model, self.host, exc.status_code, self._detail(exc))
            return True  # that call only: the model takes images
        if exc.status_code in (400, 415, 422, 500) and _IMAGEISH.search(self._detail(exc)):
            log.warning("model %s at %s does not take images (HTTP %s%s); its prompts name the images "
                        "instead from now on", model, self.host, exc.status_code, self._detail(exc))
            self._no_image_models.add(model)
            return True
        return False

    def adapted_to(self, model: str, attempt: dict[str, Any], exc: openai.APIStatusError) -> bool:
        """Whether `exc` is a 400 naming a parameter of `attempt` that the model is now sent otherwise
        (or not at all), remembered for later calls; False: the error stands."""
        if not isinstance(exc, openai.BadRequestError):
            return False
        if "prompt_cache_key" in attempt and _names(exc, "prompt_cache_key"):
            log.info("model %s rejects prompt_cache_key; sending none from now on", model)
            self._no_cache_key_models.add(model)
        elif "max_tokens" in attempt and _names(exc, "max_completion_tokens"):
            log.info("model %s rejects max_tokens; using max_completion_tokens from now on", model)
            self._completion_tokens_models.add(model)
        elif (refused := next((p for p in _SETTINGS if p in attempt and _names(exc, p)), None)) is not None:
            self._drop_setting(model, "max_tokens" if refused == "max_completion_tokens" else refused, exc)
        elif "stream_options" in attempt and _names(exc, "stream_options"):
            log.info("model %s rejects stream_options; its usage is estimated from now on", model)
            self._no_stream_options_models.add(model)
        else:
            return False
        return True

    def _drop_setting(self, model: str, setting: str, exc: openai.APIStatusError) -> None:
        """A model refused an agent's setting (`temperature`, `max_tokens`): sent no more to it, said once."""
        self._dropped_settings.setdefault(model, set()).add(setting)
        log.warning("model %s at %s refuses %s (HTTP %s%s); it is sent without %s from now on", model, self.host,
                    setting, exc.status_code, self._detail(exc), setting)


# Answers to a streamed request that may mean "this server does not stream" (asked again plainly).
_NOT_STREAMING = frozenset({400, 404, 405, 415, 422, 501})


def _host(url: str) -> str:
    """host[:port] only: never userinfo or query (either could hold a credential)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "?"
    return f"{host}:{port}" if port else host


def _names(exc: openai.BadRequestError, parameter: str) -> bool:
    """A 400 about `parameter`: OpenAI's for reasoning models ("... Use 'max_completion_tokens'
    instead."), or a server's refusal of a field it does not know (`prompt_cache_key`)."""
    return parameter in str(exc.body if exc.body is not None else exc)


# An agent's settings a model may refuse (a reasoning model's temperature): dropped for it, not fatal.
_SETTINGS = ("temperature", "max_tokens", "max_completion_tokens")
_PROBE = "roundtable_probe"
_TOOLISH = re.compile(r"(?i)tool|function")


def _tool_json(tool: Tool) -> dict[str, Any]:
    return {"type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}}


def _message_json(message: ChatMessage) -> dict[str, Any]:
    """A message in the wire format: assistant tool calls, tool results and image parts as OpenAI spells them."""
    if message.images:
        return {"role": message.role, "content": [
            {"type": "text", "text": p} if isinstance(p, str) else {"type": "image_url", "image_url": {"url": p.url}}
            for p in message.parts]}
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.tool_calls:
        return {"role": message.role, "content": message.content or None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls]}
    return {"role": message.role, "content": message.content}
