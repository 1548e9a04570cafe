"""Several OpenAI-compatible providers behind the one `LLM` port: a router over one client each.

The default provider is `OPENAI_BASE_URL` / `OPENAI_API_KEY` (named `default`). Provider NAME
is defined by `ROUNDTABLE_PROVIDER_<NAME>_BASE_URL` (and `..._API_KEY`); a model written
`name/model` runs as `model` on provider `name` when one of that name (case-insensitive) is
defined, otherwise the whole string is the default provider's model name (`openai/gpt-4o`
through a gateway keeps working). Such a model is refused at call time, before any request,
when the default provider's model list (GET /models, kept a while) lacks it: `local/llama3`
after a restart without `ROUNDTABLE_PROVIDER_LOCAL_*` must not go to the default, perhaps
hosted, service (`ProviderMissing`, whose notice names the missing settings; the run says it
once per group and model). A default provider that lists no models lets it through.
`None` means the default agent model (ROUNDTABLE_MODEL,
which may name a provider too).

Every call goes to the provider's own `OpenAILLM` (its timeout, retries, remembered quirks:
`prompt_cache_key`, `max_completion_tokens`, tool calls, images are all per provider and
model); the answer's `Completion.provider` says which one answered. Errors of a named
provider say its name to people ("the model service of provider local could not be reached").
A provider that cannot be reached is in an outage until it answers again: each of its
failures meanwhile carries the same `LLMError.outage`, so people are told of it once.

`check()` asks each provider once, together. When every provider fails, start-up stops with
their lines; when some answer, each one that does not is one logged line naming it, and the
agents on it get the usual notice when they are called (their call fails and says why).
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence

from bot.core.errors import ConfigError, LLMError, LLMUnavailable, ProviderMissing
from bot.core.models import DEFAULT_PROVIDER, ChatMessage, Completion, Tool
from bot.llm.openai_llm import OpenAILLM

log = logging.getLogger(__name__)


def route(model: str, named: Sequence[str]) -> tuple[str, str]:
    """(provider, model as that provider names it) for an agent's model string."""
    prefix, slash, rest = model.partition("/")
    if slash and rest and prefix.lower() in named:
        return prefix.lower(), rest
    return DEFAULT_PROVIDER, model


def is_served(model: str, listed: Sequence[str]) -> bool:
    """`model` is in the server's list; `llama3` is also served as Ollama's `llama3:latest`."""
    return model in listed or (":" not in model and f"{model}:latest" in listed)


class Providers:
    """Implements `bot.core.ports.LLM` over one `OpenAILLM` per provider."""

    def __init__(self, clients: Mapping[str, OpenAILLM], *, default_model: str) -> None:
        if DEFAULT_PROVIDER not in clients:
            raise ValueError("the default provider's client is required")
        self.clients = dict(clients)
        self.default_model = default_model
        self.named = tuple(name for name in self.clients if name != DEFAULT_PROVIDER)
        self._down: dict[str, str] = {}  # provider -> its outage, while it cannot be reached
        self._outages = itertools.count(1)

    def resolve(self, model: str | None) -> tuple[str, OpenAILLM, str]:
        """The provider of `model` (None: the default agent model), its client, and the model's name there."""
        provider, name = route(model or self.default_model, self.named)
        return provider, self.clients[provider], name

    async def routed(self, model: str | None) -> tuple[str, OpenAILLM, str]:
        """`resolve`, refusing (`ProviderMissing`) a `name/` prefix that is no provider when the
        default provider's model list lacks the whole string (see the module docstring)."""
        provider, client, name = self.resolve(model)
        prefix, slash, rest = name.partition("/")
        if provider == DEFAULT_PROVIDER and slash and prefix and rest:
            listed = await client.list_models()
            if listed is not None and name not in listed:
                raise ProviderMissing(name, prefix.lower())
        return provider, client, name

    async def complete(self, messages: Sequence[ChatMessage], *, model: str | None = None,
                       max_tokens: int | None = None, logprobs: bool = False, cache_key: str | None = None,
                       tools: Sequence[Tool] | None = None, temperature: float | None = None) -> Completion:
        provider, client, name = await self.routed(model)
        try:
            completion = await client.complete(messages, model=name, max_tokens=max_tokens, logprobs=logprobs,
                                               cache_key=cache_key, tools=tools, temperature=temperature)
        except LLMError as exc:
            raise self._outage(self._named(exc, provider), provider) from None
        self._down.pop(provider, None)
        return dataclasses.replace(completion, provider=provider)

    async def stream(self, messages: Sequence[ChatMessage], *, on_text: Callable[[str], None],
                     model: str | None = None, max_tokens: int | None = None,
                     cache_key: str | None = None, tools: Sequence[Tool] | None = None,
                     temperature: float | None = None) -> Completion:
        provider, client, name = await self.routed(model)
        try:
            completion = await client.stream(messages, on_text=on_text, model=name, max_tokens=max_tokens,
                                             cache_key=cache_key, tools=tools, temperature=temperature)
        except LLMError as exc:
            raise self._outage(self._named(exc, provider), provider) from None
        self._down.pop(provider, None)
        return dataclasses.replace(completion, provider=provider)

    async def tools_refusal(self, model: str | None, *, spent: list[Completion] | None = None) -> str | None:
        provider, client, name = await self.routed(model)
        asked: list[Completion] = []
        reason = await client.tools_refusal(name, spent=asked)
        if spent is not None:
            spent.extend(dataclasses.replace(call, provider=provider) for call in asked)
        return reason if reason is None or provider == DEFAULT_PROVIDER else f"{reason} (provider {provider})"

    def takes_images(self, model: str | None) -> bool:
        _, client, name = self.resolve(model)
        return client.takes_images(name)

    async def model_names(self) -> dict[str, list[str] | None]:
        names = list(self.clients)
        lists = await asyncio.gather(*(self.clients[n].list_models() for n in names))
        return {n: (None if found is None else [m if n == DEFAULT_PROVIDER else f"{n}/{m}" for m in found])
                for n, found in zip(names, lists)}

    def _outage(self, exc: LLMError, provider: str) -> LLMError:
        """`exc`, marked with the provider's outage when it could not be reached (a new outage
        when it has answered since the last one)."""
        if isinstance(exc, LLMUnavailable):
            exc.outage = self._down.setdefault(provider, f"{provider}#{next(self._outages)}")
        return exc

    @staticmethod
    def _named(exc: LLMError, provider: str) -> LLMError:
        if provider == DEFAULT_PROVIDER:
            return exc
        named = type(exc)(f"provider {provider}: {exc}", public=f"{exc.public} (provider {provider})")
        return named

    async def check(self, models: Mapping[str, str | None] | None = None, *, strict: bool = False) -> None:
        """Ask every provider once, together. Raises `ConfigError` (their lines) when none answers;
        logs one line per provider that does not when others do.

        `models`: setting -> model (`{"ROUNDTABLE_MODEL": "gpt-4o-mini"}`), each checked against
        its provider's model list (a server that lists none is not judged). One the list lacks
        is one line naming what the server serves: a `ConfigError` when `strict` (the console),
        else a warning (the bot goes on: agents may name their own models)."""
        names = list(self.clients)
        results = await asyncio.gather(*(self.clients[n].check() for n in names), return_exceptions=True)
        failed: dict[str, str] = {}
        listed: dict[str, list[str]] = {}
        for name, result in zip(names, results):
            if isinstance(result, ConfigError):
                failed[name] = str(result)
            elif isinstance(result, BaseException):
                raise result
            elif result:
                listed[name] = result
        if failed and len(failed) == len(names):
            raise ConfigError("; ".join(failed.values()))
        for name, problem in failed.items():
            log.error("provider %s: %s; starting without it (its agents get a notice when they are called)",
                      name, problem)
        missing = self._not_served(models or {}, listed)
        if missing and strict:
            raise ConfigError("; ".join(missing))
        for problem in missing:
            log.warning("%s", problem)

    def _not_served(self, models: Mapping[str, str | None], listed: Mapping[str, list[str]]) -> list[str]:
        """One line per setting whose model its provider's list lacks."""
        problems: list[str] = []
        for setting, model in models.items():
            if not model:
                continue
            provider, bare = route(model, [n for n in self.clients if n != DEFAULT_PROVIDER])
            served = listed.get(provider)
            if not served or is_served(bare, served):
                continue
            shown = ", ".join(served[:8]) + (f", ... ({len(served)} in all)" if len(served) > 8 else "")
            where = self.clients[provider].host + ("" if provider == DEFAULT_PROVIDER else f" (provider {provider})")
            problems.append(f"{setting}={model} is not a model {where} serves (it serves {shown}); "
                            f"set {setting} to one of them")
        return problems

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()
