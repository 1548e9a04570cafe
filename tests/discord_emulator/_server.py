"""DiscordEmulator: the aiohttp app, request log, fault injection, auth."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.typedefs import Handler

from tests.support import WAIT, eventually

from . import _util as u
from ._gateway import GatewayMixin
from ._interactions import InteractionsMixin
from ._messages import MessagesMixin
from ._rest import RestMixin
from ._state import StateMixin
from ._webhooks import WebhookMixin

log = logging.getLogger(__name__)

DEFAULT_TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.emulat.or-fake-bot-token-for-tests_0123456789"
RATE_LIMIT_BODY = {"message": "You are being rate limited.", "retry_after": 0.3, "global": False}
# Every wait here gives up only after tests.support.WAIT at the least, however short a test asked: a
# bound is a guard against a hang, never a claim about speed (a loaded machine is slow, and a wait that
# gives up early is a flaky test; one that gives up late only a slower failure).
MIN_WAIT = WAIT
_NO_AUTH = re.compile(r"^/(webhooks/\d+/[^/]+|interactions/|gateway$)")


@dataclass
class RequestRecord:
    method: str
    path: str                      # relative to the API base, e.g. "/channels/1/messages"
    query: dict[str, str]
    json: Any
    time: float
    headers: dict[str, str] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    unhandled: bool = False        # True when no route matched (an emulator gap)
    injected: bool = False         # True when answered by fail_next
    held: bool = False             # True when caught by a hold()
    client_gone: bool = False      # the client had disconnected when its held request was released


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    status: int                    # 0 = drop the connection without a response
    body: Any
    headers: dict[str, str]
    times: int
    after: bool = False            # answer with the fault only after handling the request


def _matches(method: str, pattern: re.Pattern[str], rec: RequestRecord) -> bool:
    return method in (rec.method, "*") and pattern.search(rec.path) is not None


@dataclass(eq=False)
class Hold:
    """Requests caught by DiscordEmulator.hold(); each waits until release().

    arrived is set when the first caught request starts waiting (after=True: once it
    has been handled); count/records list the caught requests."""
    method: str
    pattern: re.Pattern[str]
    after: bool
    times: int | None           # None = every matching request until release()
    where: Callable[[RequestRecord], bool] | None = None  # and only requests this accepts
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    count: int = 0
    records: list[RequestRecord] = field(default_factory=list)
    _released: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _owner: list[Hold] | None = field(default=None, repr=False)

    @property
    def released(self) -> bool:
        return self._released.is_set()

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.count >= self.times

    def release(self) -> None:
        """Let every held request go; later matching requests pass through."""
        self._released.set()
        if self._owner is not None and self in self._owner:
            self._owner.remove(self)

    async def wait_arrived(self, count: int = 1, timeout: float = 10.0) -> list[RequestRecord]:
        """Wait until at least `count` requests have been caught; return their records."""
        await eventually(lambda: self.count >= count, f"{count} request(s) held", timeout=timeout, interval=0.005)
        return list(self.records)

    def _catch(self, rec: RequestRecord) -> None:
        self.count += 1
        self.records.append(rec)
        rec.held = True
        self.arrived.set()
        if self.exhausted and self._owner is not None and self in self._owner:
            self._owner.remove(self)


class DiscordEmulator(StateMixin, MessagesMixin, GatewayMixin, RestMixin, WebhookMixin, InteractionsMixin):
    """A local Discord (REST API v10 + gateway) for discord.py 2.x.

    ``async with DiscordEmulator() as emu:`` -> emu.api_base, emu.gateway_url.
    With ``defaults=True`` you get: guild "Test Guild" (emu.guild_id), text channel
    "general" (emu.channel_id), admin owner "alice" (emu.alice_id) and "bob" (emu.bob_id).
    The bot user is emu.bot_user_id (== emu.application_id); its token is emu.token.

    Gateway: plain JSON text frames; RESUME replays every event the session missed
    (events dispatched while disconnected are buffered) and then sends RESUMED.
    Without the members intent GUILD_CREATE only lists the bot's own member; without
    message_content, MESSAGE_CREATE/UPDATE content is blanked unless the bot is
    mentioned or the author. discord.py fires on_ready guild_ready_timeout (2 s by
    default) after the last GUILD_CREATE; pass guild_ready_timeout=0.1 and
    chunk_guilds_at_startup=False to the client for fast tests.

    Faults: fail_next() (error status or connection reset, before or after handling),
    hold()/release_all() (delay a request or its response). Message creates with a
    nonce and enforce_nonce are deduplicated for nonce_window seconds, like Discord.

    Rate limits: with ``webhook_rate_limit = (5, 2.0)`` every request to a webhook's token
    routes (execute, its messages' get/edit/delete) spends one of that webhook's 5 requests
    per 2 s window, answered with Discord's X-RateLimit-* headers; past them, a 429 with
    ``retry_after`` and Retry-After (kept in ``rate_limited``). Off (None) by default.
    ``pings`` lists (message id, user id) for each person a message notified when it was
    created: mentions allowed by its ``allowed_mentions`` (an edit notifies nobody, as on Discord).
    """

    def __init__(self, *, token: str = DEFAULT_TOKEN, bot_name: str = "Roundtable",
                 defaults: bool = True, privileged_intents_allowed: bool = True) -> None:
        self._init_state(token, bot_name)
        self._init_gateway()
        self._init_rest()
        self._init_webhooks()
        self._init_interactions()
        self.privileged_intents_allowed = privileged_intents_allowed
        self.deny_manage_webhooks = False
        self.requests: list[RequestRecord] = []
        self.webhook_rate_limit: tuple[Any, ...] | None = None   # (requests, seconds) per webhook, or None
        self.rate_limited: list[RequestRecord] = []
        self._buckets: dict[str, list[float]] = {}         # webhook id -> [window start, used]
        self.pings: list[tuple[Any, ...]] = []
        self.typing_log: list[dict[str, Any]] = []
        self._faults: list[_Fault] = []
        self._holds: list[Hold] = []       # still catching requests
        self._all_holds: list[Hold] = []   # every hold made (release_all)
        self._closing = False
        self._runner: web.AppRunner | None = None
        self.port: int = 0
        self.guild_id: str
        self.channel_id: str  # these four are set with defaults (without, a test makes its own guild)
        self.alice_id: str
        self.bob_id: str
        self.owner_user_id: str | None = None
        if defaults:
            self.alice_id = self.add_user("alice", global_name="Alice")
            self.owner_user_id = self.alice_id
            self.guild_id = self.add_guild("Test Guild", owner_id=self.alice_id)
            self.add_member(self.guild_id, "alice", user_id=self.alice_id, admin=True)
            self.bob_id = self.add_member(self.guild_id, "bob", global_name="Bob")
            self.channel_id = self.add_channel(self.guild_id, "general")

    # ------------------------------------------------------------- lifecycle
    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    async def start(self) -> DiscordEmulator:
        self._closing = False
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway_handler)
        app.router.add_get("/cdn/attachments/{cid}/{aid}/{name}", self._h_cdn)
        app.router.add_routes(self._core_routes() + self._webhook_routes())
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)  # a started site serves
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self._closing = True          # requests released from now on are dropped, not handled
        self.release_all()
        for conn in list(self._connections):
            conn.send(None)
            if not conn.ws.closed:
                await conn.ws.close(code=1001, message=b"emulator shutting down")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> DiscordEmulator:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------------- test helpers
    def fail_next(self, method: str, path_regex: str, status: int, body: Any = None,
                  headers: dict[str, str] | None = None, times: int = 1, *,
                  after: bool = False) -> None:
        """The next `times` requests whose method matches ("*" = any) and whose API-relative
        path re.search()es path_regex are answered with status/body instead. A 429 gets
        Discord's rate-limit body and a Via header by default (discord.py retries it).

        status=0 drops the TCP connection (RST) without any HTTP response: aiohttp clients
        see ServerDisconnectedError or ClientOSError. after=True first handles the request
        normally (e.g. stores and dispatches the message) and then answers with the fault.
        The record gets injected=True (and status=0 for a drop). Note that aiohttp itself
        retries an idempotent request (GET/PUT/DELETE) once after a drop on a reused
        keep-alive connection, which uses up another `times`."""
        hdrs = dict(headers or {})
        if body is None:
            body = dict(RATE_LIMIT_BODY) if status == 429 else {"message": f"{status}: injected", "code": 0}
        if status == 429:
            hdrs.setdefault("Via", "1.1 google")
            if isinstance(body, dict) and "retry_after" in body:
                hdrs.setdefault("Retry-After", str(max(1, int(body["retry_after"] + 0.999))))
                hdrs.setdefault("X-RateLimit-Scope", "shared" if not body.get("global") else "global")
            if isinstance(body, dict) and body.get("global"):
                hdrs.setdefault("X-RateLimit-Global", "true")
        self._faults.append(_Fault(method.upper(), re.compile(path_regex), status, body, hdrs, times, after))

    def hold(self, method: str, path_regex: str, *, after: bool = False, times: int | None = 1,
             where: Callable[[RequestRecord], bool] | None = None) -> Hold:
        """Hold the next `times` (None = all until released) matching requests (same
        matching as fail_next) until the returned Hold is released.

        after=False: the request waits before it is handled (nothing stored/dispatched yet).
        after=True: it is handled normally, only the HTTP response is withheld.
        A request whose client disconnected meanwhile is still handled on release (like a
        server that already got it) and its record gets client_gone=True; close() drops
        requests still held instead of handling them. Holds are checked before fail_next
        faults, so a held request can then be answered by a fault. `where(record)` narrows it
        further (e.g. to an edit that carries a given text)."""
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        h = Hold(method.upper(), re.compile(path_regex), after, times, where, _owner=self._holds)
        self._holds.append(h)
        self._all_holds.append(h)
        return h

    def release_all(self) -> None:
        """Release every hold (pending ones included)."""
        for h in self._all_holds:
            h.release()

    def requests_matching(self, method: str | None = None, path_regex: str = "") -> list[RequestRecord]:
        """Recorded requests by method (None = any) whose path re.search()es path_regex."""
        rx = re.compile(path_regex)
        return [r for r in self.requests
                if (method is None or r.method == method.upper()) and rx.search(r.path)]

    @property
    def unhandled_requests(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.unhandled]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0,
                       interval: float = 0.01, what: str = "condition") -> Any:
        """Poll predicate() until truthy; return its value or raise asyncio.TimeoutError (after
        `timeout` seconds, MIN_WAIT at the least): tests.support.eventually."""
        return await eventually(predicate, what, timeout=timeout, interval=interval)

    async def wait_for_messages(self, channel_id: str, predicate: Callable[[dict[str, Any]], bool] | None = None,
                                count: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until >= count stored messages in the channel satisfy predicate; return them."""
        pred = predicate or (lambda m: True)

        def check() -> list[dict[str, Any]] | None:
            found = [m for m in self.channel_messages(channel_id) if pred(m)]
            return found if len(found) >= count else None
        found: list[dict[str, Any]] = await self.wait_for(check, timeout=timeout,
                                                          what=f"{count} message(s) in {channel_id}")
        return found

    # ------------------------------------------------------------- middleware
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/gateway" or request.path.startswith("/cdn/"):
            return await handler(request)
        m = re.match(r"^/api/v\d+(/.*)$", request.path)
        rel = m.group(1) if m else request.path
        body, files = await self._read_body(request)
        rec = RequestRecord(request.method, rel, dict(request.query), body, time.time(),
                            headers={k: v for k, v in request.headers.items()
                                     if k.lower() in ("authorization", "content-type", "x-audit-log-reason")},
                            files=files)
        self.requests.append(rec)
        request[u.BODY], request[u.FILES], request[u.RECORD] = body, files, rec
        resp = await self._intercept(request, rec, after=False)
        if resp is None:
            limited, limit_headers = self._rate_limit(rec)
            resp = limited or await self._handle(request, handler, rec)
            rec.status = resp.status
            resp = await self._intercept(request, rec, after=True) or resp
            resp.headers.update(limit_headers)
        return resp

    def _rate_limit(self, rec: RequestRecord) -> tuple[web.Response | None, dict[str, str]]:
        """(a 429 or None, the X-RateLimit headers) for a request to a webhook's token routes."""
        m = re.match(r"^/webhooks/(\d+)/([^/]+)", rec.path)
        if self.webhook_rate_limit is None or m is None or m.group(2) in self.interactions_by_token:
            return None, {}
        limit, per = self.webhook_rate_limit
        now = time.monotonic()
        bucket = self._buckets.get(m.group(1))
        if bucket is None or now >= bucket[0] + per:
            bucket = self._buckets[m.group(1)] = [now, 0]
        reset_after = max(bucket[0] + per - now, 0.001)
        headers = {"X-RateLimit-Limit": str(limit), "X-RateLimit-Reset-After": f"{reset_after:.3f}",
                   "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}", "X-RateLimit-Bucket": f"hook{m.group(1)}"}
        if bucket[1] >= limit:
            self.rate_limited.append(rec)
            body = {"message": "You are being rate limited.", "retry_after": round(reset_after, 3), "global": False}
            headers.update({"X-RateLimit-Remaining": "0", "Retry-After": str(max(1, int(reset_after + 0.999))),
                            "Via": "1.1 google", "X-RateLimit-Scope": "user"})
            return u.json_response(body, status=429), headers
        bucket[1] += 1
        headers["X-RateLimit-Remaining"] = str(limit - bucket[1])
        return None, headers

    async def _handle(self, request: web.Request, handler: Handler, rec: RequestRecord) -> web.StreamResponse:
        if not _NO_AUTH.match(rec.path) and request.headers.get("Authorization") != f"Bot {self.token}":
            return u.json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status in (404, 405):
                rec.unhandled = True
                return u.json_response({"message": "404: Not Found", "code": 0,
                                        "errors": {"emulator": f"no route for {request.method} {rec.path}"}},
                                       status=404)
            return u.error(exc.status, 0, exc.reason)

    async def _intercept(self, request: web.Request, rec: RequestRecord, *,
                         after: bool) -> web.StreamResponse | None:
        """Apply a matching hold, then a matching fault; None = carry on normally."""
        hold = next((h for h in self._holds if h.after == after and _matches(h.method, h.pattern, rec)
                     and (h.where is None or h.where(rec))), None)
        if hold is not None:
            hold._catch(rec)
            await hold._released.wait()
            transport = request.transport
            if transport is None or transport.is_closing():
                rec.client_gone = True
                log.debug("held request %s %s: the client disconnected meanwhile", rec.method, rec.path)
            if self._closing:
                log.debug("held request %s %s dropped: emulator closing", rec.method, rec.path)
                return self._drop_connection(request, rec)
        fault = next((f for f in self._faults if f.after == after and _matches(f.method, f.pattern, rec)), None)
        if fault is None:
            return None
        fault.times -= 1
        if fault.times <= 0:
            self._faults.remove(fault)
        rec.injected = True
        if fault.status == 0:
            return self._drop_connection(request, rec)
        rec.status = fault.status
        if isinstance(fault.body, (dict, list)):
            return u.json_response(fault.body, status=fault.status, headers=fault.headers)
        return web.Response(text=str(fault.body), status=fault.status, headers=fault.headers)

    @staticmethod
    def _drop_connection(request: web.Request, rec: RequestRecord) -> web.Response:
        """Reset the TCP connection (RST, no HTTP response); rec.status becomes 0."""
        rec.status = 0
        transport = request.transport
        if transport is not None and not transport.is_closing():
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        # aiohttp cannot write this to the aborted transport and ignores it quietly.
        return web.Response(status=500)

    @staticmethod
    async def _read_body(request: web.Request) -> tuple[Any, list[dict[str, Any]]]:
        files: list[dict[str, Any]] = []
        if not request.body_exists:
            return None, files
        ctype = request.content_type
        if ctype == "multipart/form-data":
            body = None
            reader = await request.multipart()
            async for part in reader:
                assert isinstance(part, BodyPartReader), part  # Discord's form has no nested parts
                raw = await part.read()
                if part.name == "payload_json":
                    body = json.loads(raw.decode("utf-8"))
                elif part.filename:
                    files.append({"filename": part.filename, "size": len(raw),
                                  "content_type": part.headers.get("Content-Type"), "data": bytes(raw)})
            return body, files
        raw = await request.read()
        if not raw:
            return None, files
        try:
            return json.loads(raw.decode("utf-8")), files
        except ValueError:
            return raw.decode("utf-8", "replace"), files
