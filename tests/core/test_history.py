"""history_search / history_read (SPEC §6b): their bounds and their lines, over an in-memory thread."""
from __future__ import annotations

import pytest

from bot.core.features.history import READ_ROWS, ROW_CHARS, SEARCH_HITS, HistoryTools
from bot.core.features.tools import RunContext
from bot.core.models import Message
from bot.core.rules.secrets import SECRETS

SECRET = "sk-live-history-secret-9f8e7d6c5b4a"


class Thread:
    """What HistoryTools reads of a ThreadStore: `messages` and `search_messages`."""

    def __init__(self, rows: list[Message]) -> None:
        self.rows = rows

    @property
    def thread(self) -> Thread:
        """The store's thread part: this fake is the store and its thread."""
        return self

    async def messages(self, group_id: int, *, after: int = 0, through: int | None = None) -> list[Message]:
        return [m for m in self.rows if m.group_id == group_id and after < m.seq <= (through or 10**9)]

    async def search_messages(self, group_id: int, query: str, *, limit: int) -> list[Message]:
        found = [m for m in self.rows if m.group_id == group_id and not m.deleted and query.lower() in m.text.lower()]
        return found[::-1][:limit]


def row(seq: int, text: str, group: int = 1, deleted: bool = False) -> Message:
    return Message(group, seq, "user", "alice", "" if deleted else text, deleted_at=1.0 if deleted else None)


async def call(tools: HistoryTools, tool: str, **arguments: object) -> tuple[str, bool]:
    out = await tools.call(tool, arguments, RunContext(1, 1, 1))
    return out.text, out.error


async def test_read_is_bounded_and_shows_deleted_rows_and_masks() -> None:
    SECRETS.register(SECRET)
    rows = [row(i, f"line {i}") for i in range(1, 121)]
    rows[1] = row(2, "", deleted=True)
    rows[2] = row(3, f"key {SECRET} " + "z" * (ROW_CHARS + 50))
    tools = HistoryTools(Thread([*rows, row(1, "another group", group=2)]))  # type: ignore[arg-type]
    text, error = await call(tools, "history_read", from_seq=1, to_seq=120)
    lines = text.splitlines()
    assert not error and len(lines) == READ_ROWS + 1
    assert lines[:2] == ["#1 [alice] line 1", "#2 [alice] (deleted)"]
    assert lines[2].startswith("#3 [alice] key *** zzz") and lines[2].endswith("… [cut]") and SECRET not in text
    assert lines[-1] == f"[only {READ_ROWS} messages are read at a time: go on from #{READ_ROWS + 1}]"
    assert await call(tools, "history_read", from_seq="#7", to_seq=5) == (
        "#5 [alice] line 5\n#6 [alice] line 6\n#7 [alice] line 7", False)
    assert await call(tools, "history_read", from_seq=500, to_seq=501) == (
        "There are no messages #500 to #501 in this group.", False)
    text, error = await call(tools, "history_read", from_seq="one", to_seq=2)
    assert error and "whole message numbers" in text


@pytest.mark.parametrize("query, head, count, newest", [
    ("line 1", f"The newest {SEARCH_HITS} messages containing 'line 1' (there are more", SEARCH_HITS, 120),
    ("LINE 119", "1 message(s) containing 'LINE 119', newest first:", 1, 119),
])
async def test_search_is_bounded_newest_first(query: str, head: str, count: int, newest: int) -> None:
    tools = HistoryTools(Thread([row(i, f"line {i}") for i in range(1, 121)]))  # type: ignore[arg-type]
    text, error = await call(tools, "history_search", query=query)
    lines = text.splitlines()
    assert not error and lines[0].startswith(head) and len(lines) == count + 1
    assert lines[1] == f"#{newest} [alice] line {newest}"


async def test_search_says_when_nothing_matches_or_no_query() -> None:
    tools = HistoryTools(Thread([row(1, "hello")]))  # type: ignore[arg-type]
    assert await call(tools, "history_search", query="zebra") == ("No message of this group contains 'zebra'.", False)
    text, error = await call(tools, "history_search", query="  ")
    assert error and 'needs a "query"' in text
