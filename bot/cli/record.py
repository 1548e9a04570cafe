"""The record on the command line: `roundtable export` and `roundtable replay`.

Both work on the database (`--db FILE|URL`, else ROUNDTABLE_DB) and name a group
by id, name (`main`, `#general`) or key (`console:main`, `discord:123`).
Export needs no model settings and writes to `--out FILE` (through a
temporary file beside it, renamed when complete) or to stdout. Replay asks
the configured model server (OPENAI_BASE_URL) and changes nothing stored.
Problems are `UserFacingError`s: one line, exit code 2.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol, TextIO

from bot.config import Settings
from bot.core.errors import InvalidInput, NotFound
from bot.core.models import Group
from bot.core.ports import (
    HasEpisodes,
    HasGroups,
    HasReading,
    HasRecord,
    HasRoster,
    HasRouting,
    HasSummaries,
    HasThread,
    HasTools,
)
from bot.core.record.export import write_export
from bot.core.record.replay import episode_report, replay_episode, replay_message, side_by_side
from bot.core.rules.secrets import mask


class RecordStore(HasGroups, HasThread, HasEpisodes, HasRoster, HasRouting, HasRecord, HasSummaries, HasTools,
                  HasReading, Protocol):
    """What export and replay read of the store: an export's transcript (`TranscriptStore`: the record,
    summaries, decisions, people's names, tool calls) and a replay's (`ReplayStore`: also the episodes
    and today's roster)."""


def db_file(db: str | None, configured: str) -> str:
    """The database to read: a SQLite file must exist (reading never creates one); a
    PostgreSQL URL is checked when it is opened."""
    import storage

    target, source = (db, "--db") if db else (configured, "ROUNDTABLE_DB")
    if storage.is_postgres(target):
        return target
    if not Path(storage.sqlite_path(target)).is_file():
        raise NotFound(f"{source} {target} does not exist (no database there to read)")
    return target


@contextlib.asynccontextmanager
async def opened(db: str | None, settings: Settings) -> AsyncIterator[RecordStore]:
    from bot.wiring import open_store

    store = await open_store(db, db_file(db, settings.db_path))
    try:
        yield store
    finally:
        await store.close()


async def find_group(store: HasGroups, ref: str) -> Group:
    """The group `ref` names: its id, key or name (a leading # optional, case aside)."""
    groups = await store.groups.list_groups(enabled_only=False)
    wanted = ref.strip()
    if wanted.isdigit():
        by_id = [g for g in groups if g.id == int(wanted)]
        if by_id:
            return by_id[0]
    by_key = [g for g in groups if g.key == wanted]
    if by_key:
        return by_key[0]
    plain = wanted.lstrip("#").casefold()
    named = [g for g in groups if g.name.lstrip("#").casefold() == plain]
    if len(named) == 1:
        return named[0]
    listed = ", ".join(f"{g.name} (id {g.id})" for g in (named or groups)[:12]) or "none yet"
    if named:
        raise InvalidInput(f"{len(named)} groups are named {ref!r}: {listed}; give --group ID")
    raise NotFound(f"no group {ref!r} in this database (groups: {listed})")


async def export(settings: Settings, *, db: str | None, group: str, fmt: str, out: str | None,
                 first: int | None, last: int | None) -> int:
    if first is not None and first < 1:
        raise InvalidInput(f"--from {first}: messages are numbered from 1")
    if first is not None and last is not None and first > last:
        raise InvalidInput(f"--from {first} is after --to {last}")
    target = Path(out) if out else None
    if target is not None and not target.parent.is_dir():
        raise NotFound(f"--out {out}: the directory {target.parent} does not exist")
    async with opened(db, settings) as store:
        found = await find_group(store, group)
        if target is None:
            totals = await write_export(store, found, fmt, sys.stdout.write, first=first, last=last)
            sys.stdout.flush()
        else:
            partial = target.with_name(f".{target.name}.part")
            try:
                with open(partial, "w", encoding="utf-8", newline="\n") as file:  # noqa: ASYNC230 - the CLI verb export: nothing else runs on this loop
                    totals = await write_export(store, found, fmt, file.write, first=first, last=last)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
    where = f"to {target}" if target is not None else "to stdout"
    print(f"roundtable: exported {totals.messages} messages of {found.name} as {fmt} {where}", file=sys.stderr)
    return 0


async def replay(settings: Settings, *, db: str | None, group: str, seq: int | None, episode: int | None,
                 model: str | None, out: TextIO | None = None) -> int:
    from bot.llm.tokens import make_token_counter
    from bot.wiring import make_providers

    write = (out or sys.stdout).write
    if (seq is None) == (episode is None):
        raise InvalidInput("give --seq N (one message) or --episode E (every selector decision of an episode)")
    async with opened(db, settings) as store:
        found = await find_group(store, group)
        chosen_model = model or found.settings.selector_model or settings.selector_model or settings.model
        llm = make_providers(settings, make_token_counter())
        try:
            await llm.check()
            if seq is not None:
                lines = side_by_side(await replay_message(store, llm, found, seq, model=chosen_model), found)
            elif episode is not None:  # (one of the two: checked above)
                lines = episode_report(await replay_episode(store, llm, found, episode, model=chosen_model), episode)
        finally:
            await llm.aclose()
    for line in [*lines, f"(selector model {chosen_model}; today's roster and settings; nothing stored changed)"]:
        write(mask(line) + "\n")  # (stored and new replies: no secret the process knows)
    return 0
