"""Streamed replies on Discord (SPEC §8 "Streaming"), the real bot against the emulator and a model
server that streams: the reply grows by paced webhook edits in provisional messages that the
committed row finishes, exactly as a whole post shows it; nothing is visible that the reply will
not show; people are pinged by the committed reply only; Discord's rate limits are kept."""
from __future__ import annotations

import asyncio
import itertools
import logging
import random
import re
from typing import Any

import pytest

from bot.core.models import Message, NewMessage, RunResult, Tags
from bot.core.rules.draft import visible_text
from bot.core.rules.secrets import SECRETS
from bot.llm.openai_llm import OpenAILLM
from bot.surfaces.discord import drafts
from bot.surfaces.discord.posting import rendered
from bot.surfaces.discord.render import split_message
from tests.discord.conftest import BotHarness
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply
from tests.support import eventually

HOOK = r"^/webhooks/\d+/[\w.\-]{60,}"
NO_MENTIONS = {"parse": [], "users": [], "replied_user": False}


def hook_requests(emu: DiscordEmulator, method: str | None = None) -> list[Any]:
    """Requests to the channel webhooks (not interaction follow-ups), in order."""
    return [r for r in emu.requests_matching(method, HOOK) if not r.path.startswith(f"/webhooks/{emu.application_id}/")]


def posted(emu: DiscordEmulator, channel_id: str | None = None) -> list[dict[str, Any]]:
    return [m for m in emu.channel_messages(channel_id or emu.channel_id) if m.get("webhook_id")]


async def agent_rows(harness: BotHarness) -> list[Message]:
    assert harness.store is not None
    group = (await harness.store.groups.list_groups())[0]
    return [m for m in await harness.store.thread.messages(group.id) if m.author_type == "agent"]


async def settled(harness: BotHarness, replies: int) -> list[Message]:
    """Until `replies` agent rows are confirmed, the group is idle and no provisional message is left."""
    async def done() -> bool:
        rows = await agent_rows(harness)
        return len(rows) >= replies and all(r.confirmed for r in rows)
    await eventually(done, f"{replies} agent row(s) confirmed")
    await harness.idle()
    assert harness.store is not None
    assert await harness.store.drafts.orphan_drafts(1) == []
    return await agent_rows(harness)


def shows_exactly(emu: DiscordEmulator, rows: list[Message], channel_id: str | None = None) -> None:
    """The channel's webhook messages are the rows' chunks, as a whole post shows them, each once."""
    expected = [(chunk, part) for row in rows for chunk, part in
                zip(split_message(rendered(row)), row.external_ids, strict=True)]
    assert [(m["content"], m["id"]) for m in posted(emu, channel_id)] == expected


PLAN = ("Here is the plan for the three days in Tokyo. Day one is Asakusa and the Senso-ji temple, "
        "then a walk along the Sumida river. Day two is Ueno park and its museums. Day three is Shibuya.")


async def test_a_reply_grows_by_paced_edits_and_ends_as_a_whole_post_shows_it(streaming, script):
    emu = streaming.emu
    script.set_agent("planner", [Reply(PLAN + " TERMINATE", every=0.06)])  # ~2.4 s of words
    await streaming.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan it")
    rows = await settled(streaming, 1)
    shows_exactly(emu, rows)
    posts, edits = hook_requests(emu, "POST"), hook_requests(emu, "PATCH")
    assert len(posts) == 1 and len(edits) >= 2  # one message, grown
    contents = [posts[0].json["content"]] + [e.json["content"] for e in edits]
    assert all(PLAN.startswith(c) for c in contents) and contents[-1] == PLAN
    assert all(r.json["allowed_mentions"] == NO_MENTIONS for r in posts + edits[:-1])
    times = [r.time for r in edits[:-1]]
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times))  # about one edit a second, not per word
    assert "TERMINATE" not in "".join(contents)


async def test_nothing_shows_that_the_reply_will_not_and_people_are_pinged_by_the_committed_post(streaming, script):
    emu = streaming.emu
    bob = emu.bob_id
    reply = (f"planner: Day 1 is Asakusa.\n<@{bob}> will book the temple tour.\nDay 2 is Ueno. TERMINATE\n"
             "budget: I would skip Ueno.\nalice: fine by me")
    script.set_agent("planner", [Reply(reply, every=0.05)])
    await streaming.setup_group(("planner", "plans"), ("budget", "counts"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner and who books?")
    rows = await settled(streaming, 1)
    final = f"Day 1 is Asakusa.\n<@{bob}> will book the temple tour.\nDay 2 is Ueno."
    assert rendered(rows[0]) == final
    shows_exactly(emu, rows)
    requests = hook_requests(emu)
    provisional = [r for r in requests if r.method in ("POST", "PATCH") and r.json.get("content") != final]
    assert provisional and all(r.json["allowed_mentions"] == NO_MENTIONS for r in provisional)
    for r in provisional:
        assert final.startswith(r.json["content"]) and "<@" not in r.json["content"], r.json
        assert not re.search(r"TERMINATE|budget|alice|planner:", r.json["content"])
    # The chunk that pings bob went out as a post (an edit pings nobody); the provisional one was deleted.
    assert [m["id"] for m in posted(emu)] == list(rows[0].external_ids)
    assert emu.pings == [(rows[0].external_ids[0], bob)]
    assert len(hook_requests(emu, "DELETE")) == 1


LONG = "\n\n".join(f"Part {i}: " + "plenty of words about the day " * 25 for i in range(6))  # ~4,700 characters


async def test_a_long_reply_continues_in_new_messages_and_ends_in_the_whole_posts_chunks(streaming, script):
    emu = streaming.emu
    script.set_agent("planner", [Reply(LONG, pieces=re.findall(r".{1,60}", LONG, re.S), every=0.03)])
    await streaming.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner in detail")
    rows = await settled(streaming, 1)
    assert len(split_message(rendered(rows[0]))) == 3
    shows_exactly(emu, rows)
    assert len(hook_requests(emu, "POST")) == 3 and not hook_requests(emu, "DELETE")


@pytest.mark.parametrize("when", ["while it is written", "before the final edit"])
async def test_a_provisional_message_a_moderator_deleted_is_posted_again(streaming, script, when):
    emu = streaming.emu
    hold_end = asyncio.Event()
    script.set_agent("planner", [Reply(PLAN, every=0.01, hold_end=hold_end)])
    await streaming.setup_group(("planner", "plans"), mode="tags")
    final = emu.hold("PATCH", HOOK + r"/messages/\d+$", where=lambda r: r.json.get("content") == PLAN)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan it")
    first = (await emu.wait_for_messages(emu.channel_id, lambda m: bool(m.get("webhook_id")), timeout=10))[0]
    if when == "while it is written":
        emu._delete_message(first["id"])  # a moderator removes it while the model still writes
        final.release()
    hold_end.set()
    if when == "before the final edit":
        await final.wait_arrived(timeout=10)
        emu._delete_message(first["id"])
        final.release()  # Discord answers 10008 Unknown Message
    rows = await settled(streaming, 1)
    shows_exactly(emu, rows)
    assert rows[0].external_ids[0] != first["id"] and len(posted(emu)) == 1


async def test_a_stream_that_breaks_off_is_asked_again_and_its_provisional_message_reused(streaming, script):
    emu = streaming.emu
    script.set_agent("planner", [Reply("Half of a first draft that", every=0.2, break_after=4), PLAN])
    await streaming.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan it")
    rows = await settled(streaming, 1)
    shows_exactly(emu, rows)
    assert rows[0].text == PLAN and len(hook_requests(emu, "POST")) == 1  # the final text edited in
    assert [bool(r.get("stream")) for r in streaming.llm_server.requests] == [True, False]


async def test_a_server_that_does_not_stream_gets_whole_posts(tmp_path, original_discord_endpoints, caplog):
    script = GroupChatScript(agents={"planner": ["First whole reply.", "Second whole reply."]})
    async with DiscordEmulator() as emu, FakeOpenAI(script, streams=False) as server:
        harness = BotHarness(emu, server, tmp_path / "rt.db", stream=True)
        await harness.start()
        try:
            await harness.setup_group(("planner", "plans"), mode="tags")
            for text in ("@planner one", "@planner two"):
                await emu.user_post(emu.channel_id, emu.alice_id, text)
                rows = await settled(harness, 1 if text.endswith("one") else 2)
        finally:
            await harness.stop()
    shows_exactly(emu, rows)
    assert not hook_requests(emu, "PATCH") and len(hook_requests(emu, "POST")) == 2
    assert len([r for r in caplog.records if "does not stream" in r.getMessage()]) == 1


async def test_a_reply_done_before_its_first_post_is_due_is_posted_whole(streaming, script, monkeypatch):
    """An instant model (issue 31): the first provisional post waits FIRST_AFTER after the first text
    (here longer than the whole reply takes), so a reply finished by then costs one webhook post, as
    with stream off: no provisional post, no edit, no button."""
    monkeypatch.setattr(drafts, "FIRST_AFTER", 3600.0)
    emu = streaming.emu
    script.set_agent("planner", [Reply(PLAN, every=0.01)])
    await streaming.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan it")
    rows = await settled(streaming, 1)
    shows_exactly(emu, rows)
    assert [r.method for r in hook_requests(emu)] == ["POST"]
    assert hook_requests(emu)[0].json["content"] == PLAN and not hook_requests(emu)[0].json.get("components")
    assert streaming.llm_server.requests[-1].get("stream")  # it was streamed


async def test_stream_off_posts_whole_messages(streaming, script):
    emu = streaming.emu
    script.set_agent("planner", [Reply(PLAN, every=0.02)])
    await streaming.setup_group(("planner", "plans"), mode="tags", stream=False)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan it")
    rows = await settled(streaming, 1)
    shows_exactly(emu, rows)
    assert [r.method for r in hook_requests(emu)] == ["POST"]
    assert not any(r.get("stream") for r in streaming.llm_server.requests)


async def test_rate_limits_are_kept_and_a_stream_never_delays_another_agents_post(streaming, script, caplog):
    """Five groups on one webhook (a channel and its threads), under Discord's 5-requests-per-2-seconds
    webhook bucket: four long replies stream at once (their first posts take four of the five requests),
    and a short one is answered meanwhile: the drafts leave it room. No draft request is refused (a
    committed reply's chunks may be, when four finish at once: they wait it out)."""
    caplog.set_level(logging.DEBUG, logger="bot.surfaces.discord.drafts")
    emu = streaming.emu
    emu.webhook_rate_limit = (5, 2.0)
    long = [Reply(LONG, pieces=re.findall(r".{1,40}", LONG, re.S), every=0.04) for _ in range(4)]  # ~5 s each
    script.set_agent("planner", long)
    script.set_agent("quick", ["Done quickly."])
    await streaming.setup_group(("planner", "plans"), mode="tags")
    rooms = [emu.add_thread(emu.channel_id, f"room {i}") for i in range(4)]
    for room in rooms:
        await emu.wait_for(lambda room=room: streaming.bot.get_channel(int(room)) is not None, timeout=5)
        agent = ("quick", "answers", "You are quick.") if room == rooms[-1] else ("planner", "plans", "You plan.")
        for name, options in (("roundtable setup", {"mode": "tags"}),
                              ("agent add", dict(zip(("name", "role", "prompt"), agent)))):
            rec = await emu.invoke_command(emu.guild_id, room, emu.alice_id, name, options)
            await rec.wait_response(5)
    for channel in [emu.channel_id, *rooms[:-1]]:
        await emu.user_post(channel, emu.alice_id, "@planner in detail")
    await emu.wait_for(lambda: len(hook_requests(emu, "POST")) >= 4, timeout=30, what="the streams under way")
    await emu.user_post(rooms[-1], emu.alice_id, "@quick short one")
    await emu.wait_for_messages(rooms[-1], lambda m: m.get("webhook_id") and m["content"] == "Done quickly.",
                                timeout=30)
    await streaming.idle()
    failed = [r.getMessage() for r in caplog.records if "provisional update failed" in r.getMessage()]
    assert failed == []  # no draft request was refused (nor failed otherwise)
    quick_done = max(r.time for r in hook_requests(emu) if r.query.get("thread_id") == rooms[-1])
    store = streaming.store
    long_rows = [m for g in await store.groups.list_groups() for m in await store.thread.messages(g.id)
                 if m.author_name == "planner"]
    assert len(long_rows) == 4 and quick_done < min(m.created_at for m in long_rows)  # done while they were written
    for group in await streaming.store.groups.list_groups():
        rows = [m for m in await streaming.store.thread.messages(group.id) if m.author_type == "agent"]
        shows_exactly(emu, rows, group.channel_id)


async def test_a_429_on_an_edit_is_waited_out(streaming, script):
    emu = streaming.emu
    script.set_agent("planner", [Reply(PLAN, every=0.12)])  # ~4.5 s
    await streaming.setup_group(("planner", "plans"), mode="tags")
    emu.fail_next("PATCH", HOOK + r"/messages/\d+$", 429, body={"message": "You are being rate limited.",
                                                                "retry_after": 1.5, "global": False})
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan it")
    rows = await settled(streaming, 1)
    shows_exactly(emu, rows)
    edits = [r for r in hook_requests(emu, "PATCH") if r.json["content"] != PLAN]  # the provisional ones
    limited = next(i for i, r in enumerate(edits) if r.status == 429)
    assert len(edits) > limited + 1 and edits[limited + 1].time - edits[limited].time >= 1.4


@pytest.mark.parametrize("seed", range(3))
async def test_the_final_text_is_a_whole_posts_byte_for_byte_over_random_replies(streaming, seed):
    """Random replies (code fences, long lines, blank lines, unicode), each committed over random
    provisional messages of its run, show exactly the chunks a whole post of the same row shows."""
    emu, store, surface = streaming.emu, streaming.store, streaming.surface
    assert store is not None and surface is not None
    await streaming.setup_group(("planner", "plans"), mode="tags")
    group = (await store.groups.list_groups())[0]
    planner = await store.roster.find_agent(group.id, "planner")
    assert planner is not None
    rng = random.Random(seed)
    words = ["Tokyo", "day", "```python", "```", "print(1)", "\n", "\n\n", "—", "é", "🙂", "*bold*", "x" * 90]
    await store.leases.acquire_lease(group.id, 120)
    for _ in range(12):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 900))).strip() or "x"
        run = await store.runs.start_run(group.id, planner.id, "group", group.latest_seq)
        cut = rng.randint(1, len(text))
        for position, chunk in enumerate(split_message(text[:cut])[:rng.randint(1, 4)]):
            part = await store.drafts.add_draft(group.id, planner.id, run.id, position, "planner", chunk)
            await store.drafts.draft_posted(part.id, await surface.provisional.draft_post(group, planner, chunk))
        finished = await store.runs.finish_run(run.id, RunResult("posted", reply=NewMessage(
            "agent", "planner", text, author_agent_id=planner.id, source_run_id=run.id, tags=Tags())), cap=1000)
        assert finished.reply is not None
        streaming.engine.shown(group.id)
        await streaming.idle()  # (runs are one after another: each reply is shown before the next run)
        group = await store.groups.get_group(group.id)
    rows = [m for m in await store.thread.messages(group.id) if m.author_type == "agent"]
    shows_exactly(emu, rows)
    assert await store.drafts.orphan_drafts(group.id) == []



async def test_a_secret_the_model_streams_shows_in_no_provisional_message(streaming, script):
    """A model that echoes a secret the process knows (the bot token, registered at start),
    cut across pieces: no provisional post or edit shows it, nor any piece of it, before the
    committed reply shows it masked."""
    emu = streaming.emu
    secret = emu.token
    assert SECRETS.register(secret)  # as `bot.masking.register_settings` does at start
    pieces = ["Your bot token is ", secret[:12], secret[12:30], secret[30:], " so keep it safe, and more words."]
    script.set_agent("planner", [Reply("".join(pieces), pieces=pieces, every=0.7)])
    await streaming.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner what is your token?")
    rows = await settled(streaming, 1)
    shows_exactly(emu, rows)
    assert rendered(rows[0]) == "Your bot token is *** so keep it safe, and more words."
    sent = [r.json["content"] for r in hook_requests(emu) if r.method in ("POST", "PATCH")]
    assert len(sent) >= 3  # provisional ones were shown while it was written
    for content in sent:
        assert secret[:12] not in content, content


async def test_a_stream_that_stalls_leaves_no_half_reply_behind(tmp_path, script, original_discord_endpoints):
    """The model writes half a reply and then sends nothing more (the connection stays open): past
    the client's deadline the turn fails with its notice, and the half reply shown while it was
    written is not left in the channel as if it were the agent's answer."""
    stalled = asyncio.Event()  # never set
    script.set_agent("planner", [Reply(PLAN, pieces=[PLAN[:60], PLAN[60:120]], every=0.1, hold_end=stalled)])
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm_server:
        harness = BotHarness(emu, llm_server, tmp_path / "roundtable.db", stream=True)
        harness.make_llm = lambda counter: OpenAILLM(api_key="sk-test", base_url=llm_server.base_url,
                                                     default_model="fake-model", timeout=1.5, max_retries=0,
                                                     counter=counter)
        await harness.start()
        try:
            await harness.setup_group(("planner", "plans"), mode="tags")
            await emu.user_post(emu.channel_id, emu.alice_id, "@planner plan it")
            await emu.wait_for_messages(emu.channel_id, lambda m: "could not answer" in m["content"], timeout=30)
            await harness.idle()
            assert harness.store is not None
            assert await harness.store.drafts.orphan_drafts(1) == []
            assert [m["content"] for m in posted(emu) if PLAN[:20] in m["content"]] == []
            # It was shown meanwhile, as far as it may be: a tail that may begin a secret is held back, and the
            # group's webhook token (random, registered as the bot reads it) may begin with "a" (PLAN[:60] ends
            # "Asa"); a loaded machine may post it first after the second piece came.
            shown = {visible_text(PLAN[:n], "planner", []) for n in (60, 120)}
            assert hook_requests(emu, "POST")[0].json["content"] in shown
        finally:
            stalled.set()
            await harness.stop()
