"""Message text as safe HTML: the Markdown people and agents write in Discord, rendered.

Every character of the text is escaped; only tags made here are added
(paragraphs, line breaks, headings, quotes, lists, code blocks and spans,
strong / em / underline / strike / spoiler, links). Links go to http(s) or
mailto addresses only and open nothing by themselves; an image `![alt](url)`
becomes a link, so a page never fetches anything when it is opened. A
message holding `<script>` shows that text.

`prose_and_code(text)` (the pieces of a text outside and inside code) is also
what the Markdown export uses to escape HTML only where it is prose.
"""
from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping

_FENCE = re.compile(r"```(?:([A-Za-z0-9_+\-.#]{1,30})[ \t]*\n|[ \t]*\n?)(.*?)(?:\n?```|\Z)", re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_ESCAPED = re.compile(r"\\([\\`*_~|\[\]()#>+\-.!<@])")
_MENTION = re.compile(r"<@!?(\d{5,25})>")
_LINK = re.compile(r"!?\[([^\[\]\n]{1,300})\]\(\s*<?([^\s()<>]{1,2000})>?\s*\)")
_AUTOLINK = re.compile(r"<((?:https?://|mailto:)[^\s<>]{1,2000})>", re.IGNORECASE)
_URL = re.compile(r"(?<![\w/@])(?:https?://|www\.)[^\s<>\x00]{1,2000}", re.IGNORECASE)
_SAFE_SCHEME = re.compile(r"^(?:https?://|mailto:)", re.IGNORECASE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_QUOTE = re.compile(r"^ {0,3}> ?(.*)$")
_BULLET = re.compile(r"^ {0,3}[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^ {0,3}(\d{1,9})[.)]\s+(.*)$")
_SLOT = re.compile(r"\x00(\d+)\x00")
_EMPHASIS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.DOTALL), "strong"),
    (re.compile(r"__(?=\S)(.+?)(?<=\S)__", re.DOTALL), "u"),  # Discord: underline
    (re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])", re.DOTALL), "em"),
    (re.compile(r"(?<![_\w])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![_\w])", re.DOTALL), "em"),
    (re.compile(r"~~(?=\S)(.+?)(?<=\S)~~", re.DOTALL), "del"),
    (re.compile(r"\|\|(?=\S)(.+?)(?<=\S)\|\|", re.DOTALL), "span class=\"spoiler\""),
)
_TRAILING = ".,;:!?'\""


def escape(text: str) -> str:
    return html.escape(text, quote=True)


def prose_and_code(text: str) -> list[tuple[str, str, str]]:
    """The text as ("prose", text, "") and ("code", body, language) pieces, in order."""
    pieces: list[tuple[str, str, str]] = []
    at = 0
    for match in _FENCE.finditer(text):
        if match.start() > at:
            pieces.append(("prose", text[at:match.start()], ""))
        pieces.append(("code", match.group(2), match.group(1) or ""))
        at = match.end()
    if at < len(text):
        pieces.append(("prose", text[at:], ""))
    return pieces


def to_html(text: str, people: Mapping[str, str] | None = None) -> str:
    """`text` as HTML; `people` (user id -> name) shows Discord's `<@id>` as `@name`."""
    text = text.replace("\x00", "").replace("\r\n", "\n")
    out = []
    for kind, body, language in prose_and_code(text):
        if kind == "code":
            lang = f' class="language-{escape(language)}"' if language else ""
            label = f'<span class="lang">{escape(language)}</span>' if language else ""
            out.append(f"<pre>{label}<code{lang}>{escape(body)}</code></pre>")
        else:
            out.append(_blocks(body, people or {}))
    return "".join(out)


def _blocks(text: str, people: Mapping[str, str]) -> str:
    """Paragraphs, headings, quotes and lists of a piece of prose."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            level = min(len(heading.group(1)) + 2, 6)  # inside a message: h3..h6
            out.append(f"<h{level}>{inline(heading.group(2), people)}</h{level}>")
            i += 1
            continue
        for pattern, render in ((_QUOTE, _quote), (_BULLET, _bullets), (_NUMBERED, _numbered)):
            if pattern.match(line):
                run = []
                while i < len(lines) and pattern.match(lines[i]):
                    run.append(lines[i])
                    i += 1
                out.append(render(run, people))
                break
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not _starts_block(lines[i]):
                para.append(lines[i])
                i += 1
            out.append(f"<p>{'<br>'.join(inline(p, people) for p in para)}</p>")
    return "".join(out)


def _starts_block(line: str) -> bool:
    return any(p.match(line) for p in (_HEADING, _QUOTE, _BULLET, _NUMBERED))


def _quote(lines: list[str], people: Mapping[str, str]) -> str:
    inner = "\n".join(m.group(1) for m in (_QUOTE.match(line) for line in lines) if m)
    return f"<blockquote>{_blocks(inner, people)}</blockquote>"


def _bullets(lines: list[str], people: Mapping[str, str]) -> str:
    items = "".join(f"<li>{inline(m.group(1), people)}</li>" for m in (_BULLET.match(x) for x in lines) if m)
    return f"<ul>{items}</ul>"


def _numbered(lines: list[str], people: Mapping[str, str]) -> str:
    matches = [m for m in (_NUMBERED.match(x) for x in lines) if m]
    start = int(matches[0].group(1)) if matches else 1
    items = "".join(f"<li>{inline(m.group(2), people)}</li>" for m in matches)
    return f'<ol start="{start}">{items}</ol>' if start != 1 else f"<ol>{items}</ol>"


def inline(text: str, people: Mapping[str, str] | None = None) -> str:
    """One line (or a few) of prose with code spans, links and emphasis; everything else escaped."""
    slots: list[str] = []

    def keep(fragment: str) -> str:
        slots.append(fragment)
        return f"\x00{len(slots) - 1}\x00"

    def swap(pattern: re.Pattern[str], render: Callable[[re.Match[str]], str], source: str) -> str:
        return pattern.sub(lambda m: keep(render(m)), source)

    known = people or {}
    text = swap(_CODE_SPAN, lambda m: f"<code>{escape(m.group(2).strip() or m.group(2))}</code>", text)
    text = swap(_ESCAPED, lambda m: escape(m.group(1)), text)
    text = swap(_MENTION, lambda m: (f'<span class="mention">@{escape(known[m.group(1)])}</span>'
                                     if m.group(1) in known else escape(m.group(0))), text)
    text = swap(_LINK, lambda m: _anchor(m.group(2), m.group(1)) or escape(m.group(0)), text)
    text = swap(_AUTOLINK, lambda m: _anchor(m.group(1), m.group(1)) or escape(m.group(0)), text)
    text = _bare_urls(text, keep)
    text = escape(text)
    for pattern, tag in _EMPHASIS:
        text = pattern.sub(_wrapper(tag), text)
    while _SLOT.search(text):
        text = _SLOT.sub(lambda m: slots[int(m.group(1))], text)
    return text


def _wrapper(tag: str) -> Callable[[re.Match[str]], str]:
    closing = tag.split()[0]
    return lambda m: f"<{tag}>{m.group(1)}</{closing}>"


def _bare_urls(text: str, keep: Callable[[str], str]) -> str:
    def render(m: re.Match[str]) -> str:
        url = m.group(0)
        tail = ""
        while url and (url[-1] in _TRAILING or (url[-1] == ")" and url.count("(") < url.count(")"))):
            url, tail = url[:-1], url[-1] + tail
        href = url if _SAFE_SCHEME.match(url) else "https://" + url
        return keep(_anchor(href, url) or escape(url)) + tail
    return _URL.sub(render, text)


def _anchor(href: str, label: str) -> str | None:
    """A link to an http(s) or mailto address, or None for anything else (javascript:, data:, ...)."""
    if not _SAFE_SCHEME.match(href):
        return None
    return f'<a href="{escape(href)}" rel="noopener noreferrer nofollow">{escape(label)}</a>'


def escape_html_in_prose(text: str, people: Mapping[str, str] | None = None) -> str:
    """Markdown kept as written, except that outside code `<` becomes `&lt;` (a pasted transcript
    shows `<b>` as typed, never as HTML) and Discord's `<@id>` becomes `@name` when it is known."""
    known = people or {}

    def plain(part: str) -> str:
        part = _MENTION.sub(lambda m: "@" + known[m.group(1)] if m.group(1) in known else m.group(0), part)
        return part.replace("<", "&lt;")

    def prose(part: str) -> str:
        pieces, at = [], 0
        for m in _CODE_SPAN.finditer(part):
            pieces += [plain(part[at:m.start()]), m.group(0)]
            at = m.end()
        return "".join(pieces) + plain(part[at:])

    out, at = [], 0
    for m in _FENCE.finditer(text):
        out += [prose(text[at:m.start()]), m.group(0)]
        at = m.end()
    return "".join(out) + prose(text[at:])
