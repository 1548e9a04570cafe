"""Checks for every piece of input people give: names, prompts, options.

Each failure is an `InvalidInput` whose text says what was wrong and how to fix it.
"""
from __future__ import annotations

import math
import unicodedata

from bot.core.errors import InvalidInput
from bot.core.models import MAX_TURNS_RANGE, MODES

NAME_MAX = 32
ROLE_MAX = 200
PROMPT_MAX = 4000
BRIEF_MAX = 4000
MODEL_MAX = 100
URL_MAX = 2048
MESSAGE_MAX = 8000
RESERVED_NAMES = frozenset({"user", "all", "everyone", "here", "roundtable", "selector"})
WEBHOOK_FORBIDDEN = ("discord", "clyde")
CONTEXT_BUDGET_RANGE = (500, 200_000)
PACE_RANGE = (0.0, 60.0)


def agent_name(value: str) -> str:
    name = unicodedata.normalize("NFC", (value or "").strip())
    if not name:
        raise InvalidInput("An agent name can't be empty: use 1-32 letters, digits, '_', '-' or '.'.")
    if len(name) > NAME_MAX:
        raise InvalidInput(f"The agent name is {len(name)} characters long; the limit is {NAME_MAX}.")
    bad = [c for c in name if not (c.isalpha() or c.isdigit() or c in "_-.")]
    if bad:
        shown = ", ".join(_describe_char(c) for c in dict.fromkeys(bad))
        raise InvalidInput(
            f"The agent name {name!r} contains {shown}: use only letters, digits, '_', '-' and '.' (no spaces)."
        )
    if name.casefold() in RESERVED_NAMES:
        raise InvalidInput(f"{name!r} is reserved (it means something in tags); choose another name.")
    for word in WEBHOOK_FORBIDDEN:
        if word in name.casefold():
            raise InvalidInput(f"Discord refuses webhook names that contain {word!r}; choose another name.")
    if name.strip(".-_") == "":
        raise InvalidInput("An agent name needs at least one letter or digit.")
    return name


def _describe_char(c: str) -> str:
    if c == " ":
        return "a space"
    if c.isprintable() and not c.isspace():
        return repr(c)
    return f"U+{ord(c):04X} ({unicodedata.name(c, 'unnamed character').lower()})"


def role(value: str) -> str:
    text = " ".join((value or "").split())
    if not text:
        raise InvalidInput("The role can't be empty: give a one-line description such as 'drafts the itinerary'.")
    if len(text) > ROLE_MAX:
        raise InvalidInput(f"The role is {len(text)} characters long; keep it to one line of at most {ROLE_MAX}.")
    return text


def system_prompt(value: str) -> str:
    text = (value or "").strip()
    if not text:
        raise InvalidInput("The system prompt can't be empty.")
    if len(text) > PROMPT_MAX:
        raise InvalidInput(f"The system prompt is {len(text)} characters long; the limit is {PROMPT_MAX}.")
    return text


def brief(value: str) -> str:
    text = (value or "").strip()
    if len(text) > BRIEF_MAX:
        raise InvalidInput(f"The brief is {len(text)} characters long; the limit is {BRIEF_MAX}.")
    return text


def model(value: str | None) -> str | None:
    text = (value or "").strip()
    if not text:
        return None
    if len(text) > MODEL_MAX or any(c.isspace() for c in text):
        raise InvalidInput(f"{text[:40]!r} is not a model name (no spaces, at most {MODEL_MAX} characters).")
    return text


def avatar_url(value: str | None) -> str | None:
    text = (value or "").strip()
    if not text:
        return None
    if not text.startswith(("https://", "http://")) or len(text) > URL_MAX or any(c.isspace() for c in text):
        raise InvalidInput("The avatar must be an http(s) URL of an image, at most 2048 characters.")
    return text


def mode(value: str) -> str:
    text = (value or "").strip().lower().replace("-", "_")
    if text not in MODES:
        raise InvalidInput(f"Unknown mode {value!r}: choose one of {', '.join(MODES)}.")
    return text


def integer(name: str, value: object, low: int, high: int) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, int) or isinstance(value, bool) else value
    except ValueError:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high} (got {value!r}).") from None
    if not low <= number <= high:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high} (got {number}).")
    return number


def number(name: str, value: object, low: float, high: float) -> float:
    try:
        result = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise InvalidInput(f"{name} must be a number from {low:g} to {high:g} (got {value!r}).") from None
    if not math.isfinite(result) or not low <= result <= high:
        raise InvalidInput(f"{name} must be a number from {low:g} to {high:g} (got {value!r}).")
    return result


def boolean(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise InvalidInput(f"{name} must be true or false (got {value!r}).")


def max_turns(value: object) -> int:
    return integer("max_turns", value, *MAX_TURNS_RANGE)


def message_text(value: str) -> str:
    if not value.strip():
        raise InvalidInput("The message is empty.")
    if len(value) > MESSAGE_MAX:
        raise InvalidInput(f"The message is {len(value)} characters long; the limit is {MESSAGE_MAX}.")
    return value
