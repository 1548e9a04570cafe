"""Gateway (websocket) emulation: HELLO, heartbeats, IDENTIFY (with `shard: [id, count]`, a
connection gets only the guilds of its shard: `(guild_id >> 22) % count`), READY,
GUILD_CREATE, RESUME (missed events are replayed), dispatch, disconnects."""
from __future__ import annotations

import asyncio
import copy
import json
import logging
import secrets
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from . import _util as u

if TYPE_CHECKING:  # what the other mixins give DiscordEmulator (see _shape)
    from ._shape import Emulator
else:
    Emulator = object

log = logging.getLogger(__name__)

INTENT_GUILD_MESSAGES = 1 << 9
INTENT_GUILD_MESSAGE_REACTIONS = 1 << 10
_MESSAGE_EVENTS = {"MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE", "MESSAGE_DELETE_BULK"}
_REACTION_EVENTS = {"MESSAGE_REACTION_ADD", "MESSAGE_REACTION_REMOVE",
                    "MESSAGE_REACTION_REMOVE_ALL", "MESSAGE_REACTION_REMOVE_EMOJI"}
HEARTBEAT_INTERVAL_MS = 41250
REPLAY_LOG_SIZE = 2000


class GatewayConnection:
    """One websocket; frames are written in order by a single writer task."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.session: GatewaySession | None = None
        self.closed_by_server = False
        self.writer = asyncio.create_task(self._write())

    def send(self, payload: Any) -> None:
        self.queue.put_nowait(payload)

    async def _write(self) -> None:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            if callable(item):
                item()
                continue
            try:
                await self.ws.send_str(item if isinstance(item, str) else json.dumps(item))
            except (ConnectionResetError, RuntimeError):
                return


class GatewaySession:
    """A Discord session (survives websocket drops until invalidated)."""

    def __init__(self, session_id: str, intents: int, shard: tuple[int, int] = (0, 1)) -> None:
        self.session_id = session_id
        self.intents = intents
        self.shard = shard                    # (id, count) from IDENTIFY; (0, 1) unsharded
        self.seq = 0
        self.log: list[tuple[Any, ...]] = []           # (seq, frame json) for RESUME replay
        self.conn: GatewayConnection | None = None
        self.ready = False                    # READY + GUILD_CREATE written
        self.invalid = False
        self.resumes = 0

    @property
    def connected(self) -> bool:
        return self.conn is not None and not self.conn.ws.closed

    def receives(self, guild_id: str | None) -> bool:
        """Discord's rule: a guild's events go to shard (guild_id >> 22) % count; the rest to shard 0."""
        shard_id, count = self.shard
        if guild_id is None:
            return shard_id == 0
        return (int(guild_id) >> 22) % count == shard_id

    def push(self, event: str, data: Any) -> None:
        self.seq += 1
        frame = json.dumps({"op": 0, "t": event, "s": self.seq, "d": data})
        self.log.append((self.seq, frame))
        del self.log[:-REPLAY_LOG_SIZE]
        if self.conn is not None and self.connected:
            self.conn.send(frame)


class GatewayMixin(Emulator):
    """Mixed into DiscordEmulator."""

    privileged_intents_allowed: bool = True

    def _init_gateway(self) -> None:
        self.sessions: dict[str, GatewaySession] = {}
        self._connections: list[GatewayConnection] = []
        self.gateway_log: list[dict[str, Any]] = []     # every op received from clients

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    # ------------------------------------------------------------- public API
    def dispatch(self, event: str, data: Any) -> None:
        """Send a DISPATCH event to every live session (buffered while disconnected)."""
        guild_id = _guild_of(event, data)
        for session in list(self.sessions.values()):
            if session.invalid or not session.receives(guild_id):
                continue
            payload = self._filter_for_intents(session, event, copy.deepcopy(data))
            if payload is not None:
                session.push(event, payload)

    async def disconnect_all(self, code: int = 4000) -> None:
        """Close every gateway websocket (4000 lets discord.py RESUME)."""
        for conn in list(self._connections):
            conn.send(None)
            conn.closed_by_server = True
            if not conn.ws.closed:
                await conn.ws.close(code=code, message=b"emulator disconnect")

    def request_reconnect(self) -> None:
        """Send op 7 RECONNECT to every connection."""
        for conn in list(self._connections):
            conn.send({"op": 7, "d": None})

    def invalidate_sessions(self, resumable: bool = False) -> None:
        """Send op 9 INVALID_SESSION to every connection."""
        for conn in list(self._connections):
            if conn.session and not resumable:
                conn.session.invalid = True
            conn.send({"op": 9, "d": resumable})

    @property
    def connected_sessions(self) -> list[GatewaySession]:
        return [s for s in self.sessions.values() if s.connected and not s.invalid]

    async def wait_until_ready(self, timeout: float = 10.0) -> GatewaySession:
        """Wait until a client identified and was sent READY + GUILD_CREATE."""
        await self.wait_for(lambda: any(s.ready for s in self.connected_sessions), timeout=timeout)
        return next(s for s in self.connected_sessions if s.ready)

    # ------------------------------------------------------------- internals
    def _filter_for_intents(self, session: GatewaySession, event: str, data: Any) -> Any:
        if event in _MESSAGE_EVENTS and not session.intents & INTENT_GUILD_MESSAGES:
            return None
        member_event = event in ("GUILD_MEMBER_ADD", "GUILD_MEMBER_UPDATE", "GUILD_MEMBER_REMOVE")
        if member_event and not session.intents & u.INTENT_MEMBERS:
            return None
        if event in _REACTION_EVENTS and not session.intents & INTENT_GUILD_MESSAGE_REACTIONS:
            return None
        if event in ("MESSAGE_CREATE", "MESSAGE_UPDATE") and not session.intents & u.INTENT_MESSAGE_CONTENT:
            author = (data.get("author") or {}).get("id")
            mentioned = any(m.get("id") == self.bot_user_id for m in data.get("mentions", []))
            if author != self.bot_user_id and not mentioned:
                data.update(content="", embeds=[], attachments=[], components=[])
        return data

    async def _gateway_handler(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        conn = GatewayConnection(ws)
        self._connections.append(conn)
        conn.send({"op": 10, "s": None, "t": None, "d": {"heartbeat_interval": HEARTBEAT_INTERVAL_MS}})
        try:
            async for msg in ws:
                if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    continue
                try:
                    frame = json.loads(msg.data)
                except ValueError:
                    conn.closed_by_server = True
                    await ws.close(code=4002, message=b"Error while decoding payload.")
                    break
                self.gateway_log.append({"op": frame.get("op"), "d": frame.get("d")})
                await self._on_gateway_frame(conn, frame)
        finally:
            conn.send(None)
            if conn in self._connections:
                self._connections.remove(conn)
            session = conn.session
            if session is not None and session.conn is conn:
                session.conn = None
                if ws.close_code == 1000 and not conn.closed_by_server:  # clean client close ends it
                    session.invalid = True
        return ws

    async def _on_gateway_frame(self, conn: GatewayConnection, frame: dict[str, Any]) -> None:
        op, d = frame.get("op"), frame.get("d")
        if op == 1:
            conn.send({"op": 11, "s": None, "t": None, "d": None})
        elif op == 2:
            await self._identify(conn, d or {})
        elif op == 6:
            await self._resume(conn, d or {})
        elif op == 8 and conn.session is not None:
            self._member_chunk(conn.session, d or {})
        elif op in (3, 4):
            pass  # presence / voice state updates are ignored
        elif op is None or op not in (1, 2, 3, 4, 6, 8):
            await conn.ws.close(code=4001, message=b"Unknown opcode.")

    async def _identify(self, conn: GatewayConnection, d: dict[str, Any]) -> None:
        if conn.session is not None:
            await conn.ws.close(code=4005, message=b"Already authenticated.")
            return
        if d.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(d.get("intents", 0))
        if not self.privileged_intents_allowed and intents & u.PRIVILEGED_INTENTS:
            await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        shard = d.get("shard") or [0, 1]
        if (not isinstance(shard, list) or len(shard) != 2 or not all(isinstance(x, int) for x in shard)
                or not 0 <= shard[0] < shard[1]):
            await conn.ws.close(code=4010, message=b"Invalid shard.")
            return
        session = GatewaySession(secrets.token_hex(16), intents, (shard[0], shard[1]))
        guild_ids = [gid for gid in self.guilds if session.receives(gid)]
        session.conn = conn
        conn.session = session
        self.sessions[session.session_id] = session
        session.push("READY", {
            "v": 10, "user": self.user_json(self.bot_user_id), "user_settings": {},
            "guilds": [{"id": gid, "unavailable": True} for gid in guild_ids],
            "session_id": session.session_id, "session_type": "normal",
            "resume_gateway_url": self.gateway_url, "relationships": [], "private_channels": [],
            "presences": [], "guild_join_requests": [], "geo_ordered_rtc_regions": [],
            "application": {"id": self.application_id, "flags": self.application["flags"]},
            "shard": list(session.shard),
        })
        for gid in guild_ids:
            guild = self.guild_json(gid, full=True)
            if not intents & u.INTENT_MEMBERS:   # like Discord: only ourselves without GUILD_MEMBERS
                guild["members"] = [m for m in guild["members"] if m["user"]["id"] == self.bot_user_id]
            session.push("GUILD_CREATE", guild)
        conn.send(lambda: setattr(session, "ready", True))

    async def _resume(self, conn: GatewayConnection, d: dict[str, Any]) -> None:
        session = self.sessions.get(d.get("session_id") or "")
        if d.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        if session is None or session.invalid:
            conn.send({"op": 9, "s": None, "t": None, "d": False})
            return
        session.conn = conn
        conn.session = session
        session.resumes += 1
        last = int(d.get("seq") or 0)
        for seq, frame in session.log:   # replay what the client missed
            if seq > last:
                conn.send(frame)
        session.push("RESUMED", {})

    def _member_chunk(self, session: GatewaySession, d: dict[str, Any]) -> None:
        gid = str(d.get("guild_id"))
        if gid not in self.guilds:
            return
        guild = self.guilds[gid]
        ids = [str(x) for x in (d.get("user_ids") or [])]
        query = (d.get("query") or "").lower()
        members = [uid for uid in guild.members
                   if (not ids or uid in ids) and self.users[uid]["username"].lower().startswith(query)]
        if d.get("limit"):
            members = members[: int(d["limit"])]
        session.push("GUILD_MEMBERS_CHUNK", {
            "guild_id": gid, "members": [self.member_json(gid, m) for m in members],
            "chunk_index": 0, "chunk_count": 1, "nonce": d.get("nonce"), "not_found": [],
        })


def _guild_of(event: str, data: Any) -> str | None:
    """The guild an event belongs to (None: not a guild's, e.g. a DM)."""
    if not isinstance(data, dict):
        return None
    if event in ("GUILD_CREATE", "GUILD_UPDATE", "GUILD_DELETE"):
        return str(data.get("id")) if data.get("id") else None
    return str(data["guild_id"]) if data.get("guild_id") else None
