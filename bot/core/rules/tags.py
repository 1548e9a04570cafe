"""Find what a message tags: `@name` agents, `@user`, `@all`, people's `<@id>`.

Pure text + roster -> `Tags`. Not a tag: an e-mail address, anything inside
code spans or code blocks, an `@name` inside a URL or `<scheme:...>` autolink,
a Markdown-escaped `\\@name` (or `\\<@id>`), `@everyone` / `@here`, unknown
names. Text and names are compared in NFC, case-insensitively.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

from bot.core.models import Agent, Tags

_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
# `@` not preceded by a word character (e-mails) nor by another name character.
_AT_NAME = re.compile(r"(?<![\w@.+\-])@([\w.\-]+)")
_USER_MENTION = re.compile(r"<@!?(\d{5,25})>")
# `<scheme:...>` autolinks, then bare `scheme://...` URLs (a scheme never starts right after `@`
# or inside a word, so `@planner://x` still tags planner).
_AUTOLINK = re.compile(r"<[A-Za-z][A-Za-z0-9+.\-]{1,31}:[^\s<>]*>")
_URL = re.compile(r"(?<![\w@.+\-])[A-Za-z][A-Za-z0-9+.\-]*://[^\s<>]*")
_TRAILING = ".-"

OPERATORS = "user"
EVERY_AGENT = "all"
NEVER_TAGS = frozenset({"everyone", "here"})


def strip_code(text: str) -> str:
    """Blank out code blocks and code spans, which never carry tags."""
    text = _CODE_BLOCK.sub(" ", text)
    return _CODE_SPAN.sub(" ", text)


def strip_links(text: str) -> str:
    """Blank out autolinks and URLs: an `@name` in an address is not a tag."""
    return _URL.sub(" ", _AUTOLINK.sub(" ", text))


def _name_key(name: str) -> str:
    """How names are compared: NFC, case-folded (and NFC again, as folding can decompose)."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


def _escaped(text: str, index: int) -> bool:
    """Whether `text[index]` follows an odd run of backslashes (a Markdown escape)."""
    run = 0
    while index - run > 0 and text[index - run - 1] == "\\":
        run += 1
    return run % 2 == 1


def _match_name(token: str, names: dict[str, Agent]) -> tuple[str, Agent | None]:
    """Longest prefix of `token` (trimming trailing '.'/'-') that names something."""
    candidate = token
    while candidate:
        key = _name_key(candidate)
        if key in names or key in (OPERATORS, EVERY_AGENT) or key in NEVER_TAGS:
            return key, names.get(key)
        if candidate[-1] not in _TRAILING:
            break
        candidate = candidate[:-1]
    return "", None


def _match_person(token: str, people: Mapping[str, str]) -> str | None:
    """The user id of the known person `token` names (trailing '.'/'-' trimmed), if any."""
    candidate = token
    while candidate:
        found = people.get(_name_key(candidate))
        if found is not None or candidate[-1] not in _TRAILING:
            return found
        candidate = candidate[:-1]
    return None


def parse_tags(text: str, roster: Sequence[Agent], *, people: Mapping[str, str] | None = None,
               author_agent_id: int | None = None) -> Tags:
    """Tags in `text` against the enabled agents of `roster` and the known `people`
    (name -> user id: `@alice` tags alice as `<@id>` does; an agent's name wins).

    The author itself is never tagged by its own text.
    """
    enabled = [a for a in roster if a.enabled]
    names = {_name_key(a.name): a for a in enabled}
    persons = {_name_key(n): uid for n, uid in (people or {}).items()}
    named_people: list[str] = []
    plain = strip_links(strip_code(unicodedata.normalize("NFC", text)))
    agents: list[Agent] = []
    operators = False
    all_agents = False
    for match in _AT_NAME.finditer(plain):
        if _escaped(plain, match.start()):
            continue
        key, agent = _match_name(match.group(1), names)
        if agent is not None:
            agents.append(agent)
        elif key == OPERATORS:
            operators = True
        elif key == EVERY_AGENT:
            all_agents = True
            agents.extend(enabled)
        elif not key and (person := _match_person(match.group(1), persons)) is not None:
            named_people.append(person)
    agents = [a for a in _unique(agents) if a.id != author_agent_id]
    mentions = [m.group(1) for m in _USER_MENTION.finditer(plain) if not _escaped(plain, m.start())]
    user_ids = tuple(dict.fromkeys(mentions + named_people))
    return Tags(
        agent_ids=tuple(a.id for a in agents),
        agent_names=tuple(a.name for a in agents),
        user_ids=user_ids,
        operators=operators,
        all_agents=all_agents,
    )


def named_agents(text: str, roster: Sequence[Agent]) -> tuple[int, ...]:
    """The agents of `roster` that `text` tags by name (`@all` names none of them), in order."""
    names = {_name_key(a.name): a for a in roster}
    plain = strip_links(strip_code(unicodedata.normalize("NFC", text)))
    found = [agent for match in _AT_NAME.finditer(plain) if not _escaped(plain, match.start())
             and (agent := _match_name(match.group(1), names)[1]) is not None]
    return tuple(a.id for a in _unique(found))


def with_agents(tags: Tags, agents: Iterable[Agent]) -> Tags:
    """`tags` plus more agents (e.g. the author of the message being replied to)."""
    merged = list(zip(tags.agent_ids, tags.agent_names))
    for agent in agents:
        if agent.id not in tags.agent_ids:
            merged.append((agent.id, agent.name))
    return Tags(
        agent_ids=tuple(i for i, _ in merged),
        agent_names=tuple(n for _, n in merged),
        user_ids=tags.user_ids,
        operators=tags.operators,
        all_agents=tags.all_agents,
    )


def _unique(agents: Iterable[Agent]) -> list[Agent]:
    seen: dict[int, Agent] = {}
    for agent in agents:
        seen.setdefault(agent.id, agent)
    return list(seen.values())


def unknown_tags(text: str, roster: Sequence[Agent], people: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The `@name`s in `text` that name no agent of `roster` (enabled or not), as typed,
    once each (the first spelling), in order; a trailing '.' or '-' is punctuation.

    Everything `parse_tags` skips is skipped here too: code, e-mail addresses, URLs,
    escaped `\\@name`, `@user`, `@all`, `@everyone`, `@here`, and real tags.
    """
    names = {_name_key(a.name): a for a in roster}
    persons = {_name_key(n): uid for n, uid in (people or {}).items()}
    plain = strip_links(strip_code(unicodedata.normalize("NFC", text)))
    unknown: dict[str, str] = {}
    for match in _AT_NAME.finditer(plain):
        if _escaped(plain, match.start()):
            continue
        key, _agent = _match_name(match.group(1), names)
        name = match.group(1).rstrip(_TRAILING)
        if not key and name and _match_person(match.group(1), persons) is None:
            unknown.setdefault(_name_key(name), name)
    return tuple(unknown.values())
