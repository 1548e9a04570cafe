"""How tool calls are shown (SPEC §6b "Visible"): the draft's line per call, the compact line, the
argument summary. Pure table tests."""
from __future__ import annotations

import json

import pytest

from bot.core.rules.secrets import SECRETS
from bot.core.rules.tool_lines import call_line, compact_line, is_error, shown_name, summary

SECRET = "sk-live-lines-secret-9f8e7d6c5b4a3210"


@pytest.mark.parametrize("name, shown", [
    ("counter__add", "counter.add"), ("memory_write", "memory_write"), ("fetch_url", "fetch_url"),
    ("web__fetch__url", "web.fetch__url"), ("__x", "__x"),
])
def test_shown_name(name, shown):
    assert shown_name(name) == shown


@pytest.mark.parametrize("arguments, expected", [
    ({"url": "https://en.wikipedia.org/wiki/Rome"}, "en.wikipedia.org"),
    ({"n": 2}, "n=2"),
    ({"query": "a" * 100}, "query=" + "a" * 33 + "…"),
    ({"text": "two\nlines"}, "text=two lines"),
    ({"items": [1, 2]}, "items=[1, 2]"),
    ({}, ""),
    ({"key": f"api_key={SECRET}"}, "key=api_key=***"),
])
def test_summary(arguments, expected):
    SECRETS.register(SECRET)
    got = summary(json.dumps(arguments))
    assert got == expected and len(got) <= 40


def test_summary_of_arguments_that_are_not_an_object():
    assert summary("{x") == "{x" and summary("[1]") == ""


@pytest.mark.parametrize("kwargs, line", [
    ({}, "🔧 counter.add · n=2 …"),
    ({"done": True, "seconds": 0.84}, "🔧 counter.add · n=2 … ✓ 0.8 s"),
    ({"done": True, "error": True, "result": "error: counter.add did not answer within 30 s."},
     "🔧 counter.add · n=2 … ✗ counter.add did not answer within 30 s."),
])
def test_call_line(kwargs, line):
    assert call_line("counter__add", '{"n": 2}', **kwargs) == line


def test_compact_line():
    assert compact_line([("counter__add", False), ("fetch_url", True)]) == "🔧 counter.add ✓ · fetch_url ✗"
    assert compact_line([]) == ""


@pytest.mark.parametrize("calls, line", [
    ([("counter__add", False)] * 10 + [("counter__add", True)] * 40, "🔧 counter.add ✓ ×10 · counter.add ✗ ×40"),
    ([("a", False), ("a", False), ("b", False), ("a", False)], "🔧 a ✓ ×2 · b ✓ · a ✓"),
    ([(f"t{i}", False) for i in range(12)] + [("t0", False)] * 3,
     "🔧 " + " · ".join(f"t{i} ✓" for i in range(10)) + " · + 5 more"),
])
def test_a_compact_line_of_many_calls_stays_short(calls, line):
    """A run of 50 calls (one answer's cap refusing 40 of them) is one short line, not 50 marks."""
    assert compact_line(calls) == line


@pytest.mark.parametrize("status, result, error", [
    ("done", "ok", False), ("done", "error: no", True), ("unknown", "error: cut", True), ("running", None, True),
])
def test_is_error(status, result, error):
    assert is_error(status, result) is error
