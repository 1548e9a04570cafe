"""Replay: would the selector decide the same today?

`replay_message` asks the selector again about a past message, as the
dispatcher's selector step would now: today's roster, eligible speakers,
settings (selector budget, allow_repeat, min_confidence, selector model) and
the thread through that message, trimmed as today, with the rolling summary
stored for its window (none is written now); the episode's own tasks.
The answer is compared with the stored decision by the agents it picks (ids,
so a renamed agent is the same agent) and TERMINATE. Nothing is stored: the
store is only read.

`replay_episode` does this for every stored selector decision of an episode.
The report functions lay the stored and the new decision side by side; for an agent's
reply they also list the tool calls of the run that wrote it (SPEC §6b "Visible"), each with
its arguments and result, cut and masked.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import InvalidInput, NotFound
from bot.core.features.selector import selector_decision
from bot.core.features.summary import Summaries
from bot.core.models import Decision, Group, JournaledCall, Message
from bot.core.ports import (
    LLM,
    HasEpisodes,
    HasGroups,
    HasRecord,
    HasRoster,
    HasRouting,
    HasSummaries,
    HasThread,
    HasTools,
)
from bot.core.rules.tool_lines import call_detail, compact_line, is_error

SELECTOR_SOURCES = ("selector", "fallback", "low_confidence")  # decisions a selector call made


class ReplayStore(HasGroups, HasThread, HasEpisodes, HasRoster, HasRouting, HasRecord, HasSummaries, HasTools,
                  Protocol):
    """What a replay reads (never writes): the group, its rows and episodes, today's roster, the stored
    decisions and rolling summaries, the record in pages, the tool calls of the runs."""


@dataclass(frozen=True)
class Replayed:
    message: Message
    stored: Decision | None
    now: Decision
    calls: tuple[JournaledCall, ...] = ()  # the tool calls of the run that wrote it (an agent's reply)

    @property
    def changed(self) -> bool:
        if self.stored is None:
            return True
        return (set(self.stored.agent_ids), self.stored.terminate) != (set(self.now.agent_ids), self.now.terminate)


async def replay_message(store: ReplayStore, llm: LLM, group: Group, seq: int, *, model: str | None) -> Replayed:
    """The selector's decision for row `seq` today, beside the stored one. `model`: the selector
    model to ask (None: the LLM's default)."""
    group = await store.groups.get_group(group.id)
    if not 1 <= seq <= group.latest_seq:
        raise NotFound(f"{group.name} has {group.latest_seq} messages; there is no #{seq}.")
    message = await store.thread.get_message(group.id, seq)
    if message.author_type == "system" and message.tags.agent_ids:
        raise InvalidInput(f"#{seq} is a schedule's task; it goes to the agent it tags, so there is no selector "
                           "decision to replay.")
    if message.author_type == "system":
        raise InvalidInput(f"#{seq} is a notice from the bot; notices are never routed, so there is nothing to replay.")
    roster = await store.roster.list_agents(group.id)
    now = await selector_decision(store, llm, group, roster, message, model=model, summaries=Summaries.stored(store))
    calls = (tuple(await store.tools.run_tool_calls(message.source_run_id))
             if message.author_type == "agent" and message.source_run_id is not None else ())
    return Replayed(message, await store.routing.get_decision(group.id, seq), now, calls)


async def replay_episode(store: ReplayStore, llm: LLM, group: Group, episode_id: int, *,
                         model: str | None) -> list[Replayed]:
    """Every stored selector decision of the episode, replayed in order."""
    try:
        episode = await store.episodes.get_episode(episode_id)
    except NotFound:
        episode = None
    if episode is None or episode.group_id != group.id:
        raise NotFound(f"{group.name} has no episode {episode_id}.")
    seqs: list[int] = []
    async for page in store.record.message_pages(group.id, after=episode.task_seq - 1):
        rows = [m for m in page if m.episode_id == episode_id]
        decisions = await store.routing.decisions(group.id, after=page[0].seq - 1, through=page[-1].seq)
        seqs += [m.seq for m in rows if m.seq in decisions and decisions[m.seq].source in SELECTOR_SOURCES]
        if page[-1].episode_id is not None and page[-1].episode_id > episode_id:
            break
    if not seqs:
        raise InvalidInput(f"Episode {episode_id} has no selector decision to replay (its messages were routed "
                           "by tags, rotation or not at all).")
    return [await replay_message(store, llm, group, seq, model=model) for seq in seqs]


def _chosen(decision: Decision | None) -> str:
    if decision is None:
        return "(not routed)"
    return ", ".join(decision.agent_names) or ("TERMINATE" if decision.terminate else "nobody")


def _facts(decision: Decision | None) -> list[tuple[str, str]]:
    if decision is None:
        return [("chosen", "(not routed yet)")]
    u = decision.usage
    return [
        ("chosen", _chosen(decision)),
        ("source", decision.source),
        ("selector said", " | ".join(decision.selector_raw) or "-"),
        ("attempts", str(decision.attempts)),
        ("confidence", "-" if decision.confidence is None else f"{decision.confidence:.2f}"),
        ("model", decision.model or "-"),
        ("tokens", f"{u.prompt_tokens} prompt / {u.cached_tokens} cached / {u.completion_tokens} completion"),
        ("note", decision.note or "-"),
    ]


def side_by_side(result: Replayed, group: Group) -> list[str]:
    """The stored decision and today's, in two columns, and whether it changed."""
    m = result.message
    preview = " ".join(m.text.split())
    preview = preview if len(preview) <= 60 else preview[:59] + "…"
    stored, now = _facts(result.stored), dict(_facts(result.now))
    width = max(len(v) for _, v in stored) + 2
    lines = [f"#{m.seq} by {m.author_name} in {group.name}: {preview}"]
    for call in result.calls:
        head, detail = call_detail(call.tool, call.arguments, call.status, call.result)
        arguments, outcome = detail.split("\n", 1)
        lines += [f"  {head} {' '.join(arguments.split())}", f"    {' '.join(outcome.split())}"]
    lines.append(f"  {'':<14}{'stored':<{width}}now")
    lines += [f"  {name:<14}{value:<{width}}{now.get(name, '')}" for name, value in stored if name in now]
    if result.stored is not None and result.stored.source not in SELECTOR_SOURCES:
        lines.append(f"  (the stored decision came from {result.stored.source}, not from a selector call)")
    lines.append(f"Changed: {_chosen(result.stored)} -> {_chosen(result.now)}." if result.changed
                 else f"Same decision: {_chosen(result.now)}.")
    return lines


def episode_report(results: Sequence[Replayed], episode_id: int) -> list[str]:
    """One line per replayed decision, then how many would change."""
    lines = [f"Episode {episode_id}: {len(results)} selector decision{'' if len(results) == 1 else 's'} replayed"]
    for r in results:
        mark = "CHANGED" if r.changed else "same"
        tools = compact_line((c.tool, is_error(c.status, c.result)) for c in r.calls)
        lines.append(f"  #{r.message.seq} {r.message.author_name}: {_chosen(r.stored)} -> {_chosen(r.now)}  {mark}"
                     + (f"  ({tools})" if tools else ""))
    changed = sum(r.changed for r in results)
    lines.append(f"{changed} of {len(results)} would change.")
    return lines
