"""`start_roundtable(*args, ...)`: a real `roundtable ARGS...` process, as `asyncio.create_subprocess_exec`
starts one and with the same keywords (stdin, stdout, stderr, env, cwd), forked from the suite's fork
server (tests/support/zygote.py) so that it does not pay the second of imports a fresh interpreter does.

The process is a real one: its own pid, the pipes or files the test gave it, signals (`send_signal`,
`terminate`, `kill` reach it as they reach any process), its exit status (`wait`, `returncode`, negative
for a signal), `communicate`. It runs the installed script's entry point, `bot.cli.main:main`; only the
interpreter's start and the imports are shared. One fork server per test process, started at the first
call, ends with it.

ROUNDTABLE_TEST_FRESH=1 (or `fresh=True`) starts a fresh interpreter instead, the installed `roundtable`
script itself: the tests whose subject is the start of a new process (the README's commands, the
imports a verb does) keep using that.
"""
from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any, cast

ROUNDTABLE = str(Path(sys.executable).parent / "roundtable")  # the installed console script
ROOT = Path(__file__).resolve().parents[2]
PIPE, DEVNULL = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
Stream = int | IO[Any] | None


class ForkServer:
    """The fork server of this test process (one, started at the first use, stopped at exit)."""

    _lock = threading.Lock()
    _running: ForkServer | None = None

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="roundtable-zygote-")
        self.path = os.path.join(self.dir, "socket")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.zygote", self.path], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if ready != b"ready\n":
            self.proc.kill()
            raise RuntimeError(f"the suite's fork server did not start (exit {self.proc.wait()})")
        atexit.register(self.stop)

    @classmethod
    def get(cls) -> ForkServer:
        with cls._lock:
            if cls._running is None or cls._running.proc.poll() is not None:
                cls._running = ForkServer()
            return cls._running

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # its end of file: it returns
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


class _StdinProtocol(asyncio.streams.FlowControlMixin):
    """The protocol under a child's stdin writer: drain() waits while the pipe is full; wait_closed() works."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._closed: asyncio.Future[None] = loop.create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        return self._closed


class ForkedProcess:
    """What `asyncio.subprocess.Process` offers the tests, for a process the fork server started."""

    def __init__(self, pid: int, conn: socket.socket, stdin: asyncio.StreamWriter | None,
                 stdout: asyncio.StreamReader | None, stderr: asyncio.StreamReader | None) -> None:
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self.returncode: int | None = None
        self._conn = conn
        self._ended = asyncio.get_running_loop().create_future()
        self._watch = asyncio.get_running_loop().create_task(self._status(), name=f"roundtable-{pid}-status")

    async def _status(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            raw = await loop.sock_recv(self._conn, 4096)
        except OSError:
            raw = b""
        finally:
            self._conn.close()
        code = json.loads(raw)["returncode"] if raw else -9  # (the fork server died: so did its report)
        self.returncode = code
        if not self._ended.done():
            self._ended.set_result(code)

    async def wait(self) -> int:
        return int(await asyncio.shield(self._ended))

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def communicate(self, input: bytes | None = None) -> tuple[bytes | None, bytes | None]:
        async def feed() -> None:
            if self.stdin is None:
                return
            if input:
                self.stdin.write(input)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    await self.stdin.drain()
            self.stdin.close()

        async def read(stream: asyncio.StreamReader | None) -> bytes | None:
            return None if stream is None else await stream.read()

        _, out, err = await asyncio.gather(feed(), read(self.stdout), read(self.stderr))
        await self.wait()
        return out, err


def _fd(stream: Stream, default: int) -> tuple[int, int | None]:
    """The fd to hand the child for `stream`, and our own end of a pipe made for it (or None)."""
    if stream is None:
        return default, None
    if stream == PIPE:
        read, write = os.pipe()
        return (read, write) if default == 0 else (write, read)
    if stream == DEVNULL:
        return os.open(os.devnull, os.O_RDWR), None
    if isinstance(stream, int):
        return stream, None
    return stream.fileno(), None


async def start_roundtable(*args: str, stdin: Stream = None, stdout: Stream = None, stderr: Stream = None,
                           env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                           fresh: bool = False) -> asyncio.subprocess.Process:
    """`roundtable ARGS...` started as `asyncio.create_subprocess_exec(ROUNDTABLE, *args, ...)` would start it
    (typed as what that returns: a `ForkedProcess` offers the same methods and attributes)."""
    if fresh or os.environ.get("ROUNDTABLE_TEST_FRESH"):
        return await asyncio.create_subprocess_exec(ROUNDTABLE, *args, stdin=stdin, stdout=stdout, stderr=stderr,
                                                    env=env, cwd=cwd)
    loop = asyncio.get_running_loop()
    server = await asyncio.to_thread(ForkServer.get)  # (a start blocks for a second or so: not on the loop)
    ends = [_fd(stdin, 0), _fd(stdout, 1)]
    ends.append((ends[1][0], None) if stderr == asyncio.subprocess.STDOUT else _fd(stderr, 2))
    request = {"argv": [ROUNDTABLE, *args], "env": dict(os.environ if env is None else env),
               "cwd": os.fspath(cwd) if cwd is not None else os.getcwd()}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(server.path)
        socket.send_fds(conn, [json.dumps(request).encode()], [child for child, _ in ends])
    finally:
        for (child, ours), stream in zip(ends, (stdin, stdout, stderr), strict=True):
            if ours is not None or stream == DEVNULL:  # (stderr=STDOUT shares stdout's fd: closed once, there)
                os.close(child)  # the child has its own copy now
    conn.setblocking(False)
    pid = json.loads(await loop.sock_recv(conn, 4096))["pid"]

    async def reader(fd: int | None) -> asyncio.StreamReader | None:
        if fd is None:
            return None
        stream = asyncio.StreamReader(limit=2**16)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(fd, "rb", 0))
        return stream

    writer: asyncio.StreamWriter | None = None
    if ends[0][1] is not None:
        transport, protocol = await loop.connect_write_pipe(
            lambda: _StdinProtocol(loop), os.fdopen(ends[0][1], "wb", 0))
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
    forked = ForkedProcess(pid, conn, writer, await reader(ends[1][1]), await reader(ends[2][1]))
    return cast(asyncio.subprocess.Process, forked)
