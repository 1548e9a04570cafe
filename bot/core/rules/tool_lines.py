"""How a run's tool calls are shown (SPEC §6b "Visible"): one line per call while the reply is
written, a compact line on the final message, each call in full where a reply is explained.

- `call_line`: `🔧 fetch_url · en.wikipedia.org …` while it runs, then `… ✓ 0.8 s` or `… ✗ reason`;
- `compact_line`: `🔧 counter.add ✓ · fetch_url ✓` (the group's `show_tools` on);
- `shown_name`: the name as commands write it (`server.tool`) from the one the model used (`server__tool`);
- `summary`: a short summary of the arguments: a URL's host, else the first argument (`n=2`) cut
  to about 40 characters; masked (`bot.core.rules.secrets`).

Pure and table-tested; the compact line is rendered when a row is published, from the run's journal,
never stored in the row's text (later prompts do not read it as something the agent said).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from bot.core.rules.secrets import mask

ICON = "🔧"
SUMMARY_MAX = 40
REASON_MAX = 60


def shown_name(name: str) -> str:
    """`server__tool` as `server.tool`; a built-in's name as it is."""
    server, sep, tool = name.partition("__")
    return f"{server}.{tool}" if sep and server and tool else name


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def summary(arguments: str) -> str:
    """A URL's host among the arguments, else the first argument as `key=value`, cut; '' for none."""
    try:
        values = json.loads(arguments or "{}")
    except ValueError:
        return _short(mask(arguments), SUMMARY_MAX)
    if not isinstance(values, dict) or not values:
        return ""
    for value in values.values():
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            host = urlsplit(value).hostname
            if host:
                return _short(mask(host), SUMMARY_MAX)
    key, value = next(iter(values.items()))
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return _short(mask(f"{key}={text}"), SUMMARY_MAX)


def reason(result: str) -> str:
    """The short reason of an error result (`error: ...`)."""
    text = result[len("error:"):] if result.startswith("error:") else result
    return _short(mask(text.strip()), REASON_MAX) or "failed"


def call_line(name: str, arguments: str, *, done: bool = False, error: bool = False, seconds: float = 0.0,
              result: str = "") -> str:
    """One call while the reply is written: running (`…`), then ✓ with its seconds or ✗ with why."""
    about = summary(arguments)
    head = f"{ICON} {shown_name(name)}" + (f" · {about}" if about else "") + " …"
    if not done:
        return head
    return f"{head} ✗ {reason(result)}" if error else f"{head} ✓ {seconds:.1f} s"


COMPACT_MARKS = 10  # marks on a compact line; the rest are counted


def compact_line(calls: Iterable[tuple[str, bool]]) -> str:
    """`🔧 counter.add ✓ · fetch_url ✗` for (name, error) pairs; '' for none. Calls in a row of one
    tool with one outcome are one mark (`counter.add ✓ ×10`), and past `COMPACT_MARKS` marks the
    rest are counted (`+ 12 more`), so a run of many calls keeps a short line."""
    runs: list[tuple[str, bool, int]] = []  # (name, error, calls in a row)
    for name, error in calls:
        if runs and runs[-1][:2] == (name, error):
            runs[-1] = (name, error, runs[-1][2] + 1)
        else:
            runs.append((name, error, 1))
    marks = [f"{shown_name(name)} {'✗' if error else '✓'}" + (f" ×{count}" if count > 1 else "")
             for name, error, count in runs[:COMPACT_MARKS]]
    rest = sum(count for _, _, count in runs[COMPACT_MARKS:])
    if rest:
        marks.append(f"+ {rest} more")
    return f"{ICON} " + " · ".join(marks) if marks else ""


def is_error(status: str, result: str | None) -> bool:
    """Whether a journaled call failed: an error result, an unknown outcome, or no result yet."""
    return status != "done" or (result or "").startswith("error:")


ARGUMENTS_MAX = 200  # characters of a call's arguments where a reply is explained
RESULT_MAX = 300  # characters of its result there
CALLS_SHOWN = 15  # calls listed one by one where a reply is explained (a card has room for so many)


def clip(text: str, limit: int) -> str:
    """`text` masked, at most `limit` characters (cut with `…`)."""
    text = mask(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def call_head(tool: str, status: str, result: str | None, seconds: float | None = None) -> str:
    """`🔧 counter.add ✓` (with `0.8 s` when its duration is given), `🔧 fetch_url ✗`."""
    mark = "✗" if is_error(status, result) else "✓"
    took = f" {seconds:.1f} s" if seconds is not None else ""
    return f"{ICON} {shown_name(tool)} {mark}{took}"


def call_parts(arguments: str, status: str, result: str | None, *, arguments_max: int = ARGUMENTS_MAX,
               result_max: int = RESULT_MAX) -> tuple[str, str]:
    """A call's arguments and result (or why there is none), cut and masked."""
    outcome = clip(result, result_max) if result is not None else f"(none: {status})"
    return clip(arguments, arguments_max), outcome


def call_detail(tool: str, arguments: str, status: str, result: str | None) -> tuple[str, str]:
    """A call where a reply is explained: (`🔧 counter.add ✓`, its arguments and result, cut and masked)."""
    args, outcome = call_parts(arguments, status, result)
    return call_head(tool, status, result), f"arguments: {args}\nresult: {outcome}"
