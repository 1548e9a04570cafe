"""Which groups this process runs: the group leases it holds (SPEC §4, many processes).

A process serves one scope: the Discord bot every `discord:` group (of the
guilds of its shards, when it runs as shards), a console its one `console:NAME`
group. Of the groups in its scope it runs only those
whose lease it holds, so a console never touches a Discord group and two
processes never run one group at once. The keeper renews the leases every
`tick` seconds, notices a lease another process took (and stops that group
here), takes over groups whose holder released its lease, died or let it
expire, and wakes an owned group whose log grew in another process. On
PostgreSQL such a row wakes its group at once (the store's `watch`:
LISTEN/NOTIFY); the keeper's look every `tick` seconds is the fallback.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import StoreError, StoreUnavailable
from bot.core.models import Group
from bot.core.ports import HasGroups, HasLeases, HasRoster
from bot.core.rules.shards import Shards
from bot.core.runtime.worker import Spawn

log = logging.getLogger(__name__)

LEASE_TTL = 30.0
KEEP_EVERY = 2.0
HEALTH_EVERY = 60.0  # seconds between two health lines in the log


class OwnershipStore(HasLeases, HasGroups, HasRoster, Protocol):
    """What the lease keeper reads and writes: the leases, the groups, the agents' cursors (for its health line)."""


class Resume(Protocol):
    async def __call__(self, group: Group, *, backlog: bool = False) -> None:
        """A group this process has just taken: resume it here (`Engine.resume`)."""
        ...


@dataclass(frozen=True)
class OwnershipDeps:
    """What the lease keeper works with (the engine composes it)."""

    store: OwnershipStore
    spawn: Spawn
    resume: Resume
    wake: Callable[[int], None]  # an owned group's log grew: route and deliver
    drop: Callable[[int], None]  # another process took the group: stop running it here
    running_runs: Callable[[], int]  # runs in flight in this process (for the health line)


class Ownership:
    def __init__(self, deps: OwnershipDeps, scope: str, *, ttl: float = LEASE_TTL, tick: float = KEEP_EVERY,
                 shards: Shards | None = None) -> None:
        self.deps = deps
        self.scope = scope
        self.shards = shards
        self.ttl = ttl
        self.tick = tick
        self.owned: set[int] = set()
        self._seen: dict[int, int] = {}  # latest seq of each owned group at the last look
        self._claims: dict[int, asyncio.Task[object]] = {}
        self._claiming: dict[int, asyncio.Lock] = {}
        self._health_at = time.monotonic()

    def mine(self, group: Group) -> bool:
        """Whether this process may run `group`: in its scope and, when the bot runs as
        shards, in a guild of its shards."""
        return group.in_scope(self.scope) and (self.shards is None or self.shards.serves(group.guild_id))

    async def start(self) -> None:
        try:
            await self.deps.store.leases.watch(self._appended_elsewhere)
        except StoreError as exc:  # the keeper's look every tick still notices other processes' rows
            log.warning("cannot listen for other processes' messages (%s); polling every %.0fs instead", exc, self.tick)
        for group in await self.deps.store.groups.list_groups():
            if self.mine(group):
                await self.claim(group, backlog=True)
        self.deps.spawn(self._keep(), "lease-keeper")

    async def claim(self, group: Group, *, backlog: bool = False) -> str | None:
        """Take the group's lease and resume it here. None when this process runs it
        now; otherwise who holds it (for people). `backlog`: see `Engine.resume` (True when
        this process starts or takes over a group nobody runs, False when something happened
        in the group just now)."""
        async with self._claiming.setdefault(group.id, asyncio.Lock()):  # one claim of a group at a time
            if group.id in self.owned:
                return None
            holder = await self.deps.store.leases.acquire_lease(group.id, self.ttl)
            if holder is not None:
                log.debug("group=%s is run by %s", group.id, holder)
                return holder
            self.owned.add(group.id)
            self._seen[group.id] = group.latest_seq
            await self.deps.resume(group, backlog=backlog)
            return None

    def _appended_elsewhere(self, group_id: int) -> None:
        """Another process stored a row in a group: wake it when it runs here (a group run
        elsewhere is that process's; one whose lease lapsed is taken by the keeper)."""
        if group_id in self.owned:
            self.deps.wake(group_id)

    def claim_soon(self, group_id: int) -> None:
        """Claim a group this process does not run yet (one attempt at a time)."""
        if group_id in self._claims or group_id in self.owned:
            return
        task = self.deps.spawn(self._claim_by_id(group_id), f"claim-{group_id}")
        self._claims[group_id] = task
        task.add_done_callback(lambda _t: self._claims.pop(group_id, None))

    async def settled(self, group_id: int) -> None:
        """Until a claim of this group in flight has ended."""
        task = self._claims.get(group_id)
        if task is not None:
            await asyncio.wait([task])

    async def _claim_by_id(self, group_id: int) -> None:
        try:
            group = await self.deps.store.groups.get_group(group_id)
            if group.enabled and self.mine(group):
                await self.claim(group)
        except StoreError as exc:  # the keeper tries again on its next tick
            log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,
                    "group=%s could not be claimed yet: %s", group_id, exc)

    def forget(self, group_id: int) -> None:
        self.owned.discard(group_id)
        self._seen.pop(group_id, None)

    async def release(self) -> None:
        owned, self.owned = set(self.owned), set()
        if owned:
            await self.deps.store.leases.release_leases(owned)

    # the keeper ---------------------------------------------------------
    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            try:
                await self.keep_once()
            except asyncio.CancelledError:
                raise
            except StoreUnavailable as exc:  # the store logs the outage
                log.debug("could not renew group leases: %s", exc)
            except Exception as exc:  # the database may be locked for a while: try again next tick
                log.warning("could not renew group leases: %s", exc)

    async def keep_once(self) -> None:
        store = self.deps.store
        if self.owned:
            held = await store.leases.renew_leases(self.owned, self.ttl)
            for group_id in sorted(self.owned - held):
                log.warning("group=%s: another process took it over; stopping it here", group_id)
                self.deps.drop(group_id)
        groups = await store.groups.list_groups()
        taken = await store.leases.held_elsewhere() if any(g.id not in self.owned for g in groups) else set()
        for group in groups:
            if not self.mine(group):
                continue
            if group.id not in self.owned:
                if group.id not in taken:  # free, expired, or its holder died: try to take it
                    await self.claim(group, backlog=True)
            elif self._seen.get(group.id) != group.latest_seq:
                self._seen[group.id] = group.latest_seq
                self.deps.wake(group.id)  # new rows, perhaps written by another process
        if time.monotonic() - self._health_at >= HEALTH_EVERY:
            self._health_at = time.monotonic()
            log.info("%s", await self.health(groups))

    async def health(self, groups: list[Group]) -> str:
        """One line for the log: the groups led here, the leases elsewhere, the queue depth."""
        mine = [g for g in groups if self.mine(g)]
        led = [g for g in mine if g.id in self.owned]
        behind = 0
        for group in led:
            behind += sum(1 for a in await self.deps.store.roster.list_agents(group.id, enabled_only=True)
                          if a.delivered_through < group.latest_seq)
        where = f" ({self.shards})" if self.shards is not None else ""
        return (f"health{where}: leading {len(led)} of {len(mine)} groups in scope, "
                f"{len(mine) - len(led)} led elsewhere; {behind} agent deliveries pending; "
                f"{self.deps.running_runs()} runs in flight")
