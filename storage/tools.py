"""Store methods for agents' tools: their grants, and the journal of tool calls
(`bot.core.ports.ToolStore`). A part of `storage.store.SqlStore` (SQLite and PostgreSQL).

A call is journaled before it runs (`pending` with its step, then `running`) and its result
when it returns (`done`), so a run cut by a crash resumes from it (`bot.core.features.tools`):
the agent's next run of the same episode adopts the journal of its interrupted runs.
Arguments and results are masked before they are stored.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from bot.core.errors import NotFound
from bot.core.models import JournaledCall, ToolCall, ToolCallStatus, ToolGrant
from bot.core.rules.secrets import mask
from storage.access import Access
from storage.sql import Row

STATUSES: tuple[ToolCallStatus, ...] = ("pending", "running", "done", "unknown")
# The journal of a run a crash or restart cut, of the episode of run ? (bound), is the agent's next run's.
_ADOPTABLE = ("group_id = ? AND agent_id = ? AND run_id <> ? AND run_id IN (SELECT id FROM runs WHERE"
              " status = 'interrupted' AND kind = 'group'"  # (a direct run's asker is gone after a restart;
              # a regenerate cut short is not resumed: its message keeps its text)
              " AND episode_id = (SELECT episode_id FROM runs WHERE id = ?))")


def to_call(row: Row) -> JournaledCall:
    status = row["status"]
    if status not in STATUSES:
        raise NotFound(f"tool call {row['id']} has an unknown status {status!r}")
    return JournaledCall(id=int(row["id"]), run_id=int(row["run_id"]), step=int(row["step"]),
                         position=int(row["position"]), call_id=row["call_id"], tool=row["tool"],
                         arguments=row["arguments"], status=status, result=row["result"],
                         assistant_text=row["assistant_text"], started_at=float(row["started_at"]),
                         finished_at=None if row["finished_at"] is None else float(row["finished_at"]))


class Tools:
    """The store's `ToolStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def tool_grants(self, agent_id: int) -> list[ToolGrant]:
        async with self._access.read() as db:
            rows = await db.all("SELECT pattern, confirm FROM tool_grants WHERE agent_id = ? ORDER BY pattern",
                                (agent_id,))
        return [ToolGrant(row["pattern"], None if row["confirm"] is None else bool(row["confirm"])) for row in rows]

    async def grant_tools(self, agent_id: int, patterns: Sequence[str], *, confirm: bool | None = None) -> None:
        flag = None if confirm is None else int(confirm)
        async with self._access.write(await self._access.group_of("agents", agent_id)) as db:
            await self._access.agent_row(db, agent_id)
            for pattern in patterns:
                found = await db.one("SELECT confirm FROM tool_grants WHERE agent_id = ? AND pattern = ?",
                                     (agent_id, pattern))
                if found is None:
                    await db.exec("INSERT INTO tool_grants (agent_id, pattern, confirm, created_at)"
                                  " VALUES (?, ?, ?, ?)", (agent_id, pattern, flag, self._access.now()))
                elif confirm is not None:
                    await db.exec("UPDATE tool_grants SET confirm = ? WHERE agent_id = ? AND pattern = ?",
                                  (flag, agent_id, pattern))

    async def revoke_tools(self, agent_id: int, patterns: Sequence[str]) -> int:
        removed = 0
        async with self._access.write(await self._access.group_of("agents", agent_id)) as db:
            await self._access.agent_row(db, agent_id, include_removed=True)
            for pattern in patterns:
                removed += await db.exec("DELETE FROM tool_grants WHERE agent_id = ? AND pattern = ?",
                                         (agent_id, pattern))
        return removed

    async def journal_step(self, group_id: int, agent_id: int, run_id: int, step: int, assistant_text: str,
                           calls: Sequence[ToolCall]) -> list[JournaledCall]:
        now = self._access.now()
        async with self._access.write(group_id) as db:
            ids = [await db.insert(
                "INSERT INTO tool_calls (group_id, agent_id, run_id, step, position, call_id, tool, arguments,"
                " assistant_text, status, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
                (group_id, agent_id, run_id, step, position, call.id, call.name, mask(call.arguments),
                 mask(assistant_text) if position == 0 else "", now))
                for position, call in enumerate(calls)]
        for call_id in ids:
            self._access.remember_group("tool_calls", call_id, group_id)
        text = mask(assistant_text)
        return [JournaledCall(id=call_id, run_id=run_id, step=step, position=position, call_id=call.id,
                              tool=call.name, arguments=mask(call.arguments), status="pending", assistant_text=text)
                for position, (call_id, call) in enumerate(zip(ids, calls, strict=True))]

    async def journal_running(self, call_id: int) -> None:
        async with self._access.write(await self._access.group_of("tool_calls", call_id)) as db:
            if not await db.exec("UPDATE tool_calls SET status = 'running', started_at = ? WHERE id = ?",
                                 (self._access.now(), call_id)):
                raise NotFound(f"no tool call with id {call_id}")

    async def journal_result(self, call_id: int, result: str, *, status: str = "done") -> None:
        if status not in ("done", "unknown"):
            raise ValueError(f"a tool call's result has status done or unknown, not {status!r}")
        async with self._access.write(await self._access.group_of("tool_calls", call_id)) as db:
            if not await db.exec("UPDATE tool_calls SET status = ?, result = ?, finished_at = ? WHERE id = ?",
                                 (status, mask(result), self._access.now(), call_id)):
                raise NotFound(f"no tool call with id {call_id}")

    async def adopt_tool_calls(self, group_id: int, agent_id: int, run_id: int) -> list[JournaledCall]:
        params = (group_id, agent_id, run_id, run_id)
        async with self._access.read() as db:  # most runs have nothing to take over: no write for them
            found = await db.one(f"SELECT COUNT(*) FROM tool_calls WHERE {_ADOPTABLE}", params)  # noqa: S608 (a condition from code; values bound)
        if found is not None and int(found[0]):
            async with self._access.write(group_id) as db:
                await db.exec(f"UPDATE tool_calls SET run_id = ? WHERE {_ADOPTABLE}", (run_id, *params))  # noqa: S608 (a condition from code; values bound)
        return await self.run_tool_calls(run_id)

    async def run_tool_calls(self, run_id: int) -> list[JournaledCall]:
        """The journal of a run, in order (steps, then each step's calls)."""
        async with self._access.read() as db:
            rows = await db.all("SELECT * FROM tool_calls WHERE run_id = ? ORDER BY step, position, id", (run_id,))
        return [to_call(row) for row in rows]

    async def tool_calls_by_run(self, run_ids: Iterable[int]) -> dict[int, list[JournaledCall]]:
        """The journals of these runs (a run without calls has no key), each in order."""
        ids = sorted(set(run_ids))
        if not ids:
            return {}
        async with self._access.read() as db:
            rows = await db.all(f"SELECT * FROM tool_calls WHERE run_id IN ({','.join('?' * len(ids))})"  # noqa: S608 (placeholders only)
                                " ORDER BY run_id, step, position, id", ids)
        found: dict[int, list[JournaledCall]] = {}
        for row in rows:
            call = to_call(row)
            found.setdefault(call.run_id, []).append(call)
        return found
