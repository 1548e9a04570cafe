"""Checks for every piece of input people give: names, prompts, options.

Each failure is an `InvalidInput` whose text says what was wrong and how to fix it.
"""
from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Iterable

from bot.core.errors import InvalidInput
from bot.core.settings import (
    BRIEF_MAX,
    CONTEXT_BUDGET_RANGE,
    MAX_TURNS_RANGE,
    MODEL_MAX,
    MODES,
    PROMPT_LAYOUTS,
    Setting,
)

NAME_MAX = 32
ROLE_MAX = 200
PROMPT_MAX = 4000
URL_MAX = 2048
MESSAGE_MAX = 8000
ASK_MAX = 4000  # an /ask prompt (Discord takes up to 6,000 characters in an option)
RESERVED_NAMES = frozenset({"user", "all", "everyone", "here", "roundtable", "selector"})
WEBHOOK_FORBIDDEN = ("discord", "clyde")
TEMPERATURE_RANGE = (0.0, 2.0)  # an agent's temperature, as OpenAI's API takes it
AGENT_MAX_TOKENS_RANGE = (1, 128_000)  # an agent's reply cap (the largest output models offer)
CLEAR_WORD = "default"  # /agent edit temperature:default (max_tokens, context_budget): back to the default

# Scripts with letters that pass for each other (Latin a / Cyrillic а / Greek α ...): a name may
# use one of them, never two. Other mixes (Latin + Han, Han + Katakana) cannot be mistaken.
LOOKALIKE_SCRIPTS = ("Latin", "Cyrillic", "Greek", "Armenian", "Cherokee", "Coptic")
_SCRIPT_WORDS = {"CJK": "Han"}
# name_key's map from folded letters to the Latin letter they pass for. Keys are casefolded, so a
# letter whose capital is the twin (Cyrillic В, Н, Т) is listed in small form.
_LOOKALIKES = str.maketrans({
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t",
    "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "һ": "h", "ӏ": "l", "ԛ": "q", "ԝ": "w",
    "ү": "y", "ѵ": "v",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "ζ": "z", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o",
    "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ω": "w", "ϲ": "c", "ϳ": "j",
    # Armenian
    "օ": "o", "ս": "u", "հ": "h", "ո": "n", "զ": "q", "ց": "g",
})


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
    _check_one_lookalike_script(name)
    if name.casefold() in RESERVED_NAMES or name_key(name) in RESERVED_NAMES:
        raise InvalidInput(f"{name!r} is reserved (it means something in tags); choose another name.")
    for word in WEBHOOK_FORBIDDEN:
        if word in name.casefold():
            raise InvalidInput(f"Discord refuses webhook names that contain {word!r}; choose another name.")
    if name.strip(".-_") == "":
        raise InvalidInput("An agent name needs at least one letter or digit.")
    return name


def _script(c: str) -> str | None:
    """The script of a letter from its Unicode name ('LATIN SMALL LETTER A' -> 'Latin'), None for others.

    The name is taken after compatibility decomposition, so fullwidth, mathematical and
    accented letters count as their base letter's script.
    """
    if not c.isalpha():
        return None  # digits, '_', '-', '.' belong to no script
    base = unicodedata.normalize("NFKD", c)[:1] or c
    word = unicodedata.name(base, "").split(" ", 1)[0]
    return _SCRIPT_WORDS.get(word, word.title()) if word else None


def _check_one_lookalike_script(name: str) -> None:
    """Refuse a name whose letters come from two scripts that look alike (Latin 'a' + Cyrillic 'а')."""
    scripts = {c: _script(c) for c in name}
    lookalike = [s for s in scripts.values() if s in LOOKALIKE_SCRIPTS]
    counts = Counter(lookalike)
    if len(counts) < 2:
        return
    main = max(counts, key=lambda s: (counts[s], -lookalike.index(s)))  # most distinct letters; first on a tie
    odd = [c for c, s in scripts.items() if s in counts and s != main]
    shown = ", ".join(f"U+{ord(c):04X} {c!r} is {scripts[c]}" for c in odd[:5])
    names = list(counts)  # in order of first appearance
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    raise InvalidInput(
        f"The agent name {name!r} mixes {listed} letters, which look alike ({shown}): "
        "write it in one script."
    )


def name_key(name: str) -> str:
    """What a name looks like, for telling names apart: NFKC, case-folded, look-alikes made Latin.

    Two names with the same key read the same to a person (`рlanner` with a Cyrillic р and
    `planner`; `PLANNER` and `planner`), so a group never holds both.
    """
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    # Decomposed first, so an accented look-alike meets its twin: Cyrillic ё (е + U+0308) reads as ë.
    skeleton = unicodedata.normalize("NFD", folded).translate(_LOOKALIKES)
    return unicodedata.normalize("NFC", skeleton)


def check_name_free(name: str, existing: Iterable[str]) -> None:
    """Refuse `name` when it reads the same as one of `existing` (leave out the agent being renamed)."""
    key, folded = name_key(name), _folded(name)
    for other in existing:
        if name_key(other) != key:
            continue
        if _folded(other) == folded:
            raise InvalidInput(f"An agent named {other!r} is already in this group; choose another name.")
        raise InvalidInput(
            f"{name!r} looks the same as the agent {other!r} already in this group; choose another name."
        )


def _folded(name: str) -> str:
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


def _describe_char(c: str) -> str:
    if c == " ":
        return "a space"
    if c.isprintable() and not c.isspace():
        return repr(c)
    return f"U+{ord(c):04X} ({unicodedata.name(c, 'unnamed character').lower()})"


def role(value: str) -> str:
    text = " ".join((value or "").split())
    if not text:
        raise InvalidInput("The role can't be empty: give a one-line description such as 'trip planner who drafts "
                           "the itinerary'.")
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
    return long_text("brief", value, BRIEF_MAX)


def long_text(name: str, value: str, limit: int) -> str:
    text = (value or "").strip()
    if len(text) > limit:
        raise InvalidInput(f"The {name} is {len(text)} characters long; the limit is {limit}.")
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
    return choice("mode", value, MODES)


def prompt_layout(value: str) -> str:
    return choice("prompt_layout", value, PROMPT_LAYOUTS)


def choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    text = (value or "").strip().lower().replace("-", "_")
    if text not in choices:
        raise InvalidInput(f"Unknown {name} {value!r}: choose one of {', '.join(choices)}.")
    return text


def group_setting(declared: Setting, value: object) -> object:
    """A /roundtable config value as its `GroupSettings` field holds it, checked against its declaration."""
    name = declared.option_name
    if declared.kind == "choice":
        return choice(name, str(value), declared.choices)
    if declared.kind == "boolean":
        return boolean(name, value)
    if declared.kind == "integer":
        whole = integer(name, value, int(declared.low or 0), int(declared.high if declared.high is not None else 2**31))
        return None if whole == 0 and declared.default is None else whole
    if declared.kind == "number":
        real = number(name, value, declared.low or 0.0, declared.high if declared.high is not None else 1e9)
        return None if real == 0 and declared.default is None else real  # 0 turns off what is off by default
    if declared.kind == "model":
        return model(str(value))
    if declared.kind == "role":
        return str(value).strip() or None
    if declared.kind == "long_text":
        return long_text(name, str(value), declared.max_length or MESSAGE_MAX)
    return str(value)


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


TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def boolean(name: str, value: object) -> bool:
    """Every boolean option and setting: each accepted form is named when the value is none of them."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise InvalidInput(f"{name} must be {'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)} (got {value!r}).")


def max_turns(value: object) -> int:
    return integer("max_turns", value, *MAX_TURNS_RANGE)


def message_text(value: str) -> str:
    if not value.strip():
        raise InvalidInput("The message is empty.")
    if len(value) > MESSAGE_MAX:
        raise InvalidInput(f"The message is {len(value)} characters long; the limit is {MESSAGE_MAX}.")
    return value


def agent_setting(name: str, value: object) -> float | int | None:
    """An agent's model setting as /agent edit takes it (temperature, max_tokens or context_budget): a
    number in its range, or `CLEAR_WORD` (None: back to the default: the provider's, the group's)."""
    if str(value).strip().lower() == CLEAR_WORD:
        return None
    if name == "temperature":
        low, high = TEMPERATURE_RANGE
        try:
            return number(name, value, low, high)
        except InvalidInput:
            raise InvalidInput(f"temperature must be a number from {low:g} to {high:g}, or {CLEAR_WORD} "
                               f"(got {value!r}).") from None
    ranges = {"max_tokens": AGENT_MAX_TOKENS_RANGE, "context_budget": CONTEXT_BUDGET_RANGE}
    if name not in ranges:
        raise InvalidInput(f"An agent has no model setting {name!r} (temperature, max_tokens, context_budget).")
    low_i, high_i = ranges[name]
    try:
        return integer(name, value, low_i, high_i)
    except InvalidInput:
        raise InvalidInput(f"{name} must be a whole number from {low_i:,} to {high_i:,}, or {CLEAR_WORD} "
                           f"(got {value!r}).") from None
