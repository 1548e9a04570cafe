"""Tests of the Discord emulator against the real discord.py client.

discord.py fires on_ready `guild_ready_timeout` (default 2 s) after the last
GUILD_CREATE; test clients use chunk_guilds_at_startup=False and
guild_ready_timeout=0.1 to be quick.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from typing import Any

import aiohttp
import discord
import pytest
import yarl
from discord import app_commands
from discord.gateway import DiscordWebSocket
from discord.http import Route

from tests.discord_emulator import DEFAULT_TOKEN, DiscordEmulator

T = 30  # seconds; upper bound for any single wait (generous: a loaded machine is slow)


@pytest.fixture
async def emu():
    async with DiscordEmulator() as e:
        old_base, old_gw = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
        Route.BASE = e.api_base
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(e.gateway_url)
        try:
            yield e
        finally:
            Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = old_base, old_gw


def make_intents() -> discord.Intents:
    intents = discord.Intents.default()
    intents.message_content = True
    return intents


def make_client(cls=discord.Client, **kw) -> discord.Client:
    return cls(intents=kw.pop("intents", make_intents()), chunk_guilds_at_startup=False,
               guild_ready_timeout=0.1, **kw)


@contextlib.asynccontextmanager
async def running(client: discord.Client, token: str = DEFAULT_TOKEN):
    """Start the client, wait for on_ready (or its failure), close it afterwards."""
    task = asyncio.create_task(client.start(token))
    ready = asyncio.create_task(client.wait_until_ready())
    try:
        done, _ = await asyncio.wait({task, ready}, timeout=T, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # re-raise the start-up failure
            raise AssertionError("client.start() returned before ready")
        assert ready in done, "client never became ready"
        yield client
    finally:
        ready.cancel()
        await asyncio.wait_for(client.close(), T)
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, T)


async def test_login_ready_and_on_message(emu):
    client = make_client()
    async with running(client):
        await emu.wait_until_ready(T)
        guild = client.get_guild(int(emu.guild_id))
        assert guild is not None and guild.name == "Test Guild"
        channel = guild.get_channel(int(emu.channel_id))
        assert channel is not None and channel.name == "general"
        assert guild.me is not None and guild.me.id == int(emu.bot_user_id)
        assert guild.member_count == 3  # members themselves need the members intent

        waiter = asyncio.create_task(client.wait_for("message", timeout=T))
        await asyncio.sleep(0)
        posted = await emu.user_post(emu.channel_id, emu.bob_id, f"hi <@{emu.bot_user_id}>")
        message = await waiter
        assert message.id == int(posted["id"])
        assert message.content == f"hi <@{emu.bot_user_id}>"
        assert message.author.id == int(emu.bob_id) and message.author.name == "bob"
        assert isinstance(message.author, discord.Member)
        assert client.user in message.mentions

        # a reply carries message_reference / resolved reference
        waiter = asyncio.create_task(client.wait_for("message", timeout=T))
        await asyncio.sleep(0)
        await emu.user_post(emu.channel_id, emu.alice_id, "reply", reference_message_id=posted["id"])
        reply = await waiter
        assert reply.reference is not None and reply.reference.message_id == int(posted["id"])
        assert reply.type == discord.MessageType.reply

        # the bot posts, reacts and types through REST
        sent = await channel.send("from the bot")
        assert emu.channel_messages(emu.channel_id)[-1]["content"] == "from the bot"
        raw = asyncio.create_task(client.wait_for("raw_reaction_add", timeout=T))
        await asyncio.sleep(0)
        await sent.add_reaction("👍")
        assert (await raw).emoji.name == "👍"
        assert emu.reactions_of(sent.id) == {"👍": [emu.bot_user_id]}
        await channel.typing()
        assert emu.typing_log

        # not implemented routes answer 404 JSON and are recorded
        with pytest.raises(discord.NotFound):
            await client.http.request(Route("GET", "/guilds/{guild_id}/bans", guild_id=emu.guild_id))
        assert emu.unhandled_requests[-1].path.endswith("/bans")


async def test_webhooks_send_ratelimit_and_deletion(emu):
    client = make_client()
    async with running(client):
        channel = client.get_channel(int(emu.channel_id))
        webhook = await channel.create_webhook(name="Roundtable")
        assert len(webhook.token) >= 60

        created = asyncio.create_task(client.wait_for("message", check=lambda m: m.webhook_id, timeout=T))
        await asyncio.sleep(0)
        msg = await webhook.send(f"Hello <@{emu.bob_id}>", username="Claude", avatar_url="https://x.test/a.png",
                                 wait=True, allowed_mentions=discord.AllowedMentions.none())
        assert msg.id and msg.content == f"Hello <@{emu.bob_id}>"
        assert msg.author.name == "Claude" and msg.mentions == []
        rec = emu.requests_matching("POST", rf"^/webhooks/{webhook.id}/")[-1]
        assert rec.json["username"] == "Claude"
        assert rec.json["avatar_url"] == "https://x.test/a.png"
        assert rec.json["allowed_mentions"] == {"parse": []}
        gw_msg = await created
        assert gw_msg.webhook_id == webhook.id and gw_msg.id == msg.id

        # Discord-like validation
        with pytest.raises(discord.HTTPException) as exc:
            await webhook.send("x", username="my discord bot", wait=True)
        assert exc.value.code == 50035
        with pytest.raises(discord.HTTPException) as exc:
            await webhook.send("x" * 2001, wait=True)
        assert exc.value.code == 50035

        # a 429 with Via + retry_after is waited out
        emu.fail_next("POST", rf"^/webhooks/{webhook.id}/", 429)
        msg2 = await asyncio.wait_for(webhook.send("after rate limit", wait=True), T)
        assert msg2.content == "after rate limit"
        statuses = [r.status for r in emu.requests_matching("POST", rf"^/webhooks/{webhook.id}/")[-2:]]
        assert statuses == [429, 200]

        # webhook deleted by an admin
        emu.delete_webhook(str(webhook.id))
        with pytest.raises(discord.NotFound) as exc:
            await webhook.send("gone", wait=True)
        assert exc.value.code == 10015

        # missing MANAGE_WEBHOOKS
        emu.deny_manage_webhooks = True
        with pytest.raises(discord.Forbidden) as exc:
            await channel.create_webhook(name="again")
        assert exc.value.code == 50013


async def test_webhook_thread_send(emu):
    thread_id = emu.add_thread(emu.channel_id, "side chat")
    client = make_client()
    async with running(client):
        thread = client.get_channel(int(thread_id))
        assert isinstance(thread, discord.Thread) and thread.parent_id == int(emu.channel_id)
        webhook = await client.get_channel(int(emu.channel_id)).create_webhook(name="Hook")
        msg = await webhook.send("in thread", thread=thread, wait=True)
        assert msg.channel.id == int(thread_id)
        assert emu.channel_messages(thread_id)[-1]["content"] == "in thread"
        assert emu.channel_messages(emu.channel_id) == []


class CfgModal(discord.ui.Modal, title="Configure"):
    persona: discord.ui.TextInput[CfgModal] = discord.ui.TextInput(label="Persona", custom_id="persona")

    def __init__(self, sink: list[Any]):
        super().__init__(custom_id="cfg_modal", timeout=T)
        self.sink = sink

    async def on_submit(self, interaction: discord.Interaction):
        self.sink.append(self.persona.value)
        await interaction.response.send_message(f"saved {self.persona.value}", ephemeral=True)


async def test_app_commands_callbacks_and_modal(emu):
    seen: list = []
    submitted: list = []
    guild = discord.Object(int(emu.guild_id))

    class Bot(discord.Client):
        def __init__(self):
            super().__init__(intents=make_intents(), chunk_guilds_at_startup=False, guild_ready_timeout=0.1)
            self.tree = app_commands.CommandTree(self)

        async def setup_hook(self):
            await self.tree.sync(guild=guild)

    client = Bot()
    group = app_commands.Group(name="roundtable", description="Roundtable")

    @group.command(name="config", description="configure")
    async def config(interaction: discord.Interaction, max_turns: int, verbose: bool = False):
        seen.append((max_turns, verbose, interaction.permissions.manage_guild))
        await interaction.response.send_message("ok", ephemeral=True)

    @group.command(name="setup", description="modal")
    async def setup(interaction: discord.Interaction):
        await interaction.response.send_modal(CfgModal(submitted))

    @group.command(name="slow", description="defer")
    async def slow(interaction: discord.Interaction):
        await interaction.response.defer(thinking=True)
        await interaction.followup.send("done thinking")
        await interaction.followup.send("second")

    async def pick(interaction: discord.Interaction, current: str):
        return [app_commands.Choice(name=n, value=n) for n in ("alpha", "beta") if n.startswith(current)]

    @group.command(name="pick", description="autocomplete")
    @app_commands.autocomplete(name=pick)
    async def pick_cmd(interaction: discord.Interaction, name: str):
        await interaction.response.send_message(name)

    client.tree.add_command(group, guild=guild)
    async with running(client):
        assert [c["name"] for c in emu.synced_commands[emu.guild_id]] == ["roundtable"]

        rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "roundtable",
                                       {"max_turns": "3"}, subcommand_path=("config",))
        assert rec.payload["data"]["options"] == [
            {"type": 1, "name": "config", "options": [{"type": 4, "name": "max_turns", "value": 3}]}]
        resp = await rec.wait_response(T)
        assert resp["type"] == 4 and resp["flags"] & 64 and resp["ephemeral"]
        assert resp["data"]["content"] == "ok"
        assert seen == [(3, False, True)]
        assert emu.channel_messages(emu.channel_id) == []  # ephemeral: not in the channel

        rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.bob_id, "roundtable config",
                                       {"max_turns": 5, "verbose": True})
        await rec.wait_response(T)
        assert seen[-1] == (5, True, False)

        rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.bob_id, "roundtable setup")
        resp = await rec.wait_response(T)
        assert resp["type"] == 9 and resp["data"]["custom_id"] == "cfg_modal"
        sub = await emu.submit_modal(emu.guild_id, emu.channel_id, emu.bob_id, "cfg_modal",
                                     {"persona": "pirate"})
        resp = await sub.wait_response(T)
        assert submitted == ["pirate"]
        assert resp["type"] == 4 and resp["data"]["content"] == "saved pirate"

        rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.bob_id, "roundtable slow")
        assert (await rec.wait_response(T))["type"] == 5
        followups = await rec.wait_followups(2, T)
        assert rec.original["content"] == "done thinking" and not rec.original["flags"] & 128
        assert [m["content"] for m in followups] == ["done thinking", "second"]
        assert [m["content"] for m in emu.channel_messages(emu.channel_id)] == ["done thinking", "second"]

        rec = await emu.invoke_autocomplete(emu.guild_id, emu.channel_id, emu.bob_id, "roundtable pick",
                                            {"name": "al"}, focused="name")
        resp = await rec.wait_response(T)
        assert resp["type"] == 8 and resp["data"]["choices"] == [{"name": "alpha", "value": "alpha"}]


async def test_interaction_callback_rules_raw(emu):
    # no bot needed: sync a command over HTTP, invoke, answer twice.
    headers = {"Authorization": f"Bot {emu.token}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        url = f"{emu.api_base}/applications/{emu.application_id}/guilds/{emu.guild_id}/commands"
        async with http.put(url, json=[{"name": "ping", "description": "p"}]) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "application/json"
            assert (await r.json())[0]["version"]
        rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.bob_id, "ping")
        cb = f"{emu.api_base}/interactions/{rec.id}/{rec.token}/callback?with_response=1"
        async with http.post(cb, json={"type": 4, "data": {"content": "pong"}}) as r:
            body = await r.json()
            assert r.status == 200 and body["resource"]["message"]["content"] == "pong"
        async with http.post(cb, json={"type": 4, "data": {"content": "again"}}) as r:
            assert r.status == 400 and (await r.json())["code"] == 40060
        async with http.post(f"{emu.api_base}/interactions/1/nope/callback", json={"type": 5}) as r:
            assert r.status == 404 and (await r.json())["code"] == 10062
        async with http.get(f"{emu.api_base}/users/@me", headers={"Authorization": "Bot wrong"}) as r:
            assert r.status == 401


async def test_privileged_intents_refused_and_bad_token(emu):
    emu.privileged_intents_allowed = False
    client = make_client()
    try:
        with pytest.raises(discord.PrivilegedIntentsRequired):
            await asyncio.wait_for(client.start(DEFAULT_TOKEN), T)
    finally:
        await client.close()

    client = make_client()
    try:
        with pytest.raises(discord.LoginFailure):
            await asyncio.wait_for(client.start("not-the-token"), T)
    finally:
        await client.close()


async def test_history_after_with_offline_messages(emu):
    anchor = await emu.user_post(emu.channel_id, emu.alice_id, "anchor", dispatch=False)
    posted = [await emu.user_post(emu.channel_id, emu.bob_id, f"m{i}", dispatch=False) for i in range(130)]
    client = make_client()
    async with running(client):
        channel = client.get_channel(int(emu.channel_id))
        got = [m async for m in channel.history(limit=None, after=discord.Object(int(anchor["id"])),
                                                oldest_first=True)]
        assert [m.content for m in got] == [p["content"] for p in posted]
        latest = [m async for m in channel.history(limit=3)]
        assert [m.content for m in latest] == ["m129", "m128", "m127"]
        fetched = await channel.fetch_message(int(anchor["id"]))
        assert fetched.content == "anchor"


async def test_gateway_resume_replays_missed_events(emu):
    client = make_client()
    async with running(client):
        session = await emu.wait_until_ready(T)
        resumed = asyncio.create_task(client.wait_for("resumed", timeout=T))
        got = asyncio.create_task(client.wait_for("message", timeout=T))
        await asyncio.sleep(0)
        await emu.disconnect_all(code=4000)
        posted = await emu.user_post(emu.channel_id, emu.bob_id, "while you were away")
        await resumed
        assert (await got).id == int(posted["id"])
        assert session.resumes == 1 and session.connected


async def test_members_intent_chunking_and_live_additions(emu):
    intents = make_intents()
    intents.members = True
    client = discord.Client(intents=intents, chunk_guilds_at_startup=True, guild_ready_timeout=0.1)
    async with running(client):
        guild = client.get_guild(int(emu.guild_id))
        assert guild.chunked
        alice, bob = guild.get_member(int(emu.alice_id)), guild.get_member(int(emu.bob_id))
        assert alice.name == "alice" and bob.name == "bob"
        assert "Admin" in [r.name for r in alice.roles]
        assert not bob.guild_permissions.manage_guild
        assert guild.owner_id == int(emu.alice_id)

        joined = asyncio.create_task(client.wait_for("member_join", timeout=T))
        created = asyncio.create_task(client.wait_for("guild_channel_create", timeout=T))
        await asyncio.sleep(0)
        carol = emu.add_member(emu.guild_id, "carol")
        cid = emu.add_channel(emu.guild_id, "random")
        assert (await joined).id == int(carol)
        assert (await created).id == int(cid)


async def test_components_edits_and_files(emu):
    clicks: list = []

    class View(discord.ui.View):
        @discord.ui.button(label="Go", custom_id="go")
        async def go(self, interaction: discord.Interaction, button: discord.ui.Button):
            clicks.append(interaction.user.id)
            await interaction.response.edit_message(content="clicked", view=None)

    class Bot(discord.Client):
        def __init__(self):
            super().__init__(intents=make_intents(), chunk_guilds_at_startup=False, guild_ready_timeout=0.1)
            self.tree = app_commands.CommandTree(self)

        async def setup_hook(self):
            self.add_view(View(timeout=None))
            await self.tree.sync()

    client = Bot()

    @client.tree.command(name="edit", description="send then edit")
    async def edit(interaction: discord.Interaction):
        await interaction.response.send_message("first")
        await interaction.edit_original_response(content="second")

    async with running(client):
        assert [c["name"] for c in emu.synced_commands[None]] == ["edit"]  # global command
        rec = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.bob_id, "edit")
        await rec.wait_original(lambda m: m["content"] == "second", timeout=T)
        assert [m["content"] for m in emu.channel_messages(emu.channel_id)] == ["second"]
        assert rec.edits[0]["body"]["content"] == "second"

        channel = client.get_channel(int(emu.channel_id))
        sent = await channel.send("press", view=View(timeout=None))
        click = await emu.click_button(str(sent.id), "go", emu.alice_id)
        resp = await click.wait_response(T)
        assert resp["type"] == 7 and clicks == [int(emu.alice_id)]
        assert emu.get_message(str(sent.id))["content"] == "clicked"

        webhook = await channel.create_webhook(name="Files")
        import io
        msg = await webhook.send("with file", file=discord.File(io.BytesIO(b"abc"), "a.txt"), wait=True)
        assert msg.attachments[0].filename == "a.txt"
        assert emu.requests_matching("POST", r"^/webhooks/")[-1].files[0]["size"] == 3


# ----------------------------------------------------------------- fault injection

def _hook_url(emu, hook, wait: bool = True) -> str:
    return f"{emu.api_base}/webhooks/{hook.id}/{hook.token}" + ("?wait=1" if wait else "")


def _quiet(caplog) -> list[Any]:
    """Log records above DEBUG or carrying a traceback (the emulator must not produce any)."""
    return [r for r in caplog.records if r.levelno > logging.DEBUG or r.exc_info]


async def test_hold_before_and_after_handling(emu, caplog):
    caplog.set_level(logging.DEBUG)
    hook = emu.add_webhook(emu.channel_id)
    async with aiohttp.ClientSession() as http:
        # before: nothing is stored until release
        hold = emu.hold("POST", r"^/webhooks/\d+/")
        task = asyncio.create_task(http.post(_hook_url(emu, hook), json={"content": "one"}))
        await asyncio.wait_for(hold.arrived.wait(), T)
        assert hold.count == 1 and hold.records[0].held and hold.records[0].json == {"content": "one"}
        await asyncio.sleep(0.05)
        assert not task.done() and emu.channel_messages(emu.channel_id) == []
        hold.release()
        async with await asyncio.wait_for(task, T) as r:
            assert r.status == 200 and (await r.json())["content"] == "one"
        assert [m["content"] for m in emu.channel_messages(emu.channel_id)] == ["one"]
        # times used up: the next matching request passes straight through
        async with http.post(_hook_url(emu, hook), json={"content": "two"}) as r:
            assert r.status == 200
        assert hold.count == 1

        # after: handled (stored) at once, only the response is withheld
        hold = emu.hold("*", rf"^/webhooks/{hook.id}/", after=True)
        task = asyncio.create_task(http.post(_hook_url(emu, hook), json={"content": "three"}))
        await asyncio.wait_for(hold.arrived.wait(), T)
        assert emu.channel_messages(emu.channel_id)[-1]["content"] == "three"
        await asyncio.sleep(0.05)
        assert not task.done()
        hold.release()
        async with await asyncio.wait_for(task, T) as r:
            assert r.status == 200 and (await r.json())["id"] == emu.channel_messages(emu.channel_id)[-1]["id"]

        # several requests in one hold, other routes unaffected, release_all
        hold = emu.hold("POST", r"^/webhooks/", times=2)
        tasks = [asyncio.create_task(http.post(_hook_url(emu, hook), json={"content": f"c{i}"})) for i in range(2)]
        records = await hold.wait_arrived(2, T)
        assert len(records) == 2 and len(emu.channel_messages(emu.channel_id)) == 3
        headers = {"Authorization": f"Bot {emu.token}"}
        async with http.get(f"{emu.api_base}/channels/{emu.channel_id}", headers=headers) as r:
            assert r.status == 200
        emu.release_all()
        for t in tasks:
            async with await asyncio.wait_for(t, T) as r:
                assert r.status == 200
        assert len(emu.channel_messages(emu.channel_id)) == 5
    assert not _quiet(caplog)


async def test_hold_after_with_discord_py_dispatches_before_response(emu):
    client = make_client()
    async with running(client):
        channel = client.get_channel(int(emu.channel_id))
        webhook = await channel.create_webhook(name="Hook")
        hold = emu.hold("POST", rf"^/webhooks/{webhook.id}/", after=True)
        seen = asyncio.create_task(client.wait_for("message", check=lambda m: m.webhook_id, timeout=T))
        send = asyncio.create_task(webhook.send("slow ack", wait=True))
        gw_msg = await seen                      # MESSAGE_CREATE arrives while the POST is pending
        assert hold.count == 1 and not send.done()
        hold.release()
        sent = await asyncio.wait_for(send, T)
        assert sent.id == gw_msg.id


_RAW_POST = """
import socket, sys, time
host, port, path, body = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].encode()
s = socket.create_connection((host, port))
s.sendall(b"POST " + path.encode() + b" HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n"
          + b"Content-Length: " + str(len(body)).encode() + b"\\r\\n\\r\\n" + body)
print("sent", flush=True)
time.sleep(60)
"""


async def _killed_client_post(emu, hook, content: str) -> asyncio.subprocess.Process:
    """A separate process posts to the webhook and is killed while the request is in flight."""
    path = f"/api/v10/webhooks/{hook.id}/{hook.token}?wait=1"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RAW_POST, "127.0.0.1", str(emu.port), path, json.dumps({"content": content}),
        stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), T)).strip() == b"sent"
    return proc


async def test_hold_survives_killed_client(emu, caplog):
    caplog.set_level(logging.DEBUG)
    hook = emu.add_webhook(emu.channel_id)
    hold = emu.hold("POST", r"^/webhooks/", after=True)
    proc = await _killed_client_post(emu, hook, "kept")
    await asyncio.wait_for(hold.arrived.wait(), T)
    proc.kill()
    await proc.wait()
    await asyncio.sleep(0.1)
    hold.release()
    await emu.wait_for(lambda: hold.records[0].client_gone, timeout=T, what="client_gone")
    assert [m["content"] for m in emu.channel_messages(emu.channel_id)] == ["kept"]
    assert hold.records[0].status == 200
    # the emulator still serves requests afterwards
    async with aiohttp.ClientSession() as http:
        async with http.post(_hook_url(emu, hook), json={"content": "next"}) as r:
            assert r.status == 200
    assert not _quiet(caplog)


async def test_close_drops_held_requests_without_hanging(caplog):
    caplog.set_level(logging.DEBUG)
    emu = await DiscordEmulator().start()
    hook = emu.add_webhook(emu.channel_id)
    before = emu.hold("POST", r"^/webhooks/")
    proc = await _killed_client_post(emu, hook, "never")
    await asyncio.wait_for(before.arrived.wait(), T)
    proc.kill()
    await proc.wait()
    async with aiohttp.ClientSession() as http:
        after = emu.hold("GET", r"^/channels/", after=True)
        pending = asyncio.create_task(http.get(f"{emu.api_base}/channels/{emu.channel_id}",
                                               headers={"Authorization": f"Bot {emu.token}"}))
        await asyncio.wait_for(after.arrived.wait(), T)
        await asyncio.wait_for(emu.close(), T)  # the held requests would wait for ever
        with pytest.raises(aiohttp.ClientError):
            await asyncio.wait_for(pending, T)
    assert emu.channel_messages(emu.channel_id) == []   # held before handling: never handled
    assert not _quiet(caplog)


async def test_fail_next_connection_reset_and_after(emu, caplog):
    caplog.set_level(logging.DEBUG)
    hook = emu.add_webhook(emu.channel_id)
    route = rf"^/webhooks/{hook.id}/"
    async with aiohttp.ClientSession() as http:
        # status=0 before handling: no response, nothing stored
        emu.fail_next("POST", route, 0)
        with pytest.raises((aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
            async with http.post(_hook_url(emu, hook), json={"content": "lost"}) as r:
                await r.read()
        rec = emu.requests_matching("POST", route)[-1]
        assert rec.status == 0 and rec.injected
        assert emu.channel_messages(emu.channel_id) == []

        # status=0 after handling: stored, but the client never hears about it
        emu.fail_next("POST", route, 0, after=True)
        with pytest.raises((aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
            async with http.post(_hook_url(emu, hook), json={"content": "ghost"}) as r:
                await r.read()
        assert emu.requests_matching("POST", route)[-1].status == 0
        assert [m["content"] for m in emu.channel_messages(emu.channel_id)] == ["ghost"]

        # an error status after handling
        emu.fail_next("POST", route, 502, after=True)
        async with http.post(_hook_url(emu, hook), json={"content": "stored anyway"}) as r:
            assert r.status == 502 and (await r.json())["message"] == "502: injected"
        rec = emu.requests_matching("POST", route)[-1]
        assert rec.status == 502 and rec.injected
        assert emu.channel_messages(emu.channel_id)[-1]["content"] == "stored anyway"

        # unchanged default: answered before handling
        emu.fail_next("POST", route, 403, body={"message": "Missing Permissions", "code": 50013})
        async with http.post(_hook_url(emu, hook), json={"content": "refused"}) as r:
            assert r.status == 403 and (await r.json())["code"] == 50013
        assert len(emu.channel_messages(emu.channel_id)) == 2

        # the server keeps working; the fault was used up
        async with http.post(_hook_url(emu, hook), json={"content": "fine"}) as r:
            assert r.status == 200

        # holds come first: held, then answered by the fault
        hold = emu.hold("POST", route)
        emu.fail_next("POST", route, 500)
        task = asyncio.create_task(http.post(_hook_url(emu, hook), json={"content": "late failure"}))
        await asyncio.wait_for(hold.arrived.wait(), T)
        hold.release()
        async with await asyncio.wait_for(task, T) as r:
            assert r.status == 500
        assert emu.channel_messages(emu.channel_id)[-1]["content"] == "fine"
    assert not _quiet(caplog)


async def test_reset_after_send_then_retry_with_nonce(emu):
    """The reliability scenario: the create succeeded but the answer was lost; a retry
    with the same nonce gets the first message instead of a duplicate."""
    client = make_client()
    created: list = []

    @client.event
    async def on_message(message: discord.Message) -> None:
        created.append(message.id)

    async with running(client):
        channel = client.get_channel(int(emu.channel_id))
        emu.fail_next("POST", rf"^/channels/{emu.channel_id}/messages$", 0, after=True)
        with pytest.raises((aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
            await channel.send("exactly once", nonce="turn-42")
        retried = await channel.send("exactly once", nonce="turn-42")
        stored = emu.channel_messages(emu.channel_id)
        assert [m["content"] for m in stored] == ["exactly once"]
        assert retried.id == int(stored[0]["id"]) and retried.nonce == "turn-42"
        await emu.wait_for(lambda: created, timeout=T)
        await asyncio.sleep(0.1)
        assert created == [retried.id]          # one MESSAGE_CREATE only


async def test_message_nonce_deduplication(emu):
    headers = {"Authorization": f"Bot {emu.token}"}
    other = emu.add_channel(emu.guild_id, "other")
    url = f"{emu.api_base}/channels/{{}}/messages"

    async with aiohttp.ClientSession(headers=headers) as http:
        async def post(body: dict, cid: str = emu.channel_id):
            async with http.post(url.format(cid), json=body) as r:
                return r.status, await r.json()

        status, first = await post({"content": "a", "nonce": "n1", "enforce_nonce": True})
        assert status == 200 and first["nonce"] == "n1"
        status, again = await post({"content": "a (retry)", "nonce": "n1", "enforce_nonce": True})
        assert status == 200 and again["id"] == first["id"] and again["content"] == "a"
        assert len(emu.channel_messages(emu.channel_id)) == 1
        # another channel is another scope
        status, elsewhere = await post({"content": "a", "nonce": "n1", "enforce_nonce": True}, other)
        assert status == 200 and elsewhere["id"] != first["id"]
        # integer nonces work too
        status, num = await post({"content": "b", "nonce": 1234567890123, "enforce_nonce": True})
        status, num2 = await post({"content": "b", "nonce": 1234567890123, "enforce_nonce": True})
        assert num2["id"] == num["id"] and num["nonce"] == 1234567890123
        # without enforce_nonce the nonce is only echoed
        _, x = await post({"content": "c", "nonce": "n2"})
        _, y = await post({"content": "c", "nonce": "n2"})
        assert x["id"] != y["id"] and x["nonce"] == y["nonce"] == "n2"
        assert len(emu.channel_messages(emu.channel_id)) == 4
        # at most 25 characters
        status, err = await post({"content": "d", "nonce": "x" * 26, "enforce_nonce": True})
        assert status == 400 and err["code"] == 50035 and "nonce" in err["errors"]
        status, _ = await post({"content": "d", "nonce": "x" * 25, "enforce_nonce": True})
        assert status == 200
        # the first message was deleted meanwhile: Discord answers 404 10008
        async with http.delete(url.format(emu.channel_id) + f"/{first['id']}") as r:
            assert r.status == 204
        status, err = await post({"content": "a", "nonce": "n1", "enforce_nonce": True})
        assert status == 404 and err["code"] == 10008
        # the window expires
        emu.nonce_window = 0.05
        _, e1 = await post({"content": "e", "nonce": "n3", "enforce_nonce": True})
        await asyncio.sleep(0.1)
        _, e2 = await post({"content": "e", "nonce": "n3", "enforce_nonce": True})
        assert e1["id"] != e2["id"]


async def test_history_after_paging_across_channels_and_threads(emu):
    other = emu.add_channel(emu.guild_id, "other")
    thread = emu.add_thread(emu.channel_id, "side chat")
    where = [emu.channel_id, other, thread]
    anchors = {cid: await emu.user_post(cid, emu.alice_id, "anchor", dispatch=False) for cid in where}
    expected: dict = {cid: [] for cid in where}
    for i in range(105):                       # interleaved, so ids of the three mix
        for cid in where:
            msg = await emu.user_post(cid, emu.bob_id, f"{cid}-{i}", dispatch=False)
            expected[cid].append(msg["content"])
    await emu.user_post(emu.channel_id, emu.bob_id, "before-anchor-check", dispatch=False)
    expected[emu.channel_id].append("before-anchor-check")
    client = make_client()
    async with running(client):
        for cid in where:
            channel = client.get_channel(int(cid))
            assert channel is not None
            got = [m.content async for m in channel.history(
                limit=None, after=discord.Object(int(anchors[cid]["id"])), oldest_first=True)]
            assert got == expected[cid], cid
            pages = [r for r in emu.requests_matching("GET", rf"^/channels/{cid}/messages$")]
            assert [r.query.get("limit") for r in pages][:2] == ["100", "100"] and len(pages) >= 2
        # raw: after + limit answers the oldest `limit` messages after the id, newest-first
        async with aiohttp.ClientSession(headers={"Authorization": f"Bot {emu.token}"}) as http:
            q = {"after": anchors[thread]["id"], "limit": "100"}
            async with http.get(f"{emu.api_base}/channels/{thread}/messages", params=q) as r:
                page = await r.json()
        assert [m["content"] for m in page] == list(reversed(expected[thread][:100]))


async def test_channel_overwrites_are_the_permissions_discord_py_computes(emu):
    """An overwrite taking Manage Webhooks from the bot's role in one channel: the emulator refuses the
    webhook there (and only there), and discord.py computes the same permissions from the gateway's
    cache and from REST."""
    from tests.discord_emulator import perms

    other = emu.add_channel(emu.guild_id, "random")
    everyone_can_talk = emu.add_channel(emu.guild_id, "quiet")
    emu.set_channel_permissions(everyone_can_talk, emu.guild_id, deny=perms.SEND_MESSAGES)
    emu.set_channel_permissions(everyone_can_talk, emu.bot_role_id(emu.guild_id), allow=perms.SEND_MESSAGES)
    client = make_client()
    async with running(client):
        await emu.wait_until_ready(T)
        changed = asyncio.create_task(client.wait_for("guild_channel_update", timeout=T))
        await asyncio.sleep(0)
        emu.set_channel_permissions(other, emu.bot_role_id(emu.guild_id), deny=perms.MANAGE_WEBHOOKS)
        await changed
        guild = client.get_guild(int(emu.guild_id))
        cached = {c: guild.get_channel(int(c)).permissions_for(guild.me) for c in (emu.channel_id, other,
                                                                                   everyone_can_talk)}
        rest_guild = await client.fetch_guild(int(emu.guild_id))
        me = await rest_guild.fetch_member(client.user.id)
        fetched = {str(c.id): c.permissions_for(me) for c in await rest_guild.fetch_channels()}
        for channel_id, computed in cached.items():
            assert computed.value == fetched[channel_id].value == emu.bot_permissions(emu.guild_id, channel_id)
        assert cached[emu.channel_id].manage_webhooks and not cached[other].manage_webhooks
        assert cached[everyone_can_talk].send_messages  # the role's allow wins over @everyone's deny
        await guild.get_channel(int(emu.channel_id)).create_webhook(name="Roundtable")
        with pytest.raises(discord.Forbidden):
            await guild.get_channel(int(other)).create_webhook(name="Roundtable")


async def test_application_flags_follow_the_message_content_switch(emu):
    client = make_client()
    try:
        await client.login(DEFAULT_TOKEN)
        assert client.application.flags.gateway_message_content_limited
        emu.privileged_intents_allowed = False
        app = await client.application_info()
        assert not app.flags.gateway_message_content_limited and not app.flags.gateway_message_content
    finally:
        await client.close()
