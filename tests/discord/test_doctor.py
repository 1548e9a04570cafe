"""`/roundtable doctor` in Discord: the checks that make sense there (the channel's webhook and the bot's
permissions, the database, the group's delivery problem, the model endpoints, the MCP servers)
as an embed, for operators."""
from __future__ import annotations

import functools
import time
from typing import Any

import pytest

from bot.config import Settings
from bot.core.rules.store_health import Outage
from bot.llm.endpoints import endpoint_checks
from tests.discord_emulator import perms


async def doctor(harness, user: str | None = None, channel: str | None = None) -> dict[str, Any]:
    """The answer of a /roundtable doctor: deferred while it looks (it asks the model server), then a follow-up."""
    emu = harness.emu
    rec = await emu.invoke_command(emu.guild_id, channel or emu.channel_id, user or emu.alice_id,
                                   "roundtable doctor", {})
    first = await rec.wait_response(5)
    if first["type"] == 4:  # answered at once (a refusal)
        return first["data"]
    assert first["type"] == 5 and first["ephemeral"], first
    return (await rec.wait_followups(1, 15))[0]


def fields(answer: dict[str, Any]) -> dict[str, str]:
    return {f["name"]: f["value"] for f in answer["embeds"][0]["fields"]}


@pytest.fixture
async def bot(harness):
    """The bot with its model endpoint check wired as `roundtable run` wires it."""
    await harness.stop()
    settings = Settings(openai_api_key="sk-test", openai_base_url=harness.llm_server.base_url, model="fake-model")
    harness.engine_options = {"endpoint_checks": functools.partial(endpoint_checks, settings)}
    await harness.start()
    await harness.setup_group(("planner", "plans"))
    return harness


async def test_a_healthy_group(bot):
    answer = await doctor(bot)
    embed = answer["embeds"][0]
    assert answer["flags"] & 64 and embed["title"] == "Doctor: #general"
    assert embed["description"] == "All 7 checks passed." and embed["color"] == 0x2ECC71
    found = fields(answer)
    assert list(found) == ["✓ #general webhook", "✓ #general permissions", "✓ database", "✓ outbox", "✓ leases",
                           "✓ #general delivery", "✓ model endpoint"]
    assert found["✓ #general webhook"] == "'Roundtable' exists and posts there"
    assert found["✓ leases"].startswith("#general by roundtable (pid ")  # the harness names no label
    assert found["✓ model endpoint"].endswith("answers and takes the key (1 models; it serves fake-model)")


async def test_the_bot_losing_manage_webhooks_in_the_channel(bot):
    emu = bot.emu
    emu.set_channel_permissions(emu.channel_id, emu.bot_role_id(emu.guild_id), deny=perms.MANAGE_WEBHOOKS)
    await emu.wait_for(lambda: not bot.bot.get_channel(int(emu.channel_id)).permissions_for(
        bot.bot.get_guild(int(emu.guild_id)).me).manage_webhooks, timeout=10)
    answer = await doctor(bot)
    embed = answer["embeds"][0]
    assert embed["description"] == "1 check of 7 failed." and embed["color"] == 0xE74C3C
    name, value = next(iter(fields(answer).items()))
    assert name == "✗ #general permissions"
    assert value == ("the bot lacks Manage Webhooks\nFix: give the bot's role Manage Webhooks in #general "
                     "(channel settings > Permissions) or in Server Settings > Roles")


async def test_a_delivery_problem_a_database_outage_and_a_model_endpoint_down(bot):
    store = bot.store
    group = (await store.groups.list_groups())[0]
    await store.groups.set_delivery_problem(group.id, "I can't post in #general: Discord answered 403.")
    await bot.llm_server.close()
    store.health.outage = Outage(since=time.time() - 120, reason="the database file or its disk is full")
    try:
        found = fields(await doctor(bot))
    finally:
        store.health.outage = None
    assert found["✗ #general delivery"].startswith("I can't post in #general: Discord answered 403.\nFix: ")
    assert "did not answer (connection refused)" in found["✗ model endpoint"]
    assert found["✗ database writes"].startswith("nothing can be saved for 2 min now: the database file or its disk "
                                                 "is full;")


async def test_only_operators_and_a_channel_that_is_not_a_group(bot):
    emu = bot.emu
    refused = await doctor(bot, user=emu.bob_id)
    assert "Manage Server" in refused["content"]
    other = emu.add_channel(emu.guild_id, "random")
    emu.set_channel_permissions(other, emu.bot_role_id(emu.guild_id), deny=perms.MANAGE_WEBHOOKS)
    await emu.wait_for(lambda: bot.bot.get_channel(int(other)) is not None and not bot.bot.get_channel(
        int(other)).permissions_for(bot.bot.get_guild(int(emu.guild_id)).me).manage_webhooks, timeout=10)
    answer = await doctor(bot, channel=other)
    assert answer["embeds"][0]["title"] == "Doctor (this channel is not a group)"
    assert list(fields(answer)) == ["✗ #random permissions", "✓ database", "✓ outbox", "✓ leases",
                                    "✓ model endpoint"]


async def test_the_mcp_servers_as_they_are_now(harness, tmp_path):
    """/roundtable doctor lists each MCP server of ROUNDTABLE_MCP_CONFIG as the running bot holds it (as
    `roundtable run` wires it): a real stdio server ✓ with its tools counted, one that did not start ✗
    with why and the fix; nothing is started for the look."""
    import json
    import sys
    from pathlib import Path

    from bot.core.features.tools import ToolRegistry
    from bot.llm.mcp_tools import McpServers

    server = Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "counter": {"command": sys.executable, "args": [str(server)], "env": {"MCP_COUNT_FILE": str(tmp_path / "n")}},
        "broken": {"command": "no-such-mcp-server-xyz"}}}))
    servers = McpServers.from_environment({"ROUNDTABLE_MCP_CONFIG": str(config)})
    await servers.start(wait=30)
    try:
        await harness.stop()
        harness.engine_options = {"tools": ToolRegistry(servers.servers), "tool_checks": servers.checks}
        await harness.start()
        await harness.setup_group(("planner", "plans"))
        answer = await doctor(harness)
    finally:
        await servers.close()
    found = fields(answer)
    assert found["✓ MCP server counter"] == "started; 7 tools listed"
    assert found["✗ MCP server broken"] == (
        "did not start (FileNotFoundError: command 'no-such-mcp-server-xyz' not found)\nFix: install the program, or "
        f"correct the server's \"command\" in {config} (a name on PATH, or a full path)")
    assert answer["embeds"][0]["description"].startswith("1 check of ")
