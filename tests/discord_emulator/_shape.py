"""What the emulator's mixins use of one another, for mypy: `DiscordEmulator` (`_server.py`) has all
of it. Each mixin but `StateMixin` takes `Emulator` as its base under TYPE_CHECKING only (at run time
the mixins are plain classes), and mypy checks that what each mixin defines matches what is said here.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Tuple

from aiohttp import web

from . import _util as u
from ._state import Channel, Guild


class Emulator(Protocol):
    # the state (_state.py)
    files: Dict[str, Tuple[str, bytes]]
    file_expiry: Dict[Tuple[str, int], int]
    uploads: Dict[str, dict]
    attachment_ttl: float
    snowflake: u.SnowflakeFactory
    token: str
    users: Dict[str, dict]
    guilds: Dict[str, Guild]
    channels: Dict[str, Channel]
    messages: Dict[str, List[dict]]
    _message_index: Dict[str, str]
    _reaction_users: Dict[tuple, List[str]]
    application_id: str
    bot_user_id: str
    application: Dict[str, Any]

    def add_thread(self, parent_channel_id: str, name: str, *, owner_id: Optional[str] = None) -> str: ...
    def member_permissions(self, guild_id: str, user_id: str) -> int: ...
    def bot_permissions(self, guild_id: str, channel_id: Optional[str] = None) -> int: ...
    def get_message(self, message_id: str) -> Optional[dict]: ...
    def user_json(self, user_id: str) -> dict: ...
    def member_json(self, guild_id: str, user_id: str, *, with_user: bool = True,
                    permissions: bool = False) -> dict: ...
    def channel_json(self, channel_id: str) -> dict: ...
    def guild_json(self, guild_id: str, *, full: bool = False) -> dict: ...

    # the server (_server.py)
    port: int
    pings: List[tuple]
    typing_log: List[dict]
    owner_user_id: Optional[str]
    privileged_intents_allowed: bool

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0,
                       interval: float = 0.01, what: str = "condition") -> Any: ...

    # the gateway (_gateway.py)
    @property
    def gateway_url(self) -> str: ...
    def dispatch(self, event: str, data: Any) -> None: ...

    # REST (_rest.py)
    synced_commands: Dict[Optional[str], List[dict]]

    @staticmethod
    def _validate_content(body: dict, files: list) -> Optional[web.Response]: ...
    def _apply_edit(self, msg: dict, body: dict) -> None: ...

    # messages (_messages.py)
    def _compute_mentions(self, content: str, allowed: Optional[dict],
                          replied_author: Optional[str] = None) -> Dict[str, Any]: ...
    def _attachment_json(self, att: Any, channel_id: str = "0") -> dict: ...
    def cdn_url(self, channel_id: str, aid: str, name: str) -> str: ...
    def _build_message(self, channel_id: str, author: dict, content: str = "", *,
                       embeds: Optional[list] = None, allowed_mentions: Optional[dict] = None,
                       reference_message_id: Optional[str] = None, attachments: Iterable[Any] = (),
                       webhook_id: Optional[str] = None, flags: int = 0, msg_type: int = 0,
                       components: Optional[list] = None, application_id: Optional[str] = None,
                       extra: Optional[dict] = None, mention_author: bool = True) -> dict: ...
    def _store_message(self, msg: dict) -> None: ...
    def _dispatch_message(self, event: str, msg: dict, member_user_id: Optional[str]) -> None: ...
    @staticmethod
    def _webhook_author(webhook_id: str, username: str, avatar_url: Optional[str]) -> dict: ...
    def _history(self, channel_id: str, limit: int = 50, before: Optional[str] = None,
                 after: Optional[str] = None, around: Optional[str] = None) -> List[dict]: ...
    def _delete_message(self, message_id: str, *, dispatch: bool = True) -> bool: ...
    def _set_reaction(self, channel_id: str, message_id: str, user_id: str, emoji: str, *, add: bool) -> bool: ...
