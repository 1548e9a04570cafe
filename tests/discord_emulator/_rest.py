"""Core REST routes: identity, gateway, commands, channels, messages, reactions, guilds."""
from __future__ import annotations

import copy
import re
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import _util as u

if TYPE_CHECKING:  # what the other mixins give DiscordEmulator (see _shape)
    from ._shape import Emulator
else:
    Emulator = object

NONCE_WINDOW = 300.0   # seconds Discord remembers an enforced nonce
NONCE_MAX_LENGTH = 25


class RestMixin(Emulator):
    """Mixed into DiscordEmulator."""

    def _init_rest(self) -> None:
        self.synced_commands: dict[str | None, list[dict[str, Any]]] = {}  # guild id (None = global) -> commands
        self.command_syncs: list[dict[str, Any]] = []   # history: {"guild_id", "commands"}
        self.nonce_window: float = NONCE_WINDOW
        self.refreshed_urls: list[dict[str, Any]] = []  # every URL refresh answered
        # (channel id, author id, nonce) -> (message id, monotonic time created)
        self._nonces: dict[tuple[str, str, str], tuple[str, float]] = {}

    def _core_routes(self) -> list[Any]:
        g, p, put, pa, d = web.get, web.post, web.put, web.patch, web.delete
        A = "/api/v{ver:\\d+}"
        return [
            g(A + "/users/@me", self._h_me),
            g(A + "/oauth2/applications/@me", self._h_app),
            g(A + "/applications/@me", self._h_app),
            g(A + "/gateway", self._h_gateway),
            g(A + "/gateway/bot", self._h_gateway_bot),
            put(A + "/applications/{app}/commands", self._h_put_commands),
            g(A + "/applications/{app}/commands", self._h_get_commands),
            p(A + "/applications/{app}/commands", self._h_post_command),
            put(A + "/applications/{app}/guilds/{guild}/commands", self._h_put_commands),
            g(A + "/applications/{app}/guilds/{guild}/commands", self._h_get_commands),
            p(A + "/applications/{app}/guilds/{guild}/commands", self._h_post_command),
            g(A + "/channels/{cid}", self._h_get_channel),
            g(A + "/channels/{cid}/messages", self._h_history),
            p(A + "/channels/{cid}/messages", self._h_post_message),
            g(A + "/channels/{cid}/messages/{mid}", self._h_get_message),
            pa(A + "/channels/{cid}/messages/{mid}", self._h_edit_message),
            d(A + "/channels/{cid}/messages/{mid}", self._h_delete_message),
            p(A + "/channels/{cid}/typing", self._h_typing),
            put(A + "/channels/{cid}/messages/{mid}/reactions/{emoji}/@me", self._h_react),
            d(A + "/channels/{cid}/messages/{mid}/reactions/{emoji}/@me", self._h_unreact),
            g(A + "/channels/{cid}/messages/{mid}/reactions/{emoji}", self._h_reaction_users),
            p(A + "/channels/{cid}/threads", self._h_start_thread),
            p(A + "/channels/{cid}/messages/{mid}/threads", self._h_start_thread),
            g(A + "/guilds/{gid}", self._h_get_guild),
            g(A + "/guilds/{gid}/channels", self._h_guild_channels),
            g(A + "/guilds/{gid}/members/{uid}", self._h_get_member),
            g(A + "/guilds/{gid}/roles", self._h_roles),
            g(A + "/users/@me/guilds", self._h_my_guilds),
            p(A + "/attachments/refresh-urls", self._h_refresh_urls),
        ]

    # ------------------------------------------------------------- identity
    async def _h_me(self, request: web.Request) -> web.Response:
        return u.json_response(self.user_json(self.bot_user_id))

    async def _h_app(self, request: web.Request) -> web.Response:
        app = dict(self.application)
        if not self.privileged_intents_allowed:  # the portal's Message Content switch is off
            app["flags"] = int(app["flags"]) & ~(u.APP_GATEWAY_MESSAGE_CONTENT | u.APP_GATEWAY_MESSAGE_CONTENT_LIMITED)
        app["owner"] = self.user_json(self.owner_user_id) if self.owner_user_id else None
        app["bot"] = self.user_json(self.bot_user_id)
        return u.json_response(app)

    async def _h_gateway(self, request: web.Request) -> web.Response:
        return u.json_response({"url": self.gateway_url})

    async def _h_gateway_bot(self, request: web.Request) -> web.Response:
        return u.json_response({"url": self.gateway_url, "shards": 1, "session_start_limit": {
            "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}})

    async def _h_my_guilds(self, request: web.Request) -> web.Response:
        return u.json_response([{"id": g.id, "name": g.name, "icon": None, "owner": False,
                                 "permissions": str(self.bot_permissions(g.id)), "features": []}
                                for g in self.guilds.values()])

    # ------------------------------------------------------------- commands
    def _command_json(self, body: dict[str, Any], guild_id: str | None,
                      existing: list[dict[str, Any]]) -> dict[str, Any]:
        cmd_type = body.get("type", 1)
        old = next((c for c in existing if c["name"] == body["name"] and c["type"] == cmd_type), None)
        cmd = {
            "id": old["id"] if old else self.snowflake(), "application_id": self.application_id,
            "version": self.snowflake(), "type": cmd_type, "name": body["name"],
            "description": body.get("description", ""), "options": body.get("options", []),
            "default_member_permissions": body.get("default_member_permissions"),
            "dm_permission": body.get("dm_permission", True), "nsfw": body.get("nsfw", False),
            "name_localizations": body.get("name_localizations"),
            "description_localizations": body.get("description_localizations"),
            "contexts": body.get("contexts"), "integration_types": body.get("integration_types", [0]),
        }
        if guild_id:
            cmd["guild_id"] = guild_id
        return cmd

    async def _h_put_commands(self, request: web.Request) -> web.Response:
        if request.match_info["app"] != self.application_id:
            return u.error(403, 50001, "Missing Access")
        guild_id = request.match_info.get("guild")
        if guild_id is not None and guild_id not in self.guilds:
            return u.error(403, 50001, "Missing Access")
        body = request[u.BODY] or []
        existing = self.synced_commands.get(guild_id, [])
        cmds = [self._command_json(c, guild_id, existing) for c in body]
        self.synced_commands[guild_id] = cmds
        self.command_syncs.append({"guild_id": guild_id, "commands": copy.deepcopy(body)})
        return u.json_response(cmds)

    async def _h_post_command(self, request: web.Request) -> web.Response:
        guild_id = request.match_info.get("guild")
        existing = self.synced_commands.setdefault(guild_id, [])
        cmd = self._command_json(request[u.BODY], guild_id, existing)
        existing[:] = [c for c in existing if c["id"] != cmd["id"]] + [cmd]
        return u.json_response(cmd, status=201)

    async def _h_get_commands(self, request: web.Request) -> web.Response:
        return u.json_response(self.synced_commands.get(request.match_info.get("guild"), []))

    # ------------------------------------------------------------- channels & guilds
    def _channel_or_404(self, cid: str) -> tuple[Any, web.Response | None]:
        ch = self.channels.get(cid)
        return ch, (None if ch else u.error(404, 10003, "Unknown Channel"))

    async def _h_get_channel(self, request: web.Request) -> web.Response:
        ch, err = self._channel_or_404(request.match_info["cid"])
        return err or u.json_response(ch.to_json())

    async def _h_get_guild(self, request: web.Request) -> web.Response:
        gid = request.match_info["gid"]
        if gid not in self.guilds:
            return u.error(404, 10004, "Unknown Guild")
        return u.json_response(self.guild_json(gid))

    async def _h_guild_channels(self, request: web.Request) -> web.Response:
        gid = request.match_info["gid"]
        if gid not in self.guilds:
            return u.error(404, 10004, "Unknown Guild")
        return u.json_response([self.channels[c].to_json() for c in self.guilds[gid].channel_ids
                                if not self.channels[c].is_thread])

    async def _h_get_member(self, request: web.Request) -> web.Response:
        gid, uid = request.match_info["gid"], request.match_info["uid"]
        if gid not in self.guilds:
            return u.error(404, 10004, "Unknown Guild")
        if uid not in self.guilds[gid].members:
            return u.error(404, 10007, "Unknown Member")
        return u.json_response(self.member_json(gid, uid))

    async def _h_roles(self, request: web.Request) -> web.Response:
        gid = request.match_info["gid"]
        if gid not in self.guilds:
            return u.error(404, 10004, "Unknown Guild")
        return u.json_response([r.to_json() for r in self.guilds[gid].roles.values()])

    async def _h_start_thread(self, request: web.Request) -> web.Response:
        ch, err = self._channel_or_404(request.match_info["cid"])
        if err:
            return err
        body = request[u.BODY] or {}
        # (a thread started from a message gets a fresh id here, not the message id)
        tid = self.add_thread(ch.id, body.get("name", "thread"))
        return u.json_response(self.channel_json(tid), status=201)

    # ------------------------------------------------------------- messages
    async def _h_history(self, request: web.Request) -> web.Response:
        ch, err = self._channel_or_404(request.match_info["cid"])
        if err:
            return err
        q = request.query
        return u.json_response(self._history(ch.id, int(q.get("limit", 50)), q.get("before"),
                                             q.get("after"), q.get("around")))

    async def _h_get_message(self, request: web.Request) -> web.Response:
        msg = self.get_message(request.match_info["mid"])
        if msg is None or msg["channel_id"] != request.match_info["cid"]:
            return u.error(404, 10008, "Unknown Message")
        return u.json_response(msg)

    @staticmethod
    def _validate_content(body: dict[str, Any], files: list[Any]) -> web.Response | None:
        content = body.get("content") or ""
        if len(content) > 2000:
            return u.form_error("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
        if len(body.get("embeds") or []) > 10:
            return u.form_error("embeds", "BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
        if not content and not body.get("embeds") and not files and not body.get("components") \
                and not body.get("sticker_ids") and not body.get("poll"):
            return u.error(400, 50006, "Cannot send an empty message")
        return None

    @staticmethod
    def _validate_nonce(nonce: Any) -> web.Response | None:
        if nonce is None:
            return None
        if isinstance(nonce, bool) or not isinstance(nonce, (str, int)):
            return u.form_error("nonce", "NONCE_TYPE_INVALID", "Nonce must be an integer or a string.")
        if len(str(nonce)) > NONCE_MAX_LENGTH:
            return u.form_error("nonce", "BASE_TYPE_MAX_LENGTH",
                                f"Must be {NONCE_MAX_LENGTH} or fewer in length.")
        return None

    def _nonce_seen(self, key: tuple[str, str, str]) -> str | None:
        """Message id created with this enforced nonce within nonce_window, if any."""
        now = time.monotonic()
        for k, (_, created) in list(self._nonces.items()):
            if now - created > self.nonce_window:
                del self._nonces[k]
        hit = self._nonces.get(key)
        return hit[0] if hit else None

    async def _h_post_message(self, request: web.Request) -> web.Response:
        """Create a message as the bot. With a nonce and enforce_nonce, a repeat of the same
        nonce (same author and channel, within nonce_window) returns the first message."""
        ch, err = self._channel_or_404(request.match_info["cid"])
        if err:
            return err
        body = request[u.BODY] or {}
        err = self._validate_nonce(body.get("nonce")) or self._validate_content(body, request[u.FILES])
        if err:
            return err
        nonce_key = None
        if body.get("nonce") is not None and body.get("enforce_nonce") is True:
            nonce_key = (ch.id, self.bot_user_id, str(body["nonce"]))
            first_id = self._nonce_seen(nonce_key)
            if first_id is not None:
                first = self.get_message(first_id)
                if first is None:  # Discord: the first message was deleted meanwhile
                    return u.error(404, 10008, "Unknown Message")
                return u.json_response(first)
        ref = (body.get("message_reference") or {}).get("message_id")
        msg = self._build_message(ch.id, self.user_json(self.bot_user_id), body.get("content") or "",
                                  embeds=body.get("embeds"), allowed_mentions=body.get("allowed_mentions"),
                                  reference_message_id=ref, attachments=request[u.FILES],
                                  components=body.get("components"), flags=body.get("flags") or 0)
        msg["nonce"] = body.get("nonce")
        self._store_message(msg)
        self.pings.extend((msg["id"], user["id"]) for user in msg["mentions"])
        if nonce_key is not None:
            self._nonces[nonce_key] = (msg["id"], time.monotonic())
        self._dispatch_message("MESSAGE_CREATE", msg, self.bot_user_id)
        return u.json_response(msg)

    async def _h_edit_message(self, request: web.Request) -> web.Response:
        msg = self.get_message(request.match_info["mid"])
        if msg is None or msg["channel_id"] != request.match_info["cid"]:
            return u.error(404, 10008, "Unknown Message")
        if msg["author"]["id"] != self.bot_user_id:
            return u.error(403, 50005, "Cannot edit a message authored by another user")
        self._apply_edit(msg, request[u.BODY] or {})
        self._dispatch_message("MESSAGE_UPDATE", msg, self.bot_user_id)
        return u.json_response(msg)

    def _apply_edit(self, msg: dict[str, Any], body: dict[str, Any]) -> None:
        for key in ("content", "embeds", "components", "flags"):
            if key in body and body[key] is not None:
                msg[key] = body[key]
        if "content" in body:
            msg.update(self._compute_mentions(msg["content"], body.get("allowed_mentions")))
        msg["edited_timestamp"] = u.iso()

    async def _h_delete_message(self, request: web.Request) -> web.Response:
        msg = self.get_message(request.match_info["mid"])
        if msg is None or msg["channel_id"] != request.match_info["cid"]:
            return u.error(404, 10008, "Unknown Message")
        self._delete_message(msg["id"])
        return u.no_content()

    async def _h_typing(self, request: web.Request) -> web.Response:
        ch, err = self._channel_or_404(request.match_info["cid"])
        if err:
            return err
        self.typing_log.append({"channel_id": ch.id, "time": u.iso()})
        return u.no_content()

    async def _h_react(self, request: web.Request, add: bool = True) -> web.Response:
        cid, mid, emoji = (request.match_info[k] for k in ("cid", "mid", "emoji"))
        if cid not in self.channels:
            return u.error(404, 10003, "Unknown Channel")
        if not self._set_reaction(cid, mid, self.bot_user_id, emoji, add=add):
            return u.error(404, 10008, "Unknown Message")
        return u.no_content()

    async def _h_unreact(self, request: web.Request) -> web.Response:
        return await self._h_react(request, add=False)

    async def _h_reaction_users(self, request: web.Request) -> web.Response:
        users = self._reaction_users.get((request.match_info["mid"], request.match_info["emoji"]), [])
        return u.json_response([self.user_json(x) for x in users])

    # ------------------------------------------------------------- the CDN
    async def _h_cdn(self, request: web.Request) -> web.Response:
        """An attachment's bytes, while its signed URL has not expired (Discord: 404 after)."""
        aid = request.match_info["aid"]
        try:
            expires = int(request.query.get("ex", ""), 16)
        except ValueError:
            expires = 0
        if aid not in self.files or (aid, expires) not in self.file_expiry or expires < time.time():
            return web.Response(status=404, text="This content is no longer available.")
        content_type, data = self.files[aid]
        return web.Response(body=data, headers={"Content-Type": content_type})

    async def _h_refresh_urls(self, request: web.Request) -> web.Response:
        """POST /attachments/refresh-urls: fresh signed URLs for attachment URLs."""
        urls = (request[u.BODY] or {}).get("attachment_urls") or []
        out = []
        for url in urls:
            m = re.search(r"/cdn/attachments/(\d+)/(\d+)/([^?]+)", str(url))
            if m and m.group(2) in self.files:
                out.append({"original": url, "refreshed": self.cdn_url(m.group(1), m.group(2), m.group(3))})
        self.refreshed_urls.extend(out)
        return u.json_response({"refreshed_urls": out})
