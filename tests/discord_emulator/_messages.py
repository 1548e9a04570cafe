"""Message construction, storage, history and the test-side posting helpers."""
from __future__ import annotations

import copy
import hashlib
import mimetypes
import struct
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import _util as u

if TYPE_CHECKING:  # what the other mixins give DiscordEmulator (see _shape)
    from ._shape import Emulator
else:
    Emulator = object


class MessagesMixin(Emulator):
    """Mixed into DiscordEmulator (needs StateMixin and GatewayMixin)."""

    # ------------------------------------------------------------- building
    def _compute_mentions(self, content: str, allowed: dict[str, Any] | None,
                          replied_author: str | None = None) -> dict[str, Any]:
        user_ids = list(dict.fromkeys(u.USER_MENTION.findall(content or "")))
        role_ids = list(dict.fromkeys(u.ROLE_MENTION.findall(content or "")))
        everyone = "@everyone" in (content or "") or "@here" in (content or "")
        reply_ping = replied_author is not None
        if allowed is not None:
            parse = allowed.get("parse") or []
            if "users" not in parse:
                user_ids = [x for x in user_ids if x in [str(i) for i in allowed.get("users") or []]]
            if "roles" not in parse:
                role_ids = [x for x in role_ids if x in [str(i) for i in allowed.get("roles") or []]]
            everyone = everyone and "everyone" in parse
            reply_ping = reply_ping and bool(allowed.get("replied_user", False))
        if reply_ping and replied_author not in user_ids:
            user_ids.append(replied_author)
        return {
            "mentions": [self.user_json(x) for x in user_ids if x in self.users],
            "mention_roles": role_ids,
            "mention_everyone": everyone,
        }

    def _attachment_json(self, att: Any, channel_id: str = "0") -> dict[str, Any]:
        """An attachment object. Uploaded bytes are kept and served at a signed, expiring URL
        on this emulator (`/cdn/attachments/...?ex=<hex expiry>&hm=...`), like Discord's CDN.

        `att`: a filename, a `(filename, bytes)` pair, or a dict {"filename", "data", "content_type",
        "size", "width", "height", ...}. As Discord does, the content type is guessed from the name
        when not given, and a PNG's width and height are read from its header."""
        if isinstance(att, str):
            att = {"filename": att}
        elif isinstance(att, tuple):
            att = {"filename": att[0], "data": att[1]}
        aid = self.snowflake()
        name = att.get("filename", "file.bin")
        blob = att.get("data", b"")
        ctype = att.get("content_type") or mimetypes.guess_type(name)[0]
        if ctype and ctype.startswith("text/") and "charset" not in ctype:
            ctype += "; charset=utf-8"
        self.files[aid] = (ctype or "application/octet-stream", blob)
        url = self.cdn_url(channel_id, aid, name)
        data = {"id": aid, "filename": name, "size": att.get("size", len(blob)), "url": url, "proxy_url": url,
                "content_type": ctype, "flags": 0}
        if blob[:8] == b"\x89PNG\r\n\x1a\n" and len(blob) >= 24:
            data["width"], data["height"] = struct.unpack(">II", blob[16:24])
        data.update({k: v for k, v in att.items() if k not in ("id", "data")})
        return data

    def cdn_url(self, channel_id: str, aid: str, name: str) -> str:
        expires = int(time.time() + self.attachment_ttl)
        self.file_expiry[(aid, expires)] = expires
        hm = hashlib.md5(f"{aid}{expires}".encode(), usedforsecurity=False).hexdigest()
        return (f"http://127.0.0.1:{self.port}/cdn/attachments/{channel_id}/{aid}/{name}"
                f"?ex={expires:x}&is={int(time.time()):x}&hm={hm}")

    def upload(self, filename: str, data: bytes, content_type: str = "image/png") -> dict[str, Any]:
        """An attachment a person attaches to a slash command option: give its id as the value."""
        att = self._attachment_json({"filename": filename, "data": data, "content_type": content_type,
                                     "size": len(data)}, "0")
        self.uploads[att["id"]] = att
        return att

    def _build_message(self, channel_id: str, author: dict[str, Any], content: str = "", *,
                       embeds: list[Any] | None = None, allowed_mentions: dict[str, Any] | None = None,
                       reference_message_id: str | None = None, attachments: Iterable[Any] = (),
                       webhook_id: str | None = None, flags: int = 0, msg_type: int = 0,
                       components: list[Any] | None = None, application_id: str | None = None,
                       extra: dict[str, Any] | None = None, mention_author: bool = True) -> dict[str, Any]:
        mid = self.snowflake()
        channel = self.channels[str(channel_id)]
        referenced = None
        if reference_message_id is not None:
            referenced = self.get_message(str(reference_message_id))
        replied_author = None
        if referenced is not None and mention_author and not referenced.get("webhook_id"):
            replied_author = referenced["author"]["id"]
        if allowed_mentions is not None and referenced is not None and "replied_user" not in allowed_mentions:
            replied_author = None
        msg: dict[str, Any] = {
            "id": mid, "type": 19 if referenced is not None and msg_type == 0 else msg_type,
            "channel_id": channel.id, "author": author, "content": content or "",
            "timestamp": u.iso_from_snowflake(mid), "edited_timestamp": None, "tts": False,
            "embeds": list(embeds or []), "attachments": [self._attachment_json(a, channel.id) for a in attachments],
            "components": list(components or []), "reactions": [], "pinned": False, "flags": flags,
            "nonce": None,
        }
        msg.update(self._compute_mentions(content, allowed_mentions, replied_author))
        if webhook_id:
            msg["webhook_id"] = webhook_id
        if application_id:
            msg["application_id"] = application_id
        if reference_message_id is not None:
            msg["message_reference"] = {"type": 0, "message_id": str(reference_message_id),
                                        "channel_id": channel.id, "guild_id": channel.guild_id,
                                        "fail_if_not_exists": False}
            if referenced is not None:
                ref = copy.deepcopy(referenced)
                ref.pop("referenced_message", None)
                msg["referenced_message"] = ref
            else:
                msg["referenced_message"] = None
        if extra:
            msg.update(extra)
        return msg

    def _store_message(self, msg: dict[str, Any]) -> None:
        cid = msg["channel_id"]
        self.messages.setdefault(cid, []).append(msg)
        self.messages[cid].sort(key=lambda m: int(m["id"]))
        self._message_index[msg["id"]] = cid
        self.channels[cid].last_message_id = msg["id"]

    def _gateway_message(self, msg: dict[str, Any], member_user_id: str | None) -> dict[str, Any]:
        data = copy.deepcopy(msg)
        guild_id = self.channels[msg["channel_id"]].guild_id
        data["guild_id"] = guild_id
        guild = self.guilds[guild_id]
        if member_user_id and member_user_id in guild.members:
            data["member"] = self.member_json(guild_id, member_user_id, with_user=False)
        for mention in data.get("mentions", []):
            if mention["id"] in guild.members:
                mention["member"] = self.member_json(guild_id, mention["id"], with_user=False)
        return data

    def _dispatch_message(self, event: str, msg: dict[str, Any], member_user_id: str | None) -> None:
        self.dispatch(event, self._gateway_message(msg, member_user_id))

    def _author_json(self, user_id: str) -> dict[str, Any]:
        return self.user_json(user_id)

    @staticmethod
    def _webhook_author(webhook_id: str, username: str, avatar_url: str | None) -> dict[str, Any]:
        avatar = hashlib.md5(avatar_url.encode(), usedforsecurity=False).hexdigest() if avatar_url else None
        return {"id": webhook_id, "username": username, "avatar": avatar, "discriminator": "0000",
                "bot": True, "global_name": None, "public_flags": 0, "flags": 0}

    # ------------------------------------------------------------- history
    def _history(self, channel_id: str, limit: int = 50, before: str | None = None,
                 after: str | None = None, around: str | None = None) -> list[dict[str, Any]]:
        """Discord semantics: always answered newest-first."""
        msgs = sorted(self.messages.get(str(channel_id), []), key=lambda m: int(m["id"]))
        limit = max(1, min(int(limit), 100))
        if around is not None:
            a = int(around)
            older = [m for m in msgs if int(m["id"]) < a]
            rest = [m for m in msgs if int(m["id"]) >= a]
            half = limit // 2
            low = older[-half:] if half else []
            sel = low + rest[: limit - len(low)]
        elif before is not None:
            sel = [m for m in msgs if int(m["id"]) < int(before)][-limit:]
        elif after is not None:
            sel = [m for m in msgs if int(m["id"]) > int(after)][:limit]
        else:
            sel = msgs[-limit:]
        return copy.deepcopy(list(reversed(sel)))

    # ------------------------------------------------------------- test-side helpers
    async def user_post(self, channel_id: str, user_id: str, content: str, *,
                        reference_message_id: str | None = None, attachments: Iterable[Any] | None = None,
                        embeds: list[Any] | None = None, dispatch: bool = True,
                        mention_author: bool = True) -> dict[str, Any]:
        """A person posts in a channel/thread. Stored, then MESSAGE_CREATE unless dispatch=False.

        attachments: files the person attached, each a `(filename, bytes)` pair, a filename alone
        (no bytes), or a dict {"filename", "data", "content_type", "size", "width", "height"}.
        The bytes are served at a signed CDN URL that expires after `attachment_ttl` seconds
        (POST /attachments/refresh-urls gives fresh ones); the content type is guessed from the
        name, a PNG's width and height read from it. For example:

            await emu.user_post(emu.channel_id, emu.alice_id, "@planner what is wrong here?",
                                attachments=[("screenshot.png", png_bytes), ("app.py", source.encode())])
        """
        channel = self.channels[str(channel_id)]
        user_id = str(user_id)
        if user_id not in self.guilds[channel.guild_id].members:
            raise ValueError(f"user {user_id} is not a member of guild {channel.guild_id}")
        msg = self._build_message(channel.id, self._author_json(user_id), content, embeds=embeds,
                                  reference_message_id=reference_message_id,
                                  attachments=attachments or (), mention_author=mention_author)
        self._store_message(msg)
        if dispatch:
            self._dispatch_message("MESSAGE_CREATE", msg, user_id)
        return copy.deepcopy(msg)

    async def user_edit(self, message_id: str, content: str, *, dispatch: bool = True,
                        keep_attachments: Iterable[str] | None = None) -> dict[str, Any]:
        """A person edits their message (MESSAGE_UPDATE, the whole message as Discord sends it).
        `keep_attachments`: the ids of the files it keeps (Discord lets an edit remove files, not add
        them); None keeps them all."""
        msg = self.get_message(str(message_id))
        if msg is None:
            raise KeyError(message_id)
        if keep_attachments is not None:
            kept = {str(a) for a in keep_attachments}
            msg["attachments"] = [a for a in msg.get("attachments", []) if a["id"] in kept]
        msg["content"] = content
        msg["edited_timestamp"] = u.iso()
        msg.update(self._compute_mentions(content, None))
        if dispatch:
            self._dispatch_message("MESSAGE_UPDATE", msg, msg["author"]["id"])
        return copy.deepcopy(msg)

    async def user_delete(self, message_id: str, *, dispatch: bool = True) -> None:
        """A message disappears (MESSAGE_DELETE)."""
        self._delete_message(str(message_id), dispatch=dispatch)

    async def bulk_delete(self, channel_id: str, message_ids: Iterable[str], *, dispatch: bool = True) -> None:
        """Messages of one channel disappear at once (MESSAGE_DELETE_BULK: a moderator's purge)."""
        cid = str(channel_id)
        gone = [str(m) for m in message_ids if self._message_index.get(str(m)) == cid]
        for message_id in gone:
            self._delete_message(message_id, dispatch=False)
        if dispatch and gone:
            self.dispatch("MESSAGE_DELETE_BULK", {"ids": gone, "channel_id": cid,
                                                  "guild_id": self.channels[cid].guild_id})

    def _delete_message(self, message_id: str, *, dispatch: bool = True) -> bool:
        cid = self._message_index.pop(message_id, None)
        if cid is None:
            return False
        self.messages[cid] = [m for m in self.messages[cid] if m["id"] != message_id]
        if dispatch:
            self.dispatch("MESSAGE_DELETE", {"id": message_id, "channel_id": cid,
                                             "guild_id": self.channels[cid].guild_id})
        return True

    async def user_react(self, channel_id: str, message_id: str, user_id: str, emoji: str,
                         *, remove: bool = False) -> None:
        """A person adds (or removes) a unicode reaction."""
        self._set_reaction(str(channel_id), str(message_id), str(user_id), emoji, add=not remove)

    def _emoji_json(self, emoji: str) -> dict[str, Any]:
        if ":" in emoji:
            name, _, eid = emoji.partition(":")
            return {"id": eid, "name": name}
        return {"id": None, "name": emoji}

    def _set_reaction(self, channel_id: str, message_id: str, user_id: str, emoji: str, *, add: bool) -> bool:
        msg = self.get_message(message_id)
        if msg is None or msg["channel_id"] != channel_id:
            return False
        key = (message_id, emoji)
        users = self._reaction_users.setdefault(key, [])
        changed = (user_id not in users) if add else (user_id in users)
        if not changed:
            return True
        users.append(user_id) if add else users.remove(user_id)
        ej = self._emoji_json(emoji)
        msg["reactions"] = [r for r in msg["reactions"] if r["emoji"] != ej]
        if users:
            msg["reactions"].append({"emoji": ej, "count": len(users), "me": self.bot_user_id in users,
                                     "me_burst": False, "burst_colors": [],
                                     "count_details": {"burst": 0, "normal": len(users)}})
        guild_id = self.channels[channel_id].guild_id
        data: dict[str, Any] = {"user_id": user_id, "channel_id": channel_id, "message_id": message_id,
                                "guild_id": guild_id, "emoji": ej, "burst": False, "type": 0}
        if add:
            data["member"] = self.member_json(guild_id, user_id)
            data["message_author_id"] = msg["author"]["id"]
        self.dispatch("MESSAGE_REACTION_ADD" if add else "MESSAGE_REACTION_REMOVE", data)
        return True

    def reactions_of(self, message_id: str) -> dict[str, list[str]]:
        """{emoji: [user ids]} for a stored message."""
        return {e: list(us) for (m, e), us in self._reaction_users.items() if m == str(message_id) and us}
