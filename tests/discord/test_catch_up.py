"""Catch-up that cannot skip: messages posted while the bot was stopped or disconnected are
stored once, in Discord's order, whatever happens in other channels or to the bot's own posts."""
from __future__ import annotations

import pytest

from tests.fakes.openai_server import GroupChatScript, Reply
from tests.support import eventually, quiet_period

WEBHOOK = r"^/webhooks/\d+/[\w.\-]{60,}"


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")


def people(emu, channel_id: str) -> list[str]:
    return [m["id"] for m in emu.channel_messages(channel_id)
            if not m.get("webhook_id") and m["author"]["id"] != emu.bot_user_id]


async def stored_people(harness, group_id: int) -> list[str]:
    return [m.external_ids[0] for m in await harness.store.thread.messages(group_id) if m.author_type == "user"]


async def wait_all_stored(harness, channels: dict[int, str]) -> None:
    async def done() -> bool:
        return all([await stored_people(harness, g) == people(harness.emu, c) for g, c in channels.items()])
    try:
        await eventually(done, "every person's message stored", interval=0.05)
    except TimeoutError:
        raise AssertionError({g: (len(await stored_people(harness, g)), len(people(harness.emu, c)))
                              for g, c in channels.items()}) from None
    await harness.idle()


async def test_offline_messages_in_two_channels_survive_live_messages_and_a_republished_reply(harness, script):
    emu = harness.emu
    other = emu.add_channel(emu.guild_id, "second")
    await emu.wait_for(lambda: harness.bot.get_channel(int(other)) is not None, timeout=5)
    await harness.setup_group(("planner", "plans"), mode="tags")
    for command, options in (("roundtable setup", {"mode": "tags"}),
                             ("agent add", {"name": "planner", "role": "plans", "prompt": "You plan."})):
        await (await emu.invoke_command(emu.guild_id, other, emu.alice_id, command, options)).wait_response(5)
    groups = {1: emu.channel_id, 2: other}
    # a reply that Discord refuses until the restart: it is re-sent first thing on start-up
    emu.fail_next("POST", WEBHOOK, 403, body={"message": "Missing Permissions", "code": 50013}, times=10_000)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner before the stop")
    await emu.wait_for(lambda: emu.requests_matching("POST", WEBHOOK), timeout=10)
    await harness.stop()
    emu._faults.clear()
    for i in range(3):  # posted while the bot is away, in both channels
        await emu.user_post(emu.channel_id, emu.alice_id, f"@planner away {i} here")
        await emu.user_post(other, emu.bob_id, f"@planner away {i} there")
    reading = emu.hold("GET", r"^/channels/\d+/messages$", times=None)  # the catch-up is slow today
    await harness.start(wait_ready=False)
    await emu.wait_until_ready()
    await reading.wait_arrived()
    for i in range(2):  # live messages arrive in both channels before the catch-up has read anything
        await emu.user_post(other, emu.bob_id, f"@planner live {i} there")
        await emu.user_post(emu.channel_id, emu.alice_id, f"@planner live {i} here")
    await quiet_period()  # the bot takes them in (held behind the catch-up: nothing shows it outside)
    reading.release()
    await wait_all_stored(harness, groups)
    for group_id, channel in groups.items():
        assert await stored_people(harness, group_id) == people(emu, channel)  # once each, in Discord's order
        texts = [m.text for m in await harness.store.thread.messages(group_id) if m.author_type == "user"]
        assert len(texts) == (6 if group_id == 1 else 5)
    posted = [m["content"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]
    assert len(posted) == len(set(posted)) and posted[0] == "planner answer 1"  # re-sent once, first


async def test_a_gateway_session_that_cannot_resume_loses_nothing(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    script.set_agent("planner", [Reply("slow answer", delay=1.0)])
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner first")
    await emu.wait_for(lambda: script.participant_order, timeout=10, what="the model call")
    emu.invalidate_sessions(resumable=False)  # the session is gone: these never reach the gateway
    await emu.user_post(emu.channel_id, emu.bob_id, "@planner during the outage")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner also during the outage")
    # the agent's slow answer is posted while the bot reconnects (its id is newer than both)
    await emu.wait_for(lambda: len([s for s in emu.sessions.values() if s.ready and not s.invalid]) >= 1,
                       timeout=15, what="a new session")
    await wait_all_stored(harness, {1: emu.channel_id})
    texts = [m.text for m in await harness.store.thread.messages(1) if m.author_type == "user"]
    assert texts == ["@planner first", "@planner during the outage", "@planner also during the outage"]
    await emu.wait_for(lambda: len([m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]) >= 2,
                       timeout=15, what="the answers")


async def test_a_cut_network_loses_nothing_and_posts_nothing_twice(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    script.set_agent("planner", [Reply("answer before the cut", delay=0.3), "answer after the cut"])
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner first")
    await emu.wait_for(lambda: script.participant_order, timeout=10, what="the model call")
    emu.fail_next("*", r"^/(webhooks|channels)/", 0, times=40)  # every REST call is reset ...
    await emu.disconnect_all()  # ... and the gateway drops
    await emu.user_post(emu.channel_id, emu.bob_id, "@planner during the cut")
    await emu.wait_for(lambda: len([r for r in emu.requests if r.injected]) >= 3, timeout=30,
                       what="the bot's calls to be cut")  # the answer's post, and tries again
    emu._faults.clear()
    await wait_all_stored(harness, {1: emu.channel_id})
    await emu.wait_for(lambda: len([m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]) >= 2,
                       timeout=20, what="both answers")
    await harness.idle()
    posted = [m["content"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]
    assert posted == ["answer before the cut", "answer after the cut"]
    rows = await harness.store.thread.messages(1)
    assert [r.text for r in rows][0::3] == ["@planner first", "answer after the cut"]
    assert {r.text for r in rows[1:3]} == {"answer before the cut", "@planner during the cut"}  # either came first


async def test_a_message_posted_while_setup_is_still_running_is_not_lost(harness, script):
    emu = harness.emu
    creating = emu.hold("POST", r"^/channels/\d+/webhooks$")  # Discord is slow to create the webhook
    setup = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "roundtable setup", {"mode": "tags"})
    await creating.wait_arrived()
    early = await emu.user_post(emu.channel_id, emu.bob_id, "hello, is it on yet?")  # seen before the group exists
    await quiet_period(0.2)  # the bot sees it before the group exists (nothing stored shows it)
    creating.release()
    assert "Roundtable is on" in (await setup.wait_response(5))["data"]["content"]
    later = await emu.user_post(emu.channel_id, emu.alice_id, "now it is")
    await wait_all_stored(harness, {1: emu.channel_id})
    assert await stored_people(harness, 1) == [early["id"], later["id"]]
