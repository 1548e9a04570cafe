"""The one table of figures; and, for docs/benchmarks.md only, issue 9's targets read off it
("met" / "not met": `python -m bench --targets`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench.engine_figures import SQLITE, MidRun, SizeFigures
from bench.tokyo import LAST_TURNS, RunReport

TARGET_TURNS_1 = 30
TARGET_TURNS_2 = 200
P50_MS = 5.0
P99_MS = 20.0
PREFIX_KEPT = 0.95
# "the same at 1k and 50k": p50 at the largest size within 1.5x + 1 ms of the smallest size's;
# "first message no slower than the tenth": first <= 1.25 x tenth + 1 ms (medians of fresh starts).
FLAT_FACTOR, FLAT_SLACK_MS = 1.5, 1.0
FIRST_FACTOR, FIRST_SLACK_MS = 1.25, 1.0


@dataclass
class Results:
    header: list[str] = field(default_factory=list)
    pairs: list[tuple[RunReport, RunReport]] = field(default_factory=list)
    sizes: list[SizeFigures] = field(default_factory=list)
    mid_run: MidRun | None = None
    autogen_line: str = ""  # "AutoGen: skipped (...)" when it did not run


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


def _run_rows(rt: RunReport, ag: RunReport) -> list[tuple[str, str, str, str]]:
    both = _ran(ag)

    def cell(r: RunReport, text: str) -> str:
        return text if _ran(r) else "-"

    def calls(r: RunReport) -> str:
        return cell(r, f"{len(r.calls('selector'))} / {len(r.calls('participant'))} / {len(r.calls('other'))}")

    def per_turn(r: RunReport) -> str:
        mean, thread = r.last_turns()
        return cell(r, f"{_n(mean)} vs {_n(thread)} ({mean / thread:.2f}x)" if thread else "-")

    def ratio(a: float, b: float) -> str:
        return _x(_ratio(a, b)) if both else "-"

    rows = [
        ("  calls: selector / participant / other", calls(rt), calls(ag), ""),
        ("  prompt tokens", cell(rt, _n(rt.prompt)), cell(ag, _n(ag.prompt)), ratio(rt.prompt, ag.prompt)),
        ("  cached tokens (share of prompt)", cell(rt, f"{_n(rt.cached)} ({_pct(rt.cached_share)})"),
         cell(ag, f"{_n(ag.cached)} ({_pct(ag.cached_share)})"), ratio(rt.cached, ag.cached)),
        ("  cached share: selector / participant calls",
         cell(rt, f"{_pct(rt.cached_share_of('selector'))} / {_pct(rt.cached_share_of('participant'))}"),
         cell(ag, f"{_pct(ag.cached_share_of('selector'))} / {_pct(ag.cached_share_of('participant'))}"), ""),
        ("  uncached prompt tokens", cell(rt, _n(rt.uncached)), cell(ag, _n(ag.uncached)),
         ratio(rt.uncached, ag.uncached)),
        ("  completion tokens", cell(rt, _n(rt.completion)), cell(ag, _n(ag.completion)), ""),
        (f"  prompt tokens/turn, last {LAST_TURNS}, vs thread", per_turn(rt), per_turn(ag), ""),
        ("  prefix kept (mean after 1st call)", cell(rt, _pct(rt.prefix_kept)), cell(ag, _pct(ag.prefix_kept)), ""),
        ("  participant calls under half cached", cell(rt, _pct(rt.under_half_cached)),
         cell(ag, _pct(ag.under_half_cached)), ""),
        ("  prompt_cache_key values sent", cell(rt, str(rt.cache_keys)), cell(ag, str(ag.cache_keys)), ""),
    ]
    for r in (rt, ag):
        if r.note and r.records:
            rows.append((f"  note ({r.framework})", r.note, "", ""))
    return rows


def table(results: Results) -> str:
    rows: list[tuple[str, str, str, str]] = [("figure", "Roundtable", "AutoGen", "RT/AG")]
    for rt, ag in results.pairs:
        rows.append((f"Tokyo task, {rt.turns_asked} turns", "", "", ""))
        rows.extend(_run_rows(rt, ag))
    if results.sizes:
        rows.append(("Engine, in-process, instant LLM", "", "", ""))
        labelled = _databases(results.sizes) != [SQLITE]
        for f in results.sizes:
            s = _size(f.size) + (f" ({f.database})" if labelled else "")
            rows.append((f"  history {s}: overhead/turn p50 / p99 ms",
                         f"{_ms(f.percentile(50))} / {_ms(f.percentile(99))}", "", ""))
            rows.append((f"  history {s}: 1st msg after start / warm / 10th, ms",
                         f"{_ms(f.first)} / {_ms(f.warm_first)} / {_ms(f.tenth)}", "", ""))
            rows.append((f"  history {s}: committed posts/s", f"{f.posts_per_s:.1f}", "", ""))
            rows.append((f"  history {s}: append / route, msg/s", f"{_n(f.append_per_s)} / {_n(f.route_per_s)}",
                         "", ""))
            rows.append((f"  history {s}: max RSS MiB", f"{f.rss_mib:.0f}", "", ""))
            if f.note:
                rows.append((f"  history {s}: note", f.note, "", ""))
    if results.mid_run is not None:
        m = results.mid_run
        runs = ", ".join(f"{k} {v}" for k, v in m.runs_after.items())
        rows.append((f"  runs/agent, {m.messages} msgs during a run", runs, "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[k]) if k == 0 else c.rjust(widths[k]) for k, c in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "not met")


def _pair(results: Results, turns: int) -> tuple[RunReport, RunReport] | None:
    return next((p for p in results.pairs if p[0].turns_asked == turns), None)


def targets(results: Results) -> list[str]:
    out: list[str] = []

    pair = _pair(results, TARGET_TURNS_1)
    ok: bool | None = None
    detail = f"no {TARGET_TURNS_1}-turn run"
    if pair and _ran(pair[1]) and _ran(pair[0]):
        r = pair[0].prompt / pair[1].prompt
        ok, detail = r <= 0.5, f"{r:.2f}x"
    elif pair:
        detail = "AutoGen did not run"
    out.append(f"1. {TARGET_TURNS_1} turns: prompt tokens <= 0.5x AutoGen's: {detail}: {_verdict(ok)}")

    pair = _pair(results, TARGET_TURNS_2)
    ok, detail = None, f"no {TARGET_TURNS_2}-turn run"
    if pair and _ran(pair[1]) and _ran(pair[0]):
        total = pair[0].prompt / pair[1].prompt
        uncached = pair[0].uncached / pair[1].uncached if pair[1].uncached else math.inf
        ok = total <= 0.25 and uncached <= 0.5
        detail = f"total {total:.2f}x (<= 0.25), uncached {uncached:.2f}x (<= 0.5)"
    elif pair:
        detail = "AutoGen did not run"
    out.append(f"2. {TARGET_TURNS_2} turns: total and uncached prompt tokens vs AutoGen's: {detail}: {_verdict(ok)}")

    kept = [(rt.turns_asked, rt.prefix_kept) for rt, _ in results.pairs if rt.prefix_kept is not None]
    ok = min(k for _, k in kept) >= PREFIX_KEPT if kept else None
    detail = ", ".join(f"{_pct(k)} at {t} turns" for t, k in kept) or "no run"
    out.append(f"3. prefix kept >= {PREFIX_KEPT:.0%} of the agent's previous prompt: {detail}: {_verdict(ok)}")

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
        out.append(f"4. overhead p50 <= {P50_MS:g} ms, p99 <= {P99_MS:g} ms, same at every size, first <= tenth: "
                   f"{detail}: {_verdict(not problems)}")
    else:
        out.append("4. engine overhead: not measured")

    m = results.mid_run
    if m is not None:
        runs = ", ".join(f"{k} {v}" for k, v in m.runs_after.items())
        out.append(f"5. one run per agent for {m.messages} messages arriving mid-run: {runs}: {_verdict(m.met)}")
    else:
        out.append("5. runs per agent mid-run: not measured")
    return out


def render(results: Results, *, with_targets: bool = False) -> str:
    """The header and the table; `with_targets`: also the targets' reading, for docs/benchmarks.md."""
    parts = [*results.header, "", table(results)]
    if results.autogen_line:
        parts += ["", results.autogen_line]
    if with_targets:
        parts += ["", "Targets (issue 9)"]
        parts += [f"  {line}" for line in targets(results)]
    return "\n".join(parts)

