"""The console's terminal: reading lines, and a screen that keeps the line being typed whole.

`open_terminal(stdin, stdout, person=..., history=...)` gives a `Terminal`:

- on a terminal (stdin and stdout both ttys): a prompt (`you> `) with GNU readline
  line editing (arrow keys, Ctrl-R) and history kept in a file; a status row
  (`planner is typing…`) above the prompt; author names in colour (not with
  NO_COLOR set or TERM=dumb). The terminal's modes are saved first and restored
  at the end, however the session ends.
- elsewhere (pipes, files): lines are read and written as they are.

Ctrl-C, as in other REPLs: with part of a line typed, it drops that line (shown ending in
`^C`) and asks again; on an empty line it stops the turns running now, as ⏹ Stop does
(`LineReader.interrupt`), and with none running it stops the console at once, as a Ctrl-C
anywhere else does. While readline reads, the terminal passes Ctrl-C to it as a key (bound to
accept the line; the key that ended it is read back) instead of as a signal; an empty line
ended by it raises the signal itself, so every stop goes through the one SIGINT handler.

Lines are read in a daemon thread, never in the event loop's executor: asyncio.run
waits for executor threads at exit, so a read blocked on the keyboard would hold
Ctrl-C up until the next key. A pipe is read with `os.read`, not through
`sys.stdin`, whose buffer lock a blocked daemon thread would hold at exit.

The screen's bottom is [replies being written][status row][the line readline edits].
Anything printed goes above it: erase the bottom, write, draw the bottom again (the
edited text and the cursor are read back from readline). A reply being written
(`show_live`) is drawn there, wrapped, its newest rows when it is taller than the
terminal allows, until it is printed for good (`print(..., ends_live=...)`). Messages
arrive at any time, from the event loop's thread; readline runs in the reading thread;
one lock orders them.
"""
from __future__ import annotations

import asyncio
import atexit
import codecs
import contextlib
import ctypes
import logging
import os
import queue
import re
import signal
import sys
import threading
import unicodedata
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Protocol, TextIO, TypeVar

from bot.core.rules.secrets import mask, mask_error

log = logging.getLogger(__name__)
T = TypeVar("T", ctypes.c_int, ctypes.c_char_p)

MORE_PROMPT = "...> "
CTRL_C = 3
HISTORY_LENGTH = 1000
RESET = "\x1b[0m"
PERSON_STYLE = "1"  # bold
NOTICE_STYLE = "90"  # grey
STATUS_STYLE = "2;3"  # dim italic
ERROR_STYLE = "31"
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # and bidi overrides
AGENT_STYLES = ("36", "35", "33", "32", "34", "96", "95", "93", "92", "94")  # never red, grey or plain bold


def history_path(db: str) -> Path | None:
    """The history file beside the database (`roundtable.db` -> `roundtable.history`);
    None for a database URL (the history then lasts one session)."""
    if db.startswith("sqlite:///"):
        db = db[len("sqlite:///"):]
    if "://" in db:
        return None
    path = Path(db)
    return path.with_suffix(".history") if path.suffix else path.with_name(path.name + ".history")


def wants_colour(env: Mapping[str, str]) -> bool:
    return not env.get("NO_COLOR") and env.get("TERM", "") != "dumb"


def agent_style(name: str) -> str:
    """A colour of its own for each agent name, the same in every run."""
    return AGENT_STYLES[zlib.crc32(name.casefold().encode()) % len(AGENT_STYLES)]


def cells(text: str) -> int:
    """Terminal columns `text` takes (wide East Asian characters 2, combining marks 0)."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch) or ch in "\u200b\u200c\u200d":
            continue
        width += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
    return width


def and_list(names: list[str]) -> str:
    """`planner`, `planner and budget`, `planner, budget and local`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


# output -----------------------------------------------------------------------
class Screen:
    """Plain lines (pipes, files, tests): no prompt, no status, no colour, nothing shown before
    it is printed for good (every line is printed once, whole)."""

    colour = False
    live = False  # shows replies while they are written

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def print(self, text: str, *, replaces_echo: bool = False, ends_live: str | None = None) -> None:
        """Write a line. `replaces_echo`: it shows the line just typed (`[you] text` for `text`).
        `ends_live`: it is the reply `show_live` showed under that key, now printed for good."""
        self.out.write(text + "\n")
        self.out.flush()

    def set_status(self, text: str | None) -> None:
        """What is going on now (`planner is typing…`); None clears it."""

    def show_live(self, key: str, text: str | None) -> None:
        """A reply being written (its lines as far as they may be shown), above the status; None
        takes it away."""

    def finish(self) -> None:
        """The session ends: clear the status and the prompt; later lines are plain."""

    def paint(self, text: str, style: str) -> str:
        return f"\x1b[{style}m{text}{RESET}" if self.colour else text

    def clean(self, text: str) -> str:
        """`text` safe to print here: no secret the process knows (a pipe gets the rest as it is)."""
        return mask(text)

    def author(self, name: str, kind: str) -> str:
        """`[name]`, coloured by kind ("user", "agent", "system") on a colour terminal."""
        style = {"user": PERSON_STYLE, "system": NOTICE_STYLE}.get(kind) or agent_style(name)
        return self.paint(f"[{name}]", style)


class LineEditor(Protocol):
    """What the screen reads back from the line editor (readline)."""

    def buffer(self) -> str: ...

    def point(self, buffer: str) -> int:
        """The cursor, as a character index into `buffer`."""
        ...

    def shown_prompt(self, prompt: str) -> str:
        """The prompt on screen now: `prompt`, or what stands in for it (Ctrl-R's search)."""
        ...


@dataclass
class _Echo:
    text: str  # prompt + the line typed, still on screen right above the cursor
    kind: str  # "message" (its `[you] text` replaces it), "keep", "drop" (a blank line)
    mark: str = ""  # written after `text` when it is kept (`^C`: a line dropped)


class TtyScreen(Screen):
    """A terminal: a status row and readline's line at the bottom, kept whole while lines are printed."""

    live = True

    def __init__(self, out: TextIO, editor: LineEditor, *, colour: bool, columns: int | None = None,
                 hooked: bool = True, lines: int | None = None) -> None:
        super().__init__(out)
        self.editor = editor
        self.colour = colour
        self._columns = columns  # fixed width (tests); None: ask the terminal
        self._lines = lines  # fixed height (tests); None: ask the terminal
        self._live: dict[str, str] = {}  # replies being written, by key, in the order they began
        self._live_rows = 0  # rows they took when last drawn
        self._hooked = hooked  # readline calls `prompt_drawn` once its prompt is on screen
        self._lock = threading.RLock()
        self._status: str | None = None
        self._prompt: str | None = None  # the prompt readline shows now (the cursor is in its line)
        self._asked: str = ""  # the prompt of the read under way, shown once readline has drawn it
        self._echo: _Echo | None = None
        self._finished = False

    def clean(self, text: str) -> str:
        """Control characters (a model's escape sequences, a carriage return) shown as U+FFFD:
        they would move the cursor under the screen's feet, or worse; no secret the process knows."""
        return _CONTROLS.sub("\ufffd", mask(text))

    # called from the event loop's thread
    def print(self, text: str, *, replaces_echo: bool = False, ends_live: str | None = None) -> None:
        with self._lock:
            if self._finished:
                return super().print(text)
            self._erase(keep_echo=not (replaces_echo and self._echo is not None and self._echo.kind == "message"))
            if ends_live is not None:
                self._live.pop(ends_live, None)
            self._write(text + "\n")
            self._draw()

    def show_live(self, key: str, text: str | None) -> None:
        with self._lock:
            if self._finished or self._live.get(key) == text:
                return
            self._erase()
            if text is None:
                self._live.pop(key, None)
            else:
                self._live[key] = text
            self._draw()

    def set_status(self, text: str | None) -> None:
        with self._lock:
            if self._finished or text == self._status:
                return
            self._erase()
            self._status = text
            self._draw()

    def finish(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._erase()
            self._status = self._prompt = None
            self._live.clear()
            self._finished = True
            self.out.flush()

    # called from the reading thread
    def reading(self, prompt: str) -> None:
        """Before readline draws `prompt`: the bottom ends in an empty row for it."""
        with self._lock:
            self._erase()
            self._prompt, self._asked = None, prompt
            self._draw()
            if not self._hooked:
                self._prompt = prompt  # drawn in a moment

    def prompt_drawn(self) -> None:
        """readline's pre-input hook: the prompt is on screen (drawn again, in case a line was
        printed between readline drawing it and now)."""
        with self._lock:
            if self._finished:
                return
            self._prompt = self._asked
            self._write("\r\x1b[K" + self._asked)
            self.out.flush()

    def read(self, line: str | None, *, more: bool) -> None:
        """readline returned `line` (None: end of input, the cursor still in the prompt's row)."""
        with self._lock:
            prompt, self._prompt = self._prompt, None
            if self._finished or prompt is None:
                return
            if line is None:
                self._write("\r\x1b[K")
                self.out.flush()
                return
            kind = "drop" if not line.strip() else "keep" if more or line.lstrip().startswith("/") else "message"
            self._echo = _Echo(prompt + line, kind)

    def dropped(self, line: str) -> None:
        """readline returned `line`, ended by Ctrl-C: it stays on screen marked `^C`, and is not sent."""
        with self._lock:
            prompt, self._prompt = self._prompt, None
            if not self._finished and prompt is not None:
                self._echo = _Echo(prompt + line, "keep", "^C")

    # drawing (with the lock held)
    def _width(self) -> int:
        if self._columns is not None:
            return self._columns
        try:
            columns = os.get_terminal_size(self.out.fileno()).columns
        except (OSError, ValueError):
            return 80
        return max(columns, 10) if columns else 80  # 0: the terminal does not say (a pty nobody sized)

    def _height(self) -> int:
        if self._lines is not None:
            return self._lines
        try:
            return max(os.get_terminal_size(self.out.fileno()).lines, 5)
        except (OSError, ValueError):
            return 24

    def _erase(self, *, keep_echo: bool = True) -> None:
        """Clear the bottom (replies being written, status, echo, prompt); the cursor ends at the
        start of its first row. A kept echo is written again, for good, above the bottom."""
        width = self._width()
        up = self._live_rows + (1 if self._status else 0)
        self._live_rows = 0
        if self._prompt is not None:
            buffer = self.editor.buffer()
            prompt = self.editor.shown_prompt(self._prompt)
            up += (cells(prompt) + cells(buffer[:self.editor.point(buffer)])) // width
        elif self._echo is not None:
            up += -(-cells(self._echo.text) // width) or 1
        self._write((f"\x1b[{up}A" if up else "") + "\r\x1b[J")
        if self._echo is not None and self._echo.kind != "drop" and keep_echo:
            self._write(self._echo.text + self._echo.mark + "\n")
        self._echo = None

    def _draw(self) -> None:
        """Draw the replies being written, the status row and the edited line, the cursor where
        readline has it."""
        width = self._width()
        rows = self._wrapped_live(width)
        for row in rows:
            self._write(row + "\n")
        self._live_rows = len(rows)
        if self._status:
            status = self._status
            while cells(status) > width - 1:
                status = status[:-2] + "…"
            self._write(self.paint(status, STATUS_STYLE) + "\n")
        if self._prompt is not None:
            buffer = self.editor.buffer()
            prompt = self.editor.shown_prompt(self._prompt)
            shown = cells(prompt) + cells(buffer)
            cursor = cells(prompt) + cells(buffer[:self.editor.point(buffer)])
            self._write(prompt + buffer)
            if shown and shown % width == 0:
                self._write(" \r")  # leave the pending wrap at the row's end, as readline does
            moves = ""
            if shown // width > cursor // width:
                moves += f"\x1b[{shown // width - cursor // width}A"
            if cursor != shown:
                moves += "\r" + (f"\x1b[{cursor % width}C" if cursor % width else "")
            self._write(moves)
        self.out.flush()

    def _wrapped_live(self, width: int) -> list[str]:
        """The rows of the replies being written, each narrower than the terminal (so a row never
        wraps by itself); the newest rows that leave room for the status and the prompt."""
        rows: list[str] = []
        for text in self._live.values():
            for line in text.split("\n"):
                rows.extend(_wrap(line, width - 1))
        room = max(self._height() - 4, 2)
        if len(rows) > room:  # the newest rows; the first of them says that more came before
            rows = rows[-room:]
            rows[0] = "…" + _strip_paint(rows[0])[1:]
        return rows

    def _write(self, text: str) -> None:
        self.out.write(text)


_PAINT = re.compile(r"\x1b\[[0-9;]*m")


def _strip_paint(text: str) -> str:
    return _PAINT.sub("", text)


def _wrap(line: str, width: int) -> list[str]:
    """`line` cut into rows of at most `width` cells (colour codes take none); an empty line is one row."""
    rows: list[str] = []
    current, used, i = "", 0, 0
    while i < len(line):
        paint = _PAINT.match(line, i)
        if paint:
            current += paint.group()
            i = paint.end()
            continue
        wide = cells(line[i])
        if used + wide > width and used:
            rows.append(current + (RESET if "\x1b[" in current else ""))
            current, used = "", 0
        current += line[i]
        used += wide
        i += 1
    rows.append(current)
    return rows


# input --------------------------------------------------------------------------
class _Readline:
    """GNU readline (or libedit) as the console uses it: history in a file, the cursor read back."""

    def __init__(self, module: ModuleType, history: Path | None) -> None:
        self.module = module
        self.history = history
        self.added = 0
        if hasattr(module, "set_auto_history"):
            module.set_auto_history(False)  # continuation lines (a system prompt) stay out of it
        module.set_history_length(HISTORY_LENGTH)
        if history is not None and history.exists():
            try:
                module.read_history_file(str(history))
            except OSError as exc:
                log.warning("could not read the console history %s: %s", history, exc)
        lib = _library(module)
        self._rl_point = _variable(lib, ctypes.c_int, "rl_point")
        self._rl_display_prompt = _variable(lib, ctypes.c_char_p, "rl_display_prompt")
        self._rl_executing_key = _variable(lib, ctypes.c_int, "rl_executing_key")  # GNU readline >= 6.3

    def take_ctrl_c(self) -> bool:
        """Bind Ctrl-C to accept the line, when the key that ended a line can be read back."""
        if self._rl_executing_key is None:
            return False
        self.module.parse_and_bind(r'"\C-c": accept-line')
        return True

    def ended_by_ctrl_c(self) -> bool:
        return self._rl_executing_key is not None and self._rl_executing_key.value == CTRL_C

    def buffer(self) -> str:
        return str(self.module.get_line_buffer())

    def point(self, buffer: str) -> int:
        if self._rl_point is None:
            return len(buffer)
        raw = buffer.encode("utf-8", "surrogateescape")
        return len(raw[:max(self._rl_point.value, 0)].decode("utf-8", "ignore"))

    def shown_prompt(self, prompt: str) -> str:
        raw = self._rl_display_prompt.value if self._rl_display_prompt is not None else None
        if not raw:
            return prompt
        return raw.decode("utf-8", "replace").replace("\x01", "").replace("\x02", "")  # without invisible marks

    def remember(self, line: str) -> None:
        count = self.module.get_current_history_length()
        if line.strip() and (count == 0 or self.module.get_history_item(count) != line):
            self.module.add_history(line)
            self.added += 1

    def save(self) -> None:
        if self.history is None or not self.added:
            return
        try:
            if not self.history.exists():
                os.close(os.open(self.history, os.O_WRONLY | os.O_CREAT, 0o600))  # it may hold prompts
            self.module.write_history_file(str(self.history))
        except OSError as exc:
            log.warning("could not save the console history %s: %s", self.history, exc)


def _library(module: ModuleType) -> ctypes.CDLL | None:
    """The readline library behind the module, for the two variables the module does not expose:
    `rl_point` (the cursor, a byte offset) and `rl_display_prompt` (the prompt shown, which
    Ctrl-R's search replaces). Without them the cursor is taken at the end, the prompt as given."""
    try:
        return ctypes.CDLL(module.__file__)
    except (OSError, TypeError):
        return None


def _variable(lib: ctypes.CDLL | None, kind: type[T], name: str) -> T | None:
    if lib is None:
        return None
    try:
        return kind.in_dll(lib, name)
    except ValueError:  # not in this library (another readline)
        return None


class _Modes:
    """The terminal's modes, saved at the start and restored at the end (also at exit)."""

    def __init__(self, fd: int) -> None:
        import termios

        self.termios = termios
        self.fd = fd
        self.saved = termios.tcgetattr(fd)
        self.interrupt_is_a_key = False  # while reading: Ctrl-C goes to readline instead of raising SIGINT
        atexit.register(self.restore)

    def interrupts_with_ctrl_c(self) -> bool:
        """Whether Ctrl-C is the terminal's interrupt character (it is unless changed with stty;
        another one, such as Ctrl-X, may be a prefix of readline's keys: it is left a signal)."""
        key = self.saved[6][self.termios.VINTR]
        return (key[0] if isinstance(key, bytes) else key) == CTRL_C

    def restore(self) -> None:
        with contextlib.suppress(self.termios.error, OSError):
            self.termios.tcsetattr(self.fd, self.termios.TCSANOW, self.saved)

    def reading(self) -> None:
        """The modes readline starts from: the saved ones, Ctrl-C a key when `interrupt_is_a_key`."""
        if not self.interrupt_is_a_key:
            return self.restore()
        attrs = list(self.saved)
        attrs[6] = list(attrs[6])
        try:
            attrs[6][self.termios.VINTR] = bytes([os.fpathconf(self.fd, "PC_VDISABLE")])
            self.termios.tcsetattr(self.fd, self.termios.TCSANOW, attrs)
        except (self.termios.error, OSError, ValueError):
            self.restore()

    def quiet(self) -> None:
        """No echo between reads: keys typed while readline is not reading would garble the screen
        (readline shows them once it reads). Signals stay on: Ctrl-C still stops."""
        attrs = list(self.saved)
        attrs[3] = attrs[3] & ~self.termios.ECHO
        with contextlib.suppress(self.termios.error, OSError):
            self.termios.tcsetattr(self.fd, self.termios.TCSANOW, attrs)

    def close(self) -> None:
        self.restore()
        atexit.unregister(self.restore)


class LineReader:
    """`await read_line()`: the next line with its newline, "" at end of input. `more=True`:
    a line that continues an answer (a continuation prompt, not kept in the history)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._requests: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[str], bool]] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None
        self._pending = ""
        self._decoder = codecs.getincrementaldecoder(getattr(stream, "encoding", None) or "utf-8")("replace")
        # Ctrl-C on an empty line (a terminal): stop the turns running now; True when there were any
        # (then the console goes on). Called from the reading thread.
        self.interrupt: Callable[[], bool] | None = None

    async def __call__(self, *, more: bool = False) -> str:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="console-input", daemon=True)
            self._thread.start()
        self._requests.put((loop, future, more))
        return await future

    def _serve(self) -> None:
        while True:
            loop, future, more = self._requests.get()
            try:
                line, error = self.read(more=more), None
            except _Interrupted:  # the console is being stopped
                continue
            except (OSError, ValueError) as exc:  # handed to the reader's caller
                line, error = "", exc
            try:
                loop.call_soon_threadsafe(_settle, future, line, error)
            except RuntimeError:  # the loop is closed: the console has ended
                return

    def read(self, *, more: bool) -> str:
        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            return self.stream.readline()
        while "\n" not in self._pending:
            chunk = os.read(fd, 65536)
            self._pending += self._decoder.decode(chunk, final=not chunk)
            if not chunk:
                break  # end of input (a terminal may give more after it)
        line, newline, self._pending = self._pending.partition("\n")
        return line.removesuffix("\r") + newline  # CRLF files read as sys.stdin would


def _settle(future: asyncio.Future[str], line: str, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(line)


class TtyLineReader(LineReader):
    """Lines edited with readline, behind a prompt, on the screen's bottom row."""

    def __init__(self, stream: TextIO, screen: TtyScreen, editor: _Readline, modes: _Modes, prompt: str) -> None:
        super().__init__(stream)
        self.screen = screen
        self.editor = editor
        self.modes = modes
        self.prompt = prompt

    def read(self, *, more: bool) -> str:
        prompt = MORE_PROMPT if more else self.prompt
        while True:
            self.screen.reading(prompt)
            self.modes.reading()  # readline echoes what it reads itself
            try:
                line: str | None = input(prompt)
            except EOFError:
                line = None
            finally:
                self.modes.quiet()
            if line is None or not self.modes.interrupt_is_a_key or not self.editor.ended_by_ctrl_c():
                break
            if not line and self.interrupt is not None and self.interrupt():
                self.screen.dropped(line)  # Ctrl-C on an empty line while agents work: their turns stop
                continue
            if not line:  # Ctrl-C on an empty line, no turn running: stop, through the SIGINT handler
                self.screen.read(line, more=more)
                os.kill(os.getpid(), signal.SIGINT)
                raise _Interrupted
            self.screen.dropped(line)  # Ctrl-C with part of a line typed: drop it, ask again
        self.screen.read(line, more=more)
        if line is None:
            return ""
        if not more:
            self.editor.remember(line)
        return line + "\n"


class _Interrupted(Exception):
    """The read ended in Ctrl-C on an empty line: SIGINT was raised, the read is never answered."""


# the session ----------------------------------------------------------------------
@dataclass
class Terminal:
    screen: Screen
    read_line: LineReader
    is_tty: bool  # prompt, line editing, status, colour


class _ScreenStream:
    """A log handler's stream that prints through the screen (whole lines, grey: not chat)."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen
        self._partial = ""

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self.screen.print(self.screen.paint(self.screen.clean(line), NOTICE_STYLE))
        return len(text)

    def flush(self) -> None:
        pass


class ShortLogFormat(logging.Formatter):
    """A log record as one short line among the chat: `[warning] the stream of model m broke off ...`,
    without the time, the logger's name or a traceback (the exception's kind only). The whole
    records: `roundtable console 2>FILE` (stderr that is not this terminal keeps the full format)."""

    def format(self, record: logging.LogRecord) -> str:
        lines = record.getMessage().strip().splitlines() or [""]
        text = lines[0] + (" …" if len(lines) > 1 else "")
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__})"
        return mask_error(f"[{record.levelname.lower()}] {text}")


@contextlib.contextmanager
def _logs_through(screen: Screen, stderr: TextIO) -> Iterator[None]:
    """Log lines meant for this terminal's stderr go through the screen, above the prompt, each
    one short grey line (`ShortLogFormat`) so they never read as part of the chat."""
    moved: list[tuple[logging.StreamHandler[TextIO], TextIO, logging.Formatter | None]] = []
    if _isatty(stderr):
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is stderr:
                moved.append((handler, handler.stream, handler.formatter))
                handler.setStream(_ScreenStream(screen))
                handler.setFormatter(ShortLogFormat())
    try:
        yield
    finally:
        for handler, stream, formatter in moved:
            handler.setStream(stream)
            handler.setFormatter(formatter)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


EXIT_INTERRUPTED = 130


@contextlib.contextmanager
def _interrupts(force: Callable[[], None]) -> Iterator[bool]:
    """Ctrl-C: the first goes to the handler in place (asyncio.run's: it cancels the console,
    which stops cleanly: runs recorded as interrupted, exit 130). One more while that stop
    runs calls `force`, which ends the process at once: a run still marked running is
    taken as interrupted by the next start, so nothing is lost either way. Yields whether
    Ctrl-C is handled here."""
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        yield False  # Ctrl-C is ignored here, or not ours to handle
        return
    pressed = 0

    def on_sigint(signum: int, frame: object) -> None:
        nonlocal pressed
        pressed += 1
        if pressed > 1:
            force()
        # The interpreter's last moments put the default action back (death by SIGINT, not 130);
        # by then the console is gone, and one more Ctrl-C has nothing left to stop.
        atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
        previous(signum, frame)  # type: ignore[arg-type]  # a frame, as the signal module gives it

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield True
    finally:
        if not pressed:
            signal.signal(signal.SIGINT, previous)
        # else it stays: a Ctrl-C until the process is gone ends it at once, never with a traceback


def _force_exit(*closing: Callable[[], None]) -> Callable[[], None]:
    def force() -> None:
        for close in closing:
            with contextlib.suppress(Exception):
                close()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os._exit(EXIT_INTERRUPTED)
    return force


@contextlib.contextmanager
def open_terminal(stdin: TextIO, stdout: TextIO, *, person: str, history: Path | None,
                  stderr: TextIO | None = None, env: Mapping[str, str] | None = None) -> Iterator[Terminal]:
    """The console's input and output: see the module docstring."""
    readline: ModuleType | None = None
    if _isatty(stdin) and _isatty(stdout):
        try:
            import readline
        except ImportError:  # a Python built without it: plain lines
            readline = None
    if readline is None:
        with _interrupts(_force_exit()):
            yield Terminal(Screen(stdout), LineReader(stdin), False)
        return
    modes = _Modes(stdin.fileno())
    editor = _Readline(readline, history)
    hooked = hasattr(readline, "set_pre_input_hook")
    screen = TtyScreen(stdout, editor, colour=wants_colour(os.environ if env is None else env), hooked=hooked)
    if hooked:
        readline.set_pre_input_hook(screen.prompt_drawn)
    modes.quiet()
    reader = TtyLineReader(stdin, screen, editor, modes, f"{person}> ")
    try:
        with _interrupts(_force_exit(screen.finish, editor.save, modes.restore)) as handled, \
                _logs_through(screen, stderr if stderr is not None else sys.stderr):
            # else Ctrl-C stops at once, as a signal, even with a line typed
            modes.interrupt_is_a_key = handled and modes.interrupts_with_ctrl_c() and editor.take_ctrl_c()
            yield Terminal(screen, reader, True)
    finally:
        screen.finish()
        if hooked:
            readline.set_pre_input_hook(None)
        editor.save()
        modes.close()


