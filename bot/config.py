"""Settings from the environment (and `.env`), checked all at once.

`load_env_file(path)` reads the settings file (`--env-file`, else `./.env`) into
the environment; `load_settings(env)` returns a frozen `Settings` or raises one
`ConfigError` whose text names every bad key and its fix, one line each. Each
variable is declared once: a process setting on a field of `Settings` (`setting(...)`,
`scope="process"`), the default of new groups on its field of `GroupSettings`
(`bot.core.settings`); how it is read and its fix come from the declaration. Every
key is documented in `config.example.env` and docs/settings.md (tests/test_settings_declared.py).
A URL setting is never echoed back (it may carry credentials); `redact_url` (from
`bot.core.rules.secrets`) gives the form that is safe to log.
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
from typing import Any, TypeVar
from urllib.parse import urlsplit

from bot.core.errors import ConfigError, InvalidInput
from bot.core.models import DEFAULT_PROVIDER
from bot.core.rules.pricing import Price, merged_prices, parse_prices
from bot.core.rules.secrets import redact_url
from bot.core.rules.shards import Shards, parse_shards
from bot.core.rules.validation import FALSE_WORDS, TRUE_WORDS
from bot.core.settings import GROUP_SETTINGS, GroupSettings, Setting, declared, setting

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


class _Malformed(ValueError):
    """A parse failure whose text is safe to show: it says what is wrong, never the value."""


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


def _prices(raw: str) -> dict[str, Price]:
    try:
        return parse_prices(raw)
    except ValueError as exc:
        raise _Malformed(str(exc)) from None


def _guild_id(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 2**64:
        raise ValueError(raw)
    return value


@dataclass(frozen=True)
class Settings:
    """The process's settings: each field that the environment sets declares its variable (`setting`);
    `new_groups` holds the defaults of new groups, from the variables `GroupSettings` declares."""

    openai_api_key: str = setting(
        "", "text", "the model provider's API key (required; any non-empty value for a local server that needs none)",
        env="OPENAI_API_KEY", secret=True, scope="process",
        fix="set it to your provider's API key (any non-empty value for a local server that needs none)")
    discord_token: str | None = setting(
        None, "text", "the bot's token (required by `roundtable run`)", env="DISCORD_TOKEN", secret=True,
        fix="set it to your bot's token from the Discord developer portal (Bot > Reset Token)", scope="process")
    openai_base_url: str | None = setting(
        None, "text", "any OpenAI-compatible server (default: OpenAI)", env="OPENAI_BASE_URL", secret=True,
        parse=_url, fix="use an http(s) URL such as http://127.0.0.1:8000/v1", scope="process")
    model: str = setting("gpt-4o-mini", "model", "the default model of agents that set none", env="ROUNDTABLE_MODEL",
                         scope="process")
    selector_model: str | None = setting(
        None, "model", "the model that picks the next speaker (default: ROUNDTABLE_MODEL)",
        env="ROUNDTABLE_SELECTOR_MODEL", scope="process")
    summary_model: str | None = setting(
        None, "model", "the model that writes rolling summaries (default: the group's selector model)",
        env="ROUNDTABLE_SUMMARY_MODEL", scope="process")
    mcp_config: str | None = setting(
        None, "text", "the MCP servers' file (default: mcp.json when present)", env="ROUNDTABLE_MCP_CONFIG",
        scope="process")
    db_path: str = setting(
        "roundtable.db", "text", "the database: a SQLite file, or a postgresql:// URL", env="ROUNDTABLE_DB",
        scope="process")
    llm_timeout: float = setting(60.0, "number", "seconds before one model call is given up", low=1, high=600,
                                 unit="seconds", env="ROUNDTABLE_LLM_TIMEOUT", scope="process")
    llm_max_retries: int = setting(2, "integer", "retries of a failed model call", low=0, high=10,
                                   env="ROUNDTABLE_LLM_RETRIES", scope="process")
    log_level: str = setting("INFO", "choice", "the log's level for `roundtable run`", choices=LOG_LEVELS,
                             env="ROUNDTABLE_LOG_LEVEL", scope="process")
    discord_api_base_url: str | None = setting(
        None, "text", "a Discord-compatible server instead of discord.com", env="DISCORD_API_BASE_URL",
        secret=True, parse=_url, scope="process",
        fix="use the API URL with its version path, e.g. http://127.0.0.1:8080/api/v10")
    discord_guild_id: int | None = setting(
        None, "integer", "a server to sync slash commands to instantly", env="DISCORD_GUILD_ID", parse=_guild_id,
        fix="use the numeric id of your server (Developer Mode > Copy Server ID)", scope="process")
    price_overrides: dict[str, Price] | None = setting(  # noqa: RUF009  (its default is None, not shared)
        None, "text", "prices per model in dollars per million tokens, input/cached/output",
        env="ROUNDTABLE_PRICES", secret=True, parse=_prices, scope="process",
        fix="use model=input/cached/output;... in dollars per million tokens, e.g. gpt-4o=2.50/1.25/10;llama3=0/0/0")
    fetch_private: bool = setting(
        False, "boolean", "fetch_url may read loopback, private and link-local addresses",
        env="ROUNDTABLE_FETCH_PRIVATE", scope="process")
    shards: Shards | None = None  # ROUNDTABLE_SHARDS / ROUNDTABLE_SHARD_COUNT (or run --shards / --shard-count)
    providers: tuple[Provider, ...] = ()  # the named ones; the default is openai_base_url / openai_api_key
    new_groups: GroupSettings = field(default_factory=GroupSettings)  # ROUNDTABLE_MAX_TURNS, ROUNDTABLE_STREAM ...

    @property
    def prices(self) -> dict[str, Price]:
        """The built-in prices with ROUNDTABLE_PRICES on top."""
        return merged_prices(self.price_overrides or {})

    def __repr__(self) -> str:  # never print secrets
        base_url = redact_url(self.openai_base_url) if self.openai_base_url else None
        db = redact_url(self.db_path) if "://" in self.db_path else self.db_path
        return f"Settings(model={self.model!r}, db_path={db!r}, base_url={base_url!r})"


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


def _switch(raw: str) -> bool:
    """A boolean setting, in the forms every boolean option takes (`bot.core.rules.validation.boolean`)."""
    value = raw.strip().lower()
    if value not in (*TRUE_WORDS, *FALSE_WORDS):
        raise ValueError(raw)
    return value in TRUE_WORDS


SWITCH_FIX = f"use {'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}"


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


def _parser(one: Setting) -> tuple[Callable[[str], object], str] | None:
    """How the environment's text of a setting is read, and the fix its error names (None: as text)."""
    low, high = one.low, one.high
    of = f" of {one.unit}" if one.unit else ""
    if one.parse is not None:
        return one.parse, one.fix
    if one.kind == "boolean":
        return _switch, SWITCH_FIX
    if one.kind == "choice":
        return _choice(one.choices), one.fix or f"use one of {', '.join(one.choices)}"
    if one.kind in ("integer", "number") and low is not None and high is not None:
        zero = f" ({one.zero})" if one.zero and low == 0 else ""
        if one.kind == "number":
            return _in_range(low, high, float), one.fix or f"use a number{of} from {low:g}{zero} to {high:,g}"
        return (_in_range(low, high, int),
                one.fix or f"use a whole number{of} from {low:.0f}{zero} to {high:,.0f}")
    return None


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        found = [c for c in choices if c.lower() == raw.lower()]
        if not found:
            raise ValueError(raw)
        return found[0]
    return parse


def _read(r: _Reader, one: Setting, *, required: bool = False) -> Any:
    """A declared setting's value from the environment (its default when unset; a problem when malformed)."""
    how = _parser(one)
    if how is None:  # text: its default is a str or None
        return r.text(one.env, one.default, required=required, fix=one.fix)  # type: ignore[arg-type]
    return r.parsed(one.env, one.default, how[0], how[1], secret=one.secret)


PROCESS_SETTINGS = declared(Settings)
ENV_SETTINGS = PROCESS_SETTINGS + tuple(s for s in GROUP_SETTINGS if s.env)  # every variable declared
OTHER_KEYS = ("ROUNDTABLE_SHARDS", "ROUNDTABLE_SHARD_COUNT", "ROUNDTABLE_PROVIDER_<NAME>_BASE_URL",
              "ROUNDTABLE_PROVIDER_<NAME>_API_KEY")  # read by hand below: not one variable each


def load_settings(env: Mapping[str, str], *, need_discord: bool, missing_note: str | None = None,
                  need_llm: bool = True) -> Settings:
    """The settings in `env`, or one `ConfigError` naming every problem. `need_llm=False`
    (verbs that only read the database, e.g. export) does not require OPENAI_API_KEY.

    `missing_note` (why a key may be missing, e.g. no settings file was found) is
    added to the last "is missing" line."""
    r = _Reader(env)
    required = {"OPENAI_API_KEY": need_llm, "DISCORD_TOKEN": need_discord}  # the first two: their lines come first
    values = {s.name: _read(r, s, required=required.get(s.env, False)) for s in PROCESS_SETTINGS}
    new_groups = GroupSettings(**{s.name: _read(r, s) for s in GROUP_SETTINGS if s.env})
    settings = Settings(**values, providers=_providers(env, r.problems), new_groups=new_groups)
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
