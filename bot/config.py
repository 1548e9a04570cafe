"""Settings from the environment (and `.env`), checked all at once.

`load_env_file(path)` reads the settings file (`--env-file`, else `./.env`) into
the environment; `load_settings(env)` returns a frozen `Settings` or raises one
`ConfigError` whose text names every bad key and its fix, one line each. Every
key is documented in `config.example.env`. A URL setting is never echoed back (it
may carry credentials); `redact_url` (from `bot.core.rules.secrets`) gives the form that is safe to log.
`configure_logging` masks every secret in every log record (`bot.masking`) and keeps
discord.py's voice warnings out of the log.
"""
from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from bot.core.errors import ConfigError, InvalidInput
from bot.core.models import (
    APPROVAL_TIMEOUT_RANGE,
    DEFAULT_APPROVAL_TIMEOUT,
    DEFAULT_CONTEXT_BUDGET,
    DEFAULT_FOLLOWUP_WINDOW,
    DEFAULT_MAX_IMAGES,
    DEFAULT_MAX_TEXT,
    DEFAULT_MAX_TOOL_STEPS,
    DEFAULT_MAX_TURNS,
    DEFAULT_PROVIDER,
    DEFAULT_SELECTOR_BUDGET,
    FOLLOWUP_WINDOW_RANGE,
    MAX_IMAGES_RANGE,
    MAX_TEXT_RANGE,
    MAX_TOOL_STEPS_RANGE,
    MAX_TURNS_RANGE,
)
from bot.core.rules.pricing import Price, merged_prices, parse_prices
from bot.core.rules.secrets import redact_url
from bot.core.rules.shards import Shards, parse_shards
from bot.core.rules.validation import CONTEXT_BUDGET_RANGE, FALSE_WORDS, SELECTOR_BUDGET_RANGE, TRUE_WORDS

T = TypeVar("T")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DEFAULT_ENV_FILE = ".env"
PROVIDER_KEY = re.compile(r"^ROUNDTABLE_PROVIDER_(?P<name>.+)_(?P<what>BASE_URL|API_KEY)$")
PROVIDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
NO_KEY = "none"  # sent as the key of a provider without one (a local server that ignores it)


@dataclass(frozen=True)
class Provider:
    """A named OpenAI-compatible endpoint: ROUNDTABLE_PROVIDER_<NAME>_BASE_URL / _API_KEY."""

    name: str  # lower case, as models name it (`local/llama3.1:8b`)
    base_url: str
    api_key: str = NO_KEY

    def __repr__(self) -> str:  # never print the key
        return f"Provider(name={self.name!r}, base_url={redact_url(self.base_url)!r})"


@dataclass(frozen=True)
class Settings:
    openai_api_key: str
    openai_base_url: str | None = None
    model: str = "gpt-4o-mini"
    selector_model: str | None = None
    summary_model: str | None = None  # ROUNDTABLE_SUMMARY_MODEL: writes rolling summaries (default: the selector's)
    mcp_config: str | None = None  # ROUNDTABLE_MCP_CONFIG: the MCP servers' file (default: mcp.json when present)
    db_path: str = "roundtable.db"
    max_agent_turns: int = DEFAULT_MAX_TURNS
    context_budget: int = DEFAULT_CONTEXT_BUDGET
    selector_budget: int = DEFAULT_SELECTOR_BUDGET
    llm_timeout: float = 60.0
    llm_max_retries: int = 2
    log_level: str = "INFO"
    discord_token: str | None = None
    discord_api_base_url: str | None = None
    discord_guild_id: int | None = None
    price_overrides: dict[str, Price] = field(default_factory=dict)  # ROUNDTABLE_PRICES
    shards: Shards | None = None  # ROUNDTABLE_SHARDS / ROUNDTABLE_SHARD_COUNT (or run --shards / --shard-count)
    providers: tuple[Provider, ...] = ()  # the named ones; the default is openai_base_url / openai_api_key
    max_images: int = DEFAULT_MAX_IMAGES
    max_text: int = DEFAULT_MAX_TEXT
    stream: bool = True  # ROUNDTABLE_STREAM: new groups show replies as they are written
    fetch_private: bool = False  # ROUNDTABLE_FETCH_PRIVATE: fetch_url may read private/loopback addresses
    show_tools: bool = True  # ROUNDTABLE_SHOW_TOOLS: new groups' replies keep a compact line of their tool calls
    followup_window: int = DEFAULT_FOLLOWUP_WINDOW  # ROUNDTABLE_FOLLOWUP_WINDOW: minutes (new groups)
    approval_timeout: int = DEFAULT_APPROVAL_TIMEOUT  # ROUNDTABLE_APPROVAL_TIMEOUT: seconds (new groups)
    max_tool_steps: int = DEFAULT_MAX_TOOL_STEPS  # ROUNDTABLE_MAX_TOOL_STEPS (new groups)

    @property
    def prices(self) -> dict[str, Price]:
        """The built-in prices with ROUNDTABLE_PRICES on top."""
        return merged_prices(self.price_overrides)

    def __repr__(self) -> str:  # never print secrets
        base_url = redact_url(self.openai_base_url) if self.openai_base_url else None
        db = redact_url(self.db_path) if "://" in self.db_path else self.db_path
        return f"Settings(model={self.model!r}, db_path={db!r}, base_url={base_url!r})"


class _Malformed(ValueError):
    """A parse failure whose text is safe to show: it says what is wrong, never the value."""


class _Reader:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[str] = []
        self.last_missing: int | None = None  # index in `problems` of the last "is missing" line

    def text(self, key: str, default: str | None = None, *, required: bool = False, fix: str = "") -> str | None:
        value = (self.env.get(key) or "").strip()
        if value:
            return value
        if required:
            self.last_missing = len(self.problems)
            self.problems.append(f"{key} is missing: {fix or 'set it in .env (see config.example.env)'}")
        return default

    def parsed(self, key: str, default: T, parse: Callable[[str], T], fix: str, *, secret: bool = False) -> T:
        """`parse(value)`, or `default` plus a problem line; a `secret` value is never quoted back."""
        raw = (self.env.get(key) or "").strip()
        if not raw:
            return default
        try:
            return parse(raw)
        except (ValueError, TypeError) as exc:
            if not secret:
                self.problems.append(f"{key}={raw[:40]!r} is malformed: {fix}")
            elif isinstance(exc, _Malformed):
                self.problems.append(f"{key} is malformed ({exc}): {fix}")
            else:
                self.problems.append(f"{key} is malformed: {fix}")
            return default


def _in_range(low: float, high: float, cast: Callable[[str], T]) -> Callable[[str], T]:
    def parse(raw: str) -> T:
        value = cast(raw)
        if not low <= value <= high:  # type: ignore[operator]  # values from _in_range's casts are ordered
            raise ValueError(raw)
        return value
    return parse


def _url(raw: str) -> str:
    """An http(s) URL with a host; the error says what is wrong without quoting `raw`."""
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise _Malformed("it is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise _Malformed("it must start with http:// or https://")
    if not parts.hostname:
        raise _Malformed("it names no host")
    return raw.rstrip("/")


def _switch(raw: str) -> bool:
    """A boolean setting, in the forms every boolean option takes (`bot.core.rules.validation.boolean`)."""
    value = raw.strip().lower()
    if value not in (*TRUE_WORDS, *FALSE_WORDS):
        raise ValueError(raw)
    return value in TRUE_WORDS


SWITCH_FIX = f"use {'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}"


def _level(raw: str) -> str:
    if raw.upper() not in LOG_LEVELS:
        raise ValueError(raw)
    return raw.upper()


def load_env_file(path: str | None, *, cwd: Path | None = None) -> str | None:
    """Read the settings file into `os.environ` (variables already set win).

    `path` is `--env-file` as given: it must exist (`/dev/null`: no settings).
    Without it `./.env` is read when there is one. Returns a note for the "is
    missing" line when no file was read ("no .env file found in DIR; ..."), else
    None. A file that cannot be read raises `ConfigError` naming it.
    """
    from dotenv import load_dotenv  # only here: bot.config stays importable without it
    from dotenv.parser import parse_stream

    cwd = cwd or Path.cwd()
    if path is not None:
        name = f"--env-file {path}"
        file = cwd / Path(path).expanduser()
        if not file.exists():
            raise ConfigError(f"{name} does not exist")
    else:
        file = cwd / DEFAULT_ENV_FILE
        name = str(file)
        if not file.exists():
            return (f"no {DEFAULT_ENV_FILE} file found in {cwd}; run roundtable init (it asks and checks), or copy "
                    f"config.example.env to {DEFAULT_ENV_FILE}")
    if file.is_dir():
        raise ConfigError(f"{name} is a directory, not a settings file")
    try:
        text = file.read_text(encoding="utf-8")  # once: it may be a pipe, e.g. --env-file <(...)
    except OSError as exc:
        raise ConfigError(f"{name} cannot be read ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{name} is not UTF-8 text") from None
    bad = next((b.original for b in parse_stream(io.StringIO(text)) if b.error), None)
    if bad is not None:  # python-dotenv would only warn and skip it (a key silently lost)
        blank = bad.string[: len(bad.string) - len(bad.string.lstrip())].count("\n")  # blank lines come with it
        raise ConfigError(f"{name}: line {bad.line + blank} is not KEY=value; fix it, or make it a comment with #")
    load_dotenv(stream=io.StringIO(text), override=False)
    return None


def _prices(raw: str) -> dict[str, Price]:
    try:
        return parse_prices(raw)
    except ValueError as exc:
        raise _Malformed(str(exc)) from None


def _providers(env: Mapping[str, str], problems: list[str]) -> tuple[Provider, ...]:
    """The providers named by ROUNDTABLE_PROVIDER_<NAME>_BASE_URL / _API_KEY (problems appended)."""
    found: dict[str, dict[str, str]] = {}
    for key, value in env.items():
        match = PROVIDER_KEY.match(key)
        if match is None:
            continue
        name = match["name"]
        if not PROVIDER_NAME.match(name):
            problems.append(f"{key}: the provider name {name!r} must be letters, digits, '_' or '-'")
            continue
        if name.lower() == DEFAULT_PROVIDER:
            problems.append(f"{key}: {DEFAULT_PROVIDER!r} is the name of the provider of OPENAI_BASE_URL and "
                            "OPENAI_API_KEY; choose another name")
            continue
        found.setdefault(name, {})[match["what"]] = (value or "").strip()
    providers = []
    for name, values in sorted(found.items()):
        prefix = f"ROUNDTABLE_PROVIDER_{name}"
        if not values.get("BASE_URL"):
            problems.append(f"{prefix}_BASE_URL is missing: provider {name.lower()} needs the http(s) URL of its "
                            "OpenAI-compatible API, e.g. http://127.0.0.1:11434/v1")
            continue
        try:
            url = _url(values["BASE_URL"])
        except _Malformed as exc:
            problems.append(f"{prefix}_BASE_URL is malformed ({exc}): use an http(s) URL such as "
                            "http://127.0.0.1:11434/v1")
            continue
        providers.append(Provider(name.lower(), url, values.get("API_KEY") or NO_KEY))
    names = [p.name for p in providers]
    for twice in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"provider {twice} is defined twice (names are case-insensitive): keep one "
                        "ROUNDTABLE_PROVIDER_<NAME>_BASE_URL for it")
    return tuple(providers)


def load_settings(env: Mapping[str, str], *, need_discord: bool, missing_note: str | None = None,
                  need_llm: bool = True) -> Settings:
    """The settings in `env`, or one `ConfigError` naming every problem. `need_llm=False`
    (verbs that only read the database, e.g. export) does not require OPENAI_API_KEY.

    `missing_note` (why a key may be missing, e.g. no settings file was found) is
    added to the last "is missing" line."""
    r = _Reader(env)
    key = r.text("OPENAI_API_KEY", required=need_llm,
                 fix="set it to your provider's API key (any non-empty value for a local server that needs none)")
    token = r.text("DISCORD_TOKEN", required=need_discord,
                   fix="set it to your bot's token from the Discord developer portal (Bot > Reset Token)")
    low, high = MAX_TURNS_RANGE
    budgets = CONTEXT_BUDGET_RANGE
    budget_fix = f"use a whole number of tokens from {budgets[0]} to {budgets[1]}"
    settings = Settings(
        openai_api_key=key or "",
        openai_base_url=r.parsed("OPENAI_BASE_URL", None, _url, "use an http(s) URL such as http://127.0.0.1:8000/v1",
                                 secret=True),
        model=r.text("ROUNDTABLE_MODEL", "gpt-4o-mini") or "gpt-4o-mini",
        selector_model=r.text("ROUNDTABLE_SELECTOR_MODEL"),
        summary_model=r.text("ROUNDTABLE_SUMMARY_MODEL"),
        mcp_config=r.text("ROUNDTABLE_MCP_CONFIG"),
        db_path=r.text("ROUNDTABLE_DB", "roundtable.db") or "roundtable.db",
        max_agent_turns=r.parsed("ROUNDTABLE_MAX_TURNS", DEFAULT_MAX_TURNS, _in_range(low, high, int),
                                 f"use a whole number from {low} to {high}"),
        context_budget=r.parsed("ROUNDTABLE_CONTEXT_BUDGET", DEFAULT_CONTEXT_BUDGET, _in_range(*budgets, int),
                                budget_fix),
        selector_budget=r.parsed("ROUNDTABLE_SELECTOR_BUDGET", DEFAULT_SELECTOR_BUDGET,
                                 _in_range(*SELECTOR_BUDGET_RANGE, int),
                                 f"use a whole number of tokens from {SELECTOR_BUDGET_RANGE[0]} to "
                                 f"{SELECTOR_BUDGET_RANGE[1]}"),
        llm_timeout=r.parsed("ROUNDTABLE_LLM_TIMEOUT", 60.0, _in_range(1, 600, float),
                             "use a number of seconds from 1 to 600"),
        llm_max_retries=r.parsed("ROUNDTABLE_LLM_RETRIES", 2, _in_range(0, 10, int), "use a whole number from 0 to 10"),
        log_level=r.parsed("ROUNDTABLE_LOG_LEVEL", "INFO", _level, f"use one of {', '.join(LOG_LEVELS)}"),
        discord_token=token,
        discord_api_base_url=r.parsed("DISCORD_API_BASE_URL", None, _url,
                                      "use the API URL with its version path, e.g. http://127.0.0.1:8080/api/v10",
                                      secret=True),
        discord_guild_id=r.parsed("DISCORD_GUILD_ID", None, _in_range(1, 2**64, int),
                                  "use the numeric id of your server (Developer Mode > Copy Server ID)"),
        stream=r.parsed("ROUNDTABLE_STREAM", True, _switch, SWITCH_FIX),
        fetch_private=r.parsed("ROUNDTABLE_FETCH_PRIVATE", False, _switch, SWITCH_FIX),
        show_tools=r.parsed("ROUNDTABLE_SHOW_TOOLS", True, _switch, SWITCH_FIX),
        price_overrides=r.parsed("ROUNDTABLE_PRICES", {}, _prices,
                                 "use model=input/cached/output;... in dollars per million tokens, "
                                 "e.g. gpt-4o=2.50/1.25/10;llama3=0/0/0", secret=True),
        providers=_providers(env, r.problems),
        max_images=r.parsed("ROUNDTABLE_MAX_IMAGES", DEFAULT_MAX_IMAGES, _in_range(*MAX_IMAGES_RANGE, int),
                            f"use a whole number of images from {MAX_IMAGES_RANGE[0]} to {MAX_IMAGES_RANGE[1]}"),
        max_text=r.parsed("ROUNDTABLE_MAX_TEXT", DEFAULT_MAX_TEXT, _in_range(*MAX_TEXT_RANGE, int),
                          f"use a whole number of characters from {MAX_TEXT_RANGE[0]} to {MAX_TEXT_RANGE[1]:,}"),
        followup_window=r.parsed("ROUNDTABLE_FOLLOWUP_WINDOW", DEFAULT_FOLLOWUP_WINDOW,
                                 _in_range(*FOLLOWUP_WINDOW_RANGE, int),
                                 f"use a whole number of minutes from {FOLLOWUP_WINDOW_RANGE[0]} (never) to "
                                 f"{FOLLOWUP_WINDOW_RANGE[1]:,}"),
        approval_timeout=r.parsed("ROUNDTABLE_APPROVAL_TIMEOUT", DEFAULT_APPROVAL_TIMEOUT,
                                  _in_range(*APPROVAL_TIMEOUT_RANGE, int),
                                  f"use a whole number of seconds from {APPROVAL_TIMEOUT_RANGE[0]} to "
                                  f"{APPROVAL_TIMEOUT_RANGE[1]:,}"),
        max_tool_steps=r.parsed("ROUNDTABLE_MAX_TOOL_STEPS", DEFAULT_MAX_TOOL_STEPS,
                                _in_range(*MAX_TOOL_STEPS_RANGE, int),
                                f"use a whole number of model calls from {MAX_TOOL_STEPS_RANGE[0]} to "
                                f"{MAX_TOOL_STEPS_RANGE[1]}"),
    )
    try:
        shards = parse_shards(env.get("ROUNDTABLE_SHARDS"), env.get("ROUNDTABLE_SHARD_COUNT") or None)
    except InvalidInput as exc:
        r.problems.append(f"ROUNDTABLE_SHARDS / ROUNDTABLE_SHARD_COUNT: {exc}")
    else:
        settings = replace(settings, shards=shards)
    if r.problems:
        if missing_note and r.last_missing is not None:
            r.problems[r.last_missing] += f" ({missing_note})"
        raise ConfigError("; ".join(r.problems) + ".")
    return settings


def _not_voice_warning(record: logging.LogRecord) -> bool:
    """False for discord.py's "PyNaCl / davey is not installed, voice will NOT be supported": the bot has no voice."""
    return not (isinstance(record.msg, str) and record.msg.endswith("voice will NOT be supported"))


def configure_logging(level: str) -> None:
    from bot.masking import mask_logs

    mask_logs()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # These log request details (URLs with webhook tokens, headers) at DEBUG: keep them quieter.
    # aiosqlite logs every statement with its parameters (webhook tokens) at DEBUG.
    for noisy in ("discord.gateway", "discord.http", "discord.webhook", "httpx", "httpx2", "httpcore", "openai",
                  "aiosqlite"):
        logging.getLogger(noisy).setLevel(max(logging.getLevelName(level), logging.WARNING))
    logging.getLogger("discord.client").addFilter(_not_voice_warning)  # the same filter is added once
