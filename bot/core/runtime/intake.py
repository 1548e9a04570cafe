"""A person's message comes in: committed (tags parsed now, once), echoed, its episode told.

`Intake.post` is the first room of a message's path (docs/layout.md): the surface hands it a
person's message; it is stored with its tags and token count (retried while the database
cannot take it: SPEC §4, ingest never drops), echoed on the surface (a courtesy: a row that
did not come from the surface itself), and a new episode is told to the surface. The engine
then wakes the group's runtime, whose dispatcher routes the row.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import DeliveryError, StoreBusy, StoreError, StoreUnavailable, StoreUnwritable
from bot.core.models import Agent, Group, Message, NewMessage, SharedFile
from bot.core.ports import HasGroups, HasReading, HasRoster, HasThread, HealthStore, Surface, TokenCounter
from bot.core.rules.attachments import counted_text, images_tokens, unused_files, unused_line
from bot.core.rules.prompts import thread_line
from bot.core.rules.tags import parse_tags, with_agents
from bot.core.runtime.worker import RetryPolicy, tell_episode, wait_for_store

log = logging.getLogger(__name__)


async def _nothing(_external_id: str) -> None:
    return None


class IntakeStore(HasGroups, HasRoster, HasReading, HasThread, HealthStore, Protocol):
    """What the intake reads and writes: the roster and people (for tags), the group's thread."""


@dataclass(frozen=True)
class IntakeDeps:
    """What the intake works with (the engine composes it)."""

    store: IntakeStore
    surface: Surface
    counter: TokenCounter
    retry: RetryPolicy
    notice: Callable[[str], NewMessage]  # a notice from the bot, ready to append
    show: Callable[[int], None]  # rows were committed in the group: show them (when it is run here)


class Intake:
    def __init__(self, deps: IntakeDeps) -> None:
        self.deps = deps

    async def post(
        self, group: Group, *, author_name: str, user_id: str | None, text: str, extra_agents: Iterable[Agent] = (),
        external_ids: Iterable[str] = (), waiting: Callable[[str], None] | None = None,
        attachments: Iterable[SharedFile] = (), reply_to: int | None = None,
    ) -> Message:
        """Commit a person's message (see `Engine.post_user_message`), echo it, tell its episode."""
        deps = self.deps
        files = tuple(attachments)
        settings = group.settings
        failures = 0
        while True:
            try:
                roster = await deps.store.roster.list_agents(group.id)
                people = await deps.store.reading.people(group.people_scope)
                tags = with_agents(parse_tags(text, roster, people=people), [a for a in extra_agents if a.enabled])
                new = NewMessage(
                    author_type="user",
                    author_name=author_name,
                    text=text,
                    tags=tags,
                    author_user_id=user_id,
                    external_ids=tuple(external_ids),
                    token_count=deps.counter.count(
                        thread_line(author_name, counted_text(text, files, settings.max_text)))
                    + images_tokens(files, settings.max_images),
                    attachments=files,
                    reply_to_seq=reply_to,
                )
                message, episode = await deps.store.thread.append_user_message(group.id, new)
                break
            except (StoreBusy, StoreUnwritable, StoreUnavailable) as exc:
                failures += 1
                delay = deps.retry.store_delay(failures, exc)  # the store logs an outage; tried once it is over
                log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,
                        "group=%s: a message from %s is not stored yet (%s); trying again in %.1fs at the latest",
                        group.id, author_name, exc, delay)
                if failures == 1 and waiting is not None:
                    waiting(exc.public if isinstance(exc, StoreUnwritable) else str(exc))
                await wait_for_store(deps.store.health, exc, delay)
        try:
            await deps.surface.publish(group, message, None, record=_nothing)
        except (StoreError, DeliveryError) as exc:  # expected (the database or the surface away): one line
            log.warning("group=%s seq=%s: could not echo the message: %s", group.id, message.seq, exc)
        except Exception:  # a person's own row is stored; echoing it is only a courtesy
            log.warning("group=%s seq=%s: could not echo the message", group.id, message.seq, exc_info=True)
        await tell_episode(deps.surface, group, episode)
        unused = unused_files(message.attachments, settings.max_images)
        if unused:  # what agents cannot use is told to the person too, not only to the model (SPEC §8)
            try:
                await deps.store.thread.append_system_message(group.id, deps.notice(unused_line(author_name, unused)))
                deps.show(group.id)
            except StoreError as exc:  # the message is stored; the line is a courtesy
                log.warning("group=%s seq=%s: could not tell %s what agents cannot use: %s", group.id,
                            message.seq, author_name, exc)
        return message
