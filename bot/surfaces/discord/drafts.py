"""Streamed replies on Discord (SPEC §8 "Streaming"): provisional webhook messages, paced edits,
and the committed row's final edit of them.

Exactly once. A provisional message is recorded in the store with the text it carries before
it is posted (`DraftStore.add_draft`) and with its id as soon as Discord answers
(`draft_posted`), before any edit of it. A part whose post may have landed unrecorded (a crash,
a timeout) is found by reading the channel back (its text, under the agent's name) before the
part is used or removed (`DraftHooks.settle_parts`), so every provisional message is known. The
committed row owns its run's parts: `publish_over` edits them into the row's chunks (the
splitter of a whole post, so the final text is a whole post's, byte for byte), then deletes
the parts left over; `publish` posts any chunks beyond. An edit shows the same text however
often it is sent, so publishing again after a crash leaves one copy. A part that can no longer
be edited (a moderator deleted it: 10008) is replaced by a new post, and the chunks after it
with it, so the reply stays in order.

Buttons. While the run works, each provisional message carries the controls people steer it with
(`DraftHooks.controls`: ⏹ Stop, and Approve / Deny while a tool call waits for approval, SPEC §8
and §6b); a change of them is an update like new text. The committed row's final edit removes them.

Pings. Every provisional post and edit allows no mention. Discord notifies nobody for a mention
an edit adds, so the chunks from the first that pings a tagged person on are posted anew at
commit, as a whole post would ping them (the visible text never shows a person's mention
before the commit: `bot.core.rules.draft`).

First post. A draft posts its first provisional message FIRST_AFTER seconds after it first has
text to show: a reply the model has finished by then (a fast model, a short answer) is stopped
before that and posted whole by its committed row, one request instead of a post and its final
edit (issue 31). A run that asks for approval needs its buttons now: it posts at once.

Pace. A webhook's rate limit is shared by every agent of its channel (and its threads). A
draft edits one message at most every EDIT_EVERY seconds; the drafts of one webhook together
send a request at most every DRAFT_GAP seconds (so each edits less often when several stream
at once); no draft takes the bucket's last RESERVE requests (Discord's X-RateLimit headers)
and all wait out a 429's Retry-After. So the outbox's posts and final edits never wait for a
draft. A failed draft request is not sent again as such: the next one shows newer text, after
a back-off; a draft that keeps failing stops, and the committed reply is shown all the same.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from bot.core.errors import DeliveryError, StoreError
from bot.core.models import Agent, DraftPart, Group, Message
from bot.core.ports import HasDrafts, Recorder
from bot.surfaces.discord.render import neutralize_mass_mentions, split_message

log = logging.getLogger(__name__)

FIRST_AFTER = 0.05  # seconds a draft's first post waits after its first text (a reply done by then is posted whole)
EDIT_EVERY = 1.0  # seconds between two edits of one provisional message
DRAFT_GAP = 0.5  # seconds between two draft requests on one webhook, all drafts together
RESERVE = 2  # requests of the webhook's rate-limit bucket that drafts leave to posts
DRAFT_TIMEOUT = 10.0  # seconds a draft request may take
GIVE_UP_AFTER = 5  # failed draft requests in a row before a draft stops showing
WINDOW = 2.0  # seconds of a webhook's rate-limit window, until an answer says otherwise


@dataclass
class HookPace:
    """What one webhook's rate limit allows drafts now: Discord's X-RateLimit answers, less the
    requests sent since (several may be on their way at once)."""

    limit: int | None = None  # X-RateLimit-Limit
    remaining: int | None = None  # X-RateLimit-Remaining of the latest answer, less the requests sent since
    reset_at: float = 0.0  # when the bucket refills (monotonic)
    blocked_until: float = 0.0  # a 429's Retry-After
    last_draft: float = -math.inf  # the latest draft request

    def spend(self, now: float | None = None) -> None:
        """A request (a draft's or a post's) is about to go."""
        now = time.monotonic() if now is None else now
        if self.remaining is None:
            return
        if now >= self.reset_at and self.limit is not None:  # refilled; the answer says when it refills next
            self.remaining, self.reset_at = self.limit, now + WINDOW
        self.remaining -= 1

    def note(self, status: int, headers: Mapping[str, str], body: Any, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with contextlib.suppress(TypeError, ValueError):
            if headers.get("X-RateLimit-Limit") is not None:
                self.limit = int(headers["X-RateLimit-Limit"])
            if headers.get("X-RateLimit-Remaining") is not None:
                self.remaining = int(headers["X-RateLimit-Remaining"])
            if headers.get("X-RateLimit-Reset-After") is not None:
                self.reset_at = now + float(headers["X-RateLimit-Reset-After"])
        if status == 429:
            retry = body.get("retry_after") if isinstance(body, dict) else None
            if not isinstance(retry, (int, float)):
                retry = _seconds(headers.get("Retry-After"))
            self.blocked_until = max(self.blocked_until, now + max(float(retry or 1.0), 0.0))
            self.remaining = 0
            self.reset_at = max(self.reset_at, self.blocked_until)

    def ready_at(self, now: float, *, gap: bool = True) -> float:
        """When a draft may send its next request on this webhook (without `gap`: a reply's first
        post, which waits only for the rate limit)."""
        at = max(self.blocked_until, self.last_draft + DRAFT_GAP if gap else 0.0)
        if self.remaining is not None and self.remaining <= RESERVE and now < self.reset_at:
            at = max(at, self.reset_at)
        return at


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


Controls = Sequence[Mapping[str, Any]]  # action rows of buttons, as Discord takes them


class DraftHooks(Protocol):
    """What drafts and `publish_over` ask of the Discord surface (`bot.surfaces.discord.provisional.DraftWire`)."""

    @property
    def store(self) -> HasDrafts:
        """The store's drafts: each provisional message recorded before it is posted."""
        ...

    def pace(self, group: Group) -> HookPace: ...

    def shown(self, message_id: str) -> str | None:
        """The content Discord last accepted for one of our messages (this process), if known."""
        ...

    def controls(self, group: Group, agent: Agent) -> Controls:
        """The buttons the agent's provisional messages carry now (action rows)."""
        ...

    def notes(self, run_id: int) -> str:
        """Lines shown under the run's reply's text now (a tool call's request for approval, its decision)."""
        ...

    async def draft_post(self, group: Group, agent: Agent, chunk: str, *, components: Controls = ()) -> str:
        """Post a provisional message (no mention allowed) with `components`; its id. DeliveryError."""
        ...

    async def draft_edit(self, group: Group, message_id: str, chunk: str, *, tagged: Sequence[str] = (),
                         final: bool = False, components: Controls | None = None) -> bool:
        """Edit one of our messages (its buttons too, unless None; a `final` edit removes them);
        False when it is gone (deleted, or its webhook). DeliveryError."""
        ...

    async def draft_delete(self, group: Group, message_id: str) -> None:
        """Delete one of our messages (gone already: done). DeliveryError for a passing failure."""
        ...

    async def settle_parts(self, group: Group, parts: Sequence[DraftPart]) -> list[DraftPart]:
        """`parts` with the ids of those whose post landed unrecorded found (and recorded); the
        ones that never landed are dropped. DeliveryError when the channel cannot be read."""
        ...

    def spawn(self, coro: Coroutine[object, object, None], name: str) -> asyncio.Task[None]: ...


class DiscordDraft:
    """Implements `bot.core.ports.Draft`: one run's reply shown in provisional messages."""

    def __init__(self, hooks: DraftHooks, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
                 text: Callable[[], str]) -> None:
        self.hooks = hooks
        self.group = group
        self.agent = agent
        self.run_id = run_id
        self.parts = list(parts)
        self.text = text
        self.posts = self.edits = 0
        self._wake = asyncio.Event()
        self._stopping = False
        self._flush = False  # stopping once what it shows is up to date (`finish`)
        self._failures = 0
        self._not_before = 0.0
        self._first_text: float | None = None  # when the draft first had text to show (monotonic)
        self._edited: dict[str, float] = {}  # message id -> when it was last edited
        self._controls: dict[str, Controls] = {}  # message id -> the buttons it carries (as sent)
        self._task = hooks.spawn(self._run(), f"draft-{group.id}-{run_id}")

    def grew(self) -> None:
        self._wake.set()

    @property
    def live(self) -> bool:
        """Whether it still shows updates (not stopped, not given up)."""
        return not self._stopping and not self._task.done()

    async def stop(self, *, wait: bool = True) -> None:
        self._stopping = True
        self._wake.set()
        if not wait:
            self._task.cancel()
        await asyncio.wait({self._task})  # (never raises the task's error; our own cancellation goes through)
        log.debug("group=%s run=%s: streamed in %d provisional post(s) and %d edit(s)", self.group.id, self.run_id,
                  self.posts, self.edits)

    async def finish(self) -> None:
        """Stop once the messages show the latest text and buttons (the pace allowing)."""
        self._flush = True
        await self.stop()

    async def discard(self) -> None:
        store = self.hooks.store
        try:
            parts = await store.drafts.draft_parts(self.run_id)
            gone = await remove_parts(self.hooks, self.group, parts)
            await store.drafts.drop_drafts(gone)
        except (DeliveryError, StoreError) as exc:  # the sweep takes them back later
            log.warning("group=%s run=%s: its provisional messages could not be taken back yet: %s", self.group.id,
                        self.run_id, exc)

    async def _run(self) -> None:
        try:
            if any(p.external_id is None for p in self.parts):
                self.parts = await self.hooks.settle_parts(self.group, self.parts)
            while self._failures < GIVE_UP_AFTER and (self._flush or not self._stopping):
                self._wake.clear()
                wait = await self._step()
                if self._stopping and (not self._flush or wait is None):
                    return
                if wait is None:
                    await self._wake.wait()
                elif wait > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):  # (not wait_for: on 3.11 it can lose a cancel)
                            await self._wake.wait()
        except (DeliveryError, StoreError) as exc:
            log.warning("group=%s run=%s: the reply is no longer shown as it is written (%s); it is posted whole "
                        "when done", self.group.id, self.run_id, exc)

    async def _step(self) -> float | None:
        """Send the next update the text needs, when the pace allows: None when the messages show
        the text, 0 after a request, else the seconds to wait for the next one."""
        visible, notes = self.text(), self.hooks.notes(self.run_id)
        if notes:
            visible = f"{visible}\n\n{notes}" if visible else notes
        controls = self.hooks.controls(self.group, self.agent)
        chunks = split_message(neutralize_mass_mentions(visible)) if visible else []
        if chunks and self._first_text is None:
            self._first_text = time.monotonic()
        for index, chunk in enumerate(chunks):
            if index < len(self.parts):
                message_id = self.parts[index].external_id or ""
                if self.hooks.shown(message_id) == chunk and self._controls.get(message_id) == controls:
                    continue
                wait = self._wait(self._edited.get(message_id, -math.inf) + EDIT_EVERY)
                if wait <= 0:
                    await self._edit(index, message_id, chunk, controls)
            else:  # the first post a moment after the first text (see Pace), at once when it asks for approval
                first = not (self.parts or self.posts or notes)
                wait = self._wait((self._first_text or 0.0) + FIRST_AFTER if first else 0.0, gap=bool(self.parts))
                if wait <= 0:
                    await self._post(index, chunk, controls)
            return max(wait, 0.0)
        return None

    def _wait(self, at: float, *, gap: bool = True) -> float:
        now = time.monotonic()
        return max(at, self._not_before, self.hooks.pace(self.group).ready_at(now, gap=gap)) - now

    async def _post(self, index: int, chunk: str, controls: Controls) -> None:
        store = self.hooks.store
        part = await store.drafts.add_draft(self.group.id, self.agent.id, self.run_id, index, self.agent.name, chunk)
        self.hooks.pace(self.group).last_draft = time.monotonic()
        try:
            message_id = await self.hooks.draft_post(self.group, self.agent, chunk, components=controls)
        except DeliveryError as exc:
            if exc.maybe_shown:  # it may have landed: the row's publish looks for it
                self._failures = GIVE_UP_AFTER
                log.warning("group=%s run=%s: a provisional post may not have landed (%s); the reply is posted "
                            "whole when done", self.group.id, self.run_id, exc)
                return
            await store.drafts.drop_drafts([part.id])
            self._failed(exc)
            return
        await store.drafts.draft_posted(part.id, message_id)
        self.parts.append(replace(part, external_id=message_id))
        self._controls[message_id] = controls
        self._edited[message_id] = time.monotonic()
        self.posts += 1
        self._failures = 0

    async def _edit(self, index: int, message_id: str, chunk: str, controls: Controls) -> None:
        self.hooks.pace(self.group).last_draft = time.monotonic()
        try:
            alive = await self.hooks.draft_edit(self.group, message_id, chunk, components=controls)
        except DeliveryError as exc:
            self._failed(exc)
            return
        self._edited[message_id] = time.monotonic()
        if alive:
            self._controls[message_id] = controls
            self.edits += 1
            self._failures = 0
            return
        # Deleted (by a moderator): it and the parts after it go; the next update posts it again, in order.
        log.info("group=%s run=%s: provisional message %s is gone; its text is posted again", self.group.id,
                 self.run_id, message_id)
        dropped, self.parts = self.parts[index:], self.parts[:index]
        for part in dropped[1:]:
            with contextlib.suppress(DeliveryError):
                await self.hooks.draft_delete(self.group, part.external_id or "")
        await self.hooks.store.drafts.drop_drafts(p.id for p in dropped)

    def _failed(self, exc: DeliveryError) -> None:
        if exc.problem:  # a lasting refusal (a permission, a moved webhook): the committed post deals with it
            self._failures = GIVE_UP_AFTER
            log.info("group=%s run=%s: not shown as it is written: %s", self.group.id, self.run_id, exc)
            return
        self._failures += 1
        self._not_before = time.monotonic() + max(exc.retry_after or 0.0, 0.5 * 2 ** self._failures)
        log.log(logging.WARNING if self._failures == GIVE_UP_AFTER else logging.DEBUG,
                "group=%s run=%s: a provisional update failed (%s, %d in a row)", self.group.id, self.run_id, exc,
                self._failures)


async def remove_parts(hooks: DraftHooks, group: Group, parts: Sequence[DraftPart]) -> list[int]:
    """Delete provisional messages; the ids of the parts that are gone (or never landed).
    DeliveryError when the channel cannot be read back."""
    settled = await hooks.settle_parts(group, parts)
    gone = {p.id for p in parts} - {p.id for p in settled}  # never landed (dropped by settle_parts)
    for part in settled:
        try:
            await hooks.draft_delete(group, part.external_id or "")
        except DeliveryError as exc:
            log.info("group=%s: provisional message %s not deleted yet: %s", group.id, part.external_id, exc)
            continue
        gone.add(part.id)
    return sorted(gone)


async def publish_over(hooks: DraftHooks, group: Group, message: Message, chunks: Sequence[str],
                       parts: Sequence[DraftPart], record: Recorder, pings: Callable[[str], bool]) -> Message:
    """Show the committed `message`'s chunks in its run's provisional messages (see the module
    docstring): edit them in order into the chunks, record each, delete the ones left over.
    Returns the row with the parts recorded now; the caller posts the chunks beyond them.
    `pings(chunk)`: the chunk notifies someone, so it is posted, not edited in."""
    parts = await hooks.settle_parts(group, parts)
    ids = [p.external_id or "" for p in parts]
    recorded = list(message.external_ids)
    ping_at = next((i for i, chunk in enumerate(chunks) if pings(chunk)), len(chunks))
    index = len(recorded)
    if recorded == ids[:index]:  # still in the provisional messages (not posting anew since a part was gone)
        while index < min(len(ids), len(chunks), ping_at):
            if not await hooks.draft_edit(group, ids[index], chunks[index], tagged=message.tags.user_ids, final=True):
                log.info("group=%s seq=%s: provisional message %s is gone; the rest of the reply is posted anew",
                         group.id, message.seq, ids[index])
                break
            await record(ids[index])
            recorded.append(ids[index])
            index += 1
    for message_id in ids:
        if message_id not in recorded:
            await hooks.draft_delete(group, message_id)
    return replace(message, external_ids=tuple(recorded))
