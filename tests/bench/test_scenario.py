"""The Tokyo scenario: how calls are told apart, the selector's rotation, the replies."""
from __future__ import annotations

from bench.cache_server import Tokenizer
from bench.scenario import AGENTS, ROTATION, SELECTOR_OPENINGS, Script, classify, offered, reply_text
from bot.core.rules.prompts import SPEAKER_SELECTOR_PROMPT

AUTOGEN_SELECTOR = """You are in a role play game. The following roles are available:
planner: drafts the day-by-day itinerary
budget: keeps the total under the limit
local: knows neighbourhoods, food and transit.
Read the following conversation. Then select the next role from ['budget', 'local'] to play. Only return the role.

user: Plan a trip

Read the above conversation. Then select the next role from ['budget', 'local'] to play. Only return the role.
"""


def roundtable_selector(participants: str) -> str:
    return SPEAKER_SELECTOR_PROMPT.replace("{{participants}}", participants)


def test_selector_calls_of_both_frameworks() -> None:
    assert SELECTOR_OPENINGS[0] in SPEAKER_SELECTOR_PROMPT
    assert classify([roundtable_selector("budget, local")]) == ("selector", None)
    assert classify([AUTOGEN_SELECTOR]) == ("selector", None)
    assert offered([roundtable_selector("planner, local")]) == ["planner", "local"]
    assert offered([AUTOGEN_SELECTOR]) == ["budget", "local"]
    assert offered(["who next?"]) == list(ROTATION)


def test_participant_calls_by_system_prompt() -> None:
    for spec in AGENTS:
        assert classify([spec.system_prompt, "[alice] Plan a trip"]) == ("participant", spec.name)
        assert classify([f"{spec.system_prompt}\n\nA brief.", "..."]) == ("participant", spec.name)
    assert classify(["Summarise the thread."]) == ("other", None)


def test_the_selector_rotates_among_those_offered() -> None:
    script = Script(len)
    assert script.select([AUTOGEN_SELECTOR.replace("['budget', 'local']", "['planner', 'budget', 'local']")]) == \
        "planner"
    script.reply("planner")
    assert script.select([roundtable_selector("budget, local")]) == "budget"
    script.reply("budget")
    assert script.select([roundtable_selector("planner, local")]) == "local"
    script.reply("local")
    assert script.select([roundtable_selector("planner, budget")]) == "planner"
    assert script.select([roundtable_selector("budget")]) == "budget"  # the next offered one


def test_replies_are_distinct_deterministic_and_about_150_tokens() -> None:
    count = Tokenizer().count
    texts = [reply_text(a, k, count) for a in ROTATION for k in range(1, 8)]
    assert len(set(texts)) == len(texts)
    assert texts[0] == reply_text("planner", 1, count)
    for t in texts:
        assert 135 <= count(t) <= 175, count(t)
        assert "TERMINATE" not in t and "@" not in t and "[" not in t and ":" not in t
