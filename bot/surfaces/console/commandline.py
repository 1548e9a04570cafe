"""Parse a slash command typed as text: `/agent add name:planner role:"trip planner who drafts the itinerary"`.

Options are `name:value`; values with spaces go in double quotes (a quote
inside is written `\\"`). Used by the console; pure, no I/O.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from bot.core.errors import InvalidInput

_OPTION = re.compile(r"^([a-z_]+):(.*)$", re.DOTALL)


@dataclass(frozen=True)
class CommandLine:
    path: tuple[str, ...]  # e.g. ("agent", "add")
    options: dict[str, str] = field(default_factory=dict)


def parse_command(line: str) -> CommandLine:
    text = line.strip()
    if not text.startswith("/"):
        raise InvalidInput("A command starts with '/'.")
    try:
        words = shlex.split(text[1:], posix=True)
    except ValueError as exc:
        raise InvalidInput(f"Could not read that command ({exc}); close every double quote.") from None
    path: list[str] = []
    options: dict[str, str] = {}
    for word in words:
        match = _OPTION.match(word)
        if match:
            key, value = match.groups()
            if key in options:
                raise InvalidInput(f"The option {key} is given twice.")
            options[key] = value
        elif options:
            raise InvalidInput(f"Unexpected {word!r} after the options: write options as name:value "
                               "and put values with spaces in double quotes.")
        else:
            path.append(word.lower())
    if not path:
        raise InvalidInput("Type a command after '/', e.g. /roundtable status.")
    return CommandLine(tuple(path), options)
