"""The "Regenerate reply" message menu (SPEC §8, §12), through the real bot and the Discord emulator:
the newest agent message is written again and edited in place (a reply of several messages: the first
ones edited, the rest posted or deleted as the new text needs), refusals are private and say why."""
from __future__ import annotations

from typing import Any

import pytest

from bot.core.models import NewMessage, RunResult
from storage.store import SqliteStore
from tests.fakes.openai_server import GroupChatScript

MENU = "Regenerate reply"
SHORT = "Day 1: temples in Asakusa."
LONG = ("Day 1, morning: " + "temples and gardens " * 70).strip() + "\n\n" + \
    ("Day 1, evening: " + "sushi and izakaya " * 70).strip()  # two Discord messages
AGAIN = "Day 1: Ueno park, then the museum."


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(selector=["TERMINATE"], agents={"planner": [SHORT, LONG, AGAIN]})


def hook_messages(emu) -> list[dict[str, Any]]:
    return [m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]


async def regenerate(emu, user: str, message_id: str) -> dict[str, Any]:
    """The menu's answer: "thinking…" for the person only (a model call may follow), then a private follow-up."""
    rec = await emu.invoke_message_command(emu.guild_id, emu.channel_id, user, MENU, message_id)
    first = await rec.wait_response(10)
    assert first["type"] == 5 and first["ephemeral"], first
    (answer,) = await rec.wait_followups(1, 60)
    assert answer["flags"] & 64, answer  # ephemeral
    return answer


async def test_regenerate_edits_the_reply_in_place_and_refuses_others(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    carol = emu.add_member(emu.guild_id, "carol", global_name="Carol")
    task = await emu.user_post(emu.channel_id, emu.bob_id, "@planner plan day 1")
    await emu.wait_for(lambda: len(hook_messages(emu)) == 1, timeout=30)
    await harness.idle()
    (first,) = hook_messages(emu)
    assert first["content"] == SHORT

    refused = await regenerate(emu, carol, first["id"])
    assert refused["content"] == "Only Bob (who started this task) or an operator can regenerate this reply."
    refused = await regenerate(emu, emu.bob_id, task["id"])
    assert refused["content"].startswith("#1 is a message from Bob, not an agent")
    assert script.participant_order == ["planner"]  # no model call for a refusal

    done = await regenerate(emu, emu.bob_id, first["id"])  # the person who started the task
    assert done["content"].startswith("planner's reply was written again (run #2)")
    await emu.wait_for(lambda: len(hook_messages(emu)) == 2, timeout=30)
    await harness.idle()
    edited, added = hook_messages(emu)
    assert edited["id"] == first["id"] and edited["content"].startswith("Day 1, morning:")  # edited in place
    assert added["content"].startswith("Day 1, evening:")  # the part the new text needs more
    assert script.participant_order == ["planner", "planner"]

    done = await regenerate(emu, emu.alice_id, added["id"])  # an operator; any part names the message
    assert done["content"].startswith("planner's reply was written again (run #3)")
    await emu.wait_for(lambda: [m["content"] for m in hook_messages(emu)] == [AGAIN], timeout=30)
    await harness.idle()
    (last,) = hook_messages(emu)
    assert last["id"] == first["id"]  # the first part edited, the second deleted: one message, never a copy

    assert harness.store is not None
    versions = await harness.store.thread.message_versions((await harness.store.groups.list_groups())[0].id)
    assert [(v.version, v.text) for v in versions] == [(1, SHORT), (2, LONG)]
    helped = await harness.command("help", {"topic": "chat"}, user=carol)
    assert '"Regenerate reply" has the newest agent message written again' in helped["data"]["content"]
    assert "⏹ Stop ends that turn" in helped["data"]["content"]  # the buttons are in /help chat too
    # (the help's interaction came after the part's deletion on the gateway: its event was taken by now)
    row = await harness.store.thread.get_message(versions[0].group_id, 2)
    assert (row.text, row.deleted, row.external_ids) == (AGAIN, False, (first["id"],))  # the deleted part was no row's


async def test_a_regenerate_settled_before_a_crash_is_edited_in_after_the_restart(harness, script):
    """The bot went down after the regenerate's run was settled and before the message was edited:
    the next start edits the same Discord message into the new text (never a second copy)."""
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.bob_id, "@planner plan day 1")
    await emu.wait_for(lambda: len(hook_messages(emu)) == 1, timeout=30)
    await harness.idle()
    (first,) = hook_messages(emu)
    await harness.stop()

    store = await SqliteStore.open(harness.db)
    try:  # what the stopped process had committed: the run settled, the message not edited yet
        (group,) = await store.groups.list_groups()
        planner = await store.roster.find_agent(group.id, "planner")
        assert planner is not None and await store.leases.acquire_lease(group.id, 60) is None
        run = await store.runs.start_run(group.id, planner.id, "regenerate", 1, replaces=2)
        new = NewMessage("agent", "planner", AGAIN, author_agent_id=planner.id, source_run_id=run.id, token_count=9)
        await store.runs.finish_run(run.id, RunResult("posted", reply=new), cap=0)
        await store.leases.release_leases()
    finally:
        await store.close()

    await harness.start()
    await emu.wait_for(lambda: [m["content"] for m in hook_messages(emu)] == [AGAIN], timeout=30)
    await harness.idle()
    (edited,) = hook_messages(emu)
    assert edited["id"] == first["id"]
    assert not [r for r in harness.webhook_posts() if r.get("content") == AGAIN]  # edited, never posted
