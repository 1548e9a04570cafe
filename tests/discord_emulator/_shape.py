"""What the emulator's mixins use of one another, for mypy: `DiscordEmulator` (`_server.py`) has all
of it. Each mixin but `StateMixin` takes `Emulator` as its base under TYPE_CHECKING only (at run time
the mixins are plain classes), and mypy checks that what each mixin defines matches what is said here.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from aiohttp import web

from . import _util as u
from ._state import Channel, Guild


class Emulator(Protocol):
    # the state (_state.py)
    files: dict[str, tuple[str, bytes]]
    file_expiry: dict[tuple[str, int], int]
    uploads: dict[str, dict[str, Any]]
    attachment_ttl: float
    snowflake: u.SnowflakeFactory
    token: str
    users: dict[str, dict[str, Any]]
    guilds: dict[str, Guild]
    channels: dict[str, Channel]
    messages: dict[str, list[dict[str, Any]]]
    _message_index: dict[str, str]
    _reaction_users: dict[tuple[Any, ...], list[str]]
    application_id: str
    bot_user_id: str
    application: dict[str, Any]

    def add_thread(self, parent_channel_id: str, name: str, *, owner_id: str | None = None) -> str: ...
    def member_permissions(self, guild_id: str, user_id: str) -> int: ...
    def bot_permissions(self, guild_id: str, channel_id: str | None = None) -> int: ...
    def get_message(self, message_id: str) -> dict[str, Any] | None: ...
    def user_json(self, user_id: str) -> dict[str, Any]: ...
    def member_json(self, guild_id: str, user_id: str, *, with_user: bool = True,
                    permissions: bool = False) -> dict[str, Any]: ...
    def channel_json(self, channel_id: str) -> dict[str, Any]: ...
    def guild_json(self, guild_id: str, *, full: bool = False) -> dict[str, Any]: ...

    # the server (_server.py)
    port: int
    pings: list[tuple[Any, ...]]
    typing_log: list[dict[str, Any]]
    owner_user_id: str | None
    privileged_intents_allowed: bool

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0,
                       interval: float = 0.01, what: str = "condition") -> Any: ...

    # the gateway (_gateway.py)
    @property
    def gateway_url(self) -> str: ...
    def dispatch(self, event: str, data: Any) -> None: ...

    # REST (_rest.py)
    synced_commands: dict[str | None, list[dict[str, Any]]]

    @staticmethod
    def _validate_content(body: dict[str, Any], files: list[Any]) -> web.Response | None: ...
    def _apply_edit(self, msg: dict[str, Any], body: dict[str, Any]) -> None: ...

    # messages (_messages.py)
    def _compute_mentions(self, content: str, allowed: dict[str, Any] | None,
                          replied_author: str | None = None) -> dict[str, Any]: ...
    def _attachment_json(self, att: Any, channel_id: str = "0") -> dict[str, Any]: ...
    def cdn_url(self, channel_id: str, aid: str, name: str) -> str: ...
    def _build_message(self, channel_id: str, author: dict[str, Any], content: str = "", *,
                       embeds: list[Any] | None = None, allowed_mentions: dict[str, Any] | None = None,
                       reference_message_id: str | None = None, attachments: Iterable[Any] = (),
                       webhook_id: str | None = None, flags: int = 0, msg_type: int = 0,
                       components: list[Any] | None = None, application_id: str | None = None,
                       extra: dict[str, Any] | None = None, mention_author: bool = True) -> dict[str, Any]: ...
    def _store_message(self, msg: dict[str, Any]) -> None: ...
    def _dispatch_message(self, event: str, msg: dict[str, Any], member_user_id: str | None) -> None: ...
    @staticmethod
    def _webhook_author(webhook_id: str, username: str, avatar_url: str | None) -> dict[str, Any]: ...
    def _history(self, channel_id: str, limit: int = 50, before: str | None = None,
                 after: str | None = None, around: str | None = None) -> list[dict[str, Any]]: ...
    def _delete_message(self, message_id: str, *, dispatch: bool = True) -> bool: ...
    def _set_reaction(self, channel_id: str, message_id: str, user_id: str, emoji: str, *, add: bool) -> bool: ...
