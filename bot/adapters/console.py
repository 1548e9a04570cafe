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

from bot.adapters.commandline import CommandLine, parse_command
from bot.core.admin import CONFIG_OPTIONS, Admin
from bot.core.engine import Engine
from bot.core.errors import Busy, InvalidInput, UserFacingError
from bot.core.models import Agent, Episode, Group, GroupSettings, Message
from bot.core.ports import Recorder
from bot.core.prompts import SYSTEM_AUTHOR
from bot.core.stop import strip_terminate
from bot.core.validation import message_text

log = logging.getLogger(__name__)

AGENT_OPTIONS = {
    "add": ("name", "role", "prompt", "model", "avatar"),
    "edit": ("name", "role", "prompt", "model", "avatar"),
    "remove": ("name",), "enable": ("name",), "disable": ("name",), "show": ("name",), "list": (),
}
ROUNDTABLE_OPTIONS = {
    "setup": ("mode",), "disable": (), "config": CONFIG_OPTIONS, "pause": (), "resume": (), "stop": (),
    "status": (), "why": ("message",), "usage": ("days",),
}
HELP = """Commands (options as name:value, quote values with spaces):
/roundtable setup [mode] | disable | config [option:value ...] | pause | resume | stop | status
/roundtable why [message:SEQ] | usage [days:N]
/agent add name role [prompt] [model] [avatar] | edit name [role] [prompt] [model] [avatar]
/agent remove|enable|disable|show name | list
Anything else is a message from you; tag agents with @name."""


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


class Console:
    def __init__(self, engine: Engine, surface: ConsoleSurface, *, person: str, group_name: str,
                 defaults: GroupSettings) -> None:
        self.engine = engine
        self.admin = Admin(engine)
        self.surface = surface
        self.person = person
        self.group_name = group_name
        self.defaults = defaults
        self.group: Group | None = None

    async def open(self) -> Group:
        """Open (or set up) this console's group and take it: one process at a time runs a group."""
        key = f"console:{self.group_name}"
        existing = await self.engine.store.find_group(key)
        self.group = existing if existing and existing.enabled else await self.admin.setup(key, self.group_name, self.defaults)
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
                answer = await self.command(parse_command(line), read_line)
                if answer:
                    self.surface.write(answer)
            else:
                self.group = await self.engine.store.get_group(self.group.id)
                if not self.group.enabled:
                    raise InvalidInput("Roundtable is off in this group: /roundtable setup turns it back on.")
                await self.engine.post_user_message(self.group, author_name=self.person, user_id=self.person,
                                                    text=message_text(line))
        except UserFacingError as exc:
            self.surface.write(f"error: {exc}")

    async def command(self, cmd: CommandLine, read_line: Callable[[], Awaitable[str]]) -> str:
        assert self.group is not None
        group = self.group = await self.engine.store.get_group(self.group.id)
        if cmd.path in (("help",), ("roundtable", "help")):
            return HELP
        if len(cmd.path) != 2 or cmd.path[0] not in ("roundtable", "agent"):
            raise InvalidInput(f"Unknown command /{' '.join(cmd.path)}; type /help for the list.")
        table = ROUNDTABLE_OPTIONS if cmd.path[0] == "roundtable" else AGENT_OPTIONS
        verb = cmd.path[1]
        if verb not in table:
            raise InvalidInput(f"Unknown command /{' '.join(cmd.path)}; type /help for the list.")
        unknown = [k for k in cmd.options if k not in table[verb]]
        if unknown:
            allowed = ", ".join(table[verb]) or "none"
            raise InvalidInput(f"/{' '.join(cmd.path)} has no option {unknown[0]!r} (options: {allowed}).")
        o = cmd.options
        if cmd.path[0] == "agent":
            return await self._agent(group, verb, o, read_line)
        if verb == "setup":
            if "mode" in o:
                await self.admin.config(group, {"mode": o["mode"]})
            self.group = await self.admin.setup(group.key, group.name, group.settings)
            return f"Roundtable is on in {group.name} (mode {self.group.settings.mode})."
        if verb == "why":
            return await self.admin.why(group, _seq(o.get("message")))
        if verb == "usage":
            return await self.admin.usage(group, o.get("days", "7"))  # type: ignore[arg-type]
        if verb == "config":
            return await self.admin.config(group, o)
        return await getattr(self.admin, verb)(group)

    async def _agent(self, group: Group, verb: str, o: dict[str, str], read_line: Callable[[], Awaitable[str]]) -> str:
        if verb == "list":
            return await self.admin.list_agents(group)
        if "name" not in o:
            raise InvalidInput(f"/agent {verb} needs name:NAME.")
        name = o["name"]
        if verb == "add":
            if "role" not in o:
                raise InvalidInput("/agent add needs role:\"one line about what it does\".")
            prompt = o.get("prompt")
            if prompt is None:
                self.surface.write(f"system prompt for {name} (one line):")
                prompt = (await read_line()).strip()
            return await self.admin.add_agent(group, name, o["role"], prompt, o.get("model"), o.get("avatar"))
        if verb == "edit":
            return await self.admin.edit_agent(group, name, role=o.get("role"), prompt=o.get("prompt"),
                                               model=o.get("model"), avatar=o.get("avatar"))
        if verb == "remove":
            return await self.admin.remove_agent(group, name)
        if verb in ("enable", "disable"):
            return await self.admin.set_enabled(group, name, verb == "enable")
        return await self.admin.show_agent(group, name)


def _seq(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip().lstrip("#")
    if not text.isdigit():
        raise InvalidInput(f"message must be a message number such as 12 (got {value!r}).")
    return int(text)


def stdin_reader(stream: TextIO = sys.stdin) -> Callable[[], Awaitable[str]]:
    loop = asyncio.get_running_loop()

    async def read_line() -> str:
        return await loop.run_in_executor(None, stream.readline)

    return read_line
