"""Row <-> model codec: how models are kept in columns (JSON columns, booleans, settings).

Pure functions over result rows (sqlite3.Row, asyncpg.Record); no I/O.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence

from bot.core.models import (
    Agent,
    Decision,
    Episode,
    Group,
    GroupSettings,
    Message,
    Note,
    Run,
    SharedFile,
    Tags,
    Usage,
)
from storage.sql import Row

log = logging.getLogger(__name__)


_SETTINGS_FIELDS = {f.name for f in dataclasses.fields(GroupSettings)}


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def settings_to_json(settings: GroupSettings) -> str:
    return dumps(dataclasses.asdict(settings))


def settings_from_json(text: str | None) -> GroupSettings:
    """Known keys are read; unknown keys are ignored, missing keys take defaults."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        log.warning("unreadable group settings %r; using defaults", (text or "")[:80])
        return GroupSettings()
    if not isinstance(data, dict):
        return GroupSettings()
    return GroupSettings(**{k: v for k, v in data.items() if k in _SETTINGS_FIELDS})


def tags_to_json(tags: Tags) -> str:
    return dumps(
        {
            "agent_ids": list(tags.agent_ids),
            "agent_names": list(tags.agent_names),
            "user_ids": list(tags.user_ids),
            "operators": tags.operators,
            "all_agents": tags.all_agents,
        }
    )


def tags_from_json(text: str | None) -> Tags:
    data = json.loads(text or "{}")
    return Tags(
        agent_ids=tuple(int(i) for i in data.get("agent_ids", ())),
        agent_names=tuple(str(n) for n in data.get("agent_names", ())),
        user_ids=tuple(str(u) for u in data.get("user_ids", ())),
        operators=bool(data.get("operators", False)),
        all_agents=bool(data.get("all_agents", False)),
    )


_FILE_FIELDS = {f.name for f in dataclasses.fields(SharedFile)}


def attachments_to_json(files: Sequence[SharedFile]) -> str:
    """The files of a row, each with only the fields that are set (a file's text may be long)."""
    return dumps([{k: v for k, v in dataclasses.asdict(f).items() if v not in (None, "")} for f in files])


def attachments_from_json(text: str | None) -> tuple[SharedFile, ...]:
    """Known keys are read, unknown ones ignored (a later version may write more)."""
    data = json.loads(text or "[]")
    return tuple(SharedFile(**{k: v for k, v in item.items() if k in _FILE_FIELDS})
                 for item in data if isinstance(item, dict) and "name" in item and "kind" in item)


def strings_from_json(text: str | None) -> tuple[str, ...]:
    return tuple(str(v) for v in json.loads(text or "[]"))


def ints_from_json(text: str | None) -> tuple[int, ...]:
    return tuple(int(v) for v in json.loads(text or "[]"))


def unique(values: Sequence[str]) -> tuple[str, ...]:
    """`values` without repeats, first occurrence kept."""
    return tuple(dict.fromkeys(str(v) for v in values))


def usage_of(row: Row, prefix: str = "") -> Usage:
    return Usage(
        prompt_tokens=int(row[f"{prefix}prompt_tokens"]),
        completion_tokens=int(row[f"{prefix}completion_tokens"]),
        cached_tokens=int(row[f"{prefix}cached_tokens"]),
        estimated=bool(row[f"{prefix}estimated"]),
    )


def to_group(row: Row) -> Group:
    return Group(
        id=int(row["id"]),
        key=row["key"],
        name=row["name"],
        settings=settings_from_json(row["settings_json"]),
        guild_id=row["guild_id"],
        channel_id=row["channel_id"],
        parent_channel_id=row["parent_channel_id"],
        enabled=bool(row["enabled"]),
        paused=bool(row["paused"]),
        latest_seq=int(row["latest_seq"]),
        agent_streak=int(row["agent_streak"]),
        episode_id=row["episode_id"],
        setup_message_id=row["setup_message_id"],
        created_at=float(row["created_at"]),
        watermark=row["watermark"],
        delivery_problem=row["delivery_problem"],
    )


def to_agent(row: Row) -> Agent:
    return Agent(
        id=int(row["id"]),
        group_id=int(row["group_id"]),
        name=row["name"],
        role=row["role"],
        system_prompt=row["system_prompt"],
        model=row["model"],
        avatar_url=row["avatar_url"],
        enabled=bool(row["enabled"]),
        position=int(row["position"]),
        delivered_through=int(row["delivered_through"]),
        created_at=float(row["created_at"]),
        memory=bool(row["memory"]),
        mode=row["mode"] or "talk",
        muted_until=None if row["muted_until"] is None else float(row["muted_until"]),
        temperature=None if row["temperature"] is None else float(row["temperature"]),
        max_tokens=None if row["max_tokens"] is None else int(row["max_tokens"]),
        context_budget=None if row["context_budget"] is None else int(row["context_budget"]),
    )


def to_note(row: Row) -> Note:
    return Note(id=int(row["id"]), agent_id=int(row["agent_id"]), text=row["text"],
                created_at=float(row["created_at"]))


def to_message(row: Row) -> Message:
    return Message(
        group_id=int(row["group_id"]),
        seq=int(row["seq"]),
        author_type=row["author_type"],
        author_name=row["author_name"],
        text=row["text"],
        tags=tags_from_json(row["tags"]),
        author_user_id=row["author_user_id"],
        author_agent_id=row["author_agent_id"],
        source_run_id=row["source_run_id"],
        external_ids=strings_from_json(row["external_ids"]),
        confirmed=bool(row["confirmed"]),
        token_count=int(row["token_count"]),
        episode_id=row["episode_id"],
        created_at=float(row["created_at"]),
        tokens_before=int(row["tokens_before"]),
        attachments=attachments_from_json(row["attachments"]),
        reply_to_seq=None if row["reply_to_seq"] is None else int(row["reply_to_seq"]),
        edited_at=None if row["edited_at"] is None else float(row["edited_at"]),
        deleted_at=None if row["deleted_at"] is None else float(row["deleted_at"]),
        regenerated_at=None if row["regenerated_at"] is None else float(row["regenerated_at"]),
    )


def to_episode(row: Row) -> Episode:
    return Episode(
        id=int(row["id"]),
        group_id=int(row["group_id"]),
        task_seq=int(row["task_seq"]),
        status=row["status"],
        agent_turns=int(row["agent_turns"]),
        prompt_tokens=int(row["prompt_tokens"]),
        completion_tokens=int(row["completion_tokens"]),
        cached_tokens=int(row["cached_tokens"]),
        started_at=float(row["started_at"]),
        ended_at=row["ended_at"],
    )


def to_decision(row: Row) -> Decision:
    return Decision(
        seq=int(row["seq"]),
        source=row["source"],
        agent_ids=ints_from_json(row["agent_ids"]),
        agent_names=strings_from_json(row["agent_names"]),
        selector_raw=strings_from_json(row["selector_raw"]),
        attempts=int(row["attempts"]),
        confidence=row["confidence"],
        usage=usage_of(row),
        terminate=bool(row["terminate"]),
        note=row["note"],
        created_at=float(row["created_at"]),
        model=row["model"] or "",
        provider=row["provider"] or "",
    )


def to_run(row: Row) -> Run:
    return Run(
        id=int(row["id"]),
        group_id=int(row["group_id"]),
        agent_id=int(row["agent_id"]),
        kind=row["kind"],
        snapshot_seq=int(row["snapshot_seq"]),
        episode_id=row["episode_id"],
        status=row["status"],
        usage=usage_of(row),
        selector_usage=usage_of(row, "selector_"),
        posted_seq=row["posted_seq"],
        error=row["error"],
        started_at=float(row["started_at"]),
        finished_at=row["finished_at"],
        model=row["model"] or "",
        memory_skipped=None if row["memory_skipped"] is None else bool(row["memory_skipped"]),
        provider=row["provider"] or "",
        calls=int(row["calls"]),
        private_text=row["private_text"],
        replaces_seq=None if row["replaces_seq"] is None else int(row["replaces_seq"]),
    )
