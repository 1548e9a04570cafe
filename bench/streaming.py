"""Streamed replies over Discord (issue 20): a real `roundtable run` process against the local Discord
emulator and a model server that paces its tokens, streamed vs `stream:off`. Figures only.

The model writes 150 tokens: the first 100 ms after the request, the rest over 3 s (a request
that does not stream gets the whole reply after the same 3.08 s). Per reply, from the moment a
person's message is in the channel: when the first agent text is visible, when the complete reply
is (also after the model's last token), the messages, posts and edits that showed it, the REST
calls the bot made (webhook calls, and all of them: typing, reactions...), and for the run the
webhook requests in the busiest 2 s and the 429s, under Discord's webhook bucket of 5 requests
reset 2 s after the first (emulated: a request past it gets a 429). The third column asks three
groups on one webhook (a channel's threads) at once; the last one streams from an instant model
(its whole reply in one burst, 100 ms after the request), whose streamed reply should cost no
more REST calls than a whole post (issue 31).

The emulator lives in the source checkout's tests/ (tests/discord_emulator, with the model server
tests/fakes/openai_server.py), which is not installed: it is imported from the checkout that holds
this bench (`python -m bench` from it, or an editable install), else this figure is skipped
with one line saying so.
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from bot.core.models import GroupSettings

FIRST_TOKEN = 0.1  # seconds from the request to the model's first token
TOKENS = 150
WRITING = 3.0  # seconds over which the tokens come
WEBHOOK_LIMIT = (5, 2.0)  # Discord's webhook bucket: requests per seconds
REPLIES = 5
QUICK_REPLIES = 3
ROOMS = 3  # groups streaming at once on one webhook, for the last column
TARGET_FIRST = 0.35  # first visible text after the person's message, seconds
TARGET_COMPLETE = 0.5  # complete reply visible after the model's last token, seconds
SKIPPED = ("Streaming figure: skipped (the Discord emulator is in the source checkout's tests/; run the bench "
           "from a checkout: python -m bench)")


def testing_modules() -> tuple[ModuleType, ModuleType] | None:
    """tests.discord_emulator and tests.fakes.openai_server, from the checkout beside this bench."""
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "tests" / "discord_emulator" / "__init__.py").is_file():
        return None
    if str(checkout) not in sys.path:
        sys.path.append(str(checkout))
    try:
        return (importlib.import_module("tests.discord_emulator"),
                importlib.import_module("tests.fakes.openai_server"))
    except ImportError:
        return None


@dataclass
class ModeFigures:
    stream: bool
    rooms: int = 1  # groups answering at once, on one webhook (a channel's threads)
    instant: bool = False  # the model writes its whole reply at once (after FIRST_TOKEN)
    first_visible: list[float] = field(default_factory=list)  # s after the person's message
    complete: list[float] = field(default_factory=list)  # s after the person's message
    after_last_token: list[float] = field(default_factory=list)  # s after the model's last token
    messages: list[int] = field(default_factory=list)
    posts: list[float] = field(default_factory=list)  # per reply (a round's, shared out)
    edits: list[float] = field(default_factory=list)
    webhook_calls: list[float] = field(default_factory=list)
    rest_calls: list[float] = field(default_factory=list)
    burst: int = 0  # most webhook requests in any 2 s
    limited: int = 0  # 429s


@dataclass
class StreamingFigures:
    modes: list[ModeFigures] = field(default_factory=list)
    note: str = ""  # why it did not run


def _words(k: int) -> list[str]:
    """A reply of TOKENS words (one token each), different for each question."""
    base = (f"Answer {k}: day one starts early at Asakusa with the temple and the market streets, then a boat "
            "along the river to the gardens, lunch near the fish market, an afternoon in the museums of Ueno "
            "park and an evening walk through the lanes of Yanaka with dinner at a small place").split()
    words = (base * (TOKENS // len(base) + 1))[:TOKENS]
    return [w + " " for w in words[:-1]] + [words[-1] + "."]


def _newest_question(body: Any) -> int:
    text = "".join(str(m.get("content") or "") for m in body.get("messages", []))
    return max(map(int, re.findall(r"question (\d+)", text)), default=0)


class _Model:
    """The paced model server's responder: streamed pieces, or the whole reply after as long."""

    def __init__(self, openai_server: ModuleType, instant: bool = False) -> None:
        self.server = openai_server
        self.instant = instant
        self.last_token: dict[int, float] = {}  # question -> when a whole reply's last token was written

    def __call__(self, body: Any) -> Any:
        q = _newest_question(body)
        pieces = _words(q)
        every = 0.0 if self.instant else WRITING / TOKENS
        if body.get("stream"):  # (the server keeps when it sent the last piece)
            return self.server.Reply(text="".join(pieces), pieces=pieces, first=FIRST_TOKEN, every=every)
        self.last_token[q] = body.at + FIRST_TOKEN + every * (len(pieces) - 1)
        return self.server.Reply(text="".join(pieces), delay=FIRST_TOKEN + every * (len(pieces) - 1))


Start = Callable[..., Awaitable[asyncio.subprocess.Process]]  # (*roundtable args, **subprocess options)
MODES = ((True, 1, False), (False, 1, False), (True, ROOMS, False), (True, 1, True))  # stream, rooms, instant


async def measure(replies: int = REPLIES, *, together: bool = False, start: Start | None = None) -> StreamingFigures:
    """The figures of each mode, one mode after the other; `together`, all modes at once (each with its own
    emulator, model server and bot process): their counts hold, their times are not figures (the tests' check).
    `start` starts the `roundtable` process instead of a new interpreter (the tests' fork server)."""
    modules = testing_modules()
    if modules is None:
        return StreamingFigures(note=SKIPPED)
    runs = (_measure_mode(modules, stream, replies, rooms, instant, start) for stream, rooms, instant in MODES)
    return StreamingFigures(list(await asyncio.gather(*runs)) if together else [await run for run in runs])


Shown = list[tuple[float, str, str, str]]  # (monotonic, channel id, message id, content) of agents' posts and edits


async def _measure_mode(modules: tuple[ModuleType, ModuleType], stream: bool, replies: int,
                        rooms: int, instant: bool = False, start: Start | None = None) -> ModeFigures:
    emulator_module, openai_server = modules
    shown: Shown = []

    class TimedEmulator(emulator_module.DiscordEmulator):  # type: ignore[name-defined,misc]  # from tests/ at run time: Any
        def _store_message(self, msg: dict[str, Any]) -> None:
            super()._store_message(msg)
            if msg.get("webhook_id") and msg["author"].get("username") == "planner":
                shown.append((time.monotonic(), msg["channel_id"], msg["id"], msg["content"]))

        def _apply_edit(self, msg: dict[str, Any], body: dict[str, Any]) -> None:
            super()._apply_edit(msg, body)
            if msg.get("webhook_id") and msg["author"].get("username") == "planner" and "content" in body:
                shown.append((time.monotonic(), msg["channel_id"], msg["id"], msg["content"]))

    figures = ModeFigures(stream, rooms, instant)
    model = _Model(openai_server, instant)
    with tempfile.TemporaryDirectory(prefix="roundtable-bench-") as tmp:
        async with TimedEmulator() as emu, openai_server.FakeOpenAI(model) as server:
            emu.webhook_rate_limit = WEBHOOK_LIMIT
            db = Path(tmp) / "bench.db"
            channels = await _set_up(db, emu, stream, rooms)
            async with running_bot(emu, server.base_url, db, Path(tmp), start):
                for k in range(1, replies + 1):
                    await _one_round(emu, model, server, k, channels, shown, figures)
            hook = [r.time for r in emu.requests if r.path.startswith("/webhooks/")]
            figures.burst = max((sum(1 for t in hook if s <= t < s + WEBHOOK_LIMIT[1]) for s in hook), default=0)
            figures.limited = len(emu.rate_limited)
    return figures


async def _set_up(db: Path, emu: Any, stream: bool, rooms: int) -> list[str]:
    """The groups, straight in the database: the channel, or that many threads of it (one webhook)."""
    from storage import open_store

    store = await open_store(str(db))
    try:
        hook = emu.add_webhook(emu.channel_id, "Roundtable")
        await store.webhooks.save_webhook(emu.channel_id, hook.id, hook.token)
        channels = [emu.channel_id] if rooms == 1 else [emu.add_thread(emu.channel_id, f"room {r}")
                                                        for r in range(rooms)]
        for channel in channels:
            group = await store.groups.create_group(
                f"discord:{channel}", f"#{channel}", GroupSettings(mode="tags", stream=stream), guild_id=emu.guild_id,
                channel_id=channel, parent_channel_id=None if channel == emu.channel_id else emu.channel_id,
                setup_message_id=emu.snowflake())
            await store.roster.add_agent(group.id, "planner", "plans trips", "You plan trips.")
        return channels
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def running_bot(emu: Any, base_url: str, db: Path, cwd: Path,
                      start: Start | None = None) -> AsyncIterator[asyncio.subprocess.Process]:
    """A `roundtable run` process connected to `emu`, stopped on leaving; a RuntimeError raised inside
    is told with the end of the bot's log. `start(*args, **subprocess options)` starts `roundtable ARGS`
    (by default `python -m bot ARGS`, a new interpreter)."""
    process = await _start_bot(emu, base_url, db, cwd, start or _new_interpreter)
    try:
        yield process
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}; the bot's log ends:\n{(cwd / 'bot.log').read_text()[-3000:]}") from None
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


async def _new_interpreter(*args: str, **options: Any) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-m", "bot", *args, **options)


async def _start_bot(emu: Any, base_url: str, db: Path, cwd: Path, start: Start) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ROUNDTABLE_", "DISCORD_"))}
    env.update(DISCORD_TOKEN=emu.token, DISCORD_API_BASE_URL=emu.api_base, DISCORD_GUILD_ID=emu.guild_id,
               OPENAI_API_KEY="sk-bench", OPENAI_BASE_URL=base_url, ROUNDTABLE_DB=str(db),
               ROUNDTABLE_LOG_LEVEL="WARNING", ROUNDTABLE_MODEL="bench-model")
    log = (cwd / "bot.log").open("w")
    process = await start("--env-file", os.devnull, "run", stdout=log, stderr=log, env=env, cwd=cwd)
    deadline = time.monotonic() + 180  # a start is slow on a busy machine
    while not any(s.ready for s in emu.sessions.values()):
        if process.returncode is not None or time.monotonic() > deadline:
            if process.returncode is None:  # reaped here, not left to the garbage collector after the loop closed
                process.kill()
                await process.wait()
            raise RuntimeError(f"the bot did not connect; its log:\n{(cwd / 'bot.log').read_text()[-2000:]}")
        await asyncio.sleep(0.05)
    await asyncio.sleep(3.0)  # discord.py's guild_ready_timeout, then the catch-up: a quiet start
    return process


async def _one_round(emu: Any, model: _Model, server: Any, k: int, channels: list[str], shown: Shown,
                     figures: ModeFigures) -> None:
    """A person asks in each room at once; each answer is timed from its own question."""
    questions = {channel: 10 * k + r for r, channel in enumerate(channels)}
    finals = {channel: "".join(_words(q)) for channel, q in questions.items()}
    seen, sent, wall = len(shown), len(emu.requests), time.time()
    starts = {}
    for channel, q in questions.items():
        starts[channel] = time.monotonic()
        await emu.user_post(channel, emu.alice_id, f"@planner question {q}: plan a day")
    deadline = time.monotonic() + 60
    while not all(any(c == channel and content == finals[channel] for _, c, _, content in shown[seen:])
                  for channel in channels):
        if time.monotonic() > deadline:
            raise RuntimeError(f"round {k} was never shown whole")
        await asyncio.sleep(0.005)
    await asyncio.sleep(1.5)  # the runs settle (episode reactions, the next poll): their requests count too
    calls = [r for r in emu.requests[sent:] if r.time >= wall]
    hook_calls = [r for r in calls if r.path.startswith("/webhooks/")]
    for channel, q in questions.items():
        events = [(t, message_id, content) for t, c, message_id, content in shown[seen:] if c == channel]
        first = next(t for t, _, content in events if content)
        complete = next(t for t, _, content in events if content == finals[channel])
        request = next(r for r in reversed(server.requests) if _newest_question(r) == q)
        last_token = request.last_piece_at if request.get("stream") else model.last_token[q]
        figures.first_visible.append(first - starts[channel])
        figures.complete.append(complete - starts[channel])
        figures.after_last_token.append(complete - last_token)
        figures.messages.append(len({message_id for _, message_id, _ in events}))
    figures.posts.append(sum(1 for r in hook_calls if r.method == "POST") / len(channels))
    figures.edits.append(sum(1 for r in hook_calls if r.method == "PATCH") / len(channels))
    figures.webhook_calls.append(len(hook_calls) / len(channels))
    figures.rest_calls.append(len(calls) / len(channels))


# the report -----------------------------------------------------------------------------------------
def _s(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} / {max(values):.2f}" if values else "-"


def _mean(values: list[int] | list[float]) -> str:
    return f"{statistics.fmean(values):.1f}" if values else "-"


def render(figures: StreamingFigures, *, with_targets: bool = True) -> list[str]:
    """The figure's rows (and `with_targets`, issue 20's targets read off them), as lines; one line
    saying why when it did not run."""
    if figures.note:
        return [figures.note]
    columns = [("streamed" if m.stream else "stream:off") + (f", {m.rooms} at once" if m.rooms > 1 else "")
               + (", instant model" if m.instant else "") for m in figures.modes]
    rows = [("figure", *columns)]
    cells: tuple[tuple[str, Callable[[ModeFigures], str]], ...] = (
        ("first visible text after the message, s (median / max)", lambda m: _s(m.first_visible)),
        ("complete reply after the message, s (median / max)", lambda m: _s(m.complete)),
        ("complete reply after the model's last token, s", lambda m: _s(m.after_last_token)),
        ("messages / webhook posts / edits per reply",
         lambda m: f"{_mean(m.messages)} / {_mean(m.posts)} / {_mean(m.edits)}"),
        ("REST calls per answered message: webhook / all",
         lambda m: f"{_mean(m.webhook_calls)} / {_mean(m.rest_calls)}"),
        ("webhook requests in the busiest 2 s (sliding); 429s", lambda m: f"{m.burst}; {m.limited}"),
    )
    for label, cell in cells:
        rows.append((f"  {label}", *(cell(m) for m in figures.modes)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    replies = len(figures.modes[0].first_visible) if figures.modes else 0  # (one room: one reply a round)
    lines = [f"Streaming over the Discord emulator (a `roundtable run` process; model: first token after "
             f"{FIRST_TOKEN * 1000:.0f} ms, {TOKENS} tokens over {WRITING:g} s; webhook limit {WEBHOOK_LIMIT[0]} "
             f"requests / {WEBHOOK_LIMIT[1]:g} s; {replies} rounds each; \"at once\": that many threads of the "
             "channel, one agent each, asked together)"]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[k]) if k == 0 else c.rjust(widths[k]) for k, c in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    alone = next((m for m in figures.modes if m.stream and m.rooms == 1 and not m.instant), None)
    whole = next((m for m in figures.modes if not m.stream and m.rest_calls), None)
    instant = next((m for m in figures.modes if m.instant and m.rest_calls), None)
    streamed = [m for m in figures.modes if m.stream]
    if with_targets and alone is not None and alone.first_visible:
        first, after = max(alone.first_visible), max(alone.after_last_token)
        limited = sum(m.limited for m in streamed)
        lines += ["", "Targets (issue 20; streamed, one agent, worst reply; bursts over every streamed run)",
                  f"  first visible text <= {TARGET_FIRST} s after the message: {first:.2f} s: "
                  f"{'met' if first <= TARGET_FIRST else 'not met'}",
                  f"  complete reply <= {TARGET_COMPLETE} s after the model's last token: {after:.2f} s: "
                  f"{'met' if after <= TARGET_COMPLETE else 'not met'}",
                  f"  no burst over Discord's webhook bucket ({WEBHOOK_LIMIT[0]} requests, reset "
                  f"{WEBHOOK_LIMIT[1]:g} s after the first; emulated): {limited} 429s: "
                  f"{'met' if not limited else 'not met'}"]
        if instant is not None and whole is not None:
            calls, cap = statistics.fmean(instant.rest_calls), statistics.fmean(whole.rest_calls)
            lines.append(f"  REST calls per reply from an instant model, streamed <= a whole post's (issue 31): "
                         f"{calls:.1f} vs {cap:.1f}: {'met' if calls <= cap else 'not met'}")
    return lines

