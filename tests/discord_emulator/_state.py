"""In-memory Discord state (guilds, roles, channels, users, members, messages)
plus the JSON serialisers that turn it into Discord API payloads."""
from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _util as u


@dataclass
class Role:
    id: str
    guild_id: str
    name: str
    permissions: int
    position: int = 0
    managed: bool = False
    bot_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {
            "id": self.id, "name": self.name, "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False, "icon": None, "unicode_emoji": None, "position": self.position,
            "permissions": str(self.permissions), "managed": self.managed,
            "mentionable": False, "flags": 0,
        }
        if self.bot_id:
            data["tags"] = {"bot_id": self.bot_id}
        return data


@dataclass
class Channel:
    id: str
    guild_id: str
    name: str
    type: int = 0  # 0 text, 11 public thread
    position: int = 0
    topic: str | None = None
    parent_id: str | None = None
    owner_id: str | None = None
    last_message_id: str | None = None
    overwrites: list[dict[str, Any]] = field(default_factory=list)  # {"id", "type": 0 role | 1 member, "allow", "deny"}

    @property
    def is_thread(self) -> bool:
        return self.type in (10, 11, 12)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id, "type": self.type, "guild_id": self.guild_id, "name": self.name,
            "last_message_id": self.last_message_id, "rate_limit_per_user": 0,
            "parent_id": self.parent_id, "flags": 0,
        }
        if self.is_thread:
            data.update({
                "owner_id": self.owner_id, "message_count": 0, "member_count": 1,
                "total_message_sent": 0,
                "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                    "archive_timestamp": u.iso_from_snowflake(self.id),
                                    "locked": False, "create_timestamp": u.iso_from_snowflake(self.id)},
            })
        else:
            data.update({"position": self.position, "permission_overwrites": copy.deepcopy(self.overwrites),
                         "topic": self.topic,
                         "nsfw": False, "default_auto_archive_duration": 1440})
        return data


@dataclass
class Member:
    user_id: str
    guild_id: str
    roles: list[str] = field(default_factory=list)
    joined_at: str = field(default_factory=u.iso)
    nick: str | None = None


@dataclass
class Guild:
    id: str
    name: str
    owner_id: str
    roles: dict[str, Role] = field(default_factory=dict)
    channel_ids: list[str] = field(default_factory=list)
    members: dict[str, Member] = field(default_factory=dict)
    admin_role_id: str | None = None


class StateMixin:
    """Builders and serialisers. Mixed into DiscordEmulator."""

    if TYPE_CHECKING:  # GatewayMixin's (the other mixins take all they use from `_shape.Emulator`)
        def dispatch(self, event: str, data: Any) -> None: ...

    def _init_state(self, token: str, bot_name: str) -> None:
        self.files: dict[str, tuple[str, bytes]] = {}  # attachment id -> (content type, bytes)
        self.file_expiry: dict[tuple[str, int], int] = {}  # (attachment id, ex) of URLs handed out
        self.uploads: dict[str, dict[str, Any]] = {}  # attachments given to slash command options
        self.attachment_ttl: float = 86400.0  # Discord's signed CDN URLs last about a day
        self.snowflake = u.SnowflakeFactory()
        self.token = token
        self.users: dict[str, dict[str, Any]] = {}
        self.guilds: dict[str, Guild] = {}
        self.channels: dict[str, Channel] = {}
        self.messages: dict[str, list[dict[str, Any]]] = {}      # channel id -> oldest-first payloads
        self._message_index: dict[str, str] = {}       # message id -> channel id
        self._reaction_users: dict[tuple[Any, ...], list[str]] = {}  # (message id, emoji) -> user ids
        self.application_id = self.snowflake()
        self.bot_user_id = self._new_user(bot_name, bot=True, user_id=self.application_id)
        self.application: dict[str, Any] = {
            "id": self.application_id, "name": bot_name, "description": "", "icon": None,
            "bot_public": True, "bot_require_code_grant": False, "verify_key": "0" * 64,
            "owner": None, "team": None, "flags": (1 << 19) | (1 << 23) | (1 << 13),
            "interactions_endpoint_url": None, "rpc_origins": [], "summary": "",
            "tags": [], "redirect_uris": [], "bot": None,
        }

    # ------------------------------------------------------------- builders
    def _announce(self, event: str, data: dict[str, Any]) -> None:
        """Dispatch to connected clients (no-op before the gateway exists)."""
        if getattr(self, "sessions", None):
            self.dispatch(event, data)

    def _new_user(self, username: str, *, bot: bool = False, user_id: str | None = None,
                  global_name: str | None = None) -> str:
        uid = user_id or self.snowflake()
        self.users[uid] = {
            "id": uid, "username": username, "global_name": global_name if not bot else None,
            "avatar": None, "discriminator": "0" if not bot else "0000", "public_flags": 0,
            "flags": 0, "bot": bot, "banner": None, "accent_color": None,
            "avatar_decoration_data": None, "primary_guild": None, "collectibles": None,
        }
        if bot:
            self.users[uid].update({"verified": True, "mfa_enabled": False, "email": None, "locale": "en-US"})
        return uid

    def add_guild(self, name: str, *, owner_id: str | None = None) -> str:
        gid = self.snowflake()
        guild = Guild(id=gid, name=name, owner_id=owner_id or self.bot_user_id)
        guild.roles[gid] = Role(id=gid, guild_id=gid, name="@everyone", permissions=u.EVERYONE_PERMS)
        bot_role = Role(id=self.snowflake(), guild_id=gid, name=self.users[self.bot_user_id]["username"],
                        permissions=u.BOT_PERMS, position=1, managed=True, bot_id=self.bot_user_id)
        guild.roles[bot_role.id] = bot_role
        guild.members[self.bot_user_id] = Member(self.bot_user_id, gid, roles=[bot_role.id])
        self.guilds[gid] = guild
        if owner_id and owner_id not in guild.members:
            guild.members[owner_id] = Member(owner_id, gid)
        if getattr(self, "sessions", None):
            self._announce("GUILD_CREATE", self.guild_json(gid, full=True))
        return gid

    def add_role(self, guild_id: str, name: str, *, permissions: int = 0) -> str:
        guild = self.guilds[str(guild_id)]
        role = Role(id=self.snowflake(), guild_id=guild.id, name=name, permissions=permissions,
                    position=len(guild.roles))
        guild.roles[role.id] = role
        self._announce("GUILD_ROLE_CREATE", {"guild_id": guild.id, "role": role.to_json()})
        return role.id

    def add_channel(self, guild_id: str, name: str, *, topic: str | None = None) -> str:
        guild = self.guilds[str(guild_id)]
        ch = Channel(id=self.snowflake(), guild_id=guild.id, name=name, topic=topic,
                     position=len(guild.channel_ids))
        self.channels[ch.id] = ch
        guild.channel_ids.append(ch.id)
        self.messages[ch.id] = []
        self._announce("CHANNEL_CREATE", ch.to_json())
        return ch.id

    def add_thread(self, parent_channel_id: str, name: str, *, owner_id: str | None = None) -> str:
        parent = self.channels[str(parent_channel_id)]
        th = Channel(id=self.snowflake(), guild_id=parent.guild_id, name=name, type=11,
                     parent_id=parent.id, owner_id=owner_id or self.bot_user_id)
        self.channels[th.id] = th
        self.guilds[parent.guild_id].channel_ids.append(th.id)
        self.messages[th.id] = []
        self._announce("THREAD_CREATE", dict(th.to_json(), newly_created=True))
        return th.id

    def add_user(self, username: str, *, global_name: str | None = None, bot: bool = False) -> str:
        return self._new_user(username, bot=bot, global_name=global_name or username.capitalize())

    def add_member(self, guild_id: str, username: str, *, admin: bool = False, roles: Iterable[str] = (),
                   user_id: str | None = None, global_name: str | None = None, nick: str | None = None) -> str:
        """Create a user (unless user_id is given) and add them to the guild."""
        guild = self.guilds[str(guild_id)]
        uid = str(user_id) if user_id else self.add_user(username, global_name=global_name)
        role_ids = [str(r) for r in roles]
        if admin:
            if guild.admin_role_id is None:
                guild.admin_role_id = self.add_role(guild.id, "Admin", permissions=u.ADMIN_PERMS)
            role_ids.append(guild.admin_role_id)
        guild.members[uid] = Member(uid, guild.id, roles=role_ids, nick=nick)
        self._announce("GUILD_MEMBER_ADD", dict(self.member_json(guild.id, uid), guild_id=guild.id))
        return uid

    # ------------------------------------------------------------- queries
    def member_permissions(self, guild_id: str, user_id: str) -> int:
        """OR of @everyone and the member's roles (owner gets no implicit bits)."""
        guild = self.guilds[str(guild_id)]
        member = guild.members.get(str(user_id))
        perms = guild.roles[guild.id].permissions
        for rid in (member.roles if member else []):
            role = guild.roles.get(rid)
            if role:
                perms |= role.permissions
        return perms

    def bot_permissions(self, guild_id: str, channel_id: str | None = None) -> int:
        """The bot's permissions in the guild, or in a channel (its overwrites applied)."""
        if channel_id is None:
            perms = self.member_permissions(guild_id, self.bot_user_id)
        else:
            perms = self.channel_permissions(channel_id, self.bot_user_id)
        if getattr(self, "deny_manage_webhooks", False):
            perms &= ~u.MANAGE_WEBHOOKS
        return perms

    def channel_permissions(self, channel_id: str, user_id: str) -> int:
        """A member's permissions in a channel, as Discord computes them: the guild's (@everyone and
        the member's roles; everything for the owner or an Administrator), then the channel's
        overwrites: @everyone's, the member's roles' (together), the member's own. A thread takes
        its parent's."""
        ch = self.channels[str(channel_id)]
        if ch.is_thread and ch.parent_id:
            ch = self.channels[ch.parent_id]
        guild = self.guilds[ch.guild_id]
        if guild.owner_id == str(user_id):
            return u.ALL_PERMS
        perms = self.member_permissions(guild.id, user_id)
        if perms & u.ADMINISTRATOR:
            return u.ALL_PERMS
        overwrites = {o["id"]: o for o in ch.overwrites}
        member = guild.members.get(str(user_id))
        everyone = overwrites.get(guild.id)
        if everyone:
            perms = (perms & ~int(everyone["deny"])) | int(everyone["allow"])
        allow = deny = 0
        for rid in (member.roles if member else []):
            o = overwrites.get(rid)
            if o:
                allow |= int(o["allow"])
                deny |= int(o["deny"])
        perms = (perms & ~deny) | allow
        own = overwrites.get(str(user_id))
        if own:
            perms = (perms & ~int(own["deny"])) | int(own["allow"])
        return perms

    def set_channel_permissions(self, channel_id: str, target_id: str, *, allow: int = 0, deny: int = 0) -> None:
        """An overwrite of a channel for a role or a member, as an admin sets it in the channel's
        settings (replacing that target's earlier one); connected clients get CHANNEL_UPDATE."""
        ch = self.channels[str(channel_id)]
        kind = 0 if str(target_id) in self.guilds[ch.guild_id].roles else 1
        ch.overwrites = [o for o in ch.overwrites if o["id"] != str(target_id)] + [
            {"id": str(target_id), "type": kind, "allow": str(allow), "deny": str(deny)}]
        self._announce("CHANNEL_UPDATE", ch.to_json())

    def bot_role_id(self, guild_id: str) -> str:
        """The bot's own (managed) role in a guild."""
        return next(r.id for r in self.guilds[str(guild_id)].roles.values() if r.bot_id == self.bot_user_id)

    def channel_messages(self, channel_id: str) -> list[dict[str, Any]]:
        """Stored messages of a channel (or thread), oldest first (copies)."""
        return copy.deepcopy(self.messages.get(str(channel_id), []))

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        cid = self._message_index.get(str(message_id))
        if cid is None:
            return None
        for msg in self.messages[cid]:
            if msg["id"] == str(message_id):
                return msg
        return None

    # ------------------------------------------------------------- serialisers
    def user_json(self, user_id: str) -> dict[str, Any]:
        return dict(self.users[str(user_id)])

    def member_json(self, guild_id: str, user_id: str, *, with_user: bool = True,
                    permissions: bool = False) -> dict[str, Any]:
        m = self.guilds[str(guild_id)].members[str(user_id)]
        data: dict[str, Any] = {
            "roles": list(m.roles), "joined_at": m.joined_at, "nick": m.nick, "avatar": None,
            "banner": None, "premium_since": None, "deaf": False, "mute": False, "pending": False,
            "flags": 0, "communication_disabled_until": None, "avatar_decoration_data": None,
        }
        if with_user:
            data["user"] = self.user_json(user_id)
        if permissions:
            data["permissions"] = str(self.member_permissions(guild_id, user_id))
        return data

    def channel_json(self, channel_id: str) -> dict[str, Any]:
        return self.channels[str(channel_id)].to_json()

    def guild_json(self, guild_id: str, *, full: bool = False) -> dict[str, Any]:
        g = self.guilds[str(guild_id)]
        data: dict[str, Any] = {
            "id": g.id, "name": g.name, "icon": None, "splash": None, "discovery_splash": None,
            "banner": None, "description": None, "owner_id": g.owner_id, "region": None,
            "afk_channel_id": None, "afk_timeout": 300, "verification_level": 0,
            "default_message_notifications": 0, "explicit_content_filter": 0, "mfa_level": 0,
            "nsfw_level": 0, "premium_tier": 0, "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False, "preferred_locale": "en-US", "features": [],
            "system_channel_id": None, "system_channel_flags": 0, "rules_channel_id": None,
            "public_updates_channel_id": None, "safety_alerts_channel_id": None,
            "vanity_url_code": None, "application_id": None, "max_members": 500000,
            "max_video_channel_users": 25, "emojis": [], "stickers": [],
            "roles": [r.to_json() for r in g.roles.values()],
            "approximate_member_count": len(g.members), "approximate_presence_count": 0,
        }
        if full:
            chans = [self.channels[c] for c in g.channel_ids]
            data.update({
                "joined_at": g.members[self.bot_user_id].joined_at, "large": False,
                "unavailable": False, "member_count": len(g.members),
                "members": [self.member_json(g.id, uid) for uid in g.members],
                "channels": [c.to_json() for c in chans if not c.is_thread],
                "threads": [c.to_json() for c in chans if c.is_thread],
                "presences": [], "voice_states": [], "stage_instances": [],
                "guild_scheduled_events": [], "soundboard_sounds": [], "embedded_activities": [],
                "lazy": True, "application_command_counts": {},
            })
        return data
