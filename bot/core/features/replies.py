"""Replies to messages a prompt no longer holds, quoted (SPEC §6, as llmcord follows reply chains).

A person's Discord reply is stored with the seq of the group's row it answers (`reply_to_seq`). When an
agent's prompt shows a reply (in its thread window or in its `<task>`) but no longer shows the message
it answers (the window was cut past it), that message comes back as a quote, with up to CHAIN messages
of its own reply chain (what it answered, and so on), oldest first, each with its author. Agents'
posts carry no `reply_to_seq` (agents answer by name, never with a Discord reply), so a chain ends at
an agent's post, at a message the prompt shows anyway (it is in view), at a seq the store has not got,
or after CHAIN steps.

Where it goes: one more user message at the very end of the agent's messages (the "replied-to" block),
after the thread. The prompt's prefix (system message, Participant prompt, the episode's newer rows)
stays byte for byte what it was, so the provider's prompt cache keeps hitting; only the block is read
uncached. Its cost counts against the context budget: the thread is fitted again with that much less
room (`load_thread(..., quoted=...)`; the first fitting, made to find the replies, asks the model for no
rolling summary), and the block is kept under a quarter of the budget (the oldest replies' quotes go
first). At most QUOTED_REPLIES replies (the newest) get their quote.

What a quoted row shows is what the thread would: a tombstone reads "(deleted)" (never its text), an
edited row ends with "(edited)", a file is one short line; each row is cut at QUOTE_CHARS characters
and masked (`bot.core.rules.secrets`). A reply to a message the store does not hold (older than the
bot's setup, another channel's) has no `reply_to_seq`: nothing is quoted for it.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from bot.core.errors import NotFound
from bot.core.features.context import SummarySource, Trimmed
from bot.core.models import ContextSummary, Message
from bot.core.ports import HasThread, TokenCounter
from bot.core.rules.attachments import brief_text
from bot.core.rules.prompts import thread_line
from bot.core.rules.secrets import mask

CHAIN = 5  # messages of the replied-to message's own reply chain quoted with it
QUOTED_REPLIES = 3  # the newest replies in a prompt that get their quote
QUOTE_CHARS = 400  # of each quoted row's text
SHARE = 4  # the block stays under budget // SHARE tokens
HEADER = "(Replies in the conversation above answer earlier messages it no longer shows; they are quoted here.)"


@dataclass(frozen=True)
class Quote:
    """A reply shown in the prompt and the chain it answers: oldest first, the replied-to row last."""

    reply: Message
    chain: tuple[Message, ...]


def chain_of(target: int, rows: Mapping[int, Message], held: Collection[int],
             limit: int = CHAIN) -> tuple[Message, ...]:
    """The replied-to row `target` and up to `limit` rows of its reply chain, oldest first (pure).

    `rows`: the rows known by seq; the walk stops at a seq not among them, at one the prompt shows
    (`held`), at a row that replies to nothing, and at a loop."""
    chain: list[Message] = []
    seen: set[int] = set()
    seq: int | None = target
    while seq is not None and seq not in held and seq not in seen and seq in rows and len(chain) <= limit:
        seen.add(seq)
        row = rows[seq]
        chain.append(row)
        seq = row.reply_to_seq
    return tuple(reversed(chain))


def replies_to_quote(shown: Sequence[Message], held: Collection[int], most: int = QUOTED_REPLIES) -> list[Message]:
    """The rows in `shown` that reply to a row the prompt does not hold: the newest `most`, oldest first."""
    seen: set[int] = set()
    out = []
    for m in sorted(shown, key=lambda m: m.seq):
        if m.seq in seen or m.deleted or m.reply_to_seq is None or m.reply_to_seq in held:
            continue
        seen.add(m.seq)
        out.append(m)
    return out[-most:] if most > 0 else []


def quoted_text(message: Message, limit: int = QUOTE_CHARS) -> str:
    """One quoted row's text: as the thread shows it (a tombstone "(deleted)"), cut and masked."""
    text = brief_text(message)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return mask(text)


def opening(message: Message, limit: int = 60) -> str:
    """The start of a reply's own text, naming which reply a quote belongs to."""
    text = " ".join(message.text.split())
    return mask(text if len(text) <= limit else text[: limit - 1] + "…")


def render(quotes: Sequence[Quote]) -> str:
    """The replied-to block: per reply, a line naming it, then its chain as `> [author] text` lines."""
    if not quotes:
        return ""
    parts = [HEADER]
    for quote in quotes:
        parts.append(f'{quote.reply.author_name}\'s reply "{opening(quote.reply)}" answers'
                     + (" (with what that message answered, oldest first):" if len(quote.chain) > 1 else ":"))
        for row in quote.chain:
            line = thread_line(row.author_name, quoted_text(row))
            parts.append("\n".join(f"> {piece}" for piece in line.split("\n")))
    return "\n".join(parts)


async def load_quotes(store: HasThread, group_id: int, shown: Sequence[Message], held: Collection[int],
                      most: int = QUOTED_REPLIES) -> tuple[Quote, ...]:
    """The quotes of the replies in `shown` whose replied-to row is not in `held` (a few indexed lookups)."""
    rows: dict[int, Message] = {}
    quotes = []
    for reply in replies_to_quote(shown, held, most):
        seq: int | None = reply.reply_to_seq
        steps = 0
        while seq is not None and seq not in held and seq not in rows and steps <= CHAIN:
            try:
                rows[seq] = await store.thread.get_message(group_id, seq)
            except NotFound:
                break
            seq, steps = rows[seq].reply_to_seq, steps + 1
        chain = chain_of(reply.reply_to_seq or 0, rows, held)
        if chain:
            quotes.append(Quote(reply, chain))
    return tuple(quotes)


def held_by(trimmed: Trimmed, tasks: Sequence[Message]) -> tuple[list[Message], set[int]]:
    """The rows a prompt shows (its window and its tasks) and their seqs."""
    shown = [*trimmed.shown, *tasks]
    return shown, {m.seq for m in shown}


class Deferred:
    """A window's summary source that writes nothing: it notes which summary the window asked for, so
    a first fitting that may be thrown away costs no summary call (`quoted_thread`)."""

    def __init__(self, source: SummarySource) -> None:
        self.source = source
        self.asked: tuple[int, int] | None = None  # (seq, upto) of the summary the window asked for

    @property
    def reserve(self) -> int:
        return self.source.reserve

    @property
    def min_budget(self) -> int:
        return self.source.min_budget

    async def through(self, seq: int, upto: int) -> ContextSummary | None:
        self.asked = (seq, upto)
        return None


async def quoted_thread(store: HasThread, counter: TokenCounter, group_id: int, *, budget: int,
                        tasks: Sequence[Message], summaries: SummarySource | None = None,
                        load: Callable[[int, SummarySource | None], Awaitable[Trimmed]]) -> tuple[Trimmed, str]:
    """The thread (`load(quoted, summaries)`: `load_thread` with `quoted` tokens kept free) and its
    replied-to block ("" when no reply needs one). The block's cost counts against `budget`: when there
    is one, the thread is fitted again with that much less room, and the quotes are read over that
    window. The first fitting writes no summary (the second may need another one)."""
    deferred = Deferred(summaries) if summaries is not None else None
    trimmed = await load(0, deferred)
    shown, held = held_by(trimmed, tasks)
    quotes = await load_quotes(store, group_id, shown, held)
    if not quotes:
        if summaries is not None and deferred is not None and deferred.asked is not None:
            trimmed = replace(trimmed, summary=await summaries.through(*deferred.asked))
        return trimmed, ""
    block = fitted(quotes, counter, budget)
    trimmed = await load(counter.count(block) if block else 0, summaries)
    shown, held = held_by(trimmed, tasks)
    return trimmed, fitted(await load_quotes(store, group_id, shown, held), counter, budget)


def fitted(quotes: Sequence[Quote], counter: TokenCounter, budget: int) -> str:
    """The block of `quotes`, the oldest replies' quotes left out while it costs over budget // SHARE."""
    quotes = list(quotes)
    while quotes:
        block = render(quotes)
        if counter.count(block) <= budget // SHARE:
            return block
        quotes.pop(0)
    return ""
