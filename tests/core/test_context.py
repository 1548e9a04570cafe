"""The context budget: `load_thread` over an in-memory thread (no SQLite), and `cut_point` as a table."""
from __future__ import annotations

import itertools

import pytest

from bot.core.features.context import TASK_REFERENCE, Trimmed, cut_point, load_thread, participant_step
from bot.core.models import ContextSummary, Message, token_cost
from bot.core.ports import HasThread


class Thread:
    """The four reads of the store's thread `load_thread` makes, over a list of rows of one group."""

    def __init__(self, rows: list[Message]) -> None:
        self.rows = rows
        self.loaded: list[int] = []  # seqs of every full row read
        self.before: dict[int, int] = {}
        total = 0
        for m in rows:
            self.before[m.seq] = total
            total += token_cost(m.token_count)

    @property
    def thread(self) -> Thread:
        """The store's thread part: this fake is the store and its thread."""
        return self

    async def thread_tokens(self, group_id: int, *, through: int) -> int:
        last = [m for m in self.rows if m.seq <= through]
        return self.before[last[-1].seq] + token_cost(last[-1].token_count) if last else 0

    async def first_seq_at(self, group_id: int, *, tokens: int) -> int | None:
        return next((m.seq for m in self.rows if self.before[m.seq] >= tokens), None)

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


async def trim(rows: list[Message], budget: int, task_seq: int | None, *, task_apart: bool = False) -> Trimmed:
    store: HasThread = Thread(rows)  # type: ignore[assignment]  # only the reads load_thread makes
    return await load_thread(store, 1, through=rows[-1].seq, budget=budget, task_seq=task_seq, task_apart=task_apart)


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
    assert used > budget // 2 - 11  # cut back to half, not further
    assert t.omitted == n - len(t.kept) - 1
    rendered = t.render()
    assert rendered.startswith("[a] m1\n[roundtable] (")
    assert rendered.endswith(f"[a] m{n}")


async def test_only_kept_rows_are_loaded() -> None:
    rows = thread(200)
    thread_store = Thread(rows)
    store: HasThread = thread_store  # type: ignore[assignment]  # only the reads load_thread makes
    t = await load_thread(store, 1, through=200, budget=200, task_seq=1)
    assert sorted(thread_store.loaded) == [1] + [m.seq for m in t.kept]


async def test_task_in_the_middle_is_kept_when_cut():
    t = await trim(thread(50, task_seq=10), 200, task_seq=10)
    assert t.task_pulled_up is not None and t.task_pulled_up.seq == 10


async def test_task_apart_is_never_pulled_up_nor_repeated():
    cut = await trim(thread(50, task_seq=10), 200, task_seq=10, task_apart=True)
    assert cut.task_pulled_up is None and all(m.seq > 10 for m in cut.kept)
    assert cut.omitted == cut.kept[0].seq - 2  # the task is in <task>, not omitted
    assert "[a] m10" not in cut.render()
    whole = await trim(thread(8, task_seq=3), 1000, task_seq=3, task_apart=True)
    assert whole.render().splitlines()[2] == f"[a] {TASK_REFERENCE}"  # its place, without its text
    assert "[a] m3" not in whole.render()


async def test_the_window_moves_seldom_and_each_prompt_extends_the_previous():
    budget = 200
    cuts = []
    prefixes = []
    for n in range(20, 80):
        t = await trim(thread(n), budget, task_seq=1)
        cuts.append(t.kept[0].seq)
        prefixes.append(t.render().split(f"[a] m{n}")[0])
    moves = [b - a for a, b in itertools.pairwise(cuts) if b != a]
    # budget 200, 11 tokens a row: each move cuts half a budget (9 rows), so it moves every ~9 turns
    assert moves and all(step >= 8 for step in moves)
    assert len(moves) <= len(cuts) / 8
    for (c1, p1), (c2, p2) in zip(zip(cuts, prefixes), zip(cuts[1:], prefixes[1:])):
        if c1 == c2:
            assert p2.startswith(p1)


async def test_a_single_huge_newest_message_is_still_kept():
    rows = [*thread(5), Message(1, 6, "agent", "a", "huge", token_count=5000)]
    t = await trim(rows, 200, task_seq=1)
    assert t.kept[-1].seq == 6


@pytest.mark.parametrize("total, budget, extra, cut", [
    (100, 200, 16, 0),  # fits
    (184, 200, 16, 0),  # exactly fits
    (185, 200, 16, 100),  # one over: cut half a budget
    (300, 200, 16, 200),  # 116 over: two halves
    (285, 200, 16, 200),  # the cut stays put while the thread grows...
    (384, 200, 16, 200),
    (385, 200, 16, 300),  # ...then moves by half a budget
    (50, 1, 0, 49),  # a budget of 1: steps of 1
])
def test_cut_point(total, budget, extra, cut):
    assert cut_point(total, budget, extra) == cut


@pytest.mark.parametrize("total, cut", [
    (6000, 0), (6001, 4500),  # over by one: back to a quarter of the budget (1,501 of 6,001 kept)
    (10500, 4500), (10501, 9000),  # it stays put for three quarters of a budget, then moves by as much
])
def test_an_agents_window_moves_by_three_quarters_of_its_budget(total, cut):
    assert participant_step(6000) == 4500
    assert cut_point(total, 6000, 0, participant_step(6000)) == cut


class Notes:
    """A `SummarySource` that hands out a fixed summary of rows 1..seq and remembers what it was asked."""

    def __init__(self, reserve: int = 40, min_budget: int = 100, fail: bool = False) -> None:
        self.reserve, self.min_budget, self.fail = reserve, min_budget, fail
        self.asked: list[int] = []

    async def through(self, seq: int, upto: int = 0) -> ContextSummary | None:
        self.asked.append(seq)
        return None if self.fail else ContextSummary(seq, 0, f"notes through #{seq}", 20)


async def test_the_summary_stands_where_the_cut_rows_were_and_the_window_keeps_room_for_it() -> None:
    rows = thread(60)
    store: HasThread = Thread(rows)  # type: ignore[assignment]  # only the reads load_thread makes
    notes = Notes()
    t = await load_thread(store, 1, through=60, budget=200, task_seq=1, summaries=notes)
    lines = t.render().splitlines()
    first_kept = t.kept[0].seq
    assert notes.asked == [first_kept - 1]  # the rows before the window, once
    assert lines[0] == "[a] m1"  # the task, pulled up
    cut = first_kept - 1
    assert lines[1] == f"[roundtable] (summary of the {cut - 1} earlier messages) notes through #{cut}"
    assert lines[2] == f"[a] m{first_kept}" and t.summary is not None
    used = sum(m.token_count + 1 for m in t.kept) + 11 + notes.reserve
    assert used <= 200  # the reserve, not the summary's own length, decides the window
    plain = await load_thread(store, 1, through=60, budget=200, task_seq=1)
    assert plain.kept[0].seq <= first_kept  # without a summary only the marker's room is kept free
    same = await load_thread(store, 1, through=60, budget=200, task_seq=1, summaries=notes)
    assert same.render() == t.render()  # the same window, the same prompt


async def test_no_summary_for_a_small_window_or_a_failed_call_and_none_while_the_thread_fits() -> None:
    rows = thread(60)
    store: HasThread = Thread(rows)  # type: ignore[assignment]  # only the reads load_thread makes
    small = Notes(min_budget=201)
    t = await load_thread(store, 1, through=60, budget=200, task_seq=1, summaries=small)
    assert small.asked == [] and t.summary is None and "earlier messages omitted" in t.render()
    failing = Notes(fail=True)
    t = await load_thread(store, 1, through=60, budget=200, task_seq=1, summaries=failing)
    assert failing.asked and t.summary is None and "earlier messages omitted" in t.render()
    fits = Notes()
    t = await load_thread(store, 1, through=5, budget=200, task_seq=1, summaries=fits)
    assert fits.asked == [] and t.omitted == 0


async def test_every_task_of_the_chain_is_pulled_up_in_order_or_referred_to_in_place() -> None:
    rows = thread(60, task_seq=1)
    rows[29] = Message(1, 30, "user", "b", "follow-up", token_count=10)
    store: HasThread = Thread(rows)  # type: ignore[assignment]  # only the reads load_thread makes
    tasks = [rows[0], rows[29]]
    t = await load_thread(store, 1, through=60, budget=200, task_seq=30, tasks=tasks)
    assert [m.seq for m in t.pulled_up] == [1, 30] and t.render().startswith("[a] m1\n[b] follow-up\n[roundtable] (")
    assert t.omitted == t.kept[0].seq - 1 - 2
    apart = await load_thread(store, 1, through=35, budget=1000, task_seq=30, tasks=tasks, task_apart=True)
    assert apart.pulled_up == () and apart.references == frozenset({1, 30})
    assert apart.render().count(TASK_REFERENCE) == 2 and "follow-up" not in apart.render()


def test_the_shared_layout_moves_one_window_for_the_group_in_large_steps_never_under_the_cache_minimum():
    from bot.core.features.context import MIN_CACHED_PROMPT, SHARED_FLOOR, shared_step, window_of
    from bot.core.models import GroupSettings

    shared = GroupSettings()
    assert shared.prompt_layout == "shared"  # the default (SPEC §6)
    assert window_of(shared, selector=True) == window_of(shared, selector=False) == (3000, 3000 - SHARED_FLOOR)
    for budget in (1500, 3000, 6000, 20000):
        step = shared_step(budget)
        assert step >= budget // 2  # large steps
        assert budget - step >= min(SHARED_FLOOR, budget - budget // 2)  # what a move keeps
    assert SHARED_FLOOR > MIN_CACHED_PROMPT
    seed = GroupSettings(prompt_layout="seed")
    assert window_of(seed, selector=True) == (seed.selector_budget, None)
    assert window_of(seed, selector=False) == (seed.context_budget, seed.context_budget * 3 // 4)


def test_prompt_layout_is_a_setting_with_two_values():
    from bot.core.errors import InvalidInput
    from bot.core.verbs.group_verbs import parse_config, settings_fields

    assert parse_config({"prompt_layout": " Seed "}) == {"prompt_layout": "seed"}
    with pytest.raises(InvalidInput, match="prompt_layout 'verbatim': choose one of shared, seed"):
        parse_config({"prompt_layout": "verbatim"})
    from bot.core.models import GroupSettings

    assert ("prompt_layout", "shared") in [(f.name, f.value) for f in settings_fields(GroupSettings())]
