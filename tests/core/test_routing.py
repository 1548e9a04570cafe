import random
from collections.abc import Iterable

import pytest

from bot.core.models import Agent, AuthorType, Message, Tags
from bot.core.rules.routing import eligible_speakers, explicit_recipients, next_in_rotation, plan_batch, routable

A = [Agent(1, 1, "planner", "r", "p", position=0), Agent(2, 1, "budget", "r", "p", position=1),
     Agent(3, 1, "local", "r", "p", position=2)]


def msg(seq: int, author_type: AuthorType = "user", agent_ids: Iterable[int] = (),
        author_agent_id: int | None = None) -> Message:
    return Message(1, seq, author_type, "x", "t", Tags(agent_ids=tuple(agent_ids)), author_agent_id=author_agent_id)


@pytest.mark.parametrize(
    "message, expected",
    [
        (msg(1, "user", [1, 2]), (1, 2)),
        (msg(1, "agent", [1, 2], author_agent_id=1), (2,)),
        (msg(1, "agent", [1], author_agent_id=1), ()),
        (msg(1, "user", [9]), ()),  # not enabled / not on the roster
        (msg(1, "system", [1]), (1,)),  # a schedule's task: the bot's row tagging the agent it runs
        (msg(1, "system"), ()),  # a notice
    ],
)
def test_explicit_recipients(message, expected):
    assert explicit_recipients(message, {1, 2, 3}) == expected


def test_plan_batch_only_newest_untagged_is_routed_by_mode():
    batch = [msg(1), msg(2, "user", [2]), msg(3), msg(4, "system")]
    plans = [p for _, p in plan_batch(batch, {1, 2, 3})]
    assert plans == ["superseded", "explicit", "mode", "none"]


def test_a_message_deleted_before_it_was_routed_selects_nobody():
    gone = Message(1, 3, "user", "x", "", Tags(agent_ids=(1,)), deleted_at=5.0)
    plans = [p for _, p in plan_batch([msg(1), msg(2, "user", [2]), gone], {1, 2, 3})]
    assert plans == ["superseded", "explicit", "deleted"]  # the newest, it still supersedes what it followed


@pytest.mark.parametrize("seed", range(40))
def test_a_batch_planned_in_chunks_is_planned_as_a_whole(seed):
    """A backlog is routed chunk by chunk; each chunk is told whether the newest routable row is
    in a later one. The plans are those of the whole batch at once."""
    rng = random.Random(seed)
    batch = []
    for seq in range(1, rng.randint(1, 60) + 1):
        kind = rng.choice(["user", "user", "agent", "system"])
        tagged = [rng.choice([1, 2, 3])] if rng.random() < 0.2 else []
        batch.append(Message(1, seq, kind, "x", "t", Tags(agent_ids=tuple(tagged)),
                             author_agent_id=2 if kind == "agent" else None, episode_id=rng.choice([None, 7, 8]),
                             deleted_at=5.0 if rng.random() < 0.1 else None))
    whole = plan_batch(batch, {1, 2, 3}, 7)
    newest = max((m.seq for m in batch if routable(m, 7)), default=None)
    size = rng.randint(1, 10)
    chunked = []
    for at in range(0, len(batch), size):
        chunk = batch[at:at + size]
        chunked += plan_batch(chunk, {1, 2, 3}, 7, newer_follows=newest is not None and newest > chunk[-1].seq)
    assert chunked == whole


@pytest.mark.parametrize(
    "after, exclude, disabled, expected",
    [
        (None, set(), set(), 1),
        (1, set(), set(), 2),
        (3, set(), set(), 1),
        (1, {2}, set(), 3),
        (1, set(), {2}, 3),
        (3, {1, 2, 3}, set(), None),
    ],
)
def test_next_in_rotation(after, exclude, disabled, expected):
    roster = [Agent(a.id, 1, a.name, "r", "p", position=a.position, enabled=a.id not in disabled) for a in A]
    agent = next_in_rotation(roster, after, exclude=exclude)
    assert (agent.id if agent else None) == expected


@pytest.mark.parametrize(
    "message, allow_repeat, expected",
    [
        (msg(1, "agent", author_agent_id=2), False, [1, 3]),
        (msg(1, "agent", author_agent_id=2), True, [1, 2, 3]),
        (msg(1, "user"), False, [1, 2, 3]),
    ],
)
def test_eligible_speakers(message, allow_repeat, expected):
    assert [a.id for a in eligible_speakers(A, message, allow_repeat)] == expected
