"""The model calls a group made and their tokens, for the usage report: runs, the selector's
decisions, catch-up and rolling summaries, and calls of no run (`record_call`)."""
from __future__ import annotations

from bot.core.models import SUMMARY_SPENDER, Completion, Spend, SpendKind, Usage
from storage.access import Access
from storage.sql import Row, the_one


class Spending:
    """The store's `RecordStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def usage_since(self, group_id: int, since: float) -> dict[str, Usage]:
        """Participant tokens per agent name (runs started since `since`) plus
        'selector' (decisions made since `since`); 'selector' is always present."""
        async with self._access.read() as db:
            rows = await db.all(
                "SELECT a.name AS name, SUM(r.prompt_tokens) AS p, SUM(r.completion_tokens) AS c,"
                " SUM(r.cached_tokens) AS k, MAX(r.estimated) AS e"
                " FROM runs AS r JOIN agents AS a ON a.id = r.agent_id"
                " WHERE r.group_id = ? AND r.started_at >= ? GROUP BY a.name ORDER BY a.name",
                (group_id, since),
            )
            sel = await the_one(
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
        async with self._access.read() as db:
            runs = await db.all(
                "SELECT a.name, COALESCE(r.model, ''), SUM(r.calls), SUM(r.prompt_tokens), SUM(r.completion_tokens),"
                " SUM(r.cached_tokens), MAX(r.estimated), COALESCE(r.provider, '')"
                " FROM runs AS r JOIN agents AS a ON a.id = r.agent_id WHERE r.group_id = ? AND r.started_at >= ?"
                " GROUP BY a.name, r.model, r.provider ORDER BY a.name, r.model, r.provider",
                (group_id, since),
            )
            selector = await db.all(
                "SELECT 'selector', COALESCE(model, ''), SUM(attempts), SUM(prompt_tokens), SUM(completion_tokens),"
                " SUM(cached_tokens), MAX(estimated), COALESCE(provider, '') FROM decisions"
                " WHERE group_id = ? AND created_at >= ? AND attempts > 0 GROUP BY model, provider"
                " ORDER BY model, provider",
                (group_id, since),
            )
            checks = await db.all(  # calls of no run: the memory check, with its agent's calls
                "SELECT a.name, c.model, COUNT(*), SUM(c.prompt_tokens), SUM(c.completion_tokens),"
                " SUM(c.cached_tokens), MAX(c.estimated), c.provider FROM model_calls AS c"
                " JOIN agents AS a ON a.id = c.agent_id WHERE c.group_id = ? AND c.created_at >= ?"
                " GROUP BY a.name, c.model, c.provider ORDER BY a.name, c.model, c.provider",
                (group_id, since),
            )
            catchup = await db.all(
                "SELECT 'catch-up', model, SUM(calls), SUM(prompt_tokens), SUM(completion_tokens), 0, 0,"
                " COALESCE(provider, '') FROM summaries WHERE group_id = ? AND created_at >= ?"
                " GROUP BY model, provider ORDER BY model, provider",
                (group_id, since),
            )
            rolling = await db.all(
                "SELECT CAST(? AS TEXT), model, SUM(calls), SUM(prompt_tokens), SUM(completion_tokens),"
                " SUM(cached_tokens), MAX(estimated), COALESCE(provider, '') FROM context_summaries"
                " WHERE group_id = ? AND created_at >= ? GROUP BY model, provider ORDER BY model, provider",
                (SUMMARY_SPENDER, group_id, since),
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
        async with self._access.write(group_id) as db:
            await db.insert(
                "INSERT INTO model_calls (group_id, agent_id, purpose, model, provider, prompt_tokens,"
                    " completion_tokens, cached_tokens, estimated, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (group_id, agent_id, purpose, call.model, call.provider, call.usage.prompt_tokens,
                 call.usage.completion_tokens, call.usage.cached_tokens, int(call.usage.estimated), self._access.now()))
