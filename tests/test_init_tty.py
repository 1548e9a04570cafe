"""`roundtable init` and `roundtable console` asking on a terminal (pexpect): only for what is missing or
wrong, secrets without echo; Ctrl-C writes nothing. The Discord emulator and a fake model server answer."""
from __future__ import annotations

import stat
from pathlib import Path

import pexpect
import pyte
import pytest
from dotenv import dotenv_values

from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import closed_base_url
from tests.fakes.strict_openai import StrictOpenAI
from tests.support.spawn import ROUNDTABLE
from tests.test_cli import clean_env
from tests.test_console_tty import Tty

pytestmark = pytest.mark.slow  # `roundtable init` in a pseudo-terminal: CI runs it, the default run leaves it out

KEY = "sk-tty-right-key-83Hq"
ROWS, COLS = 50, 200


class Terminal(Tty):
    """The installed command with any arguments in a pseudo-terminal."""

    def __init__(self, cwd: Path, *args: str, **env: str) -> None:  # (Tty's runs only the console)
        environment = clean_env(TERM="xterm", **env)
        self.child = pexpect.spawn(ROUNDTABLE, list(args), env=environment, cwd=str(cwd), encoding="utf-8",
                                   dimensions=(ROWS, COLS))
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.Stream(self.screen)
        self.raw = ""
        self.pos = 0
        self.eof = False


@pytest.fixture
def terminals():
    opened: list[Terminal] = []

    def open_terminal(*args: object, **env: str) -> Terminal:
        terminal = Terminal(*args, **env)  # type: ignore[arg-type]
        opened.append(terminal)
        return terminal

    yield open_terminal
    for terminal in opened:
        terminal.close()


@pytest.fixture
async def servers():
    async with DiscordEmulator() as emu, StrictOpenAI(key=KEY, models=("fake-model",)) as llm:
        yield emu, llm


async def test_a_first_init_asks_for_everything_and_hides_secrets(tmp_path, terminals, servers):
    emu, llm = servers
    tty = terminals(tmp_path, "init", DISCORD_API_BASE_URL=emu.api_base)
    await tty.expect("Model endpoint: an OpenAI-compatible base URL such as http://127.0.0.1:11434/v1 (Enter: "
                     "OpenAI's): ")
    tty.type(llm.base_url + "\r")
    await tty.expect(f"API key of {llm.base_url} (hidden; any text for a local server that needs none): ")
    tty.type("sk-wrong-one\r")
    await tty.expect("✗ model endpoint: OPENAI_API_KEY was refused by 127.0.0.1:")
    await tty.expect("API key of ")
    tty.type(KEY + "\r")
    await tty.expect("✗ model: ROUNDTABLE_MODEL gpt-4o-mini is not among the models the endpoint lists (fake-model)")
    await tty.expect("Model for agents (Enter: fake-model): ")
    tty.type("\r")
    await tty.expect(f"✓ model endpoint: {llm.base_url} answers, takes the key and lists fake-model (1 models)")
    await tty.expect("Discord bot token (hidden; Developer Portal > your application > Bot > Reset Token; Enter: no "
                     "Discord, the console only): ")
    tty.type(emu.token + "\r")
    await tty.expect("✓ Message Content intent: on")
    await tty.expect("Discord server id for the slash commands: with it they show in that server at once; without it "
                     "they are registered for every server, which Discord can take up to an hour to show (Discord > "
                     "Settings > Advanced > Developer Mode on, then right-click the server > Copy Server ID; Enter: "
                     "none): ")
    tty.type("123456789012345678\r")  # a server the bot is not in yet
    await tty.expect("✗ DISCORD_GUILD_ID: the bot is not in server 123456789012345678, where the commands would be "
                     "synced; fix: invite it there: https://discord.com/oauth2/authorize?client_id=")
    await tty.expect("Press Enter when the bot is in that server to check again (or give another server id; skip: "
                     "none, the commands are registered for every server): ")
    tty.type(emu.guild_id + "\r")
    await tty.expect("✓ DISCORD_GUILD_ID: the commands are synced to Test Guild at once")
    await tty.expect("Database: a SQLite file or a postgresql:// URL (Enter: roundtable.db): ")
    tty.type("\r")
    await tty.expect("Wrote .env (readable by you only): set OPENAI_BASE_URL, OPENAI_API_KEY, ROUNDTABLE_MODEL, "
                     "DISCORD_TOKEN, DISCORD_GUILD_ID, DISCORD_API_BASE_URL;")
    await tty.expect("permissions=275414895680")
    assert await tty.ended() == 0
    assert KEY not in tty.raw and emu.token not in tty.raw and "sk-wrong-one" not in tty.raw  # never echoed
    written = dotenv_values(tmp_path / ".env")
    assert (written["OPENAI_API_KEY"], written["DISCORD_TOKEN"], written["ROUNDTABLE_MODEL"]) == (
        KEY, emu.token, "fake-model")
    assert (written["DISCORD_GUILD_ID"], written["DISCORD_API_BASE_URL"]) == (emu.guild_id, emu.api_base)
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600


async def test_again_it_asks_only_for_what_is_wrong(tmp_path, terminals, servers):
    emu, llm = servers
    (tmp_path / ".env").write_text(f"# kept\nOPENAI_BASE_URL={llm.base_url}\nOPENAI_API_KEY={KEY}\n"
                                   "ROUNDTABLE_MODEL=fake-model\nDISCORD_TOKEN=an-old-revoked-token\n"
                                   "ROUNDTABLE_DB=rt.db\nROUNDTABLE_MAX_TURNS=7\n")
    tty = terminals(tmp_path, "init", DISCORD_API_BASE_URL=emu.api_base)
    await tty.expect("✓ model endpoint: ")
    await tty.expect("✗ Discord token: Discord rejected DISCORD_TOKEN (401 Unauthorized); fix: copy a fresh token")
    await tty.expect("Discord bot token (hidden; ")
    tty.type(emu.token + "\r")
    await tty.expect("Discord server id for the slash commands: ")
    tty.type("\r")  # none
    await tty.expect("✓ database: rt.db: does not exist yet")
    await tty.expect("Wrote .env (readable by you only): set DISCORD_TOKEN, DISCORD_API_BASE_URL; 5 other settings "
                     "kept as they were.")
    assert await tty.ended() == 0
    assert "Model endpoint:" not in tty.raw and "API key of" not in tty.raw and "Database:" not in tty.raw
    assert (tmp_path / ".env").read_text() == (
        f"# kept\nOPENAI_BASE_URL={llm.base_url}\nOPENAI_API_KEY={KEY}\nROUNDTABLE_MODEL=fake-model\n"
        f"DISCORD_TOKEN={emu.token}\nROUNDTABLE_DB=rt.db\nROUNDTABLE_MAX_TURNS=7\nDISCORD_API_BASE_URL={emu.api_base}\n")


async def test_ctrl_c_at_a_question_writes_nothing(tmp_path, terminals, servers):
    emu, llm = servers
    tty = terminals(tmp_path, "init", "--openai-base-url", llm.base_url, DISCORD_API_BASE_URL=emu.api_base)
    await tty.expect("API key of ")
    tty.type("\x03")
    await tty.expect("roundtable: init stopped; nothing was written")
    assert await tty.ended() == 130
    assert not (tmp_path / ".env").exists()


async def test_the_console_asks_for_the_key_and_offers_to_save_it(tmp_path, terminals, servers):
    _, llm = servers
    tty = terminals(tmp_path, "console", "--db", "rt.db", OPENAI_BASE_URL=llm.base_url, ROUNDTABLE_MODEL="fake-model")
    await tty.expect(f"OPENAI_API_KEY is not set: the console needs the API key of the model server, {llm.base_url}.")
    await tty.expect("API key (hidden; any text for a local server that needs none; Enter: stop): ")
    tty.type("sk-nope\r")
    await tty.expect("✗ OPENAI_API_KEY was refused by 127.0.0.1:")
    await tty.expect("API key (hidden")
    tty.type(KEY + "\r")
    await tty.expect("Save it in .env (readable by you only)? [y/N] ")
    tty.type("y\r")
    await tty.expect("Saved in .env with its server (OPENAI_BASE_URL) and the model (ROUNDTABLE_MODEL); the next "
                     "`roundtable console` will not ask.")
    await tty.expect("you> ")
    tty.type("\x04")
    assert await tty.ended() == 0
    assert KEY not in tty.raw and "sk-nope" not in tty.raw
    saved = dotenv_values(tmp_path / ".env")
    assert saved["OPENAI_API_KEY"] == KEY
    assert saved["OPENAI_BASE_URL"] == llm.base_url  # the key is saved with the server it belongs to
    assert saved["ROUNDTABLE_MODEL"] == "fake-model"  # and with the model given with them
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600

    again = terminals(tmp_path, "console", "--db", "rt.db")  # nothing inline
    await again.expect("you> ")
    again.type("/agent add name:planner role:plans prompt:\"You plan.\"\r")
    again.type("@planner hello\r")
    await again.expect("[planner]")
    again.type("\x04")
    assert await again.ended() == 0
    assert "API key" not in again.raw


async def test_a_key_that_could_not_be_checked_is_not_offered_for_saving_and_the_error_is_said_once(tmp_path,
                                                                                                 terminals):
    url = closed_base_url()
    tty = terminals(tmp_path, "console", "--db", "rt.db", OPENAI_BASE_URL=url, ROUNDTABLE_MODEL="fake-model",
                    ROUNDTABLE_LLM_RETRIES="0")
    await tty.expect("API key (hidden; any text for a local server that needs none; Enter: stop): ")
    tty.type(KEY + "\r")
    assert await tty.ended() == 2
    assert "Save it in" not in tty.raw and KEY not in tty.raw
    said = f"OPENAI_BASE_URL={url} did not answer (connection refused)"
    assert tty.raw.count(said) == 1 and f"roundtable: {said}" in tty.raw
    assert not (tmp_path / ".env").exists() and not (tmp_path / "rt.db").exists()


async def test_a_model_the_server_does_not_serve_stops_the_console_naming_what_it_serves(tmp_path, terminals,
                                                                                           servers):
    _, llm = servers
    tty = terminals(tmp_path, "console", "--db", "rt.db", OPENAI_BASE_URL=llm.base_url, ROUNDTABLE_MODEL="llama3")
    await tty.expect("API key (hidden; any text for a local server that needs none; Enter: stop): ")
    tty.type(KEY + "\r")
    await tty.expect(f"roundtable: ROUNDTABLE_MODEL=llama3 is not a model 127.0.0.1:{llm.port} serves (it serves "
                     "fake-model); set ROUNDTABLE_MODEL to one of them")
    assert await tty.ended() == 2
    assert "Save it in" not in tty.raw  # a set-up that cannot start is not saved
    assert not (tmp_path / ".env").exists() and not (tmp_path / "rt.db").exists()
