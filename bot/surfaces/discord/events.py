"""Ingest: people's messages in enabled groups become user rows, each once, in channel order.

Per channel, one feed (a queue and a worker task) takes the channel's live
messages in the order the gateway delivered them. After every (re)connect a
feed is behind: before it stores another live message it catches up, reading
the channel history after the group's watermark (the newest message id up to
which every message is stored or deliberately ignored) and storing what is
missing, oldest first, moving the watermark as it goes. Live messages move the
watermark too, but only while the feed is caught up since the last connect, so
the watermark never passes a message that is not stored, whatever happens in
other channels or to the bot's own posts. A message that cannot be stored (a
locked database) is retried until it is. When the history cannot be read (a
missing permission), live messages are still stored and the watermark waits.

The bot's own posts (as the bot, or through any webhook its application made)
are never re-ingested; other bots and webhooks are ignored unless the group
allows them. A Discord reply to an agent's message tags that agent.

The author's own hand (SPEC §1), taken through the same feed, so it follows the message it
changes: a person's edit (MESSAGE_UPDATE) changes their row's text, marked edited (the tags
stay as first parsed; an edit of anything else, e.g. the bot's own webhook posts, changes
nothing); a deletion (MESSAGE_DELETE, MESSAGE_DELETE_BULK) of any stored message makes its row
a tombstone, text and files purged. Discord does not say who deleted a message: only its author
and people with Manage Messages (operators) can, and the bot deletes only posts no row holds
(provisional messages, stray copies), so every deletion of a stored message is taken as the
author's or an operator's. Deleting one chunk of an agent's reply tombstones the whole row, and
the bot deletes its other chunks. Edits and deletions made while the bot was away get no event
later: catching up first reads the channel's last LOOK_BACK messages up to the watermark again
and takes the edits and deletions it finds among the rows they cover (older ones are not seen;
a message posted and edited while away is stored as it reads then).
Attachments are kept with the row (`bot.core.rules.attachments`): name, type, size, Discord's ids
and URL, an image's size; a text file's content is read now, an image's when a run is made.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import ParamSpec, Protocol, TypeVar

import aiohttp
import discord

from bot.core.errors import AlreadyStored, StoreError, StoreUnavailable
from bot.core.models import Agent, Group, SharedFile
from bot.core.ports import HasGroups, HasReading, HasRoster, HasThread, HealthStore
from bot.core.rules.attachments import FileUnavailable, take_in
from bot.core.runtime.worker import RetryPolicy, wait_for_store

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

INGESTED_TYPES = (discord.MessageType.default, discord.MessageType.reply)
BLIND_RETRY = 300.0  # seconds between tries to read a history the bot may not read
GIVE_UP_AFTER = 5  # unexpected (non-database) failures storing one message before it is skipped
LOOK_BACK = 100  # messages up to the watermark read again on catching up: edits and deletions made meanwhile


TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


def message_text(message: discord.Message) -> str:
    return message.content or ""


def shared_file(message: discord.Message, attachment: discord.Attachment) -> SharedFile:
    """What a row keeps of an attachment before its kind is decided (`take_in`)."""
    return SharedFile(
        name=attachment.filename, kind="other", size=attachment.size, content_type=attachment.content_type or "",
        url=attachment.url, attachment_id=str(attachment.id), message_id=str(message.id),
        channel_id=str(message.channel.id), width=attachment.width, height=attachment.height)


async def shared_files(message: discord.Message) -> list[SharedFile]:
    """The message's attachments as rows keep them, a text file's content read from the CDN now."""
    files = []
    for attachment in message.attachments:
        async def fetch(attachment: discord.Attachment = attachment) -> bytes:
            try:
                return await attachment.read()
            except discord.HTTPException as exc:
                raise FileUnavailable(f"Discord's CDN answered HTTP {exc.status}") from None
            except TRANSPORT_ERRORS as exc:
                raise FileUnavailable(f"the CDN could not be reached ({type(exc).__name__})") from None
        files.append(await take_in(shared_file(message, attachment), fetch))
    return files


def person_names(user: discord.abc.User) -> list[str]:
    """How people tag this person: their username and their display name."""
    return list(dict.fromkeys([user.name, user.display_name]))


def later(a: str | None, b: str | None) -> str | None:
    """The larger of two Discord ids (None is smallest)."""
    if a is None or b is None:
        return a or b
    return a if int(a) >= int(b) else b


class IngestStore(HasGroups, HasRoster, HasThread, HasReading, HealthStore, Protocol):
    """What ingest asks of the store: the groups (and their watermark), the roster (its names tag
    agents), the thread it appends to and edits, the people it remembers, whether the database takes writes."""


class Intake(Protocol):
    """What ingest asks of the engine (`bot.core.runtime.engine.Engine`): a background task, the waits
    between retries, a person's message posted, a group woken after a batch."""

    @property
    def retry(self) -> RetryPolicy: ...

    def spawn(self, coro: Coroutine[object, object, object], name: str) -> asyncio.Task[object]: ...

    def wake(self, group_id: int) -> None: ...

    async def post_user_message(
        self, group: Group, *, author_name: str, user_id: str | None, text: str, extra_agents: Iterable[Agent] = (),
        external_ids: Iterable[str] = (), wake: bool = True, attachments: Iterable[SharedFile] = (),
        reply_to: int | None = None,
    ) -> object: ...


@dataclass(frozen=True)
class Removed:
    """Messages deleted in a channel (MESSAGE_DELETE or MESSAGE_DELETE_BULK)."""

    message_ids: tuple[int, ...]

    @property
    def id(self) -> int:
        return self.message_ids[0]


Item = discord.Message | discord.RawMessageUpdateEvent | Removed


@dataclass
class Feed:
    channel_id: int
    queue: asyncio.Queue[Item | None] = field(default_factory=asyncio.Queue)
    behind: bool = True  # catch up before storing the next live message
    blind: str | None = None  # why the history cannot be read: live messages only, the watermark waits


class Ingest:
    """The client's message and reaction events, stored through the engine.

    `client` is the connected discord.py client (who the bot is, the channels' history),
    `engine` the engine (what ingest asks of it: `Intake`), `store` what it reads and writes
    itself (`IngestStore`: the groups' watermarks, edits and deletions, people's names), `own_post`
    tells the bot's own webhook posts (`Webhooks.is_own_post`), `serves` whether this process takes in a
    guild's channels (all of them, unless it runs some shards) and `take_down` deletes one of an
    agent's posts (`DraftWire.draft_delete`: the other chunks of a reply an operator deleted).
    Its parts: edits and deletions (`Revisions`) and the store calls retried (`StoreRetry`)."""

    def __init__(self, client: discord.Client, engine: Intake, store: IngestStore, *,
                 own_post: Callable[[Group, discord.Message], Awaitable[bool]],
                 serves: Callable[[str | None], bool],
                 take_down: Callable[[Group, str], Awaitable[None]] | None = None) -> None:
        self.client = client
        self.engine = engine
        self.store = store
        self.own_post = own_post
        self.serves = serves
        self.feeds: dict[int, Feed] = {}
        self._retrying = StoreRetry(engine, store)
        self.revisions = Revisions(store, self._retrying, take_down)
        self._known: dict[tuple[str, int], list[str]] = {}  # (guild, user) -> names already stored

    # entry points (called from the client's events) ------------------------------
    def push(self, message: discord.Message) -> None:
        """A live message, in gateway order (synchronous: the order is kept)."""
        if message.guild is not None:
            self._feed(message.channel.id).queue.put_nowait(message)

    def push_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """A message edited (after the live messages before it, in gateway order)."""
        if payload.guild_id is not None:
            self._feed(payload.channel_id).queue.put_nowait(payload)

    def push_removed(self, channel_id: int, guild_id: int | None, message_ids: Iterable[int]) -> None:
        """Messages deleted (after the live messages before them, in gateway order)."""
        ids = tuple(sorted(message_ids))
        if guild_id is not None and ids:
            self._feed(channel_id).queue.put_nowait(Removed(ids))

    async def resync(self) -> None:
        """After a (re)connect: every group's channel catches up before its next live message."""
        for channel_id in list(self.feeds):  # first, before any event of the new session is taken
            self.resync_channel(channel_id)
        for group in await self._retrying(self.store.groups.list_groups):
            if group.key.startswith("discord:") and group.channel_id is not None and self.serves(group.guild_id):
                feed = self._feed(int(group.channel_id))
                if feed.queue.empty():
                    feed.queue.put_nowait(None)

    def resync_channel(self, channel_id: int) -> None:
        """The channel catches up before its next live message (e.g. it just became a group:
        messages taken in before the group existed were not for us then)."""
        feed = self._feed(channel_id)
        feed.behind = True
        feed.queue.put_nowait(None)

    async def remember(self, guild_id: str, user: discord.abc.User) -> None:
        """`@name` tags this person from now on (stored once per change of their names)."""
        names = person_names(user)
        if self._known.get((guild_id, user.id)) != names:
            await self.store.reading.remember_person(guild_id, str(user.id), names)
            self._known[(guild_id, user.id)] = names

    async def on_reaction(self, payload: discord.RawReactionActionEvent) -> None:
        """A person's reaction on a message moves their read cursor through it."""
        if self.client.user is not None and payload.user_id == self.client.user.id:
            return
        found = await self._retrying(self.store.thread.find_message_by_external_id, str(payload.message_id))
        if found is not None:
            await self._retrying(self.store.reading.mark_seen, found.group_id, str(payload.user_id), found.seq)

    # the feed's worker ---------------------------------------------------------
    def _feed(self, channel_id: int) -> Feed:
        feed = self.feeds.get(channel_id)
        if feed is None:
            feed = self.feeds[channel_id] = Feed(channel_id)
            self.engine.spawn(self._run(feed), f"ingest-{channel_id}")
        return feed

    async def _run(self, feed: Feed) -> None:
        failures = 0
        while True:
            try:  # (asyncio.timeout, not wait_for: on Python 3.11 wait_for can lose the engine's cancel)
                async with asyncio.timeout(BLIND_RETRY if feed.blind else None):
                    item = await feed.queue.get()
            except TimeoutError:
                feed.behind, item = True, None
            while feed.behind:
                feed.behind = False
                try:
                    await self._catch_up(feed)
                    failures = 0
                except Exception as exc:  # Discord, the network or the database failed: live messages wait
                    feed.behind = True
                    failures += 1
                    expected = (discord.HTTPException, aiohttp.ClientError, OSError, asyncio.TimeoutError, StoreError)
                    delay = self.engine.retry.store_delay(failures, exc)
                    log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,
                            "channel %s: catching up failed (%s); retrying in %.1fs", feed.channel_id,
                            type(exc).__name__, delay, exc_info=not isinstance(exc, expected))
                    if isinstance(exc, StoreError):
                        await wait_for_store(self.store.health, exc, delay)
                    else:
                        await asyncio.sleep(delay)
            if item is not None:
                try:
                    if isinstance(item, discord.RawMessageUpdateEvent):
                        await self.revisions.edited(item)
                    elif isinstance(item, Removed):
                        await self.revisions.removed(item)
                    else:
                        await self._take(feed, item)
                except Exception:  # a bug must not stop the channel's feed
                    log.exception("channel %s: message %s could not be taken", feed.channel_id,
                                  item.message_id if isinstance(item, discord.RawMessageUpdateEvent) else item.id)

    async def _take(self, feed: Feed, message: discord.Message) -> None:
        group = await self._group(feed.channel_id)
        if group is None or not self._after_setup(group, message.id):
            return
        await self._store(group, message, wake=True)
        if not feed.behind and not feed.blind:
            await self._retrying(self.store.groups.advance_watermark, group.id, str(message.id))

    async def _catch_up(self, feed: Feed) -> None:
        """Store what the channel holds after the watermark, oldest first."""
        group = await self._group(feed.channel_id)
        if group is None:
            return
        after = later(group.watermark, group.setup_message_id)
        if after is None:
            return
        channel = self.client.get_channel(feed.channel_id) or self.client.get_partial_messageable(feed.channel_id)
        count = 0
        try:
            await self.revisions.look_back(group, channel, int(after))  # type: ignore[arg-type]  # as history below
            async for message in channel.history(  # type: ignore[union-attr]  # text channels, threads and partials all have it
                    limit=None, after=discord.Object(int(after)), oldest_first=True):
                count += await self._store(group, message, wake=False)
                await self._retrying(self.store.groups.advance_watermark, group.id, str(message.id))
            feed.blind = None
        except (discord.Forbidden, discord.NotFound) as exc:
            if feed.blind is None:
                log.error("group=%s: cannot read the channel history (%s %s); messages posted while the bot "
                          "was away are not imported until it can (Read Message History)",
                          group.id, exc.status, exc.code)
            feed.blind = f"{exc.status} {exc.code}"
        finally:
            if count:
                log.info("group=%s: caught up %d message(s) posted while the bot was away", group.id, count)
                self.engine.wake(group.id)  # the batch is routed together

    # storing one message ---------------------------------------------------------
    async def _store(self, group: Group, message: discord.Message, *, wake: bool) -> bool:
        """Store one Discord message as a user row, retrying until it is stored.
        False when it is not for us or already stored."""
        failures = 0
        while True:
            try:
                return await self._store_once(group, message, wake=wake)
            except AlreadyStored:
                return False
            except StoreError as exc:
                failures += 1
                delay = self.engine.retry.store_delay(failures, exc)
                log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,  # (the store logs it)
                        "group=%s message %s not stored yet (%s); retrying in %.1fs at the latest", group.id,
                        message.id, exc, delay)
                await wait_for_store(self.store.health, exc, delay)  # stored as soon as the database is back
            except Exception:
                failures += 1
                if failures >= GIVE_UP_AFTER:
                    log.exception("group=%s message %s could not be stored; skipped", group.id, message.id)
                    return False
                await asyncio.sleep(self.engine.retry.delay(failures))

    async def _store_once(self, group: Group, message: discord.Message, *, wake: bool) -> bool:
        if not await self.accepts(group, message):
            return False
        if await self.store.thread.find_message_by_external_id(str(message.id)) is not None:
            return False
        if group.guild_id is not None:
            await self.remember(group.guild_id, message.author)
        replied: list[Agent] = []
        reply_to: int | None = None
        if message.reference is not None and message.reference.message_id is not None:
            target = await self.store.thread.find_message_by_external_id(str(message.reference.message_id))
            if target is not None and target.group_id == group.id:  # (another group's row: neither)
                reply_to = target.seq  # a reply continues the work of the message it answers (SPEC §6)
                if target.author_type == "agent" and target.author_agent_id is not None:
                    replied.append(await self.store.roster.get_agent(target.author_agent_id))  # and tags its agent
        await self.engine.post_user_message(
            group, author_name=message.author.display_name, user_id=str(message.author.id),
            text=message_text(message)[:8000], extra_agents=replied, external_ids=[str(message.id)], wake=wake,
            attachments=await shared_files(message), reply_to=reply_to,
        )
        return True

    async def accepts(self, group: Group, message: discord.Message) -> bool:
        if message.type not in INGESTED_TYPES:
            return False
        if self.client.user is not None and message.author.id == self.client.user.id:
            return False
        if message.webhook_id is not None:
            return group.settings.allow_bots and not await self.own_post(group, message)
        if message.author.bot and not group.settings.allow_bots:
            return False
        return bool(message.content or message.attachments)

    # helpers -------------------------------------------------------------------
    async def _group(self, channel_id: int) -> Group | None:
        group = await self._retrying(self.store.groups.find_group, f"discord:{channel_id}")
        return group if group is not None and group.enabled else None

    @staticmethod
    def _after_setup(group: Group, message_id: int) -> bool:
        """A group's history starts at /roundtable setup."""
        return group.setup_message_id is None or message_id > int(group.setup_message_id)


class Revisions:
    """People's edits and deletions (the author's own hand, see the module docstring): an edit changes the
    person's row, a deletion makes a row a tombstone (and takes down the other chunks of an agent's reply),
    taken live from the feed or, for what was done while the bot was away, found on catching up
    (`look_back`). It logs as ingest."""

    def __init__(self, store: IngestStore, retrying: StoreRetry,
                 take_down: Callable[[Group, str], Awaitable[None]] | None) -> None:
        self.store = store
        self._retrying = retrying
        self.take_down = take_down

    async def edited(self, payload: discord.RawMessageUpdateEvent) -> None:
        """A person's edit changes their row's text (marked edited); the files they removed go with it."""
        message = payload.message
        if "content" not in payload.data or message.edited_at is None:
            return  # not the author's edit (an embed unfolded), or a partial update without the text
        found = await self._retrying(self.store.thread.find_message_by_external_id, str(message.id))
        if found is None or found.author_type != "user" or found.author_user_id != str(message.author.id):
            return  # not stored, or not a person's own row (our own webhook posts are edited as they stream)
        kept = [str(a.id) for a in message.attachments] if "attachments" in payload.data else None
        edited = await self._retrying(self.store.thread.edit_message, found.group_id, found.seq,
                                      message_text(message)[:8000], attachment_ids=kept)
        if edited is not None:
            log.info("group=%s seq=%s: edited by its author; later prompts read the new text",
                     found.group_id, found.seq)

    async def removed(self, removed: Removed) -> None:
        """Each stored message deleted in Discord becomes a tombstone (see the module docstring)."""
        for message_id in removed.message_ids:
            found = await self._retrying(self.store.thread.find_message_by_external_id, str(message_id))
            if found is None or found.deleted:
                continue
            if await self._retrying(self.store.thread.delete_message, found.group_id, found.seq) is None:
                continue
            log.info("group=%s seq=%s: deleted in Discord; its text and files are purged (a tombstone now)",
                     found.group_id, found.seq)
            rest = [i for i in found.external_ids if i.isdigit() and int(i) not in removed.message_ids]
            if found.author_type == "agent" and rest and self.take_down is not None:
                await self._take_down_rest(self.take_down, found.group_id, found.seq, rest)

    async def _take_down_rest(self, take_down: Callable[[Group, str], Awaitable[None]], group_id: int, seq: int,
                              message_ids: list[str]) -> None:
        """The other chunks of an agent's reply an operator deleted go too (best effort: one that stays
        is only a copy of what the store no longer holds, and an operator can delete it)."""
        group = await self._retrying(self.store.groups.get_group, group_id)
        for message_id in message_ids:
            try:
                await take_down(group, message_id)
            except Exception as exc:  # a refusal, the network: the chunk stays in the channel
                log.info("group=%s seq=%s: the reply's other message %s was not deleted (%s)", group_id, seq,
                         message_id, type(exc).__name__)

    async def look_back(self, group: Group, channel: discord.abc.Messageable, upto: int) -> None:
        """Edits and deletions made while the bot was away, among the rows of the channel's last LOOK_BACK
        messages up to `upto` (the watermark): a row one of whose messages is gone becomes a tombstone, a
        person's row whose message was edited takes its text. Only rows all of whose messages the read
        covers are judged."""
        if group.latest_seq == 0:
            return
        seen: dict[int, discord.Message] = {}
        async for message in channel.history(limit=LOOK_BACK, before=discord.Object(upto + 1)):
            seen[message.id] = message
        if not seen:
            return  # nothing to compare with (an unreadable or emptied channel is not taken as deletions)
        floor = min(seen) if len(seen) >= LOOK_BACK else 0
        rows = await self._retrying(self.store.thread.messages, group.id, after=max(0,
                                                                                    group.latest_seq - 3 * LOOK_BACK))
        for row in rows:
            ids = [int(i) for i in row.external_ids if i.isdigit()]
            if row.deleted or not ids or len(ids) != len(row.external_ids) or min(ids) < floor or max(ids) > upto:
                continue
            if any(i not in seen for i in ids):
                if await self._retrying(self.store.thread.delete_message, group.id, row.seq) is not None:
                    log.info("group=%s seq=%s: deleted in Discord while the bot was away; a tombstone now",
                             group.id, row.seq)
                continue
            message = seen[ids[0]]
            if (row.author_type == "user" and message.edited_at is not None
                    and row.author_user_id == str(message.author.id)):
                edited = await self._retrying(self.store.thread.edit_message, group.id, row.seq,
                                              message_text(message)[:8000],
                                              attachment_ids=[str(a.id) for a in message.attachments])
                if edited is not None:
                    log.info("group=%s seq=%s: edited in Discord while the bot was away", group.id, row.seq)


class StoreRetry:
    """Ingest's store calls, each retried while the database takes no writes or cannot be reached, with the
    engine's waits (`engine.retry`), as soon as the database is back (ingest never drops)."""

    def __init__(self, engine: Intake, store: HealthStore) -> None:
        self.engine = engine
        self.store = store

    async def __call__(self, call: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """`await call(*args)`, retried while the database is locked."""
        failures = 0
        while True:
            try:
                return await call(*args, **kwargs)
            except StoreError as exc:
                failures += 1
                delay = self.engine.retry.store_delay(failures, exc)
                log.log(logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING,  # (the store logs it)
                        "%s failed (%s); retrying in %.1fs at the latest", getattr(call, "__name__", "a store call"),
                        exc, delay)
                await wait_for_store(self.store.health, exc, delay)
