"""`roundtable console`: the same engine in a terminal.

Each input line is a slash command typed as text (`/agent add name:planner
role:"drafts the itinerary" prompt:"You plan trips."`) or a message from the
person (default `you`). Every public message is printed once as it is
posted, as `[author] text`; notices as `[roundtable] text`; command answers as
plain lines. At end of input the console waits until no agent is pending.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import AsyncIterator, Awaitable, Callable, TextIO

from bot.adapters.commandline import parse_command
from bot.core import commands
from bot.core.admin import Admin
from bot.core.card import reply_lines
from bot.core.engine import Engine
from bot.core.errors import Busy, InvalidInput, UserFacingError
from bot.core.models import Agent, Episode, Group, GroupSettings, Message
from bot.core.ports import Recorder
from bot.core.prompts import SYSTEM_AUTHOR
from bot.core.stop import strip_terminate
from bot.core.validation import message_text

log = logging.getLogger(__name__)

class ConsoleSurface:
    """Prints public messages as `[author] text`."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        if message.external_ids:
            return  # printed before (the terminal cannot be read back, so `resume` changes nothing)
        text = strip_terminate(message.text) if message.author_type == "agent" else message.text
        self.write(f"[{message.author_name}] {text}")
        await record(f"console:{group.id}:{message.seq}")

    async def alert(self, group: Group, text: str) -> None:
        self.write(f"[{SYSTEM_AUTHOR}] {text}")

    @contextlib.asynccontextmanager
    async def working(self, group: Group, agent: Agent) -> AsyncIterator[None]:
        yield

    async def episode_updated(self, group: Group, episode: Episode) -> None:
        if not episode.running:
            self.write(f"episode #{episode.id} ended: {episode.status} after {episode.agent_turns} agent "
                       f"messages, {episode.total_tokens} tokens")


class ConsoleCaller:
    """What a command typed in the console may ask of its surface (`bot.core.commands.Caller`)."""

    surface = "console"
    is_operator = True  # it is your terminal

    def __init__(self, console: "Console", read_line: Callable[[], Awaitable[str]]) -> None:
        self.console = console
        self.read_line = read_line

    async def group(self) -> Group | None:
        assert self.console.group is not None
        return await self.console.engine.store.get_group(self.console.group.id)

    async def setup(self, mode: str | None) -> Group:
        console = self.console
        group = await self.group()
        assert group is not None
        settings = group.settings.with_changes(mode=mode) if mode else group.settings
        await console.engine.store.update_group(group.id, settings=settings)
        console.group = await console.admin.setup(group.key, group.name, settings)
        return console.group

    async def ask_text(self, label: str, current: str | None) -> str | None:
        if not self.console.interactive:
            if current is not None:
                return current
            raise InvalidInput(f"{label} is missing: give it as prompt:\"...\" (the console asks for it only "
                               "when its input is a terminal).")
        keep = " (an empty first line keeps the current one)" if current is not None else ""
        self.console.surface.write(f"{label}{keep}; end it with a line holding only a dot (.):")
        lines: list[str] = []
        while True:
            line = await self.read_line()
            if not line or line.rstrip("\n") == ".":
                break
            if not lines and not line.strip() and current is not None:
                return current
            lines.append(line.rstrip("\n"))
        return "\n".join(lines)


    async def keep_image(self, image: object, label: str) -> str:
        raise InvalidInput("The console takes pictures as URLs: give avatar:https://...")


class Console:
    def __init__(self, engine: Engine, surface: ConsoleSurface, *, person: str, group_name: str,
                 defaults: GroupSettings, interactive: bool = False) -> None:
        self.engine = engine
        self.admin = Admin(engine)
        self.surface = surface
        self.person = person
        self.group_name = group_name
        self.defaults = defaults
        self.interactive = interactive  # input is a terminal: the console may ask for what is missing
        self.group: Group | None = None

    async def open(self) -> Group:
        """Open (or set up) this console's group and take it: one process at a time runs a group.
        A group turned off stays off until /roundtable setup."""
        key = f"console:{self.group_name}"
        existing = await self.engine.store.find_group(key)
        self.group = existing or await self.admin.setup(key, self.group_name, self.defaults)
        await self.engine.start()
        holder = await self.engine.claim(self.group)
        if holder is not None:
            raise Busy(f"the group {self.group_name!r} is open in another {holder}; close it there, "
                       "or open another group with --group NAME")
        return self.group

    async def run(self, read_line: Callable[[], Awaitable[str]], *, greet: bool = False) -> None:
        group = await self.open()
        if greet:
            agents = await self.engine.store.list_agents(group.id)
            self.surface.write(f"Roundtable console: group {group.name}, {len(agents)} agent(s), mode "
                               f"{group.settings.mode}. Type a message, or /help for commands; Ctrl-D to quit.")
        while True:
            line = await read_line()
            if not line:
                break
            await self.handle(line.rstrip("\n"), read_line)
        await self.engine.wait_idle(group.id)

    async def handle(self, line: str, read_line: Callable[[], Awaitable[str]]) -> None:
        assert self.group is not None
        if not line.strip():
            return
        try:
            if line.lstrip().startswith("/"):
                typed = parse_command(line)
                answer = await commands.run(commands.find(typed.path), self.admin, ConsoleCaller(self, read_line),
                                             typed.options)
                if answer is not None:
                    for out in reply_lines(answer):
                        self.surface.write(out)
            else:
                self.group = await self.engine.store.get_group(self.group.id)
                if not self.group.enabled:
                    raise InvalidInput("Roundtable is off in this group: /roundtable setup turns it back on.")
                await self.engine.post_user_message(self.group, author_name=self.person, user_id=self.person,
                                                    text=message_text(line))
        except UserFacingError as exc:
            self.surface.write(f"error: {exc}")


def stdin_reader(stream: TextIO = sys.stdin) -> Callable[[], Awaitable[str]]:
    loop = asyncio.get_running_loop()

    async def read_line() -> str:
        return await loop.run_in_executor(None, stream.readline)

    return read_line
