"""Fit the group's thread into a prompt under a token budget.

Policy (SPEC §6): the task message and the newest messages are always kept;
the oldest replies are dropped first, in blocks. Block boundaries are fixed
points of the history (every `budget // BLOCKS_PER_BUDGET` tokens, counted from
the first message), so as the thread grows the cut stays at the same place
until the next boundary is crossed. The prompt's prefix therefore stays the
same from call to call and the provider's prompt cache keeps hitting.

Token counts come with each message (`Message.token_count`, counted once when
stored); the counter is only used for the elision marker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from bot.core.models import Message
from bot.core.ports import TokenCounter
from bot.core.prompts import render_thread

BLOCKS_PER_BUDGET = 4
MARKER_TOKENS = 16  # "[roundtable] (N earlier messages omitted)" and its newline


@dataclass(frozen=True)
class Trimmed:
    kept: tuple[Message, ...]  # what follows the task line (if it was pulled up)
    omitted: int
    task_pulled_up: Message | None  # the task, shown first because its place was cut

    def render(self) -> str:
        return render_thread(self.kept, self.omitted, self.task_pulled_up)


def line_cost(message: Message, counter: TokenCounter | None = None) -> int:
    if message.token_count:
        return message.token_count + 1
    if counter is None:
        return max(1, (len(message.text) + len(message.author_name) + 3) // 4) + 1
    return counter.count(f"[{message.author_name}] {message.text}") + 1


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


def trim_thread(
    messages: Sequence[Message],
    budget: int,
    *,
    task_seq: int | None = None,
    counter: TokenCounter | None = None,
) -> Trimmed:
    """Keep what fits `budget` tokens: the task, then the newest; drop old blocks."""
    costs = [line_cost(m, counter) for m in messages]
    if sum(costs) <= budget or len(messages) <= 1:
        return Trimmed(tuple(messages), 0, None)
    task_index = next((i for i, m in enumerate(messages) if m.seq == task_seq), None)
    block_tokens = max(1, budget // BLOCKS_PER_BUDGET)
    suffix = [0] * (len(costs) + 1)
    for i in range(len(costs) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + costs[i]
    for start in _block_starts(costs, block_tokens) + [len(messages) - 1]:
        if start == 0:
            continue
        pulled = task_index is not None and task_index < start
        cost = suffix[start] + MARKER_TOKENS + (costs[task_index] if pulled else 0)
        if cost <= budget or start == len(messages) - 1:
            task = messages[task_index] if pulled and task_index is not None else None
            omitted = start - (1 if task is not None else 0)
            return Trimmed(tuple(messages[start:]), omitted, task)
    raise AssertionError("unreachable: the newest message is always kept")
