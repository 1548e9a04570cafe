"""What people asked for and have not seen done: the tasks every prompt keeps (SPEC §6, seed 000).

An episode's task is the message that opened it. A person's follow-up ("keep going:
refine the plan") continues the earlier requests that are still open, so those stay in
every prompt of the episode, for every agent and the selector, however far the thread
was trimmed. The chain: walking back from the episode, each earlier episode opened by a
person's message is continued when it ended without being done: at the cap (`max_turns`:
its notice says "Post a message to continue"), `superseded` (a person wrote while it
ran), `stalled` or `stopped`. The walk stops at an episode that ended `terminated`
(someone declared the task done) or `quiet` (every agent it called had answered and
nobody was left to speak, as in tags mode), at a task that is not a person's (a
schedule's), or LOOKBACK episodes back. At most MAX_EARLIER earlier tasks are kept: the
oldest (the original request) and the newest others; each shows at most EARLIER_CHARS
characters. An episode opened by a schedule continues nothing.

The chain is fixed when the episode opens (the earlier episodes have all ended), so a
prompt's task part stays the same for the whole episode and the provider's cache keeps
hitting. It is read once per episode (one indexed query) and kept in memory.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bot.core.models import Message
from bot.core.ports import EpisodeStore, ThreadStore
from bot.core.rules.attachments import said

LOOKBACK = 20  # earlier episodes looked at
DONE = frozenset({"terminated", "quiet"})  # an episode that ended so is not continued
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
        return (f"Earlier requests this continues, not done yet (oldest first):\n{earlier}\n"
                f"Current request:\n[{self.current.author_name}] {show(self.current)}")


def cut(text: str, limit: int = EARLIER_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def keep(chain: list[Message], most: int = MAX_EARLIER) -> tuple[Message, ...]:
    """Oldest first; past `most`, the oldest (the original request) and the newest `most - 1`."""
    if len(chain) <= most:
        return tuple(chain)
    return (chain[0], *chain[len(chain) - (most - 1):])


class TaskStore(EpisodeStore, ThreadStore, Protocol):
    """What the task chains read: episodes and their task rows."""


class TaskChains:
    """The tasks of each episode, read once and kept (a small LRU)."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self._chains: OrderedDict[int, Tasks] = OrderedDict()

    async def of(self, group_id: int, episode_id: int | None) -> Tasks:
        if episode_id is None:
            return Tasks(None)
        chain = self._chains.get(episode_id)
        if chain is not None:
            self._chains.move_to_end(episode_id)
            return chain
        episode = await self.store.get_episode(episode_id)
        current = await self.store.get_message(group_id, episode.task_seq)
        earlier: list[Message] = []
        if current.author_type == "user":
            for before, task in await self.store.earlier_tasks(group_id, before_seq=episode.task_seq,
                                                               limit=LOOKBACK):
                if before.status in DONE or task.author_type != "user":
                    break
                earlier.append(task)
        chain = self._chains[episode_id] = Tasks(current, keep(earlier[::-1]))
        if len(self._chains) > CACHED_CHAINS:
            self._chains.popitem(last=False)
        return chain
