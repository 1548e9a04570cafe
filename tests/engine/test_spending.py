"""Usage and cost in money over a real SQLite file: the figures of /roundtable usage equal sums
computed here straight from the run and decision rows, and a monthly budget pauses the group."""
from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from bot.core.errors import UserFacingError
from bot.core.models import Completion, Usage
from bot.core.rules.card import Card
from tests.fakes.scripted_llm import ScriptedLLM

# OpenAI's per-million prices (input, cached input, output), written out here rather than read from the code.
PER_MILLION = {"gpt-4o-mini": (0.15, 0.075, 0.60), "gpt-4.1-nano": (0.10, 0.025, 0.40)}


@pytest.fixture
def harness(sqlite_harness):
    """On SQLite only: it reads the SQLite file for figures computed independently."""
    return sqlite_harness


def price_key(model: str) -> str | None:
    for name in PER_MILLION:
        if model == name or model.startswith(name + "-20"):
            return name
    return None


def cost(model: str, prompt: int, cached: int, completion: int) -> float | None:
    key = price_key(model)
    if key is None:
        return None
    p_in, p_cached, p_out = PER_MILLION[key]
    return ((prompt - cached) * p_in + cached * p_cached + completion * p_out) / 1e6


def money(x: float) -> str:
    return f"${x:.4f}" if x < 0.01 else f"${x:,.2f}"


def independent_figures(db_path) -> dict[str, dict[str, Any]]:
    """Per agent and for the selector: calls, token sums and the priced cost, from the raw rows."""
    conn = sqlite3.connect(db_path)
    figures: dict[str, dict[str, Any]] = {}

    def add(who: str, calls: int, model: str, p: int, k: int, c: int) -> None:
        f = figures.setdefault(who, {"calls": 0, "p": 0, "k": 0, "c": 0, "cost": 0.0, "unpriced": 0})
        f["calls"] += calls
        f["p"] += p
        f["k"] += k
        f["c"] += c
        priced = cost(model, p, k, c)
        if priced is None:
            f["unpriced"] += calls
        else:
            f["cost"] += priced

    for name, model, p, k, c in conn.execute(
            "SELECT a.name, r.model, r.prompt_tokens, r.cached_tokens, r.completion_tokens"
            " FROM runs r JOIN agents a ON a.id = r.agent_id"):
        add(name, 1, model, p, k, c)
    for attempts, model, p, k, c in conn.execute(
            "SELECT attempts, model, prompt_tokens, cached_tokens, completion_tokens FROM decisions"
            " WHERE attempts > 0"):
        add("selector", attempts, model, p, k, c)
    conn.close()
    return figures


def described(f: dict[str, Any], unpriced_model: str | None = None) -> str:
    tokens = (f"{f['calls']:,} call{'' if f['calls'] == 1 else 's'} · {f['p']:,} prompt / {f['k']:,} cached / "
              f"{f['c']:,} completion tokens")
    if not f["unpriced"]:
        return f"{tokens} · {money(f['cost'])}"
    missing = f"no price known for {unpriced_model} ({f['unpriced']} call{'' if f['unpriced'] == 1 else 's'})"
    return f"{tokens} · {missing}" if f["unpriced"] == f["calls"] else f"{tokens} · {money(f['cost'])} + {missing}"


async def test_usage_and_cost_equal_sums_computed_from_the_rows(harness):
    llm = ScriptedLLM(
        selector=[Completion("planner", Usage(900, 2, 512), model="gpt-4.1-nano-2025-04-14"),
                  Completion("budget", Usage(950, 2, 0), model="gpt-4.1-nano-2025-04-14"),
                  Completion("local", Usage(990, 1, 0), model="gpt-4.1-nano-2025-04-14"),
                  Completion("planner", Usage(1020, 2, 0), model="gpt-4.1-nano-2025-04-14"),
                  "TERMINATE"],
        agents={"planner": [Completion("Day 1 Asakusa.", Usage(12_000, 300, 10_240), model="gpt-4o-mini-2024-07-18"),
                            Completion("Cheaper hotel.", Usage(13_500, 280, 12_288), model="gpt-4o-mini")],
                "budget": [Completion("Over by $200.", Usage(8_000, 50, 0), model="gpt-4o-mini")],
                "local": [Completion("Try the fish market.", Usage(5_000, 40, 0), model="llama-local")]},
    )
    llm.usage = Usage(700, 1, 0)  # the TERMINATE selector call
    async with harness.running(llm, selector_model="gpt-4.1-nano"):
        await harness.say("Plan a 3-day Tokyo trip")
        await harness.idle()
        assert llm.participant_order == ["planner", "budget", "local", "planner"]
        card = await harness.verbs().record.usage(harness.group, 7)
    assert isinstance(card, Card) and card.title == "Usage in the last 7 days"
    shown = {f.name: f.value for f in card.fields}
    figures = independent_figures(harness.path)
    assert set(shown) == {"planner", "budget", "local", "selector", "total"}
    assert figures["planner"]["calls"] == 2 and figures["selector"]["calls"] == 5
    for who in ("planner", "budget", "selector"):
        assert shown[who] == described(figures[who]), who
    assert shown["local"] == described(figures["local"], "llama-local")
    assert shown["local"].endswith("no price known for llama-local (1 call)")
    total = {k: sum(f[k] for f in figures.values()) for k in ("calls", "p", "k", "c", "cost", "unpriced")}
    assert shown["total"] == described(total, "llama-local")
    assert total["cost"] > 0.004 and total["unpriced"] == 1


async def test_a_group_without_calls_says_so(harness):
    async with harness.running(ScriptedLLM()):
        assert await harness.verbs().record.usage(harness.group, 1) == "No model calls in the last day."


async def test_budget_reached_pauses_the_group_with_one_notice_and_resume_says_so(harness):
    # 1M prompt tokens at $0.15 plus 100k completion tokens at $0.60 = $0.21, over a $0.20 budget
    big = Completion("A long plan.", Usage(1_000_000, 100_000, 0), model="gpt-4o-mini")
    llm = ScriptedLLM(agents={"planner": [big, "Again, shorter."]})
    async with harness.running(llm, mode="tags", monthly_budget=0.20):
        verbs = harness.verbs()
        await harness.say("@planner go")
        await harness.idle()
        group = await harness.store.groups.get_group(harness.group.id)
        assert group.paused
        rows = await harness.store.thread.messages(group.id)
        notices = [m.text for m in rows if m.author_type == "system"]
        assert notices == [
            "Paused: this month's model cost ($0.21) reached this group's monthly budget of $0.20 (monthly_budget). "
            "Messages are still recorded; an operator can raise the budget with /roundtable config monthly_budget:N "
            "and then /roundtable resume."]
        await harness.say("@planner and now?")
        await harness.idle()
        assert llm.participant_order == ["planner"]  # held while paused
        with pytest.raises(UserFacingError, match=r"reached the monthly budget of \$0\.20: raise it"):
            await verbs.groups.resume(group)
        usage = await verbs.record.usage(group, 30)
        assert isinstance(usage, Card) and usage.tone == "warning"
        assert {f.name: f.value for f in usage.fields}["this month"] == "$0.21 of the $0.20 monthly_budget"
        updated = await verbs.groups.config(group, {"monthly_budget": 5})
        assert isinstance(updated, Card) and ("monthly_budget", "$5.00") in [(f.name, f.value) for f in updated.fields]
        assert (await verbs.groups.resume(await harness.store.groups.get_group(group.id))).startswith("Resumed")
        await harness.idle()
        assert llm.participant_order == ["planner", "planner"]
        notices = [m for m in await harness.store.thread.messages(group.id) if m.author_type == "system"]
        assert len(notices) == 1  # under the new budget: no second notice


async def test_setting_a_budget_already_reached_pauses_at_once(harness):
    big = Completion("A long plan.", Usage(1_000_000, 0, 0), model="gpt-4o-mini")  # $0.15
    llm = ScriptedLLM(agents={"planner": [big]})
    async with harness.running(llm, mode="tags"):
        await harness.say("@planner go")
        await harness.idle()
        verbs = harness.verbs()
        card = await verbs.groups.config(harness.group, {"monthly_budget": 0.1})
        assert isinstance(card, Card) and card.tone == "warning"
        assert card.description.startswith("This month's model cost ($0.15) has already reached monthly_budget")
        assert (await harness.store.groups.get_group(harness.group.id)).paused
        off = await verbs.groups.config(harness.group, {"monthly_budget": 0})
        assert isinstance(off, Card) and ("monthly_budget", "off") in [(f.name, f.value) for f in off.fields]
        assert (await verbs.groups.resume(await harness.store.groups.get_group(harness.group.id))).startswith("Resumed")


@pytest.mark.parametrize("given, shown", [(0.0001, "$0.0001"), (0.016, "$0.016"), (0.005, "$0.005"), (7, "$7.00"),
                                          (12.345, "$12.345")])
async def test_a_budget_is_kept_and_shown_as_given(harness, given, shown):
    # It was rounded to cents: 0.0001 became 0 and turned the budget off ("monthly_budget off"), 0.016 became 0.02.
    async with harness.running(ScriptedLLM()):
        verbs = harness.verbs()
        card = await verbs.groups.config(harness.group, {"monthly_budget": given})
        assert isinstance(card, Card) and ("monthly_budget", shown) in [(f.name, f.value) for f in card.fields]
        assert (await harness.store.groups.get_group(harness.group.id)).settings.monthly_budget == given


async def test_a_sub_cent_budget_is_enforced_at_its_value(harness):
    # 10,000 prompt tokens at $0.15 per million: $0.0015, past a $0.001 budget (and under a rounded $0.00 = off).
    small = Completion("A short plan.", Usage(10_000, 0, 0), model="gpt-4o-mini")
    llm = ScriptedLLM(agents={"planner": [small]})
    async with harness.running(llm, mode="tags", monthly_budget=0.001):
        await harness.say("@planner go")
        await harness.idle()
        group = await harness.store.groups.get_group(harness.group.id)
        assert group.paused
        notices = [m.text for m in await harness.store.thread.messages(group.id) if m.author_type == "system"]
        assert notices == ["Paused: this month's model cost ($0.0015) reached this group's monthly budget of "
                           "$0.001 (monthly_budget). Messages are still recorded; an operator can raise the budget "
                           "with /roundtable config monthly_budget:N and then /roundtable resume."]


async def test_the_pause_warning_formats_money_as_usage_does(harness, caplog):
    # 1,148 prompt tokens at $0.15 per million: 0.00017219999999999996 as a float, printed so in the log.
    small = Completion("A short plan.", Usage(1_148, 0, 0), model="gpt-4o-mini")
    llm = ScriptedLLM(agents={"planner": [small]})
    caplog.set_level("WARNING", logger="bot.core.features.spending")
    async with harness.running(llm, mode="tags", monthly_budget=0.0001):
        await harness.say("@planner go")
        await harness.idle()
        assert (await harness.store.groups.get_group(harness.group.id)).paused
    paused = [r.getMessage() for r in caplog.records if "paused" in r.getMessage()]
    assert paused == [f"group={harness.group.id} paused: this month's cost $0.0002 reached its monthly budget $0.0001"]
