"""What people asked for and have not seen done: the tasks every prompt keeps (SPEC §6, seed 000).

An episode's task is the message that opened it. A person's follow-up ("now make it 4 days")
continues the earlier requests, so those stay in every prompt of the episode, for every agent
and the selector, however far the thread was trimmed. The chain: walking back from the
episode, each earlier episode opened by a person's message is continued (its task kept) when
the newer task was a person's message that

- came within the group's `followup_window` minutes of that episode's end, however it ended
  (TERMINATE, `quiet` as in tags mode, the cap ...; 0 turns this off);
- or that episode ended without being done: at the cap (`max_turns`: its notice says "Post a
  message to continue"), `superseded` (a person wrote while it ran), `stalled` or `stopped`;
- or is a Discord reply to a row of an earlier episode (`reply_to_seq`): the walk goes on from
  that episode, over any newer one in between (the reply names the work it continues).

The walk stops at a task that starts fresh (the first person's message after
`/roundtable newtask`: the store's task breaks), at a task that is not a person's (a
schedule's), or LOOKBACK episodes back. At most MAX_EARLIER earlier tasks are kept: the
oldest (the original request) and the newest others; each shows at most EARLIER_CHARS
characters. An episode opened by a schedule continues nothing.

The chain is fixed when the episode opens (the earlier episodes have all ended), so a
prompt's task part stays the same for the whole episode and the provider's cache keeps
hitting. Which rows it holds is found once per episode (a few indexed queries) and kept in memory;
the rows are read again for each prompt (one lookup each), so a person's edit of a task reaches the
next run of the episode (marked edited) and a deleted task shows as deleted, never its text (SPEC §1).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import NotFound
from bot.core.models import Episode, Message
from bot.core.ports import HasEpisodes, HasGroups, HasThread
from bot.core.rules.attachments import said

LOOKBACK = 20  # earlier episodes looked at
UNFINISHED = frozenset({"max_turns", "superseded", "stalled", "stopped"})  # continued at any time
MAX_EARLIER = 4  # earlier tasks kept: the original and the newest three
EARLIER_CHARS = 2000  # of each earlier task's text in a prompt
CACHED_CHAINS = 512  # episodes whose chain is kept in memory


@dataclass(frozen=True)
class Tasks:
    """The current episode's task and the earlier open tasks it continues (oldest first)."""

    current: Message | None
    earlier: tuple[Message, ...] = ()

    @property
    def all(self) -> tuple[Message, ...]:
        """Every task, oldest first."""
        return self.earlier + ((self.current,) if self.current is not None else ())

    def slot(self, show: Callable[[Message], str] = said) -> str:
        """The Participant prompt's <task>: the task's text; after a follow-up, the earlier open
        requests first and the current one after them, each labelled. `show`: a row's text with its files."""
        if self.current is None:
            return "(no task yet: follow the conversation)"
        if not self.earlier:
            return show(self.current)
        earlier = "\n".join(f"[{m.author_name}] {cut(show(m))}" for m in self.earlier)
        return (f"Earlier requests this continues (oldest first):\n{earlier}\n"
                f"Current request:\n[{self.current.author_name}] {show(self.current)}")


def cut(text: str, limit: int = EARLIER_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def keep(chain: list[Message], most: int = MAX_EARLIER) -> tuple[Message, ...]:
    """Oldest first; past `most`, the oldest (the original request) and the newest `most - 1`."""
    if len(chain) <= most:
        return tuple(chain)
    return (chain[0], *chain[len(chain) - (most - 1):])


class TaskStore(HasEpisodes, HasThread, HasGroups, Protocol):
    """What the task chains read: episodes, their task rows, the group's followup_window."""


class TaskChains:
    """The tasks of each episode: which rows they are is found once and kept (a small LRU); the rows
    themselves are read on each call (a few indexed lookups), so an edit or a deletion reaches the
    episode's next prompt."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self._chains: OrderedDict[int, tuple[int, ...]] = OrderedDict()  # episode -> its tasks' seqs, oldest first

    async def of(self, group_id: int, episode_id: int | None) -> Tasks:
        if episode_id is None:
            return Tasks(None)
        seqs = self._chains.get(episode_id)
        if seqs is not None:  # the rows are read again: a person may have edited or deleted one since
            self._chains.move_to_end(episode_id)
            rows = [await self.store.thread.get_message(group_id, seq) for seq in seqs]
            return Tasks(rows[-1], tuple(rows[:-1]))
        episode = await self.store.episodes.get_episode(episode_id)
        current = await self.store.thread.get_message(group_id, episode.task_seq)
        earlier: list[Message] = []
        if current.author_type == "user":
            earlier = await self._walk(group_id, current)
        chain = Tasks(current, keep(earlier[::-1]))
        self._chains[episode_id] = tuple(m.seq for m in chain.all)
        if len(self._chains) > CACHED_CHAINS:
            self._chains.popitem(last=False)
        return chain

    async def _walk(self, group_id: int, current: Message) -> list[Message]:
        """The earlier tasks `current` (a person's) continues, newest first."""
        before = await self.store.episodes.earlier_tasks(group_id, before_seq=current.seq, limit=LOOKBACK)
        if not before:
            return []
        window = (await self.store.groups.get_group(group_id)).settings.followup_window * 60.0
        breaks = await self.store.episodes.task_breaks(group_id, from_seq=before[-1][0].task_seq,
                                                       before_seq=current.seq)
        earlier: list[Message] = []
        task, i = current, 0
        while i < len(before) and task.author_type == "user":
            if any(before[i][0].task_seq <= at < task.seq for at in breaks):
                break  # `task` is the first person's message after /roundtable newtask: it starts fresh
            j = await self._replied(group_id, task, before, i)
            if j is None and not continues(task, before[i][0], window):
                break
            i = i if j is None else j
            task = before[i][1]
            if task.author_type != "user":
                break
            earlier.append(task)
            i += 1
        return earlier

    async def _replied(self, group_id: int, task: Message, before: list[tuple[Episode, Message]],
                       start: int) -> int | None:
        """The index in `before` (from `start`) of the episode whose row `task` replies to, if any."""
        if task.reply_to_seq is None:
            return None
        try:
            episode_id = (await self.store.thread.get_message(group_id, task.reply_to_seq)).episode_id
        except NotFound:
            return None
        return next((k for k in range(start, len(before)) if before[k][0].id == episode_id), None)


def continues(task: Message, episode: Episode, window: float) -> bool:
    """Whether `task` (a person's message) continues the work of `episode`, the one before it, by
    time or by how it ended (a reply is `TaskChains._replied`'s)."""
    if episode.status in UNFINISHED:
        return True
    ended = episode.ended_at if episode.ended_at is not None else episode.started_at
    return window > 0 and task.created_at - ended <= window
