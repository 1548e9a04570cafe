"""Group leases: one owner per group across processes (SPEC §4).

The process whose store holds a group's row in `leases` runs that group's
dispatcher and delivery. A lease is taken when it is free, expired, already
ours, or held by a process on this host that no longer exists (so a restart
after kill -9 takes over at once instead of waiting for the expiry). Holders
renew their leases well before they expire and release them when they close.
Writes that act for a group (starting and settling runs) check inside their
transaction that no other owner holds it, so a process that lost its lease
can never post for the group.
"""
from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable

from bot.core.errors import LeaseLost
from storage.access import Access
from storage.sql import Db

log = logging.getLogger(__name__)


def owner_alive(owner: str) -> bool:
    """False only when `owner` names a process on this host that has exited."""
    host, _, rest = owner.partition("|")
    pid_text = rest.partition("|")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True  # another machine: only the expiry tells
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    try:  # killed but not reaped yet (a zombie) is dead too
        with open(f"/proc/{pid_text}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def describe_owner(owner: str, label: str) -> str:
    """'console (pid 1234)', or '... on host-b' for another machine."""
    host, _, rest = owner.partition("|")
    pid = rest.partition("|")[0]
    where = "" if host == socket.gethostname() else f" on {host}"
    return f"{label or 'another process'} (pid {pid}{where})"


class Leases:
    """The store's `LeaseStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def watch(self, appended: Callable[[int], None]) -> None:
        """Call `appended(group_id)` soon after another process stores a row in a group:
        PostgreSQL's LISTEN/NOTIFY, at once; on SQLite nothing is called (the lease keeper
        compares each group's latest seq every couple of seconds instead)."""
        self._access.check_open()
        await self._access.backend.watch(self._access.owner, appended)

    async def acquire_lease(self, group_id: int, ttl: float) -> str | None:
        """Take the group's lease for `ttl` seconds. None when this store holds it now;
        otherwise who holds it, for people ('console (pid 1234)')."""
        async with self._access.write(group_id) as db:
            await self._access.group_row(db, group_id)
            row = await db.one("SELECT owner, label, expires_at FROM leases WHERE group_id = ?", (group_id,))
            now = self._access.now()
            if (row is not None and row["owner"] != self._access.owner and float(row["expires_at"]) > now
                    and owner_alive(row["owner"])):
                return describe_owner(row["owner"], row["label"])
            if row is not None and row["owner"] != self._access.owner:
                log.info("group=%s: taking over the lease of %s", group_id, describe_owner(row["owner"], row["label"]))
            await db.exec(
                "INSERT INTO leases (group_id, owner, label, acquired_at, expires_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (group_id) DO UPDATE SET owner = excluded.owner, label = excluded.label,"
                " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                (group_id, self._access.owner, self._access.owner_label, now, now + ttl),
            )
        return None

    async def renew_leases(self, group_ids: Iterable[int], ttl: float) -> set[int]:
        """Extend this store's leases of `group_ids`; return those it still holds."""
        wanted = sorted({int(g) for g in group_ids})
        if not wanted:
            return set()
        marks = ", ".join("?" * len(wanted))
        async with self._access.write() as db:  # several groups: alone
            await db.exec(
                f"UPDATE leases SET expires_at = ? WHERE owner = ? AND group_id IN ({marks})",  # noqa: S608 (placeholders only)
                (self._access.now() + ttl, self._access.owner, *wanted),
            )
            rows = await db.all(
                f"SELECT group_id FROM leases WHERE owner = ? AND group_id IN ({marks})", (self._access.owner, *wanted)  # noqa: S608 (placeholders only)
            )
        return {int(r[0]) for r in rows}

    async def release_leases(self, group_ids: Iterable[int] | None = None) -> None:
        """Give up this store's leases (all of them, or those of `group_ids`)."""
        async with self._access.write() as db:  # several groups: alone
            if group_ids is None:
                await db.exec("DELETE FROM leases WHERE owner = ?", (self._access.owner,))
                return
            for group_id in group_ids:
                await db.exec("DELETE FROM leases WHERE owner = ? AND group_id = ?", (self._access.owner, group_id))

    async def held_elsewhere(self) -> set[int]:
        """The groups whose lease another live holder has and has not let expire (one read: a
        process that leads none of them need not try to take each one every tick)."""
        async with self._access.read() as db:
            rows = await db.all("SELECT group_id, owner, expires_at FROM leases WHERE owner <> ?",
                                   (self._access.owner,))
        now = self._access.now()
        alive: dict[str, bool] = {}
        held: set[int] = set()
        for row in rows:
            owner = row["owner"]
            if owner not in alive:
                alive[owner] = owner_alive(owner)
            if float(row["expires_at"]) > now and alive[owner]:
                held.add(int(row["group_id"]))
        return held

    async def leased_elsewhere(self, group_id: int) -> bool:
        """Whether another store holds the group's lease (the check writes make, as a read)."""
        async with self._access.read() as db:
            return await self._held_by_another(db, group_id)

    async def require_lease(self, db: Db, group_id: int) -> None:
        if await self._held_by_another(db, group_id):
            raise LeaseLost(f"group {group_id} is run by another process now")

    async def _held_by_another(self, db: Db, group_id: int) -> bool:
        row = await db.one("SELECT owner FROM leases WHERE group_id = ?", (group_id,))
        return row is not None and row["owner"] != self._access.owner
