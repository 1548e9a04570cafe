"""Fit the group's thread into a prompt under a token budget.

Policy (SPEC §6): the task message and the newest messages are always kept;
the oldest replies are dropped first, in blocks. Block boundaries are fixed
points of the history (every `budget // BLOCKS_PER_BUDGET` tokens, counted from
the first message), so as the thread grows the cut stays at the same place
until the next boundary is crossed. The prompt's prefix therefore stays the
same from call to call and the provider's prompt cache keeps hitting.

Token counts come with each row (`Message.token_count`, counted once when it
was stored). `load_thread` picks the window from the store's (seq, tokens)
pairs and loads only the rows it keeps, so a long history costs a few integers
per row per turn, not a full row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from bot.core.models import Message
from bot.core.ports import Store
from bot.core.prompts import render_thread

BLOCKS_PER_BUDGET = 4
MARKER_TOKENS = 16  # "[roundtable] (N earlier messages omitted)" and its newline


@dataclass(frozen=True)
class Window:
    start: int  # index of the first kept row (after the task line, if pulled up)
    omitted: int
    task_index: int | None  # the task's index when it is shown first because its place was cut


@dataclass(frozen=True)
class Trimmed:
    kept: tuple[Message, ...]  # what follows the task line (if it was pulled up)
    omitted: int
    task_pulled_up: Message | None  # the task, shown first because its place was cut

    def render(self) -> str:
        return render_thread(self.kept, self.omitted, self.task_pulled_up)


def token_cost(token_count: int) -> int:
    """A thread line's cost: its counted tokens plus the newline."""
    return max(token_count, 1) + 1


def _block_starts(costs: Sequence[int], block_tokens: int) -> list[int]:
    """Indexes where a block starts: fixed by the history's prefix sums."""
    starts = [0]
    total = 0
    next_edge = block_tokens
    for i, cost in enumerate(costs):
        total += cost
        if total >= next_edge and i + 1 < len(costs):
            starts.append(i + 1)
            while next_edge <= total:
                next_edge += block_tokens
    return starts


def choose_window(costs: Sequence[int], budget: int, task_index: int | None) -> Window:
    """Which rows to keep: all when they fit; else the task, a marker and the newest from a block start."""
    if sum(costs) <= budget or len(costs) <= 1:
        return Window(0, 0, None)
    suffix = [0] * (len(costs) + 1)
    for i in range(len(costs) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + costs[i]
    block_tokens = max(1, budget // BLOCKS_PER_BUDGET)
    last = len(costs) - 1
    for start in _block_starts(costs, block_tokens)[1:] + [last]:
        pulled = task_index is not None and task_index < start
        cost = suffix[start] + MARKER_TOKENS + (costs[task_index] if pulled and task_index is not None else 0)
        if cost <= budget or start == last:
            return Window(start, start - (1 if pulled else 0), task_index if pulled else None)
    raise AssertionError("unreachable: the newest row is always kept")


async def load_thread(store: Store, group_id: int, *, through: int, budget: int, task_seq: int | None) -> Trimmed:
    """The trimmed thread through `through`, loading only the rows that are kept."""
    counts = await store.token_counts(group_id, through=through)
    if not counts:
        return Trimmed((), 0, None)
    seqs = [seq for seq, _ in counts]
    task_index = seqs.index(task_seq) if task_seq in seqs else None
    window = choose_window([token_cost(tokens) for _, tokens in counts], budget, task_index)
    kept = await store.messages(group_id, after=seqs[window.start] - 1, through=through)
    task = await store.get_message(group_id, seqs[window.task_index]) if window.task_index is not None else None
    return Trimmed(tuple(kept), window.omitted, task)
