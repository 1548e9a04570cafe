"""Store methods for keeping a prompt's context: the rolling summaries of what windows cut
(`bot.core.features.summary`; the earlier episodes a task continues are `storage.episode`'s).
A part of `storage.store.SqlStore` (SQLite and PostgreSQL)."""
from __future__ import annotations

from bot.core.models import ContextSummary, Usage
from bot.core.rules.secrets import mask
from storage.access import Access
from storage.sql import Row


def to_context_summary(row: Row) -> ContextSummary:
    return ContextSummary(int(row["through_seq"]), int(row["after_seq"]), row["text"], int(row["token_count"]),
                          int(row["omitted"]), row["model"], float(row["created_at"]), row["provider"] or "")


class Summaries:
    """The store's `SummaryStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access) -> None:
        self._access = access

    async def context_summary(self, group_id: int, *, through: int) -> ContextSummary | None:
        """The newest rolling summary whose last row is at or before `through` (one indexed lookup; a
        summary blanked when a row it held was edited or deleted is passed over)."""
        async with self._access.read() as db:
            row = await db.one(
                "SELECT * FROM context_summaries WHERE group_id = ? AND through_seq <= ?"
                    " AND text != '' ORDER BY through_seq DESC LIMIT 1", (group_id, through))
        return None if row is None else to_context_summary(row)

    async def save_context_summary(self, group_id: int, summary: ContextSummary, usage: Usage) -> None:
        """Keep a rolling summary (and what its call cost). A second one of the same rows (two processes,
        or a race) replaces the text and adds its call to the cost."""
        async with self._access.write(group_id) as db:
            await db.exec(
                "INSERT INTO context_summaries (group_id, through_seq, after_seq, text, omitted, token_count, model,"
                " provider, prompt_tokens, completion_tokens, cached_tokens, estimated, calls, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)"
                " ON CONFLICT (group_id, through_seq) DO UPDATE SET after_seq = excluded.after_seq,"
                " text = excluded.text, omitted = excluded.omitted, token_count = excluded.token_count,"
                " model = excluded.model, provider = excluded.provider,"
                " prompt_tokens = context_summaries.prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = context_summaries.completion_tokens + excluded.completion_tokens,"
                " cached_tokens = context_summaries.cached_tokens + excluded.cached_tokens,"
                " estimated = excluded.estimated, calls = context_summaries.calls + 1",
                (group_id, summary.through, summary.after, mask(summary.text), summary.omitted, summary.token_count,
                 summary.model, summary.provider or None, usage.prompt_tokens, usage.completion_tokens,
                 usage.cached_tokens, int(usage.estimated), self._access.now()),
            )

    async def context_summaries(self, group_id: int, *, after: int = 0, through: int | None = None
                                ) -> list[tuple[ContextSummary, Usage, int]]:
        """The rolling summaries whose last row is in after < seq <= through, in order, each with what its
        calls cost and how many there were (for exports; one per window move, so few)."""
        async with self._access.read() as db:
            rows = await db.all(
                "SELECT * FROM context_summaries WHERE group_id = ? AND through_seq > ? AND through_seq <= ?"
                    " ORDER BY through_seq", (group_id, after, through if through is not None else 2**62))
        return [(to_context_summary(r), Usage(int(r["prompt_tokens"]), int(r["completion_tokens"]),
                                              int(r["cached_tokens"]), bool(r["estimated"])), int(r["calls"]))
                for r in rows]
