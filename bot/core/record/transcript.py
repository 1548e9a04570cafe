"""What every export format reads and says alike: the record of a range of rows, and its wording.

`Record` reads the rows of the range a page at a time (`RecordStore.message_pages`),
joins each row with its routing decision, the run that wrote it and the episode it
opens, and yields each as an `Entry`; `Totals` counts what was exported and what it
cost. The formats (`bot.core.record.export` for Markdown, `bot.core.record.export_json`,
`bot.core.record.export_html`) write the entries out at once, with the shared wording here
(times, plurals, token counts, the closing totals line).
"""
from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from bot.core.errors import InvalidInput
from bot.core.models import (
    Agent,
    Decision,
    Episode,
    Group,
    JournaledCall,
    Message,
    MessageVersion,
    Run,
    SharedFile,
    Usage,
)
from bot.core.ports import HasGroups, HasReading, HasRecord, HasRouting, HasSummaries, HasThread, HasTools
from bot.core.rules.attachments import size_text

PAGE = 500
PICKS_KEPT = 8  # per agent: recent decisions that selected it, to name the one behind each reply


class TranscriptStore(HasRecord, HasSummaries, HasRouting, HasReading, HasGroups, HasTools, HasThread, Protocol):
    """What an export reads: the record in pages, the rolling summaries, the routing decisions, people's
    names, the group, the tool calls of the runs, regenerated replies' earlier texts."""


Write = Callable[[str], object]


def iso(ts: float | None) -> str | None:
    """2025-01-02T10:11:12.345Z (UTC), or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def when(ts: float | None) -> str:
    """2025-01-02 10:11 UTC, for people."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class Entry:
    """One row of the thread with what explains it."""

    message: Message
    decision: Decision | None  # how this row was routed
    run: Run | None  # the run that wrote it (agent rows)
    episode: Episode | None  # set on the first row of each episode in the export
    picked_by: Decision | None  # for agent rows: the decision that selected its author
    earlier_task: int | None = None  # a reply to an older episode's task (a person posted during the run)
    calls: tuple[JournaledCall, ...] = ()  # the tool calls of the run that wrote it, in order (SPEC §6b)
    versions: tuple[MessageVersion, ...] = ()  # a regenerated reply's earlier texts, oldest first (SPEC §8)


@dataclass
class Totals:
    messages: int = 0
    episodes: int = 0
    runs: int = 0
    usage: Usage = field(default_factory=Usage)
    selector_usage: Usage = field(default_factory=Usage)
    summary_usage: Usage = field(default_factory=Usage)  # the rolling summaries of the range (kind 'summary')


@dataclass(frozen=True)
class Span:
    """The rows exported: after < seq <= through."""

    after: int
    through: int

    @property
    def first(self) -> int:
        return self.after + 1


def span(group: Group, first: int | None = None, last: int | None = None) -> Span:
    """The range to export (default: the whole thread); InvalidInput when it holds no row."""
    latest = group.latest_seq
    if latest == 0:
        raise InvalidInput(f"There is nothing to export: {group.name} has no messages yet.")
    start = 1 if first is None else first
    end = latest if last is None else min(last, latest)
    if start < 1:
        raise InvalidInput(f"Messages are numbered from 1; #{start} is not one.")
    if start > latest:
        raise InvalidInput(f"{group.name} has {latest} messages; there is no #{start}.")
    if start > end:
        raise InvalidInput(f"The range #{start}-#{end} is empty: its start is after its end.")
    return Span(start - 1, end)


class Record:
    """What an export reads: the group, its roster as it ever was, people's names, the rows."""

    def __init__(self, store: TranscriptStore, group: Group, rows: Span, *, page: int = PAGE) -> None:
        self.store = store
        self.group = group
        self.span = rows
        self.page = page
        self.agents: dict[int, Agent] = {}
        self.removed: dict[int, float | None] = {}
        self.people: dict[str, str] = {}  # user id -> name

    async def open(self) -> Record:
        for agent, removed_at in await self.store.record.roster_ever(self.group.id):
            self.agents[agent.id] = agent
            self.removed[agent.id] = removed_at
        self.people = {uid: name for name, uid in (await self.store.reading.people(self.group.people_scope)).items()}
        return self

    def agent_name(self, agent_id: int | None) -> str:
        agent = self.agents.get(agent_id) if agent_id is not None else None
        return agent.name if agent is not None else f"agent {agent_id}"

    async def entries(self) -> AsyncIterator[Entry]:
        store, gid = self.store, self.group.id
        picks: dict[int, deque[tuple[int, Decision]]] = {}
        current = 0  # the newest episode shown so far
        async for page in store.record.message_pages(gid, after=self.span.after, through=self.span.through,
                                                     size=self.page):
            decisions = await store.routing.decisions(gid, after=page[0].seq - 1, through=page[-1].seq)
            runs = await store.record.runs_by_id(m.source_run_id for m in page if m.source_run_id is not None)
            episodes = await store.record.episodes_by_id(m.episode_id for m in page if m.episode_id is not None)
            calls = await store.tools.tool_calls_by_run(m.source_run_id for m in page
                                                        if m.source_run_id is not None and m.author_type == "agent")
            regenerated = [m.seq for m in page if m.regenerated_at is not None]
            versions: dict[int, list[MessageVersion]] = {}
            for version in await store.thread.message_versions(gid, regenerated) if regenerated else ():
                versions.setdefault(version.seq, []).append(version)
            for message in page:
                run = runs.get(message.source_run_id) if message.source_run_id is not None else None
                opens = None
                if message.episode_id is not None and message.episode_id > current:
                    current = message.episode_id  # ids grow with time; a reply to an older task opens nothing
                    opens = episodes.get(current)
                picked = _picked_by(picks, message, run)
                decision = decisions.get(message.seq)
                if decision is not None:
                    for agent_id in decision.agent_ids:
                        picks.setdefault(agent_id, deque(maxlen=PICKS_KEPT)).append((message.seq, decision))
                earlier = None
                if message.episode_id is not None and message.episode_id < current:
                    older = episodes.get(message.episode_id)
                    earlier = older.task_seq if older is not None else None
                ran = tuple(calls.get(message.source_run_id, ())) if message.source_run_id is not None else ()
                yield Entry(message, decision, run, opens, picked, earlier, ran, tuple(versions.get(message.seq, ())))


def _picked_by(picks: dict[int, deque[tuple[int, Decision]]], message: Message, run: Run | None) -> Decision | None:
    """The newest decision at or before the run's snapshot that selected the row's author (a group
    run's, or a regenerate's over the same snapshot; an /ask answered with post:true was asked for, not picked)."""
    if message.author_type != "agent" or message.author_agent_id is None or run is None or run.kind == "direct":
        return None
    for seq, decision in reversed(picks.get(message.author_agent_id, ())):
        if seq <= run.snapshot_seq:
            return decision
    return None


def version_head(version: MessageVersion) -> str:
    """`earlier version 1 (run #3, 2025-01-02 10:11 UTC)`: a regenerated reply's text before."""
    run = f"run #{version.run_id}, " if version.run_id is not None else ""
    return f"earlier version {version.version} ({run}{when(version.created_at)})"


def versions_summary(versions: tuple[MessageVersion, ...]) -> str:
    """`regenerated: 2 earlier versions`."""
    return f"regenerated: {plural(len(versions), 'earlier version')}"


def plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def chosen(decision: Decision) -> str:
    return ", ".join(decision.agent_names) or ("TERMINATE" if decision.terminate else "nobody")


def tokens(usage: Usage) -> str:
    return (f"{usage.prompt_tokens:,} prompt / {usage.cached_tokens:,} cached / {usage.completion_tokens:,} completion"
            + (" (estimated)" if usage.estimated else ""))


# What the totals of every format count (the JSON schema's descriptions say the same).
RUNS_COUNTED = ("every run over these messages (its snapshot in the range): replies, failed and empty runs and "
                "private /ask answers included")


async def count_runs(record: Record, totals: Totals) -> None:
    """Add the runs over the range's messages and their tokens to `totals`: the runs a JSON export lists."""
    async for page in record.store.record.run_pages(record.group.id, after=record.span.after,
                                                    through=record.span.through,
                                                    size=record.page):
        for run in page:
            totals.runs += 1
            totals.usage = totals.usage + run.usage


def totals_line(totals: Totals) -> str:
    """The closing line of the HTML and Markdown exports: what was exported and what it cost."""
    return (f"{plural(totals.messages, 'message')}, {plural(totals.episodes, 'episode')}; "
            f"{plural(totals.runs, 'run')}, {RUNS_COUNTED}: {tokens(totals.usage)} tokens; "
            f"the selector, for these messages' routing: {tokens(totals.selector_usage)} tokens.")


def episode_line(episode: Episode) -> str:
    """`Episode 3 · task #12 · terminated · 4 agent messages · 1,234 tokens (200 cached)`."""
    turns = plural(episode.agent_turns, "agent message")
    return (f"Episode {episode.id} · task #{episode.task_seq} · {episode.status} · {turns} · "
            f"{episode.total_tokens:,} tokens ({episode.cached_tokens:,} cached)")


def author_label(message: Message) -> str:
    if message.author_type == "system" and message.tags.agent_ids:
        return " (schedule)"  # a schedule's task: the bot's row that tags the agent it runs
    return {"user": "", "agent": " (agent)", "system": " (notice)"}[message.author_type]


async def summaries_line(record: Record, totals: Totals) -> str:
    """'2 rolling summaries (what context windows cut): … tokens', or '' when the range has none;
    their usage is added to `totals`."""
    found = await record.store.summaries.context_summaries(record.group.id, after=record.span.after,
                                                           through=record.span.through)
    for _, usage, _ in found:
        totals.summary_usage = totals.summary_usage + usage
    if not found:
        return ""
    count = "1 rolling summary" if len(found) == 1 else f"{len(found):,} rolling summaries"
    return f"{count} (what context windows cut): {tokens(totals.summary_usage)} tokens"


def file_facts(file: SharedFile) -> str:
    """(image, 1280×720, 245 KB), (text, 30 KB, 30,120 characters), (file, application/pdf, 1.2 MB)."""
    parts = [{"image": "image", "text": "text", "other": "file"}[file.kind]]
    if file.kind == "image" and file.width and file.height:
        parts.append(f"{file.width}×{file.height}")
    if file.kind == "other" and file.content_type:
        parts.append(file.content_type)
    parts.append(size_text(file.size))
    if file.kind == "text" and file.chars:
        parts.append(plural(file.chars, "character"))
    if file.note:
        parts.append(file.note)
    return f"({', '.join(parts)})"
