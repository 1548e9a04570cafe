from collections.abc import Sequence

import pytest

from bot.core.features.reading import CATCHUP_BUDGET, Reader, Reading, elsewhere, excerpt, within_budget
from bot.core.models import ChatMessage, Completion, Group, GroupSettings, Message, Usage


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


class _Rows:
    """Just enough store for `Reading.summary`: rows of one token each, and what was read."""

    def __init__(self, latest: int) -> None:
        self.latest = latest
        self.read: list[tuple[int, int]] = []
        self.thread = self.reading = self  # the store's parts that `Reading.summary` asks: this fake is both

    async def get_summary(self, *args: object, **kwargs: object) -> None:
        return None

    async def messages(self, group_id: int, *, after: int = 0, through: int | None = None) -> list[Message]:
        end = self.latest if through is None else through
        self.read.append((after, end))
        return [Message(group_id, seq, "user", "a", f"m{seq}", token_count=1) for seq in range(after + 1, end + 1)]

    async def save_summary(self, *args: object, **kwargs: object) -> None:
        return None


class _Echo:
    async def complete(self, messages: Sequence[ChatMessage], **kwargs: object) -> Completion:
        return Completion("a summary", Usage(1, 1, 0), "m")


async def test_a_catch_up_over_a_long_backlog_reads_only_the_rows_that_can_fit() -> None:
    store = _Rows(latest=50_000)
    reading = Reading(store, _Echo(), lambda group: None)  # type: ignore[arg-type]
    summary = await reading.summary(Group(1, "g", "g", GroupSettings()), Reader("u", "ann"), 10, 50_000)
    assert store.read == [(50_000 - CATCHUP_BUDGET, 50_000)]  # not the 49,990 unread rows
    assert summary.omitted == 50_000 - 10 - CATCHUP_BUDGET  # the same count as reading them all
