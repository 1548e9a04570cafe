"""Pure rendering helpers for Discord: message splitting, mention policy, jump links."""
from __future__ import annotations

import random
import re

import pytest

from bot.surfaces.discord.render import (  # _closes and _fence: the module's own fence rules
    ZWSP,
    MentionPolicy,
    _closes,
    _fence,
    jump_link,
    mention_policy,
    neutralize_mass_mentions,
    split_message,
)

# A fence line opens/closes a block; "```x``` more" on one line is inline code, not a fence.
FENCE_LINE = re.compile(r"^ {0,3}(`{3,}[^`]*|~{3,}.*)$")


def fence_lines(chunk: str) -> int:
    return sum(1 for line in chunk.split("\n") if FENCE_LINE.match(line))


def words(text: str) -> list[str]:
    return text.split()


def prose(n_paragraphs: int, paragraph_len: int) -> str:
    sentence = "The quick brown fox jumps over the lazy dog. "
    para = (sentence * (paragraph_len // len(sentence) + 1))[:paragraph_len].rstrip()
    return "\n\n".join(f"P{i} {para}" for i in range(n_paragraphs))


def python_code(total: int) -> str:
    lines: list[str] = []
    i = 0
    while sum(len(line) + 1 for line in lines) < total:
        lines.append(f"def handler_{i}(x):" if i % 5 == 0 else f"    value_{i} = compute(x, {i})  # step {i}")
        if i % 5 == 4:
            lines.append("")
        i += 1
    return "\n".join(lines)


def strip_added_fences(chunks: list[str], opener: str, close: str = "```") -> list[str]:
    """Undo split_message's close/reopen pairs (tests only use unambiguous inputs)."""
    out = list(chunks)
    for i in range(len(out) - 1):
        closes_here = fence_lines(chunks[i]) % 2 == 0 and chunks[i].endswith("\n" + close)
        if closes_here and chunks[i + 1].startswith(opener + "\n"):
            # chunk i closed a block that chunk i+1 reopens: was it added? only if the reopened
            # text is not itself a fresh block, which holds for the inputs used here.
            out[i] = out[i][: -len("\n" + close)]
            out[i + 1] = out[i + 1][len(opener + "\n"):]
    return out


def assert_valid(chunks: list[str], limit: int) -> None:
    for chunk in chunks:
        assert 0 < len(chunk) <= limit
        assert chunk.strip() and chunk == chunk.rstrip()
        assert fence_lines(chunk) % 2 == 0, chunk


@pytest.mark.parametrize("text", ["hello", "  hi there  ", "a\n\nb", "```py\nprint(1)\n```", "x" * 2000])
def test_short_text_is_one_chunk(text: str) -> None:
    assert split_message(text) == [text.rstrip()]


@pytest.mark.parametrize("text", ["", " ", "\n\n  \t\n", " " * 5000])
def test_whitespace_only_gives_no_chunks(text: str) -> None:
    assert split_message(text) == []


@pytest.mark.parametrize(
    "length, expected_chunks",
    [(1999, 1), (2000, 1), (2001, 2), (4000, 2), (4001, 3)],
)
def test_limit_edges_for_unbreakable_text(length: int, expected_chunks: int) -> None:
    chunks = split_message("y" * length)
    assert len(chunks) == expected_chunks
    assert_valid(chunks, 2000)
    assert "".join(chunks) == "y" * length


def test_single_huge_word_is_hard_cut() -> None:
    text = "z" * 5000
    chunks = split_message(text)
    assert [len(c) for c in chunks] == [2000, 2000, 1000]
    assert "".join(chunks) == text


def test_exactly_limit_with_words_splits_at_space() -> None:
    text = ("word " * 401).strip()  # 2004 characters
    chunks = split_message(text)
    assert len(chunks) == 2
    assert_valid(chunks, 2000)
    assert words(" ".join(chunks)) == words(text)


def test_prose_splits_at_paragraphs() -> None:
    text = prose(9, 495)  # 9 * (3 + 495) + 8 * 2 = 4498 characters
    assert 4400 < len(text) <= 4500
    chunks = split_message(text)
    assert len(chunks) == 3
    assert_valid(chunks, 2000)
    paragraphs = text.split("\n\n")
    for chunk in chunks:  # every chunk is made of whole paragraphs
        assert all(p in paragraphs for p in chunk.split("\n\n"))
    assert "\n\n".join(chunks) == text


def test_lines_without_blank_lines_split_at_newlines() -> None:
    text = "\n".join(f"line {i} " + "-" * 40 for i in range(100))
    chunks = split_message(text)
    assert_valid(chunks, 2000)
    assert "\n".join(chunks) == text


@pytest.mark.parametrize("opener, close", [("```python", "```"), ("```", "```"), ("~~~js", "~~~")])
def test_code_block_in_middle_is_closed_and_reopened(opener: str, close: str) -> None:
    code = python_code(3000)
    text = f"{prose(2, 400)}\n\nHere is the code:\n\n{opener}\n{code}\n{close}\n\n{prose(2, 300)}"
    assert 4000 < len(text) < 4800
    chunks = split_message(text)
    assert len(chunks) >= 3
    assert_valid(chunks, 2000)
    for chunk in chunks[1:]:
        if chunk.count("def handler_") and not chunk.startswith("Here"):
            assert chunk.startswith(opener + "\n") or f"\n{opener}\n" in chunk
    reopened = [c for c in chunks[1:] if c.startswith(opener + "\n")]
    assert reopened, "the block should have been reopened with its language tag"
    rebuilt = "\n".join(strip_added_fences(chunks, opener, close))
    original_lines = [line for line in text.split("\n") if line.strip()]
    assert [line for line in rebuilt.split("\n") if line.strip()] == original_lines
    code_lines = [line for line in code.split("\n") if line.strip()]
    rebuilt_code = rebuilt.split(f"{opener}\n", 1)[1].split(f"\n{close}", 1)[0]
    assert [line for line in rebuilt_code.split("\n") if line.strip()] == code_lines


@pytest.mark.parametrize("limit", [2000, 500, 100])
def test_long_line_inside_code_block_is_hard_cut_and_reopened(limit: int) -> None:
    long_line = "".join(f"{i % 10}" for i in range(5000))
    text = f"Data:\n```text\n{long_line}\n```\nDone."
    chunks = split_message(text, limit=limit)
    assert_valid(chunks, limit)
    assert all(c.startswith("```text\n") for c in chunks[2:-1])
    rebuilt = "".join(strip_added_fences(chunks, "```text"))
    assert long_line in rebuilt
    assert rebuilt.startswith("Data:") and rebuilt.endswith("Done.")


def test_unclosed_fence_is_closed_in_last_chunk() -> None:
    chunks = split_message("look:\n```py\nprint('x')")
    assert chunks == ["look:\n```py\nprint('x')\n```"]


def test_inline_triple_backticks_are_not_fences() -> None:
    text = ("use ```x``` here " * 300).strip()
    chunks = split_message(text)
    assert_valid(chunks, 2000)
    assert words(" ".join(chunks)) == words(text)
    assert not any(c.startswith("```\n") for c in chunks)


@pytest.mark.parametrize(
    "text, tagged, users",
    [
        ("@everyone look at this", [], ()),
        ("@everyone and @here <@&42> role", ["1"], ()),
        ("hey <@123> and <@!456>", ["123", "456"], ("123", "456")),
        ("hey <@123> and <@!456>", ["456"], ("456",)),
        ("hey <@123>", ["999"], ()),
        ("no mention of the tagged user", ["123"], ()),
        ("<@123> <@123> <@!123>", ["123", "123"], ("123",)),
        ("<@123>", [], ()),
    ],
)
def test_mention_policy(text: str, tagged: list[str], users: tuple[str, ...]) -> None:
    policy = mention_policy(text, tagged)
    assert policy == MentionPolicy(everyone=False, roles=False, users=users)
    assert policy.everyone is False and policy.roles is False


def test_mention_policy_is_frozen() -> None:
    with pytest.raises(AttributeError):
        mention_policy("x", []).everyone = True  # type: ignore[misc]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("@everyone hi", f"@{ZWSP}everyone hi"),
        ("hi @here!", f"hi @{ZWSP}here!"),
        ("mail a@b.c, <@123>", "mail a@b.c, <@123>"),
        (f"@{ZWSP}everyone", f"@{ZWSP}everyone"),
    ],
)
def test_neutralize_mass_mentions(text: str, expected: str) -> None:
    assert neutralize_mass_mentions(text) == expected
    assert neutralize_mass_mentions(expected) == expected


@pytest.mark.parametrize(
    "ids, url",
    [((1, 2, 3), "https://discord.com/channels/1/2/3"), (("10", "20", "30"), "https://discord.com/channels/10/20/30")],
)
def test_jump_link(ids: tuple[object, object, object], url: str) -> None:
    assert jump_link(*ids) == url  # type: ignore[arg-type]


# --- Fence lines longer than a chunk, and a property test over random texts -----------------


def open_fence_at_end(chunk: str) -> str | None:
    """The fence `chunk` leaves open, by render's own `_fence`/`_closes` rules (None: balanced)."""
    opener: str | None = None
    for line in chunk.split("\n"):
        if opener is None and _fence(line):
            opener = line.strip()
        elif opener is not None and _closes(line, opener):
            opener = None
    return opener


def assert_sound(text: str, chunks: list[str], limit: int) -> None:
    """Every chunk fits, is non-blank, leaves no fence open; no visible character is lost."""
    for chunk in chunks:
        assert 0 < len(chunk) <= limit, (limit, chunk)
        assert chunk.strip() and chunk == chunk.rstrip(), chunk
        assert open_fence_at_end(chunk) is None, chunk
    kept = iter("".join("".join(chunks).replace(ZWSP, "").split()))
    assert all(c in kept for c in "".join(text.split())), "text was lost"  # an in-order subsequence
    if text.strip():
        assert chunks


@pytest.mark.parametrize(
    "text",
    [
        "intro\n```python " + "x" * 2500 + "\ncode line\n```\nafter",  # an opener with a long info string
        "```" + "i " * 1200 + "\n" + "y" * 3000 + "\n```",  # ... and a long line inside its block
        "```" + "lang" * 300 + "\n" + "z" * 3000 + "\n```",
        "~~~ " + "~" * 2500 + "\ncode\n~~~",  # a ~~~ info string may hold tildes
        "~" * 2500 + "\ncode\n" + "~" * 2500,  # a marker longer than a chunk
        "`" * 2500 + "\ncode\n" + "`" * 2600 + "\nafter",
        "```\ncode\n```" + " " * 2500 + "\nafter",  # a closing fence padded with spaces
    ],
)
def test_fence_line_longer_than_limit_leaves_no_fence_open(text: str) -> None:
    chunks = split_message(text)
    assert_sound(text, chunks, 2000)
    assert_valid(chunks, 2000)


@pytest.mark.parametrize(
    "text",
    [
        "```py\n" + "`" * 2100 + "x\n```",
        "```\n" + "a" * 1990 + "\n```" + "b" * 10 + "\nc",
    ],
)
@pytest.mark.parametrize("limit", [2000, 500, 50])
def test_long_fence_like_line_inside_a_block_stays_content(text: str, limit: int) -> None:
    # A backtick line with an info string ("```bbb") cannot close a block: it is code, so a chunk
    # is balanced by render's rules even when it holds an odd number of fence-looking lines.
    assert_sound(text, split_message(text, limit=limit), limit)


def test_long_info_string_keeps_the_code_in_a_block() -> None:
    text = "intro\n```python " + "x" * 2500 + "\nprint(1)\n```\nafter"
    chunks = split_message(text)
    assert_sound(text, chunks, 2000)
    code_chunk = next(c for c in chunks if "print(1)" in c)
    assert code_chunk.startswith("```") and "print(1)\n```" in code_chunk


def random_text(rng: random.Random, limit: int) -> str:
    """A few lines of prose, fence lines (` and ~, short and over-long markers and info strings,
    padded, indented, nested-looking, unclosed) and unbreakable lines, sized around ``limit``."""
    def size() -> int:  # mostly within a chunk, often just over it
        choices = [rng.randint(1, limit), rng.randint(limit - 10, limit + 10), rng.randint(limit, 2 * limit)]
        return max(1, rng.choice(choices))

    def fence_line() -> str:
        char = rng.choice("`~")
        marker = char * rng.choice([3, 3, 3, 4, 5, max(3, size())])
        roll = rng.random()
        if roll < 0.4:
            info = ""
        elif roll < 0.7:
            info = rng.choice(["py", "python", " js", "text ", "c++ title"])
        else:
            info = (rng.choice(["ab ", "x", "lang ", "~", "~~~ ", " ", "`"]) * size())[: size()]
            info = info.replace("`", "") if char == "`" else info
        padding = " " * rng.choice([0, 0, 0, 2, size()])
        return " " * rng.choice([0, 0, 1, 3]) + marker + info + padding

    def word() -> str:
        return rng.choice(["fox", "the", "@here", "```x```", "~", "`", "é", "  ", "\t", "long" * (size() // 4 + 1)])

    lines: list[str] = []
    for _ in range(rng.randint(1, 8)):
        roll = rng.random()
        if roll < 0.35:
            lines.append(fence_line())
        elif roll < 0.5:
            lines.append(rng.choice("xyz`~") * size() + rng.choice(["", "", " js", "x"]))  # unbreakable
        elif roll < 0.6:
            lines.append("")
        else:
            lines.append(" ".join(word() for _ in range(rng.randint(1, 12))))
    return "\n".join(lines)


def test_split_message_property_random_texts() -> None:
    rng = random.Random(20240611)
    for case in range(3000):
        limit = rng.choice([1, 3, 8, 9, 12, 20, 40, 80, 200, 500, 2000, 2000])
        text = random_text(rng, limit)
        chunks = split_message(text, limit=limit)
        try:
            assert_sound(text, chunks, limit)
        except AssertionError as exc:
            raise AssertionError(f"case {case}, limit {limit}, text {text[:300]!r}...: {exc}") from None


# --- A reopened fence keeps the block's language -----------------------------------------------
CODE_TOKEN = re.compile(r"q\d+_\d+q")  # starts every code line of `labelled_text`: which block it is from
LANGUAGES = ("py", "python", "js", "c++", "rust", "json", "diff", "text")


def languages_shown(chunks: list[str]) -> dict[str, list[str | None]]:
    """Each code token -> the language of the fence it is shown in, chunk by chunk (None: outside
    any fence), by render's own fence rules; the language is the info string's first word."""
    shown: dict[str, list[str | None]] = {}
    for chunk in chunks:
        opener: str | None = None
        for line in chunk.split("\n"):
            if opener is None and _fence(line):
                opener = line.strip()
            elif opener is not None and _closes(line, opener):
                opener = None
            else:
                fence = _fence(opener) if opener else None
                language = (fence[1].split() or [""])[0] if fence else None
                for token in CODE_TOKEN.findall(line):
                    shown.setdefault(token, []).append(language)
    return shown


def labelled_text(rng: random.Random, limit: int) -> tuple[str, dict[str, str]]:
    """Prose and code blocks whose info string starts with a language, sometimes followed by more
    (short, or longer than a chunk); each code line starts with a token naming its block and line,
    and is short, about half a chunk, a chunk or two chunks long. Returns the text and
    token -> language."""
    parts: list[str] = []
    languages: dict[str, str] = {}
    for block in range(rng.randint(1, 5)):
        if rng.random() < 0.4:
            parts.append(" ".join(rng.choice(["fox", "the", "lazy", "dog"]) for _ in range(rng.randint(1, limit // 3))))
            continue
        marker, language = rng.choice(["```", "```", "~~~", "````"]), rng.choice(LANGUAGES)
        more = rng.choice(["", "", " title", " linenums=1 " + "x" * rng.randint(1, 2 * limit)])
        lines = [marker + rng.choice(["", " "]) + language + more]
        for line in range(rng.randint(1, 10)):
            token = f"q{block}_{line}q"
            languages[token] = language
            width = rng.choice([0, 5, limit // 2, limit, 2 * limit])
            lines.append(rng.choice(["", "    "]) + token + " " + "v" * width)
        parts.append("\n".join([*lines, marker]))
    return rng.choice(["\n", "\n\n"]).join(parts), languages


@pytest.mark.parametrize(
    "text, limit, language_line",
    [
        ("```python\n" + python_code(5000) + "\n```", 2000, "```python"),
        ("```python title=\"" + "x" * 1200 + "\"\n" + python_code(3000) + "\n```", 2000, "```python"),
        ("```js " + "x" * 2500 + "\nlet a = 1;\n" + "let b = 2;\n" * 300 + "```", 2000, "```js"),
        ("~~~ c++ linenums=1\n" + "int a = 1;\n" * 20 + "~~~", 60, "~~~ c++"),
        ("````rust   " + "y" * 50 + "\n" + "let a = 1;\n" * 20 + "````", 60, "````rust"),
    ],
)
def test_a_reopened_fence_repeats_the_language(text: str, limit: int, language_line: str) -> None:
    chunks = split_message(text, limit=limit)
    assert_sound(text, chunks, limit)
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.startswith(language_line + "\n") or chunk.startswith(language_line + " "), chunk[:80]


def test_split_message_property_reopened_fences_keep_their_language() -> None:
    rng = random.Random(20250119)
    checked = 0
    for case in range(3000):
        limit = rng.choice([40, 80, 200, 500, 2000, 2000])
        text, languages = labelled_text(rng, limit)
        chunks = split_message(text, limit=limit)
        shown = languages_shown(chunks)
        try:
            assert_sound(text, chunks, limit)
            for token, places in shown.items():  # a token cut by a cut inside its line is not found
                assert set(places) == {languages[token]}, f"{token} ({languages[token]}) shown in {places}"
        except AssertionError as exc:
            raise AssertionError(f"case {case}, limit {limit}, text {text[:300]!r}...: {exc}") from None
        checked += sum(len(places) for places in shown.values())
    assert checked > 10_000  # code lines found whole and checked
