import pytest

from bot.config import load_settings
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
