"""Schedule rules without I/O: parsing the options, the next slot, DST."""
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from bot.core.errors import InvalidInput
from bot.core.rules.schedule import (
    When,
    first_run,
    format_interval,
    format_time,
    next_after,
    parse_at,
    parse_every,
    parse_when,
    parse_zone,
    schedule_prompt,
)


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def local(text: str, zone: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


@pytest.mark.parametrize("text, seconds", [
    ("30m", 1800), ("2h", 7200), ("1d", 86400), ("5m", 300), (" 90M ", 5400), ("365d", 365 * 86400),
])
def test_parse_every(text, seconds):
    assert parse_every(text) == seconds


@pytest.mark.parametrize("text, wording", [
    ("0m", "at least 5m"), ("4m", "at least 5m"), ("90s", "30m, 2h or 1d"), ("2 hours", "30m, 2h or 1d"),
    ("h", "30m, 2h or 1d"), ("-1h", "30m, 2h or 1d"), ("1.5h", "30m, 2h or 1d"), ("", "30m, 2h or 1d"),
    ("366d", "at most 365d"),
])
def test_parse_every_refuses(text, wording):
    with pytest.raises(InvalidInput, match=wording):
        parse_every(text)


@pytest.mark.parametrize("text, normal", [
    ("09:00", "09:00"), ("9:05", "09:05"), ("23:59", "23:59"), ("00:00", "00:00"),
])
def test_parse_at(text, normal):
    assert parse_at(text) == normal


@pytest.mark.parametrize("text", ["24:00", "12:60", "9", "9am", "09:5", "", "12:00:00"])
def test_parse_at_refuses(text):
    with pytest.raises(InvalidInput, match="HH:MM"):
        parse_at(text)


@pytest.mark.parametrize("text, name", [("Europe/Paris", "Europe/Paris"), ("utc", "UTC"),
                                        ("america/new_york", "America/New_York")])
def test_parse_zone(text, name):
    assert parse_zone(text) == name


@pytest.mark.parametrize("text", ["Mars/Olympus", "../etc/passwd", "CEST+2"])
def test_unknown_zone_is_named(text):
    with pytest.raises(InvalidInput, match=re.escape(f"Unknown time zone {text!r}")):
        parse_zone(text)


@pytest.mark.parametrize("every, at, tz, when", [
    ("2h", None, None, When(every_seconds=7200)),
    (None, "09:00", None, When(at_time="09:00")),
    (None, "9:00", "Europe/Paris", When(at_time="09:00", tz="Europe/Paris")),
    ("1d", "", " ", When(every_seconds=86400)),  # empty options count as not given
])
def test_parse_when(every, at, tz, when):
    assert parse_when(every, at, tz) == when


@pytest.mark.parametrize("every, at, tz, wording", [
    ("2h", "09:00", None, "not both"),
    (None, None, None, "needs every"),
    (None, None, "UTC", "needs every"),
    ("2h", None, "Europe/Paris", "tz applies to at"),
    (None, "09:00", "Nowhere/Land", "Unknown time zone 'Nowhere/Land'"),
])
def test_parse_when_refuses(every, at, tz, wording):
    with pytest.raises(InvalidInput, match=wording):
        parse_when(every, at, tz)


def test_prompt_is_needed_and_bounded():
    assert schedule_prompt("  sum up the day ") == "sum up the day"
    with pytest.raises(InvalidInput, match="needs a prompt"):
        schedule_prompt("   ")
    with pytest.raises(InvalidInput, match="limit is 1500"):
        schedule_prompt("x" * 1501)


EVERY_2H = When(every_seconds=7200)
T0 = utc("2026-03-01T10:00:00")


@pytest.mark.parametrize("now, due, expected", [
    (T0, None, T0 + 7200),  # a new schedule: one interval from now
    (T0 + 7200, T0 + 7200, T0 + 14400),  # fired exactly on time: the next slot, strictly after
    (T0 + 7201, T0 + 7200, T0 + 14400),  # fired a second late (a busy agent): the cadence is kept
    (T0 + 3 * 7200 + 5, T0 + 7200, T0 + 4 * 7200),  # three slots missed: one run, then the next future slot
    (T0 + 100, T0 + 7200, T0 + 7200),  # not due yet: unchanged
])
def test_next_after_every(now, due, expected):
    assert next_after(EVERY_2H, now, due) == expected


@pytest.mark.parametrize("when, now, expected", [
    (When(at_time="09:00"), utc("2026-03-01T08:59:59"), utc("2026-03-01T09:00:00")),
    (When(at_time="09:00"), utc("2026-03-01T09:00:00"), utc("2026-03-02T09:00:00")),  # strictly after
    (When(at_time="09:00"), utc("2026-03-01T23:00:00"), utc("2026-03-02T09:00:00")),
    (When(at_time="00:00"), utc("2026-12-31T23:59:00"), utc("2027-01-01T00:00:00")),
    # Paris, winter (UTC+1) and summer (UTC+2)
    (When(at_time="09:00", tz="Europe/Paris"), utc("2026-01-10T07:00:00"), utc("2026-01-10T08:00:00")),
    (When(at_time="09:00", tz="Europe/Paris"), utc("2026-07-10T07:30:00"), utc("2026-07-11T07:00:00")),
    # a zone ahead of UTC whose local date is already tomorrow
    (When(at_time="08:00", tz="Asia/Tokyo"), utc("2026-03-01T22:00:00"), utc("2026-03-01T23:00:00")),
    # across the spring change in New York (2026-03-08): 09:00 EST then 09:00 EDT
    (When(at_time="09:00", tz="America/New_York"), local("2026-03-07T09:00:00", "America/New_York"),
     utc("2026-03-08T13:00:00")),
    # 02:30 does not exist on 2026-03-08 in New York: it runs at 03:30 EDT (07:30 UTC)
    (When(at_time="02:30", tz="America/New_York"), utc("2026-03-08T05:00:00"), utc("2026-03-08T07:30:00")),
    # 01:30 happens twice on 2026-11-01 in New York: the first (EDT, 05:30 UTC) ...
    (When(at_time="01:30", tz="America/New_York"), utc("2026-11-01T04:00:00"), utc("2026-11-01T05:30:00")),
    # ... and not again an hour later: the next run is the day after
    (When(at_time="01:30", tz="America/New_York"), utc("2026-11-01T05:30:00"), utc("2026-11-02T06:30:00")),
])
def test_next_after_at(when, now, expected):
    assert next_after(when, now) == expected


def test_missed_daily_slots_run_once():
    """Down for three days: the next slot after now is one, not three."""
    when = When(at_time="09:00")
    assert next_after(when, utc("2026-03-04T12:00:00"), due=utc("2026-03-01T09:00:00")) == utc("2026-03-05T09:00:00")


def test_first_run():
    assert first_run(EVERY_2H, T0) == T0 + 7200
    assert first_run(When(at_time="09:00"), utc("2026-03-01T10:00:00")) == utc("2026-03-02T09:00:00")


@pytest.mark.parametrize("seconds, text", [(300, "5m"), (7200, "2h"), (86400, "1d"), (5400, "90m")])
def test_format_interval(seconds, text):
    assert format_interval(seconds) == text


def test_format_time_shows_the_zone_and_utc():
    ts = utc("2026-01-10T08:00:00")
    assert format_time(ts, None) == "2026-01-10 08:00 UTC"
    assert format_time(ts, "Europe/Paris") == "2026-01-10 09:00 CET (08:00 UTC)"
    assert When(at_time="09:00", tz="Europe/Paris").describe() == "daily at 09:00 Europe/Paris"
    assert EVERY_2H.describe() == "every 2h"
