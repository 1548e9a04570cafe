"""The verbs behind `/roundtable status|why|usage|export` (declared in `bot.core.verbs.commands`): what
the group's record says.

`status` is the group's state now (its episode, the agents' cursors, the last decision, how
much of the thread a prompt holds, problems, the next schedule, the settings); `why` explains
one message's routing (the selector's replies, the tool calls of the run behind it); `usage`
is the spending (`bot.core.features.spending`); `export` the whole thread as a file
(`bot.core.record.export`). They read the store and change nothing.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Protocol

from bot.core.errors import InvalidInput, NotFound
from bot.core.features.context import find_window, participant_step
from bot.core.features.reading import Reader, Reading
from bot.core.features.spending import usage_card
from bot.core.features.summary import MIN_WINDOW, Summaries
from bot.core.features.tools import decision_of
from bot.core.models import Decision, Group, Message
from bot.core.ports import HasEpisodes, HasRoster, HasSchedules, HasSpending, HealthStore
from bot.core.record.export import file_name, write_export
from bot.core.record.transcript import TranscriptStore, chosen, plural
from bot.core.rules import validation as v
from bot.core.rules.card import Attachment, Card, Field, Tone
from bot.core.rules.pricing import Price
from bot.core.rules.store_health import outage_status
from bot.core.rules.tool_lines import CALLS_SHOWN, call_detail
from bot.core.verbs.group_verbs import settings_fields
from bot.core.verbs.roster_verbs import agent_flags
from bot.core.verbs.schedule_verbs import ScheduleVerbs

LAST_DECISION_WITHIN = 200  # rows /roundtable status looks back for the last decision that chose someone
WHY_PAGE = 50  # rows /roundtable why (no message) reads at a time looking for the newest person's or agent's row
WHY_PRIVATE = 900  # characters of a worker's final text shown by "Why this reply?"


class RecordVerbsStore(TranscriptStore, HasEpisodes, HasRoster, HasSchedules, HasSpending, HealthStore, Protocol):
    """What the record verbs read: what an export reads, and the episodes, the roster, the next
    schedule, the spending and the database's health that status and usage show."""


class RecordVerbs:
    def __init__(self, store: RecordVerbsStore, prices: Mapping[str, Price], clock: Callable[[], float],
                 schedules: ScheduleVerbs, reading: Reading) -> None:
        """`prices`: per model, for usage. `clock`: now, for mutes shown in status. `schedules` and
        `reading`: status names the next schedule and what the viewer has not read."""
        self.store = store
        self.prices = prices
        self.clock = clock
        self.schedules = schedules
        self.reading = reading

    async def status(self, group: Group, viewer: Reader | None = None) -> Card:
        group = await self.store.groups.get_group(group.id)
        state = "paused" if group.paused else "on" if group.enabled else "off"
        fields = [Field("messages", str(group.latest_seq)),
                  Field("agent messages in a row", f"{group.agent_streak} of {group.settings.max_agent_turns}")]
        if group.episode_id is not None:
            ep = await self.store.episodes.get_episode(group.episode_id)
            fields.append(Field("episode", f"#{ep.id} {ep.status}, task #{ep.task_seq}, "
                                           f"{plural(ep.agent_turns, 'agent message')}, "
                                           f"{plural(ep.total_tokens, 'token')} ({ep.cached_tokens:,} cached)",
                                inline=False))
        agents, now = await self.store.roster.list_agents(group.id), self.clock()
        fields.append(Field("agents", "\n".join(
            f"{a.name}{agent_flags(a, now)}: read through #{a.delivered_through}" for a in agents)
            or "(none yet: /agent add)", inline=False))
        decision = await self.last_decision(group)
        if decision is not None:
            fields.append(Field("last decision", f"#{decision.seq} {decision.source} -> {chosen(decision)}"))
        seen = await self.context_seen(group, group.latest_seq)
        if seen:
            fields.append(Field("context", seen, inline=False))
        if group.delivery_problem:
            fields.append(Field("delivery problem", group.delivery_problem, inline=False))
        outage = self.store.health.outage
        if outage is not None:
            fields.append(Field("database problem", outage_status(outage, self.store.health.clock()), inline=False))
        upcoming = await self.store.schedules.next_schedule(group.id)
        if upcoming is not None:
            fields.append(Field("next schedule", f"#{upcoming.id} {await self.schedules.describe(upcoming)}",
                                inline=False))
        if viewer is not None:
            fields.append(Field("unread for you", str(await self.reading.unread_count(group, viewer))))
        fields.extend(settings_fields(group.settings))
        tone: Tone = "bad" if group.delivery_problem or outage else "warning" if state != "on" else "good"
        return Card(f"{group.name} ({state})", fields=tuple(fields), tone=tone)

    async def last_decision(self, group: Group) -> Decision | None:
        """The newest decision that chose someone (or TERMINATE), among the last LAST_DECISION_WITHIN
        rows: a notice, or an agent's row in tags mode, routes nobody ("none"), which says nothing
        of who speaks (status showed "#14 none -> nobody")."""
        through, oldest = group.latest_seq, max(0, group.latest_seq - LAST_DECISION_WITHIN)
        while through > oldest:
            after = max(oldest, through - 50)
            decisions = await self.store.routing.decisions(group.id, after=after, through=through)
            for seq in sorted(decisions, reverse=True):
                if decisions[seq].source not in ("none", "superseded"):
                    return decisions[seq]
            through = after
        return None

    async def context_seen(self, group: Group, through: int) -> str:
        """How much of the thread through `through` a prompt holds ('' when all of it)."""
        if through <= 0:
            return ""
        budget = group.settings.context_budget
        summarised = budget >= MIN_WINDOW
        window = await find_window(self.store, group.id, through=through, budget=budget,
                                   task_seq=None, task_apart=True, step=participant_step(budget),
                                   reserve=Summaries.reserve() if summarised else 0)
        if not window.omitted:
            return ""
        return (f"prompts hold the newest {through - window.omitted} of {through} messages (plus the tasks); "
                f"the oldest {window.omitted} were trimmed to fit context_budget {group.settings.context_budget}"
                + ("; a rolling summary stands for them" if summarised else ""))

    async def why(self, group: Group, ref: str | None = None) -> Card:
        group = await self.store.groups.get_group(group.id)
        seq = await self.message_seq(group, ref) if ref else await self.newest_spoken(group)
        if not 1 <= seq <= group.latest_seq:
            raise NotFound(f"There is no message #{seq} in this group (it has {group.latest_seq}).")
        decision = await self.store.routing.get_decision(group.id, seq)
        message = await self.store.thread.get_message(group.id, seq)
        title = f"#{seq} by {message.author_name}"
        calls = await self._tool_fields(message)
        if decision is None:
            return Card(title, "Not routed yet.", calls)
        fields = [Field("source", decision.source), Field("chosen", chosen(decision))]
        if decision.selector_raw:
            fields.append(Field("selector replies", " | ".join(decision.selector_raw), inline=False))
            fields.append(Field("attempts", str(decision.attempts)))
        if decision.confidence is not None:
            fields.append(Field("confidence", f"{decision.confidence:.2f}"))
        if decision.usage.prompt_tokens:
            u = decision.usage
            fields.append(Field("selector tokens", f"{u.prompt_tokens} prompt, {u.completion_tokens} completion, "
                                                   f"{u.cached_tokens} cached"))
        fields.extend(calls)
        if message.source_run_id is not None:
            fields.extend(await self._run_fields(message.source_run_id))
        return Card(title, decision.note, tuple(fields), footer=await self._context_footer(group, seq))

    async def _tool_fields(self, message: Message) -> tuple[Field, ...]:
        """Each tool call of the run behind an agent's reply, with its arguments and result (cut, masked)."""
        if message.author_type != "agent" or message.source_run_id is None:
            return ()
        calls = await self.store.tools.run_tool_calls(message.source_run_id)
        fields = [Field(*call_detail(c.tool, c.arguments, c.status, c.result), inline=False)
                  for c in calls[:CALLS_SHOWN]]
        if len(calls) > CALLS_SHOWN:
            fields.append(Field("more calls", f"{len(calls) - CALLS_SHOWN} more (the exports show every call)",
                                inline=False))
        return tuple(fields)

    async def _run_fields(self, run_id: int) -> list[Field]:
        """Of the run a message came from: the tool approvals given in it, and a worker's final text
        (never posted)."""
        fields = []
        held = [said for call in await self.store.tools.run_tool_calls(run_id)
                if (said := decision_of(call.tool, call.result)) is not None]
        if held:
            fields.append(Field("tool approvals", "; ".join(held), inline=False))
        run = (await self.store.record.runs_by_id([run_id])).get(run_id)
        if run is not None and run.private_text is not None:
            private = run.private_text if len(run.private_text) <= WHY_PRIVATE else (
                run.private_text[:WHY_PRIVATE] + " [...]")
            fields.append(Field("worker's final text (private)", private or "(empty)", inline=False))
        return fields

    async def newest_spoken(self, group: Group) -> int:
        """The newest row a person or an agent wrote (the bot's own notices select nobody, so `why` without a
        message explains the newest message people read as the conversation); the newest row when none is."""
        through = group.latest_seq
        while through > max(0, group.latest_seq - LAST_DECISION_WITHIN):
            page = await self.store.thread.messages(group.id, after=max(0, through - WHY_PAGE), through=through)
            spoken = [m.seq for m in page if m.author_type != "system"]
            if spoken:
                return spoken[-1]
            through -= WHY_PAGE
        return group.latest_seq

    async def _context_footer(self, group: Group, seq: int) -> str:
        seen = await self.context_seen(group, seq)
        return f"context at #{seq}: {seen}" if seen else ""

    async def message_seq(self, group: Group, ref: str) -> int:
        """A message link, a message id or a number such as 12 (or #12) -> its seq here."""
        token = ref.strip().rstrip("/").split("/")[-1].lstrip("#")
        if not token.isdigit():
            raise InvalidInput("message must be a message link, a message id or a number such as 12.")
        if len(token) < 15:
            return int(token)
        found = await self.store.thread.find_message_by_external_id(token)
        if found is None or found.group_id != group.id:
            raise InvalidInput("That message is not part of this group chat.")
        return found.seq

    async def usage(self, group: Group, days: int = 7) -> Card | str:
        """Calls, tokens and cost per agent and selector, and a total (`bot.core.features.spending`)."""
        days = v.integer("days", days, 1, 365)
        return await usage_card(self.store, await self.store.groups.get_group(group.id), self.prices, days)

    async def export(self, group: Group, fmt: str = "html") -> Attachment:
        """The whole thread as a file (html, json or md), built in a temporary file a page at a time."""
        descriptor, path = tempfile.mkstemp(prefix="roundtable-export-", suffix=f".{fmt}")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8", newline="\n") as out:
                totals = await write_export(self.store, group, fmt, out.write)
        except BaseException:  # a cancel too: no half-written export left behind; re-raised
            os.unlink(path)
            raise
        label = {"html": "a page to read", "json": "JSON data", "md": "Markdown"}[fmt]
        text = f"{group.name}: {plural(totals.messages, 'message')}, {plural(totals.episodes, 'episode')}, as {label}."
        return Attachment(path, file_name(group, fmt), text,
                          elsewhere=f"roundtable export --group {group.id} --format {fmt} --out FILE")
