import pytest

from bot.core.context import trim_thread
from bot.core.models import Message


def thread(n, cost=10, task_seq=1):
    return [Message(1, i, "user" if i == task_seq else "agent", "a", f"m{i}", token_count=cost) for i in range(1, n + 1)]


def test_fits_untouched():
    t = trim_thread(thread(5), 1000, task_seq=1)
    assert t.omitted == 0 and len(t.kept) == 5 and t.task_pulled_up is None


@pytest.mark.parametrize("n", [20, 35, 60, 200])
def test_task_and_newest_kept_within_budget(n):
    budget = 200
    msgs = thread(n)
    t = trim_thread(msgs, budget, task_seq=1)
    assert t.task_pulled_up is not None and t.task_pulled_up.seq == 1
    assert t.kept[-1].seq == n
    used = sum(m.token_count + 1 for m in t.kept) + 11 + 16
    assert used <= budget
    assert t.omitted == n - len(t.kept) - 1
    rendered = t.render()
    assert rendered.startswith("[a] m1\n[roundtable] (")
    assert rendered.endswith(f"[a] m{n}")


def test_task_in_the_middle_is_kept_when_cut():
    msgs = thread(50, task_seq=10)
    t = trim_thread(msgs, 200, task_seq=10)
    assert t.task_pulled_up.seq == 10


def test_prefix_is_stable_between_trims_and_drops_in_blocks():
    budget = 200
    cuts = []
    prefixes = []
    for n in range(20, 60):
        t = trim_thread(thread(n), budget, task_seq=1)
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


def test_a_single_huge_newest_message_is_still_kept():
    msgs = thread(5) + [Message(1, 6, "agent", "a", "huge", token_count=5000)]
    t = trim_thread(msgs, 200, task_seq=1)
    assert t.kept[-1].seq == 6
