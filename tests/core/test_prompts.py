"""The two prompts of seed 000, verbatim.

`tests/seed_prompts/` holds them byte for byte as the seed's fenced blocks
(each line with its newline), so this runs in any checkout; when the shared
seeds are beside this checkout (`../shared/seeds/000_*.txt`), the copy is
checked against the seed too.
"""
import re
from pathlib import Path

import pytest

from bot.core.models import Agent
from bot.core.rules.prompts import (
    PARTICIPANT_PROMPT,
    SPEAKER_SELECTOR_PROMPT,
    participant_part,
    participant_prompt,
    selector_part,
    selector_prompt,
    shared_header,
)

COPY = Path(__file__).resolve().parents[1] / "seed_prompts"
COPIES = {"speaker_selector.txt": SPEAKER_SELECTOR_PROMPT, "participant.txt": PARTICIPANT_PROMPT}
SEEDS = Path(__file__).resolve().parents[3] / "shared" / "seeds"


def copied(name: str) -> str:
    """The prompt as the code holds it: the fenced block without the newline before the closing fence."""
    data = (COPY / name).read_bytes()
    assert data.endswith(b"\n") and not data.endswith(b"\n\n") and b"\r" not in data
    return data[:-1].decode("utf-8")


@pytest.mark.parametrize("name", sorted(COPIES))
def test_prompts_are_verbatim_from_seed_000(name):
    assert COPIES[name] == copied(name)


def test_the_copy_is_the_seed():
    files = sorted(SEEDS.glob("000_*.txt"))
    if not files:
        pytest.skip("shared/seeds is not beside this checkout (the copy in tests/seed_prompts was checked)")
    seed = files[0].read_bytes()
    blocks = re.findall(rb"```markdown\n(.*?\n)```", seed, re.DOTALL)
    assert blocks == [(COPY / "speaker_selector.txt").read_bytes(), (COPY / "participant.txt").read_bytes()]
    for block in blocks:  # the seed repeats both prompts, bare, at its end
        assert block.rstrip(b"\n") in seed[seed.index(b"## Requirements"):]


def test_fill_is_safe_with_braces():
    a = Agent(1, 1, "planner", "trip planner", "p")
    text = participant_prompt(a, ["budget"], "plan {x} {{thread}}", "[you] {{name}} literal")
    assert "You are planner, the trip planner in a group chat" in text
    assert "<task>plan {x} {{thread}}</task>" in text
    assert "{{name}} literal" in text
    sel = selector_prompt([a], "[you] hi", ["planner"])
    assert "planner: trip planner" in sel and "participant from planner\n" in sel


def words(text: str) -> str:
    return " ".join(text.split())


def test_the_shared_layout_keeps_seed_000s_instructions_word_for_word():
    """Issue 31: the Participant instructions every agent shares sit in the group's header (read cached),
    after the roster; the agent's own part keeps who it is, its role, the others and "Write your next
    message." last. The selector's own part is the Speaker selector prompt's instructions."""
    planner, budget = Agent(1, 1, "planner", "trip planner", "Plan well."), Agent(2, 1, "budget", "keeps costs", "")
    header = shared_header([planner, budget], "")
    own = participant_part(planner, ["budget"])
    instructions = PARTICIPANT_PROMPT.split("</conversation>\n\n", 1)[1]
    assert own == ("Plan well.\n\nYou are planner, the trip planner in a group chat working on the task above.\n"
                   "The other participants are: budget.\n\nWrite your next message.")
    assert header.startswith("This is a group chat between people and AI participants.\n\n<roles>\n"
                             "planner: trip planner\nbudget: keeps costs\n</roles>")
    assert words(instructions) == words(own.split("\n\n")[-1] + " " + header.split("writes its next message:")[1])
    seed_lines = [line for line in SPEAKER_SELECTOR_PROMPT.replace("{{participants}}", "budget").split("\n")
                  if line and not line.startswith(("<", "{{"))]
    assert selector_part(["budget"]).split("\n") == seed_lines
