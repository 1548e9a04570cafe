"""Muted agents and agents' model settings as pure rules: durations, how a mute reads, who a
message tags while muted, the settings' ranges (issue 30 items 3 and 5)."""
from __future__ import annotations

import pytest

from bot.core.errors import InvalidInput
from bot.core.models import MUTED_FOREVER, Agent, Message, Tags
from bot.core.rules import validation as v
from bot.core.rules.mute import clock_time, parse_duration, span, state, tag_notice, until
from bot.core.rules.routing import muted_tagged, plan_batch, unmuted

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


@pytest.mark.parametrize("text, seconds", [
    ("30m", 1800), ("1h", 3600), ("2d", 172_800), ("1h30m", 5400), (" 1H 30M ", 5400), ("1m", 60),
    ("365d", 365 * 86400), ("90m", 5400),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text, error", [
    ("soon", "for must be a duration such as 30m, 1h, 2d or 1h30m (got 'soon')."),
    ("", "for must be a duration such as 30m, 1h, 2d or 1h30m (got '')."),
    ("1", "for must be a duration such as 30m, 1h, 2d or 1h30m (got '1')."),
    ("1w", "for must be a duration such as 30m, 1h, 2d or 1h30m (got '1w')."),
    ("-1h", "for must be a duration such as 30m, 1h, 2d or 1h30m (got '-1h')."),
    ("1.5h", "for must be a duration such as 30m, 1h, 2d or 1h30m (got '1.5h')."),
    ("0m", "for must be at least 1m (got '0m')."),
    ("366d", "for can be at most 365d (got '366d'); leave it out to mute until /agent unmute."),
])
def test_bad_durations_are_refused_with_a_clear_line(text, error):
    with pytest.raises(InvalidInput) as refused:
        parse_duration(text)
    assert str(refused.value) == error


@pytest.mark.parametrize("seconds, shown", [
    (0, "<1m"), (1, "1m"), (59, "1m"), (60, "1m"), (61, "2m"), (3600, "1h"), (4800, "1h 20m"),
    (86400 + 3 * 3600 + 59, "1d 3h"), (2 * 86400, "2d"),
])
def test_span(seconds, shown):
    assert span(seconds) == shown


@pytest.mark.parametrize("muted_until, shown", [
    (T0 + 3600, "until 09:00 UTC (1h left)"),
    (T0 + 90, "until 08:01 UTC (2m left)"),
    (T0 + 20 * 3600, "until 2027-01-16 04:00 UTC (20h left)"),  # another day: its date
    (MUTED_FOREVER, "until unmuted"),
])
def test_until(muted_until, shown):
    assert until(muted_until, T0) == shown


def test_clock_time_names_the_day_only_when_it_is_another():
    assert clock_time(T0 + 60, T0) == "08:01 UTC"
    assert clock_time(T0 + 16 * 3600, T0) == "2027-01-16 00:00 UTC"


def agent(id_: int, name: str, muted_until: float | None = None, enabled: bool = True) -> Agent:
    return Agent(id_, 1, name, "r", "p", enabled=enabled, position=id_, muted_until=muted_until)


PLANNER, BUDGET, LOCAL = agent(1, "planner"), agent(2, "budget", T0 + 60), agent(3, "local", MUTED_FOREVER)


@pytest.mark.parametrize("a, now, muted, shown", [
    (PLANNER, T0, False, None),
    (BUDGET, T0, True, "muted until 08:01 UTC (1m left)"),
    (BUDGET, T0 + 60, False, None),  # its time is up: over by itself
    (LOCAL, T0 + 10**9, True, "muted until unmuted"),
])
def test_a_mute_is_a_time_compared_with_the_clock(a, now, muted, shown):
    assert a.muted(now) is muted and a.available(now) is (not muted)
    assert state(a, now) == shown


def test_the_routing_roster_has_muted_agents_as_disabled_ones_in_their_place():
    roster = unmuted([PLANNER, BUDGET, LOCAL, agent(4, "off", enabled=False)], T0)
    assert [(a.name, a.enabled) for a in roster] == [("planner", True), ("budget", False), ("local", False),
                                                      ("off", False)]
    assert [a.enabled for a in unmuted([BUDGET], T0 + 60)] == [True]


def msg(text: str, ids: tuple[int, ...], *, all_agents: bool = False, author: str = "user",
        author_agent_id: int | None = None) -> Message:
    return Message(1, 1, author, "alice", text, Tags(agent_ids=ids, all_agents=all_agents),  # type: ignore[arg-type]
                   author_agent_id=author_agent_id)


@pytest.mark.parametrize("message, told", [
    (msg("@budget hi", (2,)), ["budget"]),
    (msg("@budget @local @planner hi", (2, 3, 1)), ["budget", "local"]),
    (msg("@all hi", (1, 2, 3), all_agents=True), []),  # @all leaves muted agents out, silently
    (msg("@all and @local", (1, 2, 3), all_agents=True), ["local"]),  # named as well: told
    (msg("@planner hi", (1,)), []),
    (msg("@budget (my own name)", (2,), author="agent", author_agent_id=2), []),
    (msg("(a schedule's task)", (3,), author="system"), ["local"]),
])
def test_who_a_message_tags_while_muted(message, told):
    assert [a.name for a in muted_tagged(message, [BUDGET, LOCAL])] == told


def test_a_message_tagging_only_muted_agents_selects_nobody_instead_of_the_mode():
    batch = [msg("@budget hi", (2,))]
    assert [p for _, p in plan_batch(batch, {1}, muted=[BUDGET, LOCAL])] == ["explicit"]
    assert [p for _, p in plan_batch(batch, {1})] == ["mode"]


def test_the_tag_notice_is_one_line_naming_each_agent():
    assert tag_notice([BUDGET, LOCAL], T0) == (
        "budget is muted until 08:01 UTC (1m left); local is muted until unmuted. "
        "A muted agent does not answer tags; /agent unmute lifts a mute.")


@pytest.mark.parametrize("name, value, expected", [
    ("temperature", "0", 0.0), ("temperature", "2", 2.0), ("temperature", 0.7, 0.7), ("temperature", "default", None),
    ("max_tokens", "1", 1), ("max_tokens", "128000", 128_000), ("max_tokens", " Default ", None),
    ("context_budget", "500", 500), ("context_budget", 200_000, 200_000), ("context_budget", "default", None),
])
def test_agent_settings_in_range(name, value, expected):
    assert v.agent_setting(name, value) == expected


@pytest.mark.parametrize("name, value, error", [
    ("temperature", "2.01", "temperature must be a number from 0 to 2, or default (got '2.01')."),
    ("temperature", "-0.1", "temperature must be a number from 0 to 2, or default (got '-0.1')."),
    ("temperature", "hot", "temperature must be a number from 0 to 2, or default (got 'hot')."),
    ("temperature", "nan", "temperature must be a number from 0 to 2, or default (got 'nan')."),
    ("max_tokens", "0", "max_tokens must be a whole number from 1 to 128,000, or default (got '0')."),
    ("max_tokens", "128001", "max_tokens must be a whole number from 1 to 128,000, or default (got '128001')."),
    ("max_tokens", "1.5", "max_tokens must be a whole number from 1 to 128,000, or default (got '1.5')."),
    ("context_budget", "499", "context_budget must be a whole number from 500 to 200,000, or default (got '499')."),
    ("colour", "1", "An agent has no model setting 'colour' (temperature, max_tokens, context_budget)."),
])
def test_agent_settings_out_of_range_are_refused(name, value, error):
    with pytest.raises(InvalidInput) as refused:
        v.agent_setting(name, value)
    assert str(refused.value) == error
