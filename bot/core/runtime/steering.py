"""People steer a reply (SPEC §8): the runs of this process a person may stop while they work.

A group run registers here while it works (`Steering.begin`), by its group and agent (the
key a ⏹ Stop button or the console's Ctrl-C names): the task that calls the model, runs its
tools and waits for approvals, and what its provisional message shows. `stop` cancels that
task at once (the model call, a running tool call, an approval wait); the run then settles
as 'stopped' (`bot.core.runtime.turn`): what was shown followed by "(stopped)", its episode
ended as `stopped`, in one transaction, so a restart neither re-runs it nor shows it twice.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.core.models import ChatMessage, Usage
from bot.core.ports import Draft, TokenCounter

log = logging.getLogger(__name__)

STOPPED = "(stopped)"


def stopped_text(shown: str) -> str:
    """A stopped reply's text: what was shown of it, then "(stopped)"."""
    shown = shown.rstrip()
    return f"{shown}\n\n{STOPPED}" if shown else STOPPED


@dataclass(frozen=True)
class StopAnswer:
    """What a press of ⏹ Stop did: `stopped` the run; else `refused` (not the episode's starter, an
    operator's `starter` id, None when a schedule or a bot started it) or nothing was running."""

    stopped: bool
    refused: bool = False
    starter: str | None = None


@dataclass
class Steer:
    """One run people may stop: its task, what it shows and what it spent so far."""

    group_id: int
    agent_id: int
    run_id: int
    episode_id: int | None = None
    task: asyncio.Task[object] | None = None
    by: str | None = None  # who stopped it (None: running)
    draft: Draft | None = None  # its provisional message, once it has one
    shown: Callable[[], str] = lambda: ""  # what its provisional message may show now (the reply's text)
    raw: Callable[[], str] = lambda: ""  # the model's text of the current call so far
    spent: Callable[[], Usage] = Usage  # what the calls that returned cost
    prompt: Callable[[], Sequence[ChatMessage]] = tuple  # the current call's messages
    calls: Callable[[], int] = lambda: 1  # model calls made

    @property
    def stopped(self) -> bool:
        return self.by is not None

    def usage(self, counter: TokenCounter) -> Usage:
        """What the run spent: its finished calls, and the call it was stopped in, estimated
        (its prompt and the text received; the provider's count never came)."""
        prompt = sum(counter.count(m.content) for m in self.prompt())
        return self.spent() + Usage(prompt, counter.count(self.raw()) if self.raw() else 0, 0, True)


class Steering:
    """The runs of this process that may be stopped, by (group, agent)."""

    def __init__(self) -> None:
        self._runs: dict[tuple[int, int], Steer] = {}

    def begin(self, group_id: int, agent_id: int, run_id: int, episode_id: int | None) -> Steer:
        steer = self._runs[(group_id, agent_id)] = Steer(group_id, agent_id, run_id, episode_id)
        return steer

    def end(self, steer: Steer) -> None:
        if self._runs.get((steer.group_id, steer.agent_id)) is steer:
            del self._runs[(steer.group_id, steer.agent_id)]

    def get(self, group_id: int, agent_id: int) -> Steer | None:
        return self._runs.get((group_id, agent_id))

    def running(self, group_id: int) -> list[Steer]:
        return [s for (g, _), s in self._runs.items() if g == group_id and not s.stopped]

    def stop(self, group_id: int, agent_id: int, by: str) -> bool:
        """Stop the agent's run in the group now; False when none is running (or it was stopped)."""
        steer = self._runs.get((group_id, agent_id))
        if steer is None or steer.stopped or steer.task is None or steer.task.done():
            return False
        steer.by = by
        steer.task.cancel()
        log.info("group=%s run=%s: stopped by %s", group_id, steer.run_id, by)
        return True
