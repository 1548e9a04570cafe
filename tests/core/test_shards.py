import pytest

from bot.core.errors import InvalidInput
from bot.core.rules.shards import Shards, parse_shards, shard_of


@pytest.mark.parametrize("guild_id, count, shard", [
    (41771983423143937, 1, 0),  # Discord's documented example guild id
    (41771983423143937, 2, (41771983423143937 >> 22) % 2),
    (1 << 22, 4, 1), (3 << 22, 4, 3), (4 << 22, 4, 0), ((5 << 22) + 12345, 4, 1),
])
def test_shard_of_follows_discords_formula(guild_id, count, shard):
    assert shard_of(guild_id, count) == shard


@pytest.mark.parametrize("ids, count, expected", [
    (None, None, None), ("", "", None),
    ("0,1", "4", Shards((0, 1), 4)), (" 3 , 1,1", 4, Shards((1, 3), 4)),
    ("", "2", Shards((0, 1), 2)),  # a count alone: every shard here
    ("0", "1", Shards((0,), 1)),
])
def test_parse_shards(ids, count, expected):
    assert parse_shards(ids, count) == expected


@pytest.mark.parametrize("ids, count, message", [
    ("0,1", None, "need a shard count too"),
    ("0", "zero", "must be a whole number"),
    ("0", "0", "from 1 to 1024"),
    ("4", "4", "shard 4 does not exist with a shard count of 4 (use 0 to 3)"),
    ("0;1", "4", "separated by commas"),
    ("-1", "4", "shard -1 does not exist"),
])
def test_parse_shards_refusals_say_what_to_write(ids, count, message):
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_shards(ids, count)


def test_serves_only_its_guilds():
    shards = Shards((1,), 2)
    assert shards.serves(1 << 22) and shards.serves(str(3 << 22))
    assert not shards.serves(2 << 22) and not shards.serves(None)
    assert str(shards) == "shards 1 of 2"
