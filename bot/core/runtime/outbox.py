"""Showing committed rows on the surface: in seq order, retried until the surface takes them.

Every agent reply and notice is committed first and shown afterwards (SPEC §4).
One `Outbox` per owned group walks the group's unconfirmed rows oldest first
and hands each to the surface, which records each part (a Discord chunk) as it
lands. A row the surface did not take is retried with backoff (`RetryPolicy`:
the first retry within 2 s, then doubling up to 60 s); rows behind it wait, so
a group's posts always leave in seq order. The surface's own wait (a 429's
Retry-After) is honoured as given instead; and a row that failed for a passing
fault (a 5xx, a reset connection) is tried again as soon as any post of this
process goes through (`OutboxDeps.sent`), not at its next back-off step. When an attempt may have reached
people without being recorded (a crash, a reset connection) the next attempt
first asks the surface to find what arrived, so nothing is shown twice. A
refusal (a missing permission) that lasts, i.e. is met by a second attempt in
a row or is still there `LASTING_AFTER` seconds later, is recorded on the
group, told to its people once, and retried until it is fixed; one refusal
that the next attempt gets past is only a warning in the log. One bad row
never stops a group: a posted part whose id is stored as another row already
(our post, taken in as a person's message by another process) is recorded on
this row, and a row that keeps failing for an unexpected reason (a bug) is
given up after a few tries (logged, and marked confirmed so the rows behind it
go out). An episode's end
is told to the surface (`announce`) once the rows committed before it are
shown, so people see the reply that ended an episode before they see that it
ended.

The group's dispatcher waits for the outbox's `idle` event before a run (`all_shown`)
and wakes it when rows are committed; nothing else is shared (`bot.core.runtime.group`).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from bot.core.errors import AlreadyStored, DeliveryError, LeaseLost, NotFound, StoreError
from bot.core.features import memory, worker
from bot.core.models import Agent, Episode, Group, Message
from bot.core.ports import HasGroups, HasLeases, HasPosting, HasRoster, HasThread, HasTools, HealthStore, Surface
from bot.core.rules.secrets import mask_error
from bot.core.rules.tool_lines import compact_line, is_error
from bot.core.runtime.worker import GroupWorker, Pulse, RetryPolicy, Spawn, tell_episode

log = logging.getLogger(__name__)

GIVE_UP_AFTER = 5  # unexpected failures (a bug, not Discord or the database) showing one row before it is skipped
LASTING_AFTER = 10.0  # seconds after a refusal when a row still not shown makes it a lasting one


class OutboxStore(HasGroups, HasRoster, HasThread, HasPosting, HasLeases, HealthStore, HasTools, Protocol):
    """What an outbox reads and writes: the rows to show, their parts, the group's lease."""


@dataclass(frozen=True)
class OutboxDeps:
    """What every group's outbox works with (the engine composes it once for all groups)."""

    store: OutboxStore
    surface: Surface
    retry: RetryPolicy
    clock: Callable[[], float]
    spawn: Spawn  # its loop, as a kept background task
    lost: Callable[[int], None]  # another process runs the group now: stop running it here
    sent: Pulse = field(default_factory=Pulse)  # fired when a row is shown: the surface takes posts


@dataclass
class Attempts:
    """One row's attempts at being shown so far."""

    failures: int = 0  # attempts that failed
    refusals: int = 0  # of them, refused (a missing permission)
    limited: int = 0  # of them, rate-limited: not a fault, so no back-off
    problem: str = ""  # the latest refusal's text for people
    refused_at: float = 0.0  # the engine's clock at the first refusal

    def refused(self, problem: str, clock: Callable[[], float]) -> None:
        self.refusals, self.problem = self.refusals + 1, problem
        self.refused_at = self.refused_at if self.refusals > 1 else clock()

    def lasting(self, clock: Callable[[], float]) -> bool:
        """A refusal that lasts: met by a second attempt, or still there `LASTING_AFTER` seconds later."""
        return bool(self.refusals) and (self.refusals > 1 or clock() - self.refused_at >= LASTING_AFTER)


class Outbox(GroupWorker):
    kind = "outbox"

    def __init__(self, deps: OutboxDeps, group_id: int) -> None:
        super().__init__(group_id, retry=deps.retry, lost=deps.lost, spawn=deps.spawn, health=deps.store.health)
        self.deps = deps
        self.unsure: set[int] = set()  # rows an earlier attempt may have shown
        self._broken: dict[int, int] = {}  # row -> unexpected failures showing it
        self._announcements: list[Episode] = []  # episode changes to tell once the rows before are shown

    async def all_shown(self) -> None:
        """Until every row committed in the group so far is shown (the outbox is idle)."""
        self.start()
        await self.idle.wait()

    async def announce(self, group: Group, episode: Episode) -> None:
        """Tell the surface about `episode` after every row committed so far is shown; at once
        when the group is not run here any more (nothing is shown here for it)."""
        if self.stopped:
            await tell_episode(self.deps.surface, group, episode)
            return
        self._announcements.append(episode)
        self.wake()

    async def drain(self) -> None:
        store = self.deps.store
        while True:
            group = await store.groups.get_group(self.group_id)
            rows = await store.posting.unconfirmed_messages(self.group_id) if group.enabled else []
            if not rows:
                # Turned off: what waits is shown when it is set up again (its episode changes are told now).
                announcements, self._announcements = self._announcements, []
                for episode in announcements:
                    await tell_episode(self.deps.surface, group, episode)
                if not self._announcements:
                    return
                continue
            for row in rows:
                if not await self._deliver(group, row):
                    break  # turned off meanwhile

    async def _deliver(self, group: Group, row: Message) -> bool:
        """Show `row` (as just read, with the parts recorded so far) completely, however many attempts
        it takes; False when the group was turned off meanwhile."""
        seq, tries = row.seq, Attempts()
        while True:
            group, row = await self._current(group, row, again=tries.failures > 0)
            if not group.enabled:
                return False
            if row.confirmed:
                return True
            try:
                await self._publish(group, row)
            except DeliveryError as exc:
                await self._failed(group, seq, exc, tries)
                continue
            except (StoreError, LeaseLost):
                self.unsure.add(seq)  # e.g. a part's id could not be recorded: look before sending again
                raise
            except Exception:
                if not self._given_up(seq):
                    raise
            else:
                self.deps.sent.fire()  # the surface takes posts: rows waiting after a passing fault go now
            await self._confirm(group, seq)
            return True

    async def _current(self, group: Group, row: Message, *, again: bool) -> tuple[Group, Message]:
        """The group and the row before an attempt (read `again` after a failed one: what it recorded,
        and the group's state now); LeaseLost when another process runs the group now."""
        store = self.deps.store
        if await store.leases.leased_elsewhere(self.group_id):
            raise LeaseLost(f"group {self.group_id} is run by another process now")
        if not again:
            return group, row
        return await store.groups.get_group(self.group_id), await store.thread.get_message(self.group_id, row.seq)

    async def _failed(self, group: Group, seq: int, exc: DeliveryError, tries: Attempts) -> None:
        """An attempt at row `seq` failed: a refusal that lasts is reported, then the wait before the next
        attempt (the surface's own wait, a refusal's back-off, or until any post goes through)."""
        tries.failures += 1
        if exc.maybe_shown:
            self.unsure.add(seq)
        if exc.problem:
            tries.refused(exc.problem, self.deps.clock)
        if tries.lasting(self.deps.clock):
            await self.report_problem(group, tries.problem)  # it lasts: told once, until fixed
        tries.limited += exc.retry_after is not None
        delay = self.retry.delay(tries.failures - tries.limited, exc.retry_after)
        log.warning("group=%s seq=%s not shown (attempt %d): %s; retrying in %.1fs",
                    self.group_id, seq, tries.failures, exc, delay)
        if exc.retry_after is not None or exc.problem:  # its own wait; a refusal's back-off
            await asyncio.sleep(delay)
        else:  # a passing fault: over once any post goes through
            await self.deps.sent.wait(delay)

    def _given_up(self, seq: int) -> bool:
        """Showing row `seq` failed for an unexpected reason (a bug): True when it has failed so often
        that it is skipped (confirmed as it is), so the rows behind it go out."""
        self.unsure.add(seq)
        self._broken[seq] = self._broken.get(seq, 0) + 1
        if self._broken[seq] < GIVE_UP_AFTER:
            return False
        log.exception("group=%s seq=%s could not be shown (%d unexpected failures); skipped, so the "
                      "rows behind it go out", self.group_id, seq, self._broken[seq])
        return True

    async def _confirm(self, group: Group, seq: int) -> None:
        """Row `seq` is shown (or given up): confirmed; a lasting problem the group had is over."""
        await self.deps.store.posting.confirm_message(self.group_id, seq)
        self.unsure.discard(seq)
        self._broken.pop(seq, None)
        if group.delivery_problem:
            await self.report_problem(group, None)

    async def report_problem(self, group: Group, problem: str | None) -> None:
        """Record a lasting delivery problem (None: it is fixed); tell people once when it appears."""
        if not await self.deps.store.groups.set_delivery_problem(group.id, problem):
            return
        if problem is None:
            log.info("group=%s: the surface takes posts again", group.id)
            return
        log.error("group=%s: %s", group.id, problem)
        try:
            await self.deps.surface.alert(group, mask_error(problem))
        except Exception:  # best effort: /roundtable status shows it too
            log.warning("group=%s: could not tell the channel about the problem", group.id, exc_info=True)

    async def _publish(self, group: Group, row: Message) -> None:
        store = self.deps.store

        async def record(external_id: str) -> None:
            try:
                await store.posting.record_posted(group.id, row.seq, external_id)
            except AlreadyStored:
                await self._take_back(group, row, external_id)

        shown = await self._with_tools(group, row)
        await self.deps.surface.publish(group, shown, await self._author(row), resume=row.seq in self.unsure,
                                          record=record)

    async def _with_tools(self, group: Group, row: Message) -> Message:
        """An agent's reply as shown: with the group's `show_tools` on, a compact line of its run's
        tool calls at its end (SPEC §6b "Visible"; rendered here, never stored in the row's text, so
        later prompts do not read it as something the agent said). The built-in memory_write, a
        note the agent keeps, is not listed; nor is a worker's post given one (its `group_post` call is
        how it speaks: the post is its message, not a reply that used tools)."""
        if row.author_type != "agent" or row.source_run_id is None or not group.settings.show_tools:
            return row
        calls = await self.deps.store.tools.run_tool_calls(row.source_run_id)
        if any(c.tool == worker.TOOL_NAME for c in calls):
            return row
        line = compact_line((c.tool, is_error(c.status, c.result)) for c in calls if c.tool != memory.TOOL_NAME)
        return replace(row, text=f"{row.text}\n\n{line}") if line else row

    async def _take_back(self, group: Group, row: Message, external_id: str) -> None:
        """A part the surface posted for `row` is stored as another row already: most likely a
        process took our own post in as a person's message. That id moves to `row`; a holder
        that is not a person's row keeps it, and the part counts as shown all the same."""
        try:
            person_seq = await self.deps.store.posting.take_posted(group.id, row.seq, external_id)
        except AlreadyStored as exc:
            log.warning("group=%s seq=%s: its post %s is stored as another row (%s); counted as shown",
                        group.id, row.seq, external_id, exc)
            return
        log.warning("group=%s seq=%s: its post %s had been taken in as a person's message (seq %s); "
                    "it is recorded as this row's now", group.id, row.seq, external_id, person_seq)

    async def _author(self, message: Message) -> Agent | None:
        """The agent who wrote a row, or a stand-in with its snapshot name when it was removed since."""
        if message.author_agent_id is None:
            return None
        try:
            return await self.deps.store.roster.get_agent(message.author_agent_id)
        except NotFound:
            return Agent(message.author_agent_id, message.group_id, message.author_name, "", "")
