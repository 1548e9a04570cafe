"""The engine's value objects: plain frozen dataclasses with plain ids.

Nothing here knows Discord, OpenAI or SQLite. Ids of people are strings (a
Discord user id, or a console person's name); agents, groups, runs and
episodes have integer ids given by the store.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from bot.core.settings import GroupSettings as GroupSettings  # declared with every other setting; imported from here

Mode = Literal["selector", "round_robin", "tags"]
AuthorType = Literal["user", "agent", "system"]
EpisodeStatus = Literal["running", "terminated", "max_turns", "stopped", "stalled", "superseded", "quiet"]
DecisionSource = Literal[
    "tags", "selector", "rotation", "fallback", "low_confidence", "superseded", "none"
]
RunKind = Literal["group", "direct", "regenerate"]  # regenerate: a reply run again (SPEC §8)
SpendKind = Literal["agent", "selector", "catch-up", "summary"]
SUMMARY_SPENDER = "rolling summary"  # who spent kind 'summary' (the usage report's line)
RunStatus = Literal["running", "posted", "answered", "worked", "empty", "failed", "refused", "discarded",
                   "interrupted", "stopped"]

MUTED_FOREVER = 253_402_300_799.0  # 9999-12-31T23:59:59Z: an agent's muted_until when muted until /agent unmute
DEFAULT_PROVIDER = "default"  # the provider of OPENAI_BASE_URL / OPENAI_API_KEY
FileKind = Literal["image", "text", "other"]


def token_cost(token_count: int) -> int:
    """A thread line's cost in a prompt: its counted tokens plus the newline."""
    return max(token_count, 1) + 1


@dataclass(frozen=True)
class Group:
    id: int
    key: str
    name: str
    settings: GroupSettings
    guild_id: str | None = None
    channel_id: str | None = None
    parent_channel_id: str | None = None
    enabled: bool = True
    paused: bool = False
    latest_seq: int = 0
    agent_streak: int = 0
    episode_id: int | None = None
    setup_message_id: str | None = None
    created_at: float = 0.0
    watermark: str | None = None  # newest channel message id with every earlier one ingested (Discord)
    delivery_problem: str | None = None  # a lasting refusal of the surface, for people to fix

    @property
    def people_scope(self) -> str:
        """Where people's names are known: the Discord guild, or the group itself (a console)."""
        return self.guild_id or self.key

    def in_scope(self, scope: str) -> bool:
        """Whether a process serving `scope` runs this group: a key, a key prefix ending
        in ':', or "" for every group."""
        return not scope or self.key == scope or (scope.endswith(":") and self.key.startswith(scope))


@dataclass(frozen=True)
class Agent:
    id: int
    group_id: int
    name: str
    role: str
    system_prompt: str
    model: str | None = None
    avatar_url: str | None = None
    enabled: bool = True
    position: int = 0
    delivered_through: int = 0
    created_at: float = 0.0
    memory: bool = False  # it gets the memory_write tool and its notes in its system prompt
    mode: str = "talk"  # 'worker': its run is private, it speaks through group_post (SPEC §8)
    muted_until: float | None = None  # /agent mute: epoch seconds (MUTED_FOREVER: until unmuted); None: not muted
    temperature: float | None = None  # /agent edit's model settings (SPEC §6); None: the provider's default
    max_tokens: int | None = None  # a reply's cap; None: none sent
    context_budget: int | None = None  # tokens of thread in its prompts; None: the group's context_budget

    def muted(self, now: float) -> bool:
        """Muted at `now`: left out of selection, rotation and @all; a tag of it gets a notice, no run.
        A mute whose time has passed is over by itself (nothing needs to clear it)."""
        return self.muted_until is not None and self.muted_until > now

    def available(self, now: float) -> bool:
        """Routing may pick it at `now`: enabled and not muted."""
        return self.enabled and not self.muted(now)


@dataclass(frozen=True)
class Note:
    """One note an agent saved with memory_write."""

    id: int
    agent_id: int
    text: str
    created_at: float = 0.0


@dataclass(frozen=True)
class Tags:
    """What a message tags, snapshotted when it is posted."""

    agent_ids: tuple[int, ...] = ()
    agent_names: tuple[str, ...] = ()
    user_ids: tuple[str, ...] = ()
    operators: bool = False  # `@user`: every operator
    all_agents: bool = False  # `@all`


@dataclass(frozen=True)
class SharedFile:
    """A file a person attached to a message (`bot.core.rules.attachments`), immutable like its row.

    `kind` is decided when the message is stored: an image (sent to models that take images,
    fetched when a run is made), a text file (its content read then and kept in `text`:
    `chars` is its whole length, `text` may hold less when it was too long to keep), or
    another file (named only). `url`: where the surface fetches it (Discord: the signed CDN
    URL as given, refreshed before use; console: the file's path). `note`: why a text file's
    content is missing (too big, not UTF-8, could not be fetched)."""

    name: str
    kind: FileKind
    size: int = 0  # bytes
    content_type: str = ""
    url: str = ""
    attachment_id: str | None = None  # Discord's ids, to refresh its URL
    message_id: str | None = None
    channel_id: str | None = None
    width: int | None = None
    height: int | None = None
    text: str | None = None
    chars: int = 0
    note: str = ""


@dataclass(frozen=True)
class NewMessage:
    """A message about to be appended; the store gives it its seq."""

    author_type: AuthorType
    author_name: str
    text: str
    tags: Tags = field(default_factory=Tags)
    author_user_id: str | None = None
    author_agent_id: int | None = None
    source_run_id: int | None = None
    external_ids: tuple[str, ...] = ()
    token_count: int = 0
    attachments: tuple[SharedFile, ...] = ()
    reply_to_seq: int | None = None  # the group's row a person's message replied to (a Discord reply)


@dataclass(frozen=True)
class Message:
    group_id: int
    seq: int
    author_type: AuthorType
    author_name: str
    text: str
    tags: Tags = field(default_factory=Tags)
    author_user_id: str | None = None
    author_agent_id: int | None = None
    source_run_id: int | None = None
    external_ids: tuple[str, ...] = ()
    confirmed: bool = True
    token_count: int = 0
    episode_id: int | None = None
    created_at: float = 0.0
    tokens_before: int = 0  # the thread cost of the group's earlier rows (running sum of token_cost)
    attachments: tuple[SharedFile, ...] = ()
    reply_to_seq: int | None = None  # the group's row a person's message replied to (a Discord reply)
    edited_at: float | None = None  # its author changed its text (SPEC §1; the tags stay as first parsed)
    deleted_at: float | None = None  # deleted in Discord: a tombstone, its text and files purged
    regenerated_at: float | None = None  # an agent's reply run again ("Regenerate reply"): its text is the newest

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None


@dataclass(frozen=True)
class MessageVersion:
    """An earlier text of a regenerated reply (SPEC §8 "Regenerate reply"): `version` 1 is the first,
    written by run `run_id` at `created_at`, replaced at `replaced_at`."""

    group_id: int
    seq: int
    version: int
    text: str
    run_id: int | None
    created_at: float
    replaced_at: float


@dataclass(frozen=True)
class DraftPart:
    """One provisional message of a reply being written (SPEC §8 "Streaming"): the surface's id for
    it (None while its post is on its way), the text that post carried, and the run it belongs to.
    A committed reply's row owns the parts of its run (`Message.source_run_id`)."""

    id: int
    group_id: int
    agent_id: int
    run_id: int
    position: int
    author_name: str
    external_id: str | None = None
    text: str = ""
    created_at: float = 0.0


@dataclass(frozen=True)
class Episode:
    id: int
    group_id: int
    task_seq: int
    status: str = "running"
    agent_turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    started_at: float = 0.0
    ended_at: float | None = None

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True)
class Spend:
    """Model calls of one kind, by one spender, of one model, over a period (for usage and cost).

    `who` is an agent's name, or 'selector' / 'catch-up' / 'rolling summary'; `model` is "" when it was
    not recorded."""

    who: str
    kind: SpendKind
    model: str
    calls: int
    usage: Usage
    provider: str = ""  # "" when it was not recorded


@dataclass(frozen=True)
class Decision:
    """How one message was routed: stored once when made, never recomputed."""

    seq: int
    source: str
    agent_ids: tuple[int, ...] = ()
    agent_names: tuple[str, ...] = ()
    selector_raw: tuple[str, ...] = ()
    attempts: int = 0
    confidence: float | None = None
    usage: Usage = field(default_factory=Usage)
    terminate: bool = False
    note: str = ""
    created_at: float = 0.0
    model: str = ""  # the selector model that answered ("" when no model was called, or not recorded)
    provider: str = ""  # the provider it ran on ("" when not recorded)


@dataclass(frozen=True)
class Run:
    id: int
    group_id: int
    agent_id: int
    kind: str
    snapshot_seq: int
    episode_id: int | None = None
    status: str = "running"
    usage: Usage = field(default_factory=Usage)
    selector_usage: Usage = field(default_factory=Usage)
    posted_seq: int | None = None
    error: str | None = None
    started_at: float = 0.0
    finished_at: float | None = None
    model: str = ""  # the model that answered ("" when none did, or not recorded)
    memory_skipped: bool | None = None  # memory on: whether the run ended without a note; None: memory off
    provider: str = ""  # the provider the model ran on ("" when not recorded)
    calls: int = 1  # model calls the run made (runs recorded before this was kept count one)
    private_text: str | None = None  # a worker run's final text: kept in the run, never posted
    replaces_seq: int | None = None  # a 'regenerate' run: the seq of the reply it writes again


@dataclass(frozen=True)
class RunResult:
    """How a run ended, settled by the store in one transaction with what it posts.

    `reply` (status 'posted') is appended unless the cap refuses it; `notice` is
    appended after it. Every status but 'interrupted' moves the agent's cursor (group runs only).
    """

    status: str
    usage: Usage = field(default_factory=Usage)
    selector_usage: Usage = field(default_factory=Usage)
    reply: NewMessage | None = None
    notice: NewMessage | None = None
    error: str | None = None
    model: str = ""  # the model that answered, for its price
    memory_skipped: bool | None = None  # None when memory was off for the run
    provider: str = ""
    calls: int = 0  # model calls made, failed ones too (a memory run: one per step, its reminder too)
    private_text: str | None = None  # a worker run's final text (status 'worked'): stored, not posted


@dataclass(frozen=True)
class FinishedRun:
    run: Run
    reply: Message | None = None
    notice: Message | None = None


@dataclass(frozen=True)
class Summary:
    """A model-written summary of rows after..through of a group (for /catchup)."""

    after: int
    through: int
    text: str
    omitted: int = 0  # the oldest rows left out to fit the budget
    model: str = ""
    created_at: float = 0.0
    provider: str = ""


@dataclass(frozen=True)
class ContextSummary:
    """A rolling summary of a group's rows 1..through, written when a prompt's window moved past them
    (SPEC §6); it extends the summary through `after` with rows after..through (`bot.core.features.summary`)."""

    through: int
    after: int
    text: str
    token_count: int = 0  # of its line in a prompt's thread
    omitted: int = 0  # rows after..through it could not read (the oldest: its input is bounded)
    model: str = ""
    created_at: float = 0.0
    provider: str = ""  # the provider the model ran on ("" when not recorded)


@dataclass(frozen=True)
class ToolCall:
    """A model's request to call one tool; `arguments` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True)
class Tool:
    """A function a model may call: its name, what it does, its JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ToolSpec:
    """A tool an agent may be granted (SPEC §6b): its name in commands (`memory_write`, `server.tool`),
    what the model is told of it, and what it says of itself (MCP's annotations; built-ins their own).
    `read_only` or `idempotent` tools may be run again after a crash cut their call."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    read_only: bool = False
    idempotent: bool = False
    destructive: bool = False
    timeout: float = 30.0  # seconds a call may take before its result is a timeout error
    confirm: bool = False  # its calls wait for a person's approval unless a grant says otherwise (MCP: destructive,
    # or the server's "confirm" in mcp.json)
    builtin: bool = False  # always offered when its feature is on (memory_write), never granted


@dataclass(frozen=True)
class ToolOutput:
    """What a tool call returned: its text, and whether it is an error (told to the model as a result)."""

    text: str
    error: bool = False


@dataclass(frozen=True)
class ApprovalAsk:
    """A tool call held until a person approves it (SPEC §6b "Approval"): who may (the person whose
    message started the episode, `starter_user_id`, or an operator), for how long (`timeout` seconds;
    then it is denied), and what it is (`tool` as in commands, its masked `arguments`)."""

    key: str  # unique among the process's waiting calls: "<run id>.<journal id>"
    agent_name: str
    tool: str
    arguments: str
    timeout: float
    starter_user_id: str | None = None
    starter_name: str = ""


@dataclass(frozen=True)
class Approval:
    """A person's decision on an `ApprovalAsk` (`by`: their name), or a denial without one: its
    timeout, or `why` nobody could be asked."""

    approved: bool
    by: str = ""
    why: str = ""  # a denial without a person: why nobody could be asked ("": the timeout)

    @property
    def timed_out(self) -> bool:
        return not self.approved and not self.by and not self.why


@dataclass(frozen=True)
class ToolGrant:
    """A tool (or `server.*`) an admin granted an agent; `confirm` None: the tool's default."""

    pattern: str
    confirm: bool | None = None


ToolCallStatus = Literal["pending", "running", "done", "unknown"]


@dataclass(frozen=True)
class JournaledCall:
    """One tool call of a run as its journal holds it (SPEC §6b "Never twice"): written before it
    runs (`pending`, then `running`), its result when it returns (`done`); `unknown` once a run
    resumed after a crash found it running and did not repeat it. `step` and `position` place it
    in the run's conversation; `assistant_text` is the text of the model's answer that made it."""

    id: int
    run_id: int
    step: int
    position: int
    call_id: str
    tool: str  # the name the model used
    arguments: str
    status: ToolCallStatus
    result: str | None = None
    assistant_text: str = ""
    started_at: float = 0.0  # when it was journaled, then when it started running
    finished_at: float | None = None  # when its result was recorded

    @property
    def seconds(self) -> float | None:
        """How long it ran (None before its result)."""
        return None if self.finished_at is None else max(0.0, self.finished_at - self.started_at)


@dataclass(frozen=True)
class ImagePart:
    """An image inside a message to a model: a data URL (the model server need not reach the
    surface), its estimated prompt tokens, and the text that stands in its place for a model
    that does not take images."""

    url: str
    fallback: str
    tokens: int = 0


@dataclass(frozen=True)
class ChatMessage:
    """One message sent to a chat model.

    An assistant message may carry the `tool_calls` it made; each is answered by a
    `tool` message whose `tool_call_id` names the call and whose content is the result.
    A user message may have `parts`: its text in pieces with images between them (the text
    parts joined are `content`)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    parts: tuple[str | ImagePart, ...] = ()

    @property
    def images(self) -> tuple[ImagePart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ImagePart))

    def without_images(self) -> ChatMessage:
        """The message as a model that does not take images gets it: each image's fallback text in its place."""
        if not self.images:
            return self
        text = "".join(p if isinstance(p, str) else p.fallback for p in self.parts)
        return replace(self, content=text, parts=())


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage
    model: str = ""
    logprob: float | None = None  # sum of the reply's token log-probabilities
    finish_reason: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    provider: str = ""  # the provider that answered (set by the provider router)


@dataclass(frozen=True)
class EpisodeResult:
    """What one bounded group chat produced (seed 000 step 6)."""

    status: str
    answer: Message | None
    thread: tuple[Message, ...]
    agent_turns: int
    usage: Usage
