"""The one table of figures; and, for docs/benchmarks.md only, issues 22's and 31's targets read off it
("met" / "not met": `python -m bench --targets`; the engine's two from issue 9).

Every total counts every call the server billed: selector, participant and
rolling-summary calls alike."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.engine_figures import SQLITE, MidRun, SizeFigures
from bench.scenario import TASK, episodes
from bench.streaming import StreamingFigures
from bench.streaming import render as render_streaming
from bench.tokyo import AUTOGEN, AUTOGEN_TUNED, CACHED_PRICE, LAST_TURNS, ROUNDTABLE, Comparison, RunReport
from bench.tool_figures import ToolFigures
from bench.tool_figures import render as render_tools

TARGET_TURNS_1 = 30
TARGET_TURNS_2 = 200
P50_MS = 5.0
P99_MS = 20.0
# Issue 22: (turns, against, most total, most uncached), as fractions of the AutoGen run's prompt tokens.
RATIO_TARGETS: tuple[tuple[int, str, float, float], ...] = (
    (TARGET_TURNS_1, AUTOGEN, 0.5, 0.8),
    (TARGET_TURNS_2, AUTOGEN, 0.15, 0.6),
    (TARGET_TURNS_1, AUTOGEN_TUNED, 0.65, 0.6),
    (TARGET_TURNS_2, AUTOGEN_TUNED, 0.6, 0.4),
)
# Issue 31: (turns, against, figure, at most), as fractions of the AutoGen run's same figure.
ISSUE31_TARGETS: tuple[tuple[int, str, str, float], ...] = (
    (TARGET_TURNS_2, AUTOGEN, "uncached", 0.5),
    (TARGET_TURNS_2, AUTOGEN, "total", 0.08),
    (TARGET_TURNS_1, AUTOGEN, "uncached", 0.7),
    (TARGET_TURNS_1, AUTOGEN, "total", 0.45),
    (TARGET_TURNS_2, AUTOGEN, "effective", 0.25),
    (TARGET_TURNS_1, AUTOGEN, "effective", 0.6),
    (TARGET_TURNS_2, AUTOGEN_TUNED, "uncached", 0.25),
)
_FIGURES: dict[str, Callable[[RunReport], float]] = {
    "total": lambda r: r.prompt, "uncached": lambda r: r.uncached, "effective": lambda r: r.effective,
}
# "the same at 1k and 50k": p50 at the largest size within 1.5x + 1 ms of the smallest size's;
# "first message no slower than the tenth": first <= 1.25 x tenth + 1 ms (medians of fresh starts).
FLAT_FACTOR, FLAT_SLACK_MS = 1.5, 1.0
FIRST_FACTOR, FIRST_SLACK_MS = 1.25, 1.0


@dataclass
class Results:
    header: list[str] = field(default_factory=list)
    pairs: list[Comparison] = field(default_factory=list)
    sizes: list[SizeFigures] = field(default_factory=list)
    mid_run: MidRun | None = None
    autogen_line: str = ""  # "AutoGen: skipped (...)" when it did not run
    streaming: StreamingFigures | None = None  # issue 20's figure
    tools: ToolFigures | None = None  # issue 29's figures


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _size(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 and n >= 1000 else str(n)


def _databases(sizes: list[SizeFigures]) -> list[str]:
    """The databases the engine figures were measured on, in order of first appearance."""
    return list(dict.fromkeys(f.database for f in sizes))


def _ran(report: RunReport) -> bool:
    return bool(report.records)


def _calls(r: RunReport) -> str:
    return " / ".join(str(len(r.calls(k))) for k in ("selector", "participant", "summary", "other"))


def _per_turn(r: RunReport) -> str:
    mean, thread = r.last_turns()
    return f"{_n(mean)} vs {_n(thread)} ({mean / thread:.2f}x)" if thread else "-"


def _shares(r: RunReport) -> str:
    return f"{_pct(r.cached_share_of('selector'))} / {_pct(r.cached_share_of('participant'))}"


def _summary_tokens(r: RunReport) -> str:
    calls = r.calls("summary")
    return f"{_n(sum(x.prompt_tokens for x in calls))} / {_n(sum(x.uncached_tokens for x in calls))}"


def _run_rows(c: Comparison) -> list[tuple[str, ...]]:
    reports = c.reports
    rt, ag, tuned = reports

    def row(label: str, value: Callable[[RunReport], str], ratio: Callable[[RunReport], float] | None = None
            ) -> tuple[str, ...]:
        cells = [value(r) if _ran(r) else "-" for r in reports]
        ratios = ["", ""]
        if ratio is not None and _ran(rt):
            ratios = [_x(_ratio(ratio(rt), ratio(other))) if _ran(other) else "-" for other in (ag, tuned)]
        return (label, *cells, *ratios)

    rows = [
        row("  calls: selector / participant / summary / other", _calls),
        row("  prompt tokens (every call)", lambda r: _n(r.prompt), lambda r: r.prompt),
        row("  cached tokens (share of prompt)", lambda r: f"{_n(r.cached)} ({_pct(r.cached_share)})",
            lambda r: r.cached),
        row("  cached share: selector / participant calls", _shares),
        row("  uncached prompt tokens (every call)", lambda r: _n(r.uncached), lambda r: r.uncached),
        row(f"  effective: uncached + {CACHED_PRICE:g} x cached", lambda r: _n(r.effective), lambda r: r.effective),
        row("  summary calls: prompt / uncached tokens", _summary_tokens),
        row("  completion tokens", lambda r: _n(r.completion)),
        row(f"  prompt tokens/turn, last {LAST_TURNS}, vs thread", _per_turn),
        row("  prefix kept (mean after 1st call)", lambda r: _pct(r.prefix_kept)),
        row("  participant calls under half cached", lambda r: _pct(r.under_half_cached)),
        row("  prompt_cache_key values sent", lambda r: str(r.cache_keys)),
    ]
    if c.roundtable.episodes > 1:
        rows.append(row("  last prompt holds the task and follow-up", _tasks_kept))
    callers = list(dict.fromkeys(caller for r in reports for caller in r.callers()))
    for who in callers:
        def per_caller(r: RunReport, who: str = who) -> str:
            if who not in r.callers():
                return "-"
            uncached, shared = r.by_caller(who)
            return f"{_n(uncached)} / {_n(shared)}"

        rows.append(row(f"  {who}: uncached / mean prefix shared with others", per_caller))
    for r in reports:
        if r.note and r.records:
            rows.append((f"  note ({r.framework})", r.note, "", "", "", ""))
    return rows


def _tasks_kept(r: RunReport) -> str:
    missing = r.missing_tasks()
    if not r.last_prompts:
        return "-"
    if not missing:
        return f"all {len(r.last_prompts)} callers"
    lacking: dict[str, list[str]] = {}
    for caller, lost in missing.items():
        what = "the task and the follow-up" if len(lost) == 2 else "the task" if TASK in lost else "the follow-up"
        lacking.setdefault(what, []).append(caller)
    return "; ".join(f"{', '.join(callers)} lack{'s' if len(callers) == 1 else ''} {what}"
                     for what, callers in lacking.items())


def _blank(label: str, first: str = "") -> tuple[str, ...]:
    return (label, first, "", "", "", "")


def table(results: Results) -> str:
    rows: list[tuple[str, ...]] = [("figure", ROUNDTABLE, AUTOGEN, AUTOGEN_TUNED, "RT/AG", "RT/tuned")]
    for c in results.pairs:
        parts = episodes(c.turns)
        shape = "" if len(parts) == 1 else f" ({' + '.join(map(str, parts))}: {len(parts)} episodes)"
        rows.append(_blank(f"Tokyo task, {c.turns} turns{shape}"))
        rows.extend(_run_rows(c))
    if results.sizes:
        rows.append(_blank("Engine, in-process, instant LLM"))
        labelled = _databases(results.sizes) != [SQLITE]
        for f in results.sizes:
            s = _size(f.size) + (f" ({f.database})" if labelled else "")
            rows.append(_blank(f"  history {s}: overhead/turn p50 / p99 ms",
                               f"{_ms(f.percentile(50))} / {_ms(f.percentile(99))}"))
            rows.append(_blank(f"  history {s}: 1st msg after start / warm / 10th, ms",
                               f"{_ms(f.first)} / {_ms(f.warm_first)} / {_ms(f.tenth)}"))
            rows.append(_blank(f"  history {s}: committed posts/s", f"{f.posts_per_s:.1f}"))
            rows.append(_blank(f"  history {s}: append / route, msg/s", f"{_n(f.append_per_s)} / {_n(f.route_per_s)}"))
            rows.append(_blank(f"  history {s}: max RSS MiB", f"{f.rss_mib:.0f}"))
            if f.note:
                rows.append(_blank(f"  history {s}: note", f.note))
    if results.mid_run is not None:
        m = results.mid_run
        runs = ", ".join(f"{k} {v}" for k, v in m.runs_after.items())
        rows.append(_blank(f"  runs/agent, {m.messages} msgs during a run", runs))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[k]) if k == 0 else c.rjust(widths[k]) for k, c in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "not met")


def _comparison(results: Results, turns: int) -> Comparison | None:
    return next((c for c in results.pairs if c.turns == turns), None)


def ratio_target(results: Results, turns: int, against: str, most_total: float, most_uncached: float) -> str:
    """One of RATIO_TARGETS as a line: the two ratios and the verdict."""
    label = f"{turns} turns vs {against}: total <= {most_total:g}x, uncached <= {most_uncached:g}x"
    c = _comparison(results, turns)
    if c is None:
        return f"{label}: no {turns}-turn run: {_verdict(None)}"
    other = c.autogen if against == AUTOGEN else c.tuned
    if not (_ran(c.roundtable) and _ran(other)):
        return f"{label}: {against} did not run: {_verdict(None)}"
    total = c.roundtable.prompt / other.prompt
    uncached = c.roundtable.uncached / other.uncached if other.uncached else math.inf
    verdicts = f"total {total:.2f}x {_verdict(total <= most_total)}, uncached {uncached:.2f}x " \
               f"{_verdict(uncached <= most_uncached)}"
    return f"{label}: {verdicts}: {_verdict(total <= most_total and uncached <= most_uncached)}"


def figure_target(results: Results, turns: int, against: str, figure: str, most: float) -> str:
    """One of ISSUE31_TARGETS as a line: the ratio and the verdict."""
    label = f"{turns} turns vs {against}: {figure} <= {most:g}x"
    c = _comparison(results, turns)
    other = None if c is None else (c.autogen if against == AUTOGEN else c.tuned)
    if c is None or other is None or not (_ran(c.roundtable) and _ran(other)):
        return f"{label}: not run: {_verdict(None)}"
    value, base = _FIGURES[figure](c.roundtable), _FIGURES[figure](other)
    ratio = value / base if base else math.inf
    return f"{label}: {_n(value)} vs {_n(base)}, {ratio:.3f}x: {_verdict(ratio <= most)}"


def targets(results: Results) -> list[str]:
    out = [f"{i}. {ratio_target(results, *t)}" for i, t in enumerate(RATIO_TARGETS, 1)]

    runs = [c.roundtable for c in results.pairs if c.roundtable.episodes > 1 and _ran(c.roundtable)]
    ok: bool | None = None
    detail = "no run of several episodes"
    if runs:
        missing = {f"{r.turns_asked} turns": r.missing_tasks() for r in runs}
        ok = not any(missing.values()) and all(len(r.last_prompts) >= 4 for r in runs)
        detail = "; ".join(f"{k}: {_tasks_kept(r)}" for k, r in zip(missing, runs))
    out.append(f"{len(out) + 1}. the task and the follow-up in every caller's last prompt of the last episode: "
               f"{detail}: {_verdict(ok)}")

    counted = [(c.turns, len(calls), sum(r.prompt_tokens for r in calls))
               for c in results.pairs if _ran(c.roundtable) for calls in [c.roundtable.calls("summary")]]
    detail = ", ".join(f"{n} calls, {_n(p)} prompt tokens at {t} turns" for t, n, p in counted) or "no run"
    out.append(f"{len(out) + 1}. summary calls counted in every total: {detail}: "
               f"{_verdict(True if counted else None)}")

    if results.sizes:
        problems: list[str] = []
        databases = _databases(results.sizes)
        for database in databases:
            where = f"{database} " if databases != [SQLITE] else ""
            sizes = [f for f in results.sizes if f.database == database]
            for f in sizes:
                p50, p99 = f.percentile(50), f.percentile(99)
                if not (p50 <= P50_MS and p99 <= P99_MS):
                    problems.append(f"{where}{_size(f.size)}: p50 {_ms(p50)}, p99 {_ms(p99)}")
                if not f.first <= FIRST_FACTOR * f.tenth + FIRST_SLACK_MS:
                    problems.append(f"{where}{_size(f.size)}: first {_ms(f.first)} > tenth {_ms(f.tenth)}")
            small, large = sizes[0], sizes[-1]
            if len(sizes) > 1 and not large.percentile(50) <= FLAT_FACTOR * small.percentile(50) + FLAT_SLACK_MS:
                problems.append(f"{where}p50 grows {_size(small.size)}->{_size(large.size)}: "
                                f"{_ms(small.percentile(50))} -> {_ms(large.percentile(50))}")
        detail = "; ".join(problems) or "every size within limits, flat, first no slower than tenth"
        out.append(f"{len(out) + 1}. overhead p50 <= {P50_MS:g} ms, p99 <= {P99_MS:g} ms, same at every size, "
                   f"first <= tenth: {detail}: {_verdict(not problems)}")
    else:
        out.append(f"{len(out) + 1}. engine overhead: not measured")

    m = results.mid_run
    if m is not None:
        per_agent = ", ".join(f"{k} {v}" for k, v in m.runs_after.items())
        out.append(f"{len(out) + 1}. one run per agent for {m.messages} messages arriving mid-run: {per_agent}: "
                   f"{_verdict(m.met)}")
    else:
        out.append(f"{len(out) + 1}. runs per agent mid-run: not measured")
    out += [f"{len(out) + i}. {figure_target(results, *t)}" for i, t in enumerate(ISSUE31_TARGETS, 1)]
    return out


def render(results: Results, *, with_targets: bool = False) -> str:
    """The header and the table; `with_targets`: also the targets' reading, for docs/benchmarks.md."""
    parts = [*results.header, "", table(results)]
    if results.autogen_line:
        parts += ["", results.autogen_line]
    if with_targets:
        parts += ["", "Targets (1-6 issue 22, 7-8 the engine's from issue 9, 9-15 issue 31)"]
        parts += [f"  {line}" for line in targets(results)]
    if results.streaming is not None:
        parts += ["", *render_streaming(results.streaming, with_targets=with_targets)]
    if results.tools is not None:
        parts += ["", *render_tools(results.tools, with_targets=with_targets)]
    return "\n".join(parts)

