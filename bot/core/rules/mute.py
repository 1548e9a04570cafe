"""Muted agents (SPEC §8: `/agent mute name [for]`), as pure rules.

A mute is a time, `Agent.muted_until` (epoch seconds; `MUTED_FOREVER` until `/agent unmute`),
compared with the clock whenever routing reads the roster: a mute whose time has passed is
over by itself, also after a restart, with no timer. Times are shown in UTC, the one zone
every surface shares.
"""
from __future__ import annotations

import re
import time
from collections.abc import Sequence

from bot.core.errors import InvalidInput
from bot.core.models import MUTED_FOREVER, Agent

UNITS = {"m": 60, "h": 3600, "d": 86400}
MIN_MUTE = 60  # seconds
MAX_MUTE = 365 * 86400
_PART = re.compile(r"(\d{1,6})([mhd])")
DURATION_FORMAT = "for must be a duration such as 30m, 1h, 2d or 1h30m"


def parse_duration(text: str) -> int:
    """'30m', '1h', '2d', '1h30m' -> seconds; InvalidInput naming what is wrong."""
    compact = "".join(text.split()).lower()
    parts = _PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise InvalidInput(f"{DURATION_FORMAT} (got {text!r}).")
    seconds = sum(int(n) * UNITS[u] for n, u in parts)
    if seconds < MIN_MUTE:
        raise InvalidInput(f"for must be at least 1m (got {text.strip()!r}).")
    if seconds > MAX_MUTE:
        raise InvalidInput(f"for can be at most 365d (got {text.strip()!r}); leave it out to mute until /agent unmute.")
    return seconds


def span(seconds: float) -> str:
    """A length of time in at most two units: '45m', '1h 20m', '2d 3h' ('<1m' under a minute)."""
    minutes = max(0, int(-(-seconds // 60)))  # rounded up: '1m' left, never '0m' while still muted
    if minutes == 0:
        return "<1m"
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (mins, "m")]
    shown = [f"{n}{u}" for n, u in units if n][:2]
    return " ".join(shown)


def clock_time(at: float, now: float) -> str:
    """'14:30 UTC' on the same (UTC) day as `now`, else '2026-12-03 14:30 UTC'."""
    stamp = time.gmtime(at)
    if stamp[:3] == time.gmtime(now)[:3]:
        return time.strftime("%H:%M UTC", stamp)
    return time.strftime("%Y-%m-%d %H:%M UTC", stamp)


def until(muted_until: float, now: float) -> str:
    """How long a mute lasts, as people read it: 'until unmuted' or 'until 14:30 UTC (1h 20m left)'."""
    if muted_until >= MUTED_FOREVER:
        return "until unmuted"
    return f"until {clock_time(muted_until, now)} ({span(muted_until - now)} left)"


def state(agent: Agent, now: float) -> str | None:
    """'muted until …' for an agent muted at `now`; None when it is not."""
    if agent.muted_until is None or not agent.muted(now):
        return None
    return f"muted {until(agent.muted_until, now)}"


def tag_notice(agents: Sequence[Agent], now: float) -> str:
    """The one notice a message gets for tagging muted agents (one line, each agent once)."""
    named = [f"{a.name} is muted {until(a.muted_until or MUTED_FOREVER, now)}" for a in agents]
    return f"{'; '.join(named)}. A muted agent does not answer tags; /agent unmute lifts a mute."
