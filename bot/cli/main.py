"""Wiring: load .env and settings, set up logging, open the store, the model and a surface; run.

    roundtable init       write .env after checking each value live; print the invite URL
    roundtable doctor     check a set-up, one line per check (exit 0 only when all pass)
    roundtable run        the Discord bot
    roundtable console    the same engine in a terminal (no Discord needed)
    roundtable export     a group's thread as html, json or md (reads only the database)
    roundtable replay     ask the selector again about past messages; nothing stored changes
    roundtable migrate    bring the database's schema up to date and print its version
    roundtable copy       copy every row into an empty database (SQLite -> PostgreSQL), verified
    roundtable bench      the benchmark (tokens vs AutoGen, prompt cache, engine overhead)

Every start-up problem is one line on stderr (`roundtable: ...`) and exit code 2.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bot.core.errors import ConfigError, StoreError, UserFacingError
from bot.core.rules.shards import parse_shards

if TYPE_CHECKING:
    from bot.config import Settings

DESCRIPTION = "Roundtable: one Discord channel as a group chat between people and several LLM agents."
DISTRIBUTION = "roundtable"
CONSOLE_LOG_LEVELS = ("WARNING", "INFO", "DEBUG")  # by the number of -v
DB_HELP = ("SQLite file (or sqlite:///FILE) or postgresql://USER@HOST/DATABASE URL "
           "(default: ROUNDTABLE_DB or roundtable.db)")
FORMATS = ("html", "json", "md")  # bot.core.record.export.FORMATS (not imported here: --help stays fast)
ENV_FILE_HELP = "settings file to load first (default: .env here, when there is one)"


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr (`roundtable: ...`) and exit code 2, like every other problem."""

    def error(self, message: str) -> None:  # type: ignore[override]  # argparse's is NoReturn; so is this
        self.exit(2, f"roundtable: {message} (see {self.prog} --help)\n")



def _named(option: str) -> Callable[[str], str]:
    """An argparse type: a name with something in it (spaces around it dropped)."""
    def name(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"{option} needs a name, not an empty string")
        return value.strip()
    return name

def version() -> str:
    """The installed distribution's version; from a source tree that is not installed, pyproject's."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        pass
    import tomllib

    try:
        with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def _database_group(verb: argparse.ArgumentParser) -> None:
    """--group and --db, as the verbs that read a database take them."""
    verb.add_argument("--group", required=True, metavar="NAME|ID", help="the group: its name, id or key")
    verb.add_argument("--db", metavar="FILE|URL", help=DB_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="roundtable", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"roundtable {version()}",
                        help="print the version and exit")
    parser.add_argument("--env-file", metavar="FILE", help=ENV_FILE_HELP)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    init = verbs.add_parser(
        "init", help="write .env after checking each value live (model endpoint and key, Discord bot token and "
                     "server, database); prints the invite URL",
        description="On a terminal it asks for what is missing or wrong (secrets hidden); without one, or with --yes, "
                    "it takes the flags, then the file's values, then the environment's, and a missing or failing "
                    "value is one line with nothing written. Secrets are better given in the environment "
                    "(OPENAI_API_KEY=... DISCORD_TOKEN=... roundtable init --yes) than as flags, which other "
                    "users of the machine can see. Running it again keeps what is there.")
    init.add_argument("--openai-base-url", metavar="URL", help="the OpenAI-compatible server, e.g. "
                                                               "http://127.0.0.1:11434/v1 (default: OpenAI's)")
    init.add_argument("--openai-api-key", metavar="KEY", help="its API key (any text for a server that needs none)")
    init.add_argument("--model", metavar="MODEL", help="the agents' default model (ROUNDTABLE_MODEL); it must be "
                                                       "one the server lists")
    init.add_argument("--discord-token", metavar="TOKEN", help="the bot's token (Developer Portal > your "
                                                               "application > Bot > Reset Token)")
    init.add_argument("--discord-guild-id", metavar="ID", help="the server the slash commands are synced to at once "
                                                              "(the bot must be in it; without one they are "
                                                              "registered for every server, which Discord can take "
                                                              "up to an hour to show)")
    init.add_argument("--no-discord", action="store_true", help="set up for the console only (no Discord token)")
    init.add_argument("--db", metavar="FILE|URL", help=DB_HELP)
    init.add_argument("-y", "--yes", "--non-interactive", dest="yes", action="store_true",
                      help="never ask, even on a terminal (for scripts)")
    doctor = verbs.add_parser(
        "doctor", help="check the set-up, one line per check with its fix (exit 0 only when none fails)",
        description="Checks the settings, the Discord token, the Message Content intent, the server of "
                    "DISCORD_GUILD_ID (a ! warning when unset, which does not fail), each group channel's "
                    "webhook and the bot's permissions there, the database (schema, replies waiting, leases), "
                    "each model endpoint and each agent's own model. A malformed setting leaves out only the "
                    "checks that need it. Changes nothing: the database is read without migrating it, Discord is "
                    "asked over REST, the model servers for their model lists.")
    doctor.add_argument("--db", metavar="FILE|URL", help=DB_HELP)
    run = verbs.add_parser("run", help="start the Discord bot (needs DISCORD_TOKEN and the LLM settings; "
                                       "logs at ROUNDTABLE_LOG_LEVEL)")
    run.add_argument("--shards", metavar="IDS", help="run only these shards, e.g. 0,1 (default: "
                                                     "ROUNDTABLE_SHARDS; without shards: one unsharded connection)")
    run.add_argument("--shard-count", metavar="N", help="how many shards the bot has in all, across its processes "
                                                        "(default: ROUNDTABLE_SHARD_COUNT)")
    console = verbs.add_parser(
        "console", help="a local group chat in this terminal over the same engine (needs only the LLM settings)",
        description="Type messages as PERSON, or slash commands as text, e.g. "
                    '/agent add name:planner role:"trip planner who drafts the itinerary" prompt:"You plan trips." '
                    "Input may be piped; at end of input the console waits until no agent is pending. "
                    "Exit code: 0 when every line was taken; 1 when piped input had a line refused (an unknown "
                    "command, a bad option, a message that was not saved: the lines are named on stderr); 2 for "
                    "a start-up problem; 130 after Ctrl-C.",
    )
    console.add_argument("--db", metavar="FILE|URL", help=DB_HELP + "; a file's directory must exist")
    console.add_argument("--group", default="main", type=_named("--group"),
                         help="group name inside the file (default: main)")
    console.add_argument("--as", dest="person", default="you", type=_named("--as"),
                         help="who you are in the chat (default: you)")
    console.add_argument("-v", "--verbose", action="count", default=0,
                         help="log more: -v life-cycle and turns (INFO), -vv decisions (DEBUG); "
                              "by default only warnings and errors")
    export = verbs.add_parser(
        "export", help="write a group's thread as html (a page to read), json (data) or md (to paste); "
                       "needs only the database",
        description="Write a group's thread, with its episodes, runs and routing decisions, as one file. "
                    "The JSON schema is docs/export-schema.json.")
    _database_group(export)
    export.add_argument("--format", required=True, metavar="FORMAT", help="html, json or md")
    export.add_argument("--out", metavar="FILE", help="write here (default: stdout)")
    export.add_argument("--from", dest="first", type=int, metavar="SEQ", help="first message number (default 1)")
    export.add_argument("--to", dest="last", type=int, metavar="SEQ", help="last message number (default: newest)")
    replay = verbs.add_parser(
        "replay", help="ask the selector again about a past message (or every one of an episode) with today's "
                       "roster and settings, beside the stored decision; nothing stored changes",
        description="Re-run the speaker selector through the configured model server (OPENAI_BASE_URL) and print "
                    "the stored and the new decision side by side.")
    _database_group(replay)
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--seq", type=int, metavar="N", help="the message whose decision to replay")
    which.add_argument("--episode", type=int, metavar="E", help="replay every selector decision of episode E")
    replay.add_argument("--model", metavar="M", help="the selector model to ask (default: the group's, else "
                                                     "ROUNDTABLE_SELECTOR_MODEL, else ROUNDTABLE_MODEL)")
    migrate = verbs.add_parser(
        "migrate", help="apply the schema migrations the database lacks and print its schema version "
                        "(needs only the database; every verb also migrates when it opens one)",
        description="Bring a SQLite file (created if missing) or a PostgreSQL database up to this version's "
                    "schema; two processes migrating at once apply each migration once.")
    migrate.add_argument("--db", metavar="FILE|URL", help=DB_HELP)
    copy = verbs.add_parser(
        "copy", help="copy every row of a database into an empty one, e.g. SQLite to PostgreSQL, and verify "
                     "the copy by row counts and checksums (needs only the databases)",
        description="Move a deployment: stop the bot, copy, then point ROUNDTABLE_DB at the copy. The copy is "
                    "one transaction; leases are not copied.")
    copy.add_argument("--from", dest="source", required=True, metavar="FILE|URL",
                      help="the database to copy (SQLite file, sqlite:///FILE or postgresql:// URL)")
    copy.add_argument("--to", dest="target", required=True, metavar="FILE|URL",
                      help="the empty database to copy into (created and migrated when needed)")
    from bench.cli import DESCRIPTION as BENCH_DESCRIPTION
    from bench.cli import add_arguments as bench_arguments

    bench_arguments(verbs.add_parser(
        "bench", help="a benchmark on this machine: prompt tokens and cache vs AutoGen, engine overhead "
                      "(needs no settings; nothing leaves 127.0.0.1)",
        description=BENCH_DESCRIPTION))
    for verb in verbs.choices.values():  # `roundtable console --env-file x` as `roundtable --env-file x console`
        verb.add_argument("--env-file", metavar="FILE", default=argparse.SUPPRESS, help=ENV_FILE_HELP)
    return parser


def log_level(args: argparse.Namespace, configured: str) -> str:
    """The console logs warnings unless -v asks for more; `run` logs at ROUNDTABLE_LOG_LEVEL."""
    if args.verb == "console":
        return CONSOLE_LOG_LEVELS[min(args.verbose, len(CONSOLE_LOG_LEVELS) - 1)]
    if args.verb in ("export", "replay", "migrate", "copy"):
        return "WARNING"
    return configured


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    if args.verb == "bench":  # no settings, no .env: a local server and temporary databases only
        from bench.cli import run as run_bench

        return run_bench(args)
    from bot.core.rules.secrets import mask_error

    if args.verb in ("init", "doctor"):  # each reads the settings file its own way
        return setup_verb(args)

    if args.verb == "export" and args.format.lower() not in FORMATS:
        print(f"roundtable: unknown format {args.format!r}: use html, json or md", file=sys.stderr)
        return 2
    try:
        return run_verb(args, settings_for(args))
    except (ConfigError, StoreError, UserFacingError) as exc:
        print(f"roundtable: {mask_error(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `roundtable export ... | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def settings_for(args: argparse.Namespace) -> Settings:
    """The settings a verb runs with (the env file, then the environment), every secret among them
    registered before anything can show it, and logging set up."""
    from bot.config import configure_logging, load_env_file, load_settings
    from bot.core.rules.secrets import register_url
    from bot.masking import register_settings

    missing_note = load_env_file(args.env_file)
    register_settings(None, os.environ)  # every secret the process knows, before anything can show it
    for url in (getattr(args, "db", None), getattr(args, "source", None), getattr(args, "target", None)):
        register_url(url)
    if args.verb == "console" and not os.environ.get("OPENAI_API_KEY", "").strip() and sys.stdin.isatty():
        from bot.cli.init import ask_model_key

        ask_model_key(args.env_file)
    settings = load_settings(os.environ, need_discord=args.verb == "run", missing_note=missing_note,
                             need_llm=args.verb not in ("export", "migrate", "copy"))
    register_settings(settings, {})
    configure_logging(log_level(args, settings.log_level))
    return settings


def run_verb(args: argparse.Namespace, settings: Settings) -> int:
    """Run `args.verb` (export, replay, copy, migrate, console, run) with `settings`; its exit status."""
    if args.verb in ("export", "replay"):
        return asyncio.run(record_verb(args, settings))
    if args.verb == "copy":
        from bot.wiring import copy

        return asyncio.run(copy(args.source, args.target))
    if args.verb == "migrate":
        from bot.wiring import migrate

        return asyncio.run(migrate(args.db, settings.db_path))
    if args.verb == "console":
        from bot.wiring import run_console

        return asyncio.run(run_console(settings, db=args.db, group=args.group, person=args.person))
    from bot.wiring import run_discord

    if args.shards is not None or args.shard_count is not None:
        shards = parse_shards(args.shards if args.shards is not None else os.environ.get("ROUNDTABLE_SHARDS"),
                              args.shard_count if args.shard_count is not None
                              else os.environ.get("ROUNDTABLE_SHARD_COUNT"))
        settings = dataclasses.replace(settings, shards=shards)
    return asyncio.run(run_discord(settings))


def setup_verb(args: argparse.Namespace) -> int:
    """`roundtable init` or `roundtable doctor` (logging only for warnings: their lines are the output)."""
    from bot.config import configure_logging
    from bot.core.rules.secrets import mask_error, register, register_url
    from bot.masking import register_settings

    register_settings(None, os.environ)  # (each verb registers its settings file's too, once read)
    for secret in (getattr(args, "openai_api_key", None), getattr(args, "discord_token", None)):
        register(secret)
    for url in (getattr(args, "db", None), getattr(args, "openai_base_url", None)):
        register_url(url)
    configure_logging("WARNING")
    logging.getLogger("discord").setLevel(logging.ERROR)  # discord.py's "logging in" and the like are noise here
    try:
        if args.verb == "doctor":
            from bot.cli.doctor import main as doctor

            return doctor(args.env_file, args.db)
        from bot.cli.init import run_init

        return run_init(args, args.env_file)
    except (ConfigError, StoreError, UserFacingError) as exc:
        print(f"roundtable: {mask_error(str(exc))}", file=sys.stderr)
        return 2


async def record_verb(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli import record

    if args.verb == "export":
        return await record.export(settings, db=args.db, group=args.group, fmt=args.format.lower(), out=args.out,
                                   first=args.first, last=args.last)
    return await record.replay(settings, db=args.db, group=args.group, seq=args.seq, episode=args.episode,
                               model=args.model)


if __name__ == "__main__":
    sys.exit(main())
