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

The tasks (`bot.core.features.tasks`: the episode's task and the earlier open requests
it continues) are never trimmed away. The participant prompt shows them in its
`<task>` slot, so its thread leaves their text out (`task_apart`): a short
reference line stands at a task's place when it falls inside the window. The
selector's prompt has no task slot: the tasks whose place was cut are shown
first, oldest first.

What a window cut is replaced by a rolling summary (`SummarySource`, written by
`bot.core.features.summary` when the window moves, reused until the next move), at the
place of the cut rows: after the pulled-up tasks, before the kept rows. The
window leaves room for it (`SummarySource.reserve`), so where the window starts
never depends on the summary's length. Without one (its call failed, or the
window is too small to hold one: `SummarySource.min_budget`, e.g. the selector's
default 400 tokens) the cut rows are one "(N earlier messages omitted)" line.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.models import Agent, ContextSummary, Group, GroupSettings, Message, token_cost
from bot.core.ports import HasThread
from bot.core.rules.attachments import PromptFiles, brief_text
from bot.core.rules.prompts import SYSTEM_AUTHOR, render_thread, shared_header, thread_line

MARKER_TOKENS = 16  # "[roundtable] (N earlier messages omitted)" and its newline
TASK_REFERENCE = "(posted the task above)"


class SummarySource(Protocol):
    """Where a window's rolling summary comes from (`bot.core.features.summary.Summaries.source`)."""

    @property
    def reserve(self) -> int:
        """Tokens a window keeps free for the summary's line (its longest)."""
        ...

    @property
    def min_budget(self) -> int:
        """The smallest window that gets a summary; a smaller one only leaves its cut rows out."""
        ...

    async def through(self, seq: int, upto: int) -> ContextSummary | None:
        """The summary of rows 1..`seq` (made now when the window has just moved past `seq`, by a
        prompt whose window ends at row `upto`); None when there is none (its call failed): the cut
        rows are then left out."""
        ...


def summary_line(summary: ContextSummary, omitted: int) -> str:
    """The summary's line in a thread, at the place of the `omitted` rows it stands for."""
    s = "" if omitted == 1 else "s"
    return thread_line(SYSTEM_AUTHOR, f"(summary of the {omitted} earlier message{s}) {summary.text}")


@dataclass(frozen=True)
class Trimmed:
    kept: tuple[Message, ...]  # what follows the pulled-up tasks and the summary
    omitted: int
    pulled_up: tuple[Message, ...] = ()  # tasks shown first because their place was cut, oldest first
    references: frozenset[int] = frozenset()  # seqs shown as a reference line only (their text is in <task>)
    summary: ContextSummary | None = None  # stands for the omitted rows

    @property
    def task_pulled_up(self) -> Message | None:
        """The newest task shown first (the episode's own, when its place was cut)."""
        return self.pulled_up[-1] if self.pulled_up else None

    def render(self, show: Callable[[Message], str] = brief_text) -> str:
        """The thread's lines; `show` gives a row's text with its files (default: a short line per file)."""
        if self.summary is None:
            return render_thread(self.kept, self.omitted, self.pulled_up, references=self.references,
                                 reference_text=TASK_REFERENCE, show=show)
        lines = [thread_line(m.author_name, show(m)) for m in self.pulled_up]
        lines.append(summary_line(self.summary, self.omitted))
        rest = render_thread(self.kept, references=self.references, reference_text=TASK_REFERENCE, show=show)
        return "\n".join(lines + ([rest] if rest else []))

    def split(self, seq: int) -> tuple[Trimmed, tuple[Message, ...]]:
        """The thread through row `seq` (with the summary or marker and any pulled-up tasks), and the rows after it."""
        head = tuple(m for m in self.kept if m.seq <= seq)
        return Trimmed(head, self.omitted, self.pulled_up, self.references, self.summary), self.kept[len(head):]

    @property
    def shown(self) -> tuple[Message, ...]:
        return self.pulled_up + self.kept


def participant_step(budget: int) -> int:
    """How far an agent's window moves when its thread outgrows `budget` (see the module docstring)."""
    return max(1, budget * 3 // 4)


MIN_CACHED_PROMPT = 1024  # tokens: providers cache nothing of a shorter prompt (OpenAI's rule)


# Tokens a window keeps after a move under the shared layout (counting the room kept for the summary's line):
# with the header and the task before it, the prompts' shared part stays over the cache minimum. The margin
# (224) was measured on the bench's Tokyo task: 128 to 320 change uncached tokens at 200 turns by 4%.
SHARED_FLOOR = MIN_CACHED_PROMPT + 224


def shared_step(budget: int) -> int:
    """How far the group's window moves under the shared layout: as far as keeps SHARED_FLOOR tokens
    after the move (so the group's prompts stay cached), at least half the budget."""
    return max(1, budget // 2, budget - SHARED_FLOOR)


def window_of(settings: GroupSettings, *, selector: bool) -> tuple[int, int | None]:
    """(budget, step) of a caller's window. Shared layout: the group's one window, the same for the
    selector and every agent, so their prompts share it; seed: the selector's own `selector_budget`
    (default step) and the agents' `context_budget` (`participant_step`)."""
    if settings.prompt_layout == "shared":
        return settings.context_budget, shared_step(settings.context_budget)
    if selector:
        return settings.selector_budget, None
    return settings.context_budget, participant_step(settings.context_budget)


def group_cache_key(group: Group) -> str:
    """The one `prompt_cache_key` of a group's callers under the shared layout."""
    return f"roundtable-{group.id}"


def group_header(group: Group, roster: Sequence[Agent]) -> str:
    """The shared layout's first message for every caller of `group`: its brief and enabled roster."""
    return shared_header([a for a in roster if a.enabled], group.settings.brief)


def plain_files(group: Group) -> PromptFiles:
    """How the shared layout shows a row's files to every caller alike: text inlined, images by their line."""
    return PromptFiles(group.settings, images=False)


def cut_point(total: int, budget: int, extra: int, step: int | None = None) -> int:
    """Where the window starts, as a position in the thread (tokens before the first kept row).

    `total` is the thread's cost through its newest row; `extra` what the window
    adds when it is cut (the marker or summary, pulled-up tasks). 0 while all of it fits;
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
    omitted: int  # rows before it that are not shown (pulled-up or apart tasks are shown)
    pulled_up: tuple[Message, ...] = ()  # the tasks shown first because their place was cut

    @property
    def task(self) -> Message | None:
        return self.pulled_up[-1] if self.pulled_up else None


async def find_window(
    store: HasThread, group_id: int, *, through: int, budget: int, task_seq: int | None, task_apart: bool = False,
    step: int | None = None, tasks: Sequence[Message] = (), reserve: int = 0, quoted: int = 0,
) -> Window:
    """Where the window over rows 1..`through` starts: two indexed lookups (three with a task to load).

    `tasks`: every task the prompt keeps (`bot.core.features.tasks`), loaded; `task_seq` (the episode's
    task) is loaded when it is not among them. `reserve`: room for a summary line; `quoted`: the tokens
    of the replied-to block the prompt adds (`bot.core.features.replies`), counted against the budget."""
    total = await store.thread.thread_tokens(group_id, through=through)
    chain = [t for t in tasks if t.seq <= through]
    if task_seq is not None and task_seq <= through and all(t.seq != task_seq for t in chain):
        if task_apart:
            chain.append(Message(group_id, task_seq, "user", "", ""))  # only its place matters
        else:
            chain.append(await store.thread.get_message(group_id, task_seq))
    shown_first = [] if task_apart else chain
    extra = max(MARKER_TOKENS, reserve) + quoted + sum(token_cost(t.token_count) for t in shown_first)
    cut = cut_point(total, budget, extra, step)
    start = 1 if cut == 0 else min(through, await store.thread.first_seq_at(group_id, tokens=cut) or through)
    cut_tasks = tuple(sorted((t for t in chain if t.seq < start), key=lambda t: t.seq))
    return Window(start, start - 1 - len(cut_tasks), () if task_apart else cut_tasks)


async def load_thread(
    store: HasThread, group_id: int, *, through: int, budget: int, task_seq: int | None, task_apart: bool = False,
    step: int | None = None, tasks: Sequence[Message] = (), summaries: SummarySource | None = None,
    quoted: int = 0,
) -> Trimmed:
    """The trimmed thread through `through`, loading only the rows that are kept; with `summaries`,
    the cut rows' rolling summary in their place. `quoted`: tokens kept free for the replied-to block."""
    if through <= 0:
        return Trimmed((), 0)
    if summaries is not None and budget < summaries.min_budget:
        summaries = None
    window = await find_window(store, group_id, through=through, budget=budget, task_seq=task_seq,
                               task_apart=task_apart, step=step, tasks=tasks,
                               reserve=summaries.reserve if summaries is not None else 0, quoted=quoted)
    kept = tuple(await store.thread.messages(group_id, after=window.start - 1, through=through))
    references: frozenset[int] = frozenset()
    if task_apart:
        seqs = {t.seq for t in tasks} | ({task_seq} if task_seq is not None else set())
        references = frozenset(seq for seq in seqs if window.start <= seq <= through)
    summary = None
    if summaries is not None and window.start > 1 and window.omitted > 0:
        summary = await summaries.through(window.start - 1, through)
    return Trimmed(kept, window.omitted, window.pulled_up, references, summary)
