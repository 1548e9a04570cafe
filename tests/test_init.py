"""`roundtable init` as a user runs it: the installed command against the Discord emulator and a fake model
server. Scripted (flags, no terminal) here; on a terminal in tests/test_init_tty.py. Every value is checked
live before anything is written; a bad one is one line and nothing written; the file is readable by its
owner only; running it again keeps what is there."""
from __future__ import annotations

import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from dotenv import dotenv_values

from bot.cli.settings_file import TEMPLATE
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import closed_base_url
from tests.fakes.strict_openai import StrictOpenAI
from tests.test_cli import Result, roundtable

KEY = "sk-init-right-key-4F9"
PERMISSIONS = 275414895680  # View Channel, Send Messages (+ in Threads), Read Message History, Add Reactions,
# Manage Webhooks, Embed Links, Attach Files


class Servers:
    def __init__(self, emu: DiscordEmulator, llm: StrictOpenAI, cwd: Path) -> None:
        self.emu, self.llm, self.cwd = emu, llm, cwd

    @property
    def env(self) -> Path:
        return self.cwd / ".env"

    def flags(self, **changes: str) -> list[str]:
        values = {"--openai-base-url": self.llm.base_url, "--openai-api-key": KEY, "--model": "fake-model",
                  "--discord-token": self.emu.token, "--db": "rt.db", **changes}
        return [part for flag, value in values.items() for part in (flag, value)]

    async def init(self, *args: str, **env: str) -> Result:
        return await roundtable(self.cwd, "init", *args, DISCORD_API_BASE_URL=self.emu.api_base, **env)


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[Servers]:
    async with DiscordEmulator() as emu, StrictOpenAI(key=KEY, models=("fake-model", "big-model")) as llm:
        yield Servers(emu, llm, tmp_path)


def values(path: Path) -> dict[str, str | None]:
    return dict(dotenv_values(path))


def refused(result: Result) -> str:
    """The one line of a refusal, after checking nothing else was said."""
    lines = result.err.splitlines()
    assert result.code == 2 and len(lines) == 1 and "Traceback" not in result.err, result
    assert lines[0].startswith("roundtable: ") and lines[0].endswith("; nothing was written"), lines
    return lines[0]


async def test_a_scripted_init_checks_everything_writes_env_and_prints_the_invite(servers):
    result = await servers.init("--yes", *servers.flags())
    assert result.code == 0, result
    out = result.out.splitlines()
    assert out[:4] == [
        f"✓ model endpoint: {servers.llm.base_url} answers, takes the key and lists fake-model (2 models)",
        f"✓ Discord token: the bot is Roundtable (id {servers.emu.bot_user_id}, application "
        f"{servers.emu.application_id})",
        "✓ Message Content intent: on (the bot can read what people write)",
        "✓ database: rt.db: does not exist yet; the first start creates it"]
    assert out[4].startswith("Wrote .env (readable by you only): set OPENAI_BASE_URL, OPENAI_API_KEY, "
                             "ROUNDTABLE_MODEL, DISCORD_TOKEN, DISCORD_API_BASE_URL, ROUNDTABLE_DB;")
    assert ("DISCORD_GUILD_ID is empty: the slash commands are registered for every server, which Discord can take up "
            "to an hour to show. For them at once, invite the bot, then: roundtable init --discord-guild-id "
            "SERVER_ID.") in out
    url = (f"https://discord.com/oauth2/authorize?client_id={servers.emu.application_id}"
           f"&scope=bot+applications.commands&permissions={PERMISSIONS}")
    assert f"  {url}" in out
    assert "  Manage Webhooks (1<<29 = 536870912): create the channel's webhook, through which each agent posts " \
           "under its own name and picture" in out
    assert stat.S_IMODE(servers.env.stat().st_mode) == 0o600
    written = values(servers.env)
    assert written["OPENAI_API_KEY"] == KEY and written["DISCORD_TOKEN"] == servers.emu.token
    assert written["OPENAI_BASE_URL"] == servers.llm.base_url and written["ROUNDTABLE_MODEL"] == "fake-model"
    assert written["ROUNDTABLE_DB"] == "rt.db" and written["ROUNDTABLE_MAX_TURNS"] == "12"
    assert written["DISCORD_API_BASE_URL"] == servers.emu.api_base  # the Discord init checked, for later commands
    assert written["DISCORD_GUILD_ID"] == ""
    text = servers.env.read_text()
    for comment in (line for line in TEMPLATE.read_text().splitlines() if line.startswith("#")):
        assert comment in text  # config.example.env's explanations come with it
    assert KEY not in result.out and servers.emu.token not in result.out
    assert not (servers.cwd / "rt.db").exists()  # nothing created but the settings file

    doctor = await roundtable(servers.cwd, "doctor")  # the settings file alone: the same Discord
    assert doctor.code == 0 and doctor.out.splitlines()[-1] == "All 6 checks passed; 1 with a warning.", doctor
    assert "! DISCORD_GUILD_ID: not set: " in doctor.out


async def test_the_server_for_the_commands_is_checked_and_written(servers):
    emu = servers.emu
    result = await servers.init("--yes", *servers.flags(), "--discord-guild-id", emu.guild_id)
    assert result.code == 0, result
    assert "✓ DISCORD_GUILD_ID: the commands are synced to Test Guild at once" in result.out.splitlines()
    assert "DISCORD_GUILD_ID is empty" not in result.out
    assert values(servers.env)["DISCORD_GUILD_ID"] == emu.guild_id
    doctor = await roundtable(servers.cwd, "doctor")
    assert doctor.code == 0 and doctor.out.splitlines()[-1] == "All 6 checks passed.", doctor

    line = refused(await servers.init("--yes", "--discord-guild-id", "123456789012345678"))
    assert line == ("roundtable: DISCORD_GUILD_ID: the bot is not in server 123456789012345678, where the commands "
                    "would be synced; invite it there: https://discord.com/oauth2/authorize?client_id="
                    f"{emu.application_id}&scope=bot+applications.commands&permissions={PERMISSIONS}, or clear "
                    "DISCORD_GUILD_ID; nothing was written")
    line = refused(await servers.init("--yes", "--discord-guild-id", "my server"))
    assert line == ("roundtable: DISCORD_GUILD_ID: 'my server' is malformed: use the numeric id of your server "
                    "(Developer Mode > Copy Server ID); nothing was written")
    assert values(servers.env)["DISCORD_GUILD_ID"] == emu.guild_id


async def test_running_it_again_keeps_what_is_there(servers):
    assert (await servers.init("--yes", *servers.flags())).code == 0
    with servers.env.open("a") as env:
        env.write("# my own note\nROUNDTABLE_MAX_TURNS=7\n")
    servers.env.chmod(0o644)
    before = servers.env.read_text()
    again = await servers.init("--yes")  # no flags: every value comes from the file, and passes
    assert again.code == 0, again
    assert ".env already holds these values; made it readable by you only." in again.out.splitlines()
    assert servers.env.read_text() == before and stat.S_IMODE(servers.env.stat().st_mode) == 0o600

    changed = await servers.init("--yes", "--model", "big-model")
    assert changed.code == 0, changed
    assert "set ROUNDTABLE_MODEL; " in changed.out
    after = servers.env.read_text()
    assert after == before.replace("ROUNDTABLE_MODEL=fake-model\n", "ROUNDTABLE_MODEL=big-model\n")


@pytest.mark.parametrize("case, flags, expected", [
    ("malformed URL", {"--openai-base-url": "ftp://models"},
     "model endpoint: OPENAI_BASE_URL is malformed (it must start with http:// or https://): use an http(s) URL "
     "such as http://127.0.0.1:8000/v1"),
    ("server down", {"--openai-base-url": "CLOSED"},
     "model endpoint: OPENAI_BASE_URL=CLOSED did not answer (connection refused); check that the server runs"),
    ("key refused", {"--openai-api-key": "sk-wrong-key"}, "model endpoint: OPENAI_API_KEY was refused by 127.0.0.1:"),
    ("unlisted model", {"--model": "gpt-4o-mini"},
     "model: ROUNDTABLE_MODEL gpt-4o-mini is not among the models the endpoint lists (fake-model, big-model); give "
     "--model with one of them"),
    ("bad token", {"--discord-token": "not-a-token"},
     "Discord token: Discord rejected DISCORD_TOKEN (401 Unauthorized); copy a fresh token from the Developer "
     "Portal (your application > Bot > Reset Token) into DISCORD_TOKEN"),
    ("no database directory", {"--db": "data/rt.db"},
     "database: the directory data of data/rt.db does not exist; create it first, or choose another file"),
])
async def test_bad_input_is_one_line_and_nothing_is_written(servers, case, flags, expected):
    (servers.env).write_text("# mine\nROUNDTABLE_MAX_TURNS=7\n")
    servers.env.chmod(0o640)
    before = servers.env.read_bytes(), servers.env.stat().st_mtime_ns
    closed = closed_base_url()
    flags = {k: v.replace("CLOSED", closed) for k, v in flags.items()}
    line = refused(await servers.init("--yes", *servers.flags(**flags)))
    assert line.startswith("roundtable: " + expected.replace("CLOSED", closed)), line
    assert (servers.env.read_bytes(), servers.env.stat().st_mtime_ns) == before
    assert stat.S_IMODE(servers.env.stat().st_mode) == 0o640
    assert "sk-wrong-key" not in line and "not-a-token" not in line


async def test_the_intent_off_is_refused_with_the_fix(servers):
    servers.emu.privileged_intents_allowed = False
    line = refused(await servers.init("--yes", *servers.flags()))
    assert line == ("roundtable: Message Content intent: off: the bot would not be let in (or would see empty "
                    "messages); turn it on in the Developer Portal (your application > Bot > Privileged Gateway "
                    "Intents > Message Content) and save; nothing was written")
    assert not servers.env.exists()


async def test_a_missing_key_without_a_terminal(servers):
    line = refused(await servers.init("--yes", "--openai-base-url", servers.llm.base_url))
    assert line == ("roundtable: OPENAI_API_KEY is missing: give --openai-api-key KEY (or set OPENAI_API_KEY in the "
                    "environment); nothing was written")


async def test_without_a_discord_token_it_sets_up_the_console(servers):
    flags = servers.flags()
    flags = flags[:flags.index("--discord-token")] + flags[flags.index("--discord-token") + 2:]
    result = await servers.init(*flags, OPENAI_API_KEY="ignored-the-flag-wins")
    assert result.code == 0, result
    assert result.out.splitlines()[-1] == ("No Discord token: set up for the console only. Try it: roundtable "
                                           "console (roundtable init again adds Discord).")
    assert values(servers.env)["DISCORD_TOKEN"] == "" and values(servers.env)["OPENAI_API_KEY"] == KEY
    console = await roundtable(servers.cwd, "console", stdin="/roundtable doctor\n")
    assert console.code == 0, console
    assert "✓ model endpoint: " in console.out and "✓ database: rt.db is reachable" in console.out


async def test_secrets_from_the_environment_and_an_env_file_elsewhere(servers):
    (servers.cwd / "conf").mkdir()
    result = await roundtable(servers.cwd, "--env-file", "conf/bot.env", "init", "--yes", "--openai-base-url",
                              servers.llm.base_url, "--model", "fake-model", OPENAI_API_KEY=KEY,
                              DISCORD_TOKEN=servers.emu.token, DISCORD_API_BASE_URL=servers.emu.api_base)
    assert result.code == 0, result
    written = values(servers.cwd / "conf" / "bot.env")
    assert written["OPENAI_API_KEY"] == KEY and written["DISCORD_TOKEN"] == servers.emu.token
    assert not servers.env.exists()
    assert stat.S_IMODE((servers.cwd / "conf" / "bot.env").stat().st_mode) == 0o600


async def test_the_console_with_the_key_given_inline_in_a_fresh_directory(tmp_path):
    """README's way to try it: no .env, no editor, the key on the command line."""
    from tests.fakes.openai_server import FakeOpenAI, GroupChatScript

    async with FakeOpenAI(GroupChatScript(agents={"planner": ["Day 1: Asakusa. TERMINATE"]})) as srv:
        result = await roundtable(tmp_path, "console", OPENAI_API_KEY=KEY, OPENAI_BASE_URL=srv.base_url,
                                  ROUNDTABLE_MODEL="fake-model",
                                  stdin='/agent add name:planner role:plans prompt:"You plan."\n@planner a day\n')
    assert result.code == 0, result
    assert "[planner] Day 1: Asakusa." in result.out.splitlines()
    assert (tmp_path / "roundtable.db").exists() and not (tmp_path / ".env").exists()  # a pipe is never asked


async def test_it_says_where_agents_get_tools_the_mcp_servers_file(servers):
    """`roundtable init` mentions the MCP servers' file (ROUNDTABLE_MCP_CONFIG, default mcp.json): where to
    declare servers when there is none, the servers of one that is there, a note naming a malformed one."""
    hint = ("Tools: agents get tools from MCP servers declared in mcp.json here (or the file ROUNDTABLE_MCP_CONFIG "
            "names), granted with /agent tools; see README, \"Give agents tools\".")
    result = await servers.init("--yes", *servers.flags())
    assert result.code == 0 and hint in result.out.splitlines(), result
    (servers.cwd / "mcp.json").write_text('{"mcpServers": {"files": {"command": "npx", "args": ["-y", "x"]}}}')
    again = await servers.init("--yes", *servers.flags())
    assert again.code == 0 and f"Tools: 1 MCP server(s) in {servers.cwd / 'mcp.json'} (files); roundtable doctor " \
        "starts each, /agent tools grants their tools." in again.out.splitlines(), again
    (servers.cwd / "tools.json").write_text("{not json")
    bad = await servers.init("--yes", *servers.flags(), ROUNDTABLE_MCP_CONFIG="tools.json")
    assert bad.code == 0 and "Note: fix the MCP servers' file before `roundtable run`: ROUNDTABLE_MCP_CONFIG: " \
        "tools.json is not JSON (line 1): " in bad.out, bad
