"""The health line in the log: groups led, leases elsewhere, deliveries pending, runs in flight."""
from __future__ import annotations

import asyncio
import logging

from tests.fakes.scripted_llm import ScriptedLLM


async def test_the_health_line_counts_what_waits_and_is_logged_once_a_minute(harness, caplog):
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} {n}")
    llm.gate = asyncio.Event()
    async with harness.running(llm, mode="tags"):
        await harness.say("@planner @budget go")
        await harness.until_called()
        ownership = harness.engine.ownership
        line = await ownership.health(await harness.store.groups.list_groups())
        assert line == ("health: leading 1 of 1 groups in scope, 0 led elsewhere; "
                        "2 agent deliveries pending; 1 runs in flight")
        ownership._health_at -= 61  # a minute passed
        with caplog.at_level(logging.INFO, logger="bot.core.runtime.ownership"):
            await ownership.keep_once()
            await ownership.keep_once()  # not again within the minute
        assert [r.getMessage() for r in caplog.records].count(line) == 1
        llm.gate.set()
        await harness.idle()
        assert (await ownership.health(await harness.store.groups.list_groups())).endswith(
            "0 agent deliveries pending; 0 runs in flight")


async def test_a_process_that_leads_nothing_does_not_try_every_lease_each_tick(place) -> None:
    from bot.core.models import GroupSettings
    from bot.core.runtime.engine import Engine
    from bot.llm.tokens import make_token_counter
    from tests.fakes.surface import RecordingSurface

    async with await place.open() as first_store, await place.open() as second_store:
        for n in range(3):
            await first_store.groups.create_group(f"console:g{n}", f"g{n}", GroupSettings())
        first = Engine(first_store, ScriptedLLM(), RecordingSurface(), make_token_counter())
        second = Engine(second_store, ScriptedLLM(), RecordingSurface(), make_token_counter())
        await first.start()
        await second.start()
        try:
            assert len(first.ownership.owned) == 3 and not second.ownership.owned
            tries: list[int] = []
            acquire = second_store.leases.acquire_lease

            async def counted(group_id: int, ttl: float) -> str | None:
                tries.append(group_id)
                return await acquire(group_id, ttl)

            second_store.leases.acquire_lease = counted
            for _ in range(3):
                await second.ownership.keep_once()
            assert tries == []  # every lease is held by a live process: no write to try them
            await first.close()  # released: the next look takes them
            await second.ownership.keep_once()
            assert sorted(tries) == sorted(g.id for g in await second_store.groups.list_groups())
            assert len(second.ownership.owned) == 3
        finally:
            await first.close()
            await second.close()
