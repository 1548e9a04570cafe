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
        line = await ownership.health(await harness.store.list_groups())
        assert line == ("health: leading 1 of 1 groups in scope, 0 led elsewhere; "
                        "2 agent deliveries pending; 1 runs in flight")
        ownership._health_at -= 61  # a minute passed
        with caplog.at_level(logging.INFO, logger="bot.core.ownership"):
            await ownership.keep_once()
            await ownership.keep_once()  # not again within the minute
        assert [r.getMessage() for r in caplog.records].count(line) == 1
        llm.gate.set()
        await harness.idle()
        assert (await ownership.health(await harness.store.list_groups())).endswith(
            "0 agent deliveries pending; 0 runs in flight")
