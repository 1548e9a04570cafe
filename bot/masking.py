"""Where the secrets registry (`bot.core.rules.secrets`) meets the process.

`register_settings(settings, env)` registers, at start, every secret the settings and
the environment hold. `mask_logs()` makes every log record of the process masked
where it is made (a record factory), so every handler gets the masked text: the
message, an exception's text and traceback, a stack. `sys.excepthook` and
`threading.excepthook` print masked tracebacks too. Both are installed once by
`bot.config.configure_logging`.
"""
from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from bot.core.rules.secrets import SECRETS, mask_error

_FORMATTER = logging.Formatter()
_installed = False


def register_settings(settings: Any, env: Mapping[str, str]) -> int:
    """Register the secrets of `settings` (its token, keys and URL passwords) and of `env`."""
    count = SECRETS.register_env(env)
    for name in ("openai_api_key", "discord_token"):
        count += SECRETS.register(getattr(settings, name, None))
    for name in ("openai_base_url", "db_path", "discord_api_base_url"):
        count += SECRETS.register_url(getattr(settings, name, None))
    for provider in getattr(settings, "providers", ()):  # ROUNDTABLE_PROVIDER_<NAME>_API_KEY / _BASE_URL
        count += SECRETS.register(provider.api_key) + SECRETS.register_url(provider.base_url)
    return count


def mask_record(record: logging.LogRecord) -> None:
    """Mask `record` in place: its message (arguments merged in), its exception and stack text."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: keep what it would have shown, masked
        message = f"{record.msg!r} % {record.args!r}"
    masked = mask_error(message)
    if masked != message:
        record.msg, record.args = masked, None
    if record.exc_info and not record.exc_text:
        record.exc_text = mask_error(_FORMATTER.formatException(record.exc_info))
    elif record.exc_text:
        record.exc_text = mask_error(record.exc_text)
    if record.stack_info:
        record.stack_info = mask_error(record.stack_info)


def mask_logs() -> None:
    """Mask every log record from now on, whichever handler takes it (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        mask_record(record)
        return record

    logging.setLogRecordFactory(factory)
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook


def _excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    sys.stderr.write(mask_error("".join(traceback.format_exception(kind, exc, tb))))


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
    sys.stderr.write(mask_error(f"Exception in thread {name}:\n{text}"))
