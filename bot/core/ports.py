"""The engine's ports: what the core asks of the store, the model and the surface.

Adapters implement these; the core only ever sees these Protocols and the
value objects of `bot.core.models`. SQL, locking and dialect details stay in
`storage/`: the core asks for what it needs ("append this user message")
rather than issuing queries.
"""
from __future__ import annotations

from typing import AsyncContextManager, Protocol, Sequence

from bot.core.models import (
    Agent,
    ChatMessage,
    Completion,
    Decision,
    Episode,
    Group,
    GroupSettings,
    Message,
    NewMessage,
    Run,
    Usage,
)


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
    ) -> Completion:
        """One chat completion. Raises `LLMError` subclasses; never other errors.

        `model=None` means the adapter's default agent model.
        """
        ...


class Surface(Protocol):
    """Where public messages are shown: Discord, or the console."""

    async def publish(self, group: Group, message: Message, agent: Agent | None) -> Sequence[str]:
        """Show a committed message; return its external ids (may be empty).

        Called for agent and system rows (and, for the console, user rows).
        Raises `DeliveryError` when it could not be shown after retries.
        """
        ...

    def working(self, group: Group, agent: Agent) -> AsyncContextManager[None]:
        """Held while `agent` works on a run (e.g. Discord's typing indicator)."""
        ...

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        """The episode started, or ended with `episode.status`."""
        ...


class Store(Protocol):
    """Durable state. Every method is atomic; appends are serialised per group.

    Seqs are per group, 1, 2, 3 ... without gaps. `group.latest_seq` is the
    newest seq. Methods raise `NotFound` / `InvalidInput` for bad ids or
    duplicates and `StoreError` when the database fails.
    """

    # groups -------------------------------------------------------------
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

    # agents -------------------------------------------------------------
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

    async def update_agent(self, agent_id: int, **fields: object) -> Agent:
        """Change any of name, role, system_prompt, model, avatar_url, enabled, position."""
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

    # messages -----------------------------------------------------------
    async def append_user_message(self, group_id: int, message: NewMessage) -> tuple[Message, Episode]:
        """In one transaction: next seq, insert, reset the agent streak to 0,
        end the previous episode if it is still running (status 'superseded'),
        open a new episode whose task is this message, and advance the poster's
        read cursor through it (when author_user_id is set)."""
        ...

    async def append_agent_message(
        self, group_id: int, message: NewMessage, *, snapshot_seq: int, cap: int
    ) -> Message:
        """In one transaction: refuse with CapReached when the streak >= cap;
        else next seq, insert (episode = the group's current episode),
        streak + 1, episode agent_turns + 1, and move the author's cursor
        through `snapshot_seq`, and through the new seq too when nothing else
        was appended after the snapshot."""
        ...

    async def append_system_message(self, group_id: int, message: NewMessage) -> Message:
        """A notice from the bot: next seq, insert; the streak is unchanged."""
        ...

    async def confirm_message(self, group_id: int, seq: int, external_ids: Sequence[str]) -> None:
        """Record that the surface showed the row (and its external ids)."""
        ...

    async def unconfirmed_messages(self, group_id: int) -> list[Message]:
        """Agent and system rows never confirmed by the surface, oldest first."""
        ...

    async def get_message(self, group_id: int, seq: int) -> Message: ...

    async def find_message_by_external_id(self, external_id: str) -> Message | None: ...

    async def messages(self, group_id: int, *, after: int = 0, through: int | None = None) -> list[Message]:
        """Rows with after < seq <= through (through=None: latest), oldest first."""
        ...

    async def token_counts(self, group_id: int, *, through: int) -> list[tuple[int, int]]:
        """(seq, token_count) of every row through `through`, oldest first: cheap, no text.

        Lets the context budget pick its window without loading the whole history.
        """
        ...

    async def last_agent_author(self, group_id: int, *, through: int) -> int | None:
        """The agent id of the newest agent row at or before `through`."""
        ...

    async def last_external_id(self, group_id: int) -> str | None:
        """The largest external (Discord) id stored for the group, for catch-up."""
        ...

    # routing ------------------------------------------------------------
    async def record_decision(self, group_id: int, decision: Decision) -> None:
        """Store a message's routing decision once; a second one for the same seq is ignored."""
        ...

    async def get_decision(self, group_id: int, seq: int) -> Decision | None: ...

    async def decisions(self, group_id: int, *, after: int, through: int) -> dict[int, Decision]: ...

    async def routed_through(self, group_id: int) -> int:
        """The highest seq such that every row up to it has a decision."""
        ...

    # episodes -----------------------------------------------------------
    async def get_episode(self, episode_id: int) -> Episode: ...

    async def end_episode(self, episode_id: int, status: str) -> Episode:
        """Set a running episode's final status (no-op when already ended)."""
        ...

    async def add_episode_usage(self, episode_id: int, usage: Usage) -> None: ...

    # runs ---------------------------------------------------------------
    async def start_run(
        self, group_id: int, agent_id: int, kind: str, snapshot_seq: int, episode_id: int | None
    ) -> Run: ...

    async def finish_run(
        self,
        run_id: int,
        status: str,
        *,
        usage: Usage | None = None,
        selector_usage: Usage | None = None,
        posted_seq: int | None = None,
        error: str | None = None,
    ) -> Run: ...

    async def interrupt_running_runs(self) -> int:
        """On start-up: mark runs left 'running' by a crash as 'interrupted'."""
        ...

    async def usage_since(self, group_id: int, since: float) -> dict[str, Usage]:
        """Token totals per agent name, plus key 'selector', for runs/decisions since `since`."""
        ...

    # webhooks (Discord) -------------------------------------------------
    async def get_webhook(self, channel_id: str) -> tuple[str, str] | None:
        """(webhook id, webhook token) stored for a channel, or None."""
        ...

    async def save_webhook(self, channel_id: str, webhook_id: str, token: str) -> None: ...

    async def forget_webhook(self, channel_id: str) -> None: ...

    # read cursors -------------------------------------------------------
    async def get_seen(self, group_id: int, user_id: str) -> int | None: ...

    async def mark_seen(self, group_id: int, user_id: str, seq: int) -> int:
        """Clamp to latest seq, never backwards; return the stored value."""
        ...
