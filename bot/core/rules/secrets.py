"""The secrets this process knows, and masking them out of every text that leaves it.

One registry per process, `SECRETS`. At start the wiring registers what the settings
and the environment hold (`register_env`): the value of every variable whose name ends
in `TOKEN`, `KEY`, `SECRET` or `PASSWORD` (DISCORD_TOKEN, OPENAI_API_KEY,
ROUNDTABLE_PROVIDER_<NAME>_API_KEY, PGPASSWORD, ...), and the password and the
secret-named query values (`?password=`, `?api_key=`, `?token=`, ...) of every value that
is a URL (ROUNDTABLE_DB=postgresql://user:PASSWORD@host/db, OPENAI_BASE_URL). The store
registers a channel's webhook token when it hands it out or saves it; the model client
its API key.

`mask(text)` replaces every registered secret with `***`, also in the forms a secret
takes inside a URL (percent-encoded), a JSON string or an HTML page, so an export's
escaped text is masked too. `mask_error(text)` is for text that came from an error or a
server's body: it also masks what is shaped like a credential the process may not know
(`sk-...`, `Bearer ...`, `Basic ...`, a URL's password, a webhook URL's token,
`?key=...`). Chat text gets `mask` only: "bearer of bad news" stays as it was said.

A secret shorter than `MIN_LENGTH` (8) characters is not registered: a local model
server's placeholder key `x` would otherwise turn every x in every text into `***`
(such a value protects nothing anyway).

URL helpers live here too: `url_secrets` (what `register_url` registers), `mask_url`
(a URL with its password as `***`) and `redact_url` (scheme://host:port/path only, for
start-up lines about a server).

Where it is applied: every log record (`bot.masking.mask_logs`, installed with the
logging), the store's writes of text (messages, run errors, decisions, notes,
summaries, delivery problems), what the model server answers (`bot.llm.openai_llm`),
every command answer (`bot.core.verbs.commands.run`), exports, the console's screen and the
command line's error lines.
"""
from __future__ import annotations

import html
import json
import re
import threading
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

MIN_LENGTH = 8
MASK = "***"
REDACTED_URL = "<redacted URL>"

# Variable names whose value is a secret.
_SECRET_NAME = re.compile(r"(?i)(?:^|_)(?:[A-Z0-9]*TOKEN|[A-Z0-9]*KEY|[A-Z0-9]*SECRET|[A-Z0-9]*PASSWORD|PASSWD)$")
# Query parameters whose value is a secret (Azure's `api-key`, `access_token`, a signature, ...).
_SECRET_PARAM = re.compile(r"(?i)^(?:password|passwd|pass|pwd|secret|client_secret|token|access_token|"
                           r"refresh_token|auth|key|api[-_]?key|apikey|sig|signature)$")
# Shapes of credentials in error text and server bodies.
_SHAPES = re.compile(
    r"(?i:\b(?:sk-|bearer\s+)\S+)"  # OpenAI-style keys; Authorization: Bearer ...
    r"|\bBasic\s+(?=[A-Za-z]*[0-9+/])[A-Za-z0-9+/]{12,}=*"  # Authorization: Basic (base64 with a digit, + or /)
    r"|\b[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{20,}"  # a Discord bot token, a JWT
)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:)[^\s/?#@]+(?=@)")
_WEBHOOK_TOKEN = re.compile(r"(?P<head>/webhooks/\d+/)[A-Za-z0-9._-]+")
_SCAN_ABOVE = 200  # forms: past this many, mask() looks up the text's windows instead of searching for each form
# A query parameter's value (one already masked is left alone).
_PARAM_VALUE = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z_-]+)=)(?P<value>(?!\*\*\*)[^&;#\s\"'<>]+)")


def _variants(secret: str) -> set[str]:
    """`secret` as it appears raw, percent-encoded (either case of hex, `+` for spaces),
    and escaped in JSON and HTML."""
    forms = {secret, quote(secret, safe=""), quote_plus(secret, safe=""), html.escape(secret),
             html.escape(secret, quote=False), json.dumps(secret)[1:-1],
             json.dumps(secret, ensure_ascii=False)[1:-1]}
    forms |= {re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), form) for form in list(forms)}
    return {form for form in forms if form}


class Secrets:
    """The registered secrets (thread-safe: log records are made on any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: set[str] = set()  # as registered
        # Every form, longest first; with many, also an index: first MIN_LENGTH characters -> forms.
        # One tuple, replaced whole, so a mask() on another thread never sees one without the other.
        self._state: tuple[tuple[str, ...], dict[str, tuple[str, ...]] | None] = ((), None)
        self._sorted: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (the forms, them in text order)

    def __len__(self) -> int:
        return len(self._known)

    def register(self, secret: str | None) -> bool:
        """Mask `secret` from now on; False (nothing registered) when it is shorter than MIN_LENGTH."""
        return self.register_all([secret]) == 1

    def register_all(self, secrets: Iterable[str | None]) -> int:
        """`register` each (at once: a bot's thousands of webhook tokens); how many were long enough."""
        count, new = 0, set()
        with self._lock:
            for secret in secrets:
                value = (secret or "").strip()
                if len(value) < MIN_LENGTH:
                    continue
                count += 1
                if value in self._known:
                    continue
                self._known.add(value)
                new |= _variants(value) | (_variants(secret) if secret is not None and secret != value else set())
            if not new - set(self._state[0]):
                return count
            forms = tuple(sorted(set(self._state[0]) | new, key=len, reverse=True))
            index: dict[str, tuple[str, ...]] | None = None
            if len(forms) > _SCAN_ABOVE:
                heads: dict[str, list[str]] = {}
                for form in forms:
                    heads.setdefault(form[:MIN_LENGTH], []).append(form)
                index = {head: tuple(group) for head, group in heads.items()}
            self._state = (forms, index)
        return count

    def register_url(self, url: str | None) -> int:
        """Register the password and secret-named query values of `url`; how many."""
        return self.register_all(url_secrets(url or ""))

    def register_env(self, env: Mapping[str, str]) -> int:
        """Register every secret `env` holds (see the module docstring); how many values."""
        found: list[str] = []
        for name, value in env.items():
            if value and _SECRET_NAME.search(name):
                found.append(value)
            if value and ("://" in value or "password=" in value.lower()):
                found += url_secrets(value)
        return self.register_all(found)

    def mask(self, text: str) -> str:
        """`text` with every registered secret (in each of its forms) replaced by `***`."""
        forms, index = self._state
        if not forms or len(text) < MIN_LENGTH:
            return text
        if index is not None:  # a bot in many channels (a webhook token each): look up each window of the text
            found = {form for i in range(len(text) - MIN_LENGTH + 1)
                     for form in index.get(text[i:i + MIN_LENGTH], ()) if text.startswith(form, i)}
            forms = tuple(sorted(found, key=len, reverse=True))
        for form in forms:
            if form in text:
                text = text.replace(form, MASK)
        return text

    def unfinished(self, text: str) -> int:
        """Where a trailing piece of `text` that may still grow into a registered secret starts
        (`len(text)` when none does): a text still being written shows up to there only."""
        forms = self._state[0]
        if not forms:
            return len(text)
        cached = self._sorted
        if cached[0] is not forms:
            cached = self._sorted = (forms, tuple(sorted(forms)))
        ordered = cached[1]
        for i in range(max(0, len(text) - len(forms[0]) + 1), len(text)):
            tail = text[i:]
            at = bisect_left(ordered, tail)
            if at < len(ordered) and ordered[at].startswith(tail):
                return i
        return len(text)

    def mask_error(self, text: str) -> str:
        """`mask(text)`, and whatever in it is shaped like a credential."""
        if not text:
            return text
        text = self.mask(text)
        text = _URL_PASSWORD.sub(rf"\g<head>{MASK}", text)
        text = _WEBHOOK_TOKEN.sub(rf"\g<head>{MASK}", text)
        text = _PARAM_VALUE.sub(lambda m: m["head"] + MASK if _SECRET_PARAM.match(m["name"]) else m[0], text)
        return _SHAPES.sub(MASK, text)

    def known(self) -> frozenset[str]:
        """The secrets registered, as they were (tests keep and restore them)."""
        with self._lock:
            return frozenset(self._known)

    def clear(self) -> None:
        """Forget every secret (tests)."""
        with self._lock:
            self._known.clear()
            self._state = ((), None)


SECRETS = Secrets()
register = SECRETS.register
register_url = SECRETS.register_url
register_env = SECRETS.register_env
register_all = SECRETS.register_all
mask = SECRETS.mask
mask_error = SECRETS.mask_error
unfinished = SECRETS.unfinished


# URLs ---------------------------------------------------------------------------------------------
def url_secrets(url: str) -> list[str]:
    """The password of `url` (as written and percent-decoded) and its secret-named query values."""
    found: list[str] = []
    try:
        parts = urlsplit(url.strip())
        if parts.password:
            found += [parts.password, unquote(parts.password)]
    except ValueError:  # e.g. an unbalanced '[': still look for user:password@ by shape
        match = _URL_PASSWORD.search(url)
        if match is not None:
            password = url[match.end("head"):url.index("@", match.end("head"))]
            found += [password, unquote(password)]
        parts = None
    query = parts.query if parts is not None else url.partition("?")[2]
    for item in query.split("&"):
        key, _, value = item.partition("=")
        if value and _SECRET_PARAM.match(key):
            found += [value, unquote(value.replace("+", " "))]
    return list(dict.fromkeys(found))


def mask_url(url: str) -> str:
    """`url` with its password (if any) and secret-named query values as `***`; anything
    unparsable is shown as its scheme only."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.partition(':')[0]}:{MASK}@{host}"
        query = "&".join(
            f"{k}={MASK}" if _SECRET_PARAM.match(k) else f"{k}={v}" if sep else k
            for k, sep, v in (item.partition("=") for item in parts.query.split("&") if item)
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return url.partition(":")[0] + "://..."


def redact_url(url: str) -> str:
    """`url` as scheme://host[:port]/path, without user, password, query or fragment: safe to log.

    Anything that is not an absolute URL with a host gives `REDACTED_URL` (where the
    credentials sit in it cannot be told). The path is kept and masked (a webhook URL
    carries its token there)."""
    if not url:
        return ""
    try:
        parts = urlsplit(url.strip())
    except ValueError:  # e.g. an unbalanced '[' in the host
        return REDACTED_URL
    try:
        port = parts.port
    except ValueError:  # not a number: left out
        port = None
    host = parts.hostname
    if not parts.scheme or not parts.netloc or not host:
        return REDACTED_URL
    if ":" in host:
        host = f"[{host}]"  # IPv6
    return mask_error(f"{parts.scheme}://{host}{f':{port}' if port is not None else ''}{parts.path}")
