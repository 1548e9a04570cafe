import pytest

from bot.config import load_settings, redact_url
from bot.core.errors import ConfigError

BASE = {"OPENAI_API_KEY": "sk-x", "DISCORD_TOKEN": "tok"}


def test_defaults():
    s = load_settings(BASE, need_discord=True)
    assert (s.model, s.db_path, s.max_agent_turns, s.llm_timeout, s.discord_guild_id) == (
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
        ("https://discord.com/api/webhooks/1/tok?wait=true", "https://discord.com/api/webhooks/1/tok"),
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
