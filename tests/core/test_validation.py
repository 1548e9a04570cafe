"""Agent-name checks: scripts that look alike, the confusable skeleton, and free names."""
import pytest

from bot.core.errors import InvalidInput
from bot.core.rules.validation import agent_name, check_name_free, name_key


@pytest.mark.parametrize(
    "value, expected",
    [
        ("planner", "planner"),
        ("local.guide_2-b", "local.guide_2-b"),
        ("Café", "Café"),
        ("Cafe\u0301", "Café"),  # stored NFC
        ("планировщик", "планировщик"),  # all Cyrillic
        ("бот-2.0", "бот-2.0"),  # Cyrillic with script-neutral digits and marks
        ("αλφα_1", "αλφα_1"),  # all Greek
        ("計画者", "計画者"),  # all Han
        ("東京タワー", "東京タワー"),  # Han + Katakana: Japanese, nothing alike Latin
        ("agent計画", "agent計画"),  # Latin + Han do not look alike
        ("Ｐｌａｎｎｅｒ", "Ｐｌａｎｎｅｒ"),  # fullwidth Latin is still Latin
    ],
)
def test_agent_name_accepts(value, expected):
    assert agent_name(value) == expected


@pytest.mark.parametrize(
    "value, scripts, shown",
    [
        ("pl\u0430nner", "Latin and Cyrillic", "U+0430"),  # Cyrillic а among Latin
        ("\u0440lanner", "Cyrillic and Latin", "U+0440"),  # Cyrillic р first
        ("plann\u0435r", "Latin and Cyrillic", "U+0435"),
        ("pl\u03b1nner", "Latin and Greek", "U+03B1"),  # Greek alpha
        ("\u0431\u043e\u0442bot", "Cyrillic and Latin", "U+0062"),  # the Latin letters are the odd ones out
        ("b\u043e\u03c4", "Latin, Cyrillic and Greek", "U+043E"),
        ("\u0561gent", "Armenian and Latin", "U+0561"),
    ],
)
def test_agent_name_rejects_mixed_lookalike_scripts(value, scripts, shown):
    with pytest.raises(InvalidInput) as info:
        agent_name(value)
    text = str(info.value)
    assert f"mixes {scripts} letters" in text
    assert shown in text
    assert "one script" in text


@pytest.mark.parametrize("value", ["\u0430ll", "h\u0435re", "us\u0435r", "\u0430\u04cf\u04cf"])  # reserved, disguised
def test_reserved_names_in_disguise_are_refused(value):
    with pytest.raises(InvalidInput):
        agent_name(value)


@pytest.mark.parametrize(
    "a, b",
    [
        ("\u0440lanner", "planner"),  # Cyrillic р
        ("PLANNER", "planner"),
        ("Planner", "pLaNnEr"),
        ("pl\u0430nn\u0435r", "planner"),
        ("\u0440\u0406\u0430nner", "pianner"),  # Cyrillic і (capital, folded)
        ("\u03c1\u03bf\u03c4", "pot"),  # Greek rho, omicron, tau
        ("\u03b1\u03b5\u03b9\u03ba\u03bd\u03c5\u03c7", "aeikvux"),
        ("\u0455\u0501\u04bb\u0458", "sdhj"),
        ("\u0421\u0410\u0422", "cat"),  # uppercase Cyrillic СAТ
        ("Ｐｌａｎｎｅｒ", "planner"),  # NFKC folds fullwidth
        ("ﬁnder", "finder"),  # NFKC folds the ligature
        ("Cafe\u0301", "café"),
        ("\u0451", "\u00eb"),  # Cyrillic ё looks like Latin ë
    ],
)
def test_name_key_equal(a, b):
    assert name_key(a) == name_key(b)


@pytest.mark.parametrize(
    "a, b",
    [
        ("planner", "planer"),
        ("café", "cafe"),  # an accent is not a look-alike
        ("budget", "budget2"),
        ("計画", "計算"),
        ("бот", "бота"),
    ],
)
def test_name_key_differs(a, b):
    assert name_key(a) != name_key(b)


def test_name_key_keeps_case_insensitive_equality():
    for a, b in [("ВОТ", "вот"), ("ΑΛΦΑ", "αλφα"), ("Straße", "STRASSE")]:
        assert a.casefold() == b.casefold() or a.lower() == b.lower()
        assert name_key(a) == name_key(b)


@pytest.mark.parametrize(
    "name, existing, message",
    [
        ("Planner", ["budget", "planner"],
         "An agent named 'planner' is already in this group; choose another name."),
        ("PLANNER", ["planner"], "An agent named 'planner' is already in this group; choose another name."),
        ("\u0440lanner", ["budget", "planner"],
         "'рlanner' looks the same as the agent 'planner' already in this group; choose another name."),
        ("planner", ["pl\u0430nner"],
         "'planner' looks the same as the agent 'plаnner' already in this group; choose another name."),
        ("Ｐlanner", ["planner"],
         "'Ｐlanner' looks the same as the agent 'planner' already in this group; choose another name."),
    ],
)
def test_check_name_free_refuses(name, existing, message):
    with pytest.raises(InvalidInput) as info:
        check_name_free(name, existing)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "name, existing",
    [
        ("planner", []),
        ("planner", ["budget", "local.guide"]),
        ("planner2", ["planner"]),
        ("café", ["cafe"]),
        ("бот", ["бота"]),
    ],
)
def test_check_name_free_allows(name, existing):
    assert check_name_free(name, existing) is None
    assert check_name_free(name, iter(existing)) is None  # any iterable
