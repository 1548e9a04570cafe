"""Small helpers: snowflakes, timestamps, permission bits, JSON responses."""
from __future__ import annotations

import datetime as _dt
import json
import re
import secrets
import string
import threading
import time
from typing import Any

from aiohttp import web

DISCORD_EPOCH_MS = 1420070400000

# Permission bits (explicit; we never hand out ADMINISTRATOR).
CREATE_INSTANT_INVITE = 1 << 0
ADMINISTRATOR = 1 << 3
MANAGE_CHANNELS = 1 << 4
MANAGE_GUILD = 1 << 5
ADD_REACTIONS = 1 << 6
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
MANAGE_MESSAGES = 1 << 13
EMBED_LINKS = 1 << 14
ATTACH_FILES = 1 << 15
READ_MESSAGE_HISTORY = 1 << 16
MENTION_EVERYONE = 1 << 17
USE_EXTERNAL_EMOJIS = 1 << 18
CHANGE_NICKNAME = 1 << 26
MANAGE_ROLES = 1 << 28
MANAGE_WEBHOOKS = 1 << 29
USE_APPLICATION_COMMANDS = 1 << 31
MANAGE_THREADS = 1 << 34
CREATE_PUBLIC_THREADS = 1 << 35
SEND_MESSAGES_IN_THREADS = 1 << 38

EVERYONE_PERMS = (
    CREATE_INSTANT_INVITE | ADD_REACTIONS | VIEW_CHANNEL | SEND_MESSAGES | EMBED_LINKS
    | ATTACH_FILES | READ_MESSAGE_HISTORY | USE_EXTERNAL_EMOJIS | CHANGE_NICKNAME
    | USE_APPLICATION_COMMANDS | CREATE_PUBLIC_THREADS | SEND_MESSAGES_IN_THREADS
)
ADMIN_PERMS = (EVERYONE_PERMS | MANAGE_GUILD | MANAGE_CHANNELS | MANAGE_MESSAGES | MANAGE_ROLES | MANAGE_WEBHOOKS
               | MANAGE_THREADS | MENTION_EVERYONE)
ALL_PERMS = (1 << 51) - 1
BOT_PERMS = EVERYONE_PERMS | MANAGE_WEBHOOKS | MANAGE_MESSAGES | MANAGE_THREADS | MENTION_EVERYONE

# Application flags: the Message Content intent is on (verified apps; unverified ones).
APP_GATEWAY_MESSAGE_CONTENT = 1 << 18
APP_GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19

# Gateway intents that Discord treats as privileged.
INTENT_MEMBERS = 1 << 1
INTENT_PRESENCES = 1 << 8
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = INTENT_MEMBERS | INTENT_PRESENCES | INTENT_MESSAGE_CONTENT

TOKEN_ALPHABET = string.ascii_letters + string.digits + "._-"


class SnowflakeFactory:
    """Time-based snowflakes, strictly increasing even within one millisecond."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            value = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
            if value <= self._last:
                value = self._last + 1
            self._last = value
            return str(value)


def snowflake_time(snowflake: str | int) -> _dt.datetime:
    ms = (int(snowflake) >> 22) + DISCORD_EPOCH_MS
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)


def iso(when: _dt.datetime | None = None) -> str:
    when = when or _dt.datetime.now(_dt.UTC)
    return when.isoformat(timespec="microseconds")


def iso_from_snowflake(snowflake: str | int) -> str:
    return iso(snowflake_time(snowflake))


def random_token(length: int = 68) -> str:
    return "".join(secrets.choice(TOKEN_ALPHABET) for _ in range(length))


def json_response(data: Any, status: int = 200, headers: dict[str, Any] | None = None) -> web.Response:
    # Content-Type must be exactly "application/json" (no charset), or
    # discord.py treats the body as a string.
    resp = web.Response(body=json.dumps(data).encode("utf-8"), status=status, headers=headers or {})
    resp.headers["Content-Type"] = "application/json"
    return resp


def no_content() -> web.Response:
    return web.Response(status=204)


def error(status: int, code: int, message: str, errors: dict[str, Any] | None = None) -> web.Response:
    return json_response({"message": message, "code": code, "errors": errors or {}}, status=status)


def form_error(field: str, code: str, message: str) -> web.Response:
    return error(400, 50035, "Invalid Form Body",
                 {field: {"_errors": [{"code": code, "message": message}]}})


USER_MENTION = re.compile(r"<@!?(\d{15,21})>")
ROLE_MENTION = re.compile(r"<@&(\d{15,21})>")

# Keys under which the middleware stores the parsed request for handlers.
if hasattr(web, "RequestKey"):
    BODY: web.RequestKey[Any] = web.RequestKey("emu_body", object)  # a JSON body: a dict, a list or None
    FILES: web.RequestKey[Any] = web.RequestKey("emu_files", list)
    RECORD: web.RequestKey[Any] = web.RequestKey("emu_record", object)
else:  # pragma: no cover - older aiohttp
    BODY, FILES, RECORD = "emu_body", "emu_files", "emu_record"  # type: ignore[assignment]  # plain keys there
