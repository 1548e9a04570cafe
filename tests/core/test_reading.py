import pytest

from bot.core.models import Message
from bot.core.reading import elsewhere, excerpt, within_budget


def rows(*costs: int) -> list[Message]:
    return [Message(1, i, "user", "a", f"m{i}", token_count=c) for i, c in enumerate(costs, 1)]


@pytest.mark.parametrize("costs, budget, kept, omitted", [
    ((10, 10, 10), 100, [1, 2, 3], 0),
    ((10, 10, 10), 20, [2, 3], 1),  # the oldest are left out
    ((10, 50, 10), 30, [3], 2),  # stops at the first row that does not fit
    ((500,), 10, [1], 0),  # the newest row is always kept
    ((), 10, [], 0),
])
def test_within_budget(costs, budget, kept, omitted):
    got, left_out = within_budget(rows(*costs), budget)
    assert ([m.seq for m in got], left_out) == (kept, omitted)


def test_excerpt_and_links():
    assert excerpt("a  b\nc") == "a b c"
    assert excerpt("x" * 200, 10) == "x" * 9 + "…"
    message = rows(1)[0]
    assert elsewhere("#1", message) == "" and elsewhere("https://d/1", message, ": ") == ": https://d/1"
