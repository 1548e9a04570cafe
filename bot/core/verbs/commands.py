"""Every command, declared once: its name, description, options, who may run it, its handler.

Discord builds its slash-command tree from `COMMANDS`, the console parses its
text form from them (`/agent add name:planner role:"trip planner who drafts the itinerary"`),
and `/help` lists them (by topic: `Command.topic`), so a verb added here appears everywhere. Option values
are checked here too (`convert`), with one wording for both surfaces.

A handler gets an `Invocation`: the engine's verbs (`Verbs`, whose part it calls, such as
`inv.verbs.roster`), the group, who asks, the typed options, and a `Caller`, the few things
only a surface can do (make its channel a group, ask for a long text such as a system prompt).
It returns a `Reply`: text, or a `Card` (a table of facts) for the surface to show.
"""
from __future__ import annotations

import difflib
import os
import re
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.core.errors import Forbidden, InvalidInput, UserFacingError
from bot.core.features.reading import Reader
from bot.core.models import Agent, Group, Message
from bot.core.record.export import FORMATS
from bot.core.rules import schedule as sched
from bot.core.rules import validation as v
from bot.core.rules.card import Attachment, Reply, masked
from bot.core.rules.doctor import Check, doctor_card
from bot.core.settings import CONTEXT_BUDGET_RANGE, GROUP_SETTINGS, MODEL_MAX
from bot.core.verbs.admin import Verbs
from bot.core.verbs.memory_verbs import MemoryVerbs
from bot.core.verbs.roster_verbs import MODEL_SETTINGS, RosterVerbs

Kind = Literal["text", "long_text", "integer", "number", "boolean", "choice", "role", "message", "agent", "image",
               "model", "tool"]  # model: text, completed from the providers' model lists; tool: from the tools
Who = Literal["everyone", "operators", "operators_to_change"]

NOT_SET_UP = "Roundtable is not set up here: an admin can run /roundtable setup."
OPERATORS_ONLY = "Only people with Manage Server (or this group's operator role) can do that."
LONG_ANSWER = 3800  # characters of an /ask answer shown as messages (two); longer ones are attached


@dataclass(frozen=True)
class Option:
    name: str
    description: str
    kind: Kind = "text"
    required: bool = False
    low: float | None = None  # integer and number ranges
    high: float | None = None
    choices: tuple[str, ...] = ()
    max_length: int | None = None
    surfaces: frozenset[str] = frozenset({"discord", "console"})
    slow: bool = False  # giving it makes a model call (as `Command.slow`)


class Caller(Protocol):
    """What the surface a command came from knows and can do."""

    surface: str  # "discord" | "console"

    @property
    def is_operator(self) -> bool:
        """May run operator commands here (Manage Server or the group's operator role)."""
        ...

    async def group(self) -> Group | None:
        """The group of the place the command was used in (None: never set up)."""
        ...

    async def setup(self, mode: str | None) -> Group:
        """Make this place a group (Discord: create its webhook), or turn it back on."""
        ...

    async def ask_text(self, label: str, current: str | None) -> str | None:
        """A long text that was not given as an option (Discord: a form; a terminal: typed
        lines). None: the surface answers later by itself (Discord's form); InvalidInput
        when it cannot ask (input is not a terminal)."""
        ...

    async def keep_image(self, image: object, label: str) -> str:
        """A lasting URL for an image given as an `image` option (Discord: an attachment)."""
        ...

    @property
    def reader(self) -> Reader:
        """Who asks, for their read cursors."""
        ...

    def link(self, group: Group, message: Message) -> str:
        """Where a message can be seen (Discord: a jump link; the console: #seq)."""
        ...

    async def reading_groups(self) -> list[tuple[Group, bool]]:
        """The groups /inbox looks in (Discord: this server's), each with whether the asker
        is one of its operators (then `@user` tags them)."""
        ...

    async def checks(self, group: Group | None) -> list[Check]:
        """/roundtable doctor's checks that only the surface can make (Discord: the channel's
        webhook and the bot's permissions there; `group` None: a channel not set up yet)."""
        ...


@dataclass
class Invocation:
    verbs: Verbs  # the parts of the engine's verbs (`bot.core.verbs.admin`)
    caller: Caller
    place: Group | None  # the group where the command was used; None before /roundtable setup
    options: dict[str, object]

    @property
    def group(self) -> Group:
        if self.place is None or not self.place.enabled:
            raise UserFacingError(NOT_SET_UP)
        return self.place

    def get(self, name: str) -> object:
        return self.options.get(name)

    def text(self, name: str) -> str | None:
        value = self.options.get(name)
        return None if value is None else str(value)


Handler = Callable[[Invocation], Awaitable[Reply | None]]


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    description: str
    handler: Handler
    options: tuple[Option, ...] = ()
    who: Who = "everyone"
    needs_group: bool = True
    slow: bool = False  # a model call: surfaces show that it works (Discord defers the answer)
    rest: str | None = None  # the option that words typed after the command fill (`/help agent`: topic)

    @property
    def name(self) -> str:
        return " ".join(self.path)

    @property
    def topic(self) -> str:
        """Its group in /help: "chat" for a one-word command, the first word of a two-word one,
        "extras" for the deeper ones (/agent memory show, /agent schedule add)."""
        return {1: "chat", 2: self.path[0]}.get(len(self.path), "extras")

    @property
    def short_name(self) -> str:
        """How /help's summary names it within its topic: `add` (/agent add), `/ask`, `memory show`."""
        return f"/{self.name}" if self.topic == "chat" else " ".join(self.path[1:])

    def is_slow(self, given: Mapping[str, object]) -> bool:
        """Whether this call makes a model call: the command always does, or a slow option is given."""
        return self.slow or any(o.slow and given.get(o.name) is not None for o in self.options)

    def options_for(self, surface: str) -> tuple[Option, ...]:
        return tuple(o for o in self.options if surface in o.surfaces)

    def usage(self, surface: str = "console") -> str:
        """`/agent add name role [prompt] [model] [avatar]`."""
        parts = [o.name if o.required else f"[{o.name}]" for o in self.options_for(surface)]
        return " ".join([f"/{self.name}", *parts])


# option values --------------------------------------------------------------
def convert(option: Option, raw: object) -> object:
    """A value typed on a surface (text in the console, a typed value from Discord) as the
    handler wants it; InvalidInput, worded the same on both surfaces, when it does not fit."""
    if option.kind == "integer":
        return v.integer(option.name, raw, int(option.low or 0), int(option.high or 2**31))
    if option.kind == "number":
        return v.number(option.name, raw, option.low or 0.0, option.high if option.high is not None else 1e9)
    if option.kind == "boolean":
        return v.boolean(option.name, raw)
    if option.kind == "image":
        return raw  # the surface's own object: `Caller.keep_image` turns it into a URL
    if option.kind == "choice":
        wanted = str(raw).strip().lower().replace("-", "_")
        if wanted not in option.choices:
            raise InvalidInput(f"{option.name} must be one of {', '.join(option.choices)} (got {raw!r}).")
        return wanted
    text = str(raw)
    if option.max_length is not None and len(text) > option.max_length:
        raise InvalidInput(f"{option.name} is {len(text)} characters long; the limit is {option.max_length}.")
    return text


def model_choices(lists: Mapping[str, Sequence[str] | None], typed: str, limit: int = 25) -> list[str]:
    """The listed models (`LLM.model_names`) containing `typed`, those starting with it first."""
    key = typed.strip().casefold()
    found = dict.fromkeys(m for models in lists.values() for m in models or () if len(m) <= MODEL_MAX)
    matches = [m for m in found if key in m.casefold()]
    matches.sort(key=lambda m: (not m.casefold().startswith(key), m.casefold()))
    return matches[:limit]


def tool_choices(names: Sequence[str], typed: str, limit: int = 25) -> list[str]:
    """What a `grant` being typed may become: its last name (after a comma or a blank) completed from
    the tools available (`server.tool`, a built-in) and each server's `server.*`, those starting
    with it first; the names written before it kept, and none of them offered again."""
    cut = max(typed.rfind(","), typed.rfind(" ")) + 1
    head, last = typed[:cut], typed[cut:].strip().casefold()
    written = {w for w in re.split(r"[,\s]+", typed[:cut]) if w}
    servers = dict.fromkeys(f"{n.split('.', 1)[0]}.*" for n in names if "." in n)
    offered = [n for n in dict.fromkeys([*servers, *names]) if n not in written and last in n.casefold()]
    offered.sort(key=lambda n: (not n.casefold().startswith(last), n.casefold()))
    return [f"{head}{n}" for n in offered if len(head) + len(n) <= 100][:limit]


def check_options(command: Command, given: Mapping[str, object], surface: str) -> dict[str, object]:
    """`given` checked against the declaration: unknown and missing options, then each value."""
    declared = {o.name: o for o in command.options_for(surface)}
    unknown = [k for k in given if k not in declared]
    if unknown:
        allowed = ", ".join(declared) or "none"
        raise InvalidInput(f"/{command.name} has no option {unknown[0]!r} (options: {allowed}).")
    missing = [o.name for o in declared.values() if o.required and given.get(o.name) is None]
    if missing:
        raise InvalidInput(f"/{command.name} needs {missing[0]}: {command.usage(surface)}")
    return {k: convert(declared[k], raw) for k, raw in given.items() if raw is not None}


async def run(command: Command, verbs: Verbs, caller: Caller, given: Mapping[str, object]) -> Reply | None:
    """Check who asks and what they gave, then run the handler. UserFacingError for refusals."""
    options = check_options(command, given, caller.surface)
    invocation = Invocation(verbs, caller, await caller.group(), options)
    if command.needs_group:
        invocation.group  # noqa: B018  (raises when the place is not a group)
    changing = command.who == "operators" or (command.who == "operators_to_change" and bool(options))
    if changing and not caller.is_operator:
        raise Forbidden(OPERATORS_ONLY)
    reply = await command.handler(invocation)
    return None if reply is None else masked(reply)  # no secret the process knows reaches people


def find(path: Sequence[str]) -> Command:
    return resolve(path, {})[0]


def resolve(path: Sequence[str], given: Mapping[str, str]) -> tuple[Command, dict[str, str]]:
    """The command typed as `path` (`/agent add` -> ("agent", "add")) with its options; words after
    the command fill its `rest` option (`/help agent`). An unknown command names the nearest one."""
    wanted = tuple(p.lower() for p in path)
    for command in COMMANDS:
        if command.path == wanted:
            return command, dict(given)
    for command in COMMANDS:  # "/roundtable why 42": a command, then a value that is not name:value
        if len(command.path) < len(wanted) and command.path == wanted[:len(command.path)]:
            extra = " ".join(path[len(command.path):])
            if command.rest is not None and command.rest not in given:
                return command, {**given, command.rest: extra}
            options = ", ".join(f"{o.name}:…" for o in command.options)
            raise InvalidInput(f"Unexpected {extra!r} after /{' '.join(command.path)}: " + (
                f"write its options as name:value ({options})." if options else "it takes no options."))
    under = [c.path[len(wanted)] for c in COMMANDS if c.path[:len(wanted)] == wanted and len(c.path) > len(wanted)]
    if under:  # "/agent": a group of commands
        raise InvalidInput(f"/{' '.join(wanted)} needs a subcommand: {', '.join(dict.fromkeys(under))} "
                           f"(/help {wanted[0]} shows them with their options).")
    near = nearest(wanted)
    hint = f"did you mean /{near}? " if near else ""
    raise InvalidInput(f"Unknown command /{' '.join(path)}; {hint}/help lists the commands.")


def nearest(wanted: Sequence[str]) -> str | None:
    """The command (or group of commands) closest to the unknown `wanted`: `agnet` -> `agent`."""
    names = {" ".join(c.path[:n]) for c in COMMANDS for n in range(1, len(c.path) + 1)}
    typed = " ".join(wanted)
    found = difflib.get_close_matches(typed, sorted(names), n=1, cutoff=0.6)
    if not found and len(wanted) > 1:  # "/agnet add name:x": the group misspelt, the rest right
        found = difflib.get_close_matches(" ".join(wanted[:2]), sorted(names), n=1, cutoff=0.6)
    return found[0] if found else None


# handlers -------------------------------------------------------------------
async def _setup(inv: Invocation) -> Reply:
    group = await inv.caller.setup(inv.text("mode"))
    return (f"Roundtable is on in {group.name} (mode {group.settings.mode}, max_turns "
            f"{group.settings.max_agent_turns}). Add agents with /agent add.")


async def _add(inv: Invocation) -> Reply | None:
    name = v.agent_name(inv.text("name") or "")
    role = v.role(inv.text("role") or "")
    model, avatar = v.model(inv.text("model")), v.avatar_url(inv.text("avatar"))
    await inv.verbs.roster.check_name_free(inv.group, name)  # before a form opens for the prompt
    prompt = inv.text("prompt")
    if prompt is None:
        prompt = await inv.caller.ask_text(f"System prompt for {name}", None)
        if prompt is None:
            return None  # the surface's form finishes the command
    v.system_prompt(prompt)
    if avatar is None and inv.get("avatar_image") is not None:
        avatar = await inv.caller.keep_image(inv.get("avatar_image"), f"{name}'s picture")
    return await inv.verbs.roster.add_agent(inv.group, name, role, prompt, model, avatar)


async def _edit(inv: Invocation) -> Reply | None:
    agent = await inv.verbs.roster.agent(inv.group, inv.text("name") or "")
    changes = {"role": inv.text("role"), "model": inv.text("model"), "avatar": inv.text("avatar")}
    if changes["role"] is not None:
        v.role(changes["role"])  # checked before a form opens for the prompt
    v.model(changes["model"])
    v.avatar_url(changes["avatar"])
    memory, mode = inv.get("memory"), inv.text("mode")
    settings = {k: v.agent_setting(k, inv.get(k)) for k in MODEL_SETTINGS if inv.get(k) is not None}
    prompt = inv.text("prompt")
    others = (*changes.values(), memory, mode, inv.get("avatar_image"), *(inv.get(k) for k in MODEL_SETTINGS))
    if prompt is None and all(o is None for o in others):  # with any other option, they apply at once
        prompt = await inv.caller.ask_text(f"System prompt for {agent.name}", agent.system_prompt)
        if prompt is None:
            return None
    if changes["avatar"] is None and inv.get("avatar_image") is not None:
        changes["avatar"] = await inv.caller.keep_image(inv.get("avatar_image"), f"{agent.name}'s picture")
    return await inv.verbs.roster.edit_agent(inv.group, agent.name, prompt=prompt,
                                             memory=None if memory is None else bool(memory), mode=mode,
                                             settings=settings, **changes)


async def _agent_tools(inv: Invocation) -> Reply:
    agent = await inv.verbs.roster.agent(inv.group, inv.text("name") or "")
    confirm = inv.get("confirm")
    return await inv.verbs.tools.agent_tools(
        agent, grant=inv.text("grant"), revoke=inv.text("revoke"), confirm=None if confirm is None else bool(confirm))


async def _mute(inv: Invocation) -> Reply:
    return await inv.verbs.roster.mute_agent(inv.group, inv.text("name") or "", inv.text("for"))


def _agent_verb(verb: Callable[[RosterVerbs, Group, str], Awaitable[Reply]]) -> Handler:
    async def handler(inv: Invocation) -> Reply:
        return await verb(inv.verbs.roster, inv.group, inv.text("name") or "")
    return handler


def _memory_verb(verb: Callable[[MemoryVerbs, Agent], Awaitable[Reply]]) -> Handler:
    async def handler(inv: Invocation) -> Reply:
        return await verb(inv.verbs.memory, await inv.verbs.roster.agent(inv.group, inv.text("name") or ""))
    return handler


async def _unread(inv: Invocation) -> Reply:
    return await inv.verbs.reading.unread(inv.group, inv.caller.reader, inv.caller.is_operator, inv.caller.link)


async def _inbox(inv: Invocation) -> Reply:
    return await inv.verbs.reading.inbox(await inv.caller.reading_groups(), inv.caller.reader, inv.caller.link)


async def _catchup(inv: Invocation) -> Reply:
    return await inv.verbs.reading.catchup(inv.group, inv.caller.reader, inv.caller.is_operator, inv.caller.link)


async def _ask(inv: Invocation) -> Reply:
    agent = await inv.verbs.roster.agent(inv.group, inv.text("agent") or "")
    prompt = (inv.text("prompt") or "").strip()
    if not prompt:
        raise InvalidInput("/ask needs a prompt: what do you want to ask?")
    post = bool(inv.get("post"))
    answer = await inv.verbs.ask(inv.group, agent, prompt, asker=inv.caller.reader.name, post=post)
    if answer.posted is not None:
        return f"{agent.name}'s answer is posted in the group: {inv.caller.link(inv.group, answer.posted)}"
    if not answer.text:
        return f"{agent.name} had nothing to say to that (its answer was empty)."
    note = f"only you see this; not posted: {answer.not_posted}" if answer.not_posted else "only you see this"
    if inv.caller.surface == "discord" and len(answer.text) > LONG_ANSWER:
        return long_answer(agent.name, answer.text, note)
    return f"{agent.name} ({note}):\n{answer.text}"


def long_answer(name: str, text: str, note: str) -> Attachment:
    """An answer too long for a few messages, as a Markdown file."""
    handle, path = tempfile.mkstemp(prefix="roundtable-ask-", suffix=".md")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text + "\n")
    return Attachment(path, f"{name}-answer.md",
                      f"{name}'s answer is {len(text):,} characters long, so it is attached ({note}).")


async def _schedule_add(inv: Invocation) -> Reply:
    agent = await inv.verbs.roster.agent(inv.group, inv.text("name") or "")
    return await inv.verbs.schedules.add(inv.group, agent, every=inv.text("every"), at=inv.text("at"),
                                         tz=inv.text("tz"), prompt=inv.text("prompt") or "",
                                         created_by=inv.caller.reader.user_id)


async def _schedule_list(inv: Invocation) -> Reply:
    name = inv.text("name")
    agent = None if name is None else await inv.verbs.roster.agent(inv.group, name)
    return await inv.verbs.schedules.list(inv.group, agent)


async def _doctor(inv: Invocation) -> Reply:
    group = None if inv.place is None or not inv.place.enabled else inv.place
    checks = [*await inv.caller.checks(group), *await inv.verbs.groups.doctor(group)]
    return doctor_card(checks, f"Doctor: {group.name}" if group else "Doctor (this channel is not a group)")


async def _help(inv: Invocation) -> Reply:
    return help_text(inv.caller.surface, inv.text("topic"))


TOPICS = {  # /help's groups (`Command.topic`), each with what its commands are about
    "roundtable": "the group",
    "agent": "the agents",
    "extras": "agents' memory and schedules",
    "chat": "you in the chat",
}
CONSOLE_LINES = {  # console-only commands and notes, by topic
    "chat": ["/attach PATH  Attach a file (an image or a text file) to your next message; "
             "/attach alone lists them, /detach drops them",
             "/regenerate  Have the newest agent message written again (the same agent, on the same conversation); "
             "printed as [name] (regenerated) text, earlier texts kept in the record",
             "Ctrl-C  Drops the line being typed; on an empty line it stops the turns running now (as ⏹ Stop "
             "does on Discord), else it quits"],
}
WHY_MENU = "Why this reply?"  # Discord's message menus (right-click a message, Apps), declared here once
REGENERATE_MENU = "Regenerate reply"  # bot.core.runtime.regenerate; the console's /regenerate
DISCORD_LINES = {  # the message menus in /help, by topic
    "chat": [f"Message menus (right-click a message, then Apps): \"{WHY_MENU}\" shows why a message went to "
             f"whom; \"{REGENERATE_MENU}\" has the newest agent message written again (by the person who started "
             "the task or an operator; the message is edited, earlier texts kept in the record)",
             "Buttons on an agent's message while it works: ⏹ Stop ends that turn, keeping what was shown; "
             "Approve / Deny decide a tool call that waits for approval (the person who started the task "
             "or an operator)"],
}
OPTIONS_NOTE = 'Options are name:value; quote values with spaces: role:"trip planner who drafts the itinerary".'
EXAMPLES = {"agent": ['e.g. /agent add name:planner role:"trip planner who drafts the itinerary" '
                      'prompt:"You plan trips."',
                      "e.g. /agent mute name:planner for:1h (30m, 2d); /agent edit name:planner temperature:0.3 "
                      "(temperature:default clears it)"]}


def help_text(surface: str, topic: str | None = None) -> str:
    """Without a topic, a few lines (one per topic: its commands by name), so it fits a 24-row
    terminal; with one, that topic's commands with their options."""
    console = surface == "console"
    if topic is None:
        lines = ["Commands by topic; /help TOPIC lists a topic's commands with their options:"]
        for name in TOPICS:
            words = [c.short_name for c in COMMANDS if c.topic == name]
            if console and name == "chat":
                words += ["/attach", "/detach", "/regenerate"]
            lines.append(f"/help {name:<11}{', '.join(dict.fromkeys(words))}")
        if console:
            lines += [OPTIONS_NOTE, "Anything else is a message from you; tag agents with @name."]
        return "\n".join(lines)
    lines = [f"/help {topic}, {TOPICS[topic]} (options in brackets are optional):"]
    lines += [f"{c.usage(surface)}  {c.description}" for c in COMMANDS if c.topic == topic]
    lines += (CONSOLE_LINES if console else DISCORD_LINES).get(topic, [])
    return "\n".join(lines + EXAMPLES.get(topic, []))


# the declaration ------------------------------------------------------------
AGENT = Option("name", "the agent", "agent", required=True)
PROMPT = Option("prompt", "its system prompt (without it, you are asked)", "long_text", max_length=v.PROMPT_MAX)
CONFIG_OPTIONS = tuple(  # /roundtable config's: one per group setting (bot.core.settings)
    Option(s.option_name, s.help, s.kind, low=s.low, high=s.high, choices=s.choices, max_length=s.max_length)
    for s in GROUP_SETTINGS)
MODE = next(o for o in CONFIG_OPTIONS if o.name == "mode")
AVATAR_IMAGE = Option("avatar_image", "an image to use as its picture (instead of a URL)", "image",
                      surfaces=frozenset({"discord"}))
ROLE_HELP = "who it is, read as 'You are NAME, the ROLE': e.g. trip planner who drafts the itinerary"
low_temp, high_temp = v.TEMPERATURE_RANGE
low_cap, high_cap = v.AGENT_MAX_TOKENS_RANGE
low_budget, high_budget = CONTEXT_BUDGET_RANGE

COMMANDS: tuple[Command, ...] = (
    Command(("roundtable", "setup"), "Make this channel a group chat (creates its webhook)", _setup,
            (MODE,), who="operators", needs_group=False),
    Command(("roundtable", "disable"), "Stop the group chat here; the history is kept",
            lambda inv: inv.verbs.groups.disable(inv.group), who="operators"),
    Command(("roundtable", "config"), "Change this group's settings (no options: show them)",
            lambda inv: inv.verbs.groups.config(inv.group, inv.options), CONFIG_OPTIONS, who="operators_to_change"),
    Command(("roundtable", "newtask"), "The next message starts a fresh task (no earlier requests carried)",
            lambda inv: inv.verbs.groups.newtask(inv.group)),
    Command(("roundtable", "pause"), "Hold deliveries (messages are still recorded)",
            lambda inv: inv.verbs.groups.pause(inv.group), who="operators"),
    Command(("roundtable", "resume"), "Release held deliveries", lambda inv: inv.verbs.groups.resume(inv.group),
            who="operators"),
    Command(("roundtable", "stop"), "End the current episode", lambda inv: inv.verbs.groups.stop(inv.group),
            who="operators"),
    Command(("roundtable", "status"), "Settings, the episode, the agents' cursors, the last decision",
            lambda inv: inv.verbs.record.status(inv.group, inv.caller.reader)),
    Command(("roundtable", "why"), "Why a message went to whom (default: the newest message of a person or agent)",
            lambda inv: inv.verbs.record.why(inv.group, inv.text("message")),
            (Option("message", "a message link, id or number", "message"),)),
    Command(("roundtable", "usage"), "Calls, tokens and cost per agent and selector",
            lambda inv: inv.verbs.record.usage(inv.group, int(inv.text("days") or 7)),
            (Option("days", "how many days back (default 7)", "integer", low=1, high=365),)),
    Command(("roundtable", "doctor"), "Check the set-up: webhook, permissions, database, model endpoints, MCP servers",
            _doctor, who="operators", needs_group=False, slow=True),
    Command(("roundtable", "export"), "The thread as a file: html (to read), json (data) or md (to paste)",
            lambda inv: inv.verbs.record.export(inv.group, inv.text("format") or "html"),
            (Option("format", "html (default), json or md", "choice", choices=FORMATS),), who="operators", slow=True),
    Command(("agent", "add"), "Add an agent (without a prompt, you are asked for it)", _add, (
        Option("name", "1-32 letters, digits, _ - .", required=True, max_length=v.NAME_MAX),
        Option("role", ROLE_HELP, required=True, max_length=v.ROLE_MAX),
        PROMPT,
        Option("model", "its model (default: the bot's; provider/model on a named provider)", "model",
               max_length=MODEL_MAX),
        Option("avatar", "the URL of its picture", max_length=v.URL_MAX),
        AVATAR_IMAGE,
    ), who="operators"),
    Command(("agent", "edit"), "Change an agent (no option but the name: you are shown its prompt to edit)", _edit, (
        AGENT,
        Option("role", ROLE_HELP, max_length=v.ROLE_MAX),
        PROMPT,
        Option("model", "its model (empty: the bot's; provider/model on a named provider)", "model",
               max_length=MODEL_MAX),
        Option("avatar", "the URL of its picture", max_length=v.URL_MAX),
        AVATAR_IMAGE,
        Option("memory", "on: it saves notes with memory_write and sees them in later runs", "boolean",
               slow=True),  # turning it on asks the model whether it takes tool calls
        Option("mode", "worker: its runs are private, it speaks only through group_post; talk: it posts replies",
               "choice", choices=("talk", "worker"), slow=True),  # worker: asks the model too
        Option("temperature", f"sent to its model: {low_temp:g}-{high_temp:g}, or default (the model's own)",
               max_length=10),
        Option("max_tokens", f"cap on a reply's tokens: {low_cap}-{high_cap}, or default (no cap)", max_length=10),
        Option("context_budget", f"tokens of thread in its prompts: {low_budget}-{high_budget}, or default "
               "(the group's)", max_length=10),
    ), who="operators"),
    Command(("agent", "rename"), "Give an agent a new name (its old messages keep the old one)",
            lambda inv: inv.verbs.roster.rename_agent(inv.group, inv.text("name") or "", inv.text("new_name") or ""),
            (AGENT, Option("new_name", "1-32 letters, digits, _ - .", required=True, max_length=v.NAME_MAX)),
            who="operators"),
    Command(("agent", "remove"), "Take an agent off the roster (its messages stay)",
            _agent_verb(RosterVerbs.remove_agent), (AGENT,), who="operators"),
    Command(("agent", "enable"), "Let an agent take part again",
            _agent_verb(lambda a, g, n: a.set_enabled(g, n, True)), (AGENT,), who="operators"),
    Command(("agent", "disable"), "Keep an agent on the roster but silent",
            _agent_verb(lambda a, g, n: a.set_enabled(g, n, False)), (AGENT,), who="operators"),
    Command(("agent", "mute"), "Keep an agent out of selection, rotation and @all (for:1h, 30m, 2d; "
            "default: until unmuted)", _mute, (
                AGENT,
                Option("for", "how long: 30m, 1h, 2d, 1h30m (default: until /agent unmute)", max_length=16),
            ), who="operators"),
    Command(("agent", "unmute"), "Let a muted agent be selected and tagged again",
            _agent_verb(RosterVerbs.unmute_agent), (AGENT,), who="operators"),
    Command(("agent", "show"), "An agent's settings and system prompt", _agent_verb(RosterVerbs.show_agent), (AGENT,)),
    Command(("agent", "list"), "The roster", lambda inv: inv.verbs.roster.list_agents(inv.group)),
    Command(("agent", "memory", "show"), "An agent's memory notes, newest first",
            _memory_verb(MemoryVerbs.show), (AGENT,), who="operators"),
    Command(("agent", "memory", "clear"), "Delete every memory note of an agent",
            _memory_verb(MemoryVerbs.clear), (AGENT,), who="operators"),
    Command(("agent", "tools"), "An agent's tools: what it may call (server.tool, server.*); grant, revoke",
            _agent_tools, (
                AGENT,
                Option("grant", "tools to grant: server.tool or server.* (commas between)", "tool", max_length=400),
                Option("revoke", "tools to take back (commas between)", max_length=400),
                Option("confirm", "on: its calls of what is granted wait for approval (recorded)", "boolean"),
            ), who="operators"),
    Command(("agent", "schedule", "add"), "Run an agent by itself: every:30m|2h|1d or at:HH:MM [tz], with a prompt",
            _schedule_add, (
                AGENT,
                Option("prompt", "the task it gets each time", "long_text", required=True,
                       max_length=sched.PROMPT_MAX),
                Option("every", "an interval: 30m, 2h, 1d (at least 5m)", max_length=12),
                Option("at", "a daily time, 24-hour HH:MM", max_length=5),
                Option("tz", "the time zone of at (IANA, e.g. Europe/Paris; default UTC)", max_length=64),
            ), who="operators"),
    Command(("agent", "schedule", "list"), "The schedules here (of one agent when named), with their ids",
            _schedule_list,
            (Option("name", "only this agent's schedules", "agent"),)),
    Command(("agent", "schedule", "remove"), "Remove a schedule by the id /agent schedule list shows",
            lambda inv: inv.verbs.schedules.remove(inv.group, int(inv.text("id") or 0)),
            (Option("id", "the schedule's number", "integer", required=True, low=1, high=2**31 - 1),),
            who="operators"),
    Command(("unread",), "How many messages you have not read here, and which of them tag you", _unread),
    Command(("inbox",), "The messages that tag you, in every group of this server", _inbox, needs_group=False),
    Command(("read",), "Mark everything here read", lambda inv: inv.verbs.reading.read(inv.group, inv.caller.reader)),
    Command(("catchup",), "A short summary of what you missed here", _catchup, slow=True),
    Command(("ask",), "Ask an agent privately (post:true also posts its answer here)", _ask, (
        Option("agent", "the agent to ask", "agent", required=True),
        Option("prompt", "your question or request", required=True, max_length=v.ASK_MAX),
        Option("post", "also post the answer in the group (default: only you see it)", "boolean"),
    ), slow=True),
    Command(("help",), "The commands: by topic, or one topic's with their options", _help,
            (Option("topic", "one topic's commands: " + ", ".join(TOPICS), "choice", choices=tuple(TOPICS)),),
            needs_group=False, rest="topic"),
)
