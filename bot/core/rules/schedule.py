"""Schedules (seed 002): when an agent runs by itself, as pure rules.

A schedule is either `every` (a fixed interval: `30m`, `2h`, `1d`) or `at` (a
wall-clock time `HH:MM`, every day, in an IANA zone; UTC by default). The
scheduler (`bot.core.runtime.scheduler`) fires a schedule once its `next_run_at` has
passed; `next_after` then moves it to its first slot strictly after now, so
a schedule that missed three slots (the bot was down) runs once, not three
times. No I/O here: zones come from the standard library's `zoneinfo`.
"""
from __future__ import annotations

import math
import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache

from bot.core.errors import InvalidInput

MIN_EVERY = 5 * 60  # seconds: more often than this is a chat, not a routine
MAX_EVERY = 365 * 86400
PROMPT_MAX = 1500  # the task row (with its header) fits in one Discord message
UNITS = {"m": 60, "h": 3600, "d": 86400}
_EVERY = re.compile(r"^\s*(\d{1,6})\s*([mhd])\s*$", re.IGNORECASE)
_AT = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*$")
EVERY_FORMAT = "every must be a number and a unit: 30m, 2h or 1d"


@dataclass(frozen=True)
class When:
    """A schedule's rule: exactly one of `every_seconds` and `at_time` ('HH:MM', in `tz`)."""

    every_seconds: int | None = None
    at_time: str | None = None
    tz: str | None = None  # an IANA zone name for `at_time`; None: UTC

    def describe(self) -> str:
        if self.every_seconds is not None:
            return f"every {format_interval(self.every_seconds)}"
        return f"daily at {self.at_time} {self.tz or 'UTC'}"


@dataclass(frozen=True)
class Schedule:
    id: int
    group_id: int
    agent_id: int
    when: When
    prompt: str
    next_run_at: float
    last_run_at: float | None = None
    created_by: str | None = None
    created_at: float = 0.0


# parsing ----------------------------------------------------------------------
def parse_every(text: str) -> int:
    """'30m', '2h', '1d' -> seconds; InvalidInput naming what is wrong."""
    match = _EVERY.match(text)
    if match is None:
        raise InvalidInput(f"{EVERY_FORMAT} (got {text!r}).")
    seconds = int(match.group(1)) * UNITS[match.group(2).lower()]
    if seconds < MIN_EVERY:
        raise InvalidInput(f"every must be at least {format_interval(MIN_EVERY)} (got {text.strip()!r}).")
    if seconds > MAX_EVERY:
        raise InvalidInput(f"every can be at most {format_interval(MAX_EVERY)} (got {text.strip()!r}).")
    return seconds


def parse_at(text: str) -> str:
    """'9:05' or '09:05' (24-hour) -> '09:05'."""
    match = _AT.match(text)
    if match is None or int(match.group(1)) > 23 or int(match.group(2)) > 59:
        raise InvalidInput(f"at must be a 24-hour time HH:MM, such as 09:00 or 17:30 (got {text!r}).")
    return f"{int(match.group(1)):02d}:{match.group(2)}"


def parse_zone(text: str) -> str:
    """An IANA zone name ('Europe/Paris', 'utc') -> its canonical spelling."""
    name = text.strip()
    if _zone(name) is not None:
        return name
    folded = {z.casefold(): z for z in _zone_names()}.get(name.casefold())
    if folded is not None:
        return folded
    raise InvalidInput(f"Unknown time zone {name!r}: use an IANA name such as Europe/Paris, "
                       "America/New_York or UTC.")


def parse_when(every: str | None, at: str | None, tz: str | None) -> When:
    """The options of `/agent schedule add` -> a `When`; InvalidInput when they do not fit."""
    every, at, tz = (None if s is None or not s.strip() else s for s in (every, at, tz))
    if every is not None:
        if at is not None:
            raise InvalidInput("Give either every (e.g. every:2h) or at (e.g. at:09:00), not both.")
        if tz is not None:
            raise InvalidInput("tz applies to at:HH:MM only; an every: schedule runs at the same interval anywhere.")
        return When(every_seconds=parse_every(every))
    if at is None:
        raise InvalidInput("A schedule needs every (e.g. every:30m, 2h, 1d) or at (a daily time, e.g. at:09:00).")
    return When(at_time=parse_at(at), tz=parse_zone(tz) if tz is not None else None)


def schedule_prompt(text: str) -> str:
    prompt = text.strip()
    if not prompt:
        raise InvalidInput("A schedule needs a prompt: the task the agent gets each time.")
    if len(prompt) > PROMPT_MAX:
        raise InvalidInput(f"The prompt is {len(prompt)} characters long; the limit is {PROMPT_MAX}.")
    return prompt


# when it runs -----------------------------------------------------------------
def first_run(when: When, now: float) -> float:
    """When a new schedule first runs: one interval from now, or the next HH:MM."""
    if when.every_seconds is not None:
        return now + when.every_seconds
    return next_after(when, now)


def next_after(when: When, now: float, due: float | None = None) -> float:
    """The schedule's first slot strictly after `now`.

    `every`: slots are `due + k * every` (the slot that just fired keeps the
    cadence; missed slots are skipped, never made up). `at`: the next HH:MM in
    the zone; on a day the clocks skip that time it runs at the same offset
    as before the change (02:30 that does not exist runs at 03:30), on a day
    it happens twice it runs at the first.
    """
    if when.every_seconds is not None:
        step = when.every_seconds
        if due is None or due > now:
            return now + step if due is None else due
        return due + (math.floor((now - due) / step) + 1) * step
    if when.at_time is None:
        raise ValueError("a schedule needs every_seconds or at_time")
    zone = _zone(when.tz or "UTC")
    if zone is None:
        raise InvalidInput(f"Unknown time zone {when.tz!r}.")
    hour, minute = (int(p) for p in when.at_time.split(":"))
    today = datetime.fromtimestamp(now, zone).date()
    for offset in (-1, 0, 1, 2):
        slot = _local(today + timedelta(days=offset), time(hour, minute), zone)
        if slot > now:
            return slot
    raise AssertionError("a daily time always comes within two days")  # pragma: no cover


def _local(day: date, at: time, zone: zoneinfo.ZoneInfo) -> float:
    return datetime.combine(day, at, tzinfo=zone).timestamp()  # fold=0: the first of two, the offset before a gap


# showing ------------------------------------------------------------------------
def format_interval(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_time(ts: float, tz: str | None) -> str:
    """'2026-12-01 09:00 CET (08:00 UTC)'; UTC alone when the zone is UTC."""
    utc = datetime.fromtimestamp(ts, UTC)
    shown = f"{utc:%Y-%m-%d %H:%M} UTC"
    zone = _zone(tz) if tz else None
    if zone is None or tz in ("UTC", "Etc/UTC"):
        return shown
    local = datetime.fromtimestamp(ts, zone)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname() or tz} ({utc:%H:%M} UTC)"


@lru_cache(maxsize=256)
def _zone(name: str) -> zoneinfo.ZoneInfo | None:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return None


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())
