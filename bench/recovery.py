"""`python -m bench.recovery`: how soon the bot recovers (issue 28 item 9), measured end to end.

The real bot (discord.py against the local Discord emulator, the OpenAI client against the local
fake server, its production waits: `RetryPolicy()`), run from a source checkout (it borrows the
test suite's emulator, fake model server and TCP proxy). Two probes, each repeated:

- PostgreSQL restarts: the store's connections go through a TCP proxy that is taken down for
  `--outage` seconds (the shared server itself is never stopped) while a person posts every
  `--every` seconds; printed: the seconds from the server's return until every message is stored,
  until the answer is visible, and whether the channel was told of the outage and of its end.
- Discord rate-limits the reply: ten 429s in a row with `retry_after` 0.5 s; printed: the seconds
  from the last 429 until the reply is visible.

Printed after the server's return: when the first message of the outage is stored (the wake-up),
when all are (the wake-up plus the time intake takes per message on this machine), when the answer
is shown.

Times are wall-clock seconds on this machine (a loaded one stretches them); docs/benchmarks.md
has a run.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.places import scratch_schema, unreachable

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
WEBHOOK = r"^/webhooks/\d+/[\w.\-]{60,}"
NOTICE = "I can't save anything to my database"
FIXED = "My database works again"


async def until(condition: Callable[[], Any], timeout: float, what: str) -> float:
    """Poll `condition` every 10 ms; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f}s: {what}")
        await asyncio.sleep(0.01)
    return time.monotonic()


def _answers(emu: Any) -> list[str]:
    return [m["content"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]


def _bot_says(emu: Any, text: str) -> bool:
    return any(text in m["content"] and not m.get("webhook_id") and m["author"]["id"] == str(emu.bot_user_id)
               for m in emu.channel_messages(emu.channel_id))


async def pg_restart(url: str, outage: float, every: float, args_trace: bool = False) -> dict[str, float | bool]:
    import asyncpg

    from bot.core.runtime.worker import RetryPolicy
    from storage import open_store
    from tests.discord.conftest import BotHarness
    from tests.discord_emulator import DiscordEmulator
    from tests.fakes.openai_server import FakeOpenAI, GroupChatScript
    from tests.fakes.tcp_proxy import TcpProxy

    script = GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")
    schema = f"rt_probe_{uuid.uuid4().hex[:10]}"
    async with scratch_schema(url, schema) as target:
        admin = await asyncpg.connect(url)
        async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server, TcpProxy.to_url(url) as proxy:
            harness = BotHarness(emu, llm_server, Path(tempfile.gettempdir()) / "unused.db")
            harness.open_store = lambda: open_store(proxy.url(target))
            harness.retry = RetryPolicy()
            await harness.start()
            try:
                await harness.setup_group(("planner", "plans"), mode="tags")
                await emu.user_post(emu.channel_id, emu.alice_id, "@planner before")
                await until(lambda: _answers(emu), 60, "the first answer")
                await harness.idle()
                await proxy.down(admin)
                down_at, posted = time.monotonic(), 0
                while time.monotonic() - down_at < outage:
                    posted += 1
                    await emu.user_post(emu.channel_id, emu.alice_id, f"@planner during {posted}")
                    await asyncio.sleep(every)
                await proxy.up()
                back = time.monotonic()
                stored: list[float] = []
                first: list[float] = []  # the first message of the outage stored

                async def all_stored() -> None:  # counted on the probe's own connection, not the bot's
                    seen = -1
                    while True:
                        count = int(await admin.fetchval(
                            f"SELECT count(*) FROM {schema}.messages WHERE author_type = 'user'"))
                        if count > 1 and not first:
                            first.append(time.monotonic())
                        if args_trace and count != seen:
                            seen = count
                            print(f"    {time.monotonic() - back:6.2f}s: {count} stored")
                        if count >= posted + 1:
                            stored.append(time.monotonic())
                            return
                        await asyncio.sleep(0.02)

                await asyncio.wait_for(all_stored(), 300)
                answered = await until(lambda: len(_answers(emu)) >= 2, 300, "the answer after the outage")
                await until(lambda: _bot_says(emu, FIXED) or not _bot_says(emu, NOTICE), 60, "the end told")
                return {"posted": posted, "first": first[0] - back, "stored": stored[0] - back,
                        "answered": answered - back, "told": _bot_says(emu, NOTICE),
                        "end told": _bot_says(emu, FIXED)}
            finally:
                await harness.stop()
                await admin.close()


async def rate_limited(times: int, retry_after: float) -> dict[str, float]:
    from bot.core.runtime.worker import RetryPolicy
    from tests.discord.conftest import BotHarness
    from tests.discord_emulator import DiscordEmulator
    from tests.fakes.openai_server import FakeOpenAI, GroupChatScript

    script = GroupChatScript(agents={"planner": ["First answer."]})
    with tempfile.TemporaryDirectory() as tmp:
        async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server:
            harness = BotHarness(emu, llm_server, Path(tmp) / "roundtable.db")
            harness.retry = RetryPolicy()
            await harness.start()
            try:
                await harness.setup_group(("planner", "plans"), mode="tags")
                body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": False}
                emu.fail_next("POST", WEBHOOK, 429, body=body, times=times)
                limited: list[float] = []

                def seen() -> bool:
                    refused = [r for r in emu.requests_matching("POST", WEBHOOK) if r.status == 429]
                    if len(refused) >= times and not limited:
                        limited.append(time.monotonic())
                    return bool(_answers(emu))

                await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
                shown = await until(seen, 900, "the reply")
                return {"after last 429": shown - limited[0] if limited else float("nan")}
            finally:
                await harness.stop()


def _figure(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"median {statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


async def main_async(args: argparse.Namespace) -> int:
    print(f"429 x{args.limits} with retry_after {args.retry_after}s: seconds from the last 429 to the reply shown")
    waits = []
    for _ in range(args.repeats):
        waits.append((await rate_limited(args.limits, args.retry_after))["after last 429"])
    print(f"  {_figure(waits)}")
    reason = args.pg_unreachable
    if reason is not None:
        print(f"PostgreSQL restart: skipped ({reason})")
        return 0
    print(f"PostgreSQL away {args.outage:g}s, a message every {args.every:g}s: seconds after it is back")
    firsts, stored, answered, told = [], [], [], []
    for _ in range(args.repeats):
        got = await pg_restart(args.pg, args.outage, args.every, args.trace)
        firsts.append(float(got["first"]))
        stored.append(float(got["stored"]))
        answered.append(float(got["answered"]))
        told.append(f"{int(got['posted'])} posted, outage told: {got['told']}, its end told: {got['end told']}")
    print(f"  the first stored:     {_figure(firsts)}")
    print(f"  every message stored: {_figure(stored)}")
    print(f"  the answer shown:     {_figure(answered)}")
    for line in told:
        print(f"  {line}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG, metavar="URL", help="the PostgreSQL server (a scratch schema)")
    parser.add_argument("--outage", type=float, default=30.0, help="seconds PostgreSQL is away (default 30)")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between messages meanwhile (0.5)")
    parser.add_argument("--limits", type=int, default=10, help="429s in a row (10)")
    parser.add_argument("--retry-after", type=float, default=0.5, help="their retry_after (0.5)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each probe (3)")
    parser.add_argument("--trace", action="store_true", help="print how many messages are stored as they are")
    parser.add_argument("-v", "--verbose", action="store_true", help="log the bot's warnings")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.verbose else logging.CRITICAL)
    try:
        import tests.discord_emulator  # noqa: F401  (the probe borrows the test suite's fakes)
    except ImportError:
        print("python -m bench.recovery runs from a source checkout (it uses tests/discord_emulator)")
        return 2
    args.pg_unreachable = unreachable(args.pg, timeout=3)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
