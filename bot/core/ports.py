"""The engine's ports: what the core asks of the store, the model and the surface.

Adapters implement these; the core only ever sees these Protocols and the
value objects of `bot.core.models`. SQL, locking and dialect details stay in
`storage/`: the core asks for what it needs ("append this user message")
rather than issuing queries.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypedDict, Unpack

from bot.core.models import (
    Agent,
    Approval,
    ApprovalAsk,
    ChatMessage,
    Completion,
    ContextSummary,
    Decision,
    DraftPart,
    Episode,
    FinishedRun,
    Group,
    GroupSettings,
    JournaledCall,
    Message,
    MessageVersion,
    NewMessage,
    Note,
    Run,
    RunResult,
    SharedFile,
    Spend,
    Summary,
    Tool,
    ToolCall,
    ToolGrant,
    ToolOutput,
    ToolSpec,
    Usage,
)
from bot.core.rules.doctor import DatabaseReport
from bot.core.rules.schedule import Schedule, When
from bot.core.rules.store_health import StoreHealth


class TokenCounter(Protocol):
    def count(self, text: str) -> int:
        """Tokens in `text` (an estimate is fine when no tokenizer is available)."""
        ...


class LLM(Protocol):
    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        logprobs: bool = False,
        cache_key: str | None = None,
        tools: Sequence[Tool] | None = None,
        temperature: float | None = None,
    ) -> Completion:
        """One chat completion. Raises `LLMError` subclasses; never other errors.

        `model=None` means the adapter's default agent model. `cache_key` names the
        caller whose prompts share prefixes (sent as `prompt_cache_key` where the
        endpoint takes it; ignored otherwise). With `tools`, the model may answer with
        `Completion.tool_calls` instead of (or besides) text; without, no tools are offered.
        `temperature` and `max_tokens` (an agent's settings) are sent when given; a model that
        refuses one is told once (a WARNING) and sent it no more, never a failed call.
        """
        ...

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        on_text: Callable[[str], None],
        model: str | None = None,
        max_tokens: int | None = None,
        cache_key: str | None = None,
        tools: Sequence[Tool] | None = None,
        temperature: float | None = None,
    ) -> Completion:
        """One chat completion, streamed: `on_text(piece)` for each piece of the reply's text as
        the model writes it, then the whole completion (usage from the server when it sends any,
        else estimated, as `complete` does). With `tools`, the model may answer with tool calls:
        their streamed pieces are assembled into `Completion.tool_calls`. A server that does not
        stream, or a stream that breaks off, is answered by one plain request instead: the completion's text is then the
        reply, whatever pieces came before. Raises `LLMError` subclasses (and whatever `on_text`
        raises)."""
        ...

    async def tools_refusal(self, model: str | None, *, spent: list[Completion] | None = None) -> str | None:
        """None when `model` (None: the default) takes tool calls; else one line saying why
        not, or that it could not be checked. Never raises. When it asked the model (a tiny
        call: the answer may be remembered), the call's `Completion` (model, usage) is appended
        to `spent`, so its tokens can be counted."""
        ...

    def takes_images(self, model: str | None) -> bool:
        """False when `model` (None: the default) is known not to take image parts (the prompt then
        names each image instead of fetching it). A model that refuses them later is remembered,
        and the call repeated with each image's fallback text."""
        ...

    async def model_names(self) -> dict[str, list[str] | None]:
        """Per provider (`DEFAULT_PROVIDER` for the default one), the models it lists, as an agent's
        model is written (`name/model` on a named provider); None where the list is not known.
        Cached; refreshed now and then. Never raises."""
        ...


class ToolSource(Protocol):
    """Where tools come from (SPEC §6b): the built-ins, or one MCP server (`bot.llm.mcp_tools`).

    `name` is '' for built-ins (their tools are named plainly), else the server's name (its tools
    are `name.tool` in commands). The core never sees how a source runs its tools."""

    name: str

    def tools(self) -> Sequence[ToolSpec]:
        """The tools it offers now (names without the source's prefix), in a stable order; none while it is down."""
        ...

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        """Run `tool` (its name without the prefix) with `arguments`. A failure of the tool is an
        error `ToolOutput`; may raise anything else (the tool loop turns it into an error result)."""
        ...


class ToolContext(Protocol):
    """Who a tool call runs for: the group, the agent and the run."""

    @property
    def group_id(self) -> int: ...

    @property
    def agent_id(self) -> int: ...

    @property
    def run_id(self) -> int: ...


class ToolStore(Protocol):
    """Tools of agents (`bot.core.features.tools`): what each agent was granted, and the journal of
    the calls of runs, so that a run cut by a crash resumes without running a call twice."""

    async def tool_grants(self, agent_id: int) -> list[ToolGrant]:
        """What the agent was granted, in the order of the patterns."""
        ...

    async def grant_tools(self, agent_id: int, patterns: Sequence[str], *, confirm: bool | None = None) -> None:
        """Grant each pattern (`server.tool`, `server.*`, a built-in's name); a pattern granted
        before keeps its grant (its `confirm` set when given)."""
        ...

    async def revoke_tools(self, agent_id: int, patterns: Sequence[str]) -> int:
        """Take back these grants; how many there were."""
        ...

    async def journal_step(self, group_id: int, agent_id: int, run_id: int, step: int, assistant_text: str,
                           calls: Sequence[ToolCall]) -> list[JournaledCall]:
        """Record a model answer's tool calls (status `pending`) before any of them runs."""
        ...

    async def journal_running(self, call_id: int) -> None:
        """The call is about to run (`running`): after a crash it is in flight."""
        ...

    async def journal_result(self, call_id: int, result: str, *, status: str = "done") -> None:
        """The call returned (`done`) with `result`, or (`unknown`) a resumed run did not repeat it."""
        ...

    async def run_tool_calls(self, run_id: int) -> list[JournaledCall]:
        """The journal of run `run_id`, in order."""
        ...

    async def adopt_tool_calls(self, group_id: int, agent_id: int, run_id: int) -> list[JournaledCall]:
        """Move to run `run_id` the journal of the agent's interrupted runs of the same episode (a
        crash or a restart cut them); return the run's calls, in order."""
        ...

    async def tool_calls_by_run(self, run_ids: Iterable[int]) -> dict[int, list[JournaledCall]]:
        """The journals of these runs (a run without calls has no key), each in order."""
        ...


Recorder = Callable[[str], Awaitable[None]]


class Draft(Protocol):
    """A reply shown while it is written, until its row is committed and published (SPEC §8)."""

    def grew(self) -> None:
        """More of the reply was written: show the draft's text source again soon (the surface
        paces its updates; it calls the source when it is about to show). Never blocks."""
        ...

    async def stop(self, *, wait: bool = True) -> None:
        """The model is done: no more updates; an update on its way is finished first (its ids
        recorded), unless not `wait` (shutting down: the parts recorded so far are the next run's)."""
        ...

    async def discard(self) -> None:
        """Nothing will be posted for this run: take back what was shown (best effort; what stays
        is recorded and removed later)."""
        ...


class Surface(Protocol):
    """Where public messages are shown: Discord, or the console."""

    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        """Show a committed row, part by part, calling `record(external_id)` after each part.

        `message.external_ids` are the parts already recorded: show only the rest.
        With `resume`, an earlier attempt may have reached people without being
        recorded (a crash, a reset connection): first look for those parts and
        record them instead of showing them twice. An agent row whose run was shown
        while it was written (`draft`) is finished in the provisional messages of its
        run, which become its parts. Called for agent and system rows, and (console)
        user rows. Raises `DeliveryError`.
        """
        ...

    def working(self, group: Group, agent: Agent) -> AbstractAsyncContextManager[None]:
        """Held while `agent` works on a run (e.g. Discord's typing indicator); never delays the run."""
        ...

    def draft(self, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> Draft | None:
        """Show run `run_id`'s reply while it is written (`text()`: what may be shown of it now);
        None when this surface does not (then the reply is shown once committed). `parts`: the
        provisional messages the run took over from an interrupted run of the agent, to reuse.
        The committed row's `publish` turns what was shown into the final text."""
        ...

    async def remove_drafts(self, group: Group, parts: Sequence[DraftPart]) -> list[int]:
        """Take back provisional messages no row will own; the ids of the parts that are gone."""
        ...

    async def approve(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        """Hold a tool call until a person decides (SPEC §6b "Approval"): ask the starter of the
        episode or an operator (Discord: Approve / Deny buttons; a console on a terminal: [y/N]),
        and return their decision, or a denial (`by` "") after `ask.timeout` seconds or when
        nobody can be asked. What was shown to ask is taken back or settled before it returns."""
        ...

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        """The episode started, or ended with `episode.status`."""
        ...

    async def alert(self, group: Group, text: str) -> None:
        """Best effort: tell the group's people about a lasting delivery problem, outside the thread."""
        ...

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        """The bytes of a file a person shared in `group` (Discord: its URL refreshed first, as
        they expire). Raises `bot.core.rules.attachments.FileUnavailable` when they cannot be had."""
        ...


class GroupStore(Protocol):
    """Groups: their settings and state (paused, a lasting delivery problem, Discord's ingest watermark)."""

    async def create_group(
        self,
        key: str,
        name: str,
        settings: GroupSettings,
        *,
        guild_id: str | None = None,
        channel_id: str | None = None,
        parent_channel_id: str | None = None,
        setup_message_id: str | None = None,
    ) -> Group:
        """Create (or re-enable, keeping history and settings) the group with this key."""
        ...

    async def get_group(self, group_id: int) -> Group: ...

    async def find_group(self, key: str) -> Group | None:
        """The group with this key, enabled or not; None when never set up."""
        ...

    async def list_groups(self, *, enabled_only: bool = True, guild_id: str | None = None) -> list[Group]: ...

    async def update_group(
        self,
        group_id: int,
        *,
        settings: GroupSettings | None = None,
        enabled: bool | None = None,
        paused: bool | None = None,
    ) -> Group: ...

    async def set_delivery_problem(self, group_id: int, problem: str | None) -> bool:
        """Record or clear (None) a lasting refusal of the surface; True when it changed."""
        ...

    async def advance_watermark(self, group_id: int, message_id: str) -> None:
        """Discord ingest: every channel message up to `message_id` is stored or
        deliberately ignored. Never moves backwards."""
        ...


class AgentChanges(TypedDict, total=False):
    """What `RosterStore.update_agent` may change of an agent (the fields of `bot.core.models.Agent`)."""

    name: str
    role: str
    system_prompt: str
    model: str | None
    avatar_url: str | None
    enabled: bool
    position: int
    memory: bool
    mode: str  # 'talk' or 'worker'
    muted_until: float | None
    temperature: float | None
    max_tokens: int | None
    context_budget: int | None


class RosterStore(Protocol):
    """A group's agents, and each agent's delivery cursor."""

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
        """Append to the roster (position = last + 1). The new agent's cursor
        starts at the group's latest seq (it is not sent the old history as a
        delivery, though its runs see it). Duplicate name (case-insensitive,
        among agents not removed) -> InvalidInput."""
        ...

    async def update_agent(self, agent_id: int, **fields: Unpack[AgentChanges]) -> Agent:
        """Change the fields given (`AgentChanges`; None clears muted_until and the model settings).
        A field an agent does not have, or a mode but talk or worker, is InvalidInput."""
        ...

    async def remove_agent(self, agent_id: int) -> None:
        """Take the agent off the roster; its old rows keep their snapshots, its name is free again."""
        ...

    async def get_agent(self, agent_id: int) -> Agent: ...

    async def find_agent(self, group_id: int, name: str) -> Agent | None:
        """Case-insensitive lookup among agents on the roster (enabled or not)."""
        ...

    async def list_agents(self, group_id: int, *, enabled_only: bool = False) -> list[Agent]:
        """Roster order (position, then id)."""
        ...

    async def set_delivered_through(self, agent_id: int, seq: int) -> None:
        """Move the agent's cursor forward to `seq` (never backwards)."""
        ...


class ThreadStore(Protocol):
    """The thread: a group's rows, appended and read."""

    async def append_user_message(self, group_id: int, message: NewMessage) -> tuple[Message, Episode]:
        """In one transaction: next seq, insert, reset the agent streak to 0,
        end the previous episode if it is still running (status 'superseded'),
        open a new episode whose task is this message, and advance the poster's
        read cursor through it (when author_user_id is set). An external id that
        is already stored raises AlreadyStored (and nothing is written)."""
        ...

    async def append_system_message(self, group_id: int, message: NewMessage) -> Message:
        """A notice from the bot: next seq, insert; the streak is unchanged."""
        ...

    async def get_message(self, group_id: int, seq: int) -> Message: ...

    async def edit_message(self, group_id: int, seq: int, text: str, *,
                           attachment_ids: Collection[str] | None = None) -> Message | None:
        """A person edited the row (SPEC §1): its text (and the files it still has, by attachment id;
        None: unchanged) replaced, marked edited, tags and token count kept; the summaries written
        from it blanked, so they are written again. None when nothing changed or it is a tombstone."""
        ...

    async def delete_message(self, group_id: int, seq: int) -> Message | None:
        """The row was deleted on the surface (SPEC §1): a tombstone (seq, author, deleted_at), its text
        and files purged, confirmed; the summaries written from it blanked. None when it was one already."""
        ...

    async def find_message_by_external_id(self, external_id: str) -> Message | None: ...

    async def message_versions(self, group_id: int, seqs: Collection[int] | None = None) -> list[MessageVersion]:
        """The earlier texts of the group's regenerated replies (of rows `seqs` when given), by seq and version."""
        ...

    async def messages(self, group_id: int, *, after: int = 0, through: int | None = None) -> list[Message]:
        """Rows with after < seq <= through (through=None: latest), oldest first."""
        ...

    async def search_messages(self, group_id: int, query: str, *, limit: int) -> list[Message]:
        """Rows whose text or author contains `query` (case-insensitive, literally), deleted ones
        excluded: the newest `limit`, newest first (history_search)."""
        ...

    async def thread_tokens(self, group_id: int, *, through: int) -> int:
        """The thread cost of rows 1..`through` (the running sum of `token_cost`); 0 for none.

        With `first_seq_at`, lets the context budget find its window by lookups, not by reading the history.
        """
        ...

    async def first_seq_at(self, group_id: int, *, tokens: int) -> int | None:
        """The first row whose earlier rows cost at least `tokens` (its `tokens_before`); None past the end."""
        ...

    async def last_agent_author(self, group_id: int, *, through: int) -> int | None:
        """The agent id of the newest agent row at or before `through`."""
        ...

    async def last_external_id(self, group_id: int, *, before_seq: int | None = None) -> str | None:
        """The largest numeric external (Discord) id of the group's rows (before `before_seq`)."""
        ...


class PostingStore(Protocol):
    """Rows reaching the surface: the parts posted, and the rows every part of which was shown
    (`bot.core.runtime.outbox`)."""

    async def record_posted(self, group_id: int, seq: int, external_id: str) -> None:
        """One more part of the row reached the surface, with its external id."""
        ...

    async def take_posted(self, group_id: int, seq: int, external_id: str) -> int | None:
        """`record_posted` for an id that a process took in as a person's row of the group (our
        own post, seen as someone else's): the id moves to row `seq`; the person row stays,
        without it. That row's seq (None: no row held the id). AlreadyStored when a row that
        is not a person's holds it."""
        ...

    async def confirm_message(self, group_id: int, seq: int) -> None:
        """Every part of the row reached the surface (the provisional messages of its run are its
        parts now, or gone: they are forgotten)."""
        ...

    async def unconfirmed_messages(self, group_id: int) -> list[Message]:
        """Agent and system rows not yet confirmed by the surface, oldest first."""
        ...


class RoutingStore(Protocol):
    """Who answers each row: routing decisions, stored once (`bot.core.runtime.dispatcher`)."""

    async def record_decision(self, group_id: int, decision: Decision) -> None:
        """Store a message's routing decision once; a second one for the same seq is ignored."""
        ...

    async def record_decisions(self, group_id: int, decisions: Sequence[Decision]) -> None:
        """`record_decision` for each, in one write."""
        ...

    async def get_decision(self, group_id: int, seq: int) -> Decision | None: ...

    async def decisions(self, group_id: int, *, after: int, through: int) -> dict[int, Decision]: ...

    async def unrouted(self, group_id: int, *, through: int, limit: int | None = None) -> list[Message]:
        """The rows up to `through` still to route, oldest first: those after the last row
        such that it and every earlier row have a decision (the oldest `limit` of them, when given)."""
        ...


class EpisodeStore(Protocol):
    """Episodes: a task and the turns it started, and the earlier tasks an episode continues
    (`bot.core.features.tasks`)."""

    async def get_episode(self, episode_id: int) -> Episode: ...

    async def end_episode(
        self, episode_id: int, status: str, *, notice: NewMessage | None = None
    ) -> tuple[Episode, Message | None] | None:
        """Set a running episode's final status and append `notice` in the same
        transaction. None when it had already ended (nothing changes)."""
        ...

    async def earlier_tasks(self, group_id: int, *, before_seq: int, limit: int) -> list[tuple[Episode, Message]]:
        """The episodes opened before row `before_seq`, each with its task row, newest first, at most `limit`."""
        ...

    async def break_tasks(self, group_id: int) -> int:
        """`/roundtable newtask`: the first person's message after the group's newest row starts a fresh
        task (kept, so it holds after a restart). Returns that newest row's seq."""
        ...

    async def task_breaks(self, group_id: int, *, from_seq: int, before_seq: int) -> list[int]:
        """The rows after which a fresh task starts (`break_tasks`), from_seq <= seq < before_seq, ascending."""
        ...


class RunStore(Protocol):
    """Runs: an agent's call over a snapshot, started and settled (`bot.core.runtime.turn`,
    `bot.core.runtime.direct`)."""

    async def start_run(self, group_id: int, agent_id: int, kind: str, snapshot_seq: int, *,
                        replaces: int | None = None) -> Run:
        """A running run over 1..snapshot_seq, in the episode current at the snapshot; a
        'regenerate' run names the seq of the reply it replaces (`replaces`).
        Raises LeaseLost when another process runs the group."""
        ...

    async def finish_run(self, run_id: int, result: RunResult, *, cap: int) -> FinishedRun:
        """Settle a run in one transaction: status and tokens, the reply (unless the cap
        refuses it, or its episode was stopped), the notice, the episode's totals and
        the agent's cursor (every status but 'interrupted'; group runs only). A run no longer running
        is returned unchanged."""
        ...

    async def post_from_run(self, run_id: int, message: NewMessage, *, cap: int) -> Message:
        """Post `message` now from a running worker run (its `group_post`), as `finish_run` posts a
        reply: in the run's episode, counted toward the streak. Raises CapReached when the group's
        consecutive agent messages reached `cap`, InvalidInput when the run is not running, its
        episode was stopped or its agent removed or disabled."""
        ...

    async def interrupt_running_runs(self, group_id: int) -> int:
        """After taking a group's lease: mark its runs left 'running' as 'interrupted'."""
        ...


class SummaryStore(Protocol):
    """Rolling summaries of the rows a prompt's window cut (`bot.core.features.summary`)."""

    async def context_summary(self, group_id: int, *, through: int) -> ContextSummary | None:
        """The newest rolling summary whose last row is at or before `through`."""
        ...

    async def save_context_summary(self, group_id: int, summary: ContextSummary, usage: Usage) -> None:
        """Keep a rolling summary and what its call cost (usage kind 'summary'); a second one of the same
        rows replaces the text and adds its call."""
        ...

    async def context_summaries(self, group_id: int, *, after: int = 0, through: int | None = None
                                ) -> list[tuple[ContextSummary, Usage, int]]:
        """The rolling summaries whose last row is in after < seq <= through, in order, each with its
        calls' usage and their number."""
        ...


class DraftStore(Protocol):
    """Provisional messages of replies being written (SPEC §8 "Streaming"), so that a reply
    shown in part is finished or taken back even after a crash."""

    async def add_draft(self, group_id: int, agent_id: int, run_id: int, position: int, author_name: str,
                        text: str) -> DraftPart:
        """A provisional message about to be posted with `text` (its id is not known yet)."""
        ...

    async def draft_posted(self, draft_id: int, external_id: str) -> None:
        """The provisional message was posted: its id (before any edit of it)."""
        ...

    async def draft_parts(self, run_id: int) -> list[DraftPart]:
        """The run's provisional messages, in order."""
        ...

    async def adopt_drafts(self, group_id: int, agent_id: int, run_id: int) -> list[DraftPart]:
        """Move to run `run_id` the agent's provisional messages that no row owns and whose run
        ended (an interrupted run's); return the run's parts, in order."""
        ...

    async def orphan_drafts(self, group_id: int) -> list[DraftPart]:
        """Provisional messages that no row owns and no running run will use."""
        ...

    async def drop_drafts(self, draft_ids: Iterable[int]) -> None:
        """Forget these provisional messages (taken back, or never posted)."""
        ...


class NoteStore(Protocol):
    """An agent's memory: the notes it saved with memory_write (`bot.core.features.memory`)."""

    async def add_note(self, agent_id: int, text: str) -> Note:
        """Keep a note the agent saved with memory_write."""
        ...

    async def notes(self, agent_id: int, *, limit: int | None = None) -> list[Note]:
        """The agent's notes, oldest first: all of them, or the newest `limit`."""
        ...

    async def note_count(self, agent_id: int) -> int: ...

    async def clear_notes(self, agent_id: int) -> int:
        """Delete every note of the agent; return how many there were."""
        ...


class ScheduleStore(Protocol):
    """Schedules: an agent's task posted at set times (`bot.core.runtime.scheduler`)."""

    async def add_schedule(self, agent_id: int, when: When, prompt: str, *, next_run_at: float,
                           created_by: str | None = None) -> Schedule:
        """A schedule for an agent on the roster (NotFound otherwise), in the agent's group."""
        ...

    async def schedules(self, group_id: int, *, agent_id: int | None = None) -> list[Schedule]:
        """The group's live schedules (of one agent when given), oldest first."""
        ...

    async def remove_schedule(self, group_id: int, schedule_id: int) -> Schedule:
        """Take a live schedule of the group off; NotFound (worded for people) when there is none."""
        ...

    async def due_schedules(self, now: float) -> list[Schedule]:
        """Every group's live schedules of agents on the roster with next_run_at <= now, earliest first."""
        ...

    async def fire_schedule(self, schedule: Schedule, task: NewMessage, *, ran_at: float,
                            next_run_at: float) -> tuple[Message, Episode] | None:
        """In one transaction: append `task` as a new episode's task (as append_user_message
        opens one) and set next_run_at and last_run_at; only while the schedule is live and
        its next_run_at is still `schedule.next_run_at`, else None and nothing is written."""
        ...

    async def next_schedule(self, group_id: int) -> Schedule | None:
        """The group's live schedule that runs first."""
        ...

    async def get_schedule(self, schedule_id: int) -> Schedule:
        """A schedule, live or removed; NotFound when there never was one."""
        ...


class SpendingStore(Protocol):
    """Usage and costs: the model calls' tokens in totals, and the calls that no run, decision or
    summary holds (`record_call`) (`bot.core.features.spending`)."""

    async def usage_since(self, group_id: int, since: float) -> dict[str, Usage]:
        """Token totals per agent name, plus key 'selector', for runs/decisions since `since`."""
        ...

    async def spending(self, group_id: int, since: float) -> list[Spend]:
        """Model calls since `since`: per (agent name, model) of runs (each run's calls: a memory run
        may make several) and of the calls recorded with `record_call`, per model of the selector's
        decisions (a call per attempt), of catch-up summaries and of rolling summaries (kind 'summary')."""
        ...

    async def record_call(self, group_id: int, agent_id: int | None, purpose: str, call: Completion) -> None:
        """Keep a model call that is no run, decision or summary (the memory check), for `spending`."""
        ...


class RecordStore(Protocol):
    """The record, for exports: read in pages, never changed (`bot.core.record`)."""

    def message_pages(self, group_id: int, *, after: int = 0, through: int | None = None,
                      size: int = 500) -> AsyncIterator[list[Message]]:
        """Rows after < seq <= through (None: to the newest), oldest first, `size` at a time."""
        ...

    def run_pages(self, group_id: int, *, after: int = 0, through: int | None = None,
                  size: int = 500) -> AsyncIterator[list[Run]]:
        """Runs with after < snapshot_seq <= through, in the order they started, `size` at a time."""
        ...

    def episode_pages(self, group_id: int, *, after: int = 0, through: int | None = None,
                      size: int = 500) -> AsyncIterator[list[Episode]]:
        """The episodes of the rows after < seq <= through, in order, `size` at a time."""
        ...

    async def runs_by_id(self, run_ids: Iterable[int]) -> dict[int, Run]: ...

    async def episodes_by_id(self, episode_ids: Iterable[int]) -> dict[int, Episode]: ...

    async def roster_ever(self, group_id: int) -> list[tuple[Agent, float | None]]:
        """Every agent the group ever had (removed ones last), each with when it was removed."""
        ...


class ReadingStore(Protocol):
    """People's read cursors, the names that tag them, and catch-up summaries (`bot.core.features.reading`)."""

    async def get_seen(self, group_id: int, user_id: str) -> int | None: ...

    async def remember_person(self, scope: str, user_id: str, names: Iterable[str]) -> None:
        """`names` tag this person in `scope` (a Discord guild id, or a console group key) from now on."""
        ...

    async def people(self, scope: str) -> dict[str, str]:
        """Name -> user id of the people known in `scope`."""
        ...

    async def tagging(self, group_id: int, user_id: str, *, after: int, operators: bool, limit: int) -> list[Message]:
        """Rows after `after` tagging `user_id` (or every operator, when `operators`), oldest first."""
        ...

    async def get_summary(self, group_id: int, after: int, through: int, *, newer_than: float) -> Summary | None: ...

    async def save_summary(self, group_id: int, summary: Summary, *, prompt_tokens: int = 0,
                           completion_tokens: int = 0) -> None: ...

    async def mark_seen(self, group_id: int, user_id: str, seq: int) -> int:
        """Clamp to latest seq, never backwards; return the stored value."""
        ...


class LeaseStore(Protocol):
    """One process runs a group: its lease, and hearing of rows other processes store (`bot.core.runtime.ownership`)."""

    async def acquire_lease(self, group_id: int, ttl: float) -> str | None:
        """Take the group's lease; None when taken, else a description of its holder."""
        ...

    async def renew_leases(self, group_ids: Iterable[int], ttl: float) -> set[int]:
        """Extend these leases; return the groups whose lease this store still holds."""
        ...

    async def release_leases(self, group_ids: Iterable[int] | None = None) -> None: ...

    async def leased_elsewhere(self, group_id: int) -> bool:
        """Whether another process holds the group's lease."""
        ...

    async def held_elsewhere(self) -> set[int]:
        """The groups whose lease another live process holds, unexpired (taking them would fail)."""
        ...

    async def watch(self, appended: Callable[[int], None]) -> None:
        """From now on call `appended(group_id)` soon after another process stores a row in a
        group (PostgreSQL: LISTEN/NOTIFY). A store that cannot tell calls nothing: the lease
        keeper's polling notices new rows instead."""
        ...


class WebhookStore(Protocol):
    """Discord's webhooks per channel (the Discord adapter's only; the core never asks)."""

    async def get_webhook(self, channel_id: str) -> tuple[str, str] | None:
        """(webhook id, webhook token) stored for a channel, or None. The token is registered
        with `bot.core.rules.secrets` (masked in every text from then on), as by `save_webhook`."""
        ...

    async def register_webhook_tokens(self) -> int:
        """Register every stored webhook token with `bot.core.rules.secrets` (at start, before any
        text could hold one); how many there are."""
        ...

    async def save_webhook(self, channel_id: str, webhook_id: str, token: str) -> None: ...

    async def forget_webhook(self, channel_id: str) -> None: ...


class InteractionStore(Protocol):
    """Which process handles a Discord interaction (each process of a shard receives every one)."""

    async def claim_interaction(self, interaction_id: str) -> bool:
        """True for the first caller of any process with this id, False for every later one."""
        ...


class DiagnosisStore(Protocol):
    """What `/roundtable doctor` reads of the database (`bot.core.rules.doctor`)."""

    async def database_report(self) -> DatabaseReport:
        """The schema version, the rows waiting to be posted and the leases, read without changing anything."""
        ...


class HealthStore(Protocol):
    """Whether the database takes writes (`bot.core.rules.store_health`)."""

    health: StoreHealth  # told every write's outcome: whether the database takes writes


# The store holds one part per role (`store.thread` is its `ThreadStore`). A consumer names the roles
# it uses with the holders below: `store: HasThread` for one, a Protocol of several for more
# (`class TaskStore(HasEpisodes, HasThread, HasGroups, Protocol)`), and calls `store.thread.messages(...)`.


class HasGroups(Protocol):
    @property
    def groups(self) -> GroupStore: ...


class HasRoster(Protocol):
    @property
    def roster(self) -> RosterStore: ...


class HasThread(Protocol):
    @property
    def thread(self) -> ThreadStore: ...


class HasPosting(Protocol):
    @property
    def posting(self) -> PostingStore: ...


class HasRouting(Protocol):
    @property
    def routing(self) -> RoutingStore: ...


class HasEpisodes(Protocol):
    @property
    def episodes(self) -> EpisodeStore: ...


class HasRuns(Protocol):
    @property
    def runs(self) -> RunStore: ...


class HasSummaries(Protocol):
    @property
    def summaries(self) -> SummaryStore: ...


class HasDrafts(Protocol):
    @property
    def drafts(self) -> DraftStore: ...


class HasNotes(Protocol):
    @property
    def notes(self) -> NoteStore: ...


class HasTools(Protocol):
    @property
    def tools(self) -> ToolStore: ...


class HasSchedules(Protocol):
    @property
    def schedules(self) -> ScheduleStore: ...


class HasRecord(Protocol):
    @property
    def record(self) -> RecordStore: ...


class HasSpending(Protocol):
    @property
    def spending(self) -> SpendingStore: ...


class HasReading(Protocol):
    @property
    def reading(self) -> ReadingStore: ...


class HasLeases(Protocol):
    @property
    def leases(self) -> LeaseStore: ...


class HasWebhooks(Protocol):
    @property
    def webhooks(self) -> WebhookStore: ...


class HasInteractions(Protocol):
    @property
    def interactions(self) -> InteractionStore: ...


class HasDiagnosis(Protocol):
    @property
    def diagnosis(self) -> DiagnosisStore: ...


class Store(HasGroups, HasRoster, HasThread, HasPosting, HasRouting, HasEpisodes, HasRuns, HasSummaries, HasDrafts,
            HasNotes, HasTools, HasSchedules, HasRecord, HasSpending, HasReading, HasLeases, HasWebhooks,
            HasInteractions, HasDiagnosis, HealthStore, Protocol):
    """Durable state, one part per role: `store.thread`, `store.runs`, ... Every method is atomic;
    appends are serialised per group.

    Seqs are per group, 1, 2, 3 ... without gaps. `group.latest_seq` is the
    newest seq. Methods raise `NotFound` / `InvalidInput` for bad ids or
    duplicates and `StoreError` when the database fails (`StoreUnwritable` when
    it takes no writes: a full disk, a read-only file).

    Only wiring names the whole Store; a part of the core asks for the roles it uses.
    """
