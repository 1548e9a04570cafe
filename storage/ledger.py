"""Store methods around the thread: decisions, episodes, usage, webhooks, taken
interactions and read cursors. Mixed into `storage.store.SqliteStore`."""
from __future__ import annotations

import logging
from typing import Sequence, get_args

from bot.core.errors import InvalidInput, NotFound
from bot.core.models import (
    SUMMARY_SPENDER,
    Completion,
    Decision,
    Episode,
    EpisodeStatus,
    Message,
    NewMessage,
    Spend,
    SpendKind,
    Usage,
)
from bot.core.secrets import SECRETS, mask_error
from storage.rows import dumps, to_decision, to_episode
from storage.run import RunMixin
from storage.sql import Db, Row

log = logging.getLogger(__name__)

EPISODE_END_STATUSES = frozenset(get_args(EpisodeStatus)) - {"running"}
ADVANCE_STEP = 1000  # decisions read at a time when moving routed_through
DECISIONS_PER_INSERT = 50  # rows of one INSERT statement: 850 parameters (17 each), under SQLite's oldest limit (999)
INTERACTIONS_KEPT = 24 * 3600.0  # seconds a taken interaction's id is kept (Discord answers one for 15 minutes)


class LedgerMixin(RunMixin):
    # routing ------------------------------------------------------------
    async def record_decision(self, group_id: int, decision: Decision) -> None:
        """Store once; a second decision for the same seq is ignored."""
        await self.record_decisions(group_id, [decision])

    async def record_decisions(self, group_id: int, decisions: Sequence[Decision]) -> None:
        """Store each once, in one transaction (a chunk of a backlog is one write, not one per
        row); a second decision for the same seq is ignored."""
        if not decisions:
            return
        async with self._write(group_id) as db:
            group = await self._group_row(db, group_id)
            missing = [d.seq for d in decisions if not 1 <= d.seq <= int(group["latest_seq"])]  # seqs have no gaps
            if missing:
                raise NotFound(f"no message {missing[0]} in group {group_id}")
            now = self._now()
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
                await self._exec(
                    db,
                    "INSERT INTO decisions (group_id, seq, source, agent_ids, agent_names,"
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
            rows = await self._all(
                db, "SELECT seq FROM decisions WHERE group_id = ? AND seq > ? ORDER BY seq LIMIT ?",
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
            await self._exec(db, "UPDATE groups SET routed_through = ? WHERE id = ?", (end, group_id))

    async def get_decision(self, group_id: int, seq: int) -> Decision | None:
        async with self._read() as db:
            row = await self._one(
                db, "SELECT * FROM decisions WHERE group_id = ? AND seq = ?", (group_id, seq)
            )
        return None if row is None else to_decision(row)

    async def decisions(self, group_id: int, *, after: int, through: int) -> dict[int, Decision]:
        async with self._read() as db:
            rows = await self._all(
                db,
                "SELECT * FROM decisions WHERE group_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
                (group_id, after, through),
            )
        return {int(row["seq"]): to_decision(row) for row in rows}

    async def unrouted(self, group_id: int, *, through: int, limit: int | None = None) -> list[Message]:
        return await self._messages_where(
            "group_id = ? AND seq > (SELECT routed_through FROM groups WHERE id = ?) AND seq <= ?",
            (group_id, group_id, through), limit=limit,
        )

    # episodes -----------------------------------------------------------
    async def _episode_row(self, db: Db, episode_id: int) -> Episode:
        row = await self._one(db, "SELECT * FROM episodes WHERE id = ?", (episode_id,))
        if row is None:
            raise NotFound(f"no episode with id {episode_id}")
        return to_episode(row)

    async def get_episode(self, episode_id: int) -> Episode:
        async with self._read() as db:
            return await self._episode_row(db, episode_id)

    async def end_episode(
        self, episode_id: int, status: str, *, notice: NewMessage | None = None
    ) -> tuple[Episode, Message | None] | None:
        """Set a running episode's final status and, in the same transaction, append
        `notice` (e.g. the max_turns notice). None when the episode had already
        ended (nothing changes, no notice)."""
        if status not in EPISODE_END_STATUSES:
            raise InvalidInput(
                f"unknown episode status {status!r}; use one of {', '.join(sorted(EPISODE_END_STATUSES))}"
            )
        async with self._write(await self._group_of("episodes", episode_id)) as db:
            episode = await self._episode_row(db, episode_id)
            if not episode.running:
                return None
            await self._exec(
                db, "UPDATE episodes SET status = ?, ended_at = ? WHERE id = ?", (status, self._now(), episode_id)
            )
            shown = None
            if notice is not None:
                shown = await self._append(db, episode.group_id, notice, episode_id=episode_id)
            return await self._episode_row(db, episode_id), shown

    async def usage_since(self, group_id: int, since: float) -> dict[str, Usage]:
        """Participant tokens per agent name (runs started since `since`) plus
        'selector' (decisions made since `since`); 'selector' is always present."""
        async with self._read() as db:
            rows = await self._all(
                db,
                "SELECT a.name AS name, SUM(r.prompt_tokens) AS p, SUM(r.completion_tokens) AS c,"
                " SUM(r.cached_tokens) AS k, MAX(r.estimated) AS e"
                " FROM runs AS r JOIN agents AS a ON a.id = r.agent_id"
                " WHERE r.group_id = ? AND r.started_at >= ? GROUP BY a.name ORDER BY a.name",
                (group_id, since),
            )
            sel = await self._the_one(
                db,
                "SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0),"
                " COALESCE(SUM(cached_tokens), 0), COALESCE(MAX(estimated), 0)"
                " FROM decisions WHERE group_id = ? AND created_at >= ?",
                (group_id, since),
            )
        totals: dict[str, Usage] = {}
        for row in rows:
            usage = Usage(int(row["p"]), int(row["c"]), int(row["k"]), bool(row["e"]))
            totals[row["name"]] = totals.get(row["name"], Usage()) + usage
        totals["selector"] = totals.get("selector", Usage()) + Usage(
            int(sel[0]), int(sel[1]), int(sel[2]), bool(sel[3])
        )
        return totals

    async def spending(self, group_id: int, since: float) -> list[Spend]:
        """Model calls since `since`, per (agent name, model) of the runs started, per model of the
        selector's decisions (one call per attempt), of the catch-up summaries and of the rolling summaries
        (kind 'summary', dated when each summary was first written)."""
        async with self._read() as db:
            runs = await self._all(
                db,
                "SELECT a.name, COALESCE(r.model, ''), SUM(r.calls), SUM(r.prompt_tokens), SUM(r.completion_tokens),"
                " SUM(r.cached_tokens), MAX(r.estimated), COALESCE(r.provider, '')"
                " FROM runs AS r JOIN agents AS a ON a.id = r.agent_id WHERE r.group_id = ? AND r.started_at >= ?"
                " GROUP BY a.name, r.model, r.provider ORDER BY a.name, r.model, r.provider",
                (group_id, since),
            )
            selector = await self._all(
                db,
                "SELECT 'selector', COALESCE(model, ''), SUM(attempts), SUM(prompt_tokens), SUM(completion_tokens),"
                " SUM(cached_tokens), MAX(estimated), COALESCE(provider, '') FROM decisions"
                " WHERE group_id = ? AND created_at >= ? AND attempts > 0 GROUP BY model, provider"
                " ORDER BY model, provider",
                (group_id, since),
            )
            checks = await self._all(  # calls of no run: the memory check, with its agent's calls
                db,
                "SELECT a.name, c.model, COUNT(*), SUM(c.prompt_tokens), SUM(c.completion_tokens),"
                " SUM(c.cached_tokens), MAX(c.estimated), c.provider FROM model_calls AS c"
                " JOIN agents AS a ON a.id = c.agent_id WHERE c.group_id = ? AND c.created_at >= ?"
                " GROUP BY a.name, c.model, c.provider ORDER BY a.name, c.model, c.provider",
                (group_id, since),
            )
            catchup = await self._all(
                db,
                "SELECT 'catch-up', model, SUM(calls), SUM(prompt_tokens), SUM(completion_tokens), 0, 0,"
                " COALESCE(provider, '') FROM summaries WHERE group_id = ? AND created_at >= ?"
                " GROUP BY model, provider ORDER BY model, provider",
                (group_id, since),
            )
            rolling = await self._all(
                db,
                f"SELECT '{SUMMARY_SPENDER}', model, SUM(calls), SUM(prompt_tokens), SUM(completion_tokens),"
                " SUM(cached_tokens), MAX(estimated), COALESCE(provider, '') FROM context_summaries"
                " WHERE group_id = ? AND created_at >= ? GROUP BY model, provider ORDER BY model, provider",
                (group_id, since),
            )
        out: list[Spend] = []
        sources: tuple[tuple[SpendKind, list[Row]], ...] = (
            ("agent", runs), ("agent", checks), ("selector", selector), ("catch-up", catchup), ("summary", rolling))
        for kind, rows in sources:
            for r in rows:
                usage = Usage(int(r[3] or 0), int(r[4] or 0), int(r[5] or 0), bool(r[6]))
                out.append(Spend(str(r[0]), kind, str(r[1] or ""), int(r[2] or 0), usage, str(r[7] or "")))
        return out

    async def record_call(self, group_id: int, agent_id: int | None, purpose: str, call: Completion) -> None:
        """A model call that is no run, decision or summary (the memory check), for the usage report."""
        async with self._write(group_id) as db:
            await self._insert(
                db, "INSERT INTO model_calls (group_id, agent_id, purpose, model, provider, prompt_tokens,"
                    " completion_tokens, cached_tokens, estimated, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (group_id, agent_id, purpose, call.model, call.provider, call.usage.prompt_tokens,
                 call.usage.completion_tokens, call.usage.cached_tokens, int(call.usage.estimated), self._now()))

    # webhooks -----------------------------------------------------------
    async def get_webhook(self, channel_id: str) -> tuple[str, str] | None:
        async with self._read() as db:
            row = await self._one(
                db, "SELECT webhook_id, token FROM webhooks WHERE channel_id = ?", (channel_id,)
            )
        if row is None:
            return None
        SECRETS.register(row["token"])  # masked wherever it could show from now on
        return row["webhook_id"], row["token"]

    async def register_webhook_tokens(self) -> int:
        async with self._read() as db:
            rows = await self._all(db, "SELECT token FROM webhooks")
        SECRETS.register_all(row[0] for row in rows)
        return len(rows)

    async def save_webhook(self, channel_id: str, webhook_id: str, token: str) -> None:
        SECRETS.register(token)
        async with self._write() as db:  # a channel's, of no group: alone
            await self._exec(
                db,
                "INSERT INTO webhooks (channel_id, webhook_id, token) VALUES (?, ?, ?)"
                " ON CONFLICT (channel_id) DO UPDATE SET webhook_id = excluded.webhook_id,"
                " token = excluded.token",
                (channel_id, webhook_id, token),
            )

    async def forget_webhook(self, channel_id: str) -> None:
        async with self._write() as db:  # a channel's, of no group: alone
            await self._exec(db, "DELETE FROM webhooks WHERE channel_id = ?", (channel_id,))

    # interactions -------------------------------------------------------
    async def claim_interaction(self, interaction_id: str) -> bool:
        """Take a Discord interaction for this process: True for the first store to ask, False for
        every later one (another process, or a second delivery). Ids older than a day are dropped
        on the way (an index range of the few expired rows)."""
        now = self._now()
        async with self._write() as db:  # of no group: alone
            taken = await self._exec(
                db, "INSERT INTO interactions (id, owner, claimed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (interaction_id, self.owner, now),
            )
            await self._exec(db, "DELETE FROM interactions WHERE claimed_at < ?", (now - INTERACTIONS_KEPT,))
        return taken == 1

    # read cursors -------------------------------------------------------
    async def get_seen(self, group_id: int, user_id: str) -> int | None:
        async with self._read() as db:
            row = await self._one(
                db,
                "SELECT seen_through FROM read_cursors WHERE group_id = ? AND user_id = ?",
                (group_id, user_id),
            )
        return None if row is None else int(row[0])

    async def mark_seen(self, group_id: int, user_id: str, seq: int) -> int:
        """Clamp to 0..latest seq, never backwards; return the stored value."""
        async with self._write(group_id) as db:
            group = await self._group_row(db, group_id)
            target = max(0, min(int(seq), int(group["latest_seq"])))
            await self._advance_seen(db, group_id, user_id, target)
            row = await self._the_one(
                db,
                "SELECT seen_through FROM read_cursors WHERE group_id = ? AND user_id = ?",
                (group_id, user_id),
            )
            return int(row[0])

    async def _advance_seen(self, db: Db, group_id: int, user_id: str, seq: int) -> None:
        await self._exec(
            db,
            "INSERT INTO read_cursors (group_id, user_id, seen_through, updated_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (group_id, user_id) DO UPDATE"
            f" SET seen_through = {self._sql.greatest}(read_cursors.seen_through, excluded.seen_through),"
            " updated_at = excluded.updated_at",
            (group_id, user_id, seq, self._now()),
        )
