"""The secrets registry: what is registered, and every form in which a secret is masked."""
from __future__ import annotations

import html
import json
from urllib.parse import quote, quote_plus

import pytest

from bot.core.rules.secrets import MIN_LENGTH, Secrets, mask_url, redact_url, url_secrets

TOKEN = "MTA5.bot-token.Zx9_q-Kk2LmNoPqRsTuVwXyZ"
ODD = 'p@ss/w:rd "quoted" <&> é+ end'  # a password with every character a format escapes


@pytest.fixture
def secrets() -> Secrets:
    return Secrets()


@pytest.mark.parametrize("form", [
    TOKEN, quote(ODD, safe=""), quote_plus(ODD, safe=""), quote(ODD, safe="").lower(),
    json.dumps(ODD)[1:-1], json.dumps(ODD, ensure_ascii=False)[1:-1], html.escape(ODD), html.escape(ODD, quote=False),
    ODD,
])
def test_every_form_of_a_secret_is_masked(secrets: Secrets, form: str) -> None:
    secrets.register(TOKEN)
    secrets.register(ODD)
    assert secrets.mask(f"before {form} after") == "before *** after"


@pytest.mark.parametrize("value", ["x", "sk-x", "1234567", "       x       "])
def test_short_values_are_not_registered(secrets: Secrets, value: str) -> None:
    assert not secrets.register(value)
    assert len(secrets) == 0
    assert secrets.mask("x marks the spot; sk-x; 1234567") == "x marks the spot; sk-x; 1234567"


def test_the_minimum_length_registers(secrets: Secrets) -> None:
    assert secrets.register("a" * MIN_LENGTH)
    assert secrets.mask("b" + "a" * MIN_LENGTH + "b") == "b***b"


@pytest.mark.parametrize("name, registered", [
    ("DISCORD_TOKEN", True), ("OPENAI_API_KEY", True), ("ROUNDTABLE_PROVIDER_LOCAL_API_KEY", True),
    ("ROUNDTABLE_PROVIDER_GROQ_API_KEY", True), ("SOME_SECRET", True), ("PGPASSWORD", True),
    ("DB_PASSWORD", True), ("TOKEN", True), ("ROUNDTABLE_MODEL", False), ("ROUNDTABLE_DB", False),
    ("PATH", False), ("DISCORD_GUILD_ID", False), ("KEYBOARD", False),
])
def test_the_environment_names_its_secrets(secrets: Secrets, name: str, registered: bool) -> None:
    secrets.register_env({name: "value-of-the-setting"})
    assert (secrets.mask("value-of-the-setting") == "***") is registered


def test_url_settings_give_their_passwords(secrets: Secrets) -> None:
    secrets.register_env({
        "ROUNDTABLE_DB": "postgresql://rt:p%40ss%2Fword-9@db.example:5432/rt?sslmode=require",
        "OPENAI_BASE_URL": "https://gw.example/v1?api-key=azure-key-123456&x=1",
        "ROUNDTABLE_PROVIDER_LOCAL_BASE_URL": "http://127.0.0.1:8000/v1",
    })
    for text in ("p@ss/word-9", "p%40ss%2Fword-9", "azure-key-123456"):
        assert secrets.mask(f"[{text}]") == "[***]"
    assert secrets.mask("sslmode=require http://127.0.0.1:8000/v1") == "sslmode=require http://127.0.0.1:8000/v1"


@pytest.mark.parametrize("text, shown", [
    ("Incorrect API key provided: sk-proj-abc123", "Incorrect API key provided: ***"),
    ("Authorization: Bearer abc.def", "Authorization: ***"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: ***"),
    ("connect postgresql://rt:hunter2@db/rt failed", "connect postgresql://rt:***@db/rt failed"),
    ("POST /api/v10/webhooks/1234567890/aBcD_efGh-1234.x?wait=1", "POST /api/v10/webhooks/1234567890/***?wait=1"),
    ("GET /v1/models?api_key=abc&limit=2", "GET /v1/models?api_key=***&limit=2"),
    ("echo MTA5ODc2NTQzMjEwOTg3NjU0.GaBcDe.abcdefghijklmnopqrstuvwxyz012", "echo ***"),
    ("a plain error: HTTP 500", "a plain error: HTTP 500"),
    ("open db?password=***: refused", "open db?password=***: refused"),  # masked once, nothing more taken
])
def test_errors_lose_what_is_shaped_like_a_credential(secrets: Secrets, text: str, shown: str) -> None:
    assert secrets.mask_error(text) == shown


def test_chat_text_keeps_words_that_look_like_shapes(secrets: Secrets) -> None:
    text = "The bearer of bad news uses sk-learn."
    assert secrets.mask(text) == text


@pytest.mark.parametrize("url, found", [
    ("postgresql://u:pw-123456@h/db", ["pw-123456"]),
    ("postgresql://u:p%40ss@h/db", ["p%40ss", "p@ss"]),
    ("postgresql://u@h/db?password=qwertyuiop", ["qwertyuiop"]),
    ("postgresql://u@h/db", []),
    ("http://u:pw@[bad/v1", ["pw"]),
])
def test_url_secrets(url: str, found: list[str]) -> None:
    assert url_secrets(url) == found


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:pw@h:5432/db?sslmode=require&password=x", "postgresql://u:***@h:5432/db?sslmode=require&password=***"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
])
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_redact_url_masks_a_token_in_the_path() -> None:
    assert redact_url("https://discord.example/api/webhooks/123/tok-en_1?wait=1") == \
        "https://discord.example/api/webhooks/123/***"


def test_many_secrets_at_once_are_each_masked(secrets: Secrets) -> None:
    tokens = [f"webhook-token-{n:05d}-xyz" for n in range(1000)]  # past the count where mask() looks up windows
    assert secrets.register_all([*tokens, "short"]) == 1000
    text = f"a {tokens[0]} b {tokens[-1]} c {tokens[500]}"
    assert secrets.mask(text) == "a *** b *** c ***"
    assert secrets.mask("webhook-token-99999-xyz and no secret") == "webhook-token-99999-xyz and no secret"
    secrets.register("one-more-token-later")
    assert secrets.mask("one-more-token-later, " + tokens[1]) == "***, ***"
