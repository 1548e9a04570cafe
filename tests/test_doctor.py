"""`roundtable doctor` as a user runs it: the installed command against the Discord emulator, the fake
model server and a real SQLite file. One line per check (✓ or ✗ and the fix), exit 0 only when all pass,
and nothing changed by looking."""
from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.core.models import GroupSettings, NewMessage
from storage.migrations import MIGRATIONS
from storage.store import SqliteStore
from tests.discord_emulator import DiscordEmulator, perms
from tests.fakes.openai_server import FakeOpenAI, closed_base_url
from tests.test_cli import Result, roundtable

KEY = "sk-doctor-never-shown-7Q"
KNOWN = MIGRATIONS[-1][0]  # this version's schema


@dataclass
class SetUp:
    emu: DiscordEmulator
    llm: FakeOpenAI
    dir: Path
    random_id: str  # a second group channel

    @property
    def db(self) -> Path:
        return self.dir / "roundtable.db"

    def env_file(self, **values: str) -> None:
        settings = {"DISCORD_TOKEN": self.emu.token, "DISCORD_API_BASE_URL": self.emu.api_base,
                    "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": self.llm.base_url, "ROUNDTABLE_MODEL": "fake-model",
                    "ROUNDTABLE_DB": str(self.db), "DISCORD_GUILD_ID": self.emu.guild_id, **values}
        (self.dir / ".env").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    async def doctor(self, *args: str, **env: str) -> Result:
        return await roundtable(self.dir, "doctor", *args, **env)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[SetUp]:
    """Two Discord groups (#general and #random), each with the webhook the bot made there."""
    async with DiscordEmulator() as emu, FakeOpenAI(models=("fake-model", "other-model")) as llm:
        random_id = emu.add_channel(emu.guild_id, "random")
        store = await SqliteStore.open(tmp_path / "roundtable.db")
        try:
            for channel_id, name in ((emu.channel_id, "#general"), (random_id, "#random")):
                await store.groups.create_group(f"discord:{channel_id}", name, GroupSettings(), guild_id=emu.guild_id,
                                                channel_id=channel_id)
                hook = emu.add_webhook(channel_id, "Roundtable")
                await store.webhooks.save_webhook(channel_id, hook.id, hook.token)
        finally:
            await store.close()
        s = SetUp(emu, llm, tmp_path, random_id)
        s.env_file()
        yield s


def dump(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return list(conn.iterdump())


def lines(result: Result) -> dict[str, str]:
    """Each check's line by its name (`✓ name: ...`), after checking the output's shape."""
    out = result.out.splitlines()
    assert result.err == "" and out, result
    assert out[-1].endswith(("checks passed.", "checks failed.", "with a warning.")), out
    checks = out[:-1]
    assert all(line[:2] in ("✓ ", "✗ ", "! ") for line in checks), checks
    return {line[2:].split(": ")[0]: line for line in checks}


async def test_a_good_set_up_passes_every_check(setup):
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 0, result.out
    assert list(found) == ["settings", "Discord token", "Message Content intent", "DISCORD_GUILD_ID",
                           "#general webhook", "#general permissions", "#general delivery", "#random webhook",
                           "#random permissions",
                           "#random delivery", "database", "outbox", "leases", "model endpoint"]
    assert all(line.startswith("✓") for line in found.values())
    assert f"the bot is Roundtable (id {setup.emu.bot_user_id}" in found["Discord token"]
    assert "'Roundtable' exists and posts there" in found["#general webhook"]
    assert f"schema version {KNOWN} (this version's)" in found["database"]
    assert found["model endpoint"].endswith("answers and takes the key (2 models; it serves fake-model)")
    assert result.out.splitlines()[-1] == "All 14 checks passed."
    assert KEY not in result.out and setup.emu.token not in result.out


async def test_a_bad_token(setup):
    setup.env_file(DISCORD_TOKEN="not-the-bot-token")
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["Discord token"] == (
        "✗ Discord token: Discord rejected DISCORD_TOKEN (401 Unauthorized); fix: copy a fresh token from the "
        "Developer Portal (your application > Bot > Reset Token) into DISCORD_TOKEN")
    assert "Message Content intent" not in found and "#general webhook" not in found  # they need the token
    assert found["database"].startswith("✓") and found["model endpoint"].startswith("✓")
    assert "not-the-bot-token" not in result.out


async def test_the_message_content_intent_off(setup):
    setup.emu.privileged_intents_allowed = False
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["Message Content intent"].startswith("✗ Message Content intent: off")
    assert "fix: turn it on in the Developer Portal (your application > Bot > Privileged Gateway Intents > " \
           "Message Content)" in found["Message Content intent"]
    assert sum(line.startswith("✗") for line in found.values()) == 1


async def test_the_bot_lacking_manage_webhooks_in_one_group_channel(setup):
    emu = setup.emu
    emu.set_channel_permissions(setup.random_id, emu.bot_role_id(emu.guild_id), deny=perms.MANAGE_WEBHOOKS)
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["#random permissions"] == (
        "✗ #random permissions: the bot lacks Manage Webhooks; fix: give the bot's role Manage Webhooks in #random "
        "(channel settings > Permissions) or in Server Settings > Roles")
    assert found["#general permissions"].startswith("✓")
    assert found["#random webhook"].startswith("✓")  # the one it made is still there
    # were that webhook deleted too, the bot could not make another one
    emu.delete_webhook(next(h.id for h in emu.webhooks.values() if h.channel_id == setup.random_id))
    found = lines(await setup.doctor())
    assert found["#random webhook"].startswith(
        "✗ #random webhook: the stored webhook was deleted, and the bot may not make one (no Manage Webhooks); "
        "fix: give the bot's role Manage Webhooks in #random")


async def test_a_deleted_webhook_is_fine_while_the_bot_may_make_another(setup):
    setup.emu.delete_webhook(next(h.id for h in setup.emu.webhooks.values() if h.channel_id == setup.random_id))
    result = await setup.doctor()
    assert result.code == 0, result.out
    assert lines(result)["#random webhook"] == (
        "✓ #random webhook: the stored webhook was deleted; the bot makes a new one at its next post")


async def test_a_database_at_a_newer_schema_is_reported_and_left_as_it_is(setup):
    with contextlib.closing(sqlite3.connect(setup.db)) as db:
        db.execute("INSERT INTO _migrations (id, name, applied_at) VALUES (99, 'from the future', 0)")
        db.commit()
    before = dump(setup.db)
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["database"] == (
        f"✗ database: {setup.db} is at schema version 99, newer than this version of Roundtable knows ({KNOWN}): it "
        "would refuse to start; fix: upgrade Roundtable (pip install -U roundtable, or git pull and pip install -e .), "
        "or point ROUNDTABLE_DB at another database")
    assert dump(setup.db) == before


async def test_an_older_schema_is_not_migrated_by_looking(setup):
    with contextlib.closing(sqlite3.connect(setup.db)) as db:
        db.execute("DELETE FROM _migrations WHERE id = ?", (KNOWN,))
        db.commit()
    result = await setup.doctor()
    assert result.code == 0, result.out
    before = MIGRATIONS[-2][0]  # (ids need not be consecutive)
    assert f"at schema version {before} (this version's is {KNOWN}); the next start or `roundtable migrate`" in \
           lines(result)["database"]
    with contextlib.closing(sqlite3.connect(setup.db)) as db:
        assert db.execute("SELECT MAX(id) FROM _migrations").fetchone() == (before,)


async def test_a_model_endpoint_down(setup):
    down = closed_base_url()
    setup.env_file(OPENAI_BASE_URL=down)
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["model endpoint"] == (f"✗ model endpoint: OPENAI_BASE_URL={down} did not answer (connection "
                                       "refused); fix: check that the server runs")


async def test_a_model_the_endpoint_does_not_list(setup):
    setup.env_file(ROUNDTABLE_MODEL="gpt-4o-mini", ROUNDTABLE_SELECTOR_MODEL="other-model")
    found = lines(await setup.doctor())
    assert found["model endpoint"] == (
        f"✗ model endpoint: {setup.llm.base_url} does not list gpt-4o-mini (it lists fake-model, other-model); "
        "fix: set ROUNDTABLE_MODEL (and ROUNDTABLE_SELECTOR_MODEL, when set) to a model it lists")


async def test_replies_waiting_long_and_a_held_lease(setup):
    """The outbox fails when a reply has waited past 5 minutes; a lease says who holds it."""
    clock = [time.time() - 600]
    store = await SqliteStore.open(setup.db, clock=lambda: clock[0])
    try:
        group = await store.groups.find_group(f"discord:{setup.emu.channel_id}")
        assert group is not None
        await store.thread.append_system_message(group.id, NewMessage(author_type="system", author_name="roundtable",
                                                                      text="a notice never posted"))
        store.owner_label = "discord bot"
        clock[0] = time.time()
        assert await store.leases.acquire_lease(group.id, 30) is None
        result = await setup.doctor()
    finally:
        await store.close()
    found = lines(result)
    assert result.code == 1
    assert found["outbox"].startswith("✗ outbox: 1 reply not posted yet: #general 1 (oldest 10 min); fix: start "
                                      "the bot (`roundtable run`) if it is not running")
    assert found["leases"].startswith(f"✓ leases: #general by discord bot (pid {os.getpid()}) (for ")


async def test_a_console_only_set_up(setup):
    setup.env_file(DISCORD_TOKEN="", ROUNDTABLE_DB=str(setup.dir / "console.db"))
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 0, result.out
    assert found["Discord"] == "✓ Discord: no DISCORD_TOKEN: a console-only set-up (roundtable init adds Discord)"
    assert found["database"].endswith(f"console.db does not exist yet; the first start creates it (schema version "
                                      f"{KNOWN})")
    assert not (setup.dir / "console.db").exists()


async def test_settings_that_do_not_parse(setup):
    """A malformed setting fails its line; the checks that do not need it still run."""
    setup.env_file(ROUNDTABLE_MAX_TURNS="0")
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["settings"] == ("✗ settings: ROUNDTABLE_MAX_TURNS='0' is malformed: use a whole number from 1 to 100; "
                                 "the other checks ran without it")
    assert len(found) == 14 and [n for n, line in found.items() if not line.startswith("✓")] == ["settings"]
    assert result.out.splitlines()[-1] == "1 of 14 checks failed."
    missing = await roundtable(setup.dir, "--env-file", "nowhere.env", "doctor")
    assert missing.code == 1 and missing.out.splitlines()[0] == "✗ settings: --env-file nowhere.env does not exist"


async def test_a_malformed_setting_leaves_out_only_the_checks_that_need_it(setup):
    setup.env_file(OPENAI_BASE_URL="ftp://models", DISCORD_GUILD_ID="my-server")
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["settings"] == (
        "✗ settings: OPENAI_BASE_URL is malformed (it must start with http:// or https://): use an http(s) URL such "
        "as http://127.0.0.1:8000/v1; DISCORD_GUILD_ID='my-server' is malformed: use the numeric id of your server "
        "(Developer Mode > Copy Server ID); the model endpoint checks need them and are left out, the others ran")
    assert "model endpoint" not in found and "DISCORD_GUILD_ID" not in found  # they need the malformed values
    assert found["Discord token"].startswith("✓") and found["#random webhook"].startswith("✓")
    assert found["database"].startswith("✓") and found["leases"].startswith("✓")
    setup.env_file(DISCORD_API_BASE_URL="discord.local")
    found = lines(await setup.doctor())
    assert "Discord token" not in found and found["model endpoint"].startswith("✓")
    assert found["settings"].endswith("the Discord checks need it and are left out, the others ran")


async def test_an_unset_guild_id_warns_with_the_fix_and_passes(setup):
    setup.env_file(DISCORD_GUILD_ID="")
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 0, result.out
    assert found["DISCORD_GUILD_ID"] == (
        "! DISCORD_GUILD_ID: not set: the slash commands are registered for every server, which Discord can take up "
        "to an hour to show; fix: set it to your server's id for them at once there (roundtable init "
        "--discord-guild-id ID; Developer Mode > right-click the server > Copy Server ID)")
    assert result.out.splitlines()[-1] == "All 14 checks passed; 1 with a warning."
    setup.env_file(DISCORD_GUILD_ID="", DISCORD_TOKEN="")  # the console only: no Discord, no guild
    assert "DISCORD_GUILD_ID" not in lines(await setup.doctor())


async def test_a_sqlite_database_that_cannot_be_read_gets_the_sqlite_fix(setup):
    (setup.dir / "notadb").write_text("this is not a database\n")
    result = await setup.doctor("--db", str(setup.dir / "notadb"))
    line = lines(result)["database"]
    assert result.code == 1
    assert line.startswith(f"✗ database: --db: cannot read the database {setup.dir / 'notadb'}: ")
    assert line.endswith("fix: point --db or ROUNDTABLE_DB at a SQLite file this user can read and write, in a "
                         "directory that exists (a file not there yet is created by the first start)")
    assert "server" not in line


async def test_each_agents_own_model_is_served_by_its_endpoint(setup):
    store = await SqliteStore.open(setup.db)
    try:
        group = await store.groups.find_group(f"discord:{setup.emu.channel_id}")
        assert group is not None
        await store.roster.add_agent(group.id, "planner", "plans", "You plan.")  # the bot's model: the endpoint check's
        await store.roster.add_agent(group.id, "critic", "critiques", "You critique.", model="other-model")
        await store.roster.add_agent(group.id, "coder", "codes", "You code.", model="local/fake-model")
        off = await store.roster.add_agent(group.id, "old", "gone", "You were.", model="gpt-2")
        await store.roster.update_agent(off.id, enabled=False)  # a disabled agent is not checked
    finally:
        await store.close()
    setup.env_file(ROUNDTABLE_PROVIDER_LOCAL_BASE_URL=setup.llm.base_url)
    result = await setup.doctor()
    assert result.code == 0, result.out
    assert lines(result)["agent models"] == "✓ agent models: 2 agents with a model of their own: each is served by " \
                                            "its endpoint"
    setup.env_file()  # no provider local: local/fake-model goes to the default endpoint, which lacks it
    result = await setup.doctor()
    assert result.code == 1
    assert lines(result)["agent models"] == (
        f"✗ agent models: 2 agents with a model of their own: coder in #general has local/fake-model, which "
        f"{setup.llm.base_url} does not list (it lists fake-model, other-model); fix: /agent edit name:AGENT "
        "model:MODEL in its channel, with a model its endpoint lists")


async def test_a_guild_id_the_bot_is_not_in(setup):
    setup.env_file(DISCORD_GUILD_ID="123456789012345678")
    found = lines(await setup.doctor())
    assert found["DISCORD_GUILD_ID"].startswith(
        "✗ DISCORD_GUILD_ID: the bot is not in server 123456789012345678, where the commands would be synced; fix: "
        f"invite it there: https://discord.com/oauth2/authorize?client_id={setup.emu.application_id}")
    setup.env_file(DISCORD_GUILD_ID=setup.emu.guild_id)
    found = lines(await setup.doctor())
    assert found["DISCORD_GUILD_ID"] == "✓ DISCORD_GUILD_ID: the commands are synced to Test Guild at once"


async def test_each_provider_is_an_endpoint_of_its_own(setup):
    setup.env_file(ROUNDTABLE_PROVIDER_LOCAL_BASE_URL=setup.llm.base_url, ROUNDTABLE_MODEL="local/fake-model")
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 0, result.out
    assert found["model endpoint"].endswith("answers and takes the key (2 models)")
    assert found["model endpoint local"].endswith("answers and takes the key (2 models; it serves fake-model)")
    down = closed_base_url()
    setup.env_file(ROUNDTABLE_PROVIDER_LOCAL_BASE_URL=down, ROUNDTABLE_MODEL="local/fake-model")
    found = lines(await setup.doctor())
    assert found["model endpoint local"] == (f"✗ model endpoint local: ROUNDTABLE_PROVIDER_LOCAL_BASE_URL={down} did "
                                             "not answer (connection refused); fix: check that the server runs")
    assert found["model endpoint"].startswith("✓")


async def test_each_mcp_server_is_started_and_its_tools_counted(setup):
    """The servers of ROUNDTABLE_MCP_CONFIG: a real stdio server ✓ with its tools, a broken command ✗
    with the fix; the doctor fails, and the server it started is stopped again."""
    import json
    import sys

    server = Path(__file__).resolve().parent / "fakes" / "mcp_server.py"
    config = setup.dir / "tools.json"
    config.write_text(json.dumps({"mcpServers": {
        "counter": {"command": sys.executable, "args": [str(server)],
                    "env": {"MCP_COUNT_FILE": str(setup.dir / "count")}},
        "broken": {"command": "no-such-mcp-server-xyz"}}}))
    setup.env_file(ROUNDTABLE_MCP_CONFIG=str(config))
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["MCP server counter"] == "✓ MCP server counter: started; 7 tools listed"
    assert found["MCP server broken"].startswith(
        "✗ MCP server broken: did not start (FileNotFoundError: command 'no-such-mcp-server-xyz' not found); "
        "fix: install the program")
    assert result.out.splitlines()[-1] == "1 of 16 checks failed."


async def test_a_malformed_mcp_json_is_one_check_naming_the_file_and_the_fix(setup):
    config = setup.dir / "tools.json"
    config.write_text('{"mcpServers": {"counter": {"command": "python", "args": "x.py"}}}')
    setup.env_file(ROUNDTABLE_MCP_CONFIG=str(config))
    result = await setup.doctor()
    found = lines(result)
    assert result.code == 1
    assert found["MCP servers"] == (f"✗ MCP servers: ROUNDTABLE_MCP_CONFIG: {config}: server 'counter' has \"args\" "
                                    "that are not a list of strings; fix: correct the file, or unset "
                                    "ROUNDTABLE_MCP_CONFIG")
