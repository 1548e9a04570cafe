"""Reply cleaning and stop rules: impersonation guard, TERMINATE, the cap, repeats."""
from __future__ import annotations

import re
from collections import Counter
from difflib import SequenceMatcher
from typing import Iterable, Sequence

from bot.core.models import DEFAULT_MAX_TURNS

TERMINATE = "TERMINATE"
# TERMINATE at the very end, allowing markdown emphasis, quotes and punctuation around it.
_WORDS = re.compile(r"\w+")
_TRAILING_TERMINATE = re.compile(r"[\s*_`\"'(\[]*\bTERMINATE\b[\s*_`\"'.!)\]]*\Z")


def ends_with_terminate(text: str) -> bool:
    return bool(_TRAILING_TERMINATE.search(text))


def strip_terminate(text: str) -> str:
    """The text as shown to people: a trailing TERMINATE removed."""
    return _TRAILING_TERMINATE.sub("", text).rstrip()


def _speaker_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    alternatives = sorted({n for n in names if n}, key=len, reverse=True)
    if not alternatives:
        return None
    joined = "|".join(re.escape(n) for n in alternatives)
    # "[name]", "name:", "**name:**", "@name:" at the start of a line.
    return re.compile(
        rf"^[ \t]*(?:\*\*|__)?(?:\[@?(?:{joined})\]|@?(?:{joined})[ \t]*(?:\*\*|__)?[ \t]*:)",
        re.IGNORECASE,
    )


def guard_impersonation(text: str, own_name: str, other_names: Sequence[str]) -> str:
    """Strip a leading `own_name:` / `[own_name]`; cut at a line opening as someone else."""
    own = _speaker_pattern([own_name])
    out = text.strip()
    while own is not None:
        stripped = own.sub("", out, count=1).lstrip(" \t*_").lstrip()
        if stripped == out:
            break
        out = stripped
    others = _speaker_pattern([n for n in other_names if n.casefold() != own_name.casefold()])
    if others is None:
        return out
    kept: list[str] = []
    for line in out.splitlines():
        if others.match(line):
            break
        kept.append(line)
    return "\n".join(kept).strip()


def cap_notice(cap: int) -> str:
    return f"Stopped after {cap} agent messages (max_turns). Post a message to continue."


def near_repeat(text: str, earlier: Sequence[str], threshold: float = 0.92) -> bool:
    """Whether `text` nearly repeats one of `earlier` (seed 003's parrot check).

    Compared as sequences of words (case and punctuation ignored). Two exact
    upper bounds of the similarity (length, then the shared words counted
    without order) rule most pairs out before the full comparison, so the
    check costs well under a millisecond per turn.
    """
    words = _WORDS.findall(text.casefold())
    if len(words) < 4:
        return False
    counts = Counter(words)
    for other in earlier:
        other_words = _WORDS.findall(other.casefold())
        total = len(words) + len(other_words)
        if not other_words or 2 * min(len(words), len(other_words)) < threshold * total:
            continue
        shared = sum((counts & Counter(other_words)).values())
        if 2 * shared < threshold * total:
            continue
        if SequenceMatcher(None, words, other_words, autojunk=False).ratio() >= threshold:
            return True
    return False


__all__ = [
    "DEFAULT_MAX_TURNS",
    "TERMINATE",
    "cap_notice",
    "ends_with_terminate",
    "guard_impersonation",
    "near_repeat",
    "strip_terminate",
]
