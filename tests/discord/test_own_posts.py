"""The bot's own posts are never a person's message, and a copy taken in as one (by another
process) never stops the group: the agent row keeps the post, the rows behind it go out."""
from __future__ import annotations

import aiohttp
import pytest

from bot.core.models import NewMessage
from tests.discord.test_delivery import WEBHOOK, wait_confirmed, webhook_messages
from tests.fakes.openai_server import GroupChatScript


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(agents={"planner": ["First answer.", "Second answer."]})


async def execute(emu, hook, content: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{emu.api_base}/webhooks/{hook.id}/{hook.token}", params={"wait": "true"},
                                json={"content": content, "username": "planner"}) as resp:
            assert resp.status == 200, await resp.text()


async def test_a_post_through_any_webhook_this_bot_made_is_never_taken_in(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags", allow_bots=True)
    ours = emu.add_webhook(emu.channel_id, "Roundtable")  # e.g. another process's, made at the same setup
    theirs = emu.add_webhook(emu.channel_id, "Alerts", made_by=emu.alice_id)
    await execute(emu, ours, "An agent's reply.")
    await execute(emu, theirs, "The build is green.")
    await emu.user_post(emu.channel_id, emu.alice_id, "after them")  # taken in after both, in channel order
    await wait_confirmed(harness, 3)  # "after them" (tags mode: planner answers it)
    people = [r.text for r in await harness.store.thread.messages(1) if r.author_type == "user"]
    assert people == ["The build is green.", "after them"]


async def test_an_agent_post_another_process_took_in_as_a_persons_message_does_not_stop_the_group(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    answer = emu.hold("POST", WEBHOOK, after=True)  # the post is in the channel; its answer waits
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    (_request,) = await answer.wait_arrived()
    posted = next(m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id"))
    # Meanwhile a process that did not know the webhook stored the post as a person's message.
    await harness.store.thread.append_user_message(1, NewMessage(
        "user", "planner", posted["content"], author_user_id=posted["author"]["id"], external_ids=(posted["id"],)))
    answer.release()
    row = await wait_confirmed(harness, 2)
    assert row.external_ids == (posted["id"],)
    assert (await harness.store.thread.find_message_by_external_id(posted["id"])).seq == 2
    assert (await harness.store.thread.get_message(1, 3)).external_ids == ()  # the copy stays, without the post
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner two")
    await emu.wait_for(lambda: "Second answer." in webhook_messages(emu), what="the next reply")
    await harness.idle()
    assert webhook_messages(emu) == ["First answer.", "Second answer."]
    assert all(r.confirmed for r in await harness.store.thread.messages(1))
