"""The console's terminal helpers in process: what the screen draws (checked on a terminal
emulator, pyte, playing readline's part by hand), the line reader over a pipe, the small rules."""
from __future__ import annotations

import io
import os
from pathlib import Path

import pyte
import pytest

from bot.surfaces.console.terminal import (
    AGENT_STYLES,
    LineReader,
    Screen,
    TtyScreen,
    agent_style,
    and_list,
    cells,
    history_path,
    wants_colour,
)


class Editor:
    """readline's state as the screen reads it back."""

    def __init__(self) -> None:
        self.text = ""
        self.cursor = 0

    def buffer(self) -> str:
        return self.text

    def point(self, buffer: str) -> int:
        return self.cursor

    def shown_prompt(self, prompt: str) -> str:
        return self.search or prompt

    search = ""


class Terminal(io.TextIOBase):
    """A terminal emulator as the screen's output (with the tty's newline translation)."""

    def __init__(self, columns: int, rows: int = 8) -> None:
        self.screen = pyte.Screen(columns, rows)
        self.stream = pyte.Stream(self.screen)

    def write(self, text: str) -> int:
        self.stream.feed(text.replace("\n", "\r\n"))
        return len(text)

    def rows(self) -> list[str]:
        return [row.rstrip() for row in self.screen.display if row.strip()]

    @property
    def cursor(self) -> tuple[int, int]:
        return self.screen.cursor.y, self.screen.cursor.x


def prompt_with(term: Terminal, screen: TtyScreen, editor: Editor, typed: str, left: int = 0) -> None:
    """Play readline: the prompt drawn, `typed` typed, the cursor moved `left`."""
    screen.reading("you> ")
    term.write("you> ")
    screen.prompt_drawn()
    term.write(typed + "\b" * left)
    editor.text, editor.cursor = typed, len(typed) - left


@pytest.fixture
def tty() -> tuple[Terminal, TtyScreen, Editor]:
    term, editor = Terminal(40), Editor()
    return term, TtyScreen(term, editor, colour=False, columns=40), editor  # type: ignore[arg-type]


def test_lines_go_above_the_line_being_typed_and_the_cursor_stays(tty):
    term, screen, editor = tty
    prompt_with(term, screen, editor, "hello world", left=5)
    screen.print("[planner] hi")
    assert term.rows() == ["[planner] hi", "you> hello world"] and term.cursor == (1, 11)
    screen.set_status("planner is typing…")
    assert term.rows() == ["[planner] hi", "planner is typing…", "you> hello world"] and term.cursor == (2, 11)
    screen.print("[budget] hello")
    assert term.rows() == ["[planner] hi", "[budget] hello", "planner is typing…", "you> hello world"]
    screen.set_status(None)
    assert term.rows() == ["[planner] hi", "[budget] hello", "you> hello world"] and term.cursor == (2, 11)


def test_a_search_with_ctrl_r_is_kept_as_readline_shows_it(tty):
    term, screen, editor = tty
    prompt_with(term, screen, editor, "")
    editor.search = "(reverse-i-search)`wor': "
    term.write("\r\x1b[K" + editor.search + "hello world" + "\b" * 5)  # readline's search display
    editor.text, editor.cursor = "hello world", 6
    screen.print("[planner] hi")
    assert term.rows() == ["[planner] hi", "(reverse-i-search)`wor': hello world"]
    assert term.cursor == (1, len(editor.search) + 6)


def test_a_wrapped_line_is_kept_whole(tty):
    term, screen, editor = tty
    typed = "a fairly long line that wraps past forty columns"  # 5 + 48 cells: two rows
    prompt_with(term, screen, editor, typed, left=10)
    screen.set_status("planner is typing…")
    screen.print("[planner] hi")
    assert term.rows() == ["[planner] hi", "planner is typing…", ("you> " + typed)[:40].rstrip(),
                           ("you> " + typed)[40:]]
    assert term.cursor == (3, (5 + len(typed) - 10) - 40)


def test_a_line_ending_at_the_last_column_keeps_the_cursor_below(tty):
    term, screen, editor = tty
    typed = "x" * 35  # prompt + text fill the row exactly
    prompt_with(term, screen, editor, typed)
    term.write(" \r")  # readline leaves the pending wrap the same way
    screen.print("news")
    assert term.rows() == ["news", "you> " + typed] and term.cursor == (2, 0)


@pytest.mark.parametrize("typed, kind_of_answer, rows", [
    ("hello", "its own echo", ["[you] hello"]),  # the message replaces the typed line
    ("/agent list", "an answer", ["you> /agent list", "Agents of main"]),  # a command stays above its answer
    ("   ", "the next prompt", ["you>"]),  # a blank line leaves nothing behind
])
def test_the_typed_line_after_enter(tty, typed, kind_of_answer, rows):
    term, screen, editor = tty
    screen.set_status("planner is typing…")
    prompt_with(term, screen, editor, typed)
    term.write("\n")  # Enter: readline moves to the next row
    editor.text, editor.cursor = "", 0
    screen.read(typed, more=False)
    if kind_of_answer == "its own echo":
        screen.print("[you] hello", replaces_echo=True)
    elif kind_of_answer == "an answer":
        screen.print("Agents of main")
    else:
        prompt_with(term, screen, editor, "")
    assert [r for r in term.rows() if "typing" not in r] == rows
    assert term.rows()[-2 if kind_of_answer == "the next prompt" else -1] == "planner is typing…"


@pytest.mark.parametrize("typed", ["half a li", "x" * 35, "y" * 74])  # one row, a row exactly, two rows
def test_a_line_dropped_by_ctrl_c_stays_marked_and_the_next_prompt_is_below(tty, typed):
    term, screen, editor = tty
    screen.set_status("planner is typing…")
    prompt_with(term, screen, editor, typed)
    term.write("\n")  # readline accepted the line (Ctrl-C is bound to that) and moved to the next row
    editor.text, editor.cursor = "", 0
    screen.dropped(typed)
    prompt_with(term, screen, editor, "")
    shown = "you> " + typed + "^C"
    assert term.rows() == [shown[i:i + 40] for i in range(0, len(shown), 40)] + ["planner is typing…", "you>"]
    assert term.cursor == (len(term.rows()) - 1, 5)


def test_end_of_input_clears_the_prompt_and_finish_leaves_plain_lines(tty):
    term, screen, editor = tty
    screen.set_status("planner is typing…")
    prompt_with(term, screen, editor, "")
    screen.read(None, more=False)  # Ctrl-D
    assert term.rows() == ["planner is typing…"] and term.cursor == (1, 0)
    screen.finish()
    assert term.rows() == []
    screen.set_status("budget is typing…")
    screen.print("[budget] late")
    assert term.rows() == ["[budget] late"]


def test_a_terminal_that_does_not_say_its_width_is_taken_as_80_columns() -> None:
    """A pseudo-terminal nobody sized says 0 columns: the status is not cut to a stub ("planner…")."""
    import fcntl
    import struct
    import termios

    controller, terminal = os.openpty()
    try:
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 0, 0, 0))
        assert os.get_terminal_size(terminal).columns == 0

        class Unsized(Terminal):
            def fileno(self) -> int:
                return terminal

        term, editor = Unsized(80), Editor()
        screen = TtyScreen(term, editor, colour=False)  # type: ignore[arg-type]  # no columns: asks the terminal
        prompt_with(term, screen, editor, "hello")
        screen.set_status("planner, budget and local are typing…")
        screen.print("[planner] hi")
        assert term.rows() == ["[planner] hi", "planner, budget and local are typing…", "you> hello"]
        assert term.cursor == (2, 10)
    finally:
        os.close(controller)
        os.close(terminal)


def test_colours_only_when_asked():
    plain = Screen(io.StringIO())
    assert plain.author("planner", "agent") == "[planner]" and plain.paint("error:", "31") == "error:"
    coloured = TtyScreen(io.StringIO(), Editor(), colour=True)
    assert coloured.author("you", "user") == "\x1b[1m[you]\x1b[0m"
    assert coloured.author("roundtable", "system") == "\x1b[90m[roundtable]\x1b[0m"
    assert coloured.author("planner", "agent") == f"\x1b[{agent_style('planner')}m[planner]\x1b[0m"
    assert TtyScreen(io.StringIO(), Editor(), colour=False).author("you", "user") == "[you]"


def test_control_characters_never_reach_the_terminal():
    text = "ok\x1b[2J\rover\x07\x9b1m\ttab\nnext"
    assert Screen(io.StringIO()).clean(text) == text  # a pipe gets what was said
    cleaned = TtyScreen(io.StringIO(), Editor(), colour=True).clean(text)
    assert cleaned == "ok\ufffd[2J\ufffdover\ufffd\ufffd1m\ttab\nnext"
    # a right-to-left override would reorder the rest of the line on screen
    assert TtyScreen(io.StringIO(), Editor(), colour=True).clean("a\u202eb\u2067c") == "a\ufffdb\ufffdc"


def test_each_agent_keeps_its_colour():
    names = ["planner", "budget", "local", "critic", "writer", "Planner"]
    styles = [agent_style(n) for n in names]
    assert all(s in AGENT_STYLES for s in styles) and styles[0] == styles[-1]  # case does not matter
    assert len(set(styles)) > 1


@pytest.mark.parametrize("env, colour", [
    ({}, True), ({"TERM": "xterm-256color"}, True), ({"NO_COLOR": "1"}, False), ({"NO_COLOR": ""}, True),
    ({"TERM": "dumb"}, False),
])
def test_wants_colour(env, colour):
    assert wants_colour(env) is colour


@pytest.mark.parametrize("db, history", [
    ("roundtable.db", Path("roundtable.history")),
    ("/data/rt.sqlite3", Path("/data/rt.history")),
    ("chat", Path("chat.history")),
    ("postgresql://db.example/roundtable", None),
])
def test_history_beside_the_database(db, history):
    assert history_path(db) == history


@pytest.mark.parametrize("text, width", [("abc", 3), ("東京", 4), ("Cafe\u0301", 4), ("", 0)])
def test_cells(text, width):
    assert cells(text) == width


def test_and_list():
    assert [and_list(["a"]), and_list(["a", "b"]), and_list(["a", "b", "c"])] == ["a", "a and b", "a, b and c"]


async def test_line_reader_over_a_pipe():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"one\ntw")
    os.write(write_fd, b"o\n\xc3")  # a character split between two writes
    os.write(write_fd, b"\xa9\ncrlf\r\nlast, no newline")
    os.close(write_fd)
    with os.fdopen(read_fd, encoding="utf-8") as stream:
        reader = LineReader(stream)
        assert [await reader() for _ in range(6)] == ["one\n", "two\n", "é\n", "crlf\n", "last, no newline", ""]


async def test_line_reader_over_a_stream_without_a_file():
    reader = LineReader(io.StringIO("a\nb"))
    assert [await reader(), await reader(more=True), await reader()] == ["a\n", "b", ""]


def test_a_reply_being_written_is_drawn_above_the_status_and_printed_once_when_done(tty):
    term, screen, editor = tty
    prompt_with(term, screen, editor, "half a li", left=2)
    screen.set_status("planner is typing…")
    screen.show_live("planner", "[planner] Day one is Asakusa,")
    assert term.rows() == ["[planner] Day one is Asakusa,", "planner is typing…", "you> half a li"]
    assert term.cursor == (2, len("you> half a "))
    screen.show_live("planner", "[planner] Day one is Asakusa, day two is Ueno and\nits museums")
    assert term.rows() == ["[planner] Day one is Asakusa, day two i", "s Ueno and", "its museums",
                           "planner is typing…", "you> half a li"]  # wrapped narrower than the terminal
    screen.print("[budget] fine", ends_live="budget")  # another line goes above; the reply stays below it
    assert term.rows()[:2] == ["[budget] fine", "[planner] Day one is Asakusa, day two i"]
    screen.set_status(None)
    screen.print("[planner] Day one is Asakusa, day two is Ueno and its museums.", ends_live="planner")
    assert term.rows() == ["[budget] fine", "[planner] Day one is Asakusa, day two is", " Ueno and its museums.",
                           "you> half a li"]
    assert term.cursor == (3, len("you> half a "))


def test_a_reply_taller_than_the_terminal_shows_its_newest_rows_and_can_be_taken_back() -> None:
    term, editor = Terminal(40), Editor()
    screen = TtyScreen(term, editor, colour=False, columns=40, lines=8)  # type: ignore[arg-type]  # room for 4 rows of it
    prompt_with(term, screen, editor, "")
    screen.show_live("planner", "\n".join(f"line {i}" for i in range(10)))
    assert term.rows() == ["…ine 6", "line 7", "line 8", "line 9", "you>"]
    screen.show_live("planner", None)
    assert term.rows() == ["you>"] and term.cursor == (0, 5)


def test_a_plain_screen_never_shows_a_reply_before_it_is_printed():
    out = io.StringIO()
    screen = Screen(out)
    screen.show_live("planner", "[planner] half")
    screen.print("[planner] whole.", ends_live="planner")
    assert not screen.live and out.getvalue() == "[planner] whole.\n"
