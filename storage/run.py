"""Store methods for a run: start it, settle it with what it posts, interrupt it.

A run is settled in one transaction: its status and tokens, its reply (unless
the cap refuses it), its notice, the episode's totals and the agent's cursor.
So a crash leaves either a run still 'running' (re-run on start-up, nothing
posted) or a settled run whose reply is in the log: never a reply without its
cursor move, which would be answered twice. A direct run (`/ask`) never moves
the cursor: the group's deliveries to its agent still wait for it. A run a person
stopped (status 'stopped', SPEC §8) posts what it showed, ends its episode as
`stopped` and moves every agent's cursor past the group's rows, in that one
transaction: a restart neither runs it again nor shows it twice.
"""
from __future__ import annotations

import logging
from typing import get_args

from bot.core.errors import CapReached, InvalidInput, NotFound
from bot.core.models import FinishedRun, Message, NewMessage, Run, RunKind, RunResult, RunStatus, Usage, token_cost
from bot.core.rules.secrets import mask, mask_error
from storage.access import Access
from storage.codec import tags_to_json, to_message, to_run
from storage.lease import Leases
from storage.sql import Db, Row
from storage.thread import Thread

log = logging.getLogger(__name__)

RUN_KINDS = frozenset(get_args(RunKind))
RUN_END_STATUSES = frozenset(get_args(RunStatus)) - {"running"}
STOPPED_CALL = "error: the turn was stopped before this call returned; its outcome is unknown."


class Runs:
    """The store's `RunStore` role (`bot.core.ports`): a part of `storage.store.SqlStore`."""

    def __init__(self, access: Access, leases: Leases) -> None:
        self._access = access
        self._leases = leases

    async def _run_row(self, db: Db, run_id: int) -> Run:
        row = await db.one("SELECT * FROM runs WHERE id = ?", (run_id,))
        if row is None:
            raise NotFound(f"no run with id {run_id}")
        return to_run(row)

    async def get_run(self, run_id: int) -> Run:
        async with self._access.read() as db:
            return await self._run_row(db, run_id)

    async def start_run(self, group_id: int, agent_id: int, kind: str, snapshot_seq: int, *,
                        replaces: int | None = None) -> Run:
        """A 'running' run over rows 1..snapshot_seq. Its episode is the one current at
        the snapshot, opened by its newest person's row (SPEC §4: a run belongs to the
        episode it answers). A 'regenerate' run names the seq of the reply it writes again
        (`replaces`), which it replaces when it is settled.
        LeaseLost when another process runs the group (a group run; a direct run needs the
        lease only to post, when it is settled)."""
        if kind not in RUN_KINDS:
            raise InvalidInput(f"unknown run kind {kind!r}; use one of {', '.join(sorted(RUN_KINDS))}")
        if (kind == "regenerate") != (replaces is not None):
            raise InvalidInput("a regenerate run, and only one, names the reply it replaces")
        async with self._access.write(group_id) as db:
            group = await self._access.group_row(db, group_id)
            if kind != "direct":
                await self._leases.require_lease(db, group_id)
            agent = await self._access.agent_row(db, agent_id)
            if agent["group_id"] != group_id:
                raise NotFound(f"no agent with id {agent_id} in group {group_id}")
            if not 0 <= snapshot_seq <= int(group["latest_seq"]):
                raise InvalidInput(f"snapshot {snapshot_seq} is outside 0..{group['latest_seq']}")
            row = await db.one(  # the episode current at the snapshot: opened by its newest person's row
                "SELECT id FROM episodes WHERE group_id = ? AND task_seq <= ? ORDER BY task_seq DESC LIMIT 1",
                (group_id, snapshot_seq),
            )
            episode_id = row[0] if row is not None else None
            run_id = await db.insert(
                "INSERT INTO runs (group_id, agent_id, kind, snapshot_seq, episode_id, status, started_at,"
                " replaces_seq) VALUES (?, ?, ?, ?, ?, 'running', ?, ?)",
                (group_id, agent_id, kind, snapshot_seq, episode_id, self._access.now(), replaces),
            )
            run = await self._run_row(db, run_id)
        self._access.remember_group("runs", run.id, group_id)  # for finish_run's write, without a read
        return run

    async def finish_run(self, run_id: int, result: RunResult, *, cap: int) -> FinishedRun:
        """Settle a running run (see the module docstring); a run already settled or
        interrupted is returned as it is and nothing is posted.

        A reply counts toward the group's streak, and may be refused by the cap,
        only when it belongs to the group's current episode; a reply to an older
        episode (a person posted during the run) is kept under that episode.
        A reply whose episode an operator stopped during the run is discarded. A run a
        person stopped (status 'stopped') keeps its reply (what it showed), bypassing the cap,
        and ends its episode as `stopped` with every pending delivery skipped.
        A 'regenerate' run's reply replaces the text of the row it names (`_replace_reply`):
        no new row, no cursor moves, no streak; its tokens count like any run's.
        """
        if result.status not in RUN_END_STATUSES:
            known = ", ".join(sorted(RUN_END_STATUSES))
            raise InvalidInput(f"unknown run status {result.status!r}; use one of {known}")
        async with self._access.write(await self._access.group_of("runs", run_id)) as db:
            run = await self._run_row(db, run_id)
            if run.status != "running":
                return FinishedRun(run)
            group = await self._access.group_row(db, run.group_id)
            stopping = result.status == "stopped"
            posts = result.reply if result.status in ("posted", "stopped") else None
            if result.status != "interrupted" and (run.kind == "group" or posts is not None):
                await self._leases.require_lease(db, run.group_id)
            status, error, reply = await self._take_reply(db, run, group, result, posts, cap, stopping=stopping)
            if status != "interrupted" and run.kind == "group":  # a direct run leaves the group's queue alone
                await self._delivered(db, run, reply)
            if run.kind != "direct" or reply is not None:  # a private answer is not the episode's
                await self._add_to_episode(db, run, result.usage + result.selector_usage)
            notice = None
            if result.notice is not None:
                notice = await self._access.append(db, run.group_id, result.notice, episode_id=run.episode_id)
            if stopping:
                await self._stop_episode(db, run)
                # its calls cut by the stop: never resumed (only an interrupted run's are), shown as cut
                await db.exec("UPDATE tool_calls SET status = 'unknown', result = ?, finished_at = ?"
                              " WHERE run_id = ? AND status IN ('pending', 'running')",
                              (STOPPED_CALL, self._access.now(), run.id))
            await self._settle(db, run.id, status, result.usage, result.selector_usage,
                               reply.seq if reply else None, error, result.model, result.memory_skipped,
                               result.provider, result.calls)
            if result.private_text is not None:
                await db.exec("UPDATE runs SET private_text = ? WHERE id = ?", (mask(result.private_text), run.id))
            return FinishedRun(await self._run_row(db, run.id), reply, notice)

    async def post_from_run(self, run_id: int, message: NewMessage, *, cap: int) -> Message:
        """A worker's `group_post`, posted now (see `bot.core.ports.RunStore.post_from_run`)."""
        async with self._access.write(await self._access.group_of("runs", run_id)) as db:
            run = await self._run_row(db, run_id)
            if run.status != "running":
                raise InvalidInput(f"run {run_id} is {run.status}, not running")
            await self._leases.require_lease(db, run.group_id)
            group = await self._access.group_row(db, run.group_id)
            status, error, posted = await self._post_reply(db, run, group, message, None, cap)
            if posted is None:
                if status == "refused":
                    raise CapReached(cap)
                raise InvalidInput(error or status)
            return posted

    async def _take_reply(self, db: Db, run: Run, group: Row, result: RunResult, posts: NewMessage | None, cap: int,
                          *, stopping: bool) -> tuple[str, str | None, Message | None]:
        """The run's status, error and reply row once its reply `posts` is posted (`_post_reply`), or put
        in place of the row a 'regenerate' run names (`_replace_reply`); as `result` says without one."""
        if posts is None:
            return result.status, result.error, None
        if run.kind == "regenerate":
            return await self._replace_reply(db, run, posts, result.error)
        return await self._post_reply(db, run, group, posts, result.error, cap, stopping=stopping)

    async def _delivered(self, db: Db, run: Run, reply: Message | None) -> None:
        """Move the run's agent's cursor through its snapshot, and through the reply too when nothing
        else arrived after the snapshot: its own words are not news."""
        through = reply.seq if reply is not None and reply.seq == run.snapshot_seq + 1 else run.snapshot_seq
        through = await self._own_posts_through(db, run, through)
        await db.exec(
            f"UPDATE agents SET delivered_through = {self._access.sql.greatest}(delivered_through, ?)"  # noqa: S608 (the dialect's function)
                " WHERE id = ?",
            (through, run.agent_id),
        )

    async def _add_to_episode(self, db: Db, run: Run, spent: Usage) -> None:
        """Count the tokens the run `spent` (its model's and its selector's) toward its episode's."""
        if run.episode_id is not None and (spent.prompt_tokens or spent.completion_tokens):
            await db.exec(
                "UPDATE episodes SET prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?,"
                " cached_tokens = cached_tokens + ? WHERE id = ?",
                (spent.prompt_tokens, spent.completion_tokens, spent.cached_tokens, run.episode_id),
            )

    async def _own_posts_through(self, db: Db, run: Run, through: int) -> int:
        """`through`, or past the run's own posts (a worker's group_post rows) that follow it with
        nothing between: its own words are not news to it."""
        rows = await db.all("SELECT seq, source_run_id FROM messages WHERE group_id = ? AND seq > ? ORDER BY seq"
                            " LIMIT 100", (run.group_id, through))
        for row in rows:
            if row["source_run_id"] != run.id or int(row["seq"]) != through + 1:
                break
            through = int(row["seq"])
        return through

    async def _stop_episode(self, db: Db, run: Run) -> None:
        """A person stopped the run: its episode ends as `stopped` (when still running) and every
        agent's pending deliveries are skipped (as `/roundtable stop` does)."""
        if run.episode_id is not None:
            await db.exec("UPDATE episodes SET status = 'stopped', ended_at = ? WHERE id = ? AND status = 'running'",
                          (self._access.now(), run.episode_id))
        latest = int((await self._access.group_row(db, run.group_id))["latest_seq"])
        await db.exec(
            f"UPDATE agents SET delivered_through = {self._access.sql.greatest}(delivered_through, ?)"  # noqa: S608 (the dialect's function)
                " WHERE group_id = ?",
            (latest, run.group_id),
        )

    async def _post_reply(
        self, db: Db, run: Run, group: Row, posts: NewMessage, error: str | None, cap: int, *, stopping: bool = False,
    ) -> tuple[str, str | None, Message | None]:
        if stopping:  # what a stopped run showed stays (in its episode), whatever the cap
            current = run.episode_id == group["episode_id"]
            reply = await self._access.append(db, run.group_id, posts, episode_id=run.episode_id,
                                              streak="count" if current else "keep")
            if run.episode_id is not None:
                await db.exec("UPDATE episodes SET agent_turns = agent_turns + 1 WHERE id = ?", (run.episode_id,))
            return "stopped", error, reply
        if run.episode_id is not None:
            row = await db.one("SELECT status FROM episodes WHERE id = ?", (run.episode_id,))
            if row is not None and row[0] == "stopped":
                return "discarded", "the episode was stopped during the run", None
        agent = await db.one("SELECT enabled, removed_at FROM agents WHERE id = ?", (run.agent_id,))
        if agent is not None and agent[1] is not None:
            return "discarded", "the agent was removed during the run", None
        if agent is not None and not agent[0]:
            return "discarded", "the agent was disabled during the run", None
        current = run.episode_id == group["episode_id"]
        if current and int(group["agent_streak"]) >= cap:
            return "refused", str(CapReached(cap)), None
        reply = await self._access.append(db, run.group_id, posts, episode_id=run.episode_id,
                                          streak="count" if current else "keep")
        if run.episode_id is not None:
            await db.exec("UPDATE episodes SET agent_turns = agent_turns + 1 WHERE id = ?", (run.episode_id,))
        return "posted", error, reply

    async def _replace_reply(self, db: Db, run: Run, new: NewMessage, error: str | None,
                             ) -> tuple[str, str | None, Message | None]:
        """A regenerate run's reply becomes the text of row `run.replaces_seq`, in the settling
        transaction: its text as it was goes to `message_versions`; its tags and token count are the
        new text's (the later rows' running token sums follow); it is the new run's row, unconfirmed,
        and the surface's messages that showed it become the new run's provisional messages, so the
        outbox edits them into the new text (`Surface.publish`), after a crash too."""
        seq = run.replaces_seq
        if seq is None:
            raise InvalidInput(f"regenerate run {run.id} names no reply to replace")
        row = await self._access.message_row(db, run.group_id, seq)
        if row["deleted_at"] is not None:
            return "discarded", "the message was deleted during the run", None
        if row["author_agent_id"] != run.agent_id:
            return "discarded", f"message {seq} is not this agent's reply", None
        old, now = to_message(row), self._access.now()
        found = await db.one("SELECT COALESCE(MAX(version), 0) FROM message_versions WHERE group_id = ? AND seq = ?",
                             (run.group_id, seq))
        version = (int(found[0]) if found is not None else 0) + 1
        await db.exec(
            "INSERT INTO message_versions (group_id, seq, version, text, run_id, created_at, replaced_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run.group_id, seq, version, old.text, old.source_run_id, old.regenerated_at or old.created_at, now))
        for position, external_id in enumerate(old.external_ids):
            await db.exec(
                "INSERT INTO drafts (group_id, agent_id, run_id, position, author_name, external_id, text, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run.group_id, run.agent_id, run.id, position, old.author_name, external_id, "", now))
        await db.exec("DELETE FROM message_external_ids WHERE group_id = ? AND seq = ?", (run.group_id, seq))
        await db.exec(
            "UPDATE messages SET text = ?, tags = ?, token_count = ?, source_run_id = ?, external_ids = '[]',"
            " confirmed = 0, regenerated_at = ? WHERE group_id = ? AND seq = ?",
            (mask(new.text), tags_to_json(new.tags), new.token_count, run.id, now, run.group_id, seq))
        shift = token_cost(new.token_count) - token_cost(old.token_count)
        if shift:
            await db.exec("UPDATE messages SET tokens_before = tokens_before + ? WHERE group_id = ? AND seq > ?",
                          (shift, run.group_id, seq))
        await Thread.forget_summaries(db, run.group_id, seq)
        return "posted", error, to_message(await self._access.message_row(db, run.group_id, seq))

    async def _settle(
        self, db: Db, run_id: int, status: str, usage: Usage, sel: Usage,
        posted_seq: int | None, error: str | None, model: str = "", memory_skipped: bool | None = None,
        provider: str = "", calls: int = 0,
    ) -> None:
        await db.exec(
            "UPDATE runs SET status = ?, prompt_tokens = ?, completion_tokens = ?, cached_tokens = ?, estimated = ?,"
            " selector_prompt_tokens = ?, selector_completion_tokens = ?, selector_cached_tokens = ?,"
            " selector_estimated = ?, posted_seq = ?, error = ?, finished_at = ?, model = ?, memory_skipped = ?,"
            " provider = ?, calls = ? WHERE id = ?",
            (
                status, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, int(usage.estimated),
                sel.prompt_tokens, sel.completion_tokens, sel.cached_tokens, int(sel.estimated),
                posted_seq, mask_error(error) if error else error, self._access.now(), model or None,
                None if memory_skipped is None else int(memory_skipped), provider or None, calls, run_id,
            ),
        )

    async def interrupt_running_runs(self, group_id: int) -> int:
        """Mark the group's runs still 'running' as 'interrupted'; return how many.

        Called by the process that just took the group's lease: no live process
        runs them any more (their cursors did not move, so they run again)."""
        async with self._access.write(group_id) as db:
            count = await db.exec(
                "UPDATE runs SET status = 'interrupted', finished_at = ? WHERE group_id = ? AND status = 'running'",
                (self._access.now(), group_id),
            )
        if count:
            log.info("group=%s: marked %d run(s) left running as interrupted", group_id, count)
        return count
