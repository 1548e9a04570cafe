"""Webhook routes (create/list/get/edit/delete/execute), interaction
callbacks, followups and @original / message edits."""
from __future__ import annotations

import copy
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import _util as u

if TYPE_CHECKING:  # what the other mixins give DiscordEmulator (see _shape)
    from ._interactions import InteractionRecord
    from ._shape import Emulator
else:
    Emulator = object

_BAD_NAME = re.compile(r"discord|clyde", re.I)


@dataclass
class Webhook:
    id: str
    channel_id: str
    guild_id: str
    name: str
    token: str
    avatar: str | None = None
    deleted: bool = False
    made_by: str | None = None  # the person who made it; None: the bot (its application)


class WebhookMixin(Emulator):
    """Mixed into DiscordEmulator."""

    if TYPE_CHECKING:  # InteractionsMixin's
        interactions: dict[str, InteractionRecord]
        interactions_by_token: dict[str, InteractionRecord]
        interaction_ack_deadline: float | None

    deny_manage_webhooks: bool = False

    def _init_webhooks(self) -> None:
        self.webhooks: dict[str, Webhook] = {}

    def _webhook_routes(self) -> list[Any]:
        g, p, pa, d = web.get, web.post, web.patch, web.delete
        A = "/api/v{ver:\\d+}"
        W = A + "/webhooks/{wid}/{token}"
        return [
            p(A + "/channels/{cid}/webhooks", self._h_create_webhook),
            g(A + "/channels/{cid}/webhooks", self._h_channel_webhooks),
            g(A + "/guilds/{gid}/webhooks", self._h_guild_webhooks),
            g(A + "/webhooks/{wid}", self._h_get_webhook),
            pa(A + "/webhooks/{wid}", self._h_edit_webhook),
            d(A + "/webhooks/{wid}", self._h_delete_webhook),
            g(W, self._h_get_webhook),
            pa(W, self._h_edit_webhook),
            d(W, self._h_delete_webhook),
            p(W, self._h_execute),
            g(W + "/messages/{mid}", self._h_webhook_message),
            pa(W + "/messages/{mid}", self._h_webhook_message),
            d(W + "/messages/{mid}", self._h_webhook_message),
            p(A + "/interactions/{iid}/{token}/callback", self._h_callback),
        ]

    # ------------------------------------------------------------- test-side
    def add_webhook(self, channel_id: str, name: str = "Captain Hook", *, made_by: str | None = None) -> Webhook:
        """Create a webhook directly: as the bot made it, or (made_by: a user id) as a person did."""
        ch = self.channels[str(channel_id)]
        hook = Webhook(self.snowflake(), ch.id, ch.guild_id, name, u.random_token(), made_by=made_by)
        self.webhooks[hook.id] = hook
        return hook

    def delete_webhook(self, webhook_id: str) -> None:
        """Simulate an admin deleting the webhook: later executes get 404 10015."""
        hook = self.webhooks.get(str(webhook_id))
        if hook:
            hook.deleted = True
            self.dispatch("WEBHOOKS_UPDATE", {"guild_id": hook.guild_id, "channel_id": hook.channel_id})

    def webhook_json(self, hook: Webhook, *, with_user: bool = True) -> dict[str, Any]:
        data = {"id": hook.id, "type": 1, "guild_id": hook.guild_id, "channel_id": hook.channel_id,
                "name": hook.name, "avatar": hook.avatar, "token": hook.token,
                "application_id": self.application_id if hook.made_by is None else None,
                "url": f"https://discord.com/api/webhooks/{hook.id}/{hook.token}"}
        if with_user:
            data["user"] = self.user_json(hook.made_by or self.bot_user_id)
        return data

    # ------------------------------------------------------------- CRUD
    def _live_hook(self, request: web.Request) -> Webhook | None:
        hook = self.webhooks.get(request.match_info["wid"])
        if hook is None or hook.deleted:
            return None
        token = request.match_info.get("token")
        if token is not None and token != hook.token:
            return None
        return hook

    async def _h_create_webhook(self, request: web.Request) -> web.Response:
        ch = self.channels.get(request.match_info["cid"])
        if ch is None:
            return u.error(404, 10003, "Unknown Channel")
        if ch.is_thread:
            return u.error(400, 50024, "Cannot execute action on this channel type")
        if not self.bot_permissions(ch.guild_id, ch.id) & u.MANAGE_WEBHOOKS:
            return u.error(403, 50013, "Missing Permissions")
        name = (request[u.BODY] or {}).get("name") or ""
        if not name or len(name) > 80 or _BAD_NAME.search(name):
            return u.form_error("name", "BASE_TYPE_BAD_LENGTH", "Invalid webhook name")
        hook = self.add_webhook(ch.id, name)
        self.dispatch("WEBHOOKS_UPDATE", {"guild_id": ch.guild_id, "channel_id": ch.id})
        return u.json_response(self.webhook_json(hook))

    async def _h_channel_webhooks(self, request: web.Request) -> web.Response:
        ch = self.channels.get(request.match_info["cid"])
        if ch is None:
            return u.error(404, 10003, "Unknown Channel")
        if not self.bot_permissions(ch.guild_id, ch.id) & u.MANAGE_WEBHOOKS:
            return u.error(403, 50013, "Missing Permissions")
        return u.json_response([self.webhook_json(h) for h in self.webhooks.values()
                                if h.channel_id == ch.id and not h.deleted])

    async def _h_guild_webhooks(self, request: web.Request) -> web.Response:
        gid = request.match_info["gid"]
        return u.json_response([self.webhook_json(h) for h in self.webhooks.values()
                                if h.guild_id == gid and not h.deleted])

    async def _h_get_webhook(self, request: web.Request) -> web.Response:
        hook = self._live_hook(request)
        if hook is None:
            return u.error(404, 10015, "Unknown Webhook")
        return u.json_response(self.webhook_json(hook, with_user="token" not in request.match_info))

    async def _h_edit_webhook(self, request: web.Request) -> web.Response:
        hook = self._live_hook(request)
        if hook is None:
            return u.error(404, 10015, "Unknown Webhook")
        body = request[u.BODY] or {}
        if "name" in body:
            if not body["name"] or _BAD_NAME.search(body["name"]):
                return u.form_error("name", "BASE_TYPE_BAD_LENGTH", "Invalid webhook name")
            hook.name = body["name"]
        if "channel_id" in body and "token" not in request.match_info:
            hook.channel_id = str(body["channel_id"])
        return u.json_response(self.webhook_json(hook, with_user="token" not in request.match_info))

    async def _h_delete_webhook(self, request: web.Request) -> web.Response:
        hook = self._live_hook(request)
        if hook is None:
            return u.error(404, 10015, "Unknown Webhook")
        self.delete_webhook(hook.id)
        return u.no_content()

    # ------------------------------------------------------------- execute
    async def _h_execute(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        rec = self.interactions_by_token.get(token)
        if rec is not None and request.match_info["wid"] == self.application_id:
            return await self._followup(request, rec)
        hook = self._live_hook(request)
        if hook is None:
            return u.error(404, 10015, "Unknown Webhook")
        body = request[u.BODY] or {}
        err = self._validate_content(body, request[u.FILES])
        if err:
            return err
        username = body.get("username")
        if username is not None and (not username.strip() or len(username) > 80 or _BAD_NAME.search(username)):
            return u.form_error("username", "USERNAME_INVALID_CONTAINS",
                                "Username cannot contain \"discord\" or \"clyde\" or be over 80 characters")
        channel_id = hook.channel_id
        thread_id = request.query.get("thread_id")
        if thread_id:
            th = self.channels.get(thread_id)
            if th is None or th.parent_id != hook.channel_id:
                return u.error(404, 10003, "Unknown Channel")
            channel_id = th.id
        author = self._webhook_author(hook.id, username or hook.name, body.get("avatar_url"))
        msg = self._build_message(channel_id, author, body.get("content") or "", embeds=body.get("embeds"),
                                  allowed_mentions=body.get("allowed_mentions"), webhook_id=hook.id,
                                  attachments=request[u.FILES], components=body.get("components"),
                                  flags=body.get("flags") or 0)
        self._store_message(msg)
        self.pings.extend((msg["id"], user["id"]) for user in msg["mentions"])
        self._dispatch_message("MESSAGE_CREATE", msg, None)
        if request.query.get("wait", "").lower() in ("1", "true"):
            return u.json_response(msg)
        return u.no_content()

    async def _h_webhook_message(self, request: web.Request) -> web.Response:
        rec = self.interactions_by_token.get(request.match_info["token"])
        msg = self._webhook_message_of(request, rec)
        if isinstance(msg, web.Response):
            return msg
        stored = self.get_message(msg["id"]) is not None
        if request.method == "GET":
            return u.json_response(msg)
        if request.method == "DELETE":
            if rec is not None:
                rec.deleted_messages.append(msg["id"])
            if stored:
                self._delete_message(msg["id"])
            return u.no_content()
        body = request[u.BODY] or {}
        if len(body.get("content") or "") > 2000:
            return u.form_error("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
        self._apply_edit(msg, body)
        msg["flags"] = (msg["flags"] & ~128) | (body.get("flags") or 0) & ~128
        if rec is not None:
            rec.edits.append({"message_id": msg["id"], "body": copy.deepcopy(body)})
        if stored:
            self._dispatch_message("MESSAGE_UPDATE", msg, None)
        return u.json_response(msg)

    def _webhook_message_of(self, request: web.Request,
                            rec: InteractionRecord | None) -> dict[str, Any] | web.Response:
        """The message the URL names: one of the interaction's (`rec`), else one the webhook posted;
        404 when there is none."""
        mid = request.match_info["mid"]
        if rec is not None:
            msg = rec.find_message(mid)
            return u.error(404, 10008, "Unknown Message") if msg is None else msg
        hook = self._live_hook(request)
        if hook is None:
            return u.error(404, 10015, "Unknown Webhook")
        msg = self.get_message(mid)
        if msg is None or msg.get("webhook_id") != hook.id:
            return u.error(404, 10008, "Unknown Message")
        return msg

    # ------------------------------------------------------------- interactions
    async def _h_callback(self, request: web.Request) -> web.Response:
        rec = self.interactions.get(request.match_info["iid"])
        if rec is None or rec.token != request.match_info["token"]:
            return u.error(404, 10062, "Unknown interaction")
        if rec.callbacks:
            return u.error(400, 40060, "Interaction has already been acknowledged.")
        deadline = self.interaction_ack_deadline
        if deadline is not None and time.monotonic() - rec.created > deadline:
            return u.error(404, 10062, "Unknown interaction")
        body = request[u.BODY] or {}
        cb_type = int(body.get("type", 0))
        data = body.get("data") or {}
        flags = int(data.get("flags") or 0)
        if cb_type in (4, 7):
            err = self._validate_content(data, request[u.FILES]) if cb_type == 4 else None
            if err:
                return err
        rec.callbacks.append({"type": cb_type, "data": copy.deepcopy(data), "flags": flags,
                              "ephemeral": bool(flags & 64), "time": time.time()})
        inter = {"id": rec.id, "type": rec.type, "activity_instance_id": None,
                 "response_message_id": None, "response_message_loading": cb_type == 5,
                 "response_message_ephemeral": bool(flags & 64)}
        resource: dict[str, Any] = {"type": cb_type}
        if cb_type in (4, 5):
            content = "" if cb_type == 5 else data.get("content") or ""
            msg = self._interaction_message(rec, content, data, request[u.FILES],
                                            flags=(flags | 128) if cb_type == 5 else flags,
                                            msg_type=20 if rec.type == 2 else 0)
            rec.original = msg
            inter["response_message_id"] = msg["id"]
            resource["message"] = msg
        elif cb_type == 7 and rec.message is not None:
            msg = self.get_message(rec.message["id"]) or rec.message
            self._apply_edit(msg, data)
            if self.get_message(msg["id"]) is not None:
                self._dispatch_message("MESSAGE_UPDATE", msg, None)
            inter["response_message_id"] = msg["id"]
            resource["message"] = msg
        return u.json_response({"interaction": inter, "resource": resource})

    def _interaction_message(self, rec: InteractionRecord, content: str, data: dict[str, Any], files: list[Any], *,
                             flags: int, msg_type: int) -> dict[str, Any]:
        meta = {"id": rec.id, "type": rec.type, "user": self.user_json(rec.user_id),
                "authorizing_integration_owners": {"0": rec.guild_id}}
        if rec.type == 2:
            meta["name"] = rec.payload["data"].get("name")
        msg = self._build_message(rec.channel_id, self.user_json(self.bot_user_id), content,
                                  embeds=data.get("embeds"), allowed_mentions=data.get("allowed_mentions"),
                                  webhook_id=self.application_id, application_id=self.application_id,
                                  attachments=files, components=data.get("components"), flags=flags,
                                  msg_type=msg_type, extra={"interaction_metadata": meta})
        if not flags & 64:
            self._store_message(msg)
            self._dispatch_message("MESSAGE_CREATE", msg, self.bot_user_id)
        return msg

    async def _followup(self, request: web.Request, rec: InteractionRecord) -> web.Response:
        if not rec.callbacks:
            return u.error(404, 10015, "Unknown Webhook")
        body = request[u.BODY] or {}
        err = self._validate_content(body, request[u.FILES])
        if err:
            return err
        flags = int(body.get("flags") or 0)
        original = rec.original
        if original is not None and original["flags"] & 128 and not rec.followups:
            # Discord: the first followup after a deferral edits the "thinking" message (its files included).
            self._apply_edit(original, body)
            original["flags"] = original["flags"] & ~128
            if request[u.FILES]:
                original["attachments"] = [self._attachment_json(f, rec.channel_id) for f in request[u.FILES]]
            msg = original
            if self.get_message(msg["id"]) is not None:
                self._dispatch_message("MESSAGE_UPDATE", msg, self.bot_user_id)
        else:
            msg = self._interaction_message(rec, body.get("content") or "", body, request[u.FILES],
                                            flags=flags, msg_type=0)
        rec.followups.append(copy.deepcopy(msg))
        if request.query.get("wait", "").lower() in ("1", "true"):
            return u.json_response(msg)
        return u.no_content()
