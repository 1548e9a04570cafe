"""Prices per model: look-up (dated snapshots, unknown models), cost arithmetic, ROUNDTABLE_PRICES."""
from __future__ import annotations

import pytest

from bot.config import load_settings
from bot.core.errors import ConfigError
from bot.core.features.spending import month_start, tally, total
from bot.core.models import Spend, Usage
from bot.core.rules.pricing import DEFAULT_PRICES, Price, dollars, exact_dollars, merged_prices, parse_prices, price_of


@pytest.mark.parametrize("model, expected", [
    ("gpt-4o-mini", Price(0.15, 0.075, 0.60)),
    ("gpt-4o-mini-2024-07-18", Price(0.15, 0.075, 0.60)),  # a dated snapshot takes its model's price
    ("GPT-4o-Mini", Price(0.15, 0.075, 0.60)),
    ("gpt-4o", Price(2.50, 1.25, 10.00)),
    ("gpt-4o-2024-08-06", Price(2.50, 1.25, 10.00)),
    ("gpt-4o-2024-05-13", Price(5.00, 5.00, 15.00)),  # priced on its own by OpenAI
    ("gpt-4-0613", Price(30.00, 30.00, 60.00)),
    ("gpt-3.5-turbo-0125", Price(0.50, 0.50, 1.50)),
    ("gpt-4o-audio-preview", None),  # not a snapshot of gpt-4o: no guess
    ("llama3.1:8b", None),
    ("", None),
])
def test_price_of(model, expected):
    assert price_of(model, DEFAULT_PRICES) == expected


def test_cost_arithmetic_exactly():
    price = Price(2.0, 0.5, 8.0)
    # 600k uncached input, 400k cached input, 1M output
    assert price.cost(Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000, cached_tokens=400_000)) == (
        pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 8.0))
    assert price.cost(Usage(10, 0, 50)) == pytest.approx(10 * 0.5 / 1e6)  # cached never above the prompt


@pytest.mark.parametrize("text, expected", [
    ("llama3=0/0/0", {"llama3": Price(0, 0, 0)}),
    ("gpt-4o = 2.5/1.25/10 ; my-model=1/2", {"gpt-4o": Price(2.5, 1.25, 10), "my-model": Price(1, 1, 2)}),
    ("a=1/1/1;;\n b=2/1/3;", {"a": Price(1, 1, 1), "b": Price(2, 1, 3)}),
])
def test_parse_prices(text, expected):
    assert parse_prices(text) == expected


@pytest.mark.parametrize("text, reason", [
    ("gpt-4o", "is not model=input/cached/output"),
    ("gpt-4o=1", "needs 2 or 3 prices"),
    ("gpt-4o=1/2/3/4", "needs 2 or 3 prices"),
    ("gpt-4o=cheap/1/2", "has a price that is not a number"),
    ("gpt-4o=-1/1/2", "outside 0..10000"),
    ("gpt-4o=nan/1/2", "outside 0..10000"),
])
def test_parse_prices_says_which_entry_is_wrong(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_prices(text)


def test_roundtable_prices_merge_over_the_defaults_and_a_bad_value_is_one_line():
    settings = load_settings({"OPENAI_API_KEY": "k", "ROUNDTABLE_PRICES": "gpt-4o=1/0.5/4;local=0/0/0"},
                             need_discord=False)
    assert settings.prices["gpt-4o"] == Price(1, 0.5, 4) and settings.prices["local"] == Price(0, 0, 0)
    assert settings.prices["gpt-4o-mini"] == DEFAULT_PRICES["gpt-4o-mini"]
    assert merged_prices({}) == DEFAULT_PRICES
    with pytest.raises(ConfigError) as info:
        load_settings({"OPENAI_API_KEY": "k", "ROUNDTABLE_PRICES": "gpt-4o=1/x"}, need_discord=False)
    assert str(info.value) == (
        "ROUNDTABLE_PRICES is malformed ('gpt-4o=1/x' has a price that is not a number): use model=input/cached/"
        "output;... in dollars per million tokens, e.g. gpt-4o=2.50/1.25/10;llama3=0/0/0.")


def test_export_needs_no_api_key_but_run_and_console_do():
    assert load_settings({}, need_discord=False, need_llm=False).openai_api_key == ""
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is missing"):
        load_settings({}, need_discord=False)


@pytest.mark.parametrize("amount, shown", [(0, "$0.00"), (0.00421, "$0.0042"), (0.4249, "$0.42"),
                                           (1234.567, "$1,234.57"), (0.00001, "< $0.0001"), (4.9e-05, "< $0.0001"),
                                           (1e-9, "< $0.0001"), (0.0001, "$0.0001")])
def test_dollars(amount, shown):
    assert dollars(amount) == shown  # a cost that is not zero never shows as $0.0000


@pytest.mark.parametrize("amount, shown", [(5, "$5.00"), (0.5, "$0.50"), (0.016, "$0.016"), (0.0001, "$0.0001"),
                                           (1e-07, "$0.0000001"), (1234.5678, "$1,234.5678"), (1e6, "$1,000,000.00")])
def test_exact_dollars(amount, shown):
    assert exact_dollars(amount) == shown


def test_tally_groups_per_spender_and_never_prices_an_unknown_model():
    spends = [
        Spend("planner", "agent", "gpt-4o-mini", 2, Usage(2_000_000, 0, 0)),
        Spend("planner", "agent", "mystery", 1, Usage(10, 5, 0)),
        Spend("budget", "agent", "", 3, Usage(30, 3, 0)),  # written before models were recorded
        Spend("selector", "selector", "gpt-4o-mini", 4, Usage(0, 1_000_000, 0)),
        Spend("idle", "agent", "gpt-4o", 1, Usage()),  # a run that failed before any tokens
    ]
    lines = {line.who: line for line in tally(spends, DEFAULT_PRICES)}
    assert list(lines) == ["budget", "idle", "planner", "selector"]
    assert lines["planner"].cost == pytest.approx(0.30) and lines["planner"].unpriced == ("mystery",)
    assert lines["planner"].describe().endswith("· $0.30 + no price known for mystery (1 call)")
    assert lines["budget"].describe().endswith("· no price known for model not recorded (3 calls)")
    assert lines["idle"].describe() == "1 call · 0 prompt / 0 cached / 0 completion tokens · $0.00"
    everything = total(lines.values())
    assert (everything.calls, everything.cost, everything.unpriced_calls) == (11, pytest.approx(0.90), 4)


def test_month_start_is_the_first_of_the_month_utc():
    assert month_start(1_700_000_000) == 1698796800  # 2023-11-14 22:13 UTC -> 2023-11-01 00:00 UTC
