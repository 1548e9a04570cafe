"""Several OpenAI-compatible providers behind the one `LLM` port: a router over one client each.

The default provider is `OPENAI_BASE_URL` / `OPENAI_API_KEY` (named `default`). Provider NAME
is defined by `ROUNDTABLE_PROVIDER_<NAME>_BASE_URL` (and `..._API_KEY`); a model written
`name/model` runs as `model` on provider `name` when one of that name (case-insensitive) is
defined, otherwise the whole string is the default provider's model name (`openai/gpt-4o`
through a gateway keeps working). `None` means the default agent model (ROUNDTABLE_MODEL,
which may name a provider too).

Every call goes to the provider's own `OpenAILLM` (its timeout, retries, remembered quirks:
`prompt_cache_key`, `max_completion_tokens`, tool calls, images are all per provider and
model); the answer's `Completion.provider` says which one answered. Errors of a named
provider say its name to people ("the model service of provider local could not be reached").

`check()` asks each provider once, together. When every provider fails, start-up stops with
their lines; when some answer, each one that does not is one logged line naming it, and the
agents on it get the usual notice when they are called (their call fails and says why).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

from bot.adapters.openai_llm import OpenAILLM
from bot.core.errors import ConfigError, LLMError
from bot.core.models import DEFAULT_PROVIDER, ChatMessage, Completion, Tool

log = logging.getLogger(__name__)


def route(model: str, named: Sequence[str]) -> tuple[str, str]:
    """(provider, model as that provider names it) for an agent's model string."""
    prefix, slash, rest = model.partition("/")
    if slash and rest and prefix.lower() in named:
        return prefix.lower(), rest
    return DEFAULT_PROVIDER, model


class Providers:
    """Implements `bot.core.ports.LLM` over one `OpenAILLM` per provider."""

    def __init__(self, clients: Mapping[str, OpenAILLM], *, default_model: str) -> None:
        if DEFAULT_PROVIDER not in clients:
            raise ValueError("the default provider's client is required")
        self.clients = dict(clients)
        self.default_model = default_model
        self.named = tuple(name for name in self.clients if name != DEFAULT_PROVIDER)

    def resolve(self, model: str | None) -> tuple[str, OpenAILLM, str]:
        """The provider of `model` (None: the default agent model), its client, and the model's name there."""
        provider, name = route(model or self.default_model, self.named)
        return provider, self.clients[provider], name

    async def complete(self, messages: Sequence[ChatMessage], *, model: str | None = None,
                       max_tokens: int | None = None, logprobs: bool = False, cache_key: str | None = None,
                       tools: Sequence[Tool] | None = None) -> Completion:
        provider, client, name = self.resolve(model)
        try:
            completion = await client.complete(messages, model=name, max_tokens=max_tokens, logprobs=logprobs,
                                               cache_key=cache_key, tools=tools)
        except LLMError as exc:
            raise self._named(exc, provider) from None
        return dataclasses.replace(completion, provider=provider)

    async def stream(self, messages: Sequence[ChatMessage], *, on_text: Callable[[str], None],
                     model: str | None = None, max_tokens: int | None = None,
                     cache_key: str | None = None, tools: Sequence[Tool] | None = None) -> Completion:
        provider, client, name = self.resolve(model)
        try:
            completion = await client.stream(messages, on_text=on_text, model=name, max_tokens=max_tokens,
                                             cache_key=cache_key, tools=tools)
        except LLMError as exc:
            raise self._named(exc, provider) from None
        return dataclasses.replace(completion, provider=provider)

    async def tools_refusal(self, model: str | None, *, spent: list[Completion] | None = None) -> str | None:
        provider, client, name = self.resolve(model)
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

    @staticmethod
    def _named(exc: LLMError, provider: str) -> LLMError:
        if provider == DEFAULT_PROVIDER:
            return exc
        named = type(exc)(f"provider {provider}: {exc}", public=f"{exc.public} (provider {provider})")
        return named

    async def check(self) -> None:
        """Ask every provider once, together. Raises `ConfigError` (their lines) when none answers;
        logs one line per provider that does not when others do."""
        names = list(self.clients)
        results = await asyncio.gather(*(self.clients[n].check() for n in names), return_exceptions=True)
        failed: dict[str, str] = {}
        for name, result in zip(names, results):
            if isinstance(result, ConfigError):
                failed[name] = str(result)
            elif isinstance(result, BaseException):
                raise result
        if not failed:
            return
        if len(failed) == len(names):
            raise ConfigError("; ".join(failed.values()))
        for name, problem in failed.items():
            log.error("provider %s: %s; starting without it (its agents get a notice when they are called)",
                      name, problem)

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()
