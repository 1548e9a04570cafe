"""Posting to Discord: agents through the channel's webhook, notices as the bot.

One webhook per group channel, created by `/roundtable setup`, stored, reused;
threads post through the parent's webhook with `thread_id`. Every post sets
`allowed_mentions` explicitly: never @everyone, @here or roles; only the
people the agent tagged. Unknown Webhook (10015) -> recreate once and resend;
likewise a post that lands in another channel (an admin moved the webhook),
after deleting it there through the webhook.

Exactly once. A reply is split into chunks; each chunk's id is recorded as
soon as Discord answers. Webhook executes go out once per attempt (our own
request, not discord.py's, which repeats a 5xx by itself and could post the
chunk twice); notices carry an enforced nonce. When an attempt may have
reached the channel without its id being recorded (a crash, a reset
connection, a 5xx), `publish(resume=True)` first reads the channel after the
last recorded id and records the chunks that did arrive, then sends the rest.
A webhook execute has no nonce, and one that timed out (or got a gateway's
502/504) may still be committed later: the channel is read back again after
growing waits (LATE_READS) before it is sent again, and after it was sent
again a late copy is looked for for a while (LATE_CHECKS) and deleted through
the webhook, so one copy stays, the one the row records.

Every transport failure becomes a `DeliveryError` here: a passing fault (429,
5xx, network) is retried by the engine's outbox; a lasting refusal (a missing
permission) carries a `problem` text that names what to fix.

Streamed replies (the group's `stream` setting) are shown in provisional messages
while they are written and finished by the committed row's publish, in the same
messages: `bot.surfaces.discord.drafts`. This surface gives those the webhook's
requests and its rate-limit state (shared by posts and drafts, per webhook).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import aiohttp
import discord
from discord.http import Route

from bot.core.errors import DeliveryError, UserFacingError
from bot.core.models import Agent, Approval, ApprovalAsk, DraftPart, Episode, Group, Message, SharedFile
from bot.core.ports import Draft, HasDrafts, HasThread, HasWebhooks, Recorder
from bot.core.rules.attachments import FileUnavailable
from bot.core.rules.secrets import MASK
from bot.core.rules.stop import strip_terminate
from bot.surfaces.discord.approvals import Waiting, buttons, decision_buttons, outcome_text, request_text
from bot.surfaces.discord.controls import action_row, stop_button
from bot.surfaces.discord.drafts import (
    DRAFT_TIMEOUT,
    Controls,
    DiscordDraft,
    HookPace,
    publish_over,
    remove_parts,
)
from bot.surfaces.discord.render import mention_policy, neutralize_mass_mentions, split_message

log = logging.getLogger(__name__)

WEBHOOK_NAME = "Roundtable"
UNKNOWN_WEBHOOK = 10015
UNKNOWN_CHANNEL = 10003
UNKNOWN_MESSAGE = 10008
NO_MENTIONS = {"parse": [], "users": [], "replied_user": False}
SHOWN_KEPT = 2000  # our messages whose latest content is remembered (to skip an edit that changes nothing)
SCAN_LIMIT = 500  # channel messages read back when looking for chunks that arrived unrecorded
POST_TIMEOUT = 30.0
# A webhook execute that timed out (or got a gateway's 502/504) may still be committed by Discord
# later. Before posting it again the channel is read back after each of these waits; after posting
# it again it is looked for at these times (seconds after), and a late copy found is deleted: often
# early, so a copy that lands in the first minute is gone within 20 s of landing.
LATE_READS = (2.0, 10.0)
LATE_CHECKS = (5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0)
FRESH_MARGIN = 3600.0  # refresh a signed picture URL this long before it expires
TYPING_EVERY = 8.0  # Discord shows typing for 10 s per request
TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
EPISODE_REACTIONS = {"running": "⏳", "terminated": "✅", "max_turns": "🛑", "stopped": "⏹️",
                     "quiet": "💬", "stalled": "🔁", "superseded": None}


def allowed_mentions(text: str, tagged_user_ids: tuple[str, ...]) -> dict[str, Any]:
    """Discord's allowed_mentions for a post: only the tagged people it mentions, nobody else."""
    return {"parse": [], "users": list(mention_policy(text, tagged_user_ids).users), "replied_user": False}


def signed_expiry(url: str) -> float | None:
    """When one of Discord's signed attachment URLs expires (its `ex` parameter); None when unsigned."""
    ex = parse_qs(urlsplit(url).query).get("ex")
    try:
        return float(int(ex[0], 16)) if ex else None
    except ValueError:
        return None


def rendered(message: Message) -> str:
    """A row's text as Discord shows it: TERMINATE hidden, @everyone/@here defused."""
    text = strip_terminate(message.text) if message.author_type == "agent" else message.text
    return neutralize_mass_mentions(text)


class _UnknownWebhook(Exception):
    pass


class _MaybeLater(DeliveryError):
    """A post whose request Discord may still commit (it timed out, or a gateway gave up on it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, maybe_shown=True)


class _MovedWebhook(Exception):
    """The post landed in another channel: an admin moved the webhook (its copy there is deleted)."""


class SurfaceStore(HasThread, HasDrafts, HasWebhooks, Protocol):
    """What the Discord surface asks of the store: the rows it shows (and finds again after a crash),
    the provisional messages of replies being written, and each channel's webhook."""


class DiscordSurface:
    """Implements the engine's Surface over a connected discord.py client."""

    def __init__(self, store: SurfaceStore) -> None:
        self.store = store
        self.client: discord.Client | None = None
        self._webhooks: dict[str, tuple[str, str]] = {}  # channel id -> (webhook id, token)
        self._session: aiohttp.ClientSession | None = None
        self._not_before: dict[str, float] = {}  # webhook id -> when its rate-limit bucket refills
        self._tasks: set[asyncio.Task[None]] = set()  # reactions in flight
        self._closed = False
        self._fresh: dict[str, str] = {}  # a stored signed URL -> its latest refreshed copy
        self._makers: dict[str, bool] = {}  # webhook id -> whether this bot made it
        self._late: dict[tuple[int, int], tuple[str, str]] = {}  # (group, seq) -> the hook of a post that may land late
        self._paces: dict[str, HookPace] = {}  # webhook channel -> its rate limit as drafts see it
        self._shown: dict[str, str] = {}  # message id -> the content Discord last accepted for it
        self._buttoned: set[str] = set()  # our messages that may carry buttons (a final edit removes them)
        self._drafts: dict[tuple[int, int], DiscordDraft] = {}  # (group, agent) -> its run's draft, while it shows
        self._asked: dict[int, DiscordDraft] = {}  # run id -> the draft an approval began (its reply did not stream)
        self._asking: dict[int, dict[str, str]] = {}  # run id -> approval key -> its line (request, then decision)
        self.approvals = Waiting()  # tool calls held for a press of Approve or Deny

    @property
    def bot(self) -> discord.Client:
        if self.client is None:
            raise DeliveryError("the Discord client is not connected yet")
        return self.client

    def channel(self, channel_id: str) -> discord.abc.Messageable:
        channel = self.bot.get_channel(int(channel_id))
        return channel if channel is not None else self.bot.get_partial_messageable(int(channel_id))  # type: ignore[return-value]  # a partial messageable sends and reads history too

    def where(self, group: Group) -> str:
        channel = self.bot.get_channel(int(group.channel_id or 0))
        return f"#{channel.name}" if channel is not None and hasattr(channel, "name") else "this channel"

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fresh_url(self, url: str) -> str:
        """`url`, or a fresh copy when it is one of Discord's signed attachment URLs that has
        expired or soon will (they last about a day: `?ex=<hex unix time>`)."""
        if signed_expiry(url) is None:
            return url
        best = self._fresh.get(url, url)
        if (signed_expiry(best) or 0) > time.time() + FRESH_MARGIN:
            return best
        try:
            data = await self.bot.http.request(Route("POST", "/attachments/refresh-urls"),
                                               json={"attachment_urls": [url]})
            self._fresh[url] = str(data["refreshed_urls"][0]["refreshed"])
        except (discord.HTTPException, *TRANSPORT_ERRORS, KeyError, IndexError, TypeError) as exc:
            log.warning("could not refresh an attachment's URL: %s", type(exc).__name__)
        return self._fresh.get(url, url)

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        """A shared file's bytes from Discord's CDN, its signed URL refreshed first when it has
        expired or soon will (a run made hours after the message, or after a restart)."""
        if not file.url:
            raise FileUnavailable("no URL was stored")
        try:
            if MASK in file.url:  # a secret in its name was masked out of the stored URL: ask for its message
                return await self.bot.http.get_from_cdn(await self._url_by_ids(file))
            return await self.bot.http.get_from_cdn(await self.fresh_url(file.url))
        except discord.HTTPException as exc:
            raise FileUnavailable(f"Discord's CDN answered HTTP {exc.status}") from None
        except TRANSPORT_ERRORS as exc:
            raise FileUnavailable(f"the CDN could not be reached ({type(exc).__name__})") from None

    async def _url_by_ids(self, file: SharedFile) -> str:
        """The current URL of a shared file, read from its message (by the ids its row keeps)."""
        if not (file.channel_id and file.message_id and file.attachment_id):
            raise FileUnavailable("its URL was masked and its message is not known")
        try:
            message = await self.channel(file.channel_id).fetch_message(int(file.message_id))
        except discord.NotFound:
            raise FileUnavailable("its message was deleted") from None
        for attachment in message.attachments:
            if str(attachment.id) == file.attachment_id:
                return attachment.url
        raise FileUnavailable("its message no longer has it")

    # webhooks ------------------------------------------------------------
    async def create_webhook(self, channel_id: str) -> tuple[str, str]:
        """Create and store the webhook of a channel (a thread's parent). UserFacingError when not allowed."""
        try:
            channel = self.bot.get_channel(int(channel_id)) or await self.bot.fetch_channel(int(channel_id))
        except (discord.NotFound, discord.Forbidden):
            raise UserFacingError("I can't see this channel any more (it was deleted, or my access was "
                                  "removed); run /roundtable setup in a channel I can post in.") from None
        if not isinstance(channel, discord.TextChannel):
            raise UserFacingError("Roundtable works in text channels and their threads.")
        try:
            webhook = await channel.create_webhook(name=WEBHOOK_NAME, reason="Roundtable group chat")
        except discord.Forbidden:
            raise UserFacingError(
                f"I need the Manage Webhooks permission in #{channel.name} to post as agents; "
                "grant it to my role and run /roundtable setup again.") from None
        except discord.HTTPException as exc:
            raise UserFacingError(f"Discord refused to create the webhook ({exc.status}); try again.") from None
        if webhook.token is None:
            raise UserFacingError("Discord created the webhook without its token; run /roundtable setup again.")
        await self.store.webhooks.save_webhook(channel_id, str(webhook.id), webhook.token)
        self._webhooks[channel_id] = (str(webhook.id), webhook.token)
        return self._webhooks[channel_id]

    async def webhook(self, channel_id: str) -> tuple[str, str]:
        cached = self._webhooks.get(channel_id)
        if cached is not None:
            return cached
        stored = await self.store.webhooks.get_webhook(channel_id)
        if stored is None:
            return await self.create_webhook(channel_id)
        self._webhooks[channel_id] = stored
        return stored

    async def is_own_post(self, group: Group, message: discord.Message) -> bool:
        """Whether a webhook message came from this bot: through the group's webhook, or any
        webhook this bot's application made (another process's, one made before the group's
        current one). Such a message is never a person's."""
        if message.webhook_id is None:
            return False
        if self.client is not None and message.application_id is not None \
                and message.application_id == self.client.application_id:
            return True
        hook_id = str(message.webhook_id)
        if hook_id in {cached for cached, _ in self._webhooks.values()}:
            return True
        stored = await self.store.webhooks.get_webhook(group.parent_channel_id or group.channel_id or "")
        if stored is not None and stored[0] == hook_id:
            return True
        if hook_id not in self._makers:
            maker = await self._maker(hook_id)
            if maker is None:
                return False  # unknown for now: asked again next time
            self._makers[hook_id] = maker
        return self._makers[hook_id]

    async def _maker(self, hook_id: str) -> bool | None:
        """Whether this bot made the webhook (Discord's `application_id` or creator); None when
        Discord cannot say now."""
        try:
            data = await self.bot.http.request(Route("GET", "/webhooks/{webhook_id}", webhook_id=int(hook_id)))
        except discord.NotFound:
            return False
        except (discord.HTTPException, *TRANSPORT_ERRORS) as exc:
            log.warning("could not look up who made webhook %s: %s", hook_id, type(exc).__name__)
            return None
        ours = {str(i) for i in (self.bot.application_id, self.bot.user and self.bot.user.id) if i}
        creator = data.get("user") or {}
        return bool(ours & {str(data.get("application_id")), str(creator.get("id"))})

    # Surface -------------------------------------------------------------
    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        if message.author_type == "user":
            return  # people's messages are already in the channel
        chunks = split_message(rendered(message))
        if message.author_type == "agent" and message.source_run_id is not None:
            await self._asked_done(message.source_run_id)
            parts = await self.store.drafts.draft_parts(message.source_run_id)
            if parts:  # it was streamed: its provisional messages become its chunks
                tagged = message.tags.user_ids
                message = await publish_over(self, group, message, chunks, parts, record,
                                             lambda chunk: bool(allowed_mentions(chunk, tagged)["users"]))
        done = len(message.external_ids)
        if done >= len(chunks):
            return
        key = (group.id, message.seq)
        if resume:
            for external_id in await self._arrived_settled(group, message, agent, chunks[done:]):
                log.info("group=%s seq=%s: chunk %d had reached the channel already", group.id, message.seq, done + 1)
                self._late.pop(key, None)
                await record(external_id)
                done += 1
        for index in range(done, len(chunks)):
            if message.author_type == "agent":
                external_id = await self._post_as_agent(group, message, agent, chunks[index])
            else:
                external_id = await self._post_as_bot(group, message, index, chunks[index])
            await record(external_id)
            hook = self._late.pop(key, None)
            if hook is not None:  # posted again while the first request may still land
                self._background(self._drop_late_copy(group, message, chunks[index], external_id, hook),
                                 f"late-copy-{group.id}-{message.seq}")

    async def alert(self, group: Group, text: str) -> None:
        """A plain message from the bot (outside the thread and its queue); best effort."""
        try:
            await self.bot.http.request(
                Route("POST", "/channels/{channel_id}/messages", channel_id=int(group.channel_id or 0)),
                json={"content": text[:2000], "allowed_mentions": {"parse": []}},
            )
        except (discord.HTTPException, *TRANSPORT_ERRORS) as exc:
            log.warning("group=%s could not post the alert: %s", group.id, type(exc).__name__)

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        """Typing in the channel while the agent works, sent from a task of its own:
        a slow or failing typing endpoint never delays the model call."""
        task = asyncio.create_task(self._typing(group), name=f"typing-{group.id}")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _typing(self, group: Group) -> None:
        channel = self.channel(group.channel_id or "0")
        while True:
            try:
                async with asyncio.timeout(TYPING_EVERY):
                    await channel.typing()
            except Exception as exc:  # cosmetic: nothing about typing may fail the run
                log.debug("group=%s typing indicator failed: %s", group.id, type(exc).__name__)
            await asyncio.sleep(TYPING_EVERY)

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        """The episode's state as a reaction on its task, set in the background: a slow
        reactions endpoint never holds up ingest or the next run."""
        task = await self.store.thread.get_message(group.id, episode.task_seq)
        if task.external_ids:
            self._background(self._react(group, int(task.external_ids[0]), episode), f"react-{group.id}")

    async def _react(self, group: Group, message_id: int, episode: Episode) -> None:
        try:
            target = self.channel(group.channel_id or "0").get_partial_message(message_id)  # type: ignore[attr-defined]  # text channels, threads and partials all have it
            errors = (discord.HTTPException, *TRANSPORT_ERRORS)
            if not episode.running:
                with contextlib.suppress(*errors):
                    await target.remove_reaction(EPISODE_REACTIONS["running"], self.bot.user)
            emoji = EPISODE_REACTIONS.get(episode.status)
            if emoji:
                with contextlib.suppress(*errors):
                    await target.add_reaction(emoji)
        except Exception as exc:
            if not self.shutting_down:
                raise  # unexpected: logged with its traceback
            log.debug("group=%s: episode %s's reaction not set: shutting down (%s)", group.id, episode.id,
                      str(exc) or type(exc).__name__)

    @property
    def shutting_down(self) -> bool:
        """This surface or its client is closed or closing ("Session is closed" is expected then)."""
        return self._closed or self.client is None or self.client.is_closed()

    def _background(self, coro: Coroutine[object, object, None], name: str) -> None:
        self.spawn(coro, name)

    def spawn(self, coro: Coroutine[object, object, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    # posting -------------------------------------------------------------
    async def _post_as_agent(self, group: Group, message: Message, agent: Agent | None, chunk: str) -> str:
        hook_channel = group.parent_channel_id or group.channel_id or ""
        payload: dict[str, Any] = {
            "content": chunk,
            "username": message.author_name,  # the row's snapshot: a later rename never changes an old row
            "allowed_mentions": allowed_mentions(chunk, message.tags.user_ids),
        }
        if agent is not None and agent.avatar_url:
            payload["avatar_url"] = await self.fresh_url(agent.avatar_url)
        params = {"wait": "true"}
        if group.parent_channel_id and group.channel_id:
            params["thread_id"] = group.channel_id
        for attempt in (1, 2):
            try:
                hook_id, token = await self.webhook(hook_channel)
            except UserFacingError as exc:  # the webhook cannot be made: a missing permission
                raise DeliveryError(str(exc), problem=str(exc)) from None
            try:
                return await self._execute(group, hook_id, token, payload, params)
            except _MaybeLater:
                self._late[(group.id, message.seq)] = (hook_id, token)
                raise
            except _UnknownWebhook:
                if attempt == 2:
                    raise DeliveryError("Discord does not know the group's new webhook either") from None
                log.warning("group=%s webhook was deleted; creating a new one", group.id)
            except _MovedWebhook:
                if attempt == 2:
                    where = self.where(group)
                    raise DeliveryError("the group's new webhook posts in another channel too", problem=(
                        f"My webhook's posts land outside {where}; check the webhooks in Server Settings > "
                        f"Integrations and give my role Manage Webhooks in {where}.")) from None
                log.warning("group=%s webhook %s was moved to another channel; creating a new one", group.id, hook_id)
            self._webhooks.pop(hook_channel, None)
            await self.store.webhooks.forget_webhook(hook_channel)
        raise AssertionError("unreachable")

    async def _execute(self, group: Group, hook_id: str, token: str, payload: dict[str, Any],
                       params: dict[str, str]) -> str:
        """One webhook execute (no retries of its own): the new message's id."""
        if self._closed:
            raise DeliveryError("the bot is shutting down")
        session = self._http()
        wait = self._not_before.get(hook_id, 0.0) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(min(wait, 60.0))
        url = f"{Route.BASE}/webhooks/{hook_id}/{token}"
        self.pace(group).spend()
        try:
            async with session.post(url, json=payload, params=params,
                                          timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT)) as resp:
                body = await resp.json(content_type=None) if resp.content_length != 0 else None
                status, headers = resp.status, resp.headers
        except TimeoutError:  # Discord may be committing it still
            raise _MaybeLater(f"the webhook post got no answer in {POST_TIMEOUT:.0f}s") from None
        except (*TRANSPORT_ERRORS, ValueError) as exc:
            raise DeliveryError(f"the webhook post did not complete ({type(exc).__name__})", maybe_shown=True) from None
        self.pace(group).note(status, headers, body)
        if headers.get("X-RateLimit-Remaining") == "0":
            with contextlib.suppress(ValueError):
                self._not_before[hook_id] = time.monotonic() + float(headers.get("X-RateLimit-Reset-After", "1"))
        if 200 <= status < 300 and isinstance(body, dict) and "id" in body:
            landed = str(body.get("channel_id") or group.channel_id)
            if group.channel_id and landed != group.channel_id:  # (a thread's posts are in the thread)
                await self._delete_post(group, url, str(body["id"]), landed)
                raise _MovedWebhook()
            return str(body["id"])
        code = body.get("code") if isinstance(body, dict) else None
        if status in (502, 504):  # a gateway gave up; the server behind it may commit it still
            raise _MaybeLater(f"Discord answered {status}")
        if status == 404 and code == UNKNOWN_WEBHOOK:
            raise _UnknownWebhook()
        raise self._refusal(group, status, code, body, need="Manage Webhooks and Send Messages")

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers={"User-Agent": "DiscordBot (roundtable, 0.1)"})
        return self._session

    async def _delete_post(self, group: Group, hook_url: str, message_id: str, channel_id: str,
                           params: dict[str, str] | None = None) -> None:
        """Delete one of the webhook's posts (in `channel_id`); best effort."""
        try:
            async with self._http().delete(f"{hook_url}/messages/{message_id}", params=params,
                                            timeout=aiohttp.ClientTimeout(total=POST_TIMEOUT)) as resp:
                outcome: object = resp.status
        except TRANSPORT_ERRORS as exc:
            outcome = type(exc).__name__
        if outcome not in (204, 404):  # 404: gone already
            log.warning("group=%s: a stray post in channel %s could not be deleted (%s); it stays there",
                        group.id, channel_id, outcome)

    async def _post_as_bot(self, group: Group, message: Message, index: int, chunk: str) -> str:
        payload = {"content": chunk, "allowed_mentions": {"parse": []},
                   # Discord drops a second create with the same nonce (e.g. discord.py repeating a 502).
                   "nonce": f"rt{group.id}.{message.seq}.{index}"[:25], "enforce_nonce": True}
        route = Route("POST", "/channels/{channel_id}/messages", channel_id=int(group.channel_id or 0))
        try:
            sent = await self.bot.http.request(route, json=payload)
        except discord.HTTPException as exc:
            raise self._refusal(group, exc.status, exc.code, None, need="Send Messages") from None
        except TRANSPORT_ERRORS as exc:
            raise DeliveryError(f"the post did not complete ({type(exc).__name__})", maybe_shown=True) from None
        return str(sent["id"])

    def _refusal(self, group: Group, status: int, code: object, body: object, *, need: str) -> DeliveryError:
        """A DeliveryError for an HTTP answer that is not a success; `need`: the permissions
        the failed request depends on, named to people when Discord refuses it."""
        if status == 429:
            retry_after = body.get("retry_after") if isinstance(body, dict) else None
            hint = float(retry_after) if isinstance(retry_after, (int, float)) else None
            return DeliveryError("Discord is rate-limiting posts (429)", retry_after=hint)
        if status >= 500:
            return DeliveryError(f"Discord answered {status}", maybe_shown=True)
        where = self.where(group)
        if status in (401, 403):
            problem = (f"I can't post in {where}: Discord answered {status} (code {code}, Missing Permissions). "
                       f"Give my role {need} in {where}; the waiting messages are posted as soon as it is fixed.")
        elif status == 404 and code == UNKNOWN_CHANNEL:
            problem = f"I can't post in {where}: Discord says the channel no longer exists (code {code})."
        else:
            problem = (f"Discord refused a post in {where} ({status}, code {code}); "
                       "it is retried, and the bot's log has the details.")
        return DeliveryError(f"Discord answered {status} (code {code})", problem=problem)

    # streamed replies (bot.surfaces.discord.drafts) ---------------------------
    def draft(self, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> Draft | None:
        if self._closed or self.client is None:
            return None
        draft = self._drafts[(group.id, agent.id)] = DiscordDraft(self, group, agent, run_id, parts, text)
        return draft

    async def remove_drafts(self, group: Group, parts: Sequence[DraftPart]) -> list[int]:
        for run_id in {p.run_id for p in parts}:
            await self._asked_done(run_id)
        return await remove_parts(self, group, parts)

    def pace(self, group: Group) -> HookPace:
        return self._paces.setdefault(group.parent_channel_id or group.channel_id or "", HookPace())

    def shown(self, message_id: str) -> str | None:
        return self._shown.get(message_id)

    def _remember(self, message_id: str, content: str) -> None:
        self._shown.pop(message_id, None)
        self._shown[message_id] = content
        while len(self._shown) > SHOWN_KEPT:
            self._shown.pop(next(iter(self._shown)))

    async def _hook_call(self, group: Group, method: str, message_id: str | None, payload: dict[str, Any] | None,
                         *, timeout: float) -> tuple[int, Any]:
        """One request to the group's webhook (its messages' route with `message_id`): status and
        JSON body. A transport failure is a DeliveryError (one that may have reached Discord)."""
        if self._closed:
            raise DeliveryError("the bot is shutting down")
        hook_channel = group.parent_channel_id or group.channel_id or ""
        try:
            hook_id, token = await self.webhook(hook_channel)
        except UserFacingError as exc:
            raise DeliveryError(str(exc), problem=str(exc)) from None
        url = f"{Route.BASE}/webhooks/{hook_id}/{token}" + (f"/messages/{message_id}" if message_id else "")
        params = {"wait": "true"} if method == "POST" else {}
        if group.parent_channel_id and group.channel_id:
            params["thread_id"] = group.channel_id
        self.pace(group).spend()
        try:
            async with self._http().request(method, url, json=payload, params=params,
                                            timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                body = await resp.json(content_type=None) if resp.content_length != 0 else None
                status, headers = resp.status, resp.headers
        except TimeoutError:
            raise _MaybeLater(f"the webhook {method} got no answer in {timeout:.0f}s") from None
        except (*TRANSPORT_ERRORS, ValueError) as exc:
            raise DeliveryError(f"the webhook {method} did not complete ({type(exc).__name__})",
                                maybe_shown=method != "DELETE") from None
        self.pace(group).note(status, headers, body)
        return status, body

    def controls(self, group: Group, agent: Agent) -> Controls:
        held = self.approvals.of(group.id, agent.name)
        deciding = decision_buttons(held.ask.key) if held is not None else []
        return action_row([*deciding, stop_button(group.id, agent.id)])

    def notes(self, run_id: int) -> str:
        return "\n".join(self._asking.get(run_id, {}).values())

    async def _asked_done(self, run_id: int) -> None:
        """The run is over (its reply is shown, or its messages are taken back): the message an
        approval posted for it ends its updates first, and its lines are dropped."""
        asked = self._asked.pop(run_id, None)
        if asked is not None:
            await asked.finish()
        self._asking.pop(run_id, None)

    async def draft_post(self, group: Group, agent: Agent, chunk: str, *, components: Controls = ()) -> str:
        payload: dict[str, Any] = {"content": chunk, "username": agent.name, "allowed_mentions": NO_MENTIONS,
                                   "components": list(components)}
        if agent.avatar_url:
            payload["avatar_url"] = await self.fresh_url(agent.avatar_url)
        status, body = await self._hook_call(group, "POST", None, payload, timeout=DRAFT_TIMEOUT)
        if 200 <= status < 300 and isinstance(body, dict) and "id" in body:
            landed = str(body.get("channel_id") or group.channel_id)
            if group.channel_id and landed != group.channel_id:  # the webhook was moved: the post shows it
                hook_id, token = await self.webhook(group.parent_channel_id or group.channel_id)
                await self._delete_post(group, f"{Route.BASE}/webhooks/{hook_id}/{token}", str(body["id"]), landed)
                raise DeliveryError("the webhook posts in another channel", problem="the webhook was moved")
            self._remember(str(body["id"]), chunk)
            if components:
                self._buttoned.add(str(body["id"]))
            return str(body["id"])
        code = body.get("code") if isinstance(body, dict) else None
        raise self._refusal(group, status, code, body, need="Manage Webhooks and Send Messages")

    async def approve(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        """Ask on the agent's provisional message (`bot.surfaces.discord.approvals`): the request
        line under what it shows, Approve / Deny before its Stop; a press (or the timeout) decides,
        and the line becomes the decision. A run that shows no provisional message yet (nothing
        streamed) posts it now: the reply is finished in it. A worker, whose runs are private,
        asks in a message of its own."""
        if agent.mode == "worker" or self._closed or self.client is None:
            return await self._approve_apart(group, agent, ask)
        draft = self._drafts.get((group.id, agent.id))
        run_id = int(ask.key.split(".")[0])
        if draft is None or not draft.live or draft.run_id != run_id:
            draft = self._asked.get(run_id)
            if draft is None:
                parts = await self.store.drafts.draft_parts(run_id)
                draft = self._asked[run_id] = DiscordDraft(self, group, agent, run_id, parts, lambda: "")
        lines = self._asking.setdefault(run_id, {})
        held = self.approvals.hold(group.id, ask)
        lines[ask.key] = request_text(agent, ask)
        draft.grew()
        try:
            decision = await self.approvals.wait(held)
            lines[ask.key] = outcome_text(agent, ask, decision)
        except BaseException:  # a cancel (⏹ Stop) above all; re-raised
            lines.pop(ask.key, None)  # stopped while it waited
            raise
        finally:
            draft.grew()
        return decision

    async def _approve_apart(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        """Post the request with Approve / Deny as the agent and wait for a press (or the timeout);
        then show the decision without the buttons. A request that cannot be posted is denied
        (nobody could have approved it)."""
        held = self.approvals.hold(group.id, ask)
        payload: dict[str, Any] = {"content": request_text(agent, ask), "username": agent.name,
                                   "components": buttons(ask.key),
                                   "allowed_mentions": {"parse": [], "users": [ask.starter_user_id]
                                                        if ask.starter_user_id else [], "replied_user": False}}
        if agent.avatar_url:
            payload["avatar_url"] = await self.fresh_url(agent.avatar_url)
        try:
            status, body = await self._hook_call(group, "POST", None, payload, timeout=POST_TIMEOUT)
        except DeliveryError as exc:
            self.approvals.release(ask.key)
            log.warning("group=%s: could not ask for approval of %s (%s); denied", group.id, ask.tool, exc)
            return Approval(False, why="the request for approval could not be posted")
        if not (200 <= status < 300 and isinstance(body, dict) and "id" in body):
            self.approvals.release(ask.key)
            log.warning("group=%s: could not ask for approval of %s (HTTP %s); denied", group.id, ask.tool, status)
            return Approval(False, why="the request for approval could not be posted")
        decision = await self.approvals.wait(held)
        try:
            await self._hook_call(group, "PATCH", str(body["id"]), {
                "content": outcome_text(agent, ask, decision), "components": [], "allowed_mentions": NO_MENTIONS},
                timeout=POST_TIMEOUT)
        except DeliveryError as exc:
            log.warning("group=%s: could not show the decision on %s's request (%s)", group.id, agent.name, exc)
        return decision

    async def draft_edit(self, group: Group, message_id: str, chunk: str, *, tagged: Sequence[str] = (),
                         final: bool = False, components: Controls | None = None) -> bool:
        if final:
            components = []  # a committed reply carries no buttons (SPEC §8)
        if self._shown.get(message_id) == chunk and components is None:
            return True
        if self._shown.get(message_id) == chunk and not components and message_id not in self._buttoned:
            return True
        payload: dict[str, Any] = {"content": chunk, "allowed_mentions": allowed_mentions(chunk, tuple(tagged))
                                   if final else NO_MENTIONS}
        if components is not None:
            payload["components"] = list(components)
        status, body = await self._hook_call(group, "PATCH", message_id, payload,
                                             timeout=POST_TIMEOUT if final else DRAFT_TIMEOUT)
        if 200 <= status < 300:
            self._remember(message_id, chunk)
            if components:
                self._buttoned.add(message_id)
            elif components is not None:
                self._buttoned.discard(message_id)
            return True
        code = body.get("code") if isinstance(body, dict) else None
        if status == 404 and code in (UNKNOWN_MESSAGE, UNKNOWN_WEBHOOK):
            return False
        raise self._refusal(group, status, code, body, need="Manage Webhooks and Send Messages")

    async def draft_delete(self, group: Group, message_id: str) -> None:
        status, body = await self._hook_call(group, "DELETE", message_id, None, timeout=DRAFT_TIMEOUT)
        code = body.get("code") if isinstance(body, dict) else None
        if status == 404 and code == UNKNOWN_WEBHOOK:  # made by a webhook deleted since: delete it as the bot
            try:
                await self.bot.http.delete_message(int(group.channel_id or 0), int(message_id))
            except discord.NotFound:
                pass
            except discord.Forbidden:
                log.warning("group=%s: provisional message %s of a deleted webhook stays (deleting it needs Manage "
                            "Messages)", group.id, message_id)
            except (discord.HTTPException, *TRANSPORT_ERRORS) as exc:
                raise DeliveryError(f"could not delete a provisional message ({type(exc).__name__})") from None
        elif not (200 <= status < 300 or status == 404):
            raise self._refusal(group, status, code, body, need="Manage Webhooks")
        self._shown.pop(message_id, None)
        self._buttoned.discard(message_id)

    async def settle_parts(self, group: Group, parts: Sequence[DraftPart]) -> list[DraftPart]:
        pending = [p for p in parts if p.external_id is None]
        if not pending:
            return list(parts)
        found = await self._find_parts(group, pending, {p.external_id for p in parts if p.external_id})
        for part in pending:
            if part.id in found:
                log.info("group=%s run=%s: a provisional message had landed unrecorded (%s)", group.id, part.run_id,
                         found[part.id])
                await self.store.drafts.draft_posted(part.id, found[part.id])
        await self.store.drafts.drop_drafts(p.id for p in pending if p.id not in found)
        return [replace(p, external_id=found.get(p.id, p.external_id)) for p in parts
                if p.external_id is not None or p.id in found]

    async def _find_parts(self, group: Group, pending: Sequence[DraftPart], known: set[str | None]) -> dict[int, str]:
        """The ids of the channel's webhook messages that carry the pending parts' texts under their
        authors' names, posted since shortly before the earliest of them; by part id."""
        since = datetime.fromtimestamp(min(p.created_at for p in pending) - 60, tz=UTC)
        found: dict[int, str] = {}
        try:
            async for seen in self.channel(group.channel_id or "0").history(
                    limit=SCAN_LIMIT, after=discord.Object(discord.utils.time_snowflake(since)), oldest_first=True):
                if seen.webhook_id is None or str(seen.id) in known:
                    continue
                for part in pending:
                    if (part.id not in found and seen.author.name == part.author_name
                            and seen.content.strip() == part.text.strip()
                            and await self.store.thread.find_message_by_external_id(str(seen.id)) is None):
                        found[part.id] = str(seen.id)
                        known.add(str(seen.id))
                        break
        except discord.HTTPException as exc:
            raise self._refusal(group, exc.status, exc.code, None, need="Read Message History") from None
        except TRANSPORT_ERRORS as exc:
            raise DeliveryError(f"could not read the channel back ({type(exc).__name__})") from None
        return found

    # finding what arrived --------------------------------------------------
    async def _arrived_settled(self, group: Group, message: Message, agent: Agent | None,
                               chunks: list[str]) -> list[str]:
        """`_arrived`; when the row's last post may still land, read again after each of LATE_READS."""
        found = await self._arrived(group, message, agent, chunks)
        waits = list(LATE_READS) if (group.id, message.seq) in self._late else []
        while not found and waits:
            log.info("group=%s seq=%s: its post may still land; looking again in %.0fs before posting it again",
                     group.id, message.seq, waits[0])
            await asyncio.sleep(waits.pop(0))
            found = await self._arrived(group, message, agent, chunks)
        return found

    async def _drop_late_copy(self, group: Group, message: Message, chunk: str, kept: str,
                              hook: tuple[str, str]) -> None:
        """A chunk was posted again (as `kept`) while an earlier request for it might still land:
        look for that copy for a while (LATE_CHECKS) and delete it through the webhook, so one stays."""
        after = await self._after(group, message, parts=False)
        where = {"thread_id": group.channel_id} if group.parent_channel_id and group.channel_id else None
        waited = 0.0
        for at in LATE_CHECKS:
            await asyncio.sleep(max(0.0, at - waited))
            waited = at
            try:
                async for seen in self.channel(group.channel_id or "0").history(
                        limit=SCAN_LIMIT, after=after, oldest_first=True):
                    if (str(seen.webhook_id) == hook[0] and str(seen.id) != kept and self._ours(seen, message, None)
                            and seen.content.strip() == chunk.strip()
                            and await self.store.thread.find_message_by_external_id(str(seen.id)) is None):
                        log.warning("group=%s seq=%s: an earlier attempt's post landed late; deleting that copy",
                                    group.id, message.seq)
                        await self._delete_post(group, f"{Route.BASE}/webhooks/{hook[0]}/{hook[1]}",
                                                str(seen.id), group.channel_id or "", where)
                        return
            except (discord.HTTPException, *TRANSPORT_ERRORS) as exc:
                log.debug("group=%s: looking for a late copy failed: %s", group.id, type(exc).__name__)

    async def _arrived(self, group: Group, message: Message, agent: Agent | None, chunks: list[str]) -> list[str]:
        """Ids of the leading `chunks` already in the channel after the row's last recorded
        part (or after the rows before it), in order."""
        after = await self._after(group, message)
        found: list[str] = []
        try:
            async for seen in self.channel(group.channel_id or "0").history(
                    limit=SCAN_LIMIT, after=after, oldest_first=True):
                if len(found) == len(chunks):
                    break
                if self._ours(seen, message, agent) and seen.content.strip() == chunks[len(found)].strip():
                    found.append(str(seen.id))
        except discord.HTTPException as exc:
            raise self._refusal(group, exc.status, exc.code, None, need="Read Message History") from None
        except TRANSPORT_ERRORS as exc:
            raise DeliveryError(f"could not read the channel back ({type(exc).__name__})", maybe_shown=True) from None
        return found

    async def _after(self, group: Group, message: Message, *, parts: bool = True) -> discord.Object:
        """Where the row's posts can start: after its last recorded part (`parts`), or else after
        the rows before it (or the group's setup; or else the last ten minutes)."""
        anchor = (message.external_ids[-1] if parts and message.external_ids
                  else await self.store.thread.last_external_id(group.id,
                                                                before_seq=message.seq) or group.setup_message_id)
        return discord.Object(int(anchor)) if anchor else discord.Object(
            discord.utils.time_snowflake(discord.utils.utcnow()) - (600_000 << 22))

    def _ours(self, seen: discord.Message, message: Message, agent: Agent | None) -> bool:
        if message.author_type == "agent":  # posted under the row's name; a copy under the current one counts too
            names = {message.author_name} | ({agent.name} if agent else set())
            return seen.webhook_id is not None and seen.author.name in names
        return seen.webhook_id is None and self.bot.user is not None and seen.author.id == self.bot.user.id
