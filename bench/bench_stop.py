"""Print the ⏹ Stop figures (issue 30): how soon a pressed Stop shows on the agent's message, and the
completion tokens a stop does not spend.

    .venv/bin/python bench/bench_stop.py [--quick] [--presses 20]

A `roundtable run` process against the Discord emulator and a model that streams a long reply slowly
(see bench/stop_figures.py for what is timed and counted). Runs from a source checkout (the emulator
is in tests/). Not part of `python -m bench`: the bot's start alone takes longer than that bench's
quick run should. Figures only: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stop_figures import PRESSES, QUICK_PRESSES, measure, render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_PRESSES} presses (default {PRESSES})")
    parser.add_argument("--presses", type=int, metavar="N", help=f"replies stopped and timed (default {PRESSES})")
    args = parser.parse_args(argv)
    presses = args.presses or (QUICK_PRESSES if args.quick else PRESSES)
    if presses < 1:
        parser.error("--presses must be >= 1")
    print("\n".join(render(asyncio.run(measure(presses)))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
