import pytest

from bot.core.errors import LLMTimeout
from bot.core.features.selector import parse_reply, select_speaker
from bot.core.models import Agent, Completion, Usage
from tests.fakes.scripted_llm import ScriptedLLM

NAMES = ["planner", "budget", "local.guide"]


@pytest.mark.parametrize(
    "reply, name, terminate, ok",
    [
        ("planner", "planner", False, True),
        ("  Planner.\n", "planner", False, True),
        ('"budget"', "budget", False, True),
        ("@budget", "budget", False, True),
        ("**local.guide**", "local.guide", False, True),
        ("TERMINATE", None, True, True),
        ("terminate.", None, True, True),
        ("The next speaker is budget.", "budget", False, True),
        ("planner or budget", None, False, False),
        ("budget, then TERMINATE", None, False, False),
        ("alice", None, False, False),
        ("", None, False, False),
    ],
)
def test_parse_reply(reply, name, terminate, ok):
    parsed = parse_reply(reply, NAMES)
    assert parsed.name == name
    assert parsed.terminate is terminate
    assert (parsed.error is None) is ok


def test_known_but_ineligible_is_rejected_with_reason():
    parsed = parse_reply("planner", ["budget"], ["planner", "budget"])
    assert parsed.error and "may not speak" in parsed.error


ROSTER = [Agent(1, 1, "planner", "plans", "p", position=0), Agent(2, 1, "budget", "counts", "p", position=1),
          Agent(3, 1, "local", "knows", "p", position=2)]


async def test_valid_choice_keeps_usage():
    llm = ScriptedLLM(selector=["budget"])
    sel = await select_speaker(llm, roster=ROSTER, eligible=ROSTER[:2], thread="[you] hi", rotate_after=None)
    assert sel.agent.name == "budget" and sel.source == "selector" and sel.attempts == 1
    assert sel.usage == llm.usage


async def test_retry_once_with_feedback_then_accept():
    llm = ScriptedLLM(selector=["nobody", "local"])
    sel = await select_speaker(llm, roster=ROSTER, eligible=ROSTER, thread="t", rotate_after=None)
    assert sel.agent.name == "local" and sel.attempts == 2 and sel.raw == ("nobody", "local")
    feedback = llm.history[1][2][-1].content
    assert "not valid" in feedback and "planner, budget, local" in feedback
    assert sel.usage.prompt_tokens == 2 * llm.usage.prompt_tokens


@pytest.mark.parametrize(
    "rotate_after, eligible_ids, expected",
    [
        (1, [1, 3], 3),  # planner spoke: fallback skips it (no repeat), budget excluded too -> local
        (2, [1, 3], 3),  # budget spoke last and is excluded: next after budget is local
        (3, [1, 2], 1),
        (None, [1, 2, 3], 1),
    ],
)
async def test_fallback_rotation_never_returns_excluded(rotate_after, eligible_ids, expected):
    llm = ScriptedLLM(selector=["garbage", "still garbage"])
    eligible = [a for a in ROSTER if a.id in eligible_ids]
    sel = await select_speaker(llm, roster=ROSTER, eligible=eligible, thread="t", rotate_after=rotate_after)
    assert sel.source == "fallback" and sel.agent.id == expected and sel.attempts == 2


async def test_selector_errors_fall_back():
    llm = ScriptedLLM(selector=[LLMTimeout("timed out"), LLMTimeout("timed out")])
    sel = await select_speaker(llm, roster=ROSTER, eligible=ROSTER[1:], thread="t", rotate_after=1)
    assert sel.source == "fallback" and sel.agent.name == "budget"


async def test_terminate():
    sel = await select_speaker(ScriptedLLM(selector=["TERMINATE"]), roster=ROSTER, eligible=ROSTER,
                               thread="t", rotate_after=None)
    assert sel.terminate and sel.agent is None


async def test_low_confidence_uses_rotation_and_records_confidence():
    low = Completion("local", Usage(5, 1), logprob=-2.0)  # p = 0.135
    sel = await select_speaker(ScriptedLLM(selector=[low]), roster=ROSTER, eligible=ROSTER, thread="t",
                               rotate_after=1, min_confidence=0.5)
    assert sel.source == "low_confidence" and sel.agent.name == "budget"
    assert sel.confidence == pytest.approx(0.135, abs=0.01)
