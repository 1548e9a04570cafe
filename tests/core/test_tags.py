import pytest

from bot.core.models import Agent
from bot.core.tags import parse_tags, with_agents

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
