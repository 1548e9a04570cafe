"""The JSON export: the record in a versioned schema (docs/export-schema.json), streamed.

One object: `format` and `version`, the group, the range, the roster, then the
episodes, the messages (each with its routing decision) and the runs of the
range, each list written a page at a time, the rolling summaries of the range
(what context windows cut, and what writing them cost), and `totals` last. Times are ISO
8601 in UTC; token counts are those the provider reported (`estimated` when
they were counted locally). Version 4 (3 had no runs of kind `regenerate` nor messages' `regenerated_at`
and `versions`; 2 had no `tool_calls` of runs; 1 had no `attachments` of messages and no `provider` of
runs and decisions); a change that breaks a reader bumps it.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from bot.core.models import (
    Agent,
    ContextSummary,
    Decision,
    Episode,
    JournaledCall,
    Message,
    MessageVersion,
    Run,
    SharedFile,
    Usage,
)
from bot.core.record.transcript import Record, Totals, Write, iso
from bot.core.rules.tool_lines import is_error, shown_name

FORMAT = "roundtable-export"
VERSION = 4


def _dump(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def usage_json(usage: Usage) -> dict[str, object]:
    return {"prompt_tokens": usage.prompt_tokens, "cached_tokens": usage.cached_tokens,
            "completion_tokens": usage.completion_tokens, "estimated": usage.estimated}


def agent_json(agent: Agent, removed_at: float | None) -> dict[str, object]:
    return {"id": agent.id, "name": agent.name, "role": agent.role, "system_prompt": agent.system_prompt,
            "model": agent.model, "avatar_url": agent.avatar_url, "enabled": agent.enabled,
            "position": agent.position, "created_at": iso(agent.created_at), "removed_at": iso(removed_at)}


def episode_json(episode: Episode) -> dict[str, object]:
    return {"id": episode.id, "task_seq": episode.task_seq, "status": episode.status,
            "agent_turns": episode.agent_turns,
            "usage": usage_json(Usage(episode.prompt_tokens, episode.completion_tokens, episode.cached_tokens)),
            "started_at": iso(episode.started_at), "ended_at": iso(episode.ended_at)}


def file_json(file: SharedFile) -> dict[str, object]:
    discord = ({"attachment_id": file.attachment_id, "message_id": file.message_id, "channel_id": file.channel_id}
               if file.attachment_id else None)
    return {"name": file.name, "kind": file.kind, "content_type": file.content_type or None, "size": file.size,
            "width": file.width, "height": file.height, "url": file.url or None, "discord": discord,
            "text": file.text, "chars": file.chars, "note": file.note or None}


def decision_json(decision: Decision) -> dict[str, object]:
    return {"source": decision.source, "agent_ids": list(decision.agent_ids),
            "agent_names": list(decision.agent_names), "terminate": decision.terminate,
            "selector_raw": list(decision.selector_raw), "attempts": decision.attempts,
            "confidence": decision.confidence, "model": decision.model or None,
            "provider": decision.provider or None,
            "usage": usage_json(decision.usage), "note": decision.note, "created_at": iso(decision.created_at)}


def version_json(version: MessageVersion) -> dict[str, object]:
    return {"version": version.version, "text": version.text, "run_id": version.run_id,
            "created_at": iso(version.created_at), "replaced_at": iso(version.replaced_at)}


def message_json(message: Message, decision: Decision | None,
                 versions: Sequence[MessageVersion] = ()) -> dict[str, object]:
    tags = message.tags
    return {
        "seq": message.seq,
        "author": {"type": message.author_type, "name": message.author_name, "user_id": message.author_user_id,
                   "agent_id": message.author_agent_id},
        "created_at": iso(message.created_at),
        "text": message.text,  # a tombstone's is "" (deleted_at set)
        "edited_at": iso(message.edited_at),
        "deleted_at": iso(message.deleted_at),
        "regenerated_at": iso(message.regenerated_at),
        "versions": [version_json(v) for v in versions],  # a regenerated reply's earlier texts
        "attachments": [file_json(f) for f in message.attachments],
        "tags": {"agent_ids": list(tags.agent_ids), "agent_names": list(tags.agent_names),
                 "user_ids": list(tags.user_ids), "operators": tags.operators, "all_agents": tags.all_agents},
        "episode_id": message.episode_id,
        "run_id": message.source_run_id,
        "external_ids": list(message.external_ids),
        "token_count": message.token_count,
        "decision": None if decision is None else decision_json(decision),
    }


def tool_call_json(call: JournaledCall) -> dict[str, object]:
    return {"step": call.step, "position": call.position, "call_id": call.call_id, "name": shown_name(call.tool),
            "model_name": call.tool, "arguments": call.arguments, "status": call.status, "result": call.result,
            "error": is_error(call.status, call.result), "started_at": iso(call.started_at),
            "finished_at": iso(call.finished_at)}


def run_json(run: Run, agent_name: str, calls: Sequence[JournaledCall] = ()) -> dict[str, object]:
    return {"id": run.id, "agent_id": run.agent_id, "agent_name": agent_name, "kind": run.kind,
            "snapshot_seq": run.snapshot_seq, "episode_id": run.episode_id, "status": run.status,
            "model": run.model or None, "provider": run.provider or None, "usage": usage_json(run.usage),
            "selector_usage": usage_json(run.selector_usage), "posted_seq": run.posted_seq, "error": run.error,
            "started_at": iso(run.started_at), "finished_at": iso(run.finished_at),
            "memory_skipped": run.memory_skipped, "calls": run.calls, "private_text": run.private_text,
            "replaces_seq": run.replaces_seq,
            "tool_calls": [tool_call_json(c) for c in calls]}


def summary_json(summary: ContextSummary, usage: Usage, calls: int) -> dict[str, object]:
    return {"after_seq": summary.after, "through_seq": summary.through, "text": summary.text,
            "omitted": summary.omitted, "model": summary.model or None, "provider": summary.provider or None,
            "calls": calls, "usage": usage_json(usage), "created_at": iso(summary.created_at)}


class _List:
    """A JSON array written one item at a time."""

    def __init__(self, write: Write, key: str) -> None:
        self.write = write
        self.count = 0
        write(f',\n"{key}":[')

    def add(self, item: object) -> None:
        self.write(("\n" if self.count == 0 else ",\n") + _dump(item))
        self.count += 1

    def close(self) -> None:
        self.write("\n]" if self.count else "]")


async def write_json(record: Record, write: Write, now: float) -> Totals:
    group, rows, store = record.group, record.span, record.store
    totals = Totals()
    settings = dataclasses.asdict(group.settings)
    head = {"format": FORMAT, "version": VERSION, "exported_at": iso(now),
            "group": {"id": group.id, "key": group.key, "name": group.name, "guild_id": group.guild_id,
                      "channel_id": group.channel_id, "created_at": iso(group.created_at),
                      "latest_seq": group.latest_seq, "settings": settings},
            "range": {"from": rows.first, "to": rows.through}}
    write(_dump(head)[:-1])  # the object stays open for the lists
    agents = _List(write, "agents")
    for agent in record.agents.values():
        agents.add(agent_json(agent, record.removed[agent.id]))
    agents.close()
    episodes = _List(write, "episodes")
    async for page in store.record.episode_pages(group.id, after=rows.after, through=rows.through, size=record.page):
        for episode in page:
            episodes.add(episode_json(episode))
    episodes.close()
    messages = _List(write, "messages")
    async for entry in record.entries():
        messages.add(message_json(entry.message, entry.decision, entry.versions))
        if entry.decision is not None:
            totals.selector_usage = totals.selector_usage + entry.decision.usage
    messages.close()
    runs = _List(write, "runs")
    async for run_page in store.record.run_pages(group.id, after=rows.after, through=rows.through, size=record.page):
        journals = await store.tools.tool_calls_by_run(run.id for run in run_page)
        for run in run_page:
            runs.add(run_json(run, record.agent_name(run.agent_id), journals.get(run.id, ())))
            totals.usage = totals.usage + run.usage
    runs.close()
    summaries = _List(write, "summaries")
    for summary, usage, calls in await store.summaries.context_summaries(group.id, after=rows.after,
                                                                         through=rows.through):
        summaries.add(summary_json(summary, usage, calls))
        totals.summary_usage = totals.summary_usage + usage
    summaries.close()
    totals.messages, totals.episodes, totals.runs = messages.count, episodes.count, runs.count
    write(',\n"totals":' + _dump({"messages": totals.messages, "episodes": totals.episodes, "runs": totals.runs,
                                  "usage": usage_json(totals.usage),
                                  "selector_usage": usage_json(totals.selector_usage),
                                  "summary_usage": usage_json(totals.summary_usage)}) + "}\n")
    return totals
