"""Who answers a Discord interaction, and in time.

Discord sends every interaction to every session of a shard, so two processes on one
database (README's hot fail-over) both receive each command, autocomplete, click and form:
the process whose store claims the interaction's id first handles it, and the other stays
silent: no answer, no deferral, no error (`Interactions.take`). The process that runs the
channel's group gets a head start: only it can post an answer there (`/ask post:true`),
and its engine hears of a change at once.

Discord waits 3 s for an interaction's first answer. A command or form not answered within
`ANSWER_WITHIN` (the claim's wait included) is deferred ("thinking…", only the person sees
it) and its answer follows. Every first answer goes through one lock per interaction
(`first_answer`), so a deferral and an answer never cross. When both processes wait on a
busy database, both defer and Discord takes one: the other is told 40060 and answers, if
it wins the claim, with follow-ups.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import discord

from bot.core.errors import StoreError, StoreUnavailable
from bot.core.ports import HasGroups, HasInteractions, HasLeases

log = logging.getLogger(__name__)

ANSWER_WITHIN = 2.0  # seconds: Discord waits 3 s for the first answer (a deferral counts)
LEADER_FIRST = 0.3  # seconds a process that does not run the channel's group waits before it claims
ALREADY_ACKNOWLEDGED = 40060  # Discord's code: the interaction's first answer was given (by another process)
FIRST_ANSWER, ACKNOWLEDGED, LATE = "roundtable.first_answer", "roundtable.acknowledged", "roundtable.late"  # extras


class ClaimStore(HasInteractions, HasGroups, HasLeases, Protocol):
    """What claiming an interaction asks of the store: the claim, and whether another process runs
    the channel's group (then it answers first)."""


class Interactions:
    """Claims interactions for this process and defers the slow ones."""

    def __init__(self, store: ClaimStore, group_key: Callable[[int], str]) -> None:
        self.store = store
        self.group_key = group_key  # a channel's group key
        self._late: set[asyncio.Task[None]] = set()

    async def take(self, interaction: discord.Interaction) -> bool:
        """Whether this process handles the interaction: the first process whose store claims
        its id. From here on a command or form not answered within ANSWER_WITHIN is deferred."""
        if interaction.type in (discord.InteractionType.application_command, discord.InteractionType.modal_submit):
            self._defer_when_late(interaction)
        try:
            if await self._run_elsewhere(interaction.channel_id):
                await asyncio.sleep(LEADER_FIRST)  # the process that runs the group claims first
            won = await self.store.interactions.claim_interaction(str(interaction.id))
        except StoreError as exc:  # better a second answer than none
            log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,  # (the store logs it)
                    "could not claim interaction %s (%s); handling it here", interaction.id, exc)
            won = True
        if not won:
            finish(interaction)
            log.debug("interaction %s is handled by another process", interaction.id)
        return won

    async def _run_elsewhere(self, channel_id: int | None) -> bool:
        """Whether the channel is a group that another process runs (holds its lease)."""
        group = await self.store.groups.find_group(self.group_key(channel_id)) if channel_id is not None else None
        return group is not None and await self.store.leases.leased_elsewhere(group.id)

    def _defer_when_late(self, interaction: discord.Interaction) -> None:
        async def late() -> None:
            await asyncio.sleep(ANSWER_WITHIN)
            await defer(interaction)

        task = asyncio.get_running_loop().create_task(late(), name=f"defer {interaction.id}")
        interaction.extras[LATE] = task
        self._late.add(task)
        task.add_done_callback(self._deferred)

    def _deferred(self, task: asyncio.Task[None]) -> None:
        self._late.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not defer a slow command: %s", task.exception())


def finish(interaction: discord.Interaction) -> None:
    """The interaction is handled: no late deferral any more."""
    late = interaction.extras.pop(LATE, None)
    if late is not None:
        late.cancel()


def answered(interaction: discord.Interaction) -> bool:
    """Whether the interaction's first answer is given: by this process, or a deferral by another."""
    return interaction.response.is_done() or bool(interaction.extras.get(ACKNOWLEDGED))


@contextlib.asynccontextmanager
async def first_answer(interaction: discord.Interaction) -> AsyncIterator[bool]:
    """Hold the interaction's first answer while it is given (a late deferral waits meanwhile);
    yields whether it is still to be given."""
    lock = interaction.extras.setdefault(FIRST_ANSWER, asyncio.Lock())
    async with lock:
        yield not answered(interaction)


async def defer(interaction: discord.Interaction) -> None:
    """"thinking…" (only the person sees it), unless the first answer is given; the next
    answer replaces it."""
    async with first_answer(interaction) as due:
        if not due:
            return
        try:
            await interaction.response.defer(ephemeral=True, thinking=True)
        except discord.HTTPException as exc:
            if exc.code != ALREADY_ACKNOWLEDGED:
                raise
            interaction.extras[ACKNOWLEDGED] = True  # the other process's deferral, while the claims waited


async def send(interaction: discord.Interaction, part: dict[str, Any]) -> None:
    """An ephemeral answer: the first one, or a follow-up once that is given."""
    async with first_answer(interaction) as due:
        if due:
            try:
                await interaction.response.send_message(ephemeral=True, **part)
                return
            except discord.HTTPException as exc:
                if exc.code != ALREADY_ACKNOWLEDGED:
                    raise
                interaction.extras[ACKNOWLEDGED] = True  # deferred by the other process while the claims waited
    await interaction.followup.send(ephemeral=True, **part)
