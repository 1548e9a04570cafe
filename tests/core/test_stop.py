import pytest

from bot.core.rules.stop import (
    cap_notice,
    ends_with_terminate,
    guard_impersonation,
    near_repeat,
    speaker_label_end,
    strip_terminate,
    terminates,
    why_nothing_shown,
)


@pytest.mark.parametrize(
    "text, ends, shown",
    [
        ("All set. TERMINATE", True, "All set."),
        ("All set.\n\nTERMINATE.", True, "All set."),
        ("All set. **TERMINATE**", True, "All set."),
        ("TERMINATE", True, ""),
        ("All set. TERMINATE TERMINATE", True, "All set."),
        ("Do not TERMINATE yet, budget.", False, "Do not TERMINATE yet, budget."),
        ("terminate", False, "terminate"),
        ("We are done", False, "We are done"),
    ],
)
def test_terminate(text, ends, shown):
    assert ends_with_terminate(text) is ends
    assert strip_terminate(text) == shown


@pytest.mark.parametrize(
    "text, expected",
    [
        ("planner: Day 1 is Asakusa.", "Day 1 is Asakusa."),
        ("[planner] Day 1 is Asakusa.", "Day 1 is Asakusa."),
        ("**planner:** Day 1.", "Day 1."),
        ("Day 1.\nDay 2.\n[budget] That costs $900.\nmore", "Day 1.\nDay 2."),
        ("Day 1.\nbudget: fine by me", "Day 1."),
        ("Day 1.\nalice: thanks", "Day 1."),
        # another's label at the very start is an address: the reply stays the agent's own (it was thrown away)
        ("Budget: I mean the budget is ok.", "Budget: I mean the budget is ok."),
        ("budget: Kamakura adds rail costs.\nOtherwise fine. TERMINATE",
         "budget: Kamakura adds rail costs.\nOtherwise fine. TERMINATE"),
        ("planner: budget: trim day 3", "budget: trim day 3"),
        ("budget: trim day 3\nalice: thanks", "budget: trim day 3"),  # a later line is still cut
        ("The budget: about $1,000.", "The budget: about $1,000."),
        ("[budget] a first line by another\n[budget] then more", "[budget] a first line by another"),
        ("@planner: Day 1.", "Day 1."),
        ("planner: planner: Day 1.", "Day 1."),
        ("Day 1.\n  __budget__ : no", "Day 1."),
        ("Day 1.\n[@alice] thanks", "Day 1."),
        # a reply that opens with emphasis keeps it (it used to lose its leading * or _)
        ("**Day 1**: Asakusa", "**Day 1**: Asakusa"),
        ("*Quick note*: cheap", "*Quick note*: cheap"),
        ("__init__ is fine", "__init__ is fine"),
    ],
)
def test_guard_impersonation(text, expected):
    assert guard_impersonation(text, "planner", ["planner", "budget", "alice"]) == expected


@pytest.mark.parametrize(
    "line, names, end",
    [
        ("bob smith: hi", ("bob smith", "bob"), len("bob smith:")),
        ("bob: hi", ("bob smith", "bob"), len("bob:")),
        ("BOB SMITH : hi", ("bob smith", "bob"), len("BOB SMITH :")),
        ("**bob**: hi", ("bob",), len("**bob**:")),
        ("[bob smith] hi", ("bob smith", "bob"), len("[bob smith]")),
        ("[bob hi", ("bob",), 0),
        ("bobby: hi", ("bob",), 0),
        ("the bob: hi", ("bob",), 0),
        ("", ("bob",), 0),
    ],
)
def test_speaker_label_end(line, names, end):
    assert speaker_label_end(line, names) == end


def test_cap_notice_has_status_word():
    assert "max_turns" in cap_notice(12) and "12" in cap_notice(12)


def test_near_repeat():
    earlier = ["I agree with the plan, the budget works out at $1,400 total."]
    assert near_repeat("I agree with the plan, the budget works out at $1,400 total!", earlier)
    assert not near_repeat("Swap the hotel in Shinjuku for a cheaper one in Ueno.", earlier)


@pytest.mark.parametrize("raw, ends", [
    ("Day 1.\nbudget: fine TERMINATE", True),  # cut before its TERMINATE: the raw text still ended with it
    ("Done. TERMINATE\nbudget: ok", True),
    ("budget: Kamakura adds rail costs.\nOtherwise fine. TERMINATE", True),
    ("Day 1.\nbudget: fine", False),
    ("Day 1. TERMINATE please, budget", False),
])
def test_a_reply_cut_by_the_guard_still_terminates(raw, ends):
    assert terminates(raw, guard_impersonation(raw, "planner", ["budget"])) is ends


@pytest.mark.parametrize("raw, why", [
    ("", "its reply was empty"),
    ("  \n", "its reply was empty"),
    ("planner:", "its reply held only its own name as a speaker label"),
    ("[planner] **", "its reply held only its own name as a speaker label"),
])
def test_a_reply_left_with_nothing_is_called_empty_only_when_it_was(raw, why):
    assert guard_impersonation(raw, "planner", ["budget"]) == ""
    assert why_nothing_shown(raw) == why
