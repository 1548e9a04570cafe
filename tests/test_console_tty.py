"""`roundtable console` on a terminal: the installed command in a pseudo-terminal (pexpect),
its output drawn by a terminal emulator (pyte), a local OpenAI-compatible server.

Timeouts are generous (a slow shared machine); no assertion is tighter than several seconds.
"""
from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pyte
import pytest

from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call
from tests.support import bound
from tests.support.spawn import ROUNDTABLE, start_roundtable
from tests.test_console import clean_env

pytestmark = pytest.mark.slow  # the console in a pseudo-terminal: CI runs it, the default run leaves it out

COLS, ROWS = 80, 24
UP, LEFT, CTRL_D, CTRL_R = "\x1b[A", "\x1b[D", "\x04", "\x12"
ADD_PLANNER = '/agent add name:planner role:plans prompt:"You plan."'

# Runs a command, then says how it ended and whether the terminal's modes are what they were.
# Its own SIGINT handler (not SIG_IGN, which the child would inherit) keeps it alive through Ctrl-C.
WRAPPER = """\
import signal, subprocess, sys, termios
signal.signal(signal.SIGINT, lambda *_: None)
before = termios.tcgetattr(0)
code = subprocess.call(sys.argv[1:])
print(f"[wrapper] exit={code} modes={'restored' if termios.tcgetattr(0) == before else 'changed'}")
"""


class Tty:
    """The console in a pseudo-terminal; everything it prints is also drawn on `self.screen`."""

    def __init__(self, tmp_path: Path, base_url: str, *args: str, wrapped: bool = False,
                 **env: str) -> None:
        command = [ROUNDTABLE, "--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"), *args]
        if wrapped:
            command = [sys.executable, "-c", WRAPPER, *command]
        environment = {k: v for k, v in clean_env(tmp_path, base_url).items() if k != "NO_COLOR"}
        environment.update(TERM="xterm", **env)
        self.child = pexpect.spawn(command[0], command[1:], env=environment, cwd=str(tmp_path),
                                   encoding="utf-8", dimensions=(ROWS, COLS))
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.Stream(self.screen)
        self.raw = ""
        self.pos = 0
        self.eof = False

    # reading ---------------------------------------------------------------
    def _pump(self) -> None:
        try:
            data = self.child.read_nonblocking(65536, timeout=0.2)
        except pexpect.TIMEOUT:
            return
        except pexpect.EOF:
            self.eof = True
            return
        self.raw += data
        self.stream.feed(data)

    async def _until(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + bound(timeout)  # reads the screen between polls: not `eventually`
        while not done():
            if self.eof or time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen; the screen:\n{self.text()}\nraw tail: "
                                     f"{self.raw[-600:]!r}")
            await asyncio.to_thread(self._pump)

    async def until(self, done: Callable[[], bool], what: str, timeout: float = 30) -> None:
        """Until `done()` (reading the screen meanwhile)."""
        await self._until(done, what, timeout)

    async def expect(self, text: str, timeout: float = 30) -> None:
        """Until `text` is printed, after what earlier expects took."""
        def found() -> bool:
            index = self.raw.find(text, self.pos)
            if index >= 0:
                self.pos = index + len(text)
            return index >= 0
        await self._until(found, f"printing {text!r}", timeout)

    async def shows(self, check: str | Callable[[list[str]], bool], timeout: float = 30) -> None:
        """Until the screen holds the text `check` (or `check(rows)` is true)."""
        test = check if callable(check) else (lambda rows: any(check in row for row in rows))
        await self._until(lambda: test(self.rows()), f"showing {check!r}", timeout)

    async def ended(self, timeout: float = 30) -> int:
        await self._until(lambda: self.eof, "the end of the process", timeout)
        self.child.close()
        return self.child.exitstatus if self.child.exitstatus is not None else 128 + self.child.signalstatus

    def rows(self) -> list[str]:
        return [row.rstrip() for row in self.screen.display]

    def text(self) -> str:
        return "\n".join(row for row in self.rows() if row)

    def prompt_row(self) -> str:
        return self.rows()[self.screen.cursor.y]

    def style(self, text: str) -> tuple[str, bool]:
        """(foreground colour, bold) of the first character of `text` on the screen."""
        for y, row in enumerate(self.screen.display):
            x = row.find(text)
            if x >= 0:
                char = self.screen.buffer[y][x]
                return char.fg, char.bold
        raise AssertionError(f"{text!r} is not on the screen:\n{self.text()}")

    # typing ----------------------------------------------------------------
    def type(self, text: str) -> None:
        self.child.send(text)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def ttys():
    opened: list[Tty] = []

    def open_tty(*args: object, **kwargs: str) -> Tty:
        tty = Tty(*args, **kwargs)  # type: ignore[arg-type]
        opened.append(tty)
        return tty

    yield open_tty
    for tty in opened:
        tty.close()


def runs(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "rt.db") as db:
        return [status for (status,) in db.execute("SELECT status FROM runs ORDER BY id")]


def messages(tmp_path: Path) -> list[str]:
    """What people posted, in order."""
    with sqlite3.connect(tmp_path / "rt.db") as db:
        return [text for (text,) in db.execute("SELECT text FROM messages WHERE author_type = 'user' ORDER BY seq")]


async def test_line_editing_and_history_across_runs(tmp_path, ttys):
    script = GroupChatScript(agents={"planner": []}, default_agent_reply="Three days, then.")
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("Added planner: plans.")
        await tty.expect("you> ")
        tty.type("@planner pln 3 days")
        tty.type(LEFT * 8 + "a")  # back to after "pl", insert the missing letter
        await tty.shows(lambda rows: "you> @planner plan 3 days" in rows)
        tty.type("\r")
        await tty.shows("[planner] Three days, then.")
        assert "[you] @planner plan 3 days" in tty.rows()
        assert not any(row.startswith("you> @planner") for row in tty.rows())  # `[you] ...` took its place
        await tty.expect("you> ")
        tty.type(CTRL_D)
        assert await tty.ended() == 0
        history = (tmp_path / "rt.history").read_text()
        assert "@planner plan 3 days" in history and ADD_PLANNER in history
        assert oct((tmp_path / "rt.history").stat().st_mode & 0o777) == "0o600"

        again = ttys(tmp_path, srv.base_url)
        await again.expect("you> ")
        again.type(UP + UP)
        await again.shows(lambda rows: f"you> {ADD_PLANNER}" in rows)
        again.type("\r")
        await again.shows("error: An agent named 'planner' is already in this group")
        await again.expect("you> ")
        again.type(CTRL_R + "3 d")
        await again.shows("@planner plan 3 days")
        again.type("\r")
        await again.shows(lambda rows: rows.count("[you] @planner plan 3 days") == 1)
        await again.expect("you> ")
        again.type(CTRL_D)
        assert await again.ended() == 0
    assert script.participant_order == ["planner", "planner"]


async def test_typing_status_shows_and_clears_without_garbling_the_typed_line(tmp_path, ttys):
    script = GroupChatScript(agents={"planner": [Reply("Done, slowly.", delay=3.0)]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("@planner go\r")
        await tty.shows("planner is typing…")
        tty.type("half a li")
        tty.type(LEFT * 2)  # the cursor mid-line while the answer arrives
        await tty.shows("[planner] Done, slowly.")
        await tty.shows("episode #1 ended")
        await tty.shows(lambda rows: not any("typing" in row for row in rows))
        await tty.shows(lambda rows: tty.prompt_row() == "you> half a li"
                        and tty.screen.cursor.x == len("you> half a "))
        tty.type("ne")  # typed at the cursor readline still has
        await tty.shows(lambda rows: tty.prompt_row() == "you> half a neli")
        rows = [row for row in tty.rows() if row]
        assert rows[-2].startswith("episode #1 ended") and rows[-1] == "you> half a neli"
        assert tty.style("[planner]")[0] not in ("default", "white")  # agents in colour
        assert tty.style("[you]") == ("default", True)  # people in bold
        tty.type("\x01\x0b")  # Ctrl-A, Ctrl-K: the line is empty again
        await tty.shows(lambda rows: tty.prompt_row() == "you>")
        tty.type(CTRL_D)
        assert await tty.ended() == 0
    assert "\x1b[" in tty.raw


async def test_a_ctrl_r_search_survives_a_message_arriving(tmp_path, ttys):
    script = GroupChatScript(agents={"planner": [Reply("Here.", delay=3.0)]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("@planner go\r")
        await tty.shows("planner is typing…")
        tty.type(CTRL_R + "add")
        search = "(reverse-i-search)`add': " + ADD_PLANNER
        await tty.shows(lambda rows: tty.prompt_row() == search)
        await tty.shows("[planner] Here.")
        await tty.shows("episode #1 ended")
        at_match = len("(reverse-i-search)`add': /agent ")  # the cursor stays where readline has it
        await tty.shows(lambda rows: [row for row in rows if row][-1] == search == tty.prompt_row()
                        and tty.screen.cursor.x == at_match)
        tty.type("\x07")  # Ctrl-G leaves the search
        await tty.shows(lambda rows: tty.prompt_row() == "you>")
        tty.type(CTRL_D)
        assert await tty.ended() == 0


async def test_no_color_keeps_the_terminal_plain(tmp_path, ttys):
    async with FakeOpenAI(GroupChatScript(agents={"planner": ["Plainly."]})) as srv:
        tty = ttys(tmp_path, srv.base_url, NO_COLOR="1")
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r@planner hi\r")
        await tty.shows("[planner] Plainly.")
        assert tty.style("[planner]") == ("default", False) and tty.style("[you]") == ("default", False)
        tty.type(CTRL_D)
        assert await tty.ended() == 0


async def test_ctrl_d_waits_for_the_agents_and_says_so(tmp_path, ttys):
    script = GroupChatScript(agents={"planner": [Reply("Worth the wait.", delay=3.0)]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("@planner go\r")
        await tty.shows("planner is typing…")
        tty.type(CTRL_D)
        await tty.shows("waiting for planner… (Ctrl-C to stop now)")
        await tty.shows("[planner] Worth the wait.")
        assert await tty.ended() == 0
    assert runs(tmp_path) == ["posted"]


async def test_ctrl_c_drops_the_line_being_typed_and_the_console_goes_on(tmp_path, ttys):
    async with FakeOpenAI(GroupChatScript(agents={"planner": ["Here."]})) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("@planner half a li")
        await tty.shows(lambda rows: tty.prompt_row() == "you> @planner half a li")
        tty.child.sendintr()
        await tty.shows(lambda rows: "you> @planner half a li^C" in rows and tty.prompt_row() == "you>")
        tty.type(UP)  # the dropped line is not in the history
        await tty.shows(lambda rows: tty.prompt_row() == f"you> {ADD_PLANNER}")
        tty.type("\x01\x0b" + "@planner go\r")  # Ctrl-A, Ctrl-K: an empty line, then a message
        await tty.shows("[planner] Here.")
        await tty.shows("episode #1 ended")
        tty.type(CTRL_D)
        assert await tty.ended() == 0
    assert messages(tmp_path) == ["@planner go"] and runs(tmp_path) == ["posted"]
    assert "@planner half a li" not in (tmp_path / "rt.history").read_text()


@pytest.mark.parametrize("dropped", [False, True], ids=["empty line", "after a line typed was dropped"])
async def test_ctrl_c_stops_a_running_turn_as_stop_does_and_the_console_goes_on(tmp_path, ttys, dropped):
    """SPEC §12: Ctrl-C on an empty line while an agent works stops that turn (⏹ Stop); the
    console goes on, and the turn is not run again."""
    script = GroupChatScript(agents={"planner": [Reply("Too late.", delay=3600.0), "Answered."]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("@planner go\r")
        await tty.shows("planner is typing…")
        await tty.until(lambda: script.participant_order == ["planner"], "the model call", 30)
        if dropped:  # the first Ctrl-C drops the line, the second stops the turn
            tty.type("never sent")
            await tty.shows(lambda rows: tty.prompt_row() == "you> never sent")
            tty.child.sendintr()
            await tty.shows(lambda rows: "you> never sent^C" in rows and tty.prompt_row() == "you>")
            assert "planner is typing…" in tty.rows()
        tty.child.sendintr()
        await tty.shows("[roundtable] ⏹ planner's turn was stopped by you.")
        await tty.shows(lambda rows: not any("typing" in r for r in rows) and tty.prompt_row() == "you>")
        assert runs(tmp_path) == ["stopped"]
        tty.type("@planner again\r")
        await tty.shows("[planner] Answered.")
        tty.type(CTRL_D)
        assert await tty.ended() == 0
    assert "Traceback" not in tty.raw
    assert runs(tmp_path) == ["stopped", "posted"] and messages(tmp_path) == ["@planner go", "@planner again"]


@pytest.mark.parametrize("when", ["while Ctrl-D waits", "at an idle prompt", "twice"])
async def test_ctrl_c_stops_at_once_and_restores_the_terminal(tmp_path, ttys, when):
    script = GroupChatScript(agents={"planner": [Reply("Too late.", delay=3600.0), "Answered after the restart."]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url, wrapped=True)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        if when != "at an idle prompt":
            tty.type("@planner go\r")
            await tty.shows("planner is typing…")
            # the status shows before the call reaches the server; stopped before that, the next start's
            # call would take the hour-long reply
            await tty.until(lambda: script.participant_order == ["planner"], "the model call", 30)
            tty.type(CTRL_D)  # the input ends: Ctrl-C now stops the console, not only the turn
            await tty.shows("waiting for planner…")
        tty.child.sendintr()
        if when == "twice":  # the second one while the first stops the console: it ends at once
            tty.child.sendintr()
        await tty.shows("[wrapper] exit=130 modes=restored")  # the model would answer in an hour
        assert await tty.ended() == 0  # the wrapper's own exit
        assert "Traceback" not in tty.raw, tty.raw[tty.raw.find("Traceback"):][:4000]
        assert "[you] never sent" not in tty.text() and messages(tmp_path) == ["@planner go"] * (
            when != "at an idle prompt")
        if when == "at an idle prompt":
            assert runs(tmp_path) == [] and "stopped" not in tty.raw
            return
        if when != "twice":
            assert "stopped: planner was interrupted and will answer on the next start." in tty.rows()
            assert runs(tmp_path) == ["interrupted"]
        else:  # maybe stopped before it could record the run: the next start takes it as interrupted
            assert runs(tmp_path) in (["interrupted"], ["running"])
        # the next start runs the interrupted turn again
        proc = await start_roundtable(
            "--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=clean_env(tmp_path, srv.base_url), cwd=tmp_path)
        out, err = await asyncio.wait_for(proc.communicate(b""), 180)
    assert proc.returncode == 0, err
    assert "[planner] Answered after the restart." in out.decode()
    assert runs(tmp_path) == ["interrupted", "posted"]


async def test_agent_add_asks_for_the_prompt_on_a_terminal(tmp_path, ttys):
    async with FakeOpenAI(GroupChatScript()) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type("/agent add name:planner role:plans\r")
        await tty.expect("System prompt for planner: type it on one or more lines, then a line holding only a dot "
                         "(.) or Ctrl-D to end it:")
        await tty.expect("...> ")
        tty.type("You plan trips.\r")
        await tty.expect("...> ")
        tty.type("Keep it short.\r.\r")
        await tty.shows("Added planner: plans. Tag it with @planner.")
        await tty.expect("you> ")
        tty.type("/agent edit name:planner\r")
        await tty.expect("an empty answer keeps the current one:")
        assert "  Keep it short." in tty.rows()  # the current prompt is shown
        await tty.expect("...> ")
        tty.type(CTRL_D)  # an empty answer
        await tty.shows("Kept the current system prompt.")
        await tty.shows("Nothing to change for planner: give role, prompt, model, avatar, memory, mode, t")
        await tty.expect("you> ")
        tty.type(UP + UP + UP + "\r")  # the answer's lines stay out of the history
        await tty.shows("error: An agent named 'planner' is already in this group; choose another name.")
        tty.type(CTRL_D)
        assert await tty.ended() == 0
    with sqlite3.connect(tmp_path / "rt.db") as db:
        assert db.execute("SELECT system_prompt FROM agents").fetchall() == [("You plan trips.\nKeep it short.",)]


async def test_a_reply_shows_as_it_is_written_above_the_prompt_and_is_printed_once(tmp_path, ttys):
    reply = ("Day one is Asakusa and the temple. Day two is Ueno.\n"
             "Day three is Shibuya and a long walk through the city at night. TERMINATE")
    script = GroupChatScript(agents={"planner": [Reply(reply, every=0.25)]})  # ~5 s of words
    final = ["[planner] Day one is Asakusa and the temple. Day two is Ueno.",
             "Day three is Shibuya and a long walk through the city at night."]
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("@planner plan it\r")
        await tty.shows(lambda rows: any(row.startswith("[planner] Day one is") for row in rows)
                        and not any("night" in row for row in rows)  # part of it, while it is written
                        and any("planner is typing…" in row for row in rows))  # the status stays below it
        tty.type("half")
        await tty.shows(lambda rows: tty.prompt_row() == "you> half")
        await tty.shows(final[1])
        await tty.shows("episode #1 ended")
        await tty.shows(lambda rows: tty.prompt_row() == "you> half" and not any("typing" in r for r in rows))
        rows = [row for row in tty.rows() if row]
        assert rows.count(final[0]) == 1 and rows.count(final[1]) == 1 and "TERMINATE" not in tty.raw
        assert rows[rows.index(final[0]) + 1] == final[1]
        tty.type("\x01\x0b" + CTRL_D)
        assert await tty.ended() == 0
    assert [bool(r.get("stream")) for r in srv.requests] == [True]


async def test_a_terminal_with_stream_off_prints_the_reply_whole(tmp_path, ttys):
    script = GroupChatScript(agents={"planner": ["All at once."]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url, ROUNDTABLE_STREAM="off")
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r@planner go\r")
        await tty.shows("[planner] All at once.")
        tty.type(CTRL_D)
        assert await tty.ended() == 0
    assert [bool(r.get("stream")) for r in srv.requests] == [False]


async def test_a_secret_a_reply_streams_never_shows_on_the_terminal(tmp_path, ttys):
    """A key of the environment (registered at start), written by the model in pieces: the
    terminal never gets a piece of it, and the reply shows it masked."""
    secret = "service-key-LEAK-0009"
    pieces = ["The key is ", secret[:9], secret[9:16], secret[16:], " and that is all I know about it."]
    script = GroupChatScript(agents={"planner": [Reply("".join(pieces), pieces=pieces, every=0.4)]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url, MY_SERVICE_API_KEY=secret)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("@planner what is the key?\r")
        await tty.shows("[planner] The key is *** and that is all I know about it.")
        await tty.shows("episode #1 ended")
        tty.type(CTRL_D)
        assert await tty.ended() == 0
    assert "LEAK" not in tty.raw and secret[:9] not in tty.raw


async def test_a_broken_stream_is_one_short_grey_line_not_a_raw_log_record(tmp_path, ttys):
    script = GroupChatScript(agents={"planner": [Reply("Half of a first draft that", every=0.1, break_after=2),
                                                 "Whole at last."]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r@planner go\r")
        await tty.shows("[planner] Whole at last.")
        await tty.shows(lambda rows: any(row.startswith("[warning] model fake-model at 127.0.0.1:") and
                                         "broke its stream off" in row for row in rows))
        assert tty.style("[warning]")[0] != "default"  # grey, unlike the chat
        assert "WARNING bot.llm" not in tty.raw and " WARNING " not in tty.raw
        tty.type(CTRL_D)
        assert await tty.ended() == 0


async def test_help_fits_a_24_row_terminal_and_help_topic_shows_one_group(tmp_path, ttys):
    async with FakeOpenAI() as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type("/help\r")
        await tty.shows("Anything else is a message from you; tag agents with @name.")
        rows = tty.rows()
        assert any(row.startswith("Roundtable console: group main") for row in rows)  # nothing scrolled off
        assert any(row.startswith("Commands by topic; /help TOPIC") for row in rows)
        tty.type("/help roundtable\r")  # the longest topic: its first line is still on the screen with its last
        await tty.shows(lambda rows: any(row.startswith("/roundtable export [format]") for row in rows))
        await tty.shows(lambda rows: any(row.startswith("/help roundtable, the group") for row in rows))
        tty.type("/help agent\r")
        await tty.shows('e.g. /agent add name:planner role:"trip planner who drafts the itinerary" prompt')
        await tty.shows(lambda rows: any(row.startswith("/help agent, the agents") for row in rows))
        tty.type("/agnet list\r")
        await tty.expect("Unknown command /agnet list; did you mean /agent list? /help lists the commands.")
        tty.type(CTRL_D)
        assert await tty.ended() == 0


async def test_a_reply_that_calls_a_tool_shows_the_call_while_it_runs(tmp_path, ttys):
    """SPEC §6b "Visible": the live reply shows the call running (a real MCP server over stdio), then done,
    then the reply; the printed reply ends with the compact line."""
    import json

    from tests.fakes.openai_server import tool_call
    from tests.test_console_tools import SERVER

    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"counter": {
        "command": sys.executable, "args": [SERVER], "env": {"MCP_COUNT_FILE": str(tmp_path / "count"),
                                                              "MCP_ADD_SECONDS": "6"}}}}))
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__add", n=2)]),
                                                 Reply("The counter is 2 now.", every=0.5)]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("/agent tools name:planner grant:counter.*\r")
        await tty.expect("Granted counter.*.")
        tty.type("@planner add 2\r")
        await tty.shows("[planner] 🔧 counter.add · n=2 …")  # running (the server takes 6 s)
        await tty.shows(lambda rows: any("🔧 counter.add · n=2 … ✓" in row for row in rows))
        await tty.shows("🔧 counter.add ✓")  # the printed reply's compact line
        rows = [row for row in tty.rows() if row]
        assert "[planner] The counter is 2 now." in rows and rows.count("🔧 counter.add ✓") == 1, rows
        tty.type(CTRL_D)
        assert await tty.ended() == 0


async def test_a_destructive_tool_call_asks_y_n_and_runs_once_approved(tmp_path, ttys):
    server = str(Path(__file__).resolve().parent / "fakes" / "mcp_server.py")
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {
        "counter": {"command": sys.executable, "args": [server], "env": {"MCP_COUNT_FILE": str(tmp_path / "count")}}}}))
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__delete", item="old")]),
                                                 "Deleted it."]})
    async with FakeOpenAI(script) as srv:
        tty = ttys(tmp_path, srv.base_url)
        await tty.expect("you> ")
        tty.type(ADD_PLANNER + "\r")
        await tty.expect("you> ")
        tty.type("/agent tools name:planner grant:counter.delete\r")
        await tty.expect("Granted counter.delete.")
        tty.type("@planner delete old\r")
        await tty.expect("Run it? [y/N]")
        assert not (tmp_path / "count").exists()
        tty.type("y\r")
        await tty.expect("planner's call of counter.delete: approved by")
        await tty.shows("[planner] Deleted it.")
        tty.type(CTRL_D)
        assert await tty.ended() == 0
    assert (tmp_path / "count").read_text() == "delete old\n"  # once
    assert messages(tmp_path) == ["@planner delete old"]  # the answer is not a message
