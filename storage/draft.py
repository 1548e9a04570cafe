"""Store methods for provisional messages: the parts of a reply shown while it is written
(`bot.core.ports.DraftStore`). A part of `storage.store.SqlStore` (SQLite and PostgreSQL).

A draft belongs to a run. A committed reply owns the drafts of its run until its row is
confirmed (`confirm_message` deletes them); a run that ended without a reply leaves its
drafts to the agent's next run (`adopt_drafts`) or to the sweep (`orphan_drafts`).
"""
from __future__ import annotations

from collections.abc import Iterable

from bot.core.errors import NotFound
from bot.core.models import DraftPart
from storage.access import Access
from storage.sql import Row, the_one

_UNOWNED = "run_id IN (SELECT id FROM runs WHERE status <> 'running' AND posted_seq IS NULL)"


def to_draft(row: Row) -> DraftPart:
    return DraftPart(id=int(row["id"]), group_id=int(row["group_id"]), agent_id=int(row["agent_id"]),
                     run_id=int(row["run_id"]), position=int(row["position"]), author_name=row["author_name"],
                     external_id=row["external_id"], text=row["text"], created_at=float(row["created_at"]))


class Drafts:
    """The store's `DraftStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def add_draft(self, group_id: int, agent_id: int, run_id: int, position: int, author_name: str,
                        text: str) -> DraftPart:
        async with self._access.write(group_id) as db:
            draft_id = await db.insert(
                "INSERT INTO drafts (group_id, agent_id, run_id, position, author_name, text, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (group_id, agent_id, run_id, position, author_name, text, self._access.now()))
            row = await the_one(db, "SELECT * FROM drafts WHERE id = ?", (draft_id,))
        self._access.remember_group("drafts", draft_id, group_id)
        return to_draft(row)

    async def draft_posted(self, draft_id: int, external_id: str) -> None:
        async with self._access.write(await self._access.group_of("drafts", draft_id)) as db:
            if not await db.exec("UPDATE drafts SET external_id = ? WHERE id = ?", (str(external_id), draft_id)):
                raise NotFound(f"no draft with id {draft_id}")

    async def draft_parts(self, run_id: int) -> list[DraftPart]:
        async with self._access.read() as db:
            rows = await db.all("SELECT * FROM drafts WHERE run_id = ? ORDER BY position, id", (run_id,))
        return [to_draft(row) for row in rows]

    async def adopt_drafts(self, group_id: int, agent_id: int, run_id: int) -> list[DraftPart]:
        where = f"group_id = ? AND agent_id = ? AND run_id <> ? AND {_UNOWNED}"
        params = (group_id, agent_id, run_id)
        async with self._access.read() as db:  # most runs have nothing to take over: no write for them
            found = await db.one(f"SELECT COUNT(*) FROM drafts WHERE {where}", params)  # noqa: S608 (where: a condition from code; values bound)
        if found is not None and int(found[0]):
            async with self._access.write(group_id) as db:
                await db.exec(f"UPDATE drafts SET run_id = ? WHERE {where}", (run_id, *params))  # noqa: S608 (where: a condition from code; values bound)
        return await self.draft_parts(run_id)

    async def orphan_drafts(self, group_id: int) -> list[DraftPart]:
        async with self._access.read() as db:
            rows = await db.all(f"SELECT * FROM drafts WHERE group_id = ? AND {_UNOWNED}"  # noqa: S608 (_UNOWNED: a condition from code)
                                       " ORDER BY run_id, position, id", (group_id,))
        return [to_draft(row) for row in rows]

    async def drop_drafts(self, draft_ids: Iterable[int]) -> None:
        ids = sorted(set(draft_ids))
        if not ids:
            return
        async with self._access.write(await self._access.group_of("drafts", ids[0])) as db:
            for draft_id in ids:
                await db.exec("DELETE FROM drafts WHERE id = ?", (draft_id,))
