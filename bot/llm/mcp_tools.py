"""Tools from MCP servers (SPEC §6b), through the official `mcp` SDK as client: each server one
`bot.core.ports.ToolSource`.

The host declares its servers in a JSON file, `ROUNDTABLE_MCP_CONFIG` (default `mcp.json` in
the working directory when there is one), in the format other MCP clients use:

    {"mcpServers": {
        "counter": {"command": "python", "args": ["counter.py"], "env": {"API_KEY": "..."}},
        "search":  {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ..."},
                    "timeout": 30, "confirm": ["delete"]}}}

`load_config` reads it (a malformed file is one `ConfigError` line naming the file and the fix).
Every `env` and `headers` value is registered as a secret (masked in every text from then on).
`McpServers.start()` starts them with the bot or the console and reads their tool lists: a
server that cannot start is one ERROR line and offers no tools; it is tried again with back-off
(1 s doubling to 60 s), as is a server that dies later (a ping every `PING_EVERY` seconds notices),
and its tools come back when it does; a `notifications/tools/list_changed` reads the list again.

A stdio server is started through `bot/llm/mcp_guard.py`, so that it never outlives this
process, kill -9 included (the SDK starts it in a session of its own).

Tool names are the server's; `bot.core.features.tools` makes them `server.tool` in commands and
`server__tool` for the model. MCP's annotations are read: `readOnlyHint`, `idempotentHint`,
`destructiveHint`. A result is its text content (other content named in brackets), else its
structured content as JSON; `isError` makes it an error result.

The SDK (about as slow to import as the OpenAI client) is imported where a server is started or
called, never at the top: a console or bot without MCP servers starts without it.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.core.errors import ConfigError
from bot.core.models import ToolOutput, ToolSpec
from bot.core.ports import ToolContext
from bot.core.rules.doctor import Check, mcp_server_check
from bot.core.rules.secrets import SECRETS, mask_error

if TYPE_CHECKING:
    from mcp import ClientSession

log = logging.getLogger(__name__)

CONFIG_SETTING = "ROUNDTABLE_MCP_CONFIG"
DEFAULT_FILE = "mcp.json"
DEFAULT_TIMEOUT = 30.0
START_WAIT = 20.0  # seconds start() waits for a server's first answer
PING_EVERY = 15.0
BACKOFF_MAX = 60.0
GUARD = str(Path(__file__).with_name("mcp_guard.py"))
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_FIX = 'write {"mcpServers": {"NAME": {"command": "...", "args": [...]}}} or {"NAME": {"url": "http://..."}}'


@dataclass(frozen=True)
class ServerConfig:
    """One server of the file: stdio (`command`) or streamable HTTP (`url`)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    confirm: bool | tuple[str, ...] = False


def config_path(environ: Mapping[str, str], cwd: Path | None = None) -> Path | None:
    """The file to read: `ROUNDTABLE_MCP_CONFIG` when set (it must exist), else `mcp.json` in the
    working directory when there is one, else None (no servers)."""
    setting = environ.get(CONFIG_SETTING, "").strip()
    if setting:
        return Path(setting).expanduser()
    default = (cwd or Path.cwd()) / DEFAULT_FILE
    return default if default.is_file() else None


def load_config(path: Path) -> list[ServerConfig]:
    """The servers of `path`, in the file's order; `ConfigError` (one line) when it is malformed."""
    where = f"{CONFIG_SETTING}: {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read ({exc.strerror or type(exc).__name__}); "
                          f"point {CONFIG_SETTING} at an MCP config file, or unset it") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON (line {getattr(exc, 'lineno', '?')}): {_FIX}") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f'{where} has no "mcpServers" object: {_FIX}')
    return [_server(where, name, entry) for name, entry in servers.items()]


def _server(where: str, name: str, entry: object) -> ServerConfig:  # noqa: C901 - one check per key of the entry, in order, each with its message: reads best as one list
    def bad(problem: str) -> ConfigError:
        return ConfigError(f"{where}: server {name!r} {problem}")

    if not _NAME.match(name):
        raise bad("has a name that is not letters, digits, _ or - (at most 40); rename it")
    if not isinstance(entry, dict):
        raise bad(f"is not an object: {_FIX}")
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise bad('needs either "command" (stdio) or "url" (streamable HTTP)')
    args, env, headers = entry.get("args", []), entry.get("env", {}), entry.get("headers", {})
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise bad('has a "command" that is not a program name')
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise bad('has a "url" that is not http:// or https://')
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise bad('has "args" that are not a list of strings')
    for label, mapping in (("env", env), ("headers", headers)):
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            raise bad(f'has "{label}" that is not an object of strings')
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise bad('has a "timeout" that is not a number of seconds (1 to 3600)')
    confirm = entry.get("confirm", False)
    if not isinstance(confirm, bool) and not (isinstance(confirm, list) and all(isinstance(c, str) for c in confirm)):
        raise bad('has a "confirm" that is not true, false or a list of tool names')
    cwd = entry.get("cwd")
    SECRETS.register_all([*env.values(), *headers.values()])
    return ServerConfig(name=name, command=command, args=tuple(args), env=dict(env), cwd=cwd if isinstance(cwd, str)
                        else None, url=url, headers=dict(headers), timeout=float(timeout),
                        confirm=confirm if isinstance(confirm, bool) else tuple(confirm))


def tool_spec(tool: Any, timeout: float, confirm: bool | tuple[str, ...] = False) -> ToolSpec:
    """An MCP `Tool` as the core's `ToolSpec` (its annotations read). Its calls wait for approval
    by default when it is destructive or the server's "confirm" (true, or a list) names it."""
    hints = getattr(tool, "annotations", None)
    schema = getattr(tool, "input_schema", None) or {"type": "object", "properties": {}}
    destructive = bool(getattr(hints, "destructive_hint", None))
    listed = confirm if isinstance(confirm, bool) else str(tool.name) in confirm
    return ToolSpec(str(tool.name), str(getattr(tool, "description", None) or ""), dict(schema),
                    read_only=bool(getattr(hints, "read_only_hint", None)),
                    idempotent=bool(getattr(hints, "idempotent_hint", None)),
                    destructive=destructive, timeout=timeout, confirm=destructive or listed)


def result_text(result: Any) -> str:
    """A `CallToolResult` as text: its text content, other content named in brackets, else its
    structured content as JSON."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '?')}, {len(getattr(block, 'data', '') or '')} "
                         "characters of base64, not shown]")
        else:
            parts.append(f"[{kind or 'content'} not shown]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


class McpServer:
    """One MCP server: a `ToolSource` whose connection a task of its own holds (the SDK's contexts
    must be entered and left in one task)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.name = config.name
        self._tools: list[ToolSpec] = []
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._relist = asyncio.Event()
        self._tried = asyncio.Event()  # the first attempt ended (up, or failed)
        self.problem: str | None = None  # why it is down, for people

    def tools(self) -> list[ToolSpec]:
        return list(self._tools) if self._session is not None else []

    @property
    def up(self) -> bool:
        return self._session is not None

    async def start(self, wait: float = START_WAIT, *, quiet: bool = False) -> bool:
        """Start holding the connection; wait (at most `wait` seconds) for the first attempt. True when
        up. Down: one ERROR line, unless `quiet` (the doctor, which says it its own way)."""
        if self._task is None:
            self._task = asyncio.create_task(self._hold(), name=f"mcp server {self.name}")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._tried.wait()
        if not self.up and self.problem is None:
            self.problem = f"did not answer within {wait:g} s"
        if not self.up and not quiet:
            log.error("MCP server %s is down: %s; its tools are not offered until it starts (tried again "
                      "with back-off)", self.name, self.problem)
        return self.up

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None and not self.up:  # connecting (maybe to a server that never answers)
            self._task.cancel()
        if self._task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                async with asyncio.timeout(10):
                    await asyncio.shield(self._task)
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        session = self._session
        if session is None:
            return ToolOutput(f"error: the MCP server {self.name} is down ({self.problem or 'not started'}).",
                              error=True)
        from mcp.shared.exceptions import MCPError  # (loaded already: a session is up)
        from mcp.types import REQUEST_TIMEOUT

        try:
            result = await session.call_tool(tool, dict(arguments), read_timeout_seconds=self.config.timeout)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:  # the SDK's own clock ran out first: the same timeout
                raise TimeoutError(str(exc)) from None
            raise
        return ToolOutput(result_text(result), error=bool(getattr(result, "is_error", False)))

    async def _hold(self) -> None:
        from mcp import ClientSession  # here, not at the top: only a configured server loads the SDK

        delay = 1.0
        while not self._stop.is_set():
            try:
                async with self._connect() as (read, write), \
                        ClientSession(read, write, message_handler=self._message) as session:
                    await session.initialize()
                    await self._list(session)
                    self._session, self.problem, delay = session, None, 1.0
                    log.info("MCP server %s is up: %d tools", self.name, len(self._tools))
                    self._tried.set()
                    await self._serve(session)
            except asyncio.CancelledError:
                raise
            # BaseException: the SDK's task groups raise BaseExceptionGroup (their tasks' cancels inside), and
            # any failure means "down"; this task's own cancel is re-raised above.
            except BaseException as exc:
                self.problem = _why(exc)
                if self._tried.is_set() and self._session is not None:
                    log.error("MCP server %s went down: %s; tried again with back-off", self.name, self.problem)
            finally:
                self._session = None
            self._tried.set()
            if self._stop.is_set():
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()
            delay = min(delay * 2, BACKOFF_MAX)

    async def _serve(self, session: ClientSession) -> None:
        """Wait until told to stop; read the tool list again when the server says it changed; ping."""
        while not self._stop.is_set():
            waits = [asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(self._relist.wait())]
            try:
                await asyncio.wait(waits, timeout=PING_EVERY, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            if self._stop.is_set():
                return
            if self._relist.is_set():
                self._relist.clear()
                await self._list(session)
                log.info("MCP server %s changed its tools: %d now", self.name, len(self._tools))
            else:
                async with asyncio.timeout(self.config.timeout):
                    await session.send_ping()

    async def _list(self, session: ClientSession) -> None:
        found: list[ToolSpec] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(params=None if cursor is None else _page(cursor))
            found += [tool_spec(t, self.config.timeout, self.config.confirm) for t in page.tools]
            cursor = getattr(page, "next_cursor", None)
            if not cursor:
                break
        self._tools = sorted(found, key=lambda s: s.name)

    async def _message(self, message: object) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._relist.set()

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[tuple[Any, Any]]:
        from mcp import StdioServerParameters, stdio_client
        from mcp.client.stdio import get_default_environment
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        config = self.config
        if config.url is not None:
            client = create_mcp_http_client(headers=dict(config.headers))
            async with client, streamable_http_client(config.url, http_client=client) as (read, write):
                yield read, write
            return
        command = config.command or ""
        env = get_default_environment() | dict(config.env)
        program = shutil.which(command, path=env.get("PATH")) or (
            command if os.path.sep in command and os.access(command, os.X_OK) else None)
        if program is None:
            raise FileNotFoundError(f"command {command!r} not found")
        params = StdioServerParameters(command=sys.executable, args=[GUARD, str(os.getpid()), "--", program,
                                                                     *config.args], env=env, cwd=config.cwd)
        async with stdio_client(params) as (read, write):
            yield read, write


def _page(cursor: str) -> Any:
    from mcp import types

    return types.PaginatedRequestParams(cursor=cursor)


def _why(exc: BaseException) -> str:
    """A failure in a few words, from the innermost exception of a group (its text masked)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = mask_error(str(exc)).strip()
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


async def doctor_checks(environ: Mapping[str, str], cwd: Path | None = None, wait: float = START_WAIT
                        ) -> list[Check]:
    """`roundtable doctor`'s checks of the MCP servers (none without a config file): a malformed
    file is one ✗; else each server is started, its tools listed, and stopped again."""
    try:
        path = config_path(environ, cwd)
        configs = load_config(path) if path is not None else []
    except ConfigError as exc:
        return [Check("MCP servers", False, str(exc).rstrip("."), f"correct the file, or unset {CONFIG_SETTING}")]
    where = f"{path}"

    async def check(config: ServerConfig) -> Check:
        server = McpServer(config)
        try:
            await server.start(wait, quiet=True)
            return server_check(server, where)
        finally:
            await server.close()

    return list(await asyncio.gather(*(check(c) for c in configs)))


def server_check(server: McpServer, where: str = CONFIG_SETTING) -> Check:
    """A running server's doctor line, from what it is now (up with its tools, or down and why)."""
    config = server.config
    return mcp_server_check(config.name, len(server.tools()) if server.up else None, server.problem,
                            url=config.url, where=where,
                            command=" ".join([config.command or "", *config.args]).strip() or None)


class McpServers:
    """The servers of the config file, started and closed together."""

    def __init__(self, configs: Sequence[ServerConfig], path: Path | None = None) -> None:
        self.servers = [McpServer(c) for c in configs]
        self.path = path

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], cwd: Path | None = None) -> McpServers:
        path = config_path(environ, cwd)
        return cls(load_config(path) if path is not None else [], path)

    async def checks(self) -> list[Check]:
        """`/roundtable doctor`'s lines of the running servers (none without a config file): each
        as it is now, without starting anything (the CLI doctor's `doctor_checks` starts them)."""
        where = str(self.path) if self.path is not None else CONFIG_SETTING
        return [server_check(server, where) for server in self.servers]

    async def start(self, wait: float = START_WAIT) -> None:
        await asyncio.gather(*(server.start(wait) for server in self.servers))

    async def close(self) -> None:
        await asyncio.gather(*(server.close() for server in self.servers))
