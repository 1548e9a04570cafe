"""A group run in this process, as one object: its dispatcher, its outbox and its drafts.

One person's message, top-down (docs/layout.md has it as a diagram):

  Intake.post            the row committed (tags, tokens), echoed, its episode told
  GroupRuntime.wake      the group's parts woken (the engine claims the group first when needed)
  GroupDispatcher        routes the row, picks who answers, waits for the outbox's `idle`
  AgentTurn.run          the prompt; the model's text shown on the surface's draft; settled in the
                         store; the outbox woken (the dispatcher goes on with the stop rules)
  Outbox                 each row published on the surface, its parts recorded, the row confirmed

The parts of a group share its events, not a hub: the dispatcher holds the outbox (as the
narrow `Showing` it uses: `wake`, `all_shown`, `announce`) and the drafts, and passes the
outbox's `wake` to the turn. One `GroupRuntime` per group this process runs (`Groups`); the
process-wide parts (the store, the model, the agents' locks, the one `AgentTurn`) come in
`GroupParts`, composed once by the engine.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.core.runtime.dispatcher import DispatcherDeps, GroupDispatcher
from bot.core.runtime.drafts import Drafts
from bot.core.runtime.outbox import Outbox, OutboxDeps
from bot.core.runtime.turn import TurnOutcome


@dataclass(frozen=True)
class GroupParts:
    """What every group's runtime is made of (the engine composes it once)."""

    dispatching: DispatcherDeps
    showing: OutboxDeps
    drafts: Drafts


class GroupRuntime:
    """One group run here. Its workers start when first woken and stop for good with `stop`."""

    def __init__(self, parts: GroupParts, group_id: int) -> None:
        self.group_id = group_id
        self.outbox = Outbox(parts.showing, group_id)
        self.dispatcher = GroupDispatcher(parts.dispatching, group_id, outbox=self.outbox, drafts=parts.drafts)

    def resume(self, unsure: set[int], *, backlog: bool) -> None:
        """Taken here just now: `unsure` rows may have been shown by an attempt before a crash (the
        outbox looks first); with `backlog`, the rows not routed yet are routed as a backlog."""
        self.outbox.unsure |= unsure
        self.outbox.start()
        if backlog:
            self.dispatcher.catching_up = True
            self.dispatcher.start()

    def wake(self) -> None:
        """Something changed in the group: show what is committed, route and deliver."""
        self.outbox.wake()
        self.dispatcher.wake()

    def show(self) -> None:
        """New rows were committed: show them."""
        self.outbox.wake()

    async def all_shown(self) -> None:
        """Until every row committed in the group so far is shown."""
        await self.outbox.all_shown()

    async def after_turn(self, outcome: TurnOutcome) -> None:
        """A run posted outside the dispatcher (a direct run's answer): shown, then the stop rules."""
        self.outbox.wake()
        await self.dispatcher.after_turn(outcome)

    def busy(self) -> bool:
        """The dispatcher has rows to route or run."""
        return self.dispatcher.task is not None and not self.dispatcher.idle.is_set()

    def idle(self) -> bool:
        """Nothing left to route, run or show (as the workers last found)."""
        return self.dispatcher.idle.is_set() and self.outbox.idle.is_set()

    async def until_idle(self) -> None:
        """Until each worker has found nothing left (once each; see `idle`)."""
        self.dispatcher.start()
        await self.dispatcher.idle.wait()
        await self.outbox.all_shown()

    def stop(self) -> None:
        """The group is not run here any more: its workers stop for good."""
        self.dispatcher.stop()
        self.outbox.stop()


class Groups:
    """The groups this process runs, each with its runtime (made when first asked for).
    `owns(group_id)`: whether this process holds the group's lease."""

    def __init__(self, parts: GroupParts, owns: Callable[[int], bool]) -> None:
        self.parts = parts
        self.owns = owns
        self.closed = False
        self._running: dict[int, GroupRuntime] = {}

    def get(self, group_id: int) -> GroupRuntime:
        """The group's runtime (made now when there is none; a stopped one once the process closes)."""
        runtime = self._running.get(group_id)
        if runtime is None:
            runtime = GroupRuntime(self.parts, group_id)
            if self.closed:
                runtime.stop()
            else:
                self._running[group_id] = runtime
        return runtime

    def live(self, group_id: int) -> GroupRuntime | None:
        """The group's runtime when this process runs the group; else None."""
        return self.get(group_id) if not self.closed and self.owns(group_id) else None

    def show(self, group_id: int) -> None:
        """New rows were committed in the group: show them, when it is run here."""
        runtime = self.live(group_id)
        if runtime is not None:
            runtime.show()

    def drop(self, group_id: int) -> None:
        """Stop running the group here."""
        runtime = self._running.pop(group_id, None)
        if runtime is not None:
            runtime.stop()

    def close(self) -> None:
        """Stop every group's runtime; none is made again."""
        self.closed = True
        for runtime in self._running.values():
            runtime.stop()
        self._running.clear()
