"""The suite's fork server for `roundtable` processes (started by tests/support/spawn.py; not for users).

Every `roundtable` start pays about a second of CPU before it does anything: the interpreter, then the
`openai` package (all of its pydantic types), discord.py, aiosqlite and the bot's own modules. The suite
starts a few hundred of them, and on a 2-core machine those seconds were most of the quick check's time
(issue 32). This process imports all of that once, then forks a child per request: the child is a real
process (its own pid, pipes, signals, exit status) that runs the installed console script's entry point,
`bot.cli.main:main`, with the request's arguments, environment, working directory and standard streams,
as `roundtable ARGS...` would, minus the imports.

Protocol, over a SOCK_SEQPACKET unix socket: a request is one message (JSON: argv, env, cwd) carrying the
child's stdin, stdout and stderr as three file descriptors; the answer is one message with the child's
pid (`{"pid": N}`), then one with its status (`{"returncode": N}`, negative for a signal, as subprocess
gives) when it ends. The server ends when its own stdin reaches end of file (the test process is gone).
"""
from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any

# What `roundtable run`, `console`, `doctor`, `init`, `export`, `replay`, `migrate` and `copy` import before
# their work begins (not the `mcp` SDK: the bot loads it only when a server is configured).
PRELOAD = (
    "bot.cli.main", "bot.cli.doctor", "bot.cli.init", "bot.cli.record", "bot.config", "bot.masking",
    "bot.wiring", "bot.llm.openai_llm", "bot.surfaces.console", "bot.surfaces.discord", "storage",
)
MESSAGE = 1 << 20  # a request's most bytes (the environment is most of it)


def preload() -> None:
    import importlib
    import pkgutil

    for name in PRELOAD:
        module = importlib.import_module(name)
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), f"{name}."):
            if ".mcp" not in info.name:
                importlib.import_module(info.name)
    # What each process would build again first thing: the token counter's encoding (tiktoken keeps it per
    # process) and the model client's TLS context.
    from bot.llm.openai_llm import tls_context
    from bot.llm.tokens import make_token_counter

    make_token_counter().load()
    tls_context()


def send(conn: socket.socket, message: dict[str, int]) -> None:
    with contextlib.suppress(OSError):  # (the test that asked is gone: nobody to tell)
        conn.send(json.dumps(message).encode())


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # (a handler, so that the wake-up fd hears of it)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "request")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):
                    return
            elif key.data == "child":
                os.read(wake_read, 4096)
                reap(children)
            else:
                fork(listener, children)
        reap(children)  # (a SIGCHLD that came while the selector was not waiting)


def fork(listener: socket.socket, children: dict[int, socket.socket]) -> None:
    """Take one request and fork its child."""
    conn, _ = listener.accept()
    try:
        raw, fds, _flags, _addr = socket.recv_fds(conn, MESSAGE, 3)
    except OSError:
        conn.close()
        return
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    request = json.loads(raw)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    send(conn, {"pid": pid})


def reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            send(conn, {"returncode": code})
            conn.close()


def streams(env: dict[str, str]) -> None:
    """New sys.stdin/stdout/stderr on the child's fds 0-2, buffered as a fresh interpreter would buffer them
    for `env` (PYTHONUNBUFFERED; line buffering on a terminal; stderr always by line)."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False),  # noqa: SIM115  # (open for the child's life)
                                 encoding=encoding, errors=sys.stdin.errors)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
        stream = io.TextIOWrapper(raw, encoding=encoding,
                                  errors="backslashreplace" if name == "stderr" else errors,
                                  line_buffering=name == "stderr" or os.isatty(fd), write_through=unbuffered)
        setattr(sys, name, stream)
    for name in ("stdin", "stdout", "stderr"):
        setattr(sys, f"__{name}__", getattr(sys, name))


def child(request: dict[str, Any], fds: list[int]) -> None:
    """The forked child: become `roundtable ARGV...` with the request's streams, environment and directory,
    run, and end as the interpreter would (threads joined, exit functions run, streams flushed)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        env = {str(k): str(v) for k, v in request["env"].items()}
        os.environ.clear()
        os.environ.update(env)
        os.chdir(str(request["cwd"]))
        sys.argv = [str(a) for a in request["argv"]]
        sys.path[0] = os.path.dirname(sys.argv[0])  # a console script's sys.path[0]: its bin directory
        streams(env)
        code = run()
        threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's exit: non-daemon threads first,
        atexit._run_exitfuncs()  # then the exit functions, then the streams
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    except BaseException:
        traceback.print_exc()
    finally:
        if code == -signal.SIGINT:  # as the interpreter does after a KeyboardInterrupt: death by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code if 0 <= code < 256 else 1)


def run() -> int:
    """`sys.exit(main())`, as the console script runs it: the exit status."""
    from bot.cli.main import main

    try:
        return main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


def main() -> None:
    preload()
    assert threading.active_count() == 1, "the fork server must have no thread of its own when it forks"
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
