"""Issue 19 item 1: no secret the process knows leaves it.

A model server answers HTTP 500 with a body holding every secret (raw, URL-encoded, in a
URL), and a 200 whose reply echoes them; `roundtable console` runs over it at DEBUG with the
real openai client. None of the secrets is then in its output or log (every level), in the
SQLite file (and its WAL), in the console's `/roundtable why`, `usage`, `status` or
`/roundtable export` files, or in `roundtable export` in each format.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply
from tests.support.spawn import start_roundtable

BOT_TOKEN = "discord-token-LEAK-0001"
OPENAI_KEY = "openai-key-LEAK-0002"
PROVIDER_KEY = "provider-key-LEAK-0003"
DB_PASSWORD = "db/pass@LEAK-0004"
OTHER_SECRET = "some-secret-LEAK-0005"
SECRETS = (BOT_TOKEN, OPENAI_KEY, PROVIDER_KEY, DB_PASSWORD, OTHER_SECRET)
MARK = "LEAK-000"  # in every secret: a piece of one left behind is a leak too


def echo_of_every_secret() -> str:
    pw = quote(DB_PASSWORD, safe="")
    return (f"upstream proxy echo: authorization={OPENAI_KEY} x-bot={BOT_TOKEN} provider={PROVIDER_KEY} "
            f"db={DB_PASSWORD} db-encoded={pw} other={OTHER_SECRET} "
            f"url=postgresql://rt:{pw}@db.example/rt?api_key={quote(PROVIDER_KEY)}&token={BOT_TOKEN}")


def failure() -> Reply:
    return Reply(status=500, headers={"x-should-retry": "false"},
                 error_body={"error": {"message": echo_of_every_secret(), "type": "server_error"}})


def env_for(base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ROUNDTABLE_", "DISCORD_"))}
    env.update(OPENAI_API_KEY=OPENAI_KEY, OPENAI_BASE_URL=base_url, ROUNDTABLE_MODEL="fake-model",
               ROUNDTABLE_LLM_RETRIES="0", DISCORD_TOKEN=BOT_TOKEN, ROUNDTABLE_PROVIDER_LOCAL_API_KEY=PROVIDER_KEY,
               ROUNDTABLE_PROVIDER_LOCAL_BASE_URL="http://127.0.0.1:9/v1", MY_WEBHOOK_SECRET=OTHER_SECRET,
               ROUNDTABLE_DB=f"postgresql://rt:{quote(DB_PASSWORD, safe='')}@127.0.0.1:9/rt",
               PYTHONUNBUFFERED="1")
    return env


async def roundtable(cwd: Path, env: dict[str, str], *args: str, stdin: str = "") -> tuple[int, str, str]:
    proc = await start_roundtable(
        "--env-file", os.devnull, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd)
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 90)
    return proc.returncode or 0, out.decode(), err.decode()


def leaks(where: str, data: str | bytes) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    forms = {s for secret in SECRETS for s in (secret, quote(secret, safe=""), json.dumps(secret)[1:-1])}
    return [f"{where}: {form!r}" for form in sorted(forms) if form in text] + (
        [f"{where}: a piece ({MARK})"] if MARK in text else [])


async def test_no_secret_reaches_the_log_the_database_or_an_export(tmp_path):
    script = GroupChatScript(selector=[failure(), failure()],
                             agents={"planner": [failure()], "critic": [f"Echoing: {echo_of_every_secret()}"]})
    db = str(tmp_path / "rt.db")
    conversation = ('/agent add name:planner role:plans prompt:"You plan."\n'
                    '/agent add name:critic role:checks prompt:"You check."\n'
                    "Plan a trip\n"
                    "@critic what do you hear?\n")
    commands = ("/roundtable why\n/roundtable why message:3\n/roundtable usage\n/roundtable status\n"
                "/roundtable export format:json\n/roundtable export format:html\n/roundtable export format:md\n")
    async with FakeOpenAI(script) as srv:
        env = env_for(srv.base_url)
        first = await roundtable(tmp_path, env, "console", "--db", db, "-vv", stdin=conversation)
        second = await roundtable(tmp_path, env, "console", "--db", db, "-vv", stdin=commands)
    assert first[0] == 0 and second[0] == 0, first[2] + second[2]
    # The faults really happened (and were logged at DEBUG and WARNING), masked.
    assert ("planner", "participant") in [(n, k) for k, n in script.calls] and ("critic", "participant") in [
        (n, k) for k, n in script.calls]
    assert "HTTP 500" in first[2] and "DEBUG" in first[2] and "WARNING" in first[2]
    assert "upstream proxy echo: authorization=***" in first[2]
    assert "[critic] Echoing: upstream proxy echo: authorization=*** x-bot=***" in first[1]
    assert "Written to" in second[1]  # the console's /roundtable export wrote its files

    found: list[str] = []
    for name, (_code, out, err) in (("conversation", first), ("commands", second)):
        found += leaks(f"{name} stdout", out) + leaks(f"{name} log (stderr, -vv)", err)
    for path in sorted(tmp_path.iterdir()):  # rt.db, rt.db-wal, rt.db-shm, the exported files, the history
        if path.is_file():
            found += leaks(path.name, path.read_bytes())
    for fmt in ("json", "html", "md"):
        code, out, err = await roundtable(tmp_path, env, "export", "--db", db, "--group", "main", "--format", fmt)
        assert code == 0, err
        found += leaks(f"roundtable export --format {fmt}", out + err)
    assert not found, "\n".join(found)

    import sqlite3
    with sqlite3.connect(db) as conn:
        errors = [row[0] for row in conn.execute("SELECT error FROM runs WHERE error IS NOT NULL")]
        raw = [row[0] for row in conn.execute("SELECT selector_raw FROM decisions WHERE attempts > 0")]
    assert any("HTTP 500" in e and "***" in e for e in errors), errors  # runs.error is stored, masked
    assert any("<error: server error: HTTP 500" in r for r in raw), raw


@pytest.fixture
def masked_logs():
    """`mask_logs()` for one test: the process-wide record factory and excepthooks are put back after it."""
    import threading

    import bot.masking

    saved = (logging.getLogRecordFactory(), sys.excepthook, threading.excepthook, bot.masking._installed)
    bot.masking._installed = False
    bot.masking.mask_logs()
    yield
    factory, sys.excepthook, threading.excepthook, bot.masking._installed = saved
    logging.setLogRecordFactory(factory)


async def test_an_exception_and_its_traceback_are_masked_in_every_handler(tmp_path, caplog, masked_logs):
    from bot.masking import register_settings

    register_settings(None, {"DISCORD_TOKEN": BOT_TOKEN, "OPENAI_API_KEY": OPENAI_KEY,
                             "ROUNDTABLE_DB": f"postgresql://rt:{quote(DB_PASSWORD, safe='')}@h/rt"})
    stream = tmp_path / "log.txt"
    handler = logging.FileHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("tests.leaks")
    logger.addHandler(handler)
    caplog.set_level(logging.DEBUG)
    try:
        try:
            raise RuntimeError(f"the server said {BOT_TOKEN} and {OPENAI_KEY} at "
                               f"http://rt:{quote(DB_PASSWORD, safe='')}@h/rt")
        except RuntimeError:
            logger.exception("failed with %s", OPENAI_KEY)
            logger.debug("debug %s %s", BOT_TOKEN, DB_PASSWORD, stack_info=True)
    finally:
        logger.removeHandler(handler)
        handler.close()
    written = stream.read_text()
    assert "Traceback" in written and "RuntimeError: the server said *** and ***" in written
    assert "failed with ***" in written and "debug *** ***" in written
    assert not leaks("log file", written) and not leaks("caplog", caplog.text)
    assert not leaks("records", " ".join(r.getMessage() + (r.exc_text or "") for r in caplog.records))


async def test_a_shared_file_holding_secrets_is_masked_when_taken_in(tmp_path):
    """A person attaches a text file that holds every secret (a .env pasted by mistake): the
    model, the database and the exports see it masked, as a message's text is."""
    shared = tmp_path / "settings.txt"
    shared.write_text(f"here is my config\n{echo_of_every_secret()}\nthe end\n")
    script = GroupChatScript(agents={"critic": ["Noted."]})
    db = str(tmp_path / "rt.db")
    conversation = ('/agent add name:critic role:checks prompt:"You check."\n'
                    f"/attach {shared}\n"
                    "@critic what is in the file?\n")
    async with FakeOpenAI(script) as srv:
        env = env_for(srv.base_url)
        code, out, err = await roundtable(tmp_path, env, "console", "--db", db, stdin=conversation)
        assert code == 0, out + err
        code, export, err = await roundtable(tmp_path, env, "export", "--db", db, "--group", "main",
                                             "--format", "json")
        assert code == 0, err
    prompt = json.dumps(srv.requests[-1]["messages"])
    assert "here is my config" in prompt and "the end" in prompt and "here is my config" in export
    found = leaks("the model's prompt", prompt) + leaks("roundtable export", export) + leaks("stdout", out)
    for path in sorted(tmp_path.glob("rt.db*")):
        found += leaks(path.name, path.read_bytes())
    assert not found, "\n".join(found)


async def test_secrets_in_a_tools_result_and_in_its_arguments_reach_nothing(tmp_path):
    """Issue 29: a REAL MCP server's tool returns the bot token, the API keys and the rest (read from a
    file, so only the process's own registry knows them), and the model passes a key in a tool's
    arguments; none of them is in the console's output or its -vv log, the database, the model's next
    request or any export."""
    bad = Path(__file__).resolve().parent / "fakes" / "mcp_bad_server.py"
    (tmp_path / "leak.txt").write_text(echo_of_every_secret())
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"bad": {
        "command": sys.executable, "args": [str(bad)], "env": {"MCP_LEAK_FILE": str(tmp_path / "leak.txt")}}}}))
    from tests.fakes.openai_server import tool_call

    script = GroupChatScript(agents={"planner": [
        Reply(text="Looking.", tool_calls=[tool_call("bad__secrets"),
                                           tool_call("bad__echo", text=f"key {OPENAI_KEY}")]),
        "Nothing to see."]})
    db = str(tmp_path / "rt.db")
    conversation = ('/agent add name:planner role:plans prompt:"You plan."\n'
                    "/agent tools name:planner grant:bad.*\n"
                    "@planner show the configuration\n")
    commands = ("/roundtable why\n/roundtable export format:json\n/roundtable export format:html\n"
                "/roundtable export format:md\n")
    async with FakeOpenAI(script) as srv:
        env = env_for(srv.base_url)  # (the console's --db wins over its ROUNDTABLE_DB, whose password is known)
        first = await roundtable(tmp_path, env, "console", "--db", db, "-vv", stdin=conversation)
        second = await roundtable(tmp_path, env, "console", "--db", db, "-vv", stdin=commands)
    assert first[0] == 0 and second[0] == 0, first[2] + second[2]
    assert "[planner] Nothing to see." in first[1], first
    asked = [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner")][-1]
    secrets, echoed = (m["content"] for m in asked["messages"] if m["role"] == "tool")
    assert secrets.startswith("bot token , api key  upstream proxy echo: authorization=*** x-bot=***"), secrets
    assert echoed == "echo: key ***"
    found = leaks("the model's next request", json.dumps(asked))
    for name, (_code, out, err) in (("conversation", first), ("commands", second)):
        found += leaks(f"{name} stdout", out) + leaks(f"{name} log (stderr, -vv)", err)
    for path in sorted(tmp_path.iterdir()):  # rt.db (and its WAL), the exported files
        if path.is_file() and path.name != "leak.txt":
            found += leaks(path.name, path.read_bytes())
    for fmt in ("json", "html", "md"):
        code, out, err = await roundtable(tmp_path, env, "export", "--db", db, "--group", "main", "--format", fmt)
        assert code == 0, err
        assert "bad__secrets" in out or "bad.secrets" in out, out  # the call is in the export, masked
        found += leaks(f"roundtable export --format {fmt}", out + err)
    assert not found, "\n".join(found)
