"""The model endpoints of a set-up, and their live check (`roundtable doctor`, `/roundtable doctor`, `init`).

`endpoints(settings)` lists every OpenAI-compatible server the settings use (the
default provider, then each named one), each with the models the settings send it
(ROUNDTABLE_MODEL and ROUNDTABLE_SELECTOR_MODEL, routed as `bot.llm.providers`
routes them). `endpoint_check` asks one
server for its model list (GET /models: no tokens spent) and judges the answer;
`endpoint_checks(settings)` checks them all at once. `agent_models_check` checks the agents'
own models (`roundtable doctor`: each enabled agent with a model of its own, routed the same way).
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from bot.config import Settings
from bot.core.errors import ConfigError, LLMError, LLMUnavailable
from bot.core.models import DEFAULT_PROVIDER
from bot.core.rules.doctor import AgentModel, Check
from bot.core.rules.secrets import redact_url
from bot.llm.openai_llm import OpenAILLM
from bot.llm.providers import is_served, route

OPENAI_API = "https://api.openai.com/v1"
CHECK_TIMEOUT = 15.0  # seconds per endpoint


class _NoCounter:
    """The check makes no completion, so it counts no tokens (and loads no tokenizer)."""

    def count(self, text: str) -> int:
        return 0


@dataclass(frozen=True)
class Endpoint:
    provider: str  # "default" (OPENAI_*), or a provider's name (ROUNDTABLE_PROVIDER_<NAME>_*)
    base_url: str | None  # None: OpenAI's
    api_key: str
    models: tuple[str, ...]  # the models the settings send it

    @property
    def name(self) -> str:
        """How its check is named: 'model endpoint', 'model endpoint local'."""
        return "model endpoint" if self.provider == DEFAULT_PROVIDER else f"model endpoint {self.provider}"

    @property
    def key_setting(self) -> str:
        return ("OPENAI_API_KEY" if self.provider == DEFAULT_PROVIDER
                else f"ROUNDTABLE_PROVIDER_{self.provider.upper()}_API_KEY")

    @property
    def where(self) -> str:
        return redact_url(self.base_url) if self.base_url else f"{OPENAI_API} (OpenAI)"


def endpoints(settings: Settings) -> list[Endpoint]:
    """Every model endpoint of the settings: the default provider, then each named one."""
    named = [p.name for p in settings.providers]
    routed = [route(m, named) for m in dict.fromkeys((settings.model, settings.selector_model)) if m]

    def models(provider: str) -> tuple[str, ...]:
        return tuple(model for where, model in routed if where == provider)

    return [Endpoint(DEFAULT_PROVIDER, settings.openai_base_url, settings.openai_api_key, models(DEFAULT_PROVIDER)),
            *(Endpoint(p.name, p.base_url, p.api_key, models(p.name)) for p in settings.providers)]


async def endpoint_checks(settings: Settings) -> list[Check]:
    """One check per endpoint, asked at the same time."""
    return list(await asyncio.gather(*(endpoint_check(e, settings.llm_timeout) for e in endpoints(settings))))


async def endpoint_check(endpoint: Endpoint, timeout: float = CHECK_TIMEOUT) -> Check:
    """The server answers, takes the key and lists the models the settings use."""
    if not endpoint.api_key:
        return Check(endpoint.name, False, f"{endpoint.key_setting} is missing",
                     f"set {endpoint.key_setting} to the key of {endpoint.where} (any non-empty value for a "
                     "local server that needs none)")
    try:
        listed = await model_ids(endpoint.base_url or OPENAI_API, endpoint.api_key, min(timeout, CHECK_TIMEOUT),
                                 provider=endpoint.provider)
    except ConfigError as exc:  # unreachable, or the key refused: "what happened; the fix"
        found, _, fix = str(exc).rpartition("; ")
        return Check(endpoint.name, False, found, fix) if found else Check(endpoint.name, False, fix)
    except LLMUnavailable as exc:
        return Check(endpoint.name, False, f"{endpoint.where} is failing ({exc.public})",
                     "check the server; it may be starting or overloaded")
    except LLMError as exc:
        return Check(endpoint.name, True, f"{endpoint.where} answers and takes the key, but gave no model list "
                                          f"({exc.public}); the models are not checked")
    unlisted = [m for m in endpoint.models if not is_served(m, listed)]
    if unlisted and listed:
        shown = ", ".join(listed[:8]) + (", ..." if len(listed) > 8 else "")
        return Check(endpoint.name, False, f"{endpoint.where} does not list {', '.join(unlisted)} (it lists {shown})",
                     "set ROUNDTABLE_MODEL (and ROUNDTABLE_SELECTOR_MODEL, when set) to a model it lists"
                     + ("" if endpoint.provider == DEFAULT_PROVIDER else f", written {endpoint.provider}/MODEL"))
    serves = f"; it serves {', '.join(endpoint.models)}" if endpoint.models and listed else ""
    return Check(endpoint.name, True, f"{endpoint.where} answers and takes the key ({len(listed)} models{serves})")


async def model_ids(base_url: str, api_key: str, timeout: float = CHECK_TIMEOUT, *,
                    provider: str = DEFAULT_PROVIDER) -> list[str]:
    """The models the server at `base_url` lists (`OpenAILLM.model_ids`: `ConfigError`, naming the
    provider's settings, when it does not answer or refuses the key; `LLMError` when it answers
    without a list)."""
    llm = OpenAILLM(api_key=api_key, base_url=base_url, default_model="-", timeout=timeout, max_retries=0,
                    counter=_NoCounter(), provider=provider)
    try:
        return await llm.model_ids()
    finally:
        await llm.aclose()


async def agent_models_check(settings: Settings, agents: Sequence[AgentModel]) -> Check:
    """Each agent's own model is among the models its endpoint lists (`name/model` on provider
    `name`). An endpoint that gives no list (or does not answer: its own check says so) leaves its
    agents unchecked."""
    by_endpoint = {e.provider: e for e in endpoints(settings)}
    named = [p.name for p in settings.providers]
    routed = [(agent, *route(agent.model, named)) for agent in agents]
    used = [by_endpoint[p] for p in dict.fromkeys(provider for _, provider, _ in routed)]

    async def listed(endpoint: Endpoint) -> list[str] | None:
        if not endpoint.api_key:
            return None
        try:
            return await model_ids(endpoint.base_url or OPENAI_API, endpoint.api_key,
                                   min(settings.llm_timeout, CHECK_TIMEOUT), provider=endpoint.provider)
        except (ConfigError, LLMError):
            return None

    lists = dict(zip([e.provider for e in used], await asyncio.gather(*(listed(e) for e in used))))
    wrong, unchecked = [], 0
    for agent, provider, model in routed:
        served = lists[provider]
        if served is None:
            unchecked += 1
        elif model not in served:
            shown = ", ".join(served[:8]) + (", ..." if len(served) > 8 else "")
            wrong.append(f"{agent.agent} in {agent.group} has {agent.model}, which {by_endpoint[provider].where} "
                         f"does not list (it lists {shown})")
    count = f"{len(agents)} agent with a model of its own" if len(agents) == 1 else \
        f"{len(agents)} agents with a model of their own"
    if wrong:
        return Check("agent models", False, f"{count}: " + "; ".join(wrong),
                     "/agent edit name:AGENT model:MODEL in its channel, with a model its endpoint lists")
    note = f" ({unchecked} not checked: their endpoint gave no model list)" if unchecked else ""
    return Check("agent models", True, f"{count}: each is served by its endpoint{note}")
