"""Wiring: load .env and settings, set up logging, open the store, the model and a surface; run.

    roundtable run        the Discord bot
    roundtable console    the same engine in a terminal (no Discord needed)

Every start-up problem is one line on stderr (`roundtable: ...`) and exit code 2.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Sequence

from bot.core.errors import Busy, ConfigError, StoreError

DESCRIPTION = "Roundtable: one Discord channel as a group chat between people and several LLM agents."
DISTRIBUTION = "roundtable"
CONSOLE_LOG_LEVELS = ("WARNING", "INFO", "DEBUG")  # by the number of -v


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
        with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roundtable", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"roundtable {version()}",
                        help="print the version and exit")
    parser.add_argument("--env-file", metavar="FILE",
                        help="settings file to load first (default: .env here, when there is one)")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.add_parser("run", help="start the Discord bot (needs DISCORD_TOKEN and the LLM settings; "
                                 "logs at ROUNDTABLE_LOG_LEVEL)")
    console = verbs.add_parser(
        "console", help="a local group chat in this terminal over the same engine (needs only the LLM settings)",
        description="Type messages as PERSON, or slash commands as text, e.g. "
                    '/agent add name:planner role:"drafts the itinerary" prompt:"You plan trips." '
                    "Input may be piped; at end of input the console waits until no agent is pending.",
    )
    console.add_argument("--db", metavar="FILE", help="SQLite file (default: ROUNDTABLE_DB or roundtable.db); "
                                      "its directory must exist")
    console.add_argument("--group", default="main", help="group name inside the file (default: main)")
    console.add_argument("--as", dest="person", default="you", help="who you are in the chat (default: you)")
    console.add_argument("-v", "--verbose", action="count", default=0,
                         help="log more: -v life-cycle and turns (INFO), -vv decisions (DEBUG); "
                              "by default only warnings and errors")
    return parser


def log_level(args: argparse.Namespace, configured: str) -> str:
    """The console logs warnings unless -v asks for more; `run` logs at ROUNDTABLE_LOG_LEVEL."""
    if args.verb == "console":
        return CONSOLE_LOG_LEVELS[min(args.verbose, len(CONSOLE_LOG_LEVELS) - 1)]
    return configured


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    from bot.config import configure_logging, load_env_file, load_settings

    try:
        missing_note = load_env_file(args.env_file)
        settings = load_settings(os.environ, need_discord=args.verb == "run", missing_note=missing_note)
        configure_logging(log_level(args, settings.log_level))
        if args.verb == "console":
            from bot.wiring import run_console

            return asyncio.run(run_console(settings, db=args.db, group=args.group, person=args.person))
        from bot.wiring import run_discord

        return asyncio.run(run_discord(settings))
    except (ConfigError, StoreError, Busy) as exc:
        print(f"roundtable: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
