"""The one command declaration, as Discord shows it: every command and option registered,
tables of facts as embeds, the "Why this reply?" menu, /agent rename, pictures by attachment."""
from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from bot.core.verbs import commands as declared
from bot.core.verbs.commands import check_options
from tests.fakes.openai_server import GroupChatScript

DISCORD_TYPES = {"text": 3, "long_text": 3, "message": 3, "agent": 3, "choice": 3, "integer": 4, "boolean": 5,
                 "role": 8, "number": 10, "image": 11, "model": 3, "tool": 3}
SAMPLES = {"text": "x", "long_text": "some text", "message": "1", "agent": "planner", "choice": None,
           "integer": None, "boolean": "true", "role": "123", "number": None, "model": "gpt-4o-mini",
           "tool": "fetch_url"}
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + b"\x00" * 40


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(selector=["TERMINATE"], default_agent_reply=lambda name, n: f"{name} says {n}")


def synced(emu) -> dict[tuple[str, ...], dict[str, Any]]:
    """Every synced slash command by path, sub-commands and sub-command groups' commands included."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}

    def walk(path: tuple[str, ...], node: dict[str, Any]) -> None:
        nested = [o for o in node.get("options", []) if o["type"] in (1, 2)]  # sub-command, sub-command group
        if not nested:
            found[path] = node
        for sub in nested:
            walk((*path, sub["name"]), sub)

    for cmd in emu.synced_commands[emu.guild_id]:
        if cmd["type"] == 1:
            walk((cmd["name"],), cmd)
    return found


def sample(option: declared.Option) -> object:
    if option.choices:
        return option.choices[-1]
    if option.kind in ("integer", "number"):
        return option.high if option.high is not None else 1
    return SAMPLES[option.kind]


@pytest.mark.parametrize("command", declared.COMMANDS, ids=lambda c: c.name)
async def test_every_declared_command_is_on_discord_and_in_the_console_with_the_same_options(harness, command):
    registered = synced(harness.emu)[command.path]
    assert registered["description"] == command.description[:100]
    on_discord = {o["name"]: o for o in registered.get("options", [])}
    assert list(on_discord) == [o.name for o in sorted(command.options_for("discord"), key=lambda o: not o.required)]
    for option in command.options_for("discord"):
        shown = on_discord[option.name]
        assert (shown["type"], bool(shown.get("required")), shown["description"]) == (
            DISCORD_TYPES[option.kind], option.required, option.description[:100])
        if option.choices:
            assert [c["value"] for c in shown["choices"]] == list(option.choices)
        if option.kind in ("integer", "number"):
            assert (shown["min_value"], shown["max_value"]) == (option.low, option.high)
        assert shown.get("autocomplete", False) == (option.kind in ("agent", "model", "tool"))
    console = {o.name: sample(o) for o in command.options_for("console")}
    assert set(check_options(command, console, "console")) == set(console)  # the console takes the same options
    assert {o.name for o in command.options_for("console")} == set(on_discord) - {"avatar_image"}


async def test_tables_are_embeds_with_colours_avatars_and_the_context_note(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags", context_budget=500)
    await harness.command("agent edit", {"name": "planner", "prompt": "You plan.",
                                         "avatar": "https://example.org/planner.png"})
    for i in range(8):  # a thread longer than the budget: prompts hold only its newest part
        await emu.user_post(emu.channel_id, emu.alice_id, f"@planner note {i}: " + "lorem ipsum dolor " * 30)
        await emu.wait_for(lambda i=i: len(harness.webhook_posts()) > i, timeout=10)
    await harness.idle()
    status = await harness.command("roundtable status")
    embed = status["data"]["embeds"][0]
    assert embed["title"] == "#general (on)" and embed["color"] == 0x2ECC71  # green
    context = harness.embed_fields(status)["context"]
    assert "were trimmed to fit context_budget 500" in context
    show = (await harness.command("agent show", {"name": "planner"}))["data"]["embeds"][0]
    assert show["thumbnail"]["url"] == "https://example.org/planner.png"
    assert show["description"] == "drafts the itinerary"
    listed = (await harness.command("agent list"))["data"]["embeds"][0]
    assert [f["name"] for f in listed["fields"]] == ["planner"]
    usage = await harness.command("roundtable usage")
    assert "prompt" in harness.embed_fields(usage)["planner"]
    why = (await harness.command("roundtable why", {"message": "1"}))["data"]["embeds"][0]
    assert why["title"] == "#1 by Alice" and {"name": "chosen", "value": "planner", "inline": True} in why["fields"]
    assert "footer" not in why  # the thread fit the budget back then
    late = (await harness.command("roundtable why"))["data"]["embeds"][0]
    assert "trimmed" in late["footer"]["text"]


async def test_why_this_reply_on_a_message(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), ("budget", "costs"))
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner and @budget please")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=10)
    await harness.idle()
    reply = next(m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id"))
    rec = await emu.invoke_message_command(emu.guild_id, emu.channel_id, emu.bob_id, "Why this reply?", reply["id"])
    answer = await rec.wait_response(5)
    assert answer["ephemeral"]
    embed = answer["data"]["embeds"][0]
    assert embed["title"] == f"#2 by {reply['author']['username']}"
    task = emu.channel_messages(emu.channel_id)[0]
    rec = await emu.invoke_message_command(emu.guild_id, emu.channel_id, emu.bob_id, "Why this reply?", task["id"])
    fields = {f["name"]: f["value"] for f in (await rec.wait_response(5))["data"]["embeds"][0]["fields"]}
    assert fields == {"source": "tags", "chosen": "planner, budget"}


async def test_rename_and_refusals_say_why(harness, script):
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), ("budget", "costs"))
    renamed = await harness.command("agent rename", {"name": "planner", "new_name": "chef"})
    assert renamed["data"]["content"].startswith("Renamed planner to chef: tag it with @chef.")
    taken = await harness.command("agent rename", {"name": "chef", "new_name": "BUDGET"})
    assert taken["data"]["content"] == "An agent named 'budget' is already in this group; choose another name."
    refused = await harness.command("agent rename", {"name": "chef", "new_name": "x"}, user=emu.bob_id)
    assert refused["ephemeral"] and "Manage Server" in refused["data"]["content"]
    await emu.user_post(emu.channel_id, emu.alice_id, "@chef cook something")
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=10)
    assert harness.webhook_posts()[0]["username"] == "chef"
    helped = await harness.command("help", user=emu.bob_id)  # by topic, as in the console
    assert helped["data"]["content"].splitlines()[2] == (
        "/help agent      add, edit, rename, remove, enable, disable, mute, unmute, show, list, tools")
    topic = await harness.command("help", {"topic": "agent"}, user=emu.bob_id)
    assert "/agent rename name new_name" in topic["data"]["content"]
    assert "/roundtable" not in topic["data"]["content"]


async def test_a_picture_by_attachment_is_kept_and_its_url_refreshed(harness, script):
    emu = harness.emu
    await harness.setup_group()
    upload = emu.upload("chef.png", PNG)
    rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "agent add",
                                   {"name": "chef", "role": "cooks", "prompt": "You cook.",
                                    "avatar_image": upload["id"]})
    assert (await rec.wait_response(5))["type"] == 5  # deferred while the picture is copied
    followup = (await rec.wait_followups(1, 5))[0]
    assert followup["content"].startswith("Added chef: cooks.")
    kept = [m for m in emu.channel_messages(emu.channel_id) if m["attachments"]]
    assert len(kept) == 1 and kept[0]["content"] == "🖼️ chef's picture"
    agent = await harness.store.roster.find_agent(1, "chef")
    assert agent.avatar_url == kept[0]["attachments"][0]["url"]
    emu.attachment_ttl = 60.0  # the next signed URLs expire within the refresh margin
    expired = agent.avatar_url.replace(parse_qs(urlsplit(agent.avatar_url).query)["ex"][0], "1")
    await harness.store.roster.update_agent(agent.id, avatar_url=expired)
    await emu.user_post(emu.channel_id, emu.alice_id, "@chef hungry")
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=10)
    used = harness.webhook_posts()[0]["avatar_url"]
    assert used != expired and emu.refreshed_urls and used == emu.refreshed_urls[0]["refreshed"]
    bad = await harness.command("agent add", {"name": "doc", "role": "r", "prompt": "p",
                                              "avatar_image": emu.upload("notes.txt", b"hi", "text/plain")["id"]})
    assert "is not a picture Discord can show" in bad["data"]["content"]



@pytest.mark.parametrize("option,value,field", [
    ("role", "costs everything", "role"), ("model", "other-model", "model"),
    ("avatar", "https://example.org/p.png", "avatar_url"), ("avatar_image", None, "avatar_url"),
    ("memory", False, "memory"), ("prompt", "You plan carefully.", "system_prompt"), ("mode", "worker", "mode"),
    ("temperature", "0.5", "temperature"), ("max_tokens", "800", "max_tokens"),
    ("context_budget", "1500", "context_budget"),
])
async def test_agent_edit_with_any_option_applies_it_at_once_and_alone_opens_the_prompt(harness, option, value,
                                                                                         field):
    """SPEC §12: /agent edit with no option but the name opens a modal prefilled with the prompt; with any
    other option it applies at once (no modal): each option of the declaration, one at a time."""
    emu = harness.emu
    await harness.setup_group(("planner", "plans"))
    if option == "avatar_image":
        value = emu.upload("planner.png", PNG)["id"]
    rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "agent edit",
                                   {"name": "planner", option: value})
    first = await rec.wait_response(5)
    assert first["type"] != 9, first  # not a modal
    answer = (await rec.wait_followups(1, 15))[0] if first["type"] == 5 else first["data"]
    assert answer["content"].startswith(("Updated planner", "Memory is already off")), answer
    agent = await harness.store.roster.find_agent(1, "planner")
    if option == "avatar_image":
        assert agent.avatar_url
    elif option in ("temperature", "max_tokens", "context_budget"):
        assert str(getattr(agent, field)) == value
    elif option != "memory":
        assert getattr(agent, field) == value
    alone = await harness.command("agent edit", {"name": "planner"})
    assert alone["type"] == 9 and alone["data"]["components"][0]["components"][0]["value"] == agent.system_prompt


def test_every_option_of_agent_edit_is_in_the_table_above():
    edit = next(c for c in declared.COMMANDS if c.path == ("agent", "edit"))
    tested = {"name", "role", "model", "avatar", "avatar_image", "memory", "prompt", "mode", "temperature",
              "max_tokens", "context_budget"}
    assert {o.name for o in edit.options_for("discord")} <= tested


async def test_mute_and_unmute_by_slash_command(harness, script):
    """/agent mute name for (SPEC §12): a tag of the muted agent is told once, in one line, and gets no
    reply; /agent list and /agent show say it; /agent unmute lets it answer again."""
    emu = harness.emu
    await harness.setup_group(("planner", "plans"), ("budget", "costs"), mode="tags")
    bad = await harness.command("agent mute", {"name": "budget", "for": "a while"})
    assert bad["data"]["content"] == "for must be a duration such as 30m, 1h, 2d or 1h30m (got 'a while')."
    refused = await harness.command("agent mute", {"name": "budget"}, user=emu.bob_id)
    assert refused["ephemeral"] and "Manage Server" in refused["data"]["content"]
    muted = await harness.command("agent mute", {"name": "budget", "for": "2h"})
    assert muted["data"]["content"].startswith("budget is muted until ")
    listed = harness.embed_fields(await harness.command("agent list"))
    assert [n for n in listed if n.startswith("budget (muted until ") and n.endswith(" (2h left))")]
    show = (await harness.command("agent show", {"name": "budget"}))["data"]["embeds"][0]
    assert show["title"].startswith("budget (muted until ")
    await emu.user_post(emu.channel_id, emu.alice_id, "@budget and @planner, thoughts?")
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=10)
    await harness.idle()

    def told() -> list[dict]:
        return [m for m in emu.channel_messages(emu.channel_id) if "A muted agent does not answer" in m["content"]]

    await emu.wait_for(lambda: told(), timeout=10, what="the mute's notice")
    assert len(told()) == 1 and told()[0]["content"].startswith("budget is muted until ")
    assert [p["username"] for p in harness.webhook_posts()] == ["planner"]
    unmuted = await harness.command("agent unmute", {"name": "budget"})
    assert unmuted["data"]["content"] == "budget is unmuted: it can be selected and tagged again."
    await emu.user_post(emu.channel_id, emu.alice_id, "@budget now?")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=10)
    assert harness.webhook_posts()[-1]["username"] == "budget"
