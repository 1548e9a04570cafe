"""Each interaction answered once and in time: by one of two processes on one database (Discord
sends every interaction to every session of a shard), within Discord's 3 s when Discord or the
database is slow, with one webhook however many setups run at once, and with a plain line for
an option value Discord should not have let through."""
from __future__ import annotations

import logging
import sqlite3
from typing import Any

import pytest

from tests.discord.process import BotProcess, UniqueReplies
from tests.discord_emulator import DiscordEmulator
from tests.fakes.databases import Place
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript
from tests.support import quiet_period

CALLBACK = r"^/interactions/\d+/[\w.\-]+/callback$"
CREATE_WEBHOOK = r"^/channels/\d+/webhooks$"


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")


DEBUG = {"ROUNDTABLE_LOG_LEVEL": "DEBUG"}  # a process logs each interaction it leaves to the other


def left_to_the_other(record, *bots: BotProcess) -> bool:
    """Whether one of the processes let the interaction go (the other claimed it): nothing more comes from it."""
    return any(f"interaction {record.id} is handled by another process" in bot.log.read_text() for bot in bots)


def assert_clean_logs(*bots: BotProcess) -> None:
    for bot in bots:
        log = bot.log.read_text()
        assert " ERROR " not in log and "Traceback" not in log, bot.tail()


@pytest.mark.slow  # two bot processes
async def test_two_processes_on_one_database_answer_each_interaction_once(tmp_path, place: Place):
    replies = UniqueReplies()
    async with DiscordEmulator() as emu, FakeOpenAI(replies) as llm:
        a, b = (BotProcess(tmp_path, emu, llm, name=name, place=place, env=DEBUG) for name in ("a", "b"))
        try:
            await a.add_group(emu.channel_id)
            await a.start()
            await b.start()
            await a.wait_settled()  # one of them runs the group
            answers, records = [], []
            for n in range(3):
                for name, options in [("agent add", {"name": f"extra{n}", "role": "r", "prompt": "You are extra."}),
                                      ("agent remove", {"name": f"extra{n}"})]:
                    records.append(await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, name, options))
                    answers.append((await records[-1].wait_response(5))["data"]["content"])
            records.append(await emu.invoke_autocomplete(emu.guild_id, emu.channel_id, emu.alice_id, "agent show",
                                                         {"name": "ec"}, "name"))
            assert (await records[-1].wait_response(5))["data"]["choices"] == [{"name": "echo", "value": "echo"}]
            form = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "agent add",
                                            {"name": "local", "role": "knows Tokyo"})
            custom_id = (await form.wait_response(5))["data"]["custom_id"]  # the form, from one of them
            records += [form, await emu.submit_modal(emu.guild_id, emu.channel_id, emu.alice_id, custom_id,
                                                     {"prompt": "You know Tokyo."})]
            assert (await records[-1].wait_response(5))["data"]["content"].startswith("Added local")
            submit = records[-1]  # a form's submission reaches only the process that showed the form
            replies.set_direct("echo", [f"direct answer {n}" for n in range(4)])
            for n in range(4):  # only the process that runs the group can post: it handles them
                records.append(await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "ask",
                                                        {"agent": "echo", "prompt": f"hello {n}", "post": True}))
                assert "answer is posted in the group" in (await records[-1].wait_followups(timeout=10))[0]["content"]
            await emu.wait_for(lambda: all(left_to_the_other(r, a, b) for r in records if r is not submit), timeout=30,
                               what="the other process letting each interaction go")
            await a.wait_settled()
            assert [m["content"] for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")] == [
                f"direct answer {n}" for n in range(4)]
            assert answers == [f"Added extra{n}: r. Tag it with @extra{n}." if i % 2 == 0 else
                               f"Removed extra{n}. Its messages stay in the history." for n in range(3) for i in (0, 1)]
            assert [(len(r.callbacks), len(r.followups)) for r in records] == [(1, 0)] * 9 + [(1, 1)] * 4
            assert [r.status for r in emu.requests_matching("POST", CALLBACK)] == [200] * len(records)  # none refused
            assert_clean_logs(a, b)
        finally:
            await a.close()
            await b.close()


@pytest.mark.slow  # two bot processes
async def test_two_processes_waiting_on_a_busy_database_defer_a_command_once_and_answer_it_once(tmp_path, place: Place):
    async with DiscordEmulator() as emu, FakeOpenAI(UniqueReplies()) as llm:
        a, b = (BotProcess(tmp_path, emu, llm, name=name, place=place, env=DEBUG) for name in ("a", "b"))
        try:
            await a.add_group(emu.channel_id)
            await a.start()
            await b.start()
            await a.wait_settled()
            async with place.hold_write_lock():  # another writer until both deferred: no claim is decided in time
                record = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "agent add",
                                                  {"name": "planner", "role": "plans", "prompt": "You plan."})
                await emu.wait_for(lambda: len(emu.requests_matching("POST", CALLBACK)) >= 2, timeout=30,
                                   what="both processes' deferrals")
                first = list(record.callbacks)
            await record.wait_followups(timeout=30)
            await emu.wait_for(lambda: left_to_the_other(record, a, b), timeout=30,
                               what="the other process letting it go")
            assert [c["type"] for c in first] == [5]  # deferred by one of them (both try; Discord takes one)
            assert [f["content"] for f in record.followups] == ["Added planner: plans. Tag it with @planner."]
            assert len(record.callbacks) == 1
            assert [r.status for r in emu.requests_matching("POST", CALLBACK)].count(200) == 1
            assert_clean_logs(a, b)
        finally:
            await a.close()
            await b.close()


async def test_two_setups_at_once_make_one_webhook(harness):
    emu = harness.emu
    creating = emu.hold("POST", CREATE_WEBHOOK, times=2)  # Discord is slow: both setups are in flight
    records = [await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "roundtable setup", {})
               for _ in range(2)]
    await creating.wait_arrived()
    # the second setup is in flight too (it waits for the first's webhook: nothing shows that outside)
    await quiet_period()
    creating.release()
    for record in records:
        assert "Roundtable is on" in (await record.wait_response(5))["data"]["content"]
    hooks = [h.id for h in emu.webhooks.values() if h.channel_id == emu.channel_id and not h.deleted]
    assert len(hooks) == 1
    assert (await harness.store.webhooks.get_webhook(emu.channel_id))[0] == hooks[0]


async def test_setup_uses_the_webhook_this_bot_made_in_the_channel_before(harness):
    emu = harness.emu
    earlier = emu.add_webhook(emu.channel_id, "Roundtable")  # made by this bot; its row was lost (a new database)
    await harness.setup_group(("planner", "plans"), mode="tags")
    assert [h.id for h in emu.webhooks.values() if h.channel_id == emu.channel_id] == [earlier.id]
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner hello")
    posted = await emu.wait_for(lambda: [m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")],
                                timeout=10, what="planner's answer")
    assert [(m["webhook_id"], m["content"]) for m in posted] == [(earlier.id, "planner answer 1")]


async def answered_late(harness, record, release) -> list[dict[str, Any]]:
    """The callbacks the interaction got while it was held (Discord takes none after its third second);
    `release()` lets it go once they came, and its answer follows."""
    await harness.emu.wait_for(lambda: record.callbacks, timeout=30, what="the deferral")
    first = list(record.callbacks)
    release()
    await record.wait_followups(timeout=30)
    return first


async def test_a_setup_while_discord_is_slow_to_make_the_webhook_is_deferred_then_answered(harness):
    emu = harness.emu
    creating = emu.hold("POST", CREATE_WEBHOOK)
    record = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "roundtable setup", {})
    await creating.wait_arrived()
    first = await answered_late(harness, record, creating.release)
    assert [c["type"] for c in first] == [5]  # "thinking…" before Discord gives up at 3 s
    assert first[0]["ephemeral"]
    assert next(f["content"] for f in record.followups).startswith("Roundtable is on")


async def test_an_agent_add_while_the_database_is_busy_is_deferred_then_answered(harness):
    emu = harness.emu
    await harness.setup_group(mode="tags")
    other = sqlite3.connect(harness.db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process (or `roundtable copy`) writing until the command deferred
    try:
        record = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "agent add",
                                          {"name": "planner", "role": "plans", "prompt": "You plan."})
        first = await answered_late(harness, record, lambda: other.execute("ROLLBACK"))
    finally:
        other.close()
    assert [c["type"] for c in first] == [5]
    assert [f["content"] for f in record.followups] == ["Added planner: plans. Tag it with @planner."]


@pytest.mark.parametrize("command, options, text", [
    ("roundtable config", {"mode": "bogus"}, "mode must be one of selector, round_robin, tags (got 'bogus')."),
    ("roundtable export", {"format": "pdf"}, "format must be one of html, json, md (got 'pdf')."),
    ("roundtable config", {"operator_role": "999"}, "operator_role: there is no role 999 in this server."),
])
async def test_an_option_value_outside_its_choices_is_answered_by_name(harness, caplog, command, options, text):
    await harness.setup_group(("planner", "plans"), mode="tags")
    before = (await harness.store.groups.list_groups())[0]
    emu = harness.emu
    with caplog.at_level(logging.INFO):
        record = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, command, options)
        reply = await record.wait_response(5)
        # an export is deferred at once (it may take a while): its answer follows
        data = (await record.wait_followups())[0] if reply["type"] == 5 else reply["data"]
    assert text in data["content"] and data["flags"] & 64
    assert (await harness.store.groups.list_groups())[0] == before
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

