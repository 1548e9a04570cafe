"""Cost in money: the usage report and the monthly budget.

`/roundtable usage [days]` shows, per agent and for the selector (and catch-up
summaries and the rolling summaries of what context windows cut, when there
were any): calls, prompt / cached / completion tokens and
their cost at the configured prices (`bot.core.rules.pricing`), then a total line.
Calls of a model with no known price are counted and named, never priced. When
any call ran on a named provider, every line names the providers of its calls.

A group's optional `monthly_budget` (dollars per calendar month, UTC) is
checked after each run settles: when the month's priced cost reaches it, the
group pauses with one notice naming the budget, and `/roundtable resume`
refuses until the budget is raised (or the month turns).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from bot.core.models import DEFAULT_PROVIDER, Group, NewMessage, Spend, Usage
from bot.core.ports import HasGroups, HasSpending, HasThread
from bot.core.rules.card import Card, Field
from bot.core.rules.pricing import PRICES_AS_OF, Price, dollars, exact_dollars, price_of

log = logging.getLogger(__name__)

NO_PRICE = "no price known"
KIND_ORDER = {"agent": 0, "selector": 1, "catch-up": 2, "summary": 3}


@dataclass(frozen=True)
class Line:
    """One row of the usage report: every call of one spender (or the total)."""

    who: str
    calls: int
    usage: Usage
    cost: float  # dollars, of the priced calls
    unpriced: tuple[str, ...] = ()  # models with no price known ("" = not recorded)
    unpriced_calls: int = 0
    providers: tuple[str, ...] = ()  # named when a report has calls on a named provider

    def _on(self) -> str:
        return f" · on {', '.join(self.providers)}" if self.providers else ""

    def describe(self) -> str:
        u = self.usage
        tokens = (f"{self.calls:,} call{'' if self.calls == 1 else 's'} · {u.prompt_tokens:,} prompt / "
                  f"{u.cached_tokens:,} cached / {u.completion_tokens:,} completion tokens"
                  + (" (estimated)" if u.estimated else ""))
        if not self.unpriced:
            return f"{tokens} · {dollars(self.cost)}{self._on()}"
        models = ", ".join(m or "model not recorded" for m in self.unpriced)
        missing = f"{NO_PRICE} for {models} ({self.unpriced_calls:,} call{'' if self.unpriced_calls == 1 else 's'})"
        if self.unpriced_calls == self.calls:
            return f"{tokens} · {missing}{self._on()}"
        return f"{tokens} · {dollars(self.cost)} + {missing}{self._on()}"


def tally(spends: Iterable[Spend], prices: Mapping[str, Price]) -> list[Line]:
    """One line per spender (agents by name, then the selector, catch-up, the rolling summary), costs at `prices`."""
    grouped: dict[tuple[int, str], list[Spend]] = {}
    named = False
    for spend in spends:
        if spend.calls or spend.usage.prompt_tokens or spend.usage.completion_tokens:
            grouped.setdefault((KIND_ORDER[spend.kind], spend.who), []).append(spend)
            named = named or spend.provider not in ("", DEFAULT_PROVIDER)
    lines = []
    for (_, who), parts in sorted(grouped.items(), key=lambda item: (item[0][0], item[0][1].casefold())):
        lines.append(_line(who, parts, prices, named))
    return lines


def _line(who: str, parts: list[Spend], prices: Mapping[str, Price], named: bool = False) -> Line:
    usage, cost, unpriced, unpriced_calls = Usage(), 0.0, [], 0
    for part in parts:
        usage = usage + part.usage
        price = price_of(part.model, prices, part.provider)
        if price is None:
            if part.usage.prompt_tokens or part.usage.completion_tokens:
                qualified = part.provider not in ("", DEFAULT_PROVIDER) and part.model
                unpriced.append(f"{part.provider}/{part.model}" if qualified else part.model)
                unpriced_calls += part.calls
        else:
            cost += price.cost(part.usage)
    providers = tuple(dict.fromkeys(p.provider or "provider not recorded" for p in parts)) if named else ()
    return Line(who, sum(p.calls for p in parts), usage, cost, tuple(dict.fromkeys(unpriced)), unpriced_calls,
                providers)


def total(lines: Iterable[Line]) -> Line:
    lines = list(lines)
    usage = Usage()
    for line in lines:
        usage = usage + line.usage
    unpriced = tuple(dict.fromkeys(m for line in lines for m in line.unpriced))
    return Line("total", sum(x.calls for x in lines), usage, sum(x.cost for x in lines), unpriced,
                sum(x.unpriced_calls for x in lines))


def month_start(now: float) -> float:
    """The first moment of `now`'s calendar month, UTC."""
    moment = datetime.fromtimestamp(now, UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


async def month_cost(store: HasSpending, group: Group, prices: Mapping[str, Price], now: float | None = None) -> float:
    """The priced cost of the group's model calls this calendar month (UTC)."""
    since = month_start(time.time() if now is None else now)
    return total(tally(await store.spending.spending(group.id, since), prices)).cost


def budget_reached_notice(cost: float, budget: float) -> str:
    return (f"Paused: this month's model cost ({dollars(cost)}) reached this group's monthly budget of "
            f"{exact_dollars(budget)} (monthly_budget). Messages are still recorded; an operator can raise the budget "
            "with /roundtable config monthly_budget:N and then /roundtable resume.")


def budget_refusal(cost: float, budget: float) -> str:
    return (f"This month's model cost ({dollars(cost)}) has reached the monthly budget of {exact_dollars(budget)}: "
            "raise it with /roundtable config monthly_budget:N (0 removes it), then /roundtable resume.")


class BudgetStore(HasGroups, HasThread, HasSpending, Protocol):
    """What the budget check reads and writes: the group (paused), its spending, the notice."""


class Budgets:
    """The monthly budget, checked after a run settles (or the budget changes)."""

    def __init__(self, store: BudgetStore, prices: Mapping[str, Price], notice: Callable[[str], NewMessage]) -> None:
        self.store = store
        self.prices = prices
        self.notice = notice

    async def check(self, group_id: int) -> bool:
        """When this month's cost has reached the group's monthly_budget, pause it with one notice
        naming the budget (the caller shows it). True when it paused."""
        group = await self.store.groups.get_group(group_id)
        budget = group.settings.monthly_budget
        if not budget or group.paused:
            return False
        cost = await month_cost(self.store, group, self.prices)
        if cost < budget:
            return False
        await self.store.groups.update_group(group.id, paused=True)
        await self.store.thread.append_system_message(group.id, self.notice(budget_reached_notice(cost, budget)))
        log.warning("group=%s paused: this month's cost %s reached its monthly budget %s", group.id, dollars(cost),
                    exact_dollars(budget))
        return True


async def usage_card(store: HasSpending, group: Group, prices: Mapping[str, Price], days: int,
                     now: float | None = None) -> Card | str:
    now = time.time() if now is None else now
    lines = tally(await store.spending.spending(group.id, now - days * 86400), prices)
    period = "the last day" if days == 1 else f"the last {days} days"
    if not lines:
        return f"No model calls in {period}."
    fields = [Field(line.who, line.describe(), inline=False) for line in lines]
    fields.append(Field("total", total(lines).describe(), inline=False))
    budget, spent = group.settings.monthly_budget, 0.0
    if budget:
        spent = await month_cost(store, group, prices, now)
        fields.append(Field("this month", f"{dollars(spent)} of the {exact_dollars(budget)} monthly_budget"))
    return Card(f"Usage in {period}", fields=tuple(fields),
                footer=f"Prices per 1M tokens: ROUNDTABLE_PRICES, else OpenAI's list of {PRICES_AS_OF}",
                tone="warning" if budget and spent >= budget else "neutral")
