"""Fit the group's thread into a prompt under a token budget.

Policy (SPEC §6): the task and the newest messages are always kept; the
oldest rows are dropped first, in one big step with hysteresis. While the
thread fits, all of it is sent. When it outgrows the budget, the window's
start jumps to the next multiple of a step of the history (a fixed point of
the history, not of the call), so the window falls back well under the budget
and then grows again for about a step of new messages before it moves. Between
two moves every prompt extends the previous one, so the provider's prompt cache
keeps hitting; each move sends the whole window once more, uncached.

The step: `budget // 2` by default (the selector's window: after a cut it keeps
half its budget, so its prompt stays above the providers' 1,024-token minimum
for caching); `participant_step` for agents' prompts: three quarters of the
budget, so a window falls back to a quarter (1,500 tokens, about ten replies,
at the default 6,000) and moves half as often. Issue 9's benchmark at 200 turns:
uncached prompt tokens 264k with half-budget steps, 214k with these (AutoGen:
213k), total 1.08M -> 0.94M; nothing changes while the thread fits.

Each stored row carries `tokens_before`, the running sum of the thread cost
of the group's earlier rows (`token_cost`, counted once when it was stored).
Finding the window is therefore two indexed lookups (the end's position, the
first row at or after the cut) and loading only the kept rows: finding the
window does not grow with the history.

The participant prompt shows the task in its own `<task>` slot, so its thread
leaves the task's text out (`task_apart`): a short reference line stands at
the task's place when it falls inside the window. The selector's prompt has
no task slot: when its place was cut, the task line is shown first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bot.core.attachments import brief_text
from bot.core.models import Message, token_cost
from bot.core.ports import ChatStore
from bot.core.prompts import render_thread

MARKER_TOKENS = 16  # "[roundtable] (N earlier messages omitted)" and its newline
TASK_REFERENCE = "(posted the task above)"


@dataclass(frozen=True)
class Trimmed:
    kept: tuple[Message, ...]  # what follows the task line (if it was pulled up)
    omitted: int
    task_pulled_up: Message | None  # the task, shown first because its place was cut
    task_seq: int | None = None  # shown as a reference line only (its text is in the prompt's <task>)

    def render(self, show: Callable[[Message], str] = brief_text) -> str:
        """The thread's lines; `show` gives a row's text with its files (default: a short line per file)."""
        return render_thread(self.kept, self.omitted, self.task_pulled_up, reference=self.task_seq,
                             reference_text=TASK_REFERENCE, show=show)

    def split(self, seq: int) -> tuple["Trimmed", tuple[Message, ...]]:
        """The thread through row `seq` (with the marker and any pulled-up task), and the rows after it."""
        head = tuple(m for m in self.kept if m.seq <= seq)
        return Trimmed(head, self.omitted, self.task_pulled_up, self.task_seq), self.kept[len(head):]

    @property
    def shown(self) -> tuple[Message, ...]:
        return ((self.task_pulled_up,) if self.task_pulled_up else ()) + self.kept


def participant_step(budget: int) -> int:
    """How far an agent's window moves when its thread outgrows `budget` (see the module docstring)."""
    return max(1, budget * 3 // 4)


def cut_point(total: int, budget: int, extra: int, step: int | None = None) -> int:
    """Where the window starts, as a position in the thread (tokens before the first kept row).

    `total` is the thread's cost through its newest row; `extra` what the window
    adds when it is cut (the marker, a pulled-up task). 0 while all of it fits;
    past the budget the smallest multiple of `step` (default `budget // 2`) that
    fits, so the start stays put for about a step of new messages after each move.
    """
    over = total + extra - budget
    if over <= 0:
        return 0
    step = max(1, budget // 2 if step is None else step)
    return -(-over // step) * step


@dataclass(frozen=True)
class Window:
    start: int  # seq of the first row kept in place
    omitted: int  # rows before it that are not shown (a pulled-up or apart task is shown)
    task: Message | None  # the task, when it is shown first because its place was cut


async def find_window(
    store: ChatStore, group_id: int, *, through: int, budget: int, task_seq: int | None, task_apart: bool = False,
    step: int | None = None,
) -> Window:
    """Where the window over rows 1..`through` starts: two indexed lookups (three with a task to pull up)."""
    total = await store.thread_tokens(group_id, through=through)
    task: Message | None = None
    if task_seq is not None and not task_apart and task_seq <= through:
        task = await store.get_message(group_id, task_seq)
    cut = cut_point(total, budget, MARKER_TOKENS + (token_cost(task.token_count) if task else 0), step)
    start = 1 if cut == 0 else min(through, await store.first_seq_at(group_id, tokens=cut) or through)
    task_cut = task_seq is not None and task_seq < start
    return Window(start, start - 1 - task_cut, task if task_cut else None)


async def load_thread(
    store: ChatStore, group_id: int, *, through: int, budget: int, task_seq: int | None, task_apart: bool = False,
    step: int | None = None,
) -> Trimmed:
    """The trimmed thread through `through`, loading only the rows that are kept."""
    if through <= 0:
        return Trimmed((), 0, None)
    window = await find_window(store, group_id, through=through, budget=budget, task_seq=task_seq,
                               task_apart=task_apart, step=step)
    kept = tuple(await store.messages(group_id, after=window.start - 1, through=through))
    reference = task_seq if task_apart and task_seq is not None and window.start <= task_seq else None
    return Trimmed(kept, window.omitted, window.task, reference)
