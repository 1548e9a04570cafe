"""What may be shown of a reply while it is written (bot.core.rules.draft): tables, then random replies."""
from __future__ import annotations

import random
import re

import pytest

from bot.core.rules import draft
from bot.core.rules.draft import ReplyStream, may_open_as, visible_text
from bot.core.rules.secrets import Secrets
from bot.core.rules.stop import _labels, guard_impersonation, speaker_label_end, strip_terminate

OWN = "planner"
OTHERS = ("budget", "local", "alice", "Bob Smith")


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> Secrets:
    """A registry of the test's own: what other tests registered in the process holds nothing back here."""
    fresh = Secrets()
    monkeypatch.setattr(draft, "mask", fresh.mask)
    monkeypatch.setattr(draft, "unfinished", fresh.unfinished)
    return fresh


def shown(raw: str) -> str:
    """What the committed reply shows (turn.py cleans it so; Discord strips TERMINATE)."""
    return strip_terminate(guard_impersonation(raw, OWN, OTHERS))


@pytest.mark.parametrize("raw, visible", [
    ("", ""),
    ("   \n ", ""),
    ("Sure", "Sure"),
    ("Sure, here is the plan", "Sure, here is the plan"),
    ("Day 1: Asakusa.", "Day 1: Asakusa"),  # the full stop may still be followed by TERMINATE
    ("Day 1: Asakusa. Day 2", "Day 1: Asakusa. Day 2"),
    # the agent's own label: held while it may be one, stripped once it is
    ("pla", ""),
    ("planner", ""),
    ("planner:", ""),
    ("planner: **", ""),
    ("planner: Hello", "Hello"),
    ("[planner] [planner] Hello", "Hello"),
    ("planner is here", "planner is here"),
    ("plane tickets first", "plane tickets first"),
    # another participant's label: the line is held while it may become one
    ("Hello\nbud", "Hello"),
    ("Hello\nbudget", "Hello"),
    ("Hello\nbudget says", "Hello\nbudget says"),
    ("Hello\n[bud", "Hello"),
    ("Hello\n[budget]", "Hello"),
    ("Hello\n**budget:** fine", "Hello"),
    ("Hello\nbudget: fine\nmore from me", "Hello"),  # cut for good
    ("Hello\nBob", "Hello"),
    ("Hello\nBob S", "Hello"),
    ("Hello\nBob Sm", "Hello"),
    ("Hello\nBob Sa", "Hello\nBob Sa"),
    ("Hello\n  ", "Hello"),
    ("Hello\n*", "Hello"),
    ("Hello\n**b", "Hello"),
    ("Hello\n**x", "Hello\n**x"),
    ("Hello\n@budget", "Hello"),
    ("Hello\n@budget:", "Hello"),
    ("Hello\nbudget **", "Hello"),
    ("Hello\nbudget ** :", "Hello"),
    ("Hello\nbudgets", "Hello\nbudgets"),
    # another's label at the very start is an address: shown as written, as the committed reply keeps it
    ("budget", "budget"),
    ("budget: Kamakura adds rail costs", "budget: Kamakura adds rail costs"),
    ("[budget] fine\nOtherwise", "[budget] fine\nOtherwise"),
    ("budget: fine\nalice: thanks", "budget: fine"),
    ("planner: budget: trim", "budget: trim"),
    # a cut line decides the end exactly: TERMINATE before it is the closing one
    ("Done. TERMINATE\nbudget: ok", "Done."),
    # TERMINATE at the end, or what may become it
    ("Done. T", "Done"),
    ("Done. TERMIN", "Done"),
    ("Done. TERMINATE", "Done"),
    ("Done. **TERMINATE**", "Done"),
    ("Done. TERMINATE is a word", "Done. TERMINATE is a word"),
    ("Done (see", "Done (see"),
    ("Done (", "Done"),
    ("I", ""),
    ("I think", "I think"),
    # people's mentions wait for the committed post
    ("Ask <@123> about it", "Ask"),
    ("Ask <@!123> about it", "Ask"),
    ("Ask <", "Ask"),
    ("Ask <@", "Ask"),
    ("a role <@&55> is no ping", "a role <@&55> is no ping"),
    ("x < y", "x < y"),
    # line breaks as the guard reads them
    ("one\r\ntwo\r\n", "one\ntwo"),
    ("one\r\nbudget: two", "one"),
])
def test_visible_text(raw, visible):
    assert visible_text(raw, OWN, OTHERS) == visible
    assert shown(raw + " and more words").startswith(visible)


def test_without_others_the_text_is_kept_as_the_guard_keeps_it():
    assert visible_text("a\r\nb\nc", OWN, ()) == "a\r\nb\nc"
    assert visible_text("a\r\nb\nc", OWN, (OWN,)) == "a\r\nb\nc"


@pytest.mark.parametrize("line, opens", [
    ("", True), ("  ", True), ("*", True), ("**", True), ("_", True), ("x", False),
    ("b", True), ("bud", True), ("BUDGET", True), ("budget", True), ("budget ", True), ("budget  *", True),
    ("budget **", True), ("budget ** ", True), ("budget ** x", False), ("budget x", False), ("budget:", True),
    ("[", True), ("[b", True), ("[@b", True), ("[budget", True), ("[budget]", True), ("[budget x", False),
    ("[x", False), ("@", True), ("@bu", True), ("@bx", False), ("**[budget]", True), ("  **bu", True),
    ("lo", True), ("loc", True), ("locx", False),
])
def test_may_open_as(line, opens):
    assert may_open_as(line, _labels(OTHERS)) is opens


TOKENS = [
    "planner", "budget", "local", "alice", "Bob", " Smith", "Bob Smith", ":", "[", "]", "@", "**", "__", "*", "_",
    " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u2028", "\x0b", "TERMINATE", "TERM", "INATE", "T", ".", "!",
    "(", ")", "\"", "'", "`", "```", "```python", "<", "<@", "<@!", "<@&", "123", ">", "hello", "world", "Day 1",
    "ß", "İ", "x", "-", "done", "I", "A", "NATE", "é", "> quote",
]


def random_reply(rng: random.Random) -> str:
    return "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 40)))


@pytest.mark.parametrize("seed", range(16))
def test_nothing_visible_that_the_committed_reply_would_not_show(seed):
    """For every prefix of a random reply: what is visible is a prefix of what the reply shows
    when committed, it only grows, and it never holds a person's mention."""
    rng = random.Random(seed)
    for _ in range(60):
        raw = random_reply(rng)
        final = shown(raw)
        before = ""
        for cut in range(len(raw) + 1):
            visible = visible_text(raw[:cut], OWN, OTHERS)
            assert final.startswith(visible), (raw, cut, visible, final)
            assert visible.startswith(before), (raw, cut, before, visible)
            assert not re.search(r"<@!?\d", visible)
            before = visible


@pytest.mark.parametrize("seed", range(10))
def test_may_open_as_is_never_wrong_about_a_line_that_opens_later(seed):
    rng = random.Random(1000 + seed)
    labels = _labels(OTHERS)
    for _ in range(500):
        line = random_reply(rng).replace("\n", " ").replace("\r", " ")
        for cut in range(len(line) + 1):
            if speaker_label_end(line, labels):
                assert may_open_as(line[:cut], labels), (line, cut)


def test_reply_stream_computes_the_visible_text_once_per_change():
    stream = ReplyStream(OWN, OTHERS)
    assert stream.visible() == ""
    for piece in ["plan", "ner: ", "Here", " is the plan.", "\nbud", "get: mine"]:
        stream.add(piece)
    assert stream.text == "planner: Here is the plan.\nbudget: mine"
    assert stream.visible() == "Here is the plan."
    stream.add("\nmore")
    assert stream.visible() == "Here is the plan."


def test_a_secret_written_piece_by_piece_shows_no_piece_of_it(secrets: Secrets) -> None:
    """A secret the process knows is masked as the committed reply masks it, and while it is
    being written no piece of it is visible."""
    secret = "Zq9-draft-secret-0001"
    secrets.register(secret)
    raw = f"The key is {secret}, keep it.\nZq9 is not one."
    final = secrets.mask(shown(raw))
    assert final == "The key is ***, keep it.\nZq9 is not one."
    before = ""
    for cut in range(len(raw) + 1):
        visible = visible_text(raw[:cut], OWN, OTHERS)
        assert final.startswith(visible) and visible.startswith(before), (cut, visible)
        assert "Zq" not in visible.split("\n")[0], (cut, visible)
        before = visible
    assert visible_text(raw[:raw.index("0001")], OWN, OTHERS) == "The key is"
