import pytest

from bot.config import load_settings
from bot.core.errors import ConfigError
from bot.core.rules.secrets import redact_url

BASE = {"OPENAI_API_KEY": "sk-x", "DISCORD_TOKEN": "tok"}


def test_defaults():
    s = load_settings(BASE, need_discord=True)
    assert (s.model, s.db_path, s.new_groups.max_agent_turns, s.llm_timeout, s.discord_guild_id) == (
        "gpt-4o-mini", "roundtable.db", 12, 60.0, None)
    assert "sk-x" not in repr(s) and "tok" not in repr(s)


@pytest.mark.parametrize(
    "env, need_discord, names",
    [
        ({}, True, ["OPENAI_API_KEY is missing", "DISCORD_TOKEN is missing"]),
        ({"OPENAI_API_KEY": "k"}, False, []),
        (dict(BASE, ROUNDTABLE_MAX_TURNS="0"), True, ["ROUNDTABLE_MAX_TURNS='0' is malformed"]),
        (dict(BASE, ROUNDTABLE_MAX_TURNS="twelve", ROUNDTABLE_LLM_TIMEOUT="-1"), True,
         ["ROUNDTABLE_MAX_TURNS", "ROUNDTABLE_LLM_TIMEOUT"]),
        (dict(BASE, OPENAI_BASE_URL="localhost:8000"), True, ["OPENAI_BASE_URL"]),
        (dict(BASE, DISCORD_GUILD_ID="my server"), True, ["DISCORD_GUILD_ID"]),
        (dict(BASE, ROUNDTABLE_LOG_LEVEL="loud"), True, ["ROUNDTABLE_LOG_LEVEL"]),
        (dict(BASE, DISCORD_API_BASE_URL="http://127.0.0.1:8080/api/v10/"), True, []),
    ],
)
def test_problems_are_named_in_one_line(env, need_discord, names):
    if not names:
        load_settings(env, need_discord=need_discord)
        return
    with pytest.raises(ConfigError) as info:
        load_settings(env, need_discord=need_discord)
    text = str(info.value)
    assert "\n" not in text and text.endswith(".") and ".;" not in text
    for name in names:
        assert name in text


@pytest.mark.parametrize("key", ["OPENAI_BASE_URL", "DISCORD_API_BASE_URL"])
@pytest.mark.parametrize(
    "value, reason",
    [
        ("htp://user:sk-secret@secret.example/v1", "it must start with http:// or https://"),
        ("http//user:sk-secret@secret.example/v1", "it must start with http:// or https://"),
        ("user:sk-secret@secret.example:8000/v1", "it must start with http:// or https://"),
        ("ftp://sk-secret@secret.example", "it must start with http:// or https://"),
        ("sk-secret", "it must start with http:// or https://"),
        ("sk-secret:user@secret.example", "it must start with http:// or https://"),
        ("https://?token=sk-secret", "it names no host"),
        ("http:///sk-secret@secret.example", "it names no host"),
        ("http://user:sk-secret@secret.example:port/v1", "it is not a valid URL"),
        ("http://user:sk-secret@[secret.example/v1", "it is not a valid URL"),
    ],
)
def test_malformed_url_is_never_echoed(key, value, reason):
    with pytest.raises(ConfigError) as info:
        load_settings(dict(BASE, **{key: value}), need_discord=True)
    text = str(info.value)
    assert "sk-secret" not in text and "user" not in text and "secret.example" not in text
    assert text.startswith(f"{key} is malformed ({reason}): use ")
    assert "\n" not in text and text.endswith(".")


@pytest.mark.parametrize(
    "url, redacted",
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("http://user:sk-secret@127.0.0.1:8000/v1?key=sk-secret#frag", "http://127.0.0.1:8000/v1"),
        ("https://token@host.example/path/", "https://host.example/path/"),
        ("https://discord.com/api/webhooks/1/tok?wait=true", "https://discord.com/api/webhooks/1/***"),  # its token
        ("http://[::1]:8080/api/v10", "http://[::1]:8080/api/v10"),
        ("HTTP://User:Pw@Host.Example:443", "http://host.example:443"),
        ("http://user:pass@host:notaport/x", "http://host/x"),
        ("localhost:8000", "<redacted URL>"),
        ("user:sk-secret@host/v1", "<redacted URL>"),
        ("http:///sk-secret@host", "<redacted URL>"),
        ("http://user:sk-secret@[host/v1", "<redacted URL>"),
        ("sk-secret", "<redacted URL>"),
        ("", ""),
    ],
)
def test_redact_url(url, redacted):
    assert redact_url(url) == redacted
    assert "sk-secret" not in redact_url(url)


def test_settings_repr_hides_base_url_credentials():
    s = load_settings(dict(BASE, OPENAI_BASE_URL="http://user:sk-secret@127.0.0.1:8000/v1"), need_discord=True)
    assert s.openai_base_url == "http://user:sk-secret@127.0.0.1:8000/v1"  # the client still gets it whole
    assert "sk-secret" not in repr(s) and "127.0.0.1:8000/v1" in repr(s)


@pytest.mark.parametrize("env, need_discord, last", [
    ({}, True, "DISCORD_TOKEN is missing"),
    ({}, False, "OPENAI_API_KEY is missing"),
    ({"DISCORD_TOKEN": "t", "ROUNDTABLE_MAX_TURNS": "0"}, True, "OPENAI_API_KEY is missing"),
])
def test_the_missing_note_is_said_once_on_the_last_missing_key(env, need_discord, last):
    with pytest.raises(ConfigError) as info:
        load_settings(env, need_discord=need_discord, missing_note="no .env file found in /here")
    text = str(info.value)
    assert text.count("(no .env file found in /here)") == 1
    missing = [part for part in text.split("; ") if " is missing: " in part]
    assert missing[-1].startswith(last) and missing[-1].rstrip(".").endswith("(no .env file found in /here)")


def test_the_missing_note_is_not_said_when_nothing_is_missing():
    with pytest.raises(ConfigError) as info:
        load_settings(dict(BASE, ROUNDTABLE_MAX_TURNS="0"), need_discord=True, missing_note="no .env file found")
    assert "no .env" not in str(info.value)


@pytest.fixture
def environ(monkeypatch):
    """os.environ as load_env_file changes it, restored afterwards."""
    import os

    for key in ("RT_TEST_A", "RT_TEST_B"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RT_TEST_B", "from the environment")
    return os.environ


def test_load_env_file_reads_the_default_and_real_variables_win(tmp_path, environ):
    from bot.config import load_env_file

    (tmp_path / ".env").write_text("RT_TEST_A=from the file\nRT_TEST_B=from the file\n")
    assert load_env_file(None, cwd=tmp_path) is None
    assert (environ["RT_TEST_A"], environ["RT_TEST_B"]) == ("from the file", "from the environment")


def test_load_env_file_without_a_default_returns_the_note(tmp_path, environ):
    from bot.config import load_env_file

    assert load_env_file(None, cwd=tmp_path) == (f"no .env file found in {tmp_path}; run roundtable init (it asks and "
                                                 "checks), or copy config.example.env to .env")
    assert "RT_TEST_A" not in environ


@pytest.mark.parametrize("make, message", [
    (lambda tmp: None, "--env-file x.env does not exist"),
    (lambda tmp: (tmp / "x.env").mkdir(), "--env-file x.env is a directory, not a settings file"),
    (lambda tmp: (tmp / "x.env").write_bytes(b"RT_TEST_A=\xff\xfe\n"), "--env-file x.env is not UTF-8 text"),
    (lambda tmp: (tmp / "x.env").write_text("# ok\nRT_TEST_A=1\n\n  \nnot a setting = x y\n"),
     "--env-file x.env: line 5 is not KEY=value; fix it, or make it a comment with #"),
])
def test_load_env_file_problems_name_the_file(tmp_path, environ, make, message):
    from bot.config import load_env_file

    make(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_env_file("x.env", cwd=tmp_path)
    assert str(info.value) == message and info.value.__cause__ is None
    assert "RT_TEST_A" not in environ  # nothing of a bad file is taken


@pytest.fixture
def logging_restored():
    """configure_logging changes process-wide logging: put it back."""
    import logging

    names = ["", "discord.client", "discord.gateway", "discord.http", "discord.webhook", "httpx", "httpx2",
             "httpcore", "openai", "aiosqlite"]
    saved = {n: (logging.getLogger(n).level, list(logging.getLogger(n).filters)) for n in names}
    handlers = list(logging.getLogger().handlers)
    yield
    for n, (level, filters) in saved.items():
        logger = logging.getLogger(n)
        logger.setLevel(level)
        logger.filters[:] = filters
    root = logging.getLogger()
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)


def test_discord_voice_warnings_are_never_logged(logging_restored, caplog, monkeypatch):
    """Whatever the surface (the console never builds a discord.Client, but the filter is the same)."""
    import discord
    from discord.voice_client import VoiceClient

    from bot.config import configure_logging

    configure_logging("DEBUG")
    configure_logging("DEBUG")  # twice: still one filter
    monkeypatch.setattr(VoiceClient, "warn_nacl", True)
    monkeypatch.setattr(VoiceClient, "warn_dave", True)
    caplog.set_level("DEBUG")
    discord.Client(intents=discord.Intents.none())
    discord.client._log.warning("another discord warning")
    assert [r.getMessage() for r in caplog.records if r.name == "discord.client"] == ["another discord warning"]
    assert len(discord.client._log.filters) == 1


def test_config_example_env_loads_and_shows_the_defaults(monkeypatch):
    import os
    from pathlib import Path

    from bot.config import load_env_file

    example = Path(__file__).resolve().parents[1] / "config.example.env"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ROUNDTABLE_", "DISCORD_"))}
    monkeypatch.setattr(os, "environ", env)  # load_env_file writes here; the real one is untouched
    assert load_env_file(str(example)) is None
    # "everything else has the default shown": the example's values are the defaults
    assert load_settings(dict(env, OPENAI_API_KEY="k"), need_discord=False) == load_settings(
        {"OPENAI_API_KEY": "k"}, need_discord=False)


def test_a_postgresql_url_in_roundtable_db_is_shown_without_its_password() -> None:
    settings = load_settings({"OPENAI_API_KEY": "k", "ROUNDTABLE_DB": "postgresql://rt:pw-S3cret@db:5432/rt"},
                             need_discord=False)
    assert settings.db_path == "postgresql://rt:pw-S3cret@db:5432/rt"  # what the store connects with
    assert "pw-S3cret" not in repr(settings) and "db:5432/rt" in repr(settings)


def test_providers_are_read_from_their_settings():
    env = dict(BASE, ROUNDTABLE_PROVIDER_LOCAL_BASE_URL="http://127.0.0.1:11434/v1/",
               ROUNDTABLE_PROVIDER_OPEN_ROUTER_BASE_URL="https://openrouter.ai/api/v1",
               ROUNDTABLE_PROVIDER_OPEN_ROUTER_API_KEY="sk-or-secret")
    s = load_settings(env, need_discord=True)
    assert [(p.name, p.base_url, p.api_key) for p in s.providers] == [
        ("local", "http://127.0.0.1:11434/v1", "none"), ("open_router", "https://openrouter.ai/api/v1", "sk-or-secret")]
    assert "sk-or-secret" not in repr(s) + repr(s.providers)
    assert (s.new_groups.max_images, s.new_groups.max_text) == (4, 40_000)


@pytest.mark.parametrize("env, problem", [
    ({"ROUNDTABLE_PROVIDER_LOCAL_API_KEY": "k"},
     "ROUNDTABLE_PROVIDER_LOCAL_BASE_URL is missing: provider local needs the http(s) URL"),
    ({"ROUNDTABLE_PROVIDER_LOCAL_BASE_URL": "localhost:11434"},
     "ROUNDTABLE_PROVIDER_LOCAL_BASE_URL is malformed (it must start with http:// or https://)"),
    ({"ROUNDTABLE_PROVIDER_DEFAULT_BASE_URL": "http://x"}, "'default' is the name of the provider of OPENAI_BASE_URL"),
    ({"ROUNDTABLE_PROVIDER_A B_BASE_URL": "http://x"}, "the provider name 'A B' must be letters, digits"),
    ({"ROUNDTABLE_PROVIDER_X_BASE_URL": "http://x", "ROUNDTABLE_PROVIDER_x_BASE_URL": "http://y"},
     "provider x is defined twice"),
    ({"ROUNDTABLE_MAX_IMAGES": "21"},
     "ROUNDTABLE_MAX_IMAGES='21' is malformed: use a whole number of images from 0 to 20"),
    ({"ROUNDTABLE_MAX_TEXT": "lots"}, "ROUNDTABLE_MAX_TEXT='lots' is malformed: use a whole number of characters"),
])
def test_provider_and_attachment_problems_are_one_line(env, problem):
    with pytest.raises(ConfigError) as info:
        load_settings(dict(BASE, **env), need_discord=True)
    assert problem in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("value, stream", [("on", True), ("OFF", False), ("true", True), ("0", False), ("", True)])
def test_roundtable_stream_is_the_default_of_new_groups(value, stream):
    settings = load_settings(dict(BASE, ROUNDTABLE_STREAM=value), need_discord=True)
    assert settings.new_groups.stream is stream


@pytest.mark.parametrize("value, shown", [("on", True), ("off", False), ("no", False), ("", True)])
def test_roundtable_show_tools_is_the_default_of_new_groups(value, shown):
    settings = load_settings(dict(BASE, ROUNDTABLE_SHOW_TOOLS=value), need_discord=True)
    assert settings.new_groups.show_tools is shown


def test_a_malformed_roundtable_show_tools_is_one_line():
    with pytest.raises(ConfigError, match=r"^ROUNDTABLE_SHOW_TOOLS='maybe' is malformed: use true/yes/on/1 or "
                                          r"false/no/off/0\.$"):
        load_settings(dict(BASE, ROUNDTABLE_SHOW_TOOLS="maybe"), need_discord=True)


def test_a_malformed_roundtable_stream_is_one_line():
    with pytest.raises(ConfigError,
                       match=r"^ROUNDTABLE_STREAM='sometimes' is malformed: use true/yes/on/1 or false/no/off/0\.$"):
        load_settings(dict(BASE, ROUNDTABLE_STREAM="sometimes"), need_discord=True)


@pytest.mark.parametrize("value, minutes", [("", 120), ("0", 0), ("45", 45), ("10080", 10_080)])
def test_roundtable_followup_window_is_the_default_of_new_groups(value, minutes):
    settings = load_settings(dict(BASE, ROUNDTABLE_FOLLOWUP_WINDOW=value), need_discord=True)
    assert settings.new_groups.followup_window == minutes


@pytest.mark.parametrize("value", ["-1", "10081", "two hours"])
def test_a_malformed_roundtable_followup_window_is_one_line(value):
    with pytest.raises(ConfigError, match=rf"^ROUNDTABLE_FOLLOWUP_WINDOW='{value}' is malformed: use a whole number "
                                          r"of minutes from 0 \(never\) to 10,080\.$"):
        load_settings(dict(BASE, ROUNDTABLE_FOLLOWUP_WINDOW=value), need_discord=True)


@pytest.mark.parametrize("value, private", [("on", True), ("off", False), ("", False), (None, False)])
def test_roundtable_fetch_private_is_off_by_default(value, private):
    env = dict(BASE) if value is None else dict(BASE, ROUNDTABLE_FETCH_PRIVATE=value)
    assert load_settings(env, need_discord=True).fetch_private is private
    with pytest.raises(ConfigError, match=r"^ROUNDTABLE_FETCH_PRIVATE='maybe' is malformed: use true"):
        load_settings(dict(BASE, ROUNDTABLE_FETCH_PRIVATE="maybe"), need_discord=True)


@pytest.mark.parametrize("name, value, field, expected", [
    ("ROUNDTABLE_APPROVAL_TIMEOUT", "", "approval_timeout", 600),
    ("ROUNDTABLE_APPROVAL_TIMEOUT", "1", "approval_timeout", 1),
    ("ROUNDTABLE_APPROVAL_TIMEOUT", "86400", "approval_timeout", 86_400),
    ("ROUNDTABLE_MAX_TOOL_STEPS", "", "max_tool_steps", 8),
    ("ROUNDTABLE_MAX_TOOL_STEPS", "3", "max_tool_steps", 3),
])
def test_approval_timeout_and_max_tool_steps_are_the_defaults_of_new_groups(name, value, field, expected):
    settings = load_settings(dict(BASE, **{name: value}), need_discord=True)
    assert getattr(settings.new_groups, field) == expected


@pytest.mark.parametrize("name, value, told", [
    ("ROUNDTABLE_APPROVAL_TIMEOUT", "0", r"use a whole number of seconds from 1 to 86,400\."),
    ("ROUNDTABLE_APPROVAL_TIMEOUT", "ten minutes", r"use a whole number of seconds from 1 to 86,400\."),
    ("ROUNDTABLE_MAX_TOOL_STEPS", "51", r"use a whole number of model calls from 1 to 50\."),
])
def test_a_malformed_approval_timeout_or_max_tool_steps_is_one_line(name, value, told):
    with pytest.raises(ConfigError, match=rf"^{name}='{value}' is malformed: {told}$"):
        load_settings(dict(BASE, **{name: value}), need_discord=True)
