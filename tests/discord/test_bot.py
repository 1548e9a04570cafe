"""End to end: a person writes in the channel, agents answer there under their own names."""
from __future__ import annotations

import re

import pytest

from tests.fakes.openai_server import GroupChatScript, message_text
from tests.support import bound, eventually

TOKYO = "@planner draft a 3-day Tokyo trip under $1,500"


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(
        selector=["budget", "planner"],
        agents={"planner": ["Day 1 Asakusa, day 2 Shibuya, day 3 Nikko: $1,700.",
                            "Swapped to a cheaper hotel: $1,450. TERMINATE"],
                "budget": ["@planner that is over by $200."]},
    )


async def test_tagged_message_then_selector_conversation(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "drafts the itinerary"), ("budget", "keeps the total honest"))
    task = await emu.user_post(emu.channel_id, emu.alice_id, TOKYO)
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 3, timeout=15)
    await harness.idle()
    posts = harness.webhook_posts()
    assert [p["username"] for p in posts] == ["planner", "budget", "planner"]
    assert posts[0]["content"] == "Day 1 Asakusa, day 2 Shibuya, day 3 Nikko: $1,700."
    assert posts[2]["content"] == "Swapped to a cheaper hotel: $1,450."  # TERMINATE not shown
    assert script.participant_order == ["planner", "budget", "planner"]
    assert all(p["allowed_mentions"]["parse"] == [] for p in posts)
    # the task message shows the episode's state
    await emu.wait_for(lambda: "✅" in emu.reactions_of(task["id"]), timeout=5)
    # the rows: the task and three replies, each confirmed with its Discord id
    rows = await harness.store.thread.messages(1)
    assert [r.author_name for r in rows] == ["Alice", "planner", "budget", "planner"]
    assert all(r.confirmed and r.external_ids for r in rows)
    # the bot's own webhook messages were not re-ingested
    assert len(rows) == 4
    assert emu.typing_log, "typing was shown while agents worked"


async def test_reply_to_an_agent_tags_it_and_attachments_are_noted(harness, script):
    emu = harness.emu
    script.set_agent("planner", ["First plan.", "Looked at the photo."])
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner start")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=10)
    await harness.idle()
    agent_msg = next(m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id"))
    await emu.user_post(emu.channel_id, emu.bob_id, "what about this?", reference_message_id=agent_msg["id"],
                        attachments=[{"filename": "shrine.jpg", "size": 10}])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=10)
    await harness.idle()
    rows = await harness.store.thread.messages(1)
    assert rows[2].author_name == "Bob" and rows[2].tags.agent_names == ("planner",)
    assert rows[2].text == "what about this?"
    assert [(f.name, f.kind) for f in rows[2].attachments] == [("shrine.jpg", "image")]


async def test_a_reply_to_a_message_of_earlier_work_continues_its_task(harness, script):
    # followup_window 0: only the reply continues the work (SPEC §6); a plain message after it starts fresh.
    emu = harness.emu
    script.set_agent("planner", ["First plan.", "Four days now.", "Something else."])
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags", followup_window=0)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner [TASK1] plan Tokyo")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=10)
    await harness.idle()
    agent_msg = next(m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id"))
    await emu.user_post(emu.channel_id, emu.bob_id, "make it 4 days", reference_message_id=agent_msg["id"])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=10)
    await harness.idle()
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner what about Osaka?")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 3, timeout=10)
    await harness.idle()
    rows = await harness.store.thread.messages(1)
    assert [(r.author_name, r.reply_to_seq) for r in rows] == [
        ("Alice", None), ("planner", None), ("Bob", 2), ("planner", None), ("Alice", None), ("planner", None)]
    prompts = ["\n".join(message_text(m) for m in r["messages"]) for r in harness.llm_server.requests
               if GroupChatScript.classify(r)[0] == "participant"]
    assert len(prompts) == 3
    assert ("<task>Earlier requests this continues (oldest first):\n[Alice] @planner [TASK1] plan Tokyo\n"
            "Current request:\n[Bob] make it 4 days</task>") in prompts[1]
    assert "Earlier requests" not in prompts[2]


async def test_cap_yields_exactly_max_turns_posts_and_one_notice(harness, script):
    emu = harness.emu
    script.set_selector(lambda body: "planner")  # never TERMINATE
    script.default_agent_reply = lambda name, n: f"{name} idea {n}"
    script.set_agent("planner", [])
    script.set_agent("budget", [])
    await harness.setup_group(("planner", "ideas"), ("budget", "costs"), max_turns=3)
    await emu.user_post(emu.channel_id, emu.alice_id, "brainstorm a trip")
    await emu.wait_for(lambda: any("max_turns" in m["content"] for m in emu.channel_messages(emu.channel_id)), 15)
    await harness.idle()
    assert len(harness.webhook_posts()) == 3
    notices = [m for m in emu.channel_messages(emu.channel_id) if "max_turns" in m["content"]]
    assert len(notices) == 1 and notices[0]["author"]["id"] == str(emu.bot_user_id)
    notice_req = emu.requests_matching("POST", rf"^/channels/{emu.channel_id}/messages$")[-1]
    assert notice_req.json["allowed_mentions"]["parse"] == []


async def test_admin_checks_and_the_prompt_modal(harness):
    emu = harness.emu
    await harness.setup_group()
    refused = await harness.command("agent add", {"name": "local", "role": "knows Tokyo", "prompt": "x"},
                                    user=emu.bob_id)
    assert refused["ephemeral"] and "Manage Server" in refused["data"]["content"]
    assert await harness.store.roster.find_agent(1, "local") is None
    shown = await harness.command("agent add", {"name": "local", "role": "knows Tokyo"})
    assert shown["type"] == 9
    components = shown["data"]["components"][0]["components"]
    assert components[0]["custom_id"] == "prompt"
    submitted = await emu.submit_modal(emu.guild_id, emu.channel_id, emu.alice_id, shown["data"]["custom_id"],
                                       {"prompt": "You know Tokyo's neighbourhoods."})
    answer = await submitted.wait_response(5)
    assert answer["data"]["content"].startswith("Added local")
    agent = await harness.store.roster.find_agent(1, "local")
    assert agent.system_prompt == "You know Tokyo's neighbourhoods."
    bad = await harness.command("agent add", {"name": "Clyde", "role": "r", "prompt": "p"})
    assert "refuses webhook names" in bad["data"]["content"]
    dup = await harness.command("agent add", {"name": "LOCAL", "role": "r", "prompt": "p"})
    assert "already in this group" in dup["data"]["content"]
    lookalike = await harness.command("agent add", {"name": "l\u043ecal", "role": "r"})  # a Cyrillic о  # noqa: RUF003 - that letter
    assert "mixes Latin and Cyrillic letters" in lookalike["data"]["content"]
    nonadmin_config = await harness.command("roundtable config", {"max_turns": 3}, user=emu.bob_id)
    assert "Manage Server" in nonadmin_config["data"]["content"]
    ok = await harness.command("roundtable config", {"max_turns": 3})
    assert harness.embed_fields(ok)["max_turns"] == "3"
    assert (await harness.store.groups.get_group(1)).settings.max_agent_turns == 3
    shown = await harness.command("roundtable config", user=emu.bob_id)  # showing needs no admin
    assert harness.embed_fields(shown)["max_turns"] == "3"
    status = await harness.command("roundtable status", user=emu.bob_id)
    assert "local: read through #" in harness.embed_fields(status)["agents"]
    auto = await emu.invoke_autocomplete(emu.guild_id, emu.channel_id, emu.alice_id, "agent show",
                                         {"name": "lo"}, "name")
    choices = (await auto.wait_response(5))["data"]["choices"]
    assert [c["name"] for c in choices] == ["local"]


async def test_deleted_webhook_is_recreated_and_429_is_waited_out(harness, script):
    emu = harness.emu
    script.set_agent("planner", ["First.", "Second."])
    await harness.setup_group(("planner", "plans"), mode="tags")
    hook = emu.webhooks and next(iter(emu.webhooks.values()))
    emu.delete_webhook(hook.id if hasattr(hook, "id") else hook["id"])
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner go")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=10)
    assert emu.requests_matching("POST", rf"^/channels/{emu.channel_id}/webhooks$")[-1].status == 200
    assert len(emu.requests_matching("POST", rf"^/channels/{emu.channel_id}/webhooks$")) == 2
    await harness.idle()
    emu.fail_next("POST", r"^/webhooks/\d+/[\w.\-]{60,}", 429)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner again")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=10)
    await harness.idle()
    assert [p["content"] for p in harness.webhook_posts()] == ["First.", "Second."]
    assert any(r.status == 429 for r in emu.requests_matching("POST", r"^/webhooks/"))


async def test_long_reply_is_split_with_balanced_fences_and_everyone_pings_nobody(harness, script):
    emu = harness.emu
    code = "\n".join(f"    step_{i} = compute({i})  # keep going" for i in range(90))
    long_reply = ("Here is the plan, @everyone and @here.\n\n" + "Intro paragraph. " * 40 + "\n\n```python\n" + code
                  + "\n```\n\n" + "Closing words. " * 40)
    assert len(long_reply) > 4500
    script.set_agent("planner", [long_reply])
    await harness.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner write it all")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 3, timeout=10)
    await harness.idle()
    posts = harness.webhook_posts()
    assert len(posts) >= 3
    for p in posts:
        assert len(p["content"]) <= 2000
        assert len(re.findall(r"^```", p["content"], re.MULTILINE)) % 2 == 0
        assert p["allowed_mentions"] == {"parse": [], "users": [], "replied_user": False} or (
            p["allowed_mentions"]["parse"] == [] and not p["allowed_mentions"].get("roles"))
    stored = [m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")]
    assert all(not m["mention_everyone"] for m in stored)
    rows = await harness.store.thread.messages(1)
    assert len(rows[-1].external_ids) == len(posts)


async def test_messages_posted_while_stopped_are_ingested_once_in_order(harness, script):
    emu = harness.emu
    script.set_agent("planner", ["Noted both.", "You are welcome."])
    await harness.setup_group(("planner", "plans"), mode="tags")
    await harness.stop()
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner first while away", dispatch=False)
    await emu.user_post(emu.channel_id, emu.bob_id, "@planner second while away", dispatch=False)
    await harness.start()
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=10)
    await harness.idle()
    rows = await harness.store.thread.messages(1)
    assert [(r.author_name, r.text) for r in rows] == [
        ("Alice", "@planner first while away"), ("Bob", "@planner second while away"), ("planner", "Noted both.")]
    assert script.participant_order == ["planner"]  # one coalesced run
    # a reconnect's catch-up finds nothing new
    await harness.bot.ingest.resync()
    # taken after the catch-up: it had its chance. Untagged, in tags mode it goes to every agent: planner
    # answers it (its answer may come at once: the row is not the newest for long)
    await emu.user_post(emu.channel_id, emu.alice_id, "thanks")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=30)
    await harness.idle()
    rows = await harness.store.thread.messages(1)
    assert [(r.author_name, r.text) for r in rows][2:] == [
        ("planner", "Noted both."), ("Alice", "thanks"), ("planner", "You are welcome.")]
    assert script.participant_order == ["planner", "planner"]


async def test_a_reply_discord_did_not_confirm_before_a_stop_is_sent_on_restart(harness, script):
    emu = harness.emu
    script.set_agent("planner", ["Kept safe."])
    await harness.setup_group(("planner", "plans"), mode="tags")
    emu.fail_next("POST", r"^/webhooks/\d+/[\w.\-]{60,}", 403, body={"message": "Missing Permissions", "code": 50013},
                  times=10_000)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner answer")
    await emu.wait_for(lambda: emu.requests_matching("POST", r"^/webhooks/\d+/"), timeout=10)
    rows = await harness.store.thread.messages(1)
    assert rows[-1].author_name == "planner" and not rows[-1].confirmed
    await harness.stop()
    emu._faults.clear()
    await harness.start()
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=10)
    await harness.idle()  # the post is recorded (confirmed) just after Discord answers it
    assert [p["content"] for p in harness.webhook_posts()] == ["Kept safe."]
    rows = await harness.store.thread.messages(1)
    assert rows[-1].confirmed and rows[-1].external_ids
    assert script.participant_order == ["planner"]  # re-sent, not re-generated


async def test_reaction_moves_the_read_cursor(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), mode="tags")
    script.set_agent("planner", ["Hello."])
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner hi")
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=10)
    await harness.idle()
    agent_msg = next(m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id"))
    assert await harness.store.reading.get_seen(1, str(emu.bob_id)) is None
    await emu.user_react(emu.channel_id, agent_msg["id"], emu.bob_id, "👍")
    async def seen() -> bool:
        return await harness.store.reading.get_seen(1, str(emu.bob_id)) == 2
    await eventually(seen, "bob's read cursor at row 2")


async def test_setup_without_manage_webhooks_says_so(harness):
    emu = harness.emu
    emu.deny_manage_webhooks = True
    reply = await harness.command("roundtable setup")
    assert reply["ephemeral"] and "Manage Webhooks" in reply["data"]["content"]
    assert await harness.store.groups.list_groups() == []
    not_set_up = await harness.command("agent list")
    assert "not set up" in not_set_up["data"]["content"]


async def test_a_thread_posts_through_the_parents_webhook(harness, script):
    emu = harness.emu
    script.set_agent("planner", ["In the thread."])
    thread_id = emu.add_thread(emu.channel_id, "trip planning")
    await emu.wait_for(lambda: harness.bot.get_channel(int(thread_id)) is not None, timeout=5)
    rec = await emu.invoke_command(emu.guild_id, thread_id, emu.alice_id, "roundtable setup", {"mode": "tags"})
    assert "Roundtable is on" in (await rec.wait_response(5))["data"]["content"]
    group = (await harness.store.groups.list_groups())[0]
    rec = await emu.invoke_command(emu.guild_id, thread_id, emu.alice_id, "agent add",
                                   {"name": "planner", "role": "plans", "prompt": "You plan."})
    await rec.wait_response(5)
    await emu.user_post(thread_id, emu.alice_id, "@planner hi")
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=10)
    await harness.engine.wait_idle(group.id, bound(10))
    execute = emu.requests_matching("POST", r"^/webhooks/\d+/[\w.\-]{60,}")[-1]
    assert execute.query.get("thread_id") == thread_id
    assert emu.requests_matching("POST", rf"^/channels/{emu.channel_id}/webhooks$")  # the parent's webhook
    assert [m["content"] for m in emu.channel_messages(thread_id) if m.get("webhook_id")] == ["In the thread."]


async def test_secrets_never_reach_the_logs(harness, script, caplog):
    import logging

    from bot.config import configure_logging

    names = ("discord.gateway", "discord.http", "discord.webhook", "httpx", "httpx2", "httpcore", "openai", "aiosqlite")
    saved = {n: logging.getLogger(n).level for n in names}
    configure_logging("DEBUG")
    caplog.set_level(logging.DEBUG)
    try:
        await _run_and_check_logs(harness, script, caplog)
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


async def _run_and_check_logs(harness, script, caplog):
    emu = harness.emu
    script.set_agent("planner", ["Logged safely."])
    await harness.setup_group(("planner", "plans"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner hi")
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=10)
    await harness.idle()
    hook = await harness.store.webhooks.get_webhook(emu.channel_id)
    text = caplog.text
    assert "turn group=1" in text  # the per-turn line is there
    for secret in (emu.token, "sk-test", hook[1]):
        assert secret not in text
