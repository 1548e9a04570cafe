"""The context budget: `load_thread` over an in-memory thread (no SQLite), and `choose_window` as a table."""
from __future__ import annotations

import pytest

from bot.core.context import Trimmed, choose_window, load_thread
from bot.core.models import Message
from bot.core.ports import Store


class Thread:
    """The three Store reads `load_thread` makes, over a list of rows of one group."""

    def __init__(self, rows: list[Message]) -> None:
        self.rows = rows
        self.loaded: list[int] = []  # seqs of every full row read

    async def token_counts(self, group_id: int, *, through: int) -> list[tuple[int, int]]:
        return [(m.seq, m.token_count) for m in self.rows if m.seq <= through]

    async def messages(self, group_id: int, *, after: int = 0, through: int | None = None) -> list[Message]:
        kept = [m for m in self.rows if after < m.seq <= (through if through is not None else m.seq)]
        self.loaded += [m.seq for m in kept]
        return kept

    async def get_message(self, group_id: int, seq: int) -> Message:
        self.loaded.append(seq)
        return next(m for m in self.rows if m.seq == seq)


def thread(n: int, cost: int = 10, task_seq: int = 1) -> list[Message]:
    return [Message(1, i, "user" if i == task_seq else "agent", "a", f"m{i}", token_count=cost)
            for i in range(1, n + 1)]


async def trim(rows: list[Message], budget: int, task_seq: int | None) -> Trimmed:
    store: Store = Thread(rows)  # type: ignore[assignment]  # only the reads load_thread makes
    return await load_thread(store, 1, through=rows[-1].seq, budget=budget, task_seq=task_seq)


async def test_fits_untouched():
    t = await trim(thread(5), 1000, task_seq=1)
    assert t.omitted == 0 and len(t.kept) == 5 and t.task_pulled_up is None


@pytest.mark.parametrize("n", [20, 35, 60, 200])
async def test_task_and_newest_kept_within_budget(n):
    budget = 200
    t = await trim(thread(n), budget, task_seq=1)
    assert t.task_pulled_up is not None and t.task_pulled_up.seq == 1
    assert t.kept[-1].seq == n
    used = sum(m.token_count + 1 for m in t.kept) + 11 + 16
    assert used <= budget
    assert t.omitted == n - len(t.kept) - 1
    rendered = t.render()
    assert rendered.startswith("[a] m1\n[roundtable] (")
    assert rendered.endswith(f"[a] m{n}")


async def test_only_kept_rows_are_loaded() -> None:
    rows = thread(200)
    thread_store = Thread(rows)
    store: Store = thread_store  # type: ignore[assignment]  # only the reads load_thread makes
    t = await load_thread(store, 1, through=200, budget=200, task_seq=1)
    assert sorted(thread_store.loaded) == [1] + [m.seq for m in t.kept]


async def test_task_in_the_middle_is_kept_when_cut():
    t = await trim(thread(50, task_seq=10), 200, task_seq=10)
    assert t.task_pulled_up is not None and t.task_pulled_up.seq == 10


async def test_prefix_is_stable_between_trims_and_drops_in_blocks():
    budget = 200
    cuts = []
    prefixes = []
    for n in range(20, 60):
        t = await trim(thread(n), budget, task_seq=1)
        cuts.append(t.kept[0].seq)
        prefixes.append(t.render().split(f"[a] m{n}")[0])
    # the cut moves rarely and by more than one message at a time
    moves = [b - a for a, b in zip(cuts, cuts[1:]) if b != a]
    assert moves and all(step > 1 for step in moves)
    assert len(moves) < len(cuts) / 3
    # while the cut stays, each prompt extends the previous one (same prefix)
    for (c1, p1), (c2, p2) in zip(zip(cuts, prefixes), zip(cuts[1:], prefixes[1:])):
        if c1 == c2:
            assert p2.startswith(p1)


async def test_a_single_huge_newest_message_is_still_kept():
    rows = thread(5) + [Message(1, 6, "agent", "a", "huge", token_count=5000)]
    t = await trim(rows, 200, task_seq=1)
    assert t.kept[-1].seq == 6


@pytest.mark.parametrize("costs, budget, task_index, window", [
    ([11] * 5, 100, 0, (0, 0, None)),  # fits
    ([11] * 20, 120, 0, (14, 13, 0)),  # blocks of 30 start at 3, 6, 9, 11, 14, 17; from 14: 66 + 16 + 11 fits
    ([11] * 20, 120, None, (11, 11, None)),  # no task: from 11, 99 + 16 fits
    ([11] * 20, 120, 12, (11, 11, None)),  # the task is in the kept part: not pulled up
    ([11] * 20, 120, 5, (14, 13, 5)),  # a task in the middle, cut: pulled up, and it needs room
    ([5, 500], 100, 0, (1, 0, 0)),  # only the newest, however big; the task shown first
    ([500], 100, 0, (0, 0, None)),  # one row is always kept whole
])
def test_choose_window(costs, budget, task_index, window):
    w = choose_window(costs, budget, task_index)
    assert (w.start, w.omitted, w.task_index) == window
