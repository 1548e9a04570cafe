"""Pure text rendering helpers for Discord output (stdlib only, no discord import).

* ``split_message`` cuts a reply into chunks of at most ``limit`` characters, preferring
  paragraph, then line, then word boundaries, and closing/reopening code fences at cuts.
  No chunk leaves a fence open, whatever the input: a fence line too long for a chunk is
  shortened first, and a piece that still cannot be cut cleanly has its fence-like lines
  defused with a zero-width space.
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
_NEWLINE_RE = re.compile(r"\n")
_BLANK_RE = re.compile(r"[ \t]")
_FENCE_START_RE = re.compile(r"[ \t]*(?:```|~~~)")  # a cheap test before the full line is cut out
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
    if opened is None:
        raise ValueError(f"not an opening fence line: {opener!r}")
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

    def inline_cuts(self, low: int, high: int) -> list[int]:
        """Offsets from ``high`` down to ``low`` (exclusive) that are not strictly inside a fence line."""
        cuts: list[int] = []
        k = high
        while k > low:
            i = bisect_right(self.starts, k) - 1
            if not self.is_fence[i]:
                stop = max(low, self.starts[i] - 1)
                cuts.extend(range(k, stop, -1))
                k = stop
            elif self.starts[i] < k < self.ends[i]:
                k = self.starts[i]
            else:
                cuts.append(k)
                k -= 1
        return cuts

    def opens_at(self, k: int) -> bool:
        """Whether offset ``k`` lies on a line that opens a fence."""
        i = bisect_right(self.starts, k) - 1
        return self.is_fence[i] and self.after[i] is not None

    def state_at(self, k: int) -> tuple[str | None, bool]:
        """Open fence at offset ``k`` and whether ``k`` lies strictly inside a fence line."""
        i = bisect_right(self.starts, k) - 1
        if k >= self.ends[i]:
            return self.after[i], False
        return self.before[i], self.is_fence[i] and k > self.starts[i]


def _language_line(opener: str) -> str:
    """An opening line with only its language, the info string's first word ("``` js title" ->
    "```js"); the marker alone when there is no info string."""
    marker, info = _fence(opener)  # type: ignore[misc]  # the opener is a fence line
    language = (info.split() or [""])[0]
    return marker + (" " if language.startswith(marker[0]) else "") + language  # "~~~ ~x" keeps its marker


def _reopen_line(opener: str | None, limit: int) -> str | None:
    """The opening line repeated in the next chunk: whole, or with only its language when a long
    info string would take over half a chunk, or the marker alone when even that would."""
    if opener is None:
        return None
    marker = _fence(opener)[0]  # type: ignore[index]  # the opener is a fence line
    for line in (opener, _language_line(opener)):
        if 2 * (len(line) + len(marker) + 2) <= limit:
            return line
    return marker


def _line_from(text: str, k: int) -> str:
    """The rest of the line that starts at offset ``k``."""
    end = text.find("\n", k)
    return text[k:] if end < 0 else text[k:end]


def _defuse(text: str) -> str:
    """``text`` with a zero-width space before every line that would read as a fence line."""
    return "\n".join(ZWSP + line if _fence(line) else line for line in text.split("\n"))


def _defuse_ends(body: str, first: bool, last: bool) -> str:
    """``body`` with its first and/or last line defused (they are pieces of longer lines)."""
    lines = body.split("\n")
    if first and _fence(lines[0]):
        lines[0] = ZWSP + lines[0]
    if last and _fence(lines[-1]):
        lines[-1] = ZWSP + lines[-1]
    return "\n".join(lines)


def _fit_fence_lines(text: str, limit: int) -> str:
    """Shorten the fence lines too long to open or close a block inside one chunk.

    An opening line keeps its marker and language (the info string's first word, when that
    fits) and moves the rest of its info string to the block's first line (Discord shows a
    long info string as code anyway); a closing line drops its trailing blanks. A marker that
    alone is too long is left for ``_defuse`` in the raw-cut fallback.
    """
    lines = text.split("\n")
    layout = _Layout(text)
    for i, line in enumerate(lines):
        fence = _fence(line) if layout.is_fence[i] else None
        if fence is None or len(line) + len(fence[0]) + 3 <= limit or 2 * len(fence[0]) + 3 > limit:
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        head = indent + fence[0]
        if layout.before[i] is None and fence[1].strip():  # an opener: the rest of its info string is code
            labelled, rest = _language_line(line), fence[1].strip()
            if len(indent + labelled) + len(fence[0]) + 3 <= limit:
                head, rest = indent + labelled, rest[len(rest.split()[0]):].strip()  # the info after the language
            lines[i] = head + "\n" + _defuse(rest) if rest else head  # defused if it would read as a fence line
        else:
            lines[i] = head
    return "\n".join(lines)


def _raw_cut(text: str, pos: int, carry: str | None, limit: int) -> tuple[int, str | None]:
    """The fallback when no clean cut works: (end, chunk or None for a blank piece).

    The piece's fence-like lines are defused, so the chunk is balanced by construction: it
    stays inside the carried fence, if any, and closes it. It ends at the last newline, else
    the last blank, else anywhere in the window.
    """
    marker = _fence(carry)[0] if carry else ""  # type: ignore[index]  # a carried line is a fence line
    for prefix in ([carry + "\n"] if carry and len(carry) + len(marker) + 3 <= limit else []) + [""]:
        suffix = "\n" + marker if prefix else ""  # the defused piece leaves only the carried fence open
        end = min(len(text), pos + max(limit - len(prefix) - len(suffix), 0))
        window = text[pos:end]
        if not window.strip():
            return end, None  # only blanks in reach: skip them
        cuts = [pos + m.start() for m in _NEWLINE_RE.finditer(window)][::-1]
        cuts += [pos + m.start() for m in _BLANK_RE.finditer(window)][::-1] + list(range(end, pos, -1))
        for k in cuts:
            if text[pos:k].strip():
                chunk = prefix + _defuse(text[pos:k]).rstrip() + suffix
                if len(chunk) <= limit:
                    return k, chunk
    return min(len(text), pos + limit), None  # unreachable: one non-blank character always fits


def split_message(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """Split ``text`` into non-blank chunks of at most ``limit`` characters.

    A chunk that ends inside a code fence gets ``"\\n```"`` appended and the next chunk starts
    with the same opening line (e.g. ``"```python\\n"``); both count towards ``limit``. No
    chunk leaves a fence open (by ``_fence``/``_closes``), whatever the text and the limit.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    text = _fit_fence_lines(text, limit)
    layout = _Layout(text)
    chunks: list[str] = []
    pos = _LEADING_BLANK_LINES_RE.match(text).end()  # type: ignore[union-attr]  # the pattern matches the empty string
    carry: str | None = None  # opening line of the fence the remaining text starts inside
    last = len(text.rstrip())  # text beyond it is blank
    while pos < last:
        chosen = _NextChunk(text, layout, limit, pos, carry).choose(last)
        if chosen is None:  # e.g. a fence marker longer than the limit: a defused raw cut
            k, raw = _raw_cut(text, pos, carry, limit)
            kind = "hard"
            if raw is not None:
                chunks.append(raw)
        else:
            k, kind, chunk = chosen
            chunks.append(chunk)
        carry = _reopen_line(layout.state_at(k)[0], limit)
        pos = k
        if kind == "word":
            pos = _SPACES_RE.match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches the empty string
        pos = _LEADING_BLANK_LINES_RE.match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches the empty string
    return chunks


@dataclass(frozen=True)
class _NextChunk:
    """The chunk of `split_message` that starts at `pos` (inside the fence `carry` opened, if any)."""

    text: str
    layout: _Layout
    limit: int
    pos: int
    carry: str | None

    def choose(self, last: int) -> tuple[int, str, str] | None:
        """The first cut that makes a good chunk, by kind from the best (the text's end) to the worst
        (a forced cut inside a line): (where, kind, the chunk); None when none does."""
        for kind, ks in self.candidates(last):
            for k in ks:
                chunk = self.attempt(k, kind)
                if chunk is not None:
                    return k, kind, chunk
        return None

    def candidates(self, last: int) -> list[tuple[str, list[int]]]:
        """Where a cut may go, by kind: each kind's places from the furthest back."""
        text, pos, limit, carry = self.text, self.pos, self.limit, self.carry
        budget = limit - (len(carry) + 1 if carry else 0)
        window_end = min(len(text), pos + max(budget, 0))
        window = text[pos:window_end + 1]
        inside = self.layout.inline_cuts(max(pos, window_end - budget // 2), window_end)
        return [
            ("end", [len(text)] if last - pos <= limit else []),
            ("paragraph", [pos + m.start() for m in _PARAGRAPH_RE.finditer(window)][::-1]),
            ("line", [pos + m.start() for m in _NEWLINE_RE.finditer(window)][::-1]),
            ("word", [pos + m.start() for m in _BLANK_RE.finditer(window)][::-1]),
            # A cut inside a line stays in the window's upper half: past it, a defused raw cut reads better.
            ("hard", inside),
            ("forced", inside),
        ]

    def attempt(self, k: int, kind: str) -> str | None:
        """The chunk a cut of `kind` at `k` makes, or None when it would break a fence or not fit."""
        text, pos = self.text, self.pos
        opener, in_fence_line = self.layout.state_at(k)
        if in_fence_line or (kind == "word" and opener is not None):
            return None
        next_line = _FENCE_START_RE.match(text, k) and _line_from(text, k).lstrip(" \t")
        if kind in ("word", "hard") and next_line and _fence(next_line):
            return None  # the next chunk would start with a line that looks like a fence
        body = text[pos:k]
        if not (opener and kind in ("hard", "forced")) or not body.rsplit("\n", 1)[-1].strip():
            body = body.rstrip()  # keeps trailing spaces of a code line cut in the middle
        if not body.strip():
            return None
        if opener is not None and kind != "end" and self.layout.opens_at(pos + len(body.rstrip()) - 1):
            return None  # would end right after the opening fence: an empty block
        if kind == "forced":  # a piece of a line cut at either end is text, even if it looks like a fence
            body = _defuse_ends(body, pos > 0 and text[pos - 1] != "\n", k < len(text) and text[k] != "\n")
        prefix = self.carry + "\n" if self.carry else ""
        suffix = "\n" + _fence(opener)[0] if opener else ""  # type: ignore[index]  # the opener is a fence line
        chunk = prefix + body + suffix
        if len(chunk) > self.limit or _Layout(chunk).after[-1] is not None:
            return None  # too long, or a cut made a partial line look like a fence
        return chunk


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
