import re
from pathlib import Path

import pytest

from bot.core.models import Agent
from bot.core.prompts import PARTICIPANT_PROMPT, SPEAKER_SELECTOR_PROMPT, participant_prompt, selector_prompt

SEEDS = Path(__file__).resolve().parents[3] / "shared" / "seeds"


def seed_prompts() -> list[str]:
    files = sorted(SEEDS.glob("000_*.txt"))
    if not files:
        pytest.skip("shared/seeds is not beside this checkout")
    return re.findall(r"```markdown\n(.*?)\n```", files[0].read_text(), re.DOTALL)


def test_prompts_are_verbatim_from_seed_000():
    selector, participant = seed_prompts()
    assert SPEAKER_SELECTOR_PROMPT == selector
    assert PARTICIPANT_PROMPT == participant


def test_fill_is_safe_with_braces():
    a = Agent(1, 1, "planner", "trip planner", "p")
    text = participant_prompt(a, ["budget"], "plan {x} {{thread}}", "[you] {{name}} literal")
    assert "You are planner, the trip planner in a group chat" in text
    assert "<task>plan {x} {{thread}}</task>" in text
    assert "{{name}} literal" in text
    sel = selector_prompt([a], "[you] hi", ["planner"])
    assert "planner: trip planner" in sel and "participant from planner\n" in sel
