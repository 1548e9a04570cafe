"""What model calls cost: prices per model, and the cost of a `Usage`.

A `Price` is dollars per million tokens: input, cached input, output. The
built-in table holds OpenAI's published standard-tier prices of common chat
models as of PRICES_AS_OF; `ROUNDTABLE_PRICES` (parsed by `parse_prices`)
adds models or overrides these. A model with no price gives None, never a
guess: surfaces say "no price known".

A dated snapshot of a model (`gpt-4o-mini-2024-07-18`, `gpt-4-0613`) takes the
price of its model unless the table names the snapshot itself (OpenAI priced
`gpt-4o-2024-05-13` above `gpt-4o`). OpenAI counts cached tokens inside
`prompt_tokens`, so the cached part is priced at the cached rate and the rest
at the input rate.

A model on a named provider (`bot.llm.providers`) is priced by `provider/model` in
ROUNDTABLE_PRICES when that is given (`local/llama3.1:8b=0/0/0`), else by its model name
like any other (a second OpenAI account's `gpt-4o` costs what gpt-4o costs).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from bot.core.models import DEFAULT_PROVIDER, Usage

PRICES_AS_OF = "August 2025"
MILLION = 1_000_000
_SNAPSHOT = re.compile(r"^(?P<model>.+?)-(?:\d{4}-\d{2}-\d{2}|\d{4})$")
_ENTRY = re.compile(r"^(?P<model>[^=;\s][^=;]*?)\s*=\s*(?P<prices>[^=;]+)$")


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens."""

    input: float
    cached_input: float
    output: float

    def cost(self, usage: Usage) -> float:
        """Dollars for `usage` (cached tokens at the cached rate, the rest of the prompt at the input rate)."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        return ((usage.prompt_tokens - cached) * self.input + cached * self.cached_input
                + usage.completion_tokens * self.output) / MILLION

    def describe(self) -> str:
        return f"${self.input:g} / ${self.cached_input:g} cached / ${self.output:g} per 1M tokens"


def _p(input: float, cached: float | None, output: float) -> Price:
    return Price(input, input if cached is None else cached, output)


# OpenAI's published per-million prices (standard tier), as of PRICES_AS_OF. None: no cached rate.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-5": _p(1.25, 0.125, 10.00),
    "gpt-5-mini": _p(0.25, 0.025, 2.00),
    "gpt-5-nano": _p(0.05, 0.005, 0.40),
    "gpt-4.1": _p(2.00, 0.50, 8.00),
    "gpt-4.1-mini": _p(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _p(0.10, 0.025, 0.40),
    "gpt-4o": _p(2.50, 1.25, 10.00),
    "gpt-4o-2024-05-13": _p(5.00, None, 15.00),
    "gpt-4o-mini": _p(0.15, 0.075, 0.60),
    "o1": _p(15.00, 7.50, 60.00),
    "o1-mini": _p(1.10, 0.55, 4.40),
    "o3": _p(2.00, 0.50, 8.00),
    "o3-mini": _p(1.10, 0.55, 4.40),
    "o4-mini": _p(1.10, 0.275, 4.40),
    "gpt-4-turbo": _p(10.00, None, 30.00),
    "gpt-4": _p(30.00, None, 60.00),
    "gpt-3.5-turbo": _p(0.50, None, 1.50),
}


def price_of(model: str, prices: Mapping[str, Price], provider: str = "") -> Price | None:
    """The price of `model` (a dated snapshot falls back to its model); None when none is known.
    On a named `provider`, `provider/model` first."""
    if not model:
        return None
    if provider and provider != DEFAULT_PROVIDER:
        qualified = price_of(f"{provider}/{model}", prices)
        if qualified is not None:
            return qualified
    name = model.strip()
    if name in prices:
        return prices[name]
    lowered = {k.lower(): v for k, v in prices.items()}
    if name.lower() in lowered:
        return lowered[name.lower()]
    snapshot = _SNAPSHOT.match(name.lower())
    if snapshot is not None:
        return lowered.get(snapshot["model"])
    return None


def parse_prices(text: str) -> dict[str, Price]:
    """`model=in/cached/out;model=in/out;...` (dollars per million tokens; `in/out` means the
    cached rate is the input rate). ValueError, saying which entry and why, when malformed."""
    out: dict[str, Price] = {}
    for raw in text.replace("\n", ";").split(";"):
        entry = raw.strip()
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise ValueError(f"{entry[:40]!r} is not model=input/cached/output")
        parts = [p.strip() for p in match["prices"].split("/")]
        if len(parts) not in (2, 3):
            raise ValueError(f"{entry[:40]!r} needs 2 or 3 prices (input/cached/output)")
        try:
            numbers = [float(p) for p in parts]
        except ValueError:
            raise ValueError(f"{entry[:40]!r} has a price that is not a number") from None
        if any(not 0 <= n < 10_000 or n != n for n in numbers):
            raise ValueError(f"{entry[:40]!r} has a price outside 0..10000 dollars per million tokens")
        model = match["model"].strip()
        out[model] = Price(numbers[0], numbers[1], numbers[2]) if len(numbers) == 3 else _p(numbers[0], None,
                                                                                             numbers[1])
    return out


def merged_prices(overrides: Mapping[str, Price]) -> dict[str, Price]:
    """The built-in prices with `overrides` on top."""
    return {**DEFAULT_PRICES, **overrides}


def dollars(amount: float) -> str:
    """$0.0042, $0.42, $12.34, $1,234.56: four places below a cent, two otherwise; a cost too
    small for four places is "< $0.0001" (never "$0.0000", which reads as free)."""
    if amount == 0:
        return "$0.00"
    if abs(amount) < 0.00005:
        return "< $0.0001"
    if abs(amount) < 0.01:
        return f"${amount:.4f}"
    return f"${amount:,.2f}"


def exact_dollars(amount: float) -> str:
    """An amount someone gave (a budget), as given: $5.00, $0.016, $0.0001, $1,234.5678."""
    whole, _, fraction = format(Decimal(repr(float(amount))), "f").partition(".")
    return f"${int(whole):,}.{fraction.rstrip('0').ljust(2, '0')}"
