"""The `openai` client's failures as the `LLMError` tree (`bot.llm.openai_llm`'s boundary).

`ErrorTranslator` turns one server's failures into `LLMError`s with a short message for the log
(what happened, HTTP status, model, server host) that never holds a secret: the server's own error
text (`detail`) is masked (`bot.core.rules.secrets.mask_error`: every secret the process
registered, the API key among them, and anything shaped like a key or token) and trimmed. People
see only `LLMError.public`: the kind of failure and the HTTP status, and for a refused request
other than 401/403 the server's reason (`public_reason`: masked, without URLs, at most 100
characters), never the host. `connection_problem` says in a few words why a connection failed.
"""
from __future__ import annotations

import re
import socket
import ssl
from typing import Any

import httpx2
import openai

from bot.core.errors import LLMError, LLMRateLimited, LLMRejected, LLMTimeout, LLMUnavailable
from bot.core.rules.secrets import mask_error

_DETAIL_CHARS = 160
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_PUBLIC_REASON_CHARS = 100  # the server's reason in a notice (its whole `detail` goes to the log)


class Overdue(openai.APITimeoutError):
    """A request that went on past the adapter's deadline (a server sending bytes slowly)."""

    def __init__(self, seconds: float, base_url: Any) -> None:
        super().__init__(request=httpx2.Request("POST", f"{base_url}chat/completions"))
        self.seconds = seconds


class ErrorTranslator:
    """One server's failures (`host`, the client's `timeout` in seconds) as `LLMError`s."""

    def __init__(self, host: str, timeout: float) -> None:
        self.host = host
        self.timeout = timeout

    def translate(self, exc: openai.OpenAIError, model: str) -> LLMError:
        where = f"model {model} at {self.host}"
        if isinstance(exc, Overdue):
            return LLMTimeout(f"did not finish within {exc.seconds:g}s ({where})")
        if isinstance(exc, openai.APITimeoutError):
            return LLMTimeout(f"timed out after {self.timeout:g}s ({where})")
        if isinstance(exc, openai.APIConnectionError):
            return LLMUnavailable(f"could not connect ({where})")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = self.detail(exc)
            if status == 429:
                return LLMRateLimited(f"rate limited: HTTP 429 ({where}){detail}")
            if status == 408:
                return LLMTimeout(f"server timed out: HTTP 408 ({where}){detail}")
            if status >= 500:
                return LLMUnavailable(f"server error: HTTP {status} ({where}){detail}",
                                      public=f"the model service failed (HTTP {status})")
            if 400 <= status < 500:
                reason = "" if status in (401, 403) else public_reason(detail)
                return LLMRejected(f"request rejected: HTTP {status} ({where}){detail}",
                                   public=f"the model service refused the request (HTTP {status}{reason})")
            return LLMError(f"unexpected HTTP {status} ({where}){detail}")
        return LLMError(f"{type(exc).__name__} ({where})")

    @staticmethod
    def detail(exc: openai.APIStatusError) -> str:
        """The server's own error message: one line, trimmed, secrets redacted."""
        body = exc.body
        message: object = None
        if isinstance(body, dict):
            error = body.get("error", body)
            message = error.get("message") if isinstance(error, dict) else error
        elif isinstance(body, str):
            message = body
        if not isinstance(message, str) or not message.strip():
            return ""
        text = " ".join(message.split())
        text = mask_error(text)
        if len(text) > _DETAIL_CHARS:
            text = text[: _DETAIL_CHARS - 1] + "…"
        return f": {text}"


def public_reason(detail: str) -> str:
    """The server's own reason for refusing a request (`ErrorTranslator.detail`: one line, secrets
    masked) as people may see it: shorter, without addresses. `: model not found, try pulling it`, or ""."""
    text = _URL.sub("<url>", detail.removeprefix(": ")).strip()
    if not text:
        return ""
    if len(text) > _PUBLIC_REASON_CHARS:
        text = text[: _PUBLIC_REASON_CHARS - 1].rstrip() + "…"
    return f": {text}"


def connection_problem(exc: BaseException) -> str:
    """Why a connection failed, in a few words, from the exception's causes (never their text: it may hold the URL)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return "host not found"
        if isinstance(cause, ssl.SSLError):
            return "TLS handshake failed"
        if isinstance(cause, TimeoutError):
            return "connection timed out"
        if isinstance(cause, ConnectionError):
            return "connection failed"
        cause = cause.__cause__ or cause.__context__
    return "could not connect"
