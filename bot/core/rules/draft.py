"""A reply while it is written (SPEC §8 "Streaming"): what of it may be shown before it is committed.

While a model streams a reply, people may see only what the finished reply will show.
`visible_text(raw, own_name, other_names)` is, for the text received so far, a prefix of
the text the reply shows once committed (`stop.guard_impersonation`, then
`stop.strip_terminate`), whatever the model writes next. It holds back:

- everything while the reply may still open with the agent's own label (`planner:`),
  which the guard strips;
- a later line being written while it may still open as another participant (`[budget]`,
  `budget:`, `**budget:**`): the guard cuts the reply at such a line (a label at the very start
  of the reply is an address: the first line is shown as written). Once the line can
  no longer become a label it is shown as it grows; a complete line that is one ends the
  visible text for good;
- a tail that may still become the closing TERMINATE: the trailing run of blanks,
  quotes, brackets, emphasis and the letters of the word;
- everything from the first mention of a person (`<@id>`): a mention notifies only in a
  new post, never in an edit, so the committed reply shows it in a post of its own;
- a secret the process knows (`bot.core.rules.secrets`): masked as the committed reply is, and a
  tail that may still grow into one held back, so no piece of it shows while it is written.

The function is pure and cheap enough to run at every edit (the surfaces ask for it
when they are about to show something, not at every token). `ReplyStream` gathers a
model's pieces and answers that question.
"""
from __future__ import annotations

from collections.abc import Sequence

from bot.core.rules.secrets import mask, unfinished
from bot.core.rules.stop import _EMPHASIS, _blanks_end, _labels, _name_at, speaker_label_end, strip_terminate

# Characters a closing TERMINATE may carry around it (stop._TRAILING_TERMINATE) besides blanks,
# and the letters of the word itself: a trailing run of these may still become one.
_AROUND_TERMINATE = frozenset("*_`\"'([.!)]")
_TERMINATE_LETTERS = frozenset("TERMINATE")


def visible_text(raw: str, own_name: str, other_names: Sequence[str]) -> str:
    """What may be shown of a reply whose text so far is `raw` (see the module docstring)."""
    own = _labels([own_name])
    others = _labels(n for n in other_names if n.casefold() != own_name.casefold())
    text = raw.lstrip()
    while True:  # the agent's own labels at the start: the guard strips them, one after another
        if not text:
            return ""
        end = speaker_label_end(text, own) if own else 0
        if not end:
            if own and may_open_as(text, own):
                return ""
            break
        text = text[end:].lstrip(" \t*_").lstrip()
    if not others:
        body, final = text, False
    else:
        body, final = _guarded(text, others)
    if final:  # a line opens as someone else: the committed reply ends before it, exactly so
        shown = strip_terminate(body.strip())
    else:
        shown = body[:_terminate_tail(body)]
    shown = mask(shown)
    shown = shown[:unfinished(shown)]
    return shown[:_first_mention(shown)].rstrip()


def _guarded(text: str, others: Sequence[str]) -> tuple[str, bool]:
    """The lines of `text` the guard keeps so far, and whether a complete line cut it for good.
    A last line still being written is left out while it may open as one of `others`."""
    kept: list[str] = []
    for line in text.splitlines(keepends=True):
        content = line.splitlines()[0]  # without its line break (a piece of splitlines' is never empty)
        if not kept:  # the reply's first line: another's label there is an address, kept as written
            kept.append(content)
            continue
        complete = content != line
        if speaker_label_end(content, others):
            return "\n".join(kept), True
        if not complete and may_open_as(content, others):
            break
        kept.append(content)
    return "\n".join(kept), False


def _terminate_tail(text: str) -> int:
    """Where the trailing run that may still become a closing TERMINATE starts."""
    i = len(text)
    while i > 0 and (text[i - 1].isspace() or text[i - 1] in _AROUND_TERMINATE or text[i - 1] in _TERMINATE_LETTERS):
        i -= 1
    return i


def _first_mention(text: str) -> int:
    """Where the first mention of a person (`<@id>`, `<@!id>`) starts, or may start at the very end."""
    at = text.find("<@")
    while at >= 0:
        after = text[at + 2:at + 3]
        if not after or after == "!" or after.isdigit():
            return at
        at = text.find("<@", at + 2)
    return len(text) - 1 if text.endswith("<") else len(text)


def may_open_as(line: str, names: Sequence[str]) -> bool:
    """Whether `line` (perhaps not complete yet) opens, or may still come to open, with a speaker
    label of one of `names` as `stop.speaker_label_end` reads them (`names` ordered by
    `stop._labels`). Never False for a line some continuation of which is labelled."""
    if speaker_label_end(line, names):
        return True
    start = _blanks_end(line, 0)
    rest = line[start:]
    if rest in ("", "*", "_"):
        return True  # only blanks so far, or half an emphasis
    starts = (start + 2, start) if line.startswith(_EMPHASIS, start) else (start,)
    return any(_may_label_at(line, at, name) for at in starts for name in names)


def _may_label_at(line: str, i: int, name: str) -> bool:
    """`stop._label_at` for a line whose end may not be written yet: could a label start at `i`?"""
    n = len(line)
    if i >= n:
        return True
    if line[i] == "[":
        j = i + 1 + line.startswith("@", i + 1)
        end = _may_name(line, j, name) if j < n else n
        if end == n or (end >= 0 and line.startswith("]", end)):
            return True
    j = i + line.startswith("@", i)
    end = _may_name(line, j, name) if j < n else n
    if end < 0:
        return False
    k = _blanks_end(line, end)
    if k < n and line.startswith(_EMPHASIS, k):
        k = _blanks_end(line, k + 2)
    elif line[k:] in ("*", "_"):
        return True
    return k >= n or line[k] == ":"


def _may_name(line: str, j: int, name: str) -> int:
    """The end of `name` at `j` (any case); len(line) when the line ends inside it; -1 when it is not there."""
    if len(line) - j >= len(name):
        return _name_at(line, j, name)
    return len(line) if name.casefold().startswith(line[j:].casefold()) else -1


class ReplyStream:
    """The pieces of a reply as a model writes them; `visible()` is what may be shown of it now."""

    def __init__(self, own_name: str, other_names: Sequence[str]) -> None:
        self.own_name = own_name
        self.other_names = tuple(other_names)
        self._pieces: list[str] = []
        self._text = ""
        self._visible = ""
        self._dirty = False

    def add(self, piece: str) -> None:
        self._pieces.append(piece)
        self._dirty = True

    @property
    def text(self) -> str:
        """The raw text so far."""
        if self._pieces:
            self._text += "".join(self._pieces)
            self._pieces.clear()
        return self._text

    def visible(self) -> str:
        """`visible_text` of the text so far (computed again only when more was written)."""
        if self._dirty:
            self._visible = visible_text(self.text, self.own_name, self.other_names)
            self._dirty = False
        return self._visible
