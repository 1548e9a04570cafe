"""The routing decisions: who each row went to (`bot.core.rules.routing`, `bot.core.features.selector`), stored once
per row, and the group's `routed_through` mark (every row up to it has its decision)."""
from __future__ import annotations

import logging
from collections.abc import Sequence

from bot.core.errors import NotFound
from bot.core.models import Decision, Message
from bot.core.rules.secrets import mask_error
from storage.access import Access
from storage.codec import dumps, to_decision
from storage.sql import Db

log = logging.getLogger(__name__)

ADVANCE_STEP = 1000  # decisions read at a time when moving routed_through
DECISIONS_PER_INSERT = 50  # rows of one INSERT statement: 850 parameters (17 each), under SQLite's oldest limit (999)


class Routing:
    """The store's `RoutingStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def record_decision(self, group_id: int, decision: Decision) -> None:
        """Store once; a second decision for the same seq is ignored."""
        await self.record_decisions(group_id, [decision])

    async def record_decisions(self, group_id: int, decisions: Sequence[Decision]) -> None:
        """Store each once, in one transaction (a chunk of a backlog is one write, not one per
        row); a second decision for the same seq is ignored."""
        if not decisions:
            return
        async with self._access.write(group_id) as db:
            group = await self._access.group_row(db, group_id)
            missing = [d.seq for d in decisions if not 1 <= d.seq <= int(group["latest_seq"])]  # seqs have no gaps
            if missing:
                raise NotFound(f"no message {missing[0]} in group {group_id}")
            now = self._access.now()
            rows = [(
                group_id,
                decision.seq,
                decision.source,
                dumps(list(decision.agent_ids)),
                dumps(list(decision.agent_names)),
                dumps([mask_error(raw) for raw in decision.selector_raw]),
                decision.attempts,
                decision.confidence,
                decision.usage.prompt_tokens,
                decision.usage.completion_tokens,
                decision.usage.cached_tokens,
                int(decision.usage.estimated),
                int(decision.terminate),
                mask_error(decision.note),
                decision.created_at or now,
                decision.model or None,
                decision.provider or None,
            ) for decision in decisions]
            for at in range(0, len(rows), DECISIONS_PER_INSERT):  # one statement per 50 rows, not one per row
                part = rows[at:at + DECISIONS_PER_INSERT]
                await db.exec(
                    "INSERT INTO decisions (group_id, seq, source, agent_ids, agent_names,"  # noqa: S608 (placeholders only)
                    " selector_raw, attempts, confidence, prompt_tokens, completion_tokens,"
                    " cached_tokens, estimated, terminate, note, created_at, model, provider) VALUES "
                    + ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(part))
                    + " ON CONFLICT DO NOTHING",
                    tuple(value for row in part for value in row),
                )
            routed = int(group["routed_through"])
            if any(d.seq == routed + 1 for d in decisions):
                await self._advance_routed_through(db, group_id, routed)
        for decision in decisions:
            log.debug("group %s: decision for %s: %s", group_id, decision.seq, decision.source)

    async def _advance_routed_through(self, db: Db, group_id: int, routed: int) -> None:
        """Move `routed_through` to the end of the run of decisions routed+1, routed+2, ... (walked in
        seq order along the primary key: a query for the first decision without a successor was
        planned as a scan of the group's decisions per decision by PostgreSQL, quadratic in a backlog)."""
        end = routed
        while True:
            rows = await db.all(
                "SELECT seq FROM decisions WHERE group_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (group_id, end, ADVANCE_STEP),
            )
            for row in rows:
                if int(row[0]) != end + 1:
                    break
                end += 1
            else:
                if len(rows) == ADVANCE_STEP:
                    continue
            break
        if end > routed:
            await db.exec("UPDATE groups SET routed_through = ? WHERE id = ?", (end, group_id))

    async def get_decision(self, group_id: int, seq: int) -> Decision | None:
        async with self._access.read() as db:
            row = await db.one(
                "SELECT * FROM decisions WHERE group_id = ? AND seq = ?", (group_id, seq)
            )
        return None if row is None else to_decision(row)

    async def decisions(self, group_id: int, *, after: int, through: int) -> dict[int, Decision]:
        async with self._access.read() as db:
            rows = await db.all(
                "SELECT * FROM decisions WHERE group_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
                (group_id, after, through),
            )
        return {int(row["seq"]): to_decision(row) for row in rows}

    async def unrouted(self, group_id: int, *, through: int, limit: int | None = None) -> list[Message]:
        return await self._access.messages_where(
            "group_id = ? AND seq > (SELECT routed_through FROM groups WHERE id = ?) AND seq <= ?",
            (group_id, group_id, through), limit=limit,
        )
