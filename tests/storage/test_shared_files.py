"""Shared files and providers in the record: kept with the row, read back the same on SQLite and
PostgreSQL, immutable; the provider of each model call recorded and summed per provider."""
from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.core.models import Decision, GroupSettings, NewMessage, RunResult, SharedFile, Usage
from storage import SqlStore
from tests.fakes.databases import Place

FILES = (
    SharedFile("shot.png", "image", 2048, "image/png", "https://cdn.example/a/shot.png?ex=1", attachment_id="11",
               message_id="22", channel_id="33", width=640, height=480),
    SharedFile("log.txt", "text", 9, "text/plain", "https://cdn.example/a/log.txt", text="é\nline 2\n", chars=9),
    SharedFile("big.txt", "text", 9_000_000, "text/plain", note="not read: larger than 4.0 MB"),
)


@pytest.fixture
async def store(place: Place) -> AsyncIterator[SqlStore]:
    async with await place.open() as opened:
        yield opened


async def test_files_are_kept_with_the_row_and_read_back_everywhere(store: SqlStore) -> None:
    group = await store.create_group("console:f", "f", GroupSettings())
    stored, _ = await store.append_user_message(group.id, NewMessage("user", "alice", "see these", attachments=FILES))
    assert stored.attachments == FILES
    assert (await store.get_message(group.id, 1)).attachments == FILES
    assert (await store.messages(group.id))[0].attachments == FILES
    pages = [m async for page in store.message_pages(group.id) for m in page]
    assert pages[0].attachments == FILES
    plain, _ = await store.append_user_message(group.id, NewMessage("user", "bob", "no files"))
    assert (await store.get_message(group.id, plain.seq)).attachments == ()


async def test_the_provider_of_each_call_is_recorded_and_summed(store: SqlStore) -> None:
    group = await store.create_group("console:p", "p", GroupSettings())
    agent = await store.add_agent(group.id, "coder", "codes", "You code.", model="local/llama3")
    message, _ = await store.append_user_message(group.id, NewMessage("user", "alice", "go"))
    await store.record_decision(group.id, Decision(message.seq, "selector", (agent.id,), ("coder",), attempts=1,
                                                   usage=Usage(50, 1), model="gpt-4o-mini", provider="default"))
    run = await store.start_run(group.id, agent.id, "group", message.seq)
    finished = await store.finish_run(run.id, RunResult("empty", Usage(100, 10), model="llama3", provider="local"),
                                      cap=12)
    assert (finished.run.model, finished.run.provider) == ("llama3", "local")
    decision = await store.get_decision(group.id, message.seq)
    assert decision is not None and decision.provider == "default"
    spent = {(s.who, s.model, s.provider) for s in await store.spending(group.id, 0)}
    assert spent == {("coder", "llama3", "local"), ("selector", "gpt-4o-mini", "default")}
