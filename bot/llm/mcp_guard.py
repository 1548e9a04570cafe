"""Runs an MCP stdio server so that it never outlives the process that started it (kill -9 included).

    python mcp_guard.py PARENT_PID -- COMMAND ARGS...

The MCP SDK starts a stdio server in a session (and process group) of its own, so a bot killed
with -9 would leave the server running, still carrying out a tool call the bot can no longer
journal. This guard is what the SDK starts: it asks Linux to send it SIGTERM when its parent dies
(`PR_SET_PDEATHSIG`), also polls that its parent is still PARENT_PID (other systems, and the
race before the request), starts COMMAND in its own process group (stdin, stdout and stderr
inherited: the SDK talks to the server directly) and, when the parent is gone or it is told to
stop, kills that whole group (the server and whatever it started), then exits with the server's
status. Only the standard library: it runs as a file, without importing the bot.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
POLL = 0.5  # seconds between looks at the parent


def _ask_for_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: mcp_guard.py PARENT_PID -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    parent = int(argv[1])
    server: subprocess.Popen[bytes] | None = None

    def stop(*_: object) -> None:
        if server is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(server.pid, signal.SIGKILL)
        os._exit(137)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    _ask_for_death_signal()
    if os.getppid() != parent:  # it died before the request took effect
        stop()
    try:
        server = subprocess.Popen(argv[3:], process_group=0)  # noqa: S603 (the host's own mcp.json names it)
    except OSError as exc:
        print(f"mcp_guard: cannot start {argv[3]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    while True:
        try:
            status = server.wait(timeout=POLL)
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                stop()
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.pid, signal.SIGKILL)  # what the server started goes with it
        return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
