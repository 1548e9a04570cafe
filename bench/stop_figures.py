"""⏹ Stop on a streaming reply (issue 30): a real `roundtable run` process against the local Discord
emulator and a model server that streams a long reply slowly. Figures only.

The model writes a long reply, one word a piece, the first 100 ms after the request and then one every
50 ms (60 s in all, unless stopped). Per press: a person asks the agent, its provisional message shows
the reply growing with its ⏹ Stop button, and after a while (0.5 to 2 s of text, in turn) the person
presses Stop (a component interaction the emulator sends over the gateway). Timed from that moment:
the interaction's answer, the edit that first shows "(stopped)" without the button, and the last edit
of that message once the run has settled (its `runs` row 'stopped'). Counted: the completion tokens
the whole reply would have cost and those the stopped run spent (its `runs` row, the bot's own
estimate of the text it received), both by the bot's token counter; the difference is not spent.
Discord's webhook bucket is emulated (5 requests, reset 2 s after the first), as in the streaming
figure: the stop's edit waits for it like any other.

The emulator lives in the source checkout's tests/ (see bench/streaming.py); without it this figure
is skipped with one line saying so.
"""
from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.engine_figures import percentile
from bench.streaming import WEBHOOK_LIMIT, _newest_question, _set_up, running_bot, testing_modules

FIRST_TOKEN = 0.1  # seconds from the request to the model's first piece
EVERY = 0.05  # seconds between pieces
WRITING = 60.0  # seconds the whole reply would take
PRESSES = 20
QUICK_PRESSES = 3
LEADS = (0.5, 1.0, 1.5, 2.0)  # seconds of visible text before the press, in turn
TARGET = 1.0  # press to the last edit, p95, seconds
STOPPED = "(stopped)"
SKIPPED = ("Stop figure: skipped (the Discord emulator is in the source checkout's tests/; run it from a "
           "checkout: python bench/bench_stop.py)")


@dataclass
class StopFigures:
    presses: int = 0
    answered: list[float] = field(default_factory=list)  # s from the press to the interaction's answer
    stopped_shown: list[float] = field(default_factory=list)  # s to the edit showing "(stopped)", no button
    last_edit: list[float] = field(default_factory=list)  # s to the message's last edit
    after_stop: list[int] = field(default_factory=list)  # edits of the message after the press
    full_tokens: list[int] = field(default_factory=list)  # the whole reply's completion tokens
    spent_tokens: list[int] = field(default_factory=list)  # the stopped run's completion tokens
    written: list[int] = field(default_factory=list)  # pieces the model server wrote (a word each)
    streamed_on: list[float] = field(default_factory=list)  # s the server wrote pieces after the press
    counter: str = ""  # the token counter's backend
    note: str = ""  # why it did not run


def _words(k: int) -> list[str]:
    """The reply of question k: WRITING / EVERY words, one a piece."""
    base = (f"Answer {k}: day one starts early at Asakusa with the temple and the market streets, then a boat "
            "along the river to the gardens, lunch near the fish market, an afternoon in the museums of Ueno "
            "park and an evening walk through the lanes of Yanaka with dinner at a small place").split()
    count = round(WRITING / EVERY)
    words = (base * (count // len(base) + 1))[:count]
    return [w + " " for w in words[:-1]] + [words[-1] + "."]


async def measure(presses: int = PRESSES) -> StopFigures:
    modules = testing_modules()
    if modules is None:
        return StopFigures(note=SKIPPED)
    from bot.llm.tokens import make_token_counter

    emulator_module, openai_server = modules
    counter = make_token_counter(allow_download=True).load()  # as the bot makes its own
    figures = StopFigures(presses=presses, counter=counter.kind)
    edits: list[tuple[float, str, str, bool]] = []  # (monotonic, message id, content, has components)

    class TimedEmulator(emulator_module.DiscordEmulator):  # type: ignore[name-defined,misc]  # from tests/ at run time: Any
        def _apply_edit(self, msg: dict[str, Any], body: dict[str, Any]) -> None:
            super()._apply_edit(msg, body)
            if msg.get("webhook_id"):
                edits.append((time.monotonic(), msg["id"], msg["content"], bool(msg.get("components"))))

    def responder(body: Any) -> Any:
        pieces = _words(_newest_question(body))
        return openai_server.Reply(text="".join(pieces), pieces=pieces, first=FIRST_TOKEN, every=EVERY)

    with tempfile.TemporaryDirectory(prefix="roundtable-bench-") as tmp:
        async with TimedEmulator() as emu, openai_server.FakeOpenAI(responder) as server:
            emu.webhook_rate_limit = WEBHOOK_LIMIT
            db = Path(tmp) / "bench.db"
            await _set_up(db, emu, True, 1)
            async with running_bot(emu, server.base_url, db, Path(tmp)):
                for k in range(1, presses + 1):
                    await _one_press(emu, server, db, k, LEADS[(k - 1) % len(LEADS)], edits, figures, counter)
    return figures


def _runs(db: Path) -> list[tuple[int, str, int]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT id, status, completion_tokens FROM runs ORDER BY id").fetchall()


async def _until(condition: Any, what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(0.002)
    return found


async def _one_press(emu: Any, server: Any, db: Path, k: int, lead: float,
                     edits: list[tuple[float, str, str, bool]], figures: StopFigures, counter: Any) -> None:
    """Alice asks; `lead` s after the provisional message shows its button she presses ⏹ Stop."""
    asked = len(server.requests)
    before = {m["id"] for m in emu.channel_messages(emu.channel_id)}
    await emu.user_post(emu.channel_id, emu.alice_id, f"@planner question {k}: plan a day")

    def provisional() -> dict[str, Any] | None:
        for m in emu.channel_messages(emu.channel_id):
            if m["id"] not in before and m.get("webhook_id"):
                shown: dict[str, Any] = emu.get_message(m["id"]) or m  # (the emulator is Any: from tests/)
                if shown.get("components"):
                    return shown
        return None
    message = await _until(provisional, f"press {k}: the provisional message with its Stop button")
    await asyncio.sleep(lead)  # the reply streams a while
    message = emu.get_message(message["id"])
    stop_id = message["components"][0]["components"][0]["custom_id"]
    seen = len(edits)
    pressed = time.monotonic()
    interaction = await emu.click_button(message, stop_id, emu.alice_id)
    answered: float | None = None

    def stopped_shown() -> float | None:
        nonlocal answered
        if answered is None and interaction.callbacks:
            answered = time.monotonic()
        return next((t for t, mid, content, buttons in edits[seen:]
                     if mid == message["id"] and content.endswith(STOPPED) and not buttons), None)
    shown = await _until(stopped_shown, f"press {k}: the message showing {STOPPED} without its button")
    await _until(lambda: interaction.callbacks, f"press {k}: the interaction's answer")
    if answered is None:
        answered = time.monotonic()
    runs = await _until(lambda: [r for r in _runs(db) if r[1] != "running"] if len(_runs(db)) >= k else None,
                        f"press {k}: the run settled")
    await asyncio.sleep(1.0)  # any late edit of the message lands (the last one is what counts)
    ours = [t for t, mid, _, _ in edits[seen:] if mid == message["id"]]
    figures.answered.append(answered - pressed)
    figures.stopped_shown.append(shown - pressed)
    figures.last_edit.append(max(ours) - pressed)
    figures.after_stop.append(len(ours))
    request = server.requests[asked]
    if request.first_piece_at is not None and request.last_piece_at is not None:
        figures.written.append(round((request.last_piece_at - request.first_piece_at) / EVERY) + 1)
        figures.streamed_on.append(max(0.0, request.last_piece_at - pressed))
    figures.full_tokens.append(counter.count("".join(_words(_newest_question(request)))))
    figures.spent_tokens.append(runs[-1][2])
    if runs[-1][1] != "stopped":
        raise RuntimeError(f"press {k}: the run ended {runs[-1][1]!r}, not 'stopped'")


# the report -----------------------------------------------------------------------------------------
def _p(values: list[float]) -> str:
    return f"{percentile(values, 50):.2f} / {percentile(values, 95):.2f} / {max(values):.2f}" if values else "-"


def render(figures: StopFigures) -> list[str]:
    """The figure's lines; one line saying why when it did not run."""
    if figures.note:
        return [figures.note]
    saved = [full - spent for full, spent in zip(figures.full_tokens, figures.spent_tokens, strict=True)]
    rows = [
        ("press to the interaction's answer, s (p50 / p95 / max)", _p(figures.answered)),
        (f"press to the edit showing {STOPPED}, no button, s (p50 / p95 / max)", _p(figures.stopped_shown)),
        ("press to the message's last edit, s (p50 / p95 / max)", _p(figures.last_edit)),
        ("edits of the message after the press (mean)", f"{statistics.fmean(figures.after_stop):.1f}"),
        ("model server: pieces written, mean (a word each) / wrote on after the press, s (max)",
         f"{statistics.fmean(figures.written or [0]):.0f} / {max(figures.streamed_on, default=0):.2f}"),
        ("completion tokens a reply, mean: whole reply / spent before the stop",
         f"{statistics.fmean(figures.full_tokens):,.0f} / {statistics.fmean(figures.spent_tokens):,.0f}"),
        ("completion tokens not spent: total / mean a press",
         f"{sum(saved):,} / {statistics.fmean(saved):,.0f} ({sum(saved) / max(1, sum(figures.full_tokens)):.0%})"),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"Stop over the Discord emulator (a `roundtable run` process; model: first piece after "
             f"{FIRST_TOKEN * 1000:.0f} ms, then one every {EVERY * 1000:.0f} ms for {WRITING:g} s; pressed after "
             f"{', '.join(f'{v:g}' for v in LEADS)} s of text in turn; webhook limit {WEBHOOK_LIMIT[0]} requests / "
             f"{WEBHOOK_LIMIT[1]:g} s; {figures.presses} presses; tokens by the bot's counter, {figures.counter})"]
    lines += [f"  {label.ljust(width)}  {value}" for label, value in rows]
    last = percentile(figures.last_edit, 95)
    lines.append(f"  target (issue 30): press to the last edit <= {TARGET:g} s p95: {last:.2f} s: "
                 f"{'met' if last <= TARGET else 'not met'}")
    return lines
