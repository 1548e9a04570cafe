"""A recording Surface: what the engine published, typed and reported, in order.

With `streams = True` it also gives drafts (`RecordingDraft`), which keep every text they
were shown and what became of them."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from bot.core.errors import DeliveryError
from bot.core.models import Agent, Approval, ApprovalAsk, DraftPart, Episode, Group, Message, SharedFile
from bot.core.ports import Draft, Recorder
from bot.core.rules.attachments import FileUnavailable


class RecordingDraft:
    """Shows (records) `text()` at every `grew()`; `state`: "open", "stopped", "discarded"."""

    def __init__(self, agent: str, run_id: int, parts: Sequence[DraftPart], text: Callable[[], str]) -> None:
        self.agent = agent
        self.run_id = run_id
        self.parts = list(parts)
        self.text = text
        self.shown: list[str] = []
        self.state = "open"

    def grew(self) -> None:
        assert self.state == "open", f"a {self.state} draft grew"
        visible = self.text()
        if visible and (not self.shown or visible != self.shown[-1]):
            self.shown.append(visible)

    async def stop(self, *, wait: bool = True) -> None:
        self.state = "stopped"

    async def discard(self) -> None:
        assert self.state == "stopped", "discarded before it stopped"
        self.state = "discarded"


class RecordingSurface:
    def __init__(self) -> None:
        self.published: list[Message] = []
        self.episodes: list[Episode] = []
        self.working_for: list[str] = []
        self.fail_next = 0
        self.problem: str | None = None  # with fail_next: the failures are a lasting refusal
        self.alerts: list[str] = []
        self.events: list[str] = []  # "row N" when row N is shown, "episode E STATUS" when told
        self.delay = 0.0  # seconds each publish takes
        self.files: dict[str, bytes] = {}  # a shared file's url -> its bytes (file_data)
        self.fetched: list[str] = []  # the urls file_data was asked for, in order
        self.streams = False  # give drafts
        self.drafts: list[RecordingDraft] = []
        self.removed: list[DraftPart] = []
        self.asked: list[ApprovalAsk] = []  # approvals asked for, in order
        self.decide: Callable[[ApprovalAsk], Approval] = lambda ask: Approval(False)  # default: timed out
        self.hold_approvals = False  # approve() waits (until cancelled): a run held for approval

    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise DeliveryError("surface down", problem=self.problem)
        if self.delay:
            await asyncio.sleep(self.delay)
        self.published.append(message)
        self.events.append(f"row {message.seq}")
        if message.author_type != "user":
            await record(f"ext-{group.id}-{message.seq}")

    async def alert(self, group: Group, text: str) -> None:
        self.alerts.append(text)

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        self.fetched.append(file.url)
        if file.url not in self.files:
            raise FileUnavailable(f"no file at {file.url}")
        return self.files[file.url]

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        self.working_for.append(agent.name)
        yield

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        self.episodes.append(episode)
        self.events.append(f"episode {episode.id} {episode.status}")

    def draft(self, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> Draft | None:
        if not self.streams:
            return None
        self.drafts.append(RecordingDraft(agent.name, run_id, parts, text))
        return self.drafts[-1]

    async def remove_drafts(self, group: Group, parts: Sequence[DraftPart]) -> list[int]:
        self.removed.extend(parts)
        return [p.id for p in parts]

    async def approve(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        self.asked.append(ask)
        if self.hold_approvals:
            await asyncio.Event().wait()
        return self.decide(ask)

    def lines(self) -> list[str]:
        return [f"[{m.author_name}] {m.text}" for m in self.published]
