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
from collections.abc import Callable
from typing import Protocol

from bot.core.errors import LLMError
from bot.core.features.context import summary_line
from bot.core.features.reading import within_budget
from bot.core.models import ChatMessage, ContextSummary, Group
from bot.core.ports import LLM, SummaryStore, ThreadStore, TokenCounter
from bot.core.rules.prompts import fill, render_thread

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

WORDS = 120  # the summary's length asked for
MAX_TOKENS = 300  # the summary call's output bound
INPUT_BUDGET = 6000  # tokens of cut rows one summary call reads (the newest; older ones are left out)
MIN_WINDOW = 1000  # tokens: a smaller window has no room for a summary (the selector's, by default)
NO_NOTES = "(none yet: this is the start of the conversation)"
FORGOTTEN = 1024  # failed windows remembered (not tried again in this process)


class SummarizedStore(SummaryStore, ThreadStore, Protocol):
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

    def source(self, group: Group) -> GroupSummaries:
        return GroupSummaries(self, group)

    @staticmethod
    def reserve() -> int:
        """The longest line a summary takes in a thread (its text is at most MAX_TOKENS)."""
        return MAX_TOKENS + 16

    async def through(self, group: Group, seq: int) -> ContextSummary | None:
        """The summary of rows 1..`seq`: stored, or made now (once); None when it cannot be had."""
        stored = await self.store.context_summary(group.id, through=seq)
        if stored is not None and stored.through == seq:
            return stored
        llm, counter = self.llm, self.counter
        if llm is None or counter is None or (group.id, seq) in self._failed:
            return None
        async with self._locks.setdefault(group.id, asyncio.Lock()):
            stored = await self.store.context_summary(group.id, through=seq)  # made meanwhile?
            if stored is not None and stored.through == seq:
                return stored
            made = await self._write(llm, counter, group, seq, stored)
        if made is None:
            self._failed[(group.id, seq)] = None
            if len(self._failed) > FORGOTTEN:
                self._failed.popitem(last=False)
        return made

    async def _write(self, llm: LLM, counter: TokenCounter, group: Group, seq: int,
                     previous: ContextSummary | None) -> ContextSummary | None:
        after = previous.through if previous is not None else 0
        # Only the newest INPUT_BUDGET tokens of rows after..seq are read (each row costs at least a token).
        first = max(after, seq - INPUT_BUDGET)
        rows, left_out = within_budget(await self.store.messages(group.id, after=first, through=seq), INPUT_BUDGET)
        omitted = left_out + first - after
        prompt = fill(SUMMARY_PROMPT, previous=previous.text if previous is not None else NO_NOTES,
                      thread=render_thread(rows, omitted), words=str(WORDS))
        model = self.model(group)
        try:
            completion = await llm.complete([ChatMessage("user", prompt)], model=model, max_tokens=MAX_TOKENS,
                                            cache_key=f"roundtable-{group.id}-summary")
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
        await self.store.save_context_summary(group.id, summary, completion.usage)
        log.info("group=%s: summarised rows %d-%d (%d read) in %d tokens (%d prompt, %d cached)",
                 group.id, after + 1, seq, len(rows), completion.usage.completion_tokens,
                 completion.usage.prompt_tokens, completion.usage.cached_tokens)
        return summary


class GroupSummaries:
    """`bot.core.features.context.SummarySource` for one group."""

    def __init__(self, summaries: Summaries, group: Group) -> None:
        self.summaries = summaries
        self.group = group

    @property
    def reserve(self) -> int:
        return self.summaries.reserve()

    @property
    def min_budget(self) -> int:
        return MIN_WINDOW

    async def through(self, seq: int) -> ContextSummary | None:
        return await self.summaries.through(self.group, seq)
