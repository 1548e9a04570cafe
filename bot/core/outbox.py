"""Showing committed rows on the surface: in seq order, retried until the surface takes them.

Every agent reply and notice is committed first and shown afterwards (SPEC §4).
One `Outbox` per owned group walks the group's unconfirmed rows oldest first
and hands each to the surface, which records each part (a Discord chunk) as it
lands. A row the surface did not take is retried with backoff (`RetryPolicy`:
the first retry within 2 s, then doubling up to 60 s); rows behind it wait, so
a group's posts always leave in seq order. When an attempt may have reached
people without being recorded (a crash, a reset connection) the next attempt
first asks the surface to find what arrived, so nothing is shown twice. A
lasting refusal (a missing permission) is recorded on the group, told to its
people once, and retried until it is fixed. An episode's end is told to the
surface (`announce`) once the rows committed before it are shown, so people
see the reply that ended an episode before they see that it ended.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.core.errors import DeliveryError, LeaseLost, NotFound
from bot.core.models import Agent, Episode, Group, Message
from bot.core.worker import GroupWorker

if TYPE_CHECKING:
    from bot.core.engine import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """Seconds to wait after the n-th failure in a row: first, first*factor, ... at most `cap`."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 60.0

    def delay(self, failures: int, hint: float | None = None) -> float:
        base = min(self.cap, self.first * self.factor ** max(0, failures - 1))
        return min(self.cap, max(base, hint or 0.0))


class Outbox(GroupWorker):
    kind = "outbox"

    def __init__(self, engine: "Engine", group_id: int) -> None:
        super().__init__(engine, group_id)
        self.unsure: set[int] = set()  # rows an earlier attempt may have shown
        self._announcements: list[Episode] = []  # episode changes to tell once the rows before are shown

    def announce(self, episode: Episode) -> None:
        """Tell the surface about `episode` after every row committed so far is shown."""
        self._announcements.append(episode)
        self.wake()

    async def drain(self) -> None:
        store = self.engine.store
        while True:
            group = await store.get_group(self.group_id)
            rows = await store.unconfirmed_messages(self.group_id) if group.enabled else []
            if not rows:
                # Turned off: what waits is shown when it is set up again (its episode changes are told now).
                announcements, self._announcements = self._announcements, []
                for episode in announcements:
                    await self.engine.episode_changed(group, episode)
                if not self._announcements:
                    return
                continue
            for row in rows:
                if not await self._deliver(group, row):
                    break  # turned off meanwhile

    async def _deliver(self, group: Group, row: Message) -> bool:
        """Show `row` (as just read, with the parts recorded so far) completely, however many attempts
        it takes; False when the group was turned off meanwhile."""
        store, policy = self.engine.store, self.engine.retry
        failures = 0
        seq = row.seq
        while True:
            if await store.leased_elsewhere(self.group_id):
                raise LeaseLost(f"group {self.group_id} is run by another process now")
            if failures:  # read again: what an attempt recorded, and the group's state now
                group = await store.get_group(self.group_id)
                row = await store.get_message(self.group_id, seq)
            if not group.enabled:
                return False
            if row.confirmed:
                return True
            try:
                await self._publish(group, row)
            except DeliveryError as exc:
                failures += 1
                if exc.maybe_shown:
                    self.unsure.add(seq)
                if exc.problem:
                    await self.engine.report_problem(group, exc.problem)
                delay = policy.delay(failures, exc.retry_after)
                log.warning("group=%s seq=%s not shown (attempt %d): %s; retrying in %.1fs",
                            self.group_id, seq, failures, exc, delay)
                await asyncio.sleep(delay)
                continue
            except Exception:
                self.unsure.add(seq)  # e.g. a part's id could not be recorded: look before sending again
                raise
            await store.confirm_message(self.group_id, seq)
            self.unsure.discard(seq)
            if group.delivery_problem:
                await self.engine.report_problem(group, None)
            return True

    async def _publish(self, group: Group, row: Message) -> None:
        store = self.engine.store

        async def record(external_id: str) -> None:
            await store.record_posted(group.id, row.seq, external_id)

        await self.engine.surface.publish(group, row, await self._author(row), resume=row.seq in self.unsure,
                                          record=record)

    async def _author(self, message: Message) -> Agent | None:
        """The agent who wrote a row, or a stand-in with its snapshot name when it was removed since."""
        if message.author_agent_id is None:
            return None
        try:
            return await self.engine.store.get_agent(message.author_agent_id)
        except NotFound:
            return Agent(message.author_agent_id, message.group_id, message.author_name, "", "")
