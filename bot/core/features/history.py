"""The built-in tools `history_search(query)` and `history_read(from_seq, to_seq)` (SPEC §6b).

An agent granted them looks back in its group's own thread, also at what its context window
dropped, instead of every prompt carrying everything. Both are read-only (a call cut by a restart
is run again) and bounded: at most `SEARCH_HITS` rows found (the newest), at most `READ_ROWS` rows
read, each row's text cut to `ROW_CHARS`, and the whole result then cut by the tool loop's
`tool_result_max`. A deleted row shows as "(deleted)"; texts are masked (`bot.core.rules.secrets`).
Each row is one line `#seq [author] text`, the way the prompt shows the thread.
"""
from __future__ import annotations

from collections.abc import Sequence

from bot.core.models import Message, ToolOutput, ToolSpec
from bot.core.ports import HasThread, ToolContext
from bot.core.rules.attachments import brief_text
from bot.core.rules.secrets import mask

SEARCH = "history_search"
READ = "history_read"
SEARCH_HITS = 20  # rows history_search returns at most (the newest that match)
READ_ROWS = 50  # rows history_read returns at most
ROW_CHARS = 2_000  # characters of one row's text shown
QUERY_MAX = 200
SEARCH_SPEC = ToolSpec(
    SEARCH,
    "Search this group chat's whole history (also messages no longer in your context) for a word or "
    f"phrase (case-insensitive). Returns at most {SEARCH_HITS} matching messages, newest first, each with "
    "its number (#seq) for history_read.",
    {"type": "object", "properties": {"query": {"type": "string", "description": "The text to look for."}},
     "required": ["query"]},
    read_only=True, idempotent=True, timeout=30.0,
)
READ_SPEC = ToolSpec(
    READ,
    f"Read this group chat's messages #from_seq to #to_seq (at most {READ_ROWS} at a time), also those no "
    "longer in your context.",
    {"type": "object", "properties": {
        "from_seq": {"type": "integer", "description": "The first message's number (#seq)."},
        "to_seq": {"type": "integer", "description": "The last message's number (#seq)."}},
     "required": ["from_seq", "to_seq"]},
    read_only=True, idempotent=True, timeout=30.0,
)


def row_line(message: Message) -> str:
    """One row as history tools show it: `#seq [author] text`, "(deleted)" for a tombstone, masked and cut."""
    if message.deleted:
        return f"#{message.seq} [{message.author_name}] (deleted)"
    text = mask(" ".join(brief_text(message).split()))
    if len(text) > ROW_CHARS:
        text = f"{text[:ROW_CHARS]}… [cut]"
    return f"#{message.seq} [{message.author_name}] {text}"


def _whole(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("#").isdigit():
        return int(value.strip().lstrip("#"))
    return None


class HistoryTools:
    """The built-in source of history_search and history_read (`bot.core.ports.ToolSource`),
    offered to agents granted them; they read the group of the run (`ToolContext.group_id`)."""

    name = ""

    def __init__(self, store: HasThread) -> None:
        self.store = store

    def tools(self) -> tuple[ToolSpec, ...]:
        return (READ_SPEC, SEARCH_SPEC)

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        if tool == SEARCH:
            return await self.search(context.group_id, arguments.get("query"))
        return await self.read(context.group_id, arguments.get("from_seq"), arguments.get("to_seq"))

    async def search(self, group_id: int, query: object) -> ToolOutput:
        if not isinstance(query, str) or not query.strip():
            return ToolOutput('error: history_search needs a "query" (the text to look for).', error=True)
        query = " ".join(query.split())[:QUERY_MAX]
        found = await self.store.thread.search_messages(group_id, query, limit=SEARCH_HITS + 1)
        if not found:
            return ToolOutput(f"No message of this group contains {query!r}.")
        more = len(found) > SEARCH_HITS
        lines = [row_line(m) for m in found[:SEARCH_HITS]]
        head = (f"The newest {SEARCH_HITS} messages containing {query!r} (there are more; search for something "
                "narrower):" if more else f"{len(lines)} message(s) containing {query!r}, newest first:")
        return ToolOutput("\n".join([head, *lines]))

    async def read(self, group_id: int, start: object, end: object) -> ToolOutput:
        first, last = _whole(start), _whole(end)
        if first is None or last is None:
            return ToolOutput('error: history_read needs "from_seq" and "to_seq" (whole message numbers).',
                              error=True)
        first, last = max(1, min(first, last)), max(first, last)
        cut = last - first + 1 > READ_ROWS
        if cut:
            last = first + READ_ROWS - 1
        rows: Sequence[Message] = await self.store.thread.messages(group_id, after=first - 1, through=last)
        if not rows:
            return ToolOutput(f"There are no messages #{first} to #{last} in this group.")
        lines = [row_line(m) for m in rows]
        if cut:
            lines.append(f"[only {READ_ROWS} messages are read at a time: go on from #{last + 1}]")
        return ToolOutput("\n".join(lines))
