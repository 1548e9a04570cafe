"""Speaker selection through the LLM port (SPEC §5, seed 000).

Parse the reply as one eligible name or TERMINATE; retry once with feedback;
then fall back to a fixed rotation that respects the no-repeat rule. The
token usage of every selector call is kept (AutoGen throws it away).
"""
from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.errors import LLMError
from bot.core.features.context import MIN_CACHED_PROMPT, group_header, load_thread, plain_files, window_of
from bot.core.features.summary import Summaries
from bot.core.features.tasks import TaskChains, TaskStore
from bot.core.models import Agent, ChatMessage, Decision, Group, Message, Usage
from bot.core.ports import LLM
from bot.core.rules.prompts import name_list, selector_part, selector_prompt, shared_messages
from bot.core.rules.routing import eligible_speakers, next_in_rotation
from bot.core.rules.stop import TERMINATE

log = logging.getLogger(__name__)

_STRIP = " \t\r\n\"'`*_“”‘’<>[]().,;:!?@"
_WORD = re.compile(r"[\w.\-]+")


@dataclass(frozen=True)
class Parsed:
    name: str | None = None  # the eligible name, as spelled on the roster
    terminate: bool = False
    error: str | None = None


@dataclass(frozen=True)
class Selection:
    agent: Agent | None
    terminate: bool
    source: str  # selector | fallback | low_confidence | none
    raw: tuple[str, ...]
    attempts: int
    confidence: float | None
    usage: Usage
    note: str = ""
    model: str = ""  # the model that answered (for its price)
    provider: str = ""


def parse_reply(reply: str, eligible: Sequence[str], known: Sequence[str] = ()) -> Parsed:
    """One eligible name or TERMINATE, tolerating case, quotes, `@` and punctuation."""
    by_key = {n.casefold(): n for n in eligible}
    text = reply.strip().strip(_STRIP).strip()
    if not text:
        return Parsed(error="the reply was empty")
    key = text.casefold()
    if key == TERMINATE.casefold():
        return Parsed(terminate=True)
    if key in by_key:
        return Parsed(name=by_key[key])
    words = {w.strip(".-").casefold() for w in _WORD.findall(reply)}
    named = [by_key[k] for k in by_key if k in words]
    says_terminate = TERMINATE.casefold() in words
    if len(named) + says_terminate > 1:
        choices = ", ".join(named + ([TERMINATE] if says_terminate else []))
        return Parsed(error=f"the reply named more than one choice ({choices})")
    if named:
        return Parsed(name=named[0])
    if says_terminate:
        return Parsed(terminate=True)
    known_keys = {n.casefold() for n in known}
    if key in known_keys:
        return Parsed(error=f"{text} may not speak now")
    return Parsed(error=f"{text[:60]!r} is not one of the participants")


def _confidence(logprob: float | None) -> float | None:
    if logprob is None:
        return None
    return max(0.0, min(1.0, math.exp(logprob)))


async def select_speaker(
    llm: LLM,
    *,
    roster: Sequence[Agent],
    eligible: Sequence[Agent],
    thread: str,
    rotate_after: int | None,
    model: str | None = None,
    min_confidence: float | None = None,
    cache_key: str | None = None,
    header: tuple[str, str] | None = None,
) -> Selection:
    """Ask the selector model who speaks next; never raises for bad replies.

    An `LLMError` from the model counts as an invalid reply (rotation follows).
    The fallback is the next agent after `rotate_after` in roster order among
    `eligible` (so an excluded previous speaker is never the fallback). With `header` (the shared
    layout's header and task: `bot.core.features.context.group_header`, `Tasks.slot`) the prompt is
    the group's shared messages with the selection instructions last; without it, seed 000's Speaker
    selector prompt.
    """
    enabled = [a for a in roster if a.enabled]
    names = [a.name for a in eligible]
    if not eligible:
        return Selection(None, False, "none", (), 0, None, Usage(), "nobody is eligible to speak")
    if header is not None:
        asked = shared_messages(*header, thread, selector_part(names))
    else:
        asked = [ChatMessage("user", selector_prompt(enabled, thread, names))]
    messages = list(asked)
    raw: list[str] = []
    usage = Usage()
    error = ""
    answered, provider = "", ""  # the model that answered (and its provider), once one did
    for attempt in (1, 2):
        try:
            completion = await llm.complete(messages, model=model, max_tokens=20, logprobs=min_confidence is not None,
                                            cache_key=cache_key)
        except LLMError as exc:
            log.warning("selector call failed (attempt %d): %s", attempt, exc)
            raw.append(f"<error: {exc}>")
            error = str(exc)
            continue
        usage = usage + completion.usage
        answered, provider = completion.model or model or "", completion.provider
        raw.append(completion.text)
        parsed = parse_reply(completion.text, names, [a.name for a in enabled])
        if parsed.error is None:
            confidence = _confidence(completion.logprob)
            if parsed.terminate:
                return Selection(None, True, "selector", tuple(raw), attempt, confidence, usage, model=answered,
                                 provider=provider)
            agent = next(a for a in eligible if a.name == parsed.name)
            if min_confidence is not None and confidence is not None and confidence < min_confidence:
                fallback = _rotation(roster, eligible, rotate_after)
                note = f"confidence {confidence:.2f} below {min_confidence:.2f}"
                return Selection(fallback, False, "low_confidence", tuple(raw), attempt, confidence, usage, note,
                                 answered, provider)
            return Selection(agent, False, "selector", tuple(raw), attempt, confidence, usage, model=answered,
                             provider=provider)
        error = parsed.error
        log.debug("selector reply rejected (attempt %d): %s", attempt, error)
        messages = [
            *asked,
            ChatMessage("assistant", completion.text),
            ChatMessage(
                "user",
                f"That reply is not valid: {error}. Reply with only one name from "
                f"{name_list(names)}, or TERMINATE.",
            ),
        ]
    fallback = _rotation(roster, eligible, rotate_after)
    return Selection(fallback, False, "fallback", tuple(raw), 2, None, usage, f"selector failed: {error}", answered,
                     provider)


def _rotation(roster: Sequence[Agent], eligible: Sequence[Agent], rotate_after: int | None) -> Agent | None:
    allowed = {a.id for a in eligible}
    exclude = {a.id for a in roster if a.id not in allowed}
    return next_in_rotation(roster, rotate_after, exclude=exclude)


async def selector_decision(
    store: TaskStore, llm: LLM, group: Group, roster: Sequence[Agent], message: Message, *,
    model: str | None, cache_key: str | None = None, tasks: TaskChains | None = None,
    summaries: Summaries | None = None,
) -> Decision:
    """Selector mode's routing of `message`, as the dispatcher makes it (and replay remakes it).

    Under `prompt_layout: shared` the selector reads the group's window, the one
    every agent reads, after the same header (brief, roster, tasks), with its
    instructions last; while the thread is too short for a provider to cache any of
    it (under MIN_CACHED_PROMPT tokens), its own smaller window (`selector_budget`)
    costs less and it reads that, in the same layout. Under `seed` it reads its own window (`selector_budget`) of
    the thread through `message`: the episode's tasks (`tasks`: with the earlier
    requests a follow-up continues) shown first when their place was cut, then the
    rolling summary of the cut rows (`summaries`), then the newest rows. It is
    asked even when one agent is eligible: its answer may be TERMINATE.
    """
    eligible = eligible_speakers(roster, message, group.settings.allow_repeat)
    chain = await (tasks or TaskChains(store)).of(group.id, message.episode_id)
    shared = group.settings.prompt_layout == "shared"
    budget, step = window_of(group.settings, selector=True)
    if shared and await store.thread.thread_tokens(group.id, through=message.seq) < MIN_CACHED_PROMPT:
        budget, step = group.settings.selector_budget, None  # too short to be cached: its own window costs less
    trimmed = await load_thread(store, group.id, through=message.seq, budget=budget, step=step,
                                task_seq=chain.current.seq if chain.current else None, tasks=chain.all,
                                task_apart=shared and chain.current is not None,
                                summaries=summaries.source(group, roster, chain) if summaries is not None else None)
    selection = await select_speaker(
        llm,
        roster=roster,
        eligible=eligible,
        thread=trimmed.render(plain_files(group).text) if shared else trimmed.render(),
        header=(group_header(group, roster), chain.slot(plain_files(group).text)) if shared else None,
        rotate_after=await store.thread.last_agent_author(group.id, through=message.seq),
        model=model,
        min_confidence=group.settings.min_confidence,
        cache_key=cache_key,
    )
    ids = (selection.agent.id,) if selection.agent else ()
    names = (selection.agent.name,) if selection.agent else ()
    source = selection.source if (ids or selection.terminate) else "none"
    return Decision(
        message.seq, source, ids, names, selection.raw, selection.attempts, selection.confidence,
        selection.usage, selection.terminate, selection.note, model=selection.model, provider=selection.provider,
    )
