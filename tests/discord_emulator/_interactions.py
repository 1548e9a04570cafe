"""Test-side interaction builders (slash commands, autocomplete, modal
submits, component clicks) and the InteractionRecord tests await on."""
from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import _util as u

if TYPE_CHECKING:  # what the other mixins give DiscordEmulator (see _shape)
    from ._shape import Emulator
else:
    Emulator = object

_SUBCOMMAND_TYPES = (1, 2)


class InteractionRecord:
    """What happened to one interaction the emulator sent to the bot."""

    def __init__(self, emu: Emulator, payload: dict[str, Any]) -> None:
        self._emu = emu
        self.payload = payload
        self.id: str = payload["id"]
        self.token: str = payload["token"]
        self.type: int = payload["type"]
        self.guild_id: str = payload["guild_id"]  # (the emulator's interactions are all in a guild's channel)
        self.channel_id: str = payload["channel_id"]
        self.user_id: str = payload["member"]["user"]["id"] if "member" in payload else payload["user"]["id"]
        self.message: dict[str, Any] | None = payload.get("message")
        self.created = time.monotonic()
        self.callbacks: list[dict[str, Any]] = []    # {"type", "data", "flags", "ephemeral", "time"}
        self.followups: list[dict[str, Any]] = []    # message payloads
        self.edits: list[dict[str, Any]] = []        # {"message_id", "body"} for PATCH @original / messages/{id}
        self.deleted_messages: list[str] = []
        self.original: dict[str, Any] | None = None

    @property
    def response(self) -> dict[str, Any] | None:
        return self.callbacks[0] if self.callbacks else None

    def find_message(self, mid: str) -> dict[str, Any] | None:
        if mid == "@original":
            return self.original
        if self.original is not None and self.original["id"] == mid:
            return self.original
        for msg in self.followups:
            if msg["id"] == mid:
                return self._emu.get_message(mid) or msg
        return None

    async def wait_response(self, timeout: float = 5.0) -> dict[str, Any]:
        """The first callback: {"type", "data", "flags", "ephemeral"}."""
        await self._emu.wait_for(lambda: self.callbacks, timeout=timeout,
                                 what=f"callback for interaction {self.id}")
        return self.callbacks[0]

    async def wait_followups(self, count: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        await self._emu.wait_for(lambda: len(self.followups) >= count, timeout=timeout,
                                 what=f"{count} followup(s) for interaction {self.id}")
        return list(self.followups)

    async def wait_original(self, predicate: Callable[[dict[str, Any]], bool] | None = None,
                            timeout: float = 5.0) -> dict[str, Any]:
        """The original response message, optionally once predicate(msg) holds
        (e.g. lambda m: not m["flags"] & 128 for a finished deferral)."""
        pred = predicate or (lambda m: True)
        await self._emu.wait_for(lambda: self.original is not None and pred(self.original),
                                 timeout=timeout, what=f"original response of {self.id}")
        assert self.original is not None
        return self.original

    def __repr__(self) -> str:
        return f"<InteractionRecord id={self.id} type={self.type} callbacks={len(self.callbacks)}>"


class InteractionsMixin(Emulator):
    """Mixed into DiscordEmulator."""

    interaction_ack_deadline: float | None = 3.0
    attachment_size_limit: int = 10 * 1024 * 1024  # what the app may upload in answers (Discord: per guild tier)

    def _init_interactions(self) -> None:
        self.interactions: dict[str, InteractionRecord] = {}
        self.interactions_by_token: dict[str, InteractionRecord] = {}

    @property
    def all_callbacks(self) -> list[tuple[Any, ...]]:
        """[(InteractionRecord, callback dict)] for every interaction, oldest first."""
        return [(rec, cb) for rec in self.interactions.values() for cb in rec.callbacks]

    # ------------------------------------------------------------- payload
    def _interaction_payload(self, itype: int, guild_id: str, channel_id: str, user_id: str,
                             data: dict[str, Any] | None, message: dict[str, Any] | None = None) -> dict[str, Any]:
        guild_id, channel_id, user_id = str(guild_id), str(channel_id), str(user_id)
        if user_id not in self.guilds[guild_id].members:
            raise ValueError(f"user {user_id} is not a member of guild {guild_id}")
        perms = self.member_permissions(guild_id, user_id)
        channel = dict(self.channel_json(channel_id), permissions=str(perms))
        payload = {
            "id": self.snowflake(), "application_id": self.application_id, "type": itype,
            "token": "aW50ZXJhY3Rpb24" + u.random_token(160), "version": 1,
            "guild_id": guild_id, "guild": {"id": guild_id, "locale": "en-US", "features": []},
            "channel_id": channel_id, "channel": channel,
            "member": self.member_json(guild_id, user_id, permissions=True),
            "app_permissions": str(self.bot_permissions(guild_id)),
            "locale": "en-US", "guild_locale": "en-US", "entitlements": [],
            "authorizing_integration_owners": {"0": guild_id}, "context": 0,
            "attachment_size_limit": self.attachment_size_limit,
        }
        if data is not None:
            payload["data"] = data
        if message is not None:
            payload["message"] = copy.deepcopy(message)
        return payload

    def _send_interaction(self, payload: dict[str, Any]) -> InteractionRecord:
        rec = InteractionRecord(self, payload)
        self.interactions[rec.id] = rec
        self.interactions_by_token[rec.token] = rec
        self.dispatch("INTERACTION_CREATE", payload)
        return rec

    # ------------------------------------------------------------- commands
    def find_command(self, name: str, guild_id: str | None = None, cmd_type: int = 1) -> dict[str, Any]:
        """A synced command by name: guild commands of guild_id first, then global ones."""
        for scope in ([str(guild_id)] if guild_id else []) + [None]:
            for cmd in self.synced_commands.get(scope, []):
                if cmd["name"] == name and cmd["type"] == cmd_type:
                    return cmd
        raise LookupError(f"command {name!r} (type {cmd_type}) was never synced "
                          f"(synced: { {k: [c['name'] for c in v] for k, v in self.synced_commands.items()} })")

    def _resolve(self, resolved: dict[str, Any], guild_id: str, opt_type: int, value: Any) -> None:
        value = str(value)
        if opt_type in (6, 9) and value in self.users:
            resolved.setdefault("users", {})[value] = self.user_json(value)
            if value in self.guilds[guild_id].members:
                member = self.member_json(guild_id, value, with_user=False, permissions=True)
                resolved.setdefault("members", {})[value] = member
        elif opt_type == 7 and value in self.channels:
            ch = dict(self.channel_json(value), permissions=str(u.EVERYONE_PERMS))
            resolved.setdefault("channels", {})[value] = ch
        elif opt_type in (8, 9) and value in self.guilds[guild_id].roles:
            resolved.setdefault("roles", {})[value] = self.guilds[guild_id].roles[value].to_json()
        elif opt_type == 11 and value in self.uploads:
            resolved.setdefault("attachments", {})[value] = copy.deepcopy(self.uploads[value])

    def _build_options(self, defs: list[dict[str, Any]], path: Sequence[str], values: Mapping[str, Any],
                       guild_id: str, resolved: dict[str, Any], focused: str | None) -> list[dict[str, Any]]:
        if path:
            sub = next((o for o in defs if o["name"] == path[0] and o["type"] in _SUBCOMMAND_TYPES), None)
            if sub is None:
                raise ValueError(f"no subcommand/group {path[0]!r}; have {[o['name'] for o in defs]}")
            return [{"type": sub["type"], "name": sub["name"],
                     "options": self._build_options(sub.get("options", []), path[1:], values,
                                                    guild_id, resolved, focused)}]
        if any(o["type"] in _SUBCOMMAND_TYPES for o in defs):
            raise ValueError(f"a subcommand path is required; choose from {[o['name'] for o in defs]}")
        out = []
        for name, value in values.items():
            opt = next((o for o in defs if o["name"] == name), None)
            if opt is None:
                raise ValueError(f"unknown option {name!r}; have {[o['name'] for o in defs]}")
            t = opt["type"]
            if name == focused:
                out.append({"type": t, "name": name, "value": str(value), "focused": True})
                continue
            out.append({"type": t, "name": name, "value": self._option_value(t, value, guild_id, resolved)})
        if focused is None:
            missing = [o["name"] for o in defs if o.get("required") and o["name"] not in values]
            if missing:
                raise ValueError(f"missing required option(s) {missing}")
        return out

    def _option_value(self, t: int, value: Any, guild_id: str, resolved: dict[str, Any]) -> Any:
        """An option's value as Discord sends one of type `t`; a user, channel, role, mentionable or
        attachment is added to `resolved` too."""
        if t == 4:
            return int(value)
        if t == 10:
            return float(value)
        if t == 5:
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
        if t in (6, 7, 8, 9, 11):
            self._resolve(resolved, guild_id, t, str(value))
        return str(value)

    def _command_data(self, guild_id: str, name: str, options: Mapping[str, Any] | None,
                      subcommand_path: Sequence[str], focused: str | None = None) -> dict[str, Any]:
        parts = name.split()
        name, subcommand_path = parts[0], tuple(parts[1:]) + tuple(subcommand_path)
        cmd = self.find_command(name, guild_id)
        resolved: dict[str, Any] = {}
        opts = self._build_options(cmd.get("options", []), subcommand_path, dict(options or {}),
                                   str(guild_id), resolved, focused)
        data = {"id": cmd["id"], "name": cmd["name"], "type": cmd["type"], "options": opts}
        if cmd.get("guild_id"):
            data["guild_id"] = cmd["guild_id"]
        if resolved:
            data["resolved"] = resolved
        return data

    async def invoke_command(self, guild_id: str, channel_id: str, user_id: str, name: str,
                             options: Mapping[str, Any] | None = None, *,
                             subcommand_path: Sequence[str] = ()) -> InteractionRecord:
        """Run a synced slash command as user_id (type 2). name may be "group sub"."""
        data = self._command_data(guild_id, name, options, subcommand_path)
        return self._send_interaction(self._interaction_payload(2, guild_id, channel_id, user_id, data))

    async def invoke_message_command(self, guild_id: str, channel_id: str, user_id: str, name: str,
                                     message_id: str) -> InteractionRecord:
        """A message context-menu command (type 3) run on a stored message."""
        cmd = self.find_command(name, guild_id, cmd_type=3)
        message = self.get_message(str(message_id))
        if message is None:
            raise KeyError(f"unknown message {message_id!r}")
        data = {"id": cmd["id"], "name": cmd["name"], "type": 3, "target_id": str(message_id),
                "resolved": {"messages": {str(message_id): copy.deepcopy(message)}}}
        if cmd.get("guild_id"):
            data["guild_id"] = cmd["guild_id"]
        return self._send_interaction(self._interaction_payload(2, guild_id, channel_id, user_id, data))

    async def invoke_autocomplete(self, guild_id: str, channel_id: str, user_id: str, name: str,
                                  options: Mapping[str, Any], focused: str, *,
                                  subcommand_path: Sequence[str] = ()) -> InteractionRecord:
        """Autocomplete request (type 4); the callback (type 8) carries data["choices"]."""
        data = self._command_data(guild_id, name, options, subcommand_path, focused=focused)
        return self._send_interaction(self._interaction_payload(4, guild_id, channel_id, user_id, data))

    async def submit_modal(self, guild_id: str, channel_id: str, user_id: str, custom_id: str,
                           fields: Mapping[str, str], *, message: dict[str, Any] | None = None) -> InteractionRecord:
        """MODAL_SUBMIT (type 5): one action row with a text input per field."""
        rows = [{"type": 1, "components": [{"type": 4, "custom_id": k, "value": v}]}
                for k, v in fields.items()]
        data = {"custom_id": custom_id, "components": rows}
        return self._send_interaction(
            self._interaction_payload(5, guild_id, channel_id, user_id, data, message=message))

    async def click_button(self, message: Any, custom_id: str, user_id: str, *,
                           component_type: int = 2, values: list[str] | None = None) -> InteractionRecord:
        """A component interaction (type 3) on a stored message (dict or id)."""
        msg = message if isinstance(message, dict) else self.get_message(str(message))
        if msg is None:
            raise KeyError(f"unknown message {message!r}")
        msg = self.get_message(msg["id"]) or msg
        guild_id = self.channels[msg["channel_id"]].guild_id
        data: dict[str, Any] = {"custom_id": custom_id, "component_type": component_type}
        if values is not None:
            data["values"] = list(values)
        return self._send_interaction(
            self._interaction_payload(3, guild_id, msg["channel_id"], user_id, data, message=msg))
