"""Reply cleaning and stop rules: impersonation guard, TERMINATE, the cap, repeats."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher

from bot.core.settings import DEFAULT_MAX_TURNS

TERMINATE = "TERMINATE"
# TERMINATE at the very end, allowing markdown emphasis, quotes and punctuation around it.
_WORDS = re.compile(r"\w+")
_TRAILING_TERMINATE = re.compile(r"[\s*_`\"'(\[]*\bTERMINATE\b[\s*_`\"'.!)\]]*\Z")


def ends_with_terminate(text: str) -> bool:
    return bool(_TRAILING_TERMINATE.search(text))


def strip_terminate(text: str) -> str:
    """The text as shown to people: the trailing TERMINATE removed (and any repeats of it)."""
    while (shown := _TRAILING_TERMINATE.sub("", text).rstrip()) != text:
        text = shown
    return shown


_EMPHASIS = ("**", "__")


def _labels(names: Iterable[str]) -> tuple[str, ...]:
    """Names to look for as speaker labels: distinct, non-empty, longest first."""
    return tuple(sorted({n for n in names if n}, key=len, reverse=True))


def _blanks_end(line: str, i: int) -> int:
    while line.startswith((" ", "\t"), i):
        i += 1
    return i


def _name_at(line: str, i: int, name: str) -> int:
    """The end of `name` (any case) at position `i` of `line`, or -1."""
    end = i + len(name)
    return end if line[i:end].casefold() == name.casefold() else -1


def _label_at(line: str, i: int, name: str) -> int:
    """The end of a label at `i`: "[name]", "[@name]", "name:", "@name:", "name **:" (any case), or 0."""
    if line.startswith("[", i):
        end = _name_at(line, i + 1 + line.startswith("@", i + 1), name)
        if end >= 0 and line.startswith("]", end):
            return end + 1
    end = _name_at(line, i + line.startswith("@", i), name)
    if end < 0:
        return 0
    end = _blanks_end(line, end)
    if line.startswith(_EMPHASIS, end):
        end = _blanks_end(line, end + 2)
    return end + 1 if line.startswith(":", end) else 0


def speaker_label_end(line: str, names: Sequence[str]) -> int:
    """Where a speaker label for one of `names` (as `_labels` orders them) ends at the start of
    `line` ("[name]", "name:", "**name:**", "@name:", any case, after blanks), or 0 when there is none.

    Plain string matching, no regular expression: the names change with every roster and every
    person who posts, and compiling a pattern per set cost ~0.3 ms each time (and thrashed `re`'s
    cache with many groups)."""
    start = _blanks_end(line, 0)
    for at in ((start + 2, start) if line.startswith(_EMPHASIS, start) else (start,)):
        for name in names:
            end = _label_at(line, at, name)
            if end:
                return end
    return 0


def guard_impersonation(text: str, own_name: str, other_names: Sequence[str]) -> str:
    """Strip a leading `own_name:` / `[own_name]`; cut at a later line opening as someone else.

    Another participant's label at the very start of the reply is an address ("budget: trim day 3"
    speaks to budget): that first line stays, as written (SPEC §6)."""
    own = _labels([own_name])
    out = text.strip()
    while own and (end := speaker_label_end(out, own)):
        out = out[end:].lstrip(" \t*_").lstrip()
    others = _labels(n for n in other_names if n.casefold() != own_name.casefold())
    if not others:
        return out
    kept: list[str] = []
    for line in out.splitlines():
        if kept and speaker_label_end(line, others):
            break
        kept.append(line)
    return "\n".join(kept).strip()


def terminates(raw: str, cleaned: str) -> bool:
    """Whether a reply ends the episode: its cleaned text ends with TERMINATE, or its raw text did (a
    reply the guard cut still terminates, SPEC §6)."""
    return ends_with_terminate(cleaned) or ends_with_terminate(raw)


def why_nothing_shown(raw: str) -> str:
    """Why a reply left nothing to post once cleaned, truthfully: "empty" only when it was."""
    if not strip_terminate(raw.strip()):
        return "its reply was empty"
    return "its reply held only its own name as a speaker label"


def _agent_messages(n: int) -> str:
    return f"{n} agent message{'' if n == 1 else 's'}"


def cap_notice(cap: int) -> str:
    return f"Stopped after {_agent_messages(cap)} (max_turns). Post a message to continue."


def cap_refusal_notice(name: str, cap: int) -> str:
    """Why an agent a turn was meant for did not answer (another agent reached the cap first)."""
    return f"{name} did not answer: the group reached max_turns ({_agent_messages(cap)} in a row). " \
           "Post a message to continue."


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
    "cap_refusal_notice",
    "ends_with_terminate",
    "guard_impersonation",
    "near_repeat",
    "strip_terminate",
    "terminates",
    "why_nothing_shown",
]
