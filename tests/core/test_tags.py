import pytest

from bot.core.models import Agent
from bot.core.rules.tags import parse_tags, unknown_tags, with_agents

ROSTER = [
    Agent(1, 1, "planner", "plans", "p"),
    Agent(2, 1, "budget", "counts", "p"),
    Agent(3, 1, "local.guide", "knows", "p"),
    Agent(4, 1, "sleepy", "off", "p", enabled=False),
]


@pytest.mark.parametrize(
    "text, agents, operators, all_agents, users",
    [
        ("@planner draft a trip", ("planner",), False, False, ()),
        ("hey @PLANNER and @budget!", ("planner", "budget"), False, False, ()),
        ("@planner, then @planner again", ("planner",), False, False, ()),
        ("ask @local.guide.", ("local.guide",), False, False, ()),
        ("mail bob@planner.com please", (), False, False, ()),
        ("`@planner` is code", (), False, False, ()),
        ("```\n@planner in a block\n```", (), False, False, ()),
        ("@everyone @here look", (), False, False, ()),
        ("@nobody knows", (), False, False, ()),
        ("@sleepy wake up", (), False, False, ()),
        ("@user please check", (), True, False, ()),
        ("@all go", ("planner", "budget", "local.guide"), False, True, ()),
        ("thanks <@123456789012> and <@!98765432101>", (), False, False, ("123456789012", "98765432101")),
        ("@planner-ish", (), False, False, ()),
        ("(@budget)", ("budget",), False, False, ()),
        ("", (), False, False, ()),
    ],
)
def test_parse_tags(text, agents, operators, all_agents, users):
    tags = parse_tags(text, ROSTER)
    assert tags.agent_names == agents
    assert tags.operators is operators
    assert tags.all_agents is all_agents
    assert tags.user_ids == users


def test_author_never_tags_itself():
    tags = parse_tags("@planner @budget over to you", ROSTER, author_agent_id=1)
    assert tags.agent_names == ("budget",)


def test_with_agents_adds_reply_target_once():
    tags = with_agents(parse_tags("@budget hi", ROSTER), [ROSTER[0], ROSTER[1]])
    assert tags.agent_names == ("budget", "planner")
    assert tags.agent_ids == (2, 1)


UNICODE_ROSTER = [
    Agent(1, 1, "planner", "plans", "p"),
    Agent(5, 1, "Café", "brews", "p"),  # stored NFC
    Agent(6, 1, "Ünsal", "checks", "p"),
]


@pytest.mark.parametrize(
    "text, agents, users",
    [
        # An @name inside a URL is part of the address, not a tag.
        ("read https://medium.com/@planner/x", (), ()),
        ("read http://medium.com/@planner", (), ()),
        ("see <https://medium.com/@planner/x> now", (), ()),
        ("[post](https://medium.com/@planner/x)", (), ()),
        ("https://planner@example.com/path", (), ()),
        ("ftp://files.example/@planner/a", (), ()),
        ("https://medium.com/@planner/x then @planner go", ("planner",), ()),
        ("<https://x.io/@planner> and <@123456789012>", (), ("123456789012",)),
        ("@planner://odd but still a tag", ("planner",), ()),
        # A Markdown-escaped @ is literal text.
        (r"\@planner is the name", (), ()),
        (r"call \@planner or \<@123456789012>", (), ()),
        (r"\\@planner an escaped backslash then a tag", ("planner",), ()),
        # Text is compared in NFC: a decomposed é tags the NFC-stored name.
        ("@Cafe\u0301 please", ("Café",), ()),
        ("@CAFE\u0301, then @café", ("Café",), ()),
        ("@U\u0308nsal check", ("Ünsal",), ()),
        ("@Cafe alone is not Café", (), ()),
        # What worked before still works next to the new rules.
        ("mail bob@planner.com, `@planner`, @everyone", (), ()),
        ("@planner.", ("planner",), ()),
    ],
)
def test_parse_tags_urls_escapes_and_unicode(text, agents, users):
    tags = parse_tags(text, UNICODE_ROSTER)
    assert tags.agent_names == agents
    assert tags.user_ids == users


def test_decomposed_roster_name_is_matched_too():
    roster = [Agent(7, 1, "Cafe\u0301", "brews", "p")]  # a name that somehow was not stored NFC
    assert parse_tags("@Café hi", roster).agent_ids == (7,)


@pytest.mark.parametrize(
    "text, unknown",
    [
        ("@plannr draft a trip", ("plannr",)),
        ("@planner and @budget", ()),
        ("@sleepy is disabled, not unknown", ()),
        ("ask @local.guide. then @locl.", ("locl",)),
        ("@Plannr, @PLANNR and @plannr", ("Plannr",)),
        ("@plannr then @budgt", ("plannr", "budgt")),
        ("@planner-ish", ("planner-ish",)),
        ("@user @all @everyone @here @USER", ()),
        ("mail bob@plannr.com please", ()),
        ("`@plannr` and ```\n@budgt\n```", ()),
        ("read https://medium.com/@plannr/x and <https://x.io/@budgt>", ()),
        (r"\@plannr is literal", ()),
        ("(@plannr)", ("plannr",)),
        ("@Cafe\u0301 and @CAFÉ", ("Café",)),
        ("@ alone, @. and @-", ()),
        ("", ()),
    ],
)
def test_unknown_tags(text, unknown):
    assert unknown_tags(text, ROSTER) == unknown


@pytest.mark.parametrize("text, user_ids", [
    ("@alice can you approve?", ("1",)),
    ("@Alice. thanks", ("1",)),
    ("@bob_b and <@123456789012>", ("123456789012", "2")),
    ("mail alice@example.org", ()),
    ("`@alice` in code", ()),
    ("@planner, not a person", ()),
    ("@zed nobody", ()),
])
def test_known_people_are_tagged_by_name(text, user_ids):
    people = {"alice": "1", "bob_b": "2", "planner": "3"}
    roster = [Agent(9, 1, "planner", "plans", "p")]
    tags = parse_tags(text, roster, people=people)
    assert tags.user_ids == user_ids
    assert "@zed" not in text or unknown_tags(text, roster, people) == ("zed",)
    assert unknown_tags("@alice hi", roster, people) == ()
