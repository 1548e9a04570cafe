"""The store's health: when failing writes become an outage people are told of, and when it ends."""
from __future__ import annotations

import asyncio

import pytest

from bot.core.rules.store_health import (
    UNREACHABLE,
    Outage,
    StoreHealth,
    fixed_notice,
    outage_notice,
    outage_status,
    span,
)
from tests.support import bound

APPEND = "INSERT INTO messages ..."
RENEW = "UPDATE leases ..."
FULL = "the database file or its disk is full"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tracked(after: float = 10.0) -> tuple[StoreHealth, Clock, list[Outage]]:
    clock = Clock()
    health = StoreHealth(after=after, clock=clock)
    told: list[Outage] = []
    health.subscribe(told.append)
    return health, clock, told


# (seconds from the start, what happened) -> what people were told
SCENARIOS = [
    pytest.param([(0, "fail"), (3, "fail"), (6, "append ok")], [], id="a blip is never told"),
    pytest.param([(0, "fail"), (4, "fail"), (10, "fail"), (12, "fail"), (20, "fail")], ["start 0"],
                 id="once per outage, not per failed write"),
    pytest.param([(0, "fail"), (2, "renew ok"), (5, "renew ok"), (11, "fail")], ["start 0"],
                 id="another kind of write working does not end it"),
    pytest.param([(0, "fail"), (11, "fail"), (12, "renew ok"), (30, "append ok"), (31, "fail")],
                 ["start 0", "fixed 0 after 30"], id="the failed write working ends it, once"),
    pytest.param([(0, "fail"), (11, "fail"), (200, "renew ok")], ["start 0", "fixed 0 after 200"],
                 id="writes working with no failure for a long while end it"),
    pytest.param([(0, "fail"), (11, "fail"), (20, "append ok"), (25, "fail"), (40, "fail")],
                 ["start 0", "fixed 0 after 20", "start 25"], id="a new outage is told again"),
]


@pytest.mark.parametrize("steps, expected", SCENARIOS)
def test_what_people_are_told(steps: list[tuple[float, str]], expected: list[str]) -> None:
    health, clock, told = tracked()
    start = clock.now
    for at, what in steps:
        clock.now = start + at
        if what == "fail":
            health.failed(FULL, [APPEND])
        else:
            health.committed({APPEND} if what == "append ok" else {RENEW})
    assert [f"start {o.since - start:g}" if o.fixed_at is None else
            f"fixed {o.since - start:g} after {o.fixed_at - o.since:g}" for o in told] == expected
    assert (health.outage is not None) == (bool(told) and told[-1].fixed_at is None)


def test_a_transaction_that_could_not_begin_ends_with_any_write() -> None:
    health, clock, told = tracked()
    health.failed("the database file is read-only", [])
    clock.now += 10
    health.check()
    assert told == [Outage(clock.now - 10, "the database file is read-only")]
    health.committed({RENEW})
    assert [o.fixed_at for o in told] == [None, clock.now] and not health.failing


def test_a_failure_no_write_repeats_is_told_by_the_timer() -> None:
    async def scenario() -> list[Outage]:
        health = StoreHealth(after=0.05)
        seen = asyncio.Event()
        told: list[Outage] = []

        def tell(outage: Outage) -> None:
            told.append(outage)
            seen.set()

        health.subscribe(tell)
        health.failed(FULL, [APPEND])  # and nothing is written after it
        await asyncio.wait_for(seen.wait(), bound(10))
        return told

    told = asyncio.run(scenario())
    assert len(told) == 1 and told[0].reason == FULL and told[0].fixed_at is None


def test_a_listener_that_fails_never_fails_the_write() -> None:
    health, _clock, _told = tracked(after=0)

    def broken(_outage: Outage) -> None:
        raise RuntimeError("bug")

    health.subscribe(broken)
    health.failed(FULL, [APPEND])  # no exception
    assert health.outage is not None and health.failing


@pytest.mark.parametrize("seconds, words", [(0, "0 s"), (44.6, "45 s"), (60, "1 min"), (150, "2 min"),
                                            (3600, "1 h"), (3900, "1 h 5 min")])
def test_span(seconds: float, words: str) -> None:
    assert span(seconds) == words


def test_texts() -> None:
    outage = Outage(since=100.0, reason=FULL)
    assert outage_notice(outage) == (
        "I can't save anything to my database: the database file or its disk is full. Messages posted now are "
        "not lost: they are saved and answered as soon as it works again. (This notice is posted directly and is "
        "not in the history: the database cannot store it.)")
    assert fixed_notice(Outage(100.0, FULL, fixed_at=190.0)) == (
        "My database works again (it could not be written for 2 min): messages posted meanwhile are saved and "
        "answered now.")
    assert outage_status(outage, 130.0) == (
        "nothing can be saved for 30 s now: the database file or its disk is full; messages posted meanwhile are "
        "saved and answered once it works again")


# A database server that cannot be reached (PostgreSQL restarting): the same rule as a refused write.
SERVER_SCENARIOS = [
    pytest.param([(0, "down"), (3, "down"), (6, "back")], [], id="a restart under 10 s is never told"),
    pytest.param([(0, "down"), (4, "down"), (12, "down"), (30, "back")], ["start 0", "fixed 0 after 30"],
                 id="one notice after 10 s, one at its end"),
    pytest.param([(0, "down"), (5, "renew ok"), (11, "down"), (20, "back")], ["start 0", "fixed 0 after 20"],
                 id="only the server answering ends it"),
    pytest.param([(0, "down"), (1, "fail"), (2, "back"), (12, "fail"), (13, "append ok")],
                 ["start 0", "fixed 0 after 13"], id="a refused write outlasts the server's return"),
    pytest.param([(0, "back"), (1, "append ok")], [], id="nothing to end"),
]


@pytest.mark.parametrize("steps, expected", SERVER_SCENARIOS)
def test_what_people_are_told_of_a_server_that_cannot_be_reached(steps: list[tuple[float, str]],
                                                                  expected: list[str]) -> None:
    health, clock, told = tracked()
    start = clock.now
    for at, what in steps:
        clock.now = start + at
        if what == "down":
            health.unreachable("connection refused")
        elif what == "back":
            health.reachable()
        elif what == "fail":
            health.failed(FULL, [APPEND])
        else:
            health.committed({APPEND} if what == "append ok" else {RENEW})
    assert [f"start {o.since - start:g}" if o.fixed_at is None else
            f"fixed {o.since - start:g} after {o.fixed_at - o.since:g}" for o in told] == expected
    assert all(o.reason in (UNREACHABLE, FULL) for o in told)


def test_whoever_waits_for_the_server_is_woken_when_it_answers_not_at_the_end_of_the_wait() -> None:
    async def scenario() -> tuple[bool, bool]:
        health = StoreHealth(after=3600)
        health.unreachable("connection refused")
        waiting = asyncio.create_task(health.until_reachable(3600))  # an hour: only the wake-up ends it soon
        await asyncio.sleep(0)
        still = not waiting.done()
        health.reachable()
        await asyncio.wait_for(waiting, 30)
        return still, health.down

    still_waiting_before, down_after = asyncio.run(scenario())
    assert still_waiting_before and not down_after


def test_a_server_that_answered_already_is_tried_again_at_once() -> None:
    async def scenario() -> None:
        health = StoreHealth()
        await asyncio.wait_for(health.until_reachable(3600), 30)  # nothing to wait for

    asyncio.run(scenario())
