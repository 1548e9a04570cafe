"""What did I miss? Read cursors for people (SPEC §9): /unread, /inbox, /read, /catchup.

Each person has one `seen_through` per group, stored only once they act (a
post, a reaction, /read, a Mark read button). Reading an answer never moves
it: the answers offer a `MarkRead` that the surface shows as a button (Discord)
or names as `/read` (the console). "Tags you" means a row's snapshot of tags
holds the person's id (`@name` of a known person, or a Discord mention), or
`@user` while the person is one of the group's operators.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import LLMError, UserFacingError
from bot.core.models import ChatMessage, Group, Message, Summary
from bot.core.ports import LLM, HasGroups, HasReading, HasThread
from bot.core.rules.attachments import said
from bot.core.rules.card import Card, Field, MarkRead
from bot.core.rules.prompts import fill, render_thread

log = logging.getLogger(__name__)

TAGGED_SHOWN = 10  # rows that tag you, listed by /unread and /catchup
INBOX_LIMIT = 50  # rows listed by /inbox
INBOX_PAGE = 8
EXCERPT = 120
CATCHUP_BUDGET = 3000  # tokens of unread rows a summary reads (the oldest are left out)
CATCHUP_WORDS = 150
CATCHUP_MAX_TOKENS = 400
SUMMARY_FRESH = 600.0  # seconds a stored summary of the same rows is served again

CATCHUP_PROMPT = """\
You are summarising a group chat for {{person}}, who has not read it since message #{{first}}.

<conversation>
{{thread}}
</conversation>

In at most {{words}} words, tell {{person}} what they missed: who asked what, what the
agents concluded, and what they still disagree on. Name the speakers. Use only what
the conversation says."""

Link = Callable[[Group, Message], str]


@dataclass(frozen=True)
class Reader:
    """The person who asks: their id (Discord user id, or the console's --as name) and name."""

    user_id: str
    name: str


def elsewhere(link: str, message: Message, sep: str = " ") -> str:
    """The link after its text, unless it only repeats the #seq already shown."""
    return "" if link == f"#{message.seq}" else sep + link


def excerpt(text: str, limit: int = EXCERPT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


class CatchUpStore(HasGroups, HasReading, HasThread, Protocol):
    """What reading asks of the store: the group, people's read cursors and catch-up summaries, the rows."""


class Reading:
    def __init__(self, store: CatchUpStore, llm: LLM, model: Callable[[Group], str | None]) -> None:
        self.store = store
        self.llm = llm
        self.model = model  # the model that writes summaries for a group

    async def seen(self, group: Group, reader: Reader) -> int:
        return await self.store.reading.get_seen(group.id, reader.user_id) or 0

    async def unread_count(self, group: Group, reader: Reader) -> int:
        return max(0, group.latest_seq - await self.seen(group, reader))

    async def unread(self, group: Group, reader: Reader, operator: bool, link: Link) -> Card | str:
        group = await self.store.groups.get_group(group.id)
        seen = await self.seen(group, reader)
        count = group.latest_seq - seen
        if count <= 0:
            return f"Nothing new in {group.name}: you have read everything."
        first = await self.store.thread.get_message(group.id, seen + 1)
        tagged = await self.store.reading.tagging(group.id, reader.user_id, after=seen, operators=operator,
                                                  limit=TAGGED_SHOWN + 1)
        start = f"#{first.seq} by {first.author_name}{elsewhere(link(group, first), first, ': ')}"
        fields = [Field("start reading at", start, inline=False)]
        if tagged:
            fields.append(Field("tag you", self._tag_lines(group, tagged, link), inline=False))
        s = "" if count == 1 else "s"
        return Card(f"{count} unread message{s} in {group.name}", fields=tuple(fields),
                    tone="warning" if tagged else "neutral", mark_read=MarkRead(((group.id, group.latest_seq),)))

    def _tag_lines(self, group: Group, tagged: Sequence[Message], link: Link) -> str:
        lines = [f"#{m.seq} {m.author_name}: {excerpt(said(m), 60)}{elsewhere(link(group, m), m)}"
                 for m in tagged[:TAGGED_SHOWN]]
        if len(tagged) > TAGGED_SHOWN:
            lines.append("… and more: /inbox lists them all")
        return "\n".join(lines)

    async def inbox(self, groups: Sequence[tuple[Group, bool]], reader: Reader, link: Link) -> Card | str:
        """Rows that tag the reader after their cursor, across `groups` ((group, is the reader
        one of its operators)), oldest first."""
        found: list[tuple[Group, Message]] = []
        for group, operator in groups:
            seen = await self.seen(group, reader)
            rows = await self.store.reading.tagging(group.id, reader.user_id, after=seen, operators=operator,
                                                    limit=INBOX_LIMIT)
            found.extend((group, m) for m in rows)
        if not found:
            return "Nobody tagged you since you last read."
        found.sort(key=lambda item: (item[1].created_at, item[0].id, item[1].seq))
        shown = found[:INBOX_LIMIT]
        newest: dict[int, int] = {}
        for group, message in shown:
            newest[group.id] = max(newest.get(group.id, 0), message.seq)
        fields = tuple(Field(f"{m.author_name} in {g.name} (#{m.seq})",
                             excerpt(said(m)) + elsewhere(link(g, m), m, "\n"), inline=False) for g, m in shown)
        more = len(found) - len(shown)
        title = "1 message tags you" if len(shown) == 1 else f"{len(shown)} messages tag you"
        return Card(title, fields=fields, tone="warning",
                    footer=f"{more} older ones are not shown" if more else "",
                    mark_read=MarkRead(tuple(sorted(newest.items()))), page_size=INBOX_PAGE)

    async def read(self, group: Group, reader: Reader) -> str:
        group = await self.store.groups.get_group(group.id)
        await self.store.reading.mark_seen(group.id, reader.user_id, group.latest_seq)
        return f"Marked {group.name} read through #{group.latest_seq}."

    async def mark(self, marks: Sequence[tuple[int, int]], reader: Reader) -> None:
        """The Mark read button: each group's cursor through its seq (clamped, never back)."""
        for group_id, seq in marks:
            await self.store.reading.mark_seen(group_id, reader.user_id, seq)

    async def catchup(self, group: Group, reader: Reader, operator: bool, link: Link) -> Card | str:
        group = await self.store.groups.get_group(group.id)
        seen = await self.seen(group, reader)
        if group.latest_seq <= seen:
            return f"Nothing new in {group.name}: you have read everything."
        summary = await self.summary(group, reader, seen, group.latest_seq)
        tagged = await self.store.reading.tagging(group.id, reader.user_id, after=seen, operators=operator,
                                                  limit=TAGGED_SHOWN + 1)
        fields = (Field("waiting for you", self._tag_lines(group, tagged, link), inline=False),) if tagged else ()
        footer = (f"The oldest {summary.omitted} unread messages were left out to keep it short."
                  if summary.omitted else "")
        return Card(f"What you missed in {group.name} (#{seen + 1}-#{group.latest_seq})", summary.text,
                    fields, footer=footer, mark_read=MarkRead(((group.id, group.latest_seq),)))

    async def summary(self, group: Group, reader: Reader, after: int, through: int) -> Summary:
        """A summary of rows after..through: stored when the same rows were summarised lately."""
        stored = await self.store.reading.get_summary(group.id, after, through, newer_than=time.time() - SUMMARY_FRESH)
        if stored is not None:
            return stored
        # Each row costs at least one token, so none older than the newest CATCHUP_BUDGET rows can
        # fit: those are not read at all (seqs have no gaps), however much is unread.
        first = max(after, through - CATCHUP_BUDGET)
        rows = await self.store.thread.messages(group.id, after=first, through=through)
        kept, omitted = within_budget(rows, CATCHUP_BUDGET)
        omitted += first - after
        prompt = fill(CATCHUP_PROMPT, person=reader.name, first=str(after + 1), words=str(CATCHUP_WORDS),
                      thread=render_thread(kept, omitted))
        model = self.model(group)
        try:
            completion = await self.llm.complete([ChatMessage("user", prompt)], model=model,
                                                 max_tokens=CATCHUP_MAX_TOKENS)
        except LLMError as exc:
            log.warning("group=%s catch-up summary failed: %s", group.id, exc)
            raise UserFacingError(f"Could not write the summary: {exc.public}. Nothing was marked read.") from None
        text = completion.text.strip() or "(the model wrote nothing)"
        summary = Summary(after, through, text, omitted, completion.model, provider=completion.provider)
        await self.store.reading.save_summary(group.id, summary, prompt_tokens=completion.usage.prompt_tokens,
                                              completion_tokens=completion.usage.completion_tokens)
        return summary


def within_budget(rows: Sequence[Message], budget: int) -> tuple[list[Message], int]:
    """The newest rows whose token counts fit `budget` (at least one); how many older ones were left out."""
    total, start = 0, len(rows)
    while start > 0 and (start == len(rows) or total + max(rows[start - 1].token_count, 1) <= budget):
        total += max(rows[start - 1].token_count, 1)
        start -= 1
    return list(rows[start:]), start
