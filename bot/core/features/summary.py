"""Rolling summaries: what a prompt's window cut, in a few lines (SPEC §6, seed 000: "trim the
oldest replies or summarise them").

When a window moves (an agent's, or the selector's when it is at least MIN_WINDOW tokens:
`bot.core.features.context`), the rows it cut are summarised once, by the group's summary model
(ROUNDTABLE_SUMMARY_MODEL, else the selector's), and stored per group with the last row it
covers. Every later prompt whose window starts right after that row reuses it, until the
window moves again. Summaries roll: the summary
through row T rewrites the newest stored one (through P < T) with rows P+1..T, so each call
reads one step of the thread, not the whole history (its input is bounded by INPUT_BUDGET
tokens of rows, the newest kept; its output by MAX_TOKENS). The agents' windows and the
selector's share the chain: a summary of rows 1..T stands for them in any window that starts
at T+1.

When it is made: on the call that first finds the window moved, before that call's prompt
is sent (its turn waits for one summary call), so every prompt over the same window holds
the same summary and the provider's cache keeps hitting; the turns between moves never
wait. A summary call that fails (or answers nothing) leaves that window without a summary,
as before summaries existed ("(N earlier messages omitted)"), never a failed turn; it is not
tried again for the same window in this process (the next move tries afresh).

Cost: each call is recorded with the summary (prompt / cached / completion tokens, model)
and shows as the 'rolling summary' line of `/roundtable usage` and in exports.
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import LLMError
from bot.core.features.context import Trimmed, group_cache_key, group_header, plain_files, summary_line
from bot.core.features.reading import within_budget
from bot.core.features.tasks import Tasks
from bot.core.models import Agent, ChatMessage, ContextSummary, Group, Message
from bot.core.ports import LLM, HasSummaries, HasThread, TokenCounter
from bot.core.rules.prompts import fill, render_thread, shared_messages

log = logging.getLogger(__name__)

SUMMARY_PROMPT = """\
You keep the running notes of a group chat whose oldest messages no longer fit in its participants' prompts.

<notes>
{{previous}}
</notes>

<conversation>
{{thread}}
</conversation>

Rewrite the notes so they also cover the conversation above, in at most {{words}} words: what
was asked, what was decided or agreed (keep names, figures and prices), what is still open or
disputed, and who said it. Use only what the notes and the conversation say. Reply with the notes only."""

# The shared layout's summary call (`prompt_layout: shared`): it sends the window the group's last prompts
# held (the same bytes, so the provider has them cached: only this part is new), then this.
SUMMARY_PART = """\
You keep the running notes of a group chat whose oldest messages no longer fit in its participants' prompts.
{{notes}}Rewrite the notes so they also cover the conversation above through its message from [{{author}}] that
begins "{{opening}}" ({{count}} messages), in at most {{words}} words: what was asked, what was decided or agreed
(keep names, figures and prices), what is still open or disputed, and who said it. Leave out what comes after
that message. Use only what the notes and the conversation say. Reply with the notes only."""
OPENING_CHARS = 60  # of the last message a summary covers, quoted to point at it

WORDS = 120  # the summary's length asked for
MAX_TOKENS = 300  # the summary call's output bound
INPUT_BUDGET = 6000  # tokens of cut rows one summary call reads (the newest; older ones are left out)
MIN_WINDOW = 1000  # tokens: a smaller window has no room for a summary (the selector's, by default)
NO_NOTES = "(none yet: this is the start of the conversation)"
FORGOTTEN = 1024  # failed windows remembered (not tried again in this process)


class SummarizedStore(HasSummaries, HasThread, Protocol):
    """The rolling summaries and the rows they summarise."""


class Summaries:
    """Rolling summaries for an engine's groups: `source(group)` is what `bot.core.features.context.load_thread` asks.

    `Summaries.stored(store)` only reads stored summaries (replay: nothing is written, no model is called)."""

    def __init__(self, store: SummarizedStore, llm: LLM | None, counter: TokenCounter | None,
                 model: Callable[[Group], str | None] = lambda group: None) -> None:
        self.store = store
        self.llm = llm
        self.counter = counter
        self.model = model  # the model that writes a group's summaries (None: the LLM's default)
        self._failed: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._locks: dict[int, asyncio.Lock] = {}

    @classmethod
    def stored(cls, store: SummarizedStore) -> Summaries:
        """Summaries that are only read, never made."""
        return cls(store, None, None)

    def source(self, group: Group, roster: Sequence[Agent] = (), tasks: Tasks | None = None) -> GroupSummaries:
        """What `load_thread` asks for `group`'s summaries. Under the shared layout, `roster` and `tasks`
        make the prompts' shared header, so a summary call opens with the bytes the group's last prompts did."""
        frame = None
        if group.settings.prompt_layout == "shared":
            tasks = tasks or Tasks(None)
            show = plain_files(group).text
            frame = Frame(group_header(group, roster), tasks.slot(show), show, frozenset(t.seq for t in tasks.all))
        return GroupSummaries(self, group, frame)

    @staticmethod
    def reserve() -> int:
        """The longest line a summary takes in a thread (its text is at most MAX_TOKENS)."""
        return MAX_TOKENS + 16

    async def through(self, group: Group, seq: int, frame: Frame | None = None,
                      upto: int | None = None) -> ContextSummary | None:
        """The summary of rows 1..`seq`: stored, or made now (once); None when it cannot be had.
        `frame` (shared layout): the call sends the window through row `upto` as the group's prompts did."""
        stored = await self.store.summaries.context_summary(group.id, through=seq)
        if stored is not None and stored.through == seq:
            return stored
        llm, counter = self.llm, self.counter
        if llm is None or counter is None or (group.id, seq) in self._failed:
            return None
        async with self._locks.setdefault(group.id, asyncio.Lock()):
            stored = await self.store.summaries.context_summary(group.id, through=seq)  # made meanwhile?
            if stored is not None and stored.through == seq:
                return stored
            if frame is not None and upto is not None and upto >= seq:
                made = await self._write_shared(llm, counter, group, seq, stored, frame, upto)
            else:
                made = await self._write(llm, counter, group, seq, stored)
        if made is None:
            self._failed[(group.id, seq)] = None
            if len(self._failed) > FORGOTTEN:
                self._failed.popitem(last=False)
        return made

    async def _write_shared(self, llm: LLM, counter: TokenCounter, group: Group, seq: int,
                            previous: ContextSummary | None, frame: Frame, upto: int) -> ContextSummary | None:
        """The shared layout's summary call: the window that started after `previous` (the one the group's
        prompts held until now), through row `upto`, in the shared layout's bytes; then `SUMMARY_PART`."""
        after = previous.through if previous is not None else 0
        rows = tuple(await self.store.thread.messages(group.id, after=after, through=upto))
        covered = [m for m in rows if m.seq <= seq]
        if not covered:
            return None
        references = frozenset(t for t in frame.tasks if after < t <= upto)
        omitted = after - sum(1 for t in frame.tasks if t <= after)  # as `find_window` counts them (tasks apart)
        thread = Trimmed(rows, omitted, (), references, previous).render(frame.show)
        last = covered[-1]
        opening = " ".join(frame.show(last).split())
        opening = opening if len(opening) <= OPENING_CHARS else opening[:OPENING_CHARS - 1] + "…"
        notes = ("The notes so far are the summary at the top of the conversation. " if previous is not None
                 else "There are no notes yet. ")
        own = fill(SUMMARY_PART, notes=notes, author=last.author_name, opening=opening, count=str(len(covered)),
                   words=str(WORDS))
        messages = shared_messages(frame.header, frame.task, thread, own)
        return await self._call(llm, counter, group, seq, after, messages, 0, len(covered), group_cache_key(group))

    async def _write(self, llm: LLM, counter: TokenCounter, group: Group, seq: int,
                     previous: ContextSummary | None) -> ContextSummary | None:
        after = previous.through if previous is not None else 0
        # Only the newest INPUT_BUDGET tokens of rows after..seq are read (each row costs at least a token).
        first = max(after, seq - INPUT_BUDGET)
        rows, left_out = within_budget(await self.store.thread.messages(group.id, after=first, through=seq),
                                       INPUT_BUDGET)
        omitted = left_out + first - after
        prompt = fill(SUMMARY_PROMPT, previous=previous.text if previous is not None else NO_NOTES,
                      thread=render_thread(rows, omitted), words=str(WORDS))
        return await self._call(llm, counter, group, seq, after, [ChatMessage("user", prompt)], omitted, len(rows),
                                f"roundtable-{group.id}-summary")

    async def _call(self, llm: LLM, counter: TokenCounter, group: Group, seq: int, after: int,
                    messages: list[ChatMessage], omitted: int, read: int, key: str) -> ContextSummary | None:
        """Ask for the summary of rows after..seq with `messages`; store it; None when the call fails."""
        model = self.model(group)
        try:
            completion = await llm.complete(messages, model=model, max_tokens=MAX_TOKENS, cache_key=key)
        except LLMError as exc:
            log.warning("group=%s: the summary of rows %d-%d failed (%s); prompts leave them out",
                        group.id, after + 1, seq, exc)
            return None
        text = " ".join(completion.text.split())
        if not text:
            log.warning("group=%s: the summary of rows %d-%d came back empty; prompts leave them out",
                        group.id, after + 1, seq)
            return None
        summary = ContextSummary(seq, after, text, omitted=omitted, model=completion.model or model or "",
                                 provider=completion.provider)
        summary = ContextSummary(seq, after, text, counter.count(summary_line(summary, seq)), omitted,
                                 summary.model, provider=summary.provider)
        await self.store.summaries.save_context_summary(group.id, summary, completion.usage)
        log.info("group=%s: summarised rows %d-%d (%d read) in %d tokens (%d prompt, %d cached)",
                 group.id, after + 1, seq, read, completion.usage.completion_tokens,
                 completion.usage.prompt_tokens, completion.usage.cached_tokens)
        return summary


@dataclass(frozen=True)
class Frame:
    """How a group's prompts under the shared layout open and show rows: its header
    (`bot.core.features.context.group_header`), its task chain, a row's text, and the task rows shown as a
    reference line."""

    header: str
    task: str  # the task chain as the prompts show it
    show: Callable[[Message], str]
    tasks: frozenset[int]


class GroupSummaries:
    """`bot.core.features.context.SummarySource` for one group."""

    def __init__(self, summaries: Summaries, group: Group, frame: Frame | None = None) -> None:
        self.summaries = summaries
        self.group = group
        self.frame = frame

    @property
    def reserve(self) -> int:
        return self.summaries.reserve()

    @property
    def min_budget(self) -> int:
        return MIN_WINDOW

    async def through(self, seq: int, upto: int) -> ContextSummary | None:
        return await self.summaries.through(self.group, seq, self.frame, upto)
