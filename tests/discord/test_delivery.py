"""Delivery that holds when Discord does not: refusals, rate limits, 5xx, resets, a locked
database, a failing typing endpoint. Everything arrives without a restart, once, in order."""
from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

import bot.surfaces.discord.hooks as hooks
import bot.surfaces.discord.posting as posting
from tests.discord_emulator import DiscordEmulator, Hold
from tests.fakes.openai_server import GroupChatScript
from tests.support import eventually, quiet_period

WEBHOOK = r"^/webhooks/\d+/[\w.\-]{60,}"
CHANNEL_MESSAGES = r"^/channels/\d+/messages$"


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(agents={"planner": ["First answer.", "Second answer."]})


async def two_questions(harness) -> list[str]:
    """Ask twice (the second while the first reply may still be on its way); the posts, in order."""
    emu = harness.emu
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await emu.wait_for(lambda: emu.requests_matching("POST", WEBHOOK), timeout=10, what="the first post attempt")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner two")
    await emu.wait_for(lambda: len(webhook_messages(emu)) >= 2, timeout=20, what="both replies")
    await harness.idle()
    return webhook_messages(emu)


def webhook_messages(emu: DiscordEmulator) -> list[str]:
    return [m["content"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]


def webhook_authors(emu: DiscordEmulator) -> list[tuple[str, str]]:
    return [(m["author"]["username"], m["content"]) for m in emu.channel_messages(emu.channel_id)
            if m.get("webhook_id")]


@pytest.mark.parametrize("fault", [
    dict(status=403, body={"message": "Missing Permissions", "code": 50013}, times=1),
    dict(status=429, times=10),
    dict(status=503, times=8),
    dict(status=0, times=2),  # the connection is reset before Discord saw the post
    dict(status=0, times=1, after=True),  # Discord posted it, then the connection was reset
    dict(status=502, times=1, after=True),  # Discord posted it, then a proxy answered 502
])
async def test_a_post_discord_did_not_take_arrives_without_a_restart_once_in_order(harness, script, fault):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    emu.fail_next("POST", WEBHOOK, **fault)
    assert await two_questions(harness) == ["First answer.", "Second answer."]
    rows = await harness.store.thread.messages(1)
    assert [(r.author_name, r.confirmed, len(r.external_ids)) for r in rows if r.author_type == "agent"] == [
        ("planner", True, 1), ("planner", True, 1)]
    assert script.participant_order == ["planner", "planner"]  # re-sent, never re-generated


async def test_one_refusal_that_the_retry_gets_past_is_neither_told_nor_an_error(harness, script, caplog):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    emu.fail_next("POST", WEBHOOK, 403, body={"message": "Missing Permissions", "code": 50013})
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await wait_confirmed(harness, 2)
    assert [r.status for r in agent_post_requests(emu)] == [403, 200]
    assert webhook_messages(emu) == ["First answer."]
    assert [m["content"] for m in emu.channel_messages(emu.channel_id)
            if m["author"]["id"] == str(emu.bot_user_id)] == []  # no "I can't post in #general ..."
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any(r.levelno == logging.WARNING and "403" in r.getMessage() for r in caplog.records)
    status = await harness.command("roundtable status")
    assert "delivery problem" not in harness.embed_fields(status)


async def test_a_lasting_refusal_is_told_once_shown_in_status_and_cleared_when_fixed(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    emu.fail_next("POST", WEBHOOK, 403, body={"message": "Missing Permissions", "code": 50013}, times=10_000)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await emu.wait_for(lambda: len(emu.requests_matching("POST", WEBHOOK)) >= 4, timeout=10, what="retries")
    alerts = [m for m in emu.channel_messages(emu.channel_id) if "Missing Permissions" in m["content"]]
    assert len(alerts) == 1 and alerts[0]["author"]["id"] == str(emu.bot_user_id)
    assert "Manage Webhooks" in alerts[0]["content"]
    status = await harness.command("roundtable status")
    assert "Manage Webhooks" in harness.embed_fields(status)["delivery problem"]
    assert status["data"]["embeds"][0]["color"] == 0xE74C3C  # red
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner two")  # waits behind the first reply
    async def two_stored() -> bool:
        return "@planner two" in [m.text for m in await harness.store.thread.messages(1)]
    await eventually(two_stored, "'two' stored")
    tried = len(emu.requests_matching("POST", WEBHOOK))
    await emu.wait_for(lambda: len(emu.requests_matching("POST", WEBHOOK)) >= tried + 2, timeout=30,
                       what="two more tries of the first reply, with 'two' stored")
    assert script.participant_order == ["planner"]  # no new run while people cannot see the last one
    emu._faults.clear()  # an admin grants the permission
    await emu.wait_for(lambda: len(webhook_messages(emu)) >= 2, timeout=15, what="both replies")
    await harness.idle()
    assert webhook_messages(emu) == ["First answer.", "Second answer."]
    assert (await harness.store.groups.get_group(1)).delivery_problem is None
    assert len([m for m in emu.channel_messages(emu.channel_id) if "Missing Permissions" in m["content"]]) == 1


async def test_a_long_reply_cut_off_between_chunks_resumes_with_the_missing_chunks(harness, script):
    emu = harness.emu
    long_reply = "\n\n".join(f"Paragraph {i}: " + "words " * 150 for i in range(6))
    script.set_agent("planner", [long_reply])
    await harness.setup_group(("planner", "plans"), mode="tags")
    first = emu.hold("POST", WEBHOOK, after=True)  # chunk 1 is posted; its answer waits
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner write it all")
    await first.wait_arrived()
    emu.fail_next("POST", WEBHOOK, 0, after=True)  # chunk 2 reaches the channel, its answer is lost
    first.release()
    row = await wait_confirmed(harness, 2)
    posted = webhook_messages(emu)
    assert len(posted) == len(row.external_ids) >= 3 and len(set(posted)) == len(posted)
    assert "".join(posted).replace("\n", "").replace(" ", "") == long_reply.replace("\n", "").replace(" ", "")


async def wait_confirmed(harness, seq: int):
    async def confirmed():
        rows = await harness.store.thread.messages(1)
        return rows[seq - 1] if len(rows) >= seq and rows[seq - 1].confirmed else None
    row = await eventually(confirmed, f"row {seq} confirmed")
    await harness.idle()
    return row


async def test_a_failing_typing_endpoint_never_delays_the_model_call(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    typing = r"^/channels/\d+/typing$"
    emu.fail_next("POST", typing, 500, times=100)  # discord.py tries 5 times, waiting 1+3+5+7 s between
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await emu.wait_for(lambda: harness.llm_server.requests, timeout=30, what="the model call")
    assert len(emu.requests_matching("POST", typing)) < 5  # called before discord.py gave up on typing
    await emu.wait_for(lambda: webhook_messages(emu), timeout=10, what="the reply")


async def test_a_message_is_stored_after_the_database_was_locked_longer_than_the_busy_timeout(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    await harness.stop()
    await harness.start(busy_timeout_ms=200)
    other = sqlite3.connect(harness.db, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process writes for longer than the busy timeout
        await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
        await quiet_period(1.5)  # longer than the busy timeout: the store gave up at least once meanwhile
        assert len(await harness.store.thread.messages(1)) == 0
    finally:
        other.execute("ROLLBACK")
        other.close()
    await emu.wait_for(lambda: webhook_messages(emu), timeout=15, what="the reply")
    await harness.idle()
    rows = await harness.store.thread.messages(1)
    assert [(r.author_name, r.text) for r in rows] == [("Alice", "@planner one"), ("planner", "First answer.")]


async def test_a_row_is_posted_under_the_name_it_was_written_with(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    first = emu.hold("POST", WEBHOOK)  # the first attempt waits before Discord takes it ...
    emu.fail_next("POST", WEBHOOK, 503)  # ... and is then refused
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await first.wait_arrived()
    await harness.command("agent rename", {"name": "planner", "new_name": "chef"})
    first.release()
    await wait_confirmed(harness, 2)
    assert webhook_authors(emu) == [("planner", "First answer.")]


@pytest.mark.parametrize("read_fault", [dict(status=403, body={"message": "Missing Access", "code": 50001}),
                                        dict(status=0, times=2)])  # a reset (aiohttp repeats a GET once)
async def test_a_rename_while_an_unsure_post_is_looked_for_does_not_post_it_again(harness, script, read_fault):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    emu.fail_next("POST", WEBHOOK, 502, after=True)  # in the channel; its answer is lost
    reading = emu.hold("GET", CHANNEL_MESSAGES)  # the read-back waits ...
    emu.fail_next("GET", CHANNEL_MESSAGES, **read_fault)  # ... then fails: the next attempt reads again
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await reading.wait_arrived()
    await harness.command("agent rename", {"name": "planner", "new_name": "chef"})
    reading.release()
    row = await wait_confirmed(harness, 2)
    assert webhook_authors(emu) == [("planner", "First answer.")]
    assert len(row.external_ids) == 1


def move_webhooks(emu: DiscordEmulator, name: str) -> str:
    """An admin moves the group's webhook to another channel (Server Settings > Integrations)."""
    elsewhere = emu.add_channel(emu.guild_id, name)
    for hook in emu.webhooks.values():
        if hook.channel_id == emu.channel_id:
            hook.channel_id = elsewhere  # what PATCH /webhooks/{id} {"channel_id"} does
    return elsewhere


def posts_in(emu: DiscordEmulator, channel_id: str) -> list[str]:
    return [m["content"] for m in emu.channel_messages(channel_id) if m.get("webhook_id")]


async def test_a_webhook_moved_to_another_channel_is_replaced_and_its_stray_post_deleted(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await wait_confirmed(harness, 2)
    elsewhere = move_webhooks(emu, "announcements")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner two")
    row = await wait_confirmed(harness, 4)
    assert webhook_messages(emu) == ["First answer.", "Second answer."]
    assert posts_in(emu, elsewhere) == []  # landed there, and deleted
    assert len(emu.requests_matching("DELETE", WEBHOOK + r"/messages/\d+$")) == 1
    assert row.external_ids == (emu.channel_messages(emu.channel_id)[-1]["id"],)
    assert len(emu.requests_matching("POST", r"^/channels/\d+/webhooks$")) == 2  # setup's, and its replacement


async def test_a_moved_webhook_that_cannot_be_replaced_is_reported(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    move_webhooks(emu, "announcements")
    emu.deny_manage_webhooks = True
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await emu.wait_for(lambda: [m for m in emu.channel_messages(emu.channel_id) if "Manage Webhooks" in m["content"]],
                       what="the alert")
    emu.deny_manage_webhooks = False
    await wait_confirmed(harness, 2)
    assert webhook_messages(emu) == ["First answer."]
    assert (await harness.store.groups.get_group(1)).delivery_problem is None


def agent_post_requests(emu: DiscordEmulator) -> list[Any]:
    return [r for r in emu.requests_matching("POST", WEBHOOK)
            if not r.path.startswith(f"/webhooks/{emu.application_id}/")]  # not interaction follow-ups


@pytest.fixture
def slow_discord(monkeypatch):
    """Production's waits for a post Discord may commit late, scaled down."""
    monkeypatch.setattr(hooks, "POST_TIMEOUT", 0.5)
    monkeypatch.setattr(posting, "LATE_READS", (0.3, 0.6))
    monkeypatch.setattr(posting, "LATE_CHECKS", (0.3, 1.0))


async def test_a_post_discord_commits_soon_after_the_bot_gave_up_is_found_not_sent_again(harness, script, slow_discord):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    reads = len(emu.requests_matching("GET", CHANNEL_MESSAGES))
    slow = emu.hold("POST", WEBHOOK)  # Discord has the request; it takes it only after the bot gave up
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await slow.wait_arrived()
    await emu.wait_for(lambda: len(emu.requests_matching("GET", CHANNEL_MESSAGES)) > reads, what="the read-back")
    slow.release()
    row = await wait_confirmed(harness, 2)
    assert webhook_messages(emu) == ["First answer."]
    assert len(agent_post_requests(emu)) == 1
    assert row.external_ids == (emu.channel_messages(emu.channel_id)[-1]["id"],)


async def test_a_post_discord_commits_after_it_was_sent_again_is_deleted(harness, script, slow_discord):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    slow = emu.hold("POST", WEBHOOK)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await slow.wait_arrived()
    row = await wait_confirmed(harness, 2)  # sent again once the reads found nothing
    slow.release()  # then Discord commits the first request too
    await emu.wait_for(lambda: emu.requests_matching("DELETE", WEBHOOK + r"/messages/\d+$"), what="the delete")
    assert webhook_messages(emu) == ["First answer."]
    assert [m["id"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")] == list(row.external_ids)


class LateLooks:
    """Production's LATE_CHECKS scaled down, which let the first request of a post land right after
    the `land_after`-th look for it: that request is released then, and the next look's read waits
    until the copy is in the channel. `looked_at`: the looks begun, in production seconds."""

    def __init__(self, emu: DiscordEmulator, slow: Hold, land_after: int, scale: float = 0.01) -> None:
        self.emu, self.slow, self.land_after, self.scale = emu, slow, land_after, scale
        self.checks = posting.LATE_CHECKS
        self.looked_at: list[float] = []
        self.landed_after: float | None = None
        self.next_read: Hold | None = None

    def __iter__(self) -> Iterator[float]:
        for at in self.checks:
            if len(self.looked_at) == self.land_after:  # the earlier looks found nothing: the copy lands now
                self.landed_after = self.looked_at[-1]
                self.next_read = self.emu.hold("GET", CHANNEL_MESSAGES)
                self.slow.release()
            self.looked_at.append(at)
            yield at * self.scale


@pytest.mark.parametrize("land_after", [1, 2, 3])
async def test_a_late_copy_is_deleted_within_20_s_of_landing(harness, script, monkeypatch, land_after):
    emu = harness.emu
    monkeypatch.setattr(hooks, "POST_TIMEOUT", 0.5)
    monkeypatch.setattr(posting, "LATE_READS", (0.3, 0.6))
    await harness.setup_group(("planner", "plans"), mode="tags")
    slow = emu.hold("POST", WEBHOOK)
    looks = LateLooks(emu, slow, land_after)
    monkeypatch.setattr(posting, "LATE_CHECKS", looks)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
    await slow.wait_arrived()
    row = await wait_confirmed(harness, 2)  # sent again once the reads found nothing
    await emu.wait_for(lambda: looks.next_read is not None and len(webhook_messages(emu)) == 2, timeout=15,
                       what="the late copy")
    looks.next_read.release()  # the next look reads the channel
    await emu.wait_for(lambda: emu.requests_matching("DELETE", WEBHOOK + r"/messages/\d+$"), what="the delete")
    assert looks.landed_after is not None and looks.looked_at[-1] - looks.landed_after <= 20
    assert webhook_messages(emu) == ["First answer."]
    assert [m["id"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")] == list(row.external_ids)
