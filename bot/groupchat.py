"""A small Python API: run one bounded group chat on a task and get its result.

    result = await run_group_chat(
        "Plan a 3-day Tokyo trip for under $1,500",
        [Participant("planner", "drafts the itinerary", "You plan trips."),
         Participant("budget", "keeps the total honest", "You check costs.")],
        llm,
    )
    result.status   # "terminated" | "max_turns" | ...
    result.answer   # the last substantive message
    result.thread   # the task and every reply, in order

It uses the same engine as the bot, over a SQLite file (a temporary one by default).
"""
from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.core.errors import InvalidInput, RoundtableError
from bot.core.models import (
    Agent,
    Approval,
    ApprovalAsk,
    DraftPart,
    Episode,
    EpisodeResult,
    Group,
    GroupSettings,
    Message,
    SharedFile,
)
from bot.core.ports import LLM, Draft, Recorder, TokenCounter
from bot.core.rules.attachments import FileUnavailable
from bot.core.runtime.engine import Engine
from storage import open_store


@dataclass(frozen=True)
class Participant:
    name: str
    role: str
    system_prompt: str
    model: str | None = None


class _Quiet:
    """A surface that shows nothing (the result is returned instead)."""

    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        await record(f"quiet:{message.seq}")

    async def alert(self, group: Group, text: str) -> None:
        return None

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        raise FileUnavailable("a group chat run in code has no files")

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        yield

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        return None

    def draft(self, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> Draft | None:
        return None  # nothing is shown: nothing to stream

    async def remove_drafts(self, group: Group, parts: Sequence[DraftPart]) -> list[int]:
        return [p.id for p in parts]

    async def approve(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        return Approval(False, why="nobody can be asked to approve it here")  # a held tool call is denied


async def run_group_chat(
    task: str,
    participants: Sequence[Participant],
    llm: LLM,
    *,
    max_turns: int = 12,
    mode: str = "selector",
    db_path: str | Path | None = None,
    counter: TokenCounter | None = None,
    timeout: float | None = None,
) -> EpisodeResult:
    """Post `task`, let the agents talk until a stop rule fires, return the episode's result."""
    from bot.core.rules import validation as v
    from bot.llm.tokens import make_token_counter

    if not participants:
        raise InvalidInput("A group chat needs at least one participant.")
    with tempfile.TemporaryDirectory() as tmp:
        store = await open_store(db_path or Path(tmp) / "groupchat.db")
        key = f"api:{uuid.uuid4().hex}"
        engine = Engine(store, llm, _Quiet(), counter or make_token_counter(), scope=key)
        try:
            settings = GroupSettings(mode=v.mode(mode), max_agent_turns=v.max_turns(max_turns))
            group = await store.groups.create_group(key, "api", settings)
            for p in participants:
                await store.roster.add_agent(group.id, v.agent_name(p.name), v.role(p.role),
                                             v.system_prompt(p.system_prompt),
                                             model=v.model(p.model))
            await engine.post_user_message(group, author_name="user", user_id=None, text=v.message_text(task))
            await engine.wait_idle(group.id, timeout)
            episode_id = (await store.groups.get_group(group.id)).episode_id
            if episode_id is None:
                raise RoundtableError(f"the task started no episode in group {group.id}")
            return await engine.episode_result(episode_id)
        finally:
            await engine.close()
            await store.close()
