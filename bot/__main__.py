"""Wiring: load .env and settings, set up logging, open the store, the model and a surface; run.

    roundtable run        the Discord bot
    roundtable console    the same engine in a terminal (no Discord needed)
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Sequence

from bot.core.errors import Busy, ConfigError, StoreError

DESCRIPTION = "Roundtable: one Discord channel as a group chat between people and several LLM agents."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roundtable", description=DESCRIPTION)
    parser.add_argument("--env-file", default=".env", help="settings file to load first (default: .env)")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.add_parser("run", help="start the Discord bot (needs DISCORD_TOKEN and the LLM settings)")
    console = verbs.add_parser(
        "console", help="a local group chat in this terminal over the same engine (needs only the LLM settings)",
        description="Type messages as PERSON, or slash commands as text, e.g. "
                    '/agent add name:planner role:"drafts the itinerary" prompt:"You plan trips." '
                    "Input may be piped; at end of input the console waits until no agent is pending.",
    )
    console.add_argument("--db", help="SQLite file (default: ROUNDTABLE_DB or roundtable.db)")
    console.add_argument("--group", default="main", help="group name inside the file (default: main)")
    console.add_argument("--as", dest="person", default="you", help="who you are in the chat (default: you)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    from dotenv import load_dotenv

    load_dotenv(args.env_file, override=False)
    from bot.config import configure_logging, load_settings

    try:
        settings = load_settings(os.environ, need_discord=args.verb == "run")
        quiet = args.verb == "console" and not os.environ.get("ROUNDTABLE_LOG_LEVEL")
        configure_logging("WARNING" if quiet else settings.log_level)
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
