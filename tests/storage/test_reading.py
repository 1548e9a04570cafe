"""Read cursors, people's names, rows that tag a person, stored summaries: the store's part."""
from __future__ import annotations

import asyncio

import pytest

from bot.core.models import GroupSettings, NewMessage, Summary, Tags
from storage import SqlStore
from tests.fakes.databases import Place


@pytest.fixture
async def store(place: Place):
    async with await place.open() as opened:
        yield opened


async def rows(store: SqlStore, group_id: int, n: int, who: str = "alice") -> None:
    for i in range(n):
        await store.thread.append_user_message(group_id, NewMessage("user", who, f"m{i}", author_user_id=who))


@pytest.mark.parametrize("acts, expected", [
    ([], None),  # no row until the person first acts
    ([("post", 0)], 6),  # an own post: through it
    ([("mark", 3)], 3),  # a reaction, /read or Mark read: through that row
    ([("mark", 3), ("mark", 2)], 3),  # never backwards (a reaction on an older message)
    ([("mark", 99)], 5),  # clamped to the latest row
    ([("mark", -4)], 0),  # and to 0
    ([("mark", 4), ("post", 0)], 6),
])
async def test_cursor_rules(store, acts, expected):
    group = await store.groups.create_group("g", "g", GroupSettings())
    await rows(store, group.id, 5)
    for act, seq in acts:
        if act == "post":
            await store.thread.append_user_message(group.id, NewMessage("user", "bob", "mine", author_user_id="bob"))
        else:
            await store.reading.mark_seen(group.id, "bob", seq)
    assert await store.reading.get_seen(group.id, "bob") == expected


async def test_concurrent_advances_keep_the_maximum(place: Place):
    async with await place.open() as a, await place.open() as b:
        group = await a.groups.create_group("g", "g", GroupSettings())
        await rows(a, group.id, 50)
        await asyncio.gather(*(s.reading.mark_seen(group.id, "bob", seq) for seq in range(1, 51) for s in (a, b)))
        assert await a.reading.get_seen(group.id, "bob") == 50


async def test_tagging_finds_a_persons_rows_and_operators_by_user(store):
    group = await store.groups.create_group("g", "g", GroupSettings())
    tags = [Tags(user_ids=("bob",)), Tags(operators=True), Tags(), Tags(user_ids=("carol", "bob"))]
    for i, t in enumerate(tags):
        await store.thread.append_user_message(group.id, NewMessage("user", "x", f"m{i}", tags=t, author_user_id="x"))
    assert [m.seq for m in await store.reading.tagging(group.id, "bob", after=0, operators=False, limit=10)] == [1, 4]
    assert [m.seq for m in await store.reading.tagging(group.id, "bob", after=0, operators=True, limit=10)] == [1, 2, 4]
    assert [m.seq for m in await store.reading.tagging(group.id, "bob", after=1, operators=True, limit=1)] == [2]


async def test_people_names_and_summaries(store):
    await store.reading.remember_person("guild", "1", ["bob", "Bob B", "bob"])
    await store.reading.remember_person("guild", "2", ["BOB"])  # the name now tags someone else
    assert await store.reading.people("guild") == {"BOB": "2", "Bob B": "1"}
    assert await store.reading.people("other") == {}
    group = await store.groups.create_group("g", "g", GroupSettings())
    await rows(store, group.id, 3)
    await store.reading.save_summary(group.id, Summary(1, 3, "text", omitted=1, model="m"))
    found = await store.reading.get_summary(group.id, 1, 3, newer_than=0)
    assert found is not None and (found.text, found.omitted, found.model) == ("text", 1, "m")
    assert await store.reading.get_summary(group.id, 1, 3, newer_than=found.created_at + 1) is None
    assert await store.reading.get_summary(group.id, 0, 3, newer_than=0) is None
