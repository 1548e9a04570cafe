"""The channels' webhooks and the requests sent through them.

`Webhooks`: one webhook per group channel, created by `/roundtable setup`, stored, reused (a
thread posts through its parent's); which webhooks are this bot's. `HookHttp`: the requests to
a webhook, sent once each (our own request, not discord.py's, which repeats a 5xx by itself and
could post twice), through one session, with the webhook's rate-limit state (shared by posts and
drafts, per webhook); every failure becomes a `DeliveryError` (`refusal` names what to fix).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp
import discord
from discord.http import Route

from bot.core.errors import DeliveryError, UserFacingError
from bot.core.models import Group
from bot.core.ports import HasWebhooks
from bot.surfaces.discord.drafts import HookPace
from bot.surfaces.discord.link import TRANSPORT_ERRORS, Link
from bot.surfaces.discord.render import mention_policy

log = logging.getLogger(__name__)

WEBHOOK_NAME = "Roundtable"
UNKNOWN_WEBHOOK = 10015
UNKNOWN_CHANNEL = 10003
UNKNOWN_MESSAGE = 10008
NO_MENTIONS = {"parse": [], "users": [], "replied_user": False}
POST_TIMEOUT = 30.0


def allowed_mentions(text: str, tagged_user_ids: tuple[str, ...]) -> dict[str, Any]:
    """Discord's allowed_mentions for a post: only the tagged people it mentions, nobody else."""
    return {"parse": [], "users": list(mention_policy(text, tagged_user_ids).users), "replied_user": False}


class UnknownWebhook(Exception):
    pass


class MaybeLater(DeliveryError):
    """A post whose request Discord may still commit (it timed out, or a gateway gave up on it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, maybe_shown=True)


class MovedWebhook(Exception):
    """The post landed in another channel: an admin moved the webhook (its copy there is deleted)."""


def hook_channel(group: Group) -> str:
    """The channel whose webhook the group posts through (a thread's parent)."""
    return group.parent_channel_id or group.channel_id or ""


class Webhooks:
    """Each channel's webhook: cached, stored, created when missing; and whether a webhook is ours."""

    def __init__(self, link: Link, store: HasWebhooks) -> None:
        self.link = link
        self.store = store
        self._cached: dict[str, tuple[str, str]] = {}  # channel id -> (webhook id, token)
        self._makers: dict[str, bool] = {}  # webhook id -> whether this bot made it

    async def create(self, channel_id: str) -> tuple[str, str]:
        """Create and store the webhook of a channel (a thread's parent). UserFacingError when not allowed."""
        bot = self.link.bot
        try:
            channel = bot.get_channel(int(channel_id)) or await bot.fetch_channel(int(channel_id))
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
        self._cached[channel_id] = (str(webhook.id), webhook.token)
        return self._cached[channel_id]

    async def get(self, channel_id: str) -> tuple[str, str]:
        """The channel's webhook (id, token): cached, else stored, else created. UserFacingError."""
        cached = self._cached.get(channel_id)
        if cached is not None:
            return cached
        stored = await self.store.webhooks.get_webhook(channel_id)
        if stored is None:
            return await self.create(channel_id)
        self._cached[channel_id] = stored
        return stored

    async def forget(self, channel_id: str) -> None:
        """The channel's webhook is gone (deleted, or moved): the next post creates a new one."""
        self._cached.pop(channel_id, None)
        await self.store.webhooks.forget_webhook(channel_id)

    async def is_own_post(self, group: Group, message: discord.Message) -> bool:
        """Whether a webhook message came from this bot: through the group's webhook, or any
        webhook this bot's application made (another process's, one made before the group's
        current one). Such a message is never a person's."""
        if message.webhook_id is None:
            return False
        client = self.link.client
        if client is not None and message.application_id is not None \
                and message.application_id == client.application_id:
            return True
        hook_id = str(message.webhook_id)
        if hook_id in {cached for cached, _ in self._cached.values()}:
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
        bot = self.link.bot
        try:
            data = await bot.http.request(Route("GET", "/webhooks/{webhook_id}", webhook_id=int(hook_id)))
        except discord.NotFound:
            return False
        except (discord.HTTPException, *TRANSPORT_ERRORS) as exc:
            log.warning("could not look up who made webhook %s: %s", hook_id, type(exc).__name__)
            return None
        ours = {str(i) for i in (bot.application_id, bot.user and bot.user.id) if i}
        creator = data.get("user") or {}
        return bool(ours & {str(data.get("application_id")), str(creator.get("id"))})


class HookHttp:
    """The requests to the groups' webhooks: one session, each request sent once, each webhook's
    rate limit (`pace`, shared with drafts; a post waits out an exhausted bucket)."""

    def __init__(self, link: Link, hooks: Webhooks) -> None:
        self.link = link
        self.hooks = hooks
        self._session: aiohttp.ClientSession | None = None
        self._not_before: dict[str, float] = {}  # webhook id -> when its rate-limit bucket refills
        self._paces: dict[str, HookPace] = {}  # webhook channel -> its rate limit as drafts see it

    def pace(self, group: Group) -> HookPace:
        return self._paces.setdefault(hook_channel(group), HookPace())

    async def hook(self, group: Group) -> tuple[str, str]:
        """The group's webhook; a DeliveryError naming the problem when it cannot be made."""
        try:
            return await self.hooks.get(hook_channel(group))
        except UserFacingError as exc:  # the webhook cannot be made: a missing permission
            raise DeliveryError(str(exc), problem=str(exc)) from None

    async def execute(self, group: Group, hook_id: str, token: str, payload: dict[str, Any],
                      params: dict[str, str]) -> str:
        """One webhook execute (no retries of its own): the new message's id. MaybeLater,
        UnknownWebhook, MovedWebhook (its stray copy deleted), or a DeliveryError."""
        if self.link.closed:
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
            raise MaybeLater(f"the webhook post got no answer in {POST_TIMEOUT:.0f}s") from None
        except (*TRANSPORT_ERRORS, ValueError) as exc:
            raise DeliveryError(f"the webhook post did not complete ({type(exc).__name__})", maybe_shown=True) from None
        self.pace(group).note(status, headers, body)
        if headers.get("X-RateLimit-Remaining") == "0":
            with contextlib.suppress(ValueError):
                self._not_before[hook_id] = time.monotonic() + float(headers.get("X-RateLimit-Reset-After", "1"))
        if 200 <= status < 300 and isinstance(body, dict) and "id" in body:
            landed = str(body.get("channel_id") or group.channel_id)
            if group.channel_id and landed != group.channel_id:  # (a thread's posts are in the thread)
                await self.delete_post(group, url, str(body["id"]), landed)
                raise MovedWebhook()
            return str(body["id"])
        code = body.get("code") if isinstance(body, dict) else None
        if status in (502, 504):  # a gateway gave up; the server behind it may commit it still
            raise MaybeLater(f"Discord answered {status}")
        if status == 404 and code == UNKNOWN_WEBHOOK:
            raise UnknownWebhook()
        raise self.refusal(group, status, code, body, need="Manage Webhooks and Send Messages")

    async def call(self, group: Group, method: str, message_id: str | None, payload: dict[str, Any] | None,
                   *, timeout: float) -> tuple[int, Any]:
        """One request to the group's webhook (its messages' route with `message_id`): status and
        JSON body. A transport failure is a DeliveryError (one that may have reached Discord)."""
        if self.link.closed:
            raise DeliveryError("the bot is shutting down")
        hook_id, token = await self.hook(group)
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
            raise MaybeLater(f"the webhook {method} got no answer in {timeout:.0f}s") from None
        except (*TRANSPORT_ERRORS, ValueError) as exc:
            raise DeliveryError(f"the webhook {method} did not complete ({type(exc).__name__})",
                                maybe_shown=method != "DELETE") from None
        self.pace(group).note(status, headers, body)
        return status, body

    async def delete_post(self, group: Group, hook_url: str, message_id: str, channel_id: str,
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

    def refusal(self, group: Group, status: int, code: object, body: object, *, need: str) -> DeliveryError:
        """A DeliveryError for an HTTP answer that is not a success; `need`: the permissions
        the failed request depends on, named to people when Discord refuses it."""
        if status == 429:
            retry_after = body.get("retry_after") if isinstance(body, dict) else None
            hint = float(retry_after) if isinstance(retry_after, (int, float)) else None
            return DeliveryError("Discord is rate-limiting posts (429)", retry_after=hint)
        if status >= 500:
            return DeliveryError(f"Discord answered {status}", maybe_shown=True)
        where = self.link.where(group)
        if status in (401, 403):
            problem = (f"I can't post in {where}: Discord answered {status} (code {code}, Missing Permissions). "
                       f"Give my role {need} in {where}; the waiting messages are posted as soon as it is fixed.")
        elif status == 404 and code == UNKNOWN_CHANNEL:
            problem = f"I can't post in {where}: Discord says the channel no longer exists (code {code})."
        else:
            problem = (f"Discord refused a post in {where} ({status}, code {code}); "
                       "it is retried, and the bot's log has the details.")
        return DeliveryError(f"Discord answered {status} (code {code})", problem=problem)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers={"User-Agent": "DiscordBot (roundtable, 0.1)"})
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
