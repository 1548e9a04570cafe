"""Store methods for schedules (seed 002): add, list, remove, the due ones, and firing one.

Firing is one transaction: the task row is appended (opening its episode) and
the schedule moves to its next slot together, and only when the schedule is
still live and still due at the slot the caller saw. So a crash never runs a
slot twice or loses it, and two processes (or a tick racing a restart) never
both fire it. A part of `storage.store.SqlStore` (SQLite and PostgreSQL).
"""
from __future__ import annotations

from bot.core.errors import InvalidInput, NotFound
from bot.core.models import Episode, Message, NewMessage
from bot.core.rules.schedule import Schedule, When
from storage.access import Access
from storage.sql import Row, the_one


def to_schedule(row: Row) -> Schedule:
    every = row["every_seconds"]
    return Schedule(
        id=int(row["id"]),
        group_id=int(row["group_id"]),
        agent_id=int(row["agent_id"]),
        when=When(every_seconds=None if every is None else int(every), at_time=row["at_time"], tz=row["tz"]),
        prompt=row["prompt"],
        next_run_at=float(row["next_run_at"]),
        last_run_at=None if row["last_run_at"] is None else float(row["last_run_at"]),
        created_by=row["created_by"],
        created_at=float(row["created_at"]),
    )


class Schedules:
    """The store's `ScheduleStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def add_schedule(self, agent_id: int, when: When, prompt: str, *, next_run_at: float,
                           created_by: str | None = None) -> Schedule:
        """A schedule for an agent on the roster (its group is the agent's)."""
        if (when.every_seconds is None) == (when.at_time is None):
            raise InvalidInput("a schedule needs exactly one of every and at")
        async with self._access.write(await self._access.group_of("agents", agent_id)) as db:
            agent = await self._access.agent_row(db, agent_id)
            schedule_id = await db.insert(
                "INSERT INTO schedules (group_id, agent_id, every_seconds, at_time, tz, prompt, next_run_at,"
                " created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (int(agent["group_id"]), agent_id, when.every_seconds, when.at_time, when.tz, prompt,
                 float(next_run_at), created_by, self._access.now()),
            )
            row = await the_one(db, "SELECT * FROM schedules WHERE id = ?", (schedule_id,))
        return to_schedule(row)

    async def schedules(self, group_id: int, *, agent_id: int | None = None) -> list[Schedule]:
        """The group's live schedules (of one agent when given), oldest first."""
        sql, params = "SELECT * FROM schedules WHERE group_id = ? AND removed_at IS NULL", [group_id]
        if agent_id is not None:
            sql += " AND agent_id = ?"
            params.append(agent_id)
        async with self._access.read() as db:
            rows = await db.all(sql + " ORDER BY id", params)
        return [to_schedule(row) for row in rows]

    async def remove_schedule(self, group_id: int, schedule_id: int) -> Schedule:
        """Take a live schedule of this group off; NotFound when there is none with that id here."""
        async with self._access.write(group_id) as db:
            row = await db.one(
                "SELECT * FROM schedules WHERE id = ? AND group_id = ? AND removed_at IS NULL",
                (schedule_id, group_id))
            if row is None:
                raise NotFound(f"There is no schedule #{schedule_id} here; /agent schedule list shows the ids.")
            await db.exec("UPDATE schedules SET removed_at = ? WHERE id = ?", (self._access.now(), schedule_id))
        return to_schedule(row)

    async def due_schedules(self, now: float) -> list[Schedule]:
        """Live schedules of agents on the roster whose next run is at or before `now`, earliest first."""
        async with self._access.read() as db:
            rows = await db.all(
                "SELECT s.* FROM schedules s JOIN agents a ON a.id = s.agent_id"
                " WHERE s.removed_at IS NULL AND a.removed_at IS NULL AND s.next_run_at <= ?"
                " ORDER BY s.next_run_at, s.id", (float(now),))
        return [to_schedule(row) for row in rows]

    async def fire_schedule(self, schedule: Schedule, task: NewMessage, *, ran_at: float,
                            next_run_at: float) -> tuple[Message, Episode] | None:
        """Append `task` as a new episode's task and move the schedule to `next_run_at`, in one
        transaction; None (nothing written) when it was removed or already fired for that slot."""
        if next_run_at <= schedule.next_run_at:
            raise ValueError("a fired schedule must move forward")
        async with self._access.write(schedule.group_id) as db:
            changed = await db.exec(
                "UPDATE schedules SET next_run_at = ?, last_run_at = ?"
                " WHERE id = ? AND removed_at IS NULL AND next_run_at = ?",
                (float(next_run_at), float(ran_at), schedule.id, schedule.next_run_at))
            if not changed:
                return None
            return await self._access.append_task(db, schedule.group_id, task)

    async def next_schedule(self, group_id: int) -> Schedule | None:
        """The group's live schedule that runs first."""
        async with self._access.read() as db:
            row = await db.one(
                "SELECT * FROM schedules WHERE group_id = ? AND removed_at IS NULL"
                " ORDER BY next_run_at, id LIMIT 1", (group_id,))
        return None if row is None else to_schedule(row)

    async def get_schedule(self, schedule_id: int) -> Schedule:
        """A schedule, live or removed."""
        async with self._access.read() as db:
            row = await db.one("SELECT * FROM schedules WHERE id = ?", (schedule_id,))
        if row is None:
            raise NotFound(f"no schedule with id {schedule_id}")
        return to_schedule(row)
