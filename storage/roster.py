"""The roster: a group's agents (added, changed, removed, found by name) and each agent's cursor
(the seq its deliveries reached)."""
from __future__ import annotations

import unicodedata
from typing import Unpack

from bot.core.errors import InvalidInput
from bot.core.models import Agent
from bot.core.ports import AgentChanges
from bot.core.rules.validation import check_name_free
from storage.access import Access
from storage.codec import to_agent
from storage.sql import Db

AGENT_FIELDS = tuple(AgentChanges.__annotations__)  # what update_agent may change
AGENT_MODES = ("talk", "worker")


class Roster:
    """The store's `RosterStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def add_agent(
        self,
        group_id: int,
        name: str,
        role: str,
        system_prompt: str,
        *,
        model: str | None = None,
        avatar_url: str | None = None,
    ) -> Agent:
        """Append to the roster; the cursor starts at the group's latest seq."""
        name = _clean_name(name)
        async with self._access.write(group_id) as db:
            group = await self._access.group_row(db, group_id)
            await self._check_name_free(db, group_id, name)
            row = await db.one(
                "SELECT COALESCE(MAX(position), 0) FROM agents WHERE group_id = ? AND removed_at IS NULL",
                (group_id,),
            )
            position = int(row[0]) + 1 if row is not None else 1
            agent_id = await db.insert(
                "INSERT INTO agents (group_id, name, role, system_prompt, model, avatar_url,"
                " position, delivered_through, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (group_id, name, role, system_prompt, model, avatar_url, position,
                 int(group["latest_seq"]), self._access.now()),
            )
            return to_agent(await self._access.agent_row(db, agent_id))

    async def update_agent(self, /, agent_id: int, **fields: Unpack[AgentChanges]) -> Agent:
        """Change the fields given (None clears muted_until and the model settings); a caller that is not
        type-checked may still pass a field an agent does not have: InvalidInput."""
        unknown = sorted(set(fields) - set(AGENT_FIELDS))
        if unknown:
            raise InvalidInput(f"an agent has no field {unknown[0]!r}; use {', '.join(AGENT_FIELDS)}")
        changes: dict[str, object] = dict(fields)
        if "name" in changes:
            changes["name"] = _clean_name(str(changes["name"]))
        for flag in ("enabled", "memory"):
            if flag in changes:
                changes[flag] = int(bool(changes[flag]))
        if "mode" in changes and changes["mode"] not in AGENT_MODES:
            raise InvalidInput(f"mode must be talk or worker, not {changes['mode']!r}")
        if "position" in changes and not isinstance(changes["position"], int):
            raise InvalidInput(f"position must be a whole number, not {changes['position']!r}")
        async with self._access.write(await self._access.group_of("agents", agent_id)) as db:
            agent = await self._access.agent_row(db, agent_id)
            if "name" in changes:
                await self._check_name_free(db, int(agent["group_id"]), str(changes["name"]), agent_id)
            await self._access.update(db, "agents", agent_id, changes)
            return to_agent(await self._access.agent_row(db, agent_id))

    async def remove_agent(self, agent_id: int) -> None:
        """Take the agent off the roster (and its schedules); the row stays for old messages' references."""
        async with self._access.write(await self._access.group_of("agents", agent_id)) as db:
            await self._access.agent_row(db, agent_id)
            await db.exec("UPDATE agents SET removed_at = ? WHERE id = ?", (self._access.now(), agent_id))
            await db.exec("UPDATE schedules SET removed_at = ? WHERE agent_id = ? AND removed_at IS NULL",
                             (self._access.now(), agent_id))

    async def get_agent(self, agent_id: int) -> Agent:
        """An agent on the roster; a removed agent is NotFound."""
        async with self._access.read() as db:
            return to_agent(await self._access.agent_row(db, agent_id))

    async def find_agent(self, group_id: int, name: str) -> Agent | None:
        wanted = unicodedata.normalize("NFC", name.strip().lstrip("@")).casefold()
        for agent in await self.list_agents(group_id):
            if unicodedata.normalize("NFC", agent.name).casefold() == wanted:
                return agent
        return None

    async def list_agents(self, group_id: int, *, enabled_only: bool = False) -> list[Agent]:
        sql = "SELECT * FROM agents WHERE group_id = ? AND removed_at IS NULL"
        if enabled_only:
            sql += " AND enabled = 1"
        async with self._access.read() as db:
            rows = await db.all(sql + " ORDER BY position, id", (group_id,))
        return [to_agent(row) for row in rows]

    async def set_delivered_through(self, agent_id: int, seq: int) -> None:
        """Forward only, and never past the group's latest seq. Works on a removed
        agent too (a run that finishes after its agent was removed)."""
        async with self._access.write(await self._access.group_of("agents", agent_id)) as db:
            agent = await self._access.agent_row(db, agent_id, include_removed=True)
            group = await self._access.group_row(db, int(agent["group_id"]))
            target = min(int(seq), int(group["latest_seq"]))
            await db.exec(
                f"UPDATE agents SET delivered_through = {self._access.sql.greatest}(delivered_through, ?) WHERE id = ?",  # noqa: S608 (the dialect's function)
                (target, agent_id),
            )

    async def _check_name_free(
        self, db: Db, group_id: int, name: str, agent_id: int | None = None
    ) -> None:
        """InvalidInput when `name` reads the same as another agent's on the roster
        (case, accents and look-alike letters aside): decided here, inside the write."""
        rows = await db.all(
            "SELECT id, name FROM agents WHERE group_id = ? AND removed_at IS NULL", (group_id,)
        )
        check_name_free(name, [row["name"] for row in rows if row["id"] != agent_id])


def _clean_name(name: str) -> str:
    cleaned = name.strip()
    if not cleaned:
        raise InvalidInput("an agent needs a name")
    return cleaned
