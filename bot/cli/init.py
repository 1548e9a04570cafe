"""`roundtable init`: set up the settings file, checking each value live before anything is written.

It needs the model endpoint and its key, the model agents use, the Discord bot token
(optional: without one the set-up is for the console only), the Discord server the
slash commands are synced to (optional: without one they are registered for every
server, which Discord can take up to an hour to show) and where the database lives.
Each value comes from a flag, else the settings file, else the environment;
on a terminal it asks for what is still missing, and for what failed its check
(secrets with hidden input). Without a terminal (or with --yes) nothing is asked: a
missing or failing value is one line on stderr, exit code 2, and nothing is written.

The checks: the model endpoint answers, takes the key and lists the model (GET
/models); Discord takes the token (who the bot is) and the application has the
Message Content intent (its flags); the bot is in the server DISCORD_GUILD_ID names
(`roundtable run` syncs the commands there); the database can be read and its schema
is not newer than this version's (a SQLite file that does not exist yet is fine when
its directory does). Then the file is written (with the DISCORD_API_BASE_URL the
checks used, so that later commands ask the same Discord), its other lines kept (a
new one starts from config.example.env), readable by its owner only, and the invite URL
printed with the scopes and permissions the bot needs (`bot.surfaces.discord.permissions`).
Running it again keeps what is there and asks only for what is missing or wrong.
"""
from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bot.cli.settings_file import PRIVATE, SettingsFile
from bot.config import DEFAULT_ENV_FILE, Settings, load_settings
from bot.core.errors import ConfigError, InvalidInput, LLMError, StoreError
from bot.core.rules.doctor import Check

if TYPE_CHECKING:
    from bot.surfaces.discord.doctor import RestDoctor

DEFAULT_MODEL = "gpt-4o-mini"  # Settings.model's default
DEFAULT_DB = "roundtable.db"
STOPPED = "init stopped; nothing was written"


class Refused(ConfigError):
    """A value failed its check where nothing may be asked: one line, nothing written."""

    def __init__(self, text: str) -> None:
        super().__init__(f"{text}; nothing was written")


class Asker(Protocol):
    interactive: bool

    def ask(self, question: str, *, secret: bool = False) -> str: ...

    def say(self, text: str) -> None: ...


class Terminal:
    """Questions on the terminal; a secret is typed without echo."""

    interactive = True

    def ask(self, question: str, *, secret: bool = False) -> str:
        return (getpass.getpass(f"{question}: ") if secret else input(f"{question}: ")).strip()

    def say(self, text: str) -> None:
        print(text, flush=True)


class Script:
    """No questions (input is not a terminal, or --yes)."""

    interactive = False

    def ask(self, question: str, *, secret: bool = False) -> str:
        raise AssertionError("a script is never asked")  # callers check `interactive` first

    def say(self, text: str) -> None:
        print(text, flush=True)


@dataclass
class Found:
    """The values init settled on, each checked."""

    base_url: str = ""  # "": OpenAI's
    api_key: str = ""
    model: str = DEFAULT_MODEL
    token: str = ""  # "": no Discord (console only)
    application_id: int | None = None
    guild_id: str = ""  # "": the commands are registered globally
    api_base: str = ""  # DISCORD_API_BASE_URL ("": discord.com)
    db: str = DEFAULT_DB


class Init:
    def __init__(self, args: argparse.Namespace, file: SettingsFile, asker: Asker) -> None:
        self.args = args
        self.file = file
        self.asker = asker
        self.found = Found()

    def current(self, key: str, flag: str | None) -> str:
        """A flag, else the file's value, else the environment's."""
        if flag is not None:
            return flag.strip()
        return self.file.get(key) or os.environ.get(key, "").strip()

    def say(self, check: Check) -> None:
        self.asker.say(check.line())

    def refuse_or_say(self, check: Check) -> None:
        """A failed check: without a terminal the end (nothing written); on one, said before asking again."""
        if not self.asker.interactive:
            raise Refused(f"{check.name}: {check.detail}" + (f"; {check.fix}" if check.fix else ""))
        self.say(check)

    # the model endpoint ------------------------------------------------------------
    def endpoint(self) -> None:
        from bot.llm.endpoints import OPENAI_API, model_ids

        base = self.current("OPENAI_BASE_URL", self.args.openai_base_url)
        key = self.current("OPENAI_API_KEY", self.args.openai_api_key)
        if not key:
            if not self.asker.interactive:
                raise Refused("OPENAI_API_KEY is missing: give --openai-api-key KEY (or set OPENAI_API_KEY "
                              "in the environment)")
            if not base:
                base = self.ask_base_url("")
            key = self.ask_key(base)
        while True:
            problem = _malformed({"OPENAI_BASE_URL": base}) if base else None
            if problem is not None:
                self.refuse_or_say(Check("model endpoint", False, problem))
                base = self.ask_base_url("")
                continue
            try:
                listed = asyncio.run(model_ids(base or OPENAI_API, key))
            except ConfigError as exc:  # unreachable, or the key refused (the text names the setting)
                self.refuse_or_say(Check("model endpoint", False, str(exc)))
                if "OPENAI_API_KEY" in str(exc):
                    key = self.ask_key(base)
                else:
                    base = self.ask_base_url(base)
                continue
            except LLMError as exc:  # it answers, takes the key, but lists nothing (no /models, a 403)
                self.say(Check("model endpoint", True, f"{base or OPENAI_API} answers, but gave no model list "
                                                       f"({exc.public}); the model is not checked"))
                listed = []
            break
        self.found.base_url, self.found.api_key = base, key
        self.found.model = self.pick_model(listed)
        if listed:
            self.say(Check("model endpoint", True, f"{base or OPENAI_API} answers, takes the key and lists "
                                                   f"{self.found.model} ({len(listed)} models)"))

    def ask_base_url(self, again: str) -> str:
        """The model endpoint; Enter keeps `again` (a server that was not up yet), else means OpenAI's."""
        keep = f"check {again} again" if again else "OpenAI's"
        return self.asker.ask("Model endpoint: an OpenAI-compatible base URL such as http://127.0.0.1:11434/v1 "
                              f"(Enter: {keep})") or again

    def ask_key(self, base: str) -> str:
        while True:
            key = self.asker.ask(f"API key of {base or 'OpenAI'} (hidden; any text for a local server that "
                                 "needs none)", secret=True)
            if key:
                return key
            self.asker.say("The key cannot be empty.")

    def pick_model(self, listed: list[str]) -> str:
        model = self.current("ROUNDTABLE_MODEL", self.args.model) or DEFAULT_MODEL
        while listed and model not in listed:
            shown = ", ".join(listed[:12]) + (", ..." if len(listed) > 12 else "")
            self.refuse_or_say(Check("model", False, f"ROUNDTABLE_MODEL {model} is not among the models the "
                                                     f"endpoint lists ({shown})",
                                     "give --model with one of them"))
            model = self.asker.ask(f"Model for agents (Enter: {listed[0]})") or listed[0]
        return model

    # Discord -----------------------------------------------------------------------
    def discord(self) -> None:
        if self.args.no_discord:
            return
        token = self.current("DISCORD_TOKEN", self.args.discord_token)
        api_base = self.current("DISCORD_API_BASE_URL", None)
        if api_base:
            problem = _malformed({"DISCORD_API_BASE_URL": api_base})
            if problem is not None:
                raise Refused(problem)
        self.found.api_base = api_base
        self.found.guild_id = self.current("DISCORD_GUILD_ID", self.args.discord_guild_id)
        if not token and self.asker.interactive:
            token = self.ask_token()
        while token:
            from bot.surfaces.discord.doctor import RestDoctor

            rest = RestDoctor(Settings(openai_api_key="-", discord_token=token, discord_api_base_url=api_base or None))
            checks = asyncio.run(_identify(rest))
            identity = checks[0]
            if not identity.ok:
                self.refuse_or_say(identity)
                token = self.ask_token()
                continue
            self.say(identity)
            intent = checks[1]
            if not intent.ok:
                self.refuse_or_say(intent)
                if self.asker.ask("Press Enter when it is on to check again (or type skip to go on without it)"
                                  ).lower() != "skip":
                    continue
            else:
                self.say(intent)
            if rest.app is None:
                raise RuntimeError("the token was identified without the bot's application")
            self.found.application_id = rest.app.id
            self.found.guild_id = self.guild(token, api_base, self.found.guild_id)
            break
        self.found.token = token

    def guild(self, token: str, api_base: str, guild: str) -> str:
        """The server the commands are synced to: asked on a terminal when unset (Enter: none), and
        checked live (the bot is in it: its fix is the invite URL) when given."""
        if not guild and self.asker.interactive:
            guild = self.ask_guild()
        while guild:
            problem = _malformed({"DISCORD_GUILD_ID": guild})
            if problem is None:
                check = asyncio.run(_guild_check(token, api_base, int(guild)))
                if check.ok:
                    self.say(check)
                    return guild
            else:
                check = Check("DISCORD_GUILD_ID", False, problem.removeprefix("DISCORD_GUILD_ID="))
            self.refuse_or_say(check)
            if problem is not None:
                guild = self.ask_guild()
                continue
            again = self.asker.ask("Press Enter when the bot is in that server to check again (or give another "
                                   "server id; skip: none, the commands are registered for every server)")
            if again.lower() == "skip":
                return ""
            guild = again or guild
        return guild

    def ask_guild(self) -> str:
        return self.asker.ask("Discord server id for the slash commands: with it they show in that server at once; "
                              "without it they are registered for every server, which Discord can take up to an "
                              "hour to show (Discord > Settings > Advanced > Developer Mode on, then right-click the "
                              "server > Copy Server ID; Enter: none)")

    def ask_token(self) -> str:
        return self.asker.ask("Discord bot token (hidden; Developer Portal > your application > Bot > Reset Token; "
                              "Enter: no Discord, the console only)", secret=True)

    # the database ------------------------------------------------------------------
    def database(self) -> None:
        from storage.diagnosis import inspect

        db = self.current("ROUNDTABLE_DB", self.args.db)
        if not db and self.asker.interactive:
            db = self.asker.ask(f"Database: a SQLite file or a postgresql:// URL (Enter: {DEFAULT_DB})")
        db = db or DEFAULT_DB
        while True:
            try:
                health = asyncio.run(inspect(db, time.time())).report
            except StoreError as exc:
                check = Check("database", False, str(exc))
            else:
                if health.version <= health.known:
                    state = (f"schema version {health.version}" if health.exists
                             else "does not exist yet; the first start creates it")
                    self.say(Check("database", True, f"{health.where}: {state}"))
                    break
                check = Check("database", False, f"{health.where} is at schema version {health.version}, newer than "
                                                 f"this version of Roundtable knows ({health.known})",
                              "upgrade Roundtable, or choose another database")
            self.refuse_or_say(check)
            db = self.asker.ask(f"Database: a SQLite file or a postgresql:// URL (Enter: {DEFAULT_DB})") or DEFAULT_DB
        self.found.db = db

    # writing -----------------------------------------------------------------------
    def write(self) -> None:
        found, file = self.found, self.file
        values = {"OPENAI_BASE_URL": found.base_url, "OPENAI_API_KEY": found.api_key,
                  "ROUNDTABLE_MODEL": found.model, "DISCORD_TOKEN": found.token,
                  "DISCORD_GUILD_ID": found.guild_id, "DISCORD_API_BASE_URL": found.api_base, "ROUNDTABLE_DB": found.db}
        if self.args.no_discord:  # Discord is left as it is, unchecked
            for key in ("DISCORD_TOKEN", "DISCORD_GUILD_ID", "DISCORD_API_BASE_URL"):
                del values[key]
        for key, value in values.items():
            before = file.values.get(key, "").strip()
            if value != before and (value or before):
                try:
                    file.set(key, value)
                except InvalidInput as exc:
                    raise Refused(str(exc)) from None
        name, new = self.file.path, not file.exists
        if file.changed or new:
            try:
                file.write()
            except OSError as exc:
                raise Refused(f"{name} cannot be written ({exc.strerror or type(exc).__name__})") from None
            kept = sum(1 for p in file.parts if p.key is not None and p.key not in file.changed)
            rest = (f"{kept} other settings kept as they were" if not new else
                    "the other settings are config.example.env's, with its explanations" if kept else
                    "every other setting has its default")
            self.asker.say(f"Wrote {name} (readable by you only): set {', '.join(file.changed) or 'nothing new'}; "
                           f"{rest}.")
        else:
            if name.stat().st_mode & 0o077:
                name.chmod(PRIVATE)
                self.asker.say(f"{name} already holds these values; made it readable by you only.")
            else:
                self.asker.say(f"{name} already holds these values; nothing to change.")
        problem = _malformed({**file.values, **os.environ}, need_llm=True)
        if problem is not None:
            self.asker.say(f"Note: another setting needs fixing before `roundtable run`: {problem}")


def run_init(args: argparse.Namespace, env_file: str | None) -> int:
    """The questions are asked outside any event loop (Ctrl-C at a question ends at once); each
    check runs in its own."""
    from bot.core.rules.secrets import register_env
    from bot.surfaces.discord.permissions import invite_lines

    interactive = sys.stdin.isatty() and not args.yes
    file = SettingsFile.read(Path(env_file or DEFAULT_ENV_FILE).expanduser())
    register_env(file.values)  # the file's secrets: never in a line
    init = Init(args, file, Terminal() if interactive else Script())
    try:
        init.endpoint()
        init.discord()
        init.database()
    except (KeyboardInterrupt, EOFError):
        print(file=sys.stderr)
        print(f"roundtable: {STOPPED}", file=sys.stderr)
        return 130
    init.write()
    say = init.asker.say
    say(tools_line({**init.file.values, **os.environ}))
    if init.found.application_id is not None:
        for line in invite_lines(init.found.application_id):
            say(line)
        if not init.found.guild_id:
            say("DISCORD_GUILD_ID is empty: the slash commands are registered for every server, which Discord can "
                "take up to an hour to show. For them at once, invite the bot, then: roundtable init "
                "--discord-guild-id SERVER_ID.")
        say("Then: roundtable run, and /roundtable setup in a channel; roundtable doctor checks the set-up.")
    elif args.no_discord:
        say("Discord not checked (--no-discord). The console is ready: roundtable console.")
    else:
        say("No Discord token: set up for the console only. Try it: roundtable console "
            "(roundtable init again adds Discord).")
    return 0


def tools_line(env: dict[str, str]) -> str:
    """What the MCP servers' file (`ROUNDTABLE_MCP_CONFIG`, default mcp.json here) gives agents:
    its servers, a note when it is malformed, or where to declare them (nothing is started)."""
    from bot.llm.mcp_tools import CONFIG_SETTING, DEFAULT_FILE, config_path, load_config

    path = config_path(env)
    if path is None:
        return (f"Tools: agents get tools from MCP servers declared in {DEFAULT_FILE} here (or the file "
                f"{CONFIG_SETTING} names), granted with /agent tools; see README, \"Give agents tools\".")
    try:
        servers = load_config(path)
    except ConfigError as exc:
        return f"Note: fix the MCP servers' file before `roundtable run`: {exc}"
    names = ", ".join(s.name for s in servers) or "none"
    return (f"Tools: {len(servers)} MCP server(s) in {path} ({names}); roundtable doctor starts each, "
            "/agent tools grants their tools.")


def _malformed(env: dict[str, str], *, need_llm: bool = False) -> str | None:
    """What `load_settings` finds wrong with these values (one line), or None."""
    try:
        load_settings(env, need_discord=False, need_llm=need_llm)
    except ConfigError as exc:
        return str(exc).rstrip(".")
    return None


async def _identify(rest: RestDoctor) -> list[Check]:
    async with rest:
        return await rest.identify()


async def _guild_check(token: str, api_base: str, guild_id: int) -> Check:
    from bot.surfaces.discord.doctor import RestDoctor

    async with RestDoctor(Settings(openai_api_key="-", discord_token=token,
                                   discord_api_base_url=api_base or None)) as rest:
        identity = (await rest.identify())[0]
        return await rest.guild_check(guild_id) if identity.ok else identity


def ask_model_key(env_file: str | None) -> None:
    """`roundtable console` on a terminal without OPENAI_API_KEY: ask for it (hidden input), check it
    against the model server, and offer to save it in the settings file. An empty answer asks
    nothing more (start-up then says the key is missing, as on a pipe)."""
    from bot.llm.endpoints import OPENAI_API
    from bot.llm.providers import is_served

    base = os.environ.get("OPENAI_BASE_URL", "").strip()
    if base and _malformed({"OPENAI_BASE_URL": base}):
        return  # start-up names the malformed URL
    where = base or f"{OPENAI_API} (OpenAI)"
    print(f"OPENAI_API_KEY is not set: the console needs the API key of the model server, {where}.")
    asked = _ask_checked_key(base or OPENAI_API)
    if asked is None:
        return
    key, listed = asked
    os.environ["OPENAI_API_KEY"] = key
    if listed is None:
        return  # not checked: not offered for saving
    model = os.environ.get("ROUNDTABLE_MODEL", "").strip() or DEFAULT_MODEL
    if listed and not is_served(model, listed):
        return  # a set-up that cannot start is not saved: start-up names the models the server serves
    path = Path(env_file or DEFAULT_ENV_FILE).expanduser()
    if path.exists() and not path.is_file():  # /dev/null, a pipe: nothing to save into
        return
    if input(f"Save it in {path} (readable by you only)? [y/N] ").strip().lower() not in ("y", "yes"):
        return
    _save_key(path, key, base)


def _ask_checked_key(url: str) -> tuple[str, list[str] | None] | None:
    """Ask for the model server's key until `url` takes one: (the key, the models it lists, [] when it
    lists none); the models None when the server did not answer (the key could not be checked); None
    when the person gave no key."""
    from bot.llm.endpoints import model_ids

    while True:
        key = getpass.getpass("API key (hidden; any text for a local server that needs none; Enter: stop): ").strip()
        if not key:
            return None
        try:
            return key, asyncio.run(model_ids(url, key))
        except ConfigError as exc:
            if "OPENAI_API_KEY" in str(exc):  # the key was refused: another try
                print(f"✗ {exc}")
                continue
            # The server did not answer: the key could not be checked, so it is not offered for
            # saving; start-up then says why in its one line (said once, not here too).
            return key, None
        except LLMError:
            return key, []  # it answers without a model list: the key is not refused


def _save_key(path: Path, key: str, base: str) -> None:
    """Save the model key in the settings file at `path`, with its server and the model given inline."""
    try:
        file = SettingsFile.read(path)
        file.set("OPENAI_API_KEY", key)
        # The key belongs to its server: saved without it, a later start without OPENAI_BASE_URL
        # inline would send a local server's key to OpenAI.
        # The model given inline is saved with them for the same reason: the saved server may not serve
        # the file's model.
        with_base = bool(base) and file.get("OPENAI_BASE_URL") != base
        if with_base:
            file.set("OPENAI_BASE_URL", base)
        model = os.environ.get("ROUNDTABLE_MODEL", "").strip()
        with_model = bool(model) and file.get("ROUNDTABLE_MODEL") != model
        if with_model:
            file.set("ROUNDTABLE_MODEL", model)
        file.write()
    except (ConfigError, InvalidInput, OSError) as exc:
        print(f"Not saved: {exc}")
    else:
        withs = [what for what, saved in (("its server (OPENAI_BASE_URL)", with_base),
                                          ("the model (ROUNDTABLE_MODEL)", with_model)) if saved]
        what = f" with {' and '.join(withs)}" if withs else ""
        print(f"Saved in {path}{what}; the next `roundtable console` will not ask.")
