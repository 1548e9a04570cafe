"""Schedules through the Discord emulator: added by slash command, fired by the ticker on an injected clock."""
from __future__ import annotations

import time

import pytest

from tests.fakes.openai_server import GroupChatScript

MINUTE = 60.0


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(agents={"planner": ["@budget does this week's plan still fit?"],
                                   "budget": ["It fits: $1,450 of $1,500. TERMINATE"]})


async def test_a_schedule_added_by_slash_command_runs_the_agent_when_due(harness, script) -> None:
    h, emu = harness, harness.emu
    await h.setup_group(("planner", "plans"), ("budget", "checks costs"))
    clock = FakeClock(time.time())
    await h.stop()  # again with the injected clock, and a ticker that looks often
    h.engine_options = {"clock": clock, "schedule_tick": 0.02}
    await h.start()

    refused = await h.command("agent schedule add", {"name": "planner", "every": "30m", "prompt": "x"},
                              user=emu.bob_id)
    assert refused["ephemeral"] and "Manage Server" in refused["data"]["content"]
    bad = await h.command("agent schedule add", {"name": "planner", "at": "25:00", "prompt": "x"})
    assert bad["data"]["content"] == "at must be a 24-hour time HH:MM, such as 09:00 or 17:30 (got '25:00')."
    added = await h.command("agent schedule add",
                            {"name": "planner", "every": "30m", "prompt": "check this week's plan"})
    assert added["data"]["content"].startswith("Scheduled #1 for planner, every 30m: next run "), added
    listed = await h.command("agent schedule list", user=emu.bob_id)  # everyone may look
    fields = h.embed_fields(listed)
    assert list(fields) == ["#1 planner"] and "every 30m; next run" in fields["#1 planner"]
    assert "check this week's plan" in fields["#1 planner"]
    status = h.embed_fields(await h.command("roundtable status"))
    assert status["next schedule"].startswith("#1 planner, every 30m; next run ")
    assert h.webhook_posts() == []

    clock.now += 30 * MINUTE + 1  # due: the ticker fires it, the agent runs and tags budget, who answers
    await emu.wait_for(lambda: len(h.webhook_posts()) >= 2, timeout=15)
    await h.idle()
    posts = h.webhook_posts()
    assert [(p["username"], p["content"]) for p in posts] == [
        ("planner", "@budget does this week's plan still fit?"), ("budget", "It fits: $1,450 of $1,500.")]
    channel = [m["content"] for m in emu.channel_messages(emu.channel_id)]
    task = "⏰ Scheduled for @planner: check this week's plan"
    assert channel.count(task) == 1  # posted by the bot, so people see why planner speaks
    assert channel.index(task) < channel.index("@budget does this week's plan still fit?")
    assert script.participant_order == ["planner", "budget"]
    assert h.engine is not None and await h.engine.scheduler.tick() == []  # once: the next slot is ahead

    removed = await h.command("agent schedule remove", {"id": 1})
    assert removed["data"]["content"] == "Removed schedule #1 (planner, every 30m)."
    gone = await h.command("agent schedule remove", {"id": 1})
    assert gone["data"]["content"] == "There is no schedule #1 here; /agent schedule list shows the ids."
    empty = await h.command("agent schedule list")
    assert empty["data"]["content"] == "No schedules here: add one with /agent schedule add."
