"""Pure text rendering helpers for Discord output (stdlib only, no discord import).

* ``split_message`` cuts a reply into chunks of at most ``limit`` characters, preferring
  paragraph, then line, then word boundaries, and closing/reopening code fences at cuts.
* ``mention_policy`` decides whom a message may ping (never @everyone/@here/roles).
* ``neutralize_mass_mentions`` defuses @everyone/@here with a zero-width space.
* ``jump_link`` builds a message URL.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

DISCORD_LIMIT = 2000
ZWSP = "\u200b"

_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_PARAGRAPH_RE = re.compile(r"\n[ \t]*\n")
_LEADING_BLANK_LINES_RE = re.compile(r"(?:[ \t]*\n)*")
_SPACES_RE = re.compile(r"[ \t]*")
_USER_MENTION_RE = re.compile(r"<@!?(\d+)>")
_MASS_MENTION_RE = re.compile(r"@(everyone|here)")


def _fence(line: str) -> tuple[str, str] | None:
    """(marker, info) if ``line`` is a fence line, else None (```x``` on one line is not one)."""
    m = _FENCE_RE.match(line)
    if m is None or (m.group(1)[0] == "`" and "`" in m.group(2)):
        return None
    return m.group(1), m.group(2)


def _closes(line: str, opener: str) -> bool:
    fence, opened = _fence(line), _fence(opener)
    assert opened is not None
    return (fence is not None and fence[0][0] == opened[0][0]
            and len(fence[0]) >= len(opened[0]) and not fence[1].strip())


class _Layout:
    """Line offsets of ``text`` and the open fence (its opening line) before/after each line."""

    def __init__(self, text: str) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.is_fence: list[bool] = []
        self.before: list[str | None] = []
        self.after: list[str | None] = []
        opener: str | None = None
        pos = 0
        for line in text.split("\n"):
            self.starts.append(pos)
            self.ends.append(pos + len(line))
            self.before.append(opener)
            if opener is None and _fence(line):
                opener, fence = line.strip(), True
            elif opener is not None and _closes(line, opener):
                opener, fence = None, True
            else:
                fence = False
            self.is_fence.append(fence)
            self.after.append(opener)
            pos += len(line) + 1

    def state_at(self, k: int) -> tuple[str | None, bool]:
        """Open fence at offset ``k`` and whether ``k`` lies strictly inside a fence line."""
        i = bisect_right(self.starts, k) - 1
        if k >= self.ends[i]:
            return self.after[i], False
        return self.before[i], self.is_fence[i] and k > self.starts[i]


def _reopen_line(opener: str | None, limit: int) -> str | None:
    """The opening line repeated in the next chunk; drop a long info string to save room."""
    if opener is None:
        return None
    marker = _fence(opener)[0]  # type: ignore[index]
    return opener if 2 * (len(opener) + len(marker) + 2) <= limit else marker


def split_message(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """Split ``text`` into non-blank chunks of at most ``limit`` characters.

    A chunk that ends inside a code fence gets ``"\\n```"`` appended and the next chunk starts
    with the same opening line (e.g. ``"```python\\n"``); both count towards ``limit``.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    layout = _Layout(text)
    chunks: list[str] = []
    pos = _LEADING_BLANK_LINES_RE.match(text).end()  # type: ignore[union-attr]
    carry: str | None = None  # opening line of the fence the remaining text starts inside

    def attempt(k: int, kind: str) -> str | None:
        opener, in_fence_line = layout.state_at(k)
        if in_fence_line or (kind == "word" and opener is not None):
            return None
        if kind in ("word", "hard") and _fence(text[k:].lstrip(" \t").split("\n", 1)[0]):
            return None  # the next chunk would start with a line that looks like a fence
        body = text[pos:k]
        if not (opener and kind in ("hard", "forced")) or not body.rsplit("\n", 1)[-1].strip():
            body = body.rstrip()  # keeps trailing spaces of a code line cut in the middle
        if not body.strip():
            return None
        if opener is not None and kind != "end" and _fence(body.rstrip().rsplit("\n", 1)[-1]):
            return None  # would end right after the opening fence: an empty block
        prefix = carry + "\n" if carry else ""
        suffix = "\n" + _fence(opener)[0] if opener else ""  # type: ignore[index]
        chunk = prefix + body + suffix
        if len(chunk) > limit or _Layout(chunk).after[-1] is not None:
            return None  # too long, or a cut made a partial line look like a fence
        return chunk

    while pos < len(text) and text[pos:].strip():
        budget = limit - (len(carry) + 1 if carry else 0)
        window_end = min(len(text), pos + max(budget, 0))
        window = text[pos:window_end + 1]
        candidates: list[tuple[str, list[int]]] = [
            ("end", [len(text)]),
            ("paragraph", [pos + m.start() for m in _PARAGRAPH_RE.finditer(window)][::-1]),
            ("line", [pos + i for i, c in enumerate(window) if c == "\n"][::-1]),
            ("word", [pos + i for i, c in enumerate(window) if c in " \t"][::-1]),
            ("hard", list(range(window_end, pos, -1))),
            ("forced", list(range(window_end, pos, -1))),
        ]
        chosen: tuple[int, str, str] | None = None
        for kind, ks in candidates:
            for k in ks:
                chunk = attempt(k, kind)
                if chunk is not None:
                    chosen = (k, kind, chunk)
                    break
            if chosen:
                break
        if chosen is None:  # a fence line longer than the limit: raw cut
            k = min(len(text), pos + limit)
            chunk, kind, carry = text[pos:k].rstrip(), "hard", None
            if chunk.strip():
                chunks.append(chunk)
        else:
            k, kind, chunk = chosen
            chunks.append(chunk)
            carry = _reopen_line(layout.state_at(k)[0], limit)
        pos = k
        if kind == "word":
            pos = _SPACES_RE.match(text, pos).end()  # type: ignore[union-attr]
        pos = _LEADING_BLANK_LINES_RE.match(text, pos).end()  # type: ignore[union-attr]
    return chunks


@dataclass(frozen=True)
class MentionPolicy:
    """Who a message may ping; the Discord adapter maps it onto ``discord.AllowedMentions``."""

    everyone: bool = False
    roles: bool = False
    users: tuple[str, ...] = ()


def mention_policy(text: str, tagged_user_ids: Sequence[str]) -> MentionPolicy:
    """Allow pinging only users that were tagged *and* are mentioned as ``<@id>``/``<@!id>``."""
    mentioned = set(_USER_MENTION_RE.findall(text))
    users: list[str] = []
    for uid in map(str, tagged_user_ids):
        if uid in mentioned and uid not in users:
            users.append(uid)
    return MentionPolicy(everyone=False, roles=False, users=tuple(users))


def neutralize_mass_mentions(text: str) -> str:
    """Insert a zero-width space after the ``@`` of ``@everyone`` and ``@here``."""
    return _MASS_MENTION_RE.sub("@" + ZWSP + r"\1", text)


def jump_link(guild_id: int | str, channel_id: int | str, message_id: int | str) -> str:
    """URL that jumps to a message."""
    return f"https://discord.com/channels/{guild_id}/{channel_id}/{message_id}"
