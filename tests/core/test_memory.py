"""Memory's pure parts: the <memory> block under its budget, reading a memory_write call, the system message."""
from __future__ import annotations

import json

import pytest

from bot.core.features.memory import NOTE_MAX, SAVED, memory_section, read_note
from bot.core.models import Agent, Note, ToolCall
from bot.core.rules.prompts import system_message
from bot.llm.tokens import make_token_counter

COUNTER = make_token_counter()


def notes(*texts: str) -> list[Note]:
    return [Note(i + 1, 7, text) for i, text in enumerate(texts)]


@pytest.mark.parametrize("stored, total, budget, lines", [
    ((), 0, 800, ["Memory is on: you have no notes yet. Save what you want to remember with memory_write."]),
    (("likes trains", "budget $1,500"), 2, 800,
     ["Memory is on. Your notes from earlier runs, oldest first (save a new one with memory_write):",
      "- likes trains", "- budget $1,500"]),
    # over the budget: the newest that fit stay, a marker counts the rest (also those never read)
    (("one " * 20, "two " * 20, "three " * 20), 5, 50,
     ["Memory is on. Your notes from earlier runs, oldest first (save a new one with memory_write):",
      "(3 older notes dropped)", "- " + ("two " * 20).strip(), "- " + ("three " * 20).strip()]),
    (("old", "new"), 2, 3, ["Memory is on. Your notes from earlier runs, oldest first (save a new one with "
                            "memory_write):", "(1 older note dropped)", "- new"]),
    (("a\nnote  on\tlines",), 1, 800, ["Memory is on. Your notes from earlier runs, oldest first (save a new one "
                                       "with memory_write):", "- a note on lines"]),
])
def test_memory_section(stored, total, budget, lines):
    block = memory_section(notes(*stored), total, COUNTER, budget)
    assert block.splitlines() == ["<memory>", *lines, "</memory>"]


def test_memory_section_stays_within_its_budget():
    block = memory_section(notes(*[f"note number {i} " * 5 for i in range(300)]), 300, COUNTER, 800)
    kept = [line for line in block.splitlines() if line.startswith("- ")]
    used = sum(COUNTER.count(line) + 1 for line in kept)
    next_older = "- " + (f"note number {299 - len(kept)} " * 5).strip()
    assert used <= 800 < used + COUNTER.count(next_older) + 1  # as many as fit, and no more
    assert kept[-1] == "- " + ("note number 299 " * 5).strip()  # the newest is always last
    assert f"({300 - len(kept)} older notes dropped)" in block


EMPTY = 'error: the note is empty; call memory_write with a short note in "note".'


def call(arguments: str, name: str = "memory_write") -> ToolCall:
    return ToolCall("call_1", name, arguments)


@pytest.mark.parametrize("tool_call, note, result", [
    (call(json.dumps({"note": "  Alice wants trains.  "})), "Alice wants trains.", SAVED),
    (call(json.dumps({"note": "x" * NOTE_MAX})), "x" * NOTE_MAX, SAVED),
    (call(json.dumps({"note": "x" * (NOTE_MAX + 1)})), None,
     f"error: the note is {NOTE_MAX + 1} characters long; the limit is {NOTE_MAX}. "
     "Call memory_write again with a shorter note."),
    (call(json.dumps({"note": "   "})), None, EMPTY),
    (call("{}"), None, EMPTY),
    (call(json.dumps({"note": 42})), None, EMPTY),
    (call("not json"), None,
     "error: the arguments must be a JSON object such as {\"note\": \"...\"}; got 'not json'."),
    (call("[1]"), None, "error: the arguments must be a JSON object such as {\"note\": \"...\"}; got '[1]'."),
    (call("{}", name="web_search"), None, "error: there is no tool named 'web_search'; the only tool is memory_write."),
])
def test_read_note(tool_call, note, result):
    assert read_note(tool_call) == (note, result)


@pytest.mark.parametrize("brief, memory, expected", [
    ("", "", "You plan."),
    ("Be brief.", "", "You plan.\n\nBe brief."),
    ("", "<memory>\n- x\n</memory>", "You plan.\n\n<memory>\n- x\n</memory>"),
    ("  Be brief. ", "<memory>\n- x\n</memory>", "You plan.\n\nBe brief.\n\n<memory>\n- x\n</memory>"),
])
def test_system_message_ends_with_the_memory_block(brief, memory, expected):
    assert system_message(Agent(1, 1, "planner", "plans", "You plan."), brief, memory) == expected
