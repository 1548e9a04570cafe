"""The replied-to block's pure parts (bot.core.features.replies): which replies get a quote, the chain
each brings (oldest first, at most the replied-to row and five of its chain), and how it reads."""
from __future__ import annotations

import pytest

from bot.core.features.context import load_thread
from bot.core.features.replies import (
    CHAIN,
    HEADER,
    QUOTE_CHARS,
    Quote,
    chain_of,
    fitted,
    quoted_text,
    quoted_thread,
    render,
    replies_to_quote,
)
from bot.core.models import Message
from bot.core.rules.secrets import SECRETS
from tests.core.test_context import Notes, Thread


def row(seq: int, reply_to: int | None = None, *, author: str = "alice", text: str = "",
        deleted: bool = False, edited: bool = False) -> Message:
    return Message(1, seq, "user" if author in ("alice", "bob") else "agent", author, "" if deleted else
                   (text or f"message {seq}"), reply_to_seq=reply_to, deleted_at=1.0 if deleted else None,
                   edited_at=1.0 if edited else None)


# rows 1..12: 2 replies to 1, 3 to 2, ... a long chain; 20 and 21 reply to each other (a loop)
ROWS = {m.seq: m for m in [row(1), *(row(n, n - 1) for n in range(2, 13)), row(20, 21), row(21, 20)]}


@pytest.mark.parametrize("target, held, expected", [
    (1, set(), [1]),  # a row that replies to nothing: itself
    (3, set(), [1, 2, 3]),  # its chain, oldest first
    (12, set(), [7, 8, 9, 10, 11, 12]),  # the replied-to row and five of its chain
    (3, {1}, [2, 3]),  # the chain stops at a row the prompt shows
    (3, {3}, []),  # the replied-to row is in view: nothing to quote
    (99, set(), []),  # a seq the store has not got
    (20, set(), [21, 20]),  # a loop ends
])
def test_chain_of(target, held, expected):
    assert [m.seq for m in chain_of(target, ROWS, held)] == expected
    assert len(chain_of(target, ROWS, held)) <= CHAIN + 1


@pytest.mark.parametrize("shown, held, most, expected", [
    ([row(10, 2), row(11)], {10, 11}, 3, [10]),  # replies to a row out of view
    ([row(10, 9), row(11)], {9, 10, 11}, 3, []),  # the replied-to row is in view
    ([row(10, 2, deleted=True)], {10}, 3, []),  # a deleted reply quotes nothing
    ([row(n, 1) for n in range(10, 15)], set(range(10, 15)), 3, [12, 13, 14]),  # the newest three
    ([row(12, 1), row(10, 1), row(12, 1)], {10, 12}, 3, [10, 12]),  # seq order, each once (a task in view too)
])
def test_replies_to_quote(shown, held, most, expected):
    assert [m.seq for m in replies_to_quote(shown, held, most)] == expected


def test_a_deleted_row_in_a_chain_is_shown_deleted_never_its_text():
    gone = Message(1, 2, "user", "bob", "the door code is 4471", reply_to_seq=1, deleted_at=5.0)
    block = render([Quote(row(9, 2), (row(1), gone))])
    assert "> [bob] (deleted)" in block and "4471" not in block


def test_the_block_reads_as_quotes_with_authors():
    quote = Quote(row(9, 3, author="bob", text="make it\n4 days"),
                  (row(2, author="alice", text="plan Tokyo"), row(3, 2, author="planner", text="Day 1\nDay 2",
                                                                   edited=False)))
    assert render([quote]) == "\n".join([
        HEADER,
        "bob's reply \"make it 4 days\" answers (with what that message answered, oldest first):",
        "> [alice] plan Tokyo",
        "> [planner] Day 1",
        "> Day 2",
    ])
    single = render([Quote(row(9, 3, author="bob", text="ok"), (row(3, author="planner", text="hi", edited=True),))])
    assert single.endswith("bob's reply \"ok\" answers:\n> [planner] hi (edited)")
    assert render([]) == ""


def test_a_quoted_row_is_cut_and_masked():
    SECRETS.register("sk-quoted-secret-7781")  # (tests/conftest.py restores the registry after the test)
    text = quoted_text(row(1, text="key sk-quoted-secret-7781 " + "x" * 1000))
    assert "sk-quoted-secret-7781" not in text and len(text) <= QUOTE_CHARS and text.endswith("…")


class Words:
    def count(self, text: str) -> int:
        return len(text.split())


def test_the_block_stays_under_a_quarter_of_the_budget_the_oldest_quotes_left_out():
    quotes = [Quote(row(20 + n, n + 1, author="bob"), (row(n + 1, text="word " * 50),)) for n in range(3)]
    full = render(quotes)
    assert fitted(quotes, Words(), budget=4 * Words().count(full)) == full
    fewer = fitted(quotes, Words(), budget=4 * Words().count(render(quotes[1:])))
    assert fewer == render(quotes[1:])
    assert fitted(quotes, Words(), budget=4) == ""


async def test_the_quote_counts_against_the_budget():
    """Row 30 replies to row 2, long out of the window: the block comes back and the thread makes room for it."""
    rows = [Message(1, i, "agent", "a", f"m{i}", token_count=10, reply_to_seq=2 if i == 30 else None)
            for i in range(1, 31)]
    store = Thread(rows)

    def load(quoted: int, summaries=None):
        return load_thread(store, 1, through=30, budget=150, task_seq=None, step=1, quoted=quoted)

    plain = await load(0)
    trimmed, block = await quoted_thread(store, Words(), 1, budget=150, tasks=(), load=load)
    assert block == "\n".join([HEADER, 'a\'s reply "m30" answers:', "> [a] m2"])
    assert plain.kept[0].seq > 2 and trimmed.kept[-1].seq == 30
    assert trimmed.kept[0].seq > plain.kept[0].seq  # the block took its room from the thread


async def test_no_reply_out_of_view_no_block_and_one_load():
    rows = [Message(1, i, "agent", "a", f"m{i}", token_count=10, reply_to_seq=i - 1 if i > 1 else None)
            for i in range(1, 6)]
    store = Thread(rows)
    loads = []

    def load(quoted: int, summaries=None):
        loads.append(quoted)
        return load_thread(store, 1, through=5, budget=1000, task_seq=None, quoted=quoted)

    trimmed, block = await quoted_thread(store, Words(), 1, budget=1000, tasks=(), load=load)
    assert block == "" and loads == [0] and len(trimmed.kept) == 5


async def test_only_the_window_used_gets_its_summary_written():
    """The first fitting (before the block's room is known) asks no summary of the model; the summary of
    the window the prompt uses is written once. Without a reply to quote, the same prompt as load_thread's."""
    rows = [Message(1, i, "agent", "a", f"m{i}", token_count=10, reply_to_seq=2 if i == 60 else None)
            for i in range(1, 61)]
    store = Thread(rows)

    def load(quoted: int, summaries=None):
        return load_thread(store, 1, through=60, budget=300, task_seq=None, step=1, quoted=quoted,
                           summaries=summaries)

    notes = Notes()
    trimmed, block = await quoted_thread(store, Words(), 1, budget=300, tasks=(), summaries=notes, load=load)
    assert block and notes.asked == [trimmed.kept[0].seq - 1] and trimmed.summary is not None

    rows[59] = Message(1, 60, "agent", "a", "m60", token_count=10)  # no reply: no block
    alone, plain = Notes(), Notes()
    trimmed, block = await quoted_thread(store, Words(), 1, budget=300, tasks=(), summaries=alone, load=load)
    expected = await load_thread(store, 1, through=60, budget=300, task_seq=None, step=1, summaries=plain)
    assert block == "" and alone.asked == plain.asked and trimmed.render() == expected.render()
