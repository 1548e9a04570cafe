"""A TCP proxy between a store and the PostgreSQL test server, to stage a restart of the server for
this test's connections only (other tests share the server: the real one is never restarted).

- `await proxy.end_backends(admin)`: the server ends every backend this proxy carries
  (`pg_terminate_backend`, as a restart does: the client reads "terminating connection due to
  administrator command"), and the client side of each stays open until that client sends
  something: a connection ended while it sat idle in a pool, before its client noticed.
- `await proxy.down(admin)`: the same, then every connection through the proxy is closed and new
  ones are refused until `await proxy.up()` listens again on the same port.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import urlsplit, urlunsplit


class _Pair:
    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.client = client
        self.server = server
        self.server_ended = asyncio.Event()  # the server closed its side (all its bytes forwarded)
        self.linger = False  # keep the client side open after the server ended, until the client writes

    def close(self) -> None:
        for writer in (self.client, self.server):
            writer.transport.abort()


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._pairs: set[_Pair] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    @classmethod
    def to_url(cls, url: str) -> TcpProxy:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 5432)

    def url(self, url: str) -> str:
        """`url` (a PostgreSQL URL of the target) through this proxy."""
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit((parts.scheme, f"{user}127.0.0.1:{self.port}", parts.path, parts.query, ""))

    async def up(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def end_backends(self, admin: Any, *, timeout: float = 10) -> int:
        """The server ends the backend of each connection through the proxy; returns when it has
        closed them all (their last bytes forwarded). `admin`: an asyncpg connection of the test."""
        pairs = [p for p in self._pairs if not p.server_ended.is_set()]
        for pair in pairs:
            pair.linger = True
        ports = [pair.server.get_extra_info("sockname")[1] for pair in pairs]
        ended = await admin.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE client_addr = '127.0.0.1' AND client_port = ANY($1::int[])", ports)
        await asyncio.wait_for(asyncio.gather(*(p.server_ended.wait() for p in pairs)), timeout)
        return len(ended)

    async def down(self, admin: Any | None = None) -> int:
        """Refuse new connections; with `admin`, end the server's backends first; close every
        connection. Returns how many backends the server ended."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        ended = await self.end_backends(admin) if admin is not None else 0
        for pair in list(self._pairs):
            pair.close()
        self._pairs.clear()
        return ended

    async def close(self) -> None:
        await self.down()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def __aenter__(self) -> TcpProxy:
        await self.up()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        pair = _Pair(writer, server_writer)
        self._pairs.add(pair)
        for task in (self._to_server(reader, pair), self._to_client(server_reader, pair)):
            pipe = asyncio.create_task(task)
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _to_server(self, reader: asyncio.StreamReader, pair: _Pair) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if pair.server_ended.is_set():
                    break  # a client writing to a server that is gone: now it sees the close
                pair.server.write(data)
                await pair.server.drain()
        self._pairs.discard(pair)
        pair.close()

    async def _to_client(self, reader: asyncio.StreamReader, pair: _Pair) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                pair.client.write(data)
                await pair.client.drain()
        pair.server_ended.set()
        if not pair.linger:
            self._pairs.discard(pair)
            pair.close()
