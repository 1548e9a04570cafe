"""`SqlStore`: the `bot.core.ports.Store` port over SQL, composed of one part per role; `SqliteStore`
over one SQLite file.

Each part owns one concept and holds the `storage.access.Access` they share (transactions, clock,
health, the lease owner, the appends): `storage.group` (groups), `storage.roster` (agents and their
cursors), `storage.thread` (the message log; what reached the surface), `storage.routing`
(decisions), `storage.episode`, `storage.run`, `storage.lease`, `storage.reading` (read cursors,
people, catch-up summaries), `storage.summary` (rolling summaries), `storage.draft`,
`storage.notes` (agents' memory), `storage.tools` (agents' tools: grants, the calls' journal),
`storage.schedule`, `storage.record` (the record in pages, for exports), `storage.usage` (model calls
and their tokens), `storage.webhook`,
`storage.interaction` and `storage.report` (the database report, the schema version). `SqlStore`
builds them and names, method by method, which part answers each call of the port.

Usage::

    async with await SqliteStore.open("roundtable.db") as store:
        group = await store.create_group("guild:channel", "general", GroupSettings())
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from bot.core.rules.store_health import StoreHealth
from storage.access import Access, Backend, Clock
from storage.db import DEFAULT_BUSY_TIMEOUT_MS, SqliteBackend
from storage.draft import Drafts
from storage.episode import Episodes
from storage.group import Groups
from storage.interaction import Interactions
from storage.lease import Leases
from storage.notes import Notes
from storage.reading import Reading
from storage.record import Record
from storage.report import Diagnosis
from storage.roster import Roster
from storage.routing import Routing
from storage.run import Runs
from storage.schedule import Schedules
from storage.summary import Summaries
from storage.thread import Posting, Thread
from storage.tools import Tools
from storage.usage import Spending
from storage.webhook import Webhooks

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S", bound="SqlStore")


class delegate(Generic[T, P, R]):
    """A method of the store answered by one of its parts: `name = delegate("_part", Part.name)`
    makes `store.name(...)` call `store._part.name(...)`, with `Part.name`'s signature."""

    def __init__(self, part: str, method: Callable[Concatenate[T, P], R]) -> None:
        self.part, self.name = part, method.__name__

    @overload
    def __get__(self, store: None, owner: type) -> delegate[T, P, R]: ...

    @overload
    def __get__(self, store: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, store: object | None, owner: type) -> Any:
        if store is None:
            return self
        return getattr(getattr(store, self.part), self.name)


class SqlStore:
    """Implements `bot.core.ports.Store` over a backend: `SqliteStore` or `storage.pg.PostgresStore`
    (or `storage.open_store(target)`, which picks one)."""

    def __init__(self, backend: Backend, *, clock: Clock = time.time, health: StoreHealth | None = None) -> None:
        """`health`: the tracker told of every write's outcome (default: one with the usual waits)."""
        access = self._access = Access(backend, clock=clock, health=health)
        self.health = access.health
        self._leases = Leases(access)
        self._reading = Reading(access)
        self._groups = Groups(access)
        self._roster = Roster(access)
        self._thread = Thread(access, self._reading)
        self._posting = Posting(access)
        self._routing = Routing(access)
        self._episodes = Episodes(access)
        self._runs = Runs(access, self._leases)
        self._summaries = Summaries(access)
        self._drafts = Drafts(access)
        self._notes = Notes(access)
        self._tools = Tools(access)
        self._schedules = Schedules(access)
        self._record = Record(access)
        self._spending = Spending(access)
        self._webhooks = Webhooks(access)
        self._interactions = Interactions(access)
        self._diagnosis = Diagnosis(access)
        # What tests and the bench reach under the store for (a transaction of their own, the dialect).
        self._backend, self._sql = backend, access.sql
        self._write, self._read = access.write, access.read

    @property
    def owner(self) -> str:
        """Who holds this store's leases (host, pid and a random part)."""
        return self._access.owner

    @property
    def owner_label(self) -> str:
        """This process for people, in who-holds-a-lease messages ('console', 'discord bot')."""
        return self._access.owner_label

    @owner_label.setter
    def owner_label(self, label: str) -> None:
        self._access.owner_label = label

    @property
    def database(self) -> str:
        """The database, for messages (a URL's password masked)."""
        return self._access.database

    @property
    def migrations_applied(self) -> list[int]:
        """The ids of the migrations that opening this store applied."""
        return self._diagnosis.migrations_applied

    async def close(self) -> None:
        """Close the connections; later calls raise `StoreError`. Idempotent."""
        await self._access.close()

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # Groups
    create_group = delegate("_groups", Groups.create_group)
    get_group = delegate("_groups", Groups.get_group)
    find_group = delegate("_groups", Groups.find_group)
    list_groups = delegate("_groups", Groups.list_groups)
    update_group = delegate("_groups", Groups.update_group)
    advance_watermark = delegate("_groups", Groups.advance_watermark)
    set_delivery_problem = delegate("_groups", Groups.set_delivery_problem)
    # Roster
    add_agent = delegate("_roster", Roster.add_agent)
    update_agent = delegate("_roster", Roster.update_agent)
    remove_agent = delegate("_roster", Roster.remove_agent)
    get_agent = delegate("_roster", Roster.get_agent)
    find_agent = delegate("_roster", Roster.find_agent)
    list_agents = delegate("_roster", Roster.list_agents)
    set_delivered_through = delegate("_roster", Roster.set_delivered_through)
    # Thread
    append_user_message = delegate("_thread", Thread.append_user_message)
    append_system_message = delegate("_thread", Thread.append_system_message)
    get_message = delegate("_thread", Thread.get_message)
    edit_message = delegate("_thread", Thread.edit_message)
    delete_message = delegate("_thread", Thread.delete_message)
    find_message_by_external_id = delegate("_thread", Thread.find_message_by_external_id)
    message_versions = delegate("_thread", Thread.message_versions)
    messages = delegate("_thread", Thread.messages)
    thread_tokens = delegate("_thread", Thread.thread_tokens)
    search_messages = delegate("_thread", Thread.search_messages)
    first_seq_at = delegate("_thread", Thread.first_seq_at)
    last_agent_author = delegate("_thread", Thread.last_agent_author)
    last_external_id = delegate("_thread", Thread.last_external_id)
    # Posting
    record_posted = delegate("_posting", Posting.record_posted)
    take_posted = delegate("_posting", Posting.take_posted)
    confirm_message = delegate("_posting", Posting.confirm_message)
    unconfirmed_messages = delegate("_posting", Posting.unconfirmed_messages)
    # Routing
    record_decision = delegate("_routing", Routing.record_decision)
    record_decisions = delegate("_routing", Routing.record_decisions)
    get_decision = delegate("_routing", Routing.get_decision)
    decisions = delegate("_routing", Routing.decisions)
    unrouted = delegate("_routing", Routing.unrouted)
    # Episodes
    get_episode = delegate("_episodes", Episodes.get_episode)
    end_episode = delegate("_episodes", Episodes.end_episode)
    earlier_tasks = delegate("_episodes", Episodes.earlier_tasks)
    break_tasks = delegate("_episodes", Episodes.break_tasks)
    task_breaks = delegate("_episodes", Episodes.task_breaks)
    # Runs
    get_run = delegate("_runs", Runs.get_run)
    start_run = delegate("_runs", Runs.start_run)
    finish_run = delegate("_runs", Runs.finish_run)
    interrupt_running_runs = delegate("_runs", Runs.interrupt_running_runs)
    post_from_run = delegate("_runs", Runs.post_from_run)
    # Summaries
    context_summary = delegate("_summaries", Summaries.context_summary)
    save_context_summary = delegate("_summaries", Summaries.save_context_summary)
    context_summaries = delegate("_summaries", Summaries.context_summaries)
    # Drafts
    add_draft = delegate("_drafts", Drafts.add_draft)
    draft_posted = delegate("_drafts", Drafts.draft_posted)
    draft_parts = delegate("_drafts", Drafts.draft_parts)
    adopt_drafts = delegate("_drafts", Drafts.adopt_drafts)
    orphan_drafts = delegate("_drafts", Drafts.orphan_drafts)
    drop_drafts = delegate("_drafts", Drafts.drop_drafts)
    # Tools
    tool_grants = delegate("_tools", Tools.tool_grants)
    grant_tools = delegate("_tools", Tools.grant_tools)
    revoke_tools = delegate("_tools", Tools.revoke_tools)
    journal_step = delegate("_tools", Tools.journal_step)
    journal_running = delegate("_tools", Tools.journal_running)
    journal_result = delegate("_tools", Tools.journal_result)
    adopt_tool_calls = delegate("_tools", Tools.adopt_tool_calls)
    run_tool_calls = delegate("_tools", Tools.run_tool_calls)
    tool_calls_by_run = delegate("_tools", Tools.tool_calls_by_run)
    # Notes
    add_note = delegate("_notes", Notes.add_note)
    notes = delegate("_notes", Notes.notes)
    note_count = delegate("_notes", Notes.note_count)
    clear_notes = delegate("_notes", Notes.clear_notes)
    # Schedules
    add_schedule = delegate("_schedules", Schedules.add_schedule)
    schedules = delegate("_schedules", Schedules.schedules)
    remove_schedule = delegate("_schedules", Schedules.remove_schedule)
    due_schedules = delegate("_schedules", Schedules.due_schedules)
    fire_schedule = delegate("_schedules", Schedules.fire_schedule)
    next_schedule = delegate("_schedules", Schedules.next_schedule)
    get_schedule = delegate("_schedules", Schedules.get_schedule)
    # Record
    message_pages = delegate("_record", Record.message_pages)
    run_pages = delegate("_record", Record.run_pages)
    episode_pages = delegate("_record", Record.episode_pages)
    runs_by_id = delegate("_record", Record.runs_by_id)
    episodes_by_id = delegate("_record", Record.episodes_by_id)
    roster_ever = delegate("_record", Record.roster_ever)
    # Spending
    usage_since = delegate("_spending", Spending.usage_since)
    spending = delegate("_spending", Spending.spending)
    record_call = delegate("_spending", Spending.record_call)
    # Reading
    remember_person = delegate("_reading", Reading.remember_person)
    people = delegate("_reading", Reading.people)
    tagging = delegate("_reading", Reading.tagging)
    get_summary = delegate("_reading", Reading.get_summary)
    save_summary = delegate("_reading", Reading.save_summary)
    get_seen = delegate("_reading", Reading.get_seen)
    mark_seen = delegate("_reading", Reading.mark_seen)
    # Leases
    watch = delegate("_leases", Leases.watch)
    acquire_lease = delegate("_leases", Leases.acquire_lease)
    renew_leases = delegate("_leases", Leases.renew_leases)
    release_leases = delegate("_leases", Leases.release_leases)
    held_elsewhere = delegate("_leases", Leases.held_elsewhere)
    leased_elsewhere = delegate("_leases", Leases.leased_elsewhere)
    # Webhooks
    get_webhook = delegate("_webhooks", Webhooks.get_webhook)
    register_webhook_tokens = delegate("_webhooks", Webhooks.register_webhook_tokens)
    save_webhook = delegate("_webhooks", Webhooks.save_webhook)
    forget_webhook = delegate("_webhooks", Webhooks.forget_webhook)
    # Interactions
    claim_interaction = delegate("_interactions", Interactions.claim_interaction)
    # Diagnosis
    schema_version = delegate("_diagnosis", Diagnosis.schema_version)
    database_report = delegate("_diagnosis", Diagnosis.database_report)


class SqliteStore(SqlStore):
    """The store over one SQLite file. Open with `await SqliteStore.open(path)`."""

    @classmethod
    async def open(
        cls, path: str | Path, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, clock: Clock = time.time,
        health: StoreHealth | None = None,
    ) -> SqliteStore:
        """Open the file at `path` (migrating it) and wrap it in a store (`health`: see `SqlStore`)."""
        return cls(await SqliteBackend.open(path, busy_timeout_ms=busy_timeout_ms), clock=clock, health=health)


__all__ = ["SqlStore", "SqliteStore"]
