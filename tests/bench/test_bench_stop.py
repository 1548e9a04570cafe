"""bench/bench_stop.py (issue 30's Stop figures) end to end on its quick path: a `roundtable run` process over
the Discord emulator, Stop pressed on streaming replies; that every figure is printed, never how fast."""
from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from bench import stop_figures

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_stop.py"
SECONDS = r"[0-9.]+ / [0-9.]+ / [0-9.]+"


async def test_the_quick_run_prints_the_stop_times_and_the_tokens_not_spent() -> None:
    process = await asyncio.create_subprocess_exec(sys.executable, str(SCRIPT), "--quick",
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    text = out.decode()
    assert process.returncode == 0, err.decode()[-3000:]
    assert f"; {stop_figures.QUICK_PRESSES} presses;" in text, text
    for label in ("press to the interaction's answer", "press to the edit showing (stopped), no button",
                  "press to the message's last edit"):
        assert re.search(rf"{re.escape(label)}, s \(p50 / p95 / max\) +{SECONDS}$", text, re.M), text
    whole = re.search(r"whole reply / spent before the stop +([0-9,]+) / ([0-9,]+)$", text, re.M)
    saved = re.search(r"completion tokens not spent: total / mean a press +([0-9,]+) / ([0-9,]+) \([0-9]+%\)$",
                      text, re.M)
    assert whole and saved, text
    full, spent = (int(v.replace(",", "")) for v in whole.groups())
    assert full > spent > 0 and int(saved.group(1).replace(",", "")) > 0  # each stopped reply cost something
    assert re.search(r"target \(issue 30\): press to the last edit <= 1 s p95: [0-9.]+ s: (met|not met)$", text, re.M)


def test_the_stop_figure_is_skipped_with_one_line_outside_a_checkout(monkeypatch) -> None:
    monkeypatch.setattr(stop_figures, "testing_modules", lambda: None)
    assert stop_figures.render(asyncio.run(stop_figures.measure(1))) == [stop_figures.SKIPPED]


def test_the_target_reads_the_95th_percentile_of_the_last_edit() -> None:
    def figures(last: list[float]) -> stop_figures.StopFigures:
        return stop_figures.StopFigures(presses=len(last), answered=last, stopped_shown=last, last_edit=last,
                                        after_stop=[1] * len(last), full_tokens=[100] * len(last),
                                        spent_tokens=[10] * len(last), counter="estimate")
    assert stop_figures.render(figures([0.1] * 19 + [5.0]))[-1].endswith(": 0.10 s: met")  # p95 of 20: the 19th
    assert stop_figures.render(figures([0.1] * 18 + [5.0, 5.0]))[-1].endswith(": 5.00 s: not met")
    assert "not spent: total / mean a press" in "\n".join(stop_figures.render(figures([0.1])))
    assert "1,800 / 90 (90%)" in "\n".join(stop_figures.render(figures([0.1] * 20)))
