"""`roundtable console`: the same engine in a terminal.

Each input line is a slash command typed as text (`/agent add name:planner
role:"trip planner who drafts the itinerary" prompt:"You plan trips."`) or a message from the
person (default `you`). Every public message is printed once as it is
posted, as `[author] text`; notices as `[roundtable] text`; command answers as
plain lines. A message nobody can answer gets a hint (no agents yet, an @tag
that names nobody). At end of input the console waits until no agent is
pending (a paused group: it says how many messages wait, and ends). `refused` lists the input
lines that were answered with an error and taken for nothing (the exit code of piped input says so).

`/attach PATH` attaches a file to the person's next message (several may wait; `/attach`
alone lists them, `/detach` drops them): `bot.surfaces.console.attaching`.

`/regenerate` has the newest agent message written again (`bot.core.runtime.regenerate`, as
Discord's "Regenerate reply" menu; the person at the console may, as an operator): the row is
printed again once written anew, as `[name] (regenerated) text`; the earlier text stays above it.
On a terminal it is refused while an agent works; piped input first waits until the agents are done
(a script cannot see when they are).

How lines are read and shown (prompt, line editing, the typing status, colour)
is `bot.surfaces.console.terminal`'s business; this module only says what to show. On a
terminal a reply shows while it is written (the group's `stream` setting), above
the prompt, until it is printed for good; piped output gets each row once, whole.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TextIO

from bot.core.errors import Busy, InvalidInput, StoreError, UserFacingError
from bot.core.features.reading import Reader
from bot.core.models import (
    Agent,
    Approval,
    ApprovalAsk,
    DraftPart,
    Episode,
    Group,
    GroupSettings,
    Message,
    SharedFile,
)
from bot.core.ports import Draft, HasGroups, HasReading, HasRoster, HasRouting, HasThread, Recorder
from bot.core.rules.attachments import FileUnavailable, brief_text
from bot.core.rules.card import Attachment, reply_lines
from bot.core.rules.doctor import Check
from bot.core.rules.prompts import SYSTEM_AUTHOR
from bot.core.rules.stop import strip_terminate
from bot.core.rules.tags import parse_tags, unknown_tags
from bot.core.rules.validation import message_text
from bot.core.runtime.engine import Engine
from bot.core.verbs import commands
from bot.core.verbs.admin import Verbs
from bot.surfaces.console.attaching import Attachments
from bot.surfaces.console.commandline import parse_command
from bot.surfaces.console.terminal import ERROR_STYLE, Screen, and_list

log = logging.getLogger(__name__)
EXIT_REFUSED = 1  # piped input with a refused line (README, `roundtable console --help`)

REGENERATED = "(regenerated)"  # how the console prints an agent message written again

REDRAW_EVERY = 0.05  # seconds between redraws of a reply being written


class ConsoleDraft:
    """A reply shown on the terminal while it is written: redrawn at most every REDRAW_EVERY,
    until its row is printed for good (or it is taken back)."""

    def __init__(self, screen: Screen, name: str, text: Callable[[], str]) -> None:
        self.screen = screen
        self.name = name
        self.text = text
        self._label = screen.author(screen.clean(name), "agent")
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0
        self._stopped = False

    def grew(self) -> None:
        if self._timer is not None or self._stopped:
            return
        delay = max(0.0, self._last + REDRAW_EVERY - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._show)

    def _show(self) -> None:
        self._timer = None
        self._last = time.monotonic()
        visible = self.text()
        if visible:
            self.screen.show_live(self.name, f"{self._label} {self.screen.clean(visible)}")

    async def stop(self, *, wait: bool = True) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if wait:
            self._show()  # as far as it may be shown; the committed row replaces it in a moment

    async def discard(self) -> None:
        self.screen.show_live(self.name, None)


class ConsoleSurface:
    """Prints public messages as `[author] text`; shows `planner is typing…` while an agent works."""

    def __init__(self, out: TextIO | Screen) -> None:
        self.screen = out if isinstance(out, Screen) else Screen(out)
        self.working_names: list[str] = []  # agents in a model call now, in the order they started
        self.printed: dict[int, int] = {}  # group id -> the newest seq printed: the person has read it
        self.asking = False  # a person at a terminal answers [y/N] (set by `Console` while it reads a terminal)
        self.person = ""  # who types (the starter of every episode: they may approve)
        self._answer: asyncio.Future[str | None] | None = None  # a [y/N] question waiting for the next line

    def write(self, line: str) -> None:
        self.screen.print(self.screen.clean(line))

    def error(self, text: str) -> None:
        self.screen.print(f"{self.screen.paint('error:', ERROR_STYLE)} {self.screen.clean(text)}")

    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        if message.external_ids:
            return  # printed before (the terminal cannot be read back, so `resume` changes nothing)
        text = strip_terminate(message.text) if message.author_type == "agent" else brief_text(message)
        if message.author_type == "agent" and message.regenerated_at is not None:
            text = f"{REGENERATED} {text}"  # printed again, written anew (/regenerate)
        author = self.screen.author(self.screen.clean(message.author_name), message.author_type)
        self.screen.print(f"{author} {self.screen.clean(text)}", replaces_echo=message.author_type == "user",
                          ends_live=message.author_name if message.author_type == "agent" else None)
        self.printed[group.id] = max(self.printed.get(group.id, 0), message.seq)
        await record(f"console:{group.id}:{message.seq}")

    def draft(self, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> Draft | None:
        """On a terminal, the reply as it is written; piped output only ever gets whole rows."""
        return ConsoleDraft(self.screen, agent.name, text) if self.screen.live else None

    async def remove_drafts(self, group: Group, parts: Sequence[DraftPart]) -> list[int]:
        return [p.id for p in parts]  # a terminal's lines cannot be taken back; none are recorded

    async def approve(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        """On a terminal: ask `[y/N]`, the next line typed answers (denied after the timeout, or at
        the end of input). Piped input cannot be asked: the call is denied, with a line saying so."""
        arguments = ask.arguments if len(ask.arguments) <= 300 else ask.arguments[:300] + "…"
        what = f"{agent.name} wants to run {ask.tool} with {arguments}"
        if not self.asking or self._answer is not None:
            await self.alert(group, f"{what}: denied (approving a call needs the console's input to be a terminal).")
            return Approval(False, why="the console's input is not a terminal, so nobody could be asked")
        self._answer = asyncio.get_running_loop().create_future()
        await self.alert(group, f"{what}. Run it? [y/N] (denied after {ask.timeout:g} s)")
        line: str | None = None  # None: the input ended
        timed_out = False
        try:
            async with asyncio.timeout(ask.timeout):
                line = await self._answer
        except TimeoutError:
            timed_out = True
        finally:
            self._answer = None
        if timed_out:
            decision = Approval(False)
        elif line is None:
            decision = Approval(False, why="the console's input ended before an answer")
        else:
            decision = Approval(line.strip().lower() in ("y", "yes"), self.person)
        said = ("approved" if decision.approved else "denied") + (
            f" by {decision.by}" if decision.by else f": {decision.why or 'no answer in time'}")
        await self.alert(group, f"{agent.name}'s call of {ask.tool}: {said}.")
        return decision

    def answer(self, line: str) -> bool:
        """Whether `line` (as read, "" at the end of input) answered a waiting [y/N] question."""
        if self._answer is None or self._answer.done():
            return False
        self._answer.set_result(line.rstrip("\n") if line else None)
        return True

    async def alert(self, group: Group, text: str) -> None:
        self.screen.print(f"{self.screen.author(SYSTEM_AUTHOR, 'system')} {self.screen.clean(text)}")

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        """A file attached in the console, read again from its path (it must still be there)."""
        try:
            return await asyncio.to_thread(Path(file.url).read_bytes)
        except OSError as exc:
            raise FileUnavailable(f"{file.url}: {exc.strerror or type(exc).__name__}") from None

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        self.working_names.append(agent.name)
        self.screen.set_status(self.typing())
        try:
            yield
        finally:
            self.working_names.remove(agent.name)
            self.screen.set_status(self.typing())

    def typing(self) -> str | None:
        """`planner is typing…`, `planner and budget are typing…`; None when nobody is."""
        names = list(dict.fromkeys(self.working_names))
        if not names:
            return None
        return f"{and_list(names)} {'is' if len(names) == 1 else 'are'} typing…"

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        """`episode #3 ended: terminated after 1 agent message, 240 tokens`; nothing for an episode
        in which no agent answered and nothing was spent (no agents, or none could be asked)."""
        if episode.running or (episode.agent_turns == 0 and episode.total_tokens == 0):
            return
        self.write(f"episode #{episode.id} ended: {episode.status} after {_count(episode.agent_turns, 'agent message')}"
                   f", {_count(episode.total_tokens, 'token')}")


class LineSource(Protocol):
    async def __call__(self, *, more: bool = False) -> str:
        """The next input line with its newline; "" at end of input. `more`: the line continues
        an answer (on a terminal: the continuation prompt `...> `, not kept in the history)."""
        ...


class ConsoleCaller:
    """What a command typed in the console may ask of its surface (`bot.core.verbs.commands.Caller`)."""

    surface = "console"
    is_operator = True  # it is your terminal

    def __init__(self, console: Console, read_line: LineSource) -> None:
        self.console = console
        self.read_line = read_line

    async def group(self) -> Group | None:
        return await self.console.store.groups.get_group(self.console.opened().id)

    async def setup(self, mode: str | None) -> Group:
        console = self.console
        group = await console.store.groups.get_group(console.opened().id)
        settings = group.settings.with_changes(mode=mode) if mode else group.settings
        await console.store.groups.update_group(group.id, settings=settings)
        console.group = await console.verbs.groups.setup(group.key, group.name, settings)
        return console.group

    async def ask_text(self, label: str, current: str | None) -> str | None:
        """Lines typed on the terminal up to a line holding only a dot, or Ctrl-D; an empty
        answer keeps `current` (when there is one). From a pipe: an error, never the next line."""
        if not self.console.interactive:
            if current is not None:
                return current
            raise InvalidInput(f"{label} is missing: give it as prompt:\"...\" (the console asks for it only "
                               "when its input is a terminal).")
        write = self.console.surface.write
        if current is None:
            write(f"{label}: type it on one or more lines, then a line holding only a dot (.) or Ctrl-D to end it:")
        else:
            write(f"{label} now:")
            for line in current.splitlines() or [""]:
                write(f"  {line}")
            write("Type a new one on one or more lines, then a line holding only a dot (.) or Ctrl-D to end it; "
                  "an empty answer keeps the current one:")
        lines: list[str] = []
        while True:
            line = await self.read_line(more=True)
            if not line or line.rstrip("\n") == ".":
                break  # Ctrl-D (end of input) or the dot
            lines.append(line.rstrip("\n"))
        answer = "\n".join(lines)
        if current is not None and not answer.strip():
            write("Kept the current system prompt.")
            return current
        return answer

    async def keep_image(self, image: object, label: str) -> str:
        raise InvalidInput("The console takes pictures as URLs: give avatar:https://...")

    @property
    def reader(self) -> Reader:
        """The person at the terminal (--as), for their read cursors."""
        return Reader(self.console.person, self.console.person)

    def link(self, group: Group, message: Message) -> str:
        return f"#{message.seq}"

    async def reading_groups(self) -> list[tuple[Group, bool]]:
        """/inbox in the console looks in its own group (where the person is an operator)."""
        group = await self.group()
        return [(group, True)] if group is not None else []

    async def checks(self, group: Group | None) -> list[Check]:
        """Nothing of the console's own to check (a terminal has no webhook or permissions)."""
        return []


class Interrupts:
    """Ctrl-C at the console: on an empty line it stops the group's turns running now (from the
    reading thread, `interrupter`); when it ends the console, the agents it interrupted are named
    (`stopped`). `group` is the console's group once it is open."""

    def __init__(self, engine: Engine, surface: ConsoleSurface, group: Callable[[], Group | None]) -> None:
        self.engine = engine
        self.surface = surface
        self.group = group

    def interrupter(self, loop: asyncio.AbstractEventLoop) -> Callable[[], bool]:
        """Ctrl-C on an empty line, from the reading thread: stop the group's turns running now,
        as ⏹ Stop does (SPEC §12); False when none was running (then the console ends)."""
        def interrupt() -> bool:
            group = self.group()
            if group is None:
                return False
            group_id = group.id
            future = asyncio.run_coroutine_threadsafe(self._stop_turns(group_id), loop)
            try:
                return future.result(timeout=10)
            except Exception:  # the loop is gone or busy: stop the console as before
                return False
        return interrupt

    async def _stop_turns(self, group_id: int) -> bool:
        return self.engine.stops.running(group_id, self.surface.person or "you") > 0

    def stopped(self, *, say: bool) -> None:
        """The console is cancelled (Ctrl-C with no turn to stop, or a quit): the screen's live part ends;
        with `say` (a terminal), the agents whose turns were cut are named (their runs are recorded as
        interrupted)."""
        self.surface.screen.finish()
        names = list(dict.fromkeys(self.surface.working_names))
        if names and say:
            were = "was" if len(names) == 1 else "were"
            self.surface.write(f"stopped: {and_list(names)} {were} interrupted and will answer on the next start.")


class ConsoleStore(HasGroups, HasRoster, HasThread, HasReading, HasRouting, Protocol):
    """What the console asks of the store itself (its verbs ask theirs): its group, the roster (the
    hints, who is waited for), the rows it prints, the person's name and read cursor, the routing
    decisions of the rows nobody answered."""


class Console:
    """The console's loop over a group: `engine` runs it, `store` is read for what to print, `verbs`
    answer the commands typed (wiring makes them: `bot.core.verbs.admin.verbs_of`). Its parts: the files
    for the person's next message (`attached`: `bot.surfaces.console.attaching.Attachments`) and Ctrl-C
    (`interrupts`: `Interrupts`)."""

    def __init__(self, engine: Engine, surface: ConsoleSurface, *, store: ConsoleStore, verbs: Verbs, person: str,
                 group_name: str, defaults: GroupSettings, interactive: bool = False) -> None:
        self.engine = engine
        self.store = store
        self.verbs = verbs
        self.surface = surface
        self.person = person
        self.group_name = group_name
        self.defaults = defaults
        self.interactive = interactive  # input is a terminal: the console may ask for what is missing
        surface.asking, surface.person = interactive, person  # [y/N] for a tool call held for approval
        self.group: Group | None = None
        self.interrupts = Interrupts(engine, surface, lambda: self.group)
        self._hinted_for: tuple[tuple[str, bool], ...] | None = None  # the roster the no-agents hint was for
        self._told_taken = False  # said that another process runs this group now
        self.attached = Attachments()  # files for the person's next message (/attach)
        self.lines_read = 0
        self.refused: list[int] = []  # input lines (numbered from 1) refused: an unknown command, a bad option, ...
        self._read_through = 0  # the person's read cursor, as this console last moved it

    async def open(self) -> Group:
        """Open (or set up) this console's group and take it: one process at a time runs a group.
        A group turned off stays off until /roundtable setup."""
        key = f"console:{self.group_name}"
        existing = await self.store.groups.find_group(key)
        self.group = existing or await self.verbs.groups.setup(key, self.group_name, self.defaults)
        if await self.store.roster.find_agent(self.group.id, self.person) is not None:
            raise InvalidInput(f"--as {self.person}: an agent of the group {self.group_name!r} has that name; "
                               "the agents could not tell you apart. Choose another name.")
        await self.store.reading.remember_person(self.group.people_scope, self.person, [self.person])  # @you tags you
        await self.engine.start()
        holder = await self.engine.claim(self.group)
        if holder is not None:
            raise Busy(f"the group {self.group_name!r} is open in another {holder}; close it there, "
                       "or open another group with --group NAME")
        return self.group

    def opened(self) -> Group:
        """The group `open` opened (as it was then)."""
        if self.group is None:
            raise RuntimeError("the console's group is used before open()")
        return self.group

    async def run(self, read_line: LineSource, *, greet: bool = False) -> None:
        """Read and handle lines to the end of input, then wait for the agents (not while paused).
        Cancelled (Ctrl-C): say which agents were interrupted; the engine's close records their runs."""
        group = await self.open()
        try:
            if greet:
                agents = await self.store.roster.list_agents(group.id)
                self.surface.write(
                    f"Roundtable console: group {group.name}, {_count(len(agents), 'agent')}, mode "
                    f"{group.settings.mode}. Type a message, or /help for commands; Ctrl-D quits once the "
                    "agents are done; Ctrl-C stops the agents' turns running now, or quits at once when none runs "
                    "(with a line typed, it drops the line).")
            while True:
                line = await read_line()
                if not line:
                    self.surface.asking = False  # nobody types any more: a held call is denied
                    self.surface.answer(line)
                    break
                self.lines_read += 1
                if self.surface.answer(line):
                    continue  # it answered [y/N]
                await self.handle(line.rstrip("\n"), read_line)
            await self.finish()
        except asyncio.CancelledError:
            self.interrupts.stopped(say=self.interactive)
            raise

    async def finish(self) -> None:
        """End of input: a paused group says what waits and ends now; else wait for the agents."""
        group = await self.store.groups.get_group(self.opened().id)
        if group.paused:
            held = await self.held(group)
            if held:
                wait = "message waits" if held == 1 else "messages wait"
                self.surface.write(f"paused: {held} {wait} for /roundtable resume")
            return
        idle = asyncio.ensure_future(self.engine.wait_idle(group.id))
        try:
            if self.interactive:
                await self._say_what_it_waits_for(group, idle)
            await idle
        finally:
            idle.cancel()

    async def _say_what_it_waits_for(self, group: Group, idle: asyncio.Future[None]) -> None:
        """`waiting for planner… (Ctrl-C to stop now)` unless the engine is idle (or soon is:
        a speaker may still be being chosen, then named)."""
        names = await self.waiting_for(group)
        if not names:
            done, _ = await asyncio.wait({idle}, timeout=0.5)
            if done:
                return
            names = await self.waiting_for(await self.store.groups.get_group(group.id)) or ["the agents"]
        self.surface.write(f"waiting for {and_list(names)}… (Ctrl-C to stop now)")

    def exit_code(self, stderr: TextIO) -> int:
        """After the end of input: 1 when input that was not a terminal (a pipe, a file) had a line
        refused (one line on `stderr` says which), so a script can tell; else 0. A terminal saw
        each error as it was typed."""
        if not self.refused or self.interactive:
            return 0
        count, shown = len(self.refused), ", ".join(map(str, self.refused[:10]))
        more = ", ..." if count > 10 else ""
        print(f"roundtable: {count} of {self.lines_read} input lines {'was' if count == 1 else 'were'} refused "
              f"(line{'' if count == 1 else 's'} {shown}{more}); exit code {EXIT_REFUSED}", file=stderr)
        return EXIT_REFUSED

    async def held(self, group: Group) -> int:
        """Messages (not notices) after the cursor of the enabled agent furthest behind."""
        agents = await self.store.roster.list_agents(group.id, enabled_only=True)
        if not agents:
            return 0
        rows = await self.store.thread.messages(group.id, after=min(a.delivered_through for a in agents))
        return sum(1 for m in rows if m.author_type != "system")

    async def waiting_for(self, group: Group) -> list[str]:
        """The agents working now, then those a routed message still selects."""
        names = list(dict.fromkeys(self.surface.working_names))
        agents = await self.store.roster.list_agents(group.id, enabled_only=True)
        behind = [a for a in agents if a.delivered_through < group.latest_seq and a.name not in names]
        if behind:
            decisions = await self.store.routing.decisions(
                group.id, after=min(a.delivered_through for a in behind), through=group.latest_seq)
            names += [a.name for a in behind
                      if any(a.id in d.agent_ids for seq, d in decisions.items() if seq > a.delivered_through)]
        return names

    async def handle(self, line: str, read_line: LineSource) -> None:
        self.opened()  # (lines are handled once the group is open)
        if not line.strip():
            return
        try:
            word = line.split(maxsplit=1)[0].lower()
            if word == "/regenerate":
                await self.regenerate(line.strip()[len(word):].strip())
            elif word in ("/attach", "/detach"):
                for out in await (self.attached.attach(line.strip()[len(word):].strip()) if word == "/attach"
                                  else self.attached.detach()):
                    self.surface.write(out)
            elif line.lstrip().startswith("/"):
                await self._command(line, read_line)
            else:
                try:
                    await self.post(line)
                except StoreError as exc:  # not one that waits (a busy database is waited for)
                    self._refuse(f"your message was not saved ({exc})")
        except UserFacingError as exc:
            self._refuse(str(exc))
        except StoreError as exc:  # a command's transaction: nothing was changed
            self._refuse(f"{exc}; nothing was changed")

    async def _command(self, line: str, read_line: LineSource) -> None:
        """A slash command typed: run as declared (`bot.core.verbs.commands`), its answer printed (a
        file kept in the working directory)."""
        await self._read_printed()
        typed = parse_command(line)
        command, options = commands.resolve(typed.path, typed.options)
        answer = await commands.run(command, self.verbs, ConsoleCaller(self, read_line), options)
        if isinstance(answer, Attachment):
            answer = keep_file(answer, Path.cwd())
        if answer is not None:
            for out in reply_lines(answer):
                self.surface.write(out)

    def _refuse(self, error: str) -> None:
        self.surface.error(error)
        if self.lines_read not in self.refused:
            self.refused.append(self.lines_read)

    async def _read_printed(self) -> None:
        """Every message is printed here as it is posted, so the person has read what was printed:
        their read cursor moves through it before a command (/roundtable status, /unread, /inbox)."""
        group_id = self.opened().id
        printed = self.surface.printed.get(group_id, 0)
        if printed > self._read_through:
            try:
                self._read_through = await self.store.reading.mark_seen(group_id, self.person, printed)
            except StoreError as exc:  # the command tells the same story, or works anyway
                log.warning("could not move %s's read cursor: %s", self.person, exc)

    async def post(self, line: str) -> None:
        """A message from the person; a hint when no agent can answer it or a tag names nobody."""
        self.group = await self.store.groups.get_group(self.opened().id)
        if not self.group.enabled:
            raise InvalidInput("Roundtable is off in this group: /roundtable setup turns it back on.")
        if not self.engine.owns(self.group.id):
            await self._take_back(self.group)
        text = message_text(line)
        files = self.attached.take()
        try:
            await self.engine.post_user_message(self.group, author_name=self.person, user_id=self.person, text=text,
                                                 waiting=self._not_saved_yet, attachments=files)
        except BaseException:  # a cancel too (Ctrl-C, quit): the files are kept; re-raised
            self.attached.keep(files)  # not stored: they wait for the next message
            raise
        for hint in await self.hints(text):
            self.surface.write(hint)

    async def _take_back(self, group: Group) -> None:
        """This console lost its group (stalled past its lease, another took it): take it back if
        it is free, else say once where it runs; messages are still saved and answered there."""
        holder = await self.engine.claim(group)
        if holder is not None and not self._told_taken:
            self._told_taken = True
            self.surface.error(f"the group {self.group_name!r} is run by another {holder} now (it took over "
                               "while this console was stalled): your messages are saved here and answered there")
        elif holder is None:
            self._told_taken = False

    async def regenerate(self, typed: str) -> None:
        """`/regenerate`: the newest agent message written again, as Discord's "Regenerate reply" menu
        does (`bot.core.runtime.regenerate`); the outbox prints it as `[name] (regenerated) text`."""
        if typed:
            raise InvalidInput("/regenerate takes nothing after it: it regenerates the newest agent message.")
        group = await self.store.groups.get_group(self.opened().id)
        if not group.enabled:
            raise InvalidInput("Roundtable is off in this group: /roundtable setup turns it back on.")
        if not self.engine.owns(group.id):
            await self._take_back(group)
        if not self.interactive and not group.paused:  # a script cannot see when the agents are done
            await self.engine.wait_idle(group.id)
        await self.engine.regenerate(group, None, user_id=self.person, operator=ConsoleCaller.is_operator)
        await self.engine.all_shown(group.id)

    def _not_saved_yet(self, why: str) -> None:
        self.surface.error(f"your message is not saved yet ({why.removesuffix('; try again')}); "
                           "it will be as soon as the database takes it")

    async def hints(self, text: str) -> list[str]:
        roster = await self.store.roster.list_agents(self.opened().id)
        enabled = [a.name for a in roster if a.enabled]
        if not enabled:
            roster_now = tuple((a.name, a.enabled) for a in roster)
            if roster_now == self._hinted_for:
                return []  # said once for this roster
            self._hinted_for = roster_now
            if not roster:
                return [NO_AGENTS]
            off = [a.name for a in roster]
            are = "is" if len(off) == 1 else "are"
            return [f"No agent here is on ({and_list(off)} {are} disabled): "
                    f"/agent enable name:{off[0]} lets it answer."]
        self._hinted_for = None
        lines: list[str] = []
        people = await self.store.reading.people(self.group.people_scope) if self.group else {}
        unknown = [f"@{name}" for name in unknown_tags(text, roster, people)]
        if unknown:
            are = "is not an agent" if len(unknown) == 1 else "are not agents"
            lines.append(f"{and_list(unknown)} {are} here (agents: {', '.join(enabled)})")
        everyone_on = [replace(a, enabled=True) for a in roster]
        for name in parse_tags(text, everyone_on).agent_names:
            if name not in enabled:
                lines.append(f"@{name} is disabled: /agent enable name:{name} lets it answer.")
        return lines


def keep_file(attachment: Attachment, directory: Path) -> str:
    """Move a command's file (an export) into `directory` under its name, never over another file."""
    name = Path(attachment.filename)
    target, n = directory / name.name, 1
    while target.exists():
        target, n = directory / f"{name.stem}-{n}{name.suffix}", n + 1
    try:
        shutil.move(attachment.path, target)
    except OSError as exc:
        Path(attachment.path).unlink(missing_ok=True)
        raise UserFacingError(f"Could not write {target}: {exc.strerror or type(exc).__name__}.") from None
    return f"{attachment.text} Written to {target}"


NO_AGENTS = ('No agents here yet: add one with /agent add name:planner role:"trip planner who drafts the itinerary" '
             'prompt:"You plan trips."')


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
