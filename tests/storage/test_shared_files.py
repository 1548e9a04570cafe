"""Shared files and providers in the record: kept with the row, read back the same on SQLite and
PostgreSQL, immutable; the provider of each model call recorded and summed per provider."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest

from bot.core.models import Decision, GroupSettings, NewMessage, RunResult, SharedFile, Usage
from bot.core.rules.secrets import SECRETS
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
    group = await store.groups.create_group("console:f", "f", GroupSettings())
    stored, _ = await store.thread.append_user_message(group.id, NewMessage("user", "alice", "see these",
                                                                            attachments=FILES))
    assert stored.attachments == FILES
    assert (await store.thread.get_message(group.id, 1)).attachments == FILES
    assert (await store.thread.messages(group.id))[0].attachments == FILES
    pages = [m async for page in store.record.message_pages(group.id) for m in page]
    assert pages[0].attachments == FILES
    plain, _ = await store.thread.append_user_message(group.id, NewMessage("user", "bob", "no files"))
    assert (await store.thread.get_message(group.id, plain.seq)).attachments == ()


async def test_the_provider_of_each_call_is_recorded_and_summed(store: SqlStore) -> None:
    group = await store.groups.create_group("console:p", "p", GroupSettings())
    agent = await store.roster.add_agent(group.id, "coder", "codes", "You code.", model="local/llama3")
    message, _ = await store.thread.append_user_message(group.id, NewMessage("user", "alice", "go"))
    await store.routing.record_decision(group.id, Decision(message.seq, "selector", (agent.id,), ("coder",), attempts=1,
                                                           usage=Usage(50, 1), model="gpt-4o-mini", provider="default"))
    run = await store.runs.start_run(group.id, agent.id, "group", message.seq)
    finished = await store.runs.finish_run(run.id, RunResult("empty", Usage(100, 10), model="llama3", provider="local"),
                                           cap=12)
    assert (finished.run.model, finished.run.provider) == ("llama3", "local")
    decision = await store.routing.get_decision(group.id, message.seq)
    assert decision is not None and decision.provider == "default"
    spent = {(s.who, s.model, s.provider) for s in await store.spending.spending(group.id, 0)}
    assert spent == {("coder", "llama3", "local"), ("selector", "gpt-4o-mini", "default")}


# A secret in a file's name reaches its URL (Discord's CDN URL ends with the name): raw, percent-encoded
# (a character a URL cannot hold as it is), and in the row's JSON escaped (a quote, a non-ASCII letter).
TOKEN = "MTA5ODc2NTQzMjEwOTg3NjU0.GhIjKl.abcdefghijklmnopqrstuvwxyz0123"
ENCODED = "p@ss w/rd+42"
ESCAPED = 'qu"ot\\é-s3cret'
SECRETS_IN_NAMES = (TOKEN, ENCODED, ESCAPED)


def forms(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), quote(secret), json.dumps(secret)[1:-1]}


def leaky(secret: str, n: int) -> SharedFile:
    name = f"{secret}.txt"
    url = f"https://cdn.example/attachments/1/{n}/{quote(name, safe='')}?ex=1"
    return SharedFile(name, "text", 5, "text/plain", url,
                      attachment_id=str(n), message_id="9", channel_id="1", text=f"key {secret}", chars=9)


def leaves_no_form(stored: str) -> None:
    for secret in SECRETS_IN_NAMES:
        for form in forms(secret):
            assert form not in stored, (secret, form)


async def test_a_secret_in_a_files_name_is_masked_in_its_stored_name_url_and_text(place: Place) -> None:
    for secret in SECRETS_IN_NAMES:
        SECRETS.register(secret)
    async with await place.open() as store:
        group = await store.groups.create_group("console:s", "s", GroupSettings())
        files = tuple(leaky(s, n) for n, s in enumerate(SECRETS_IN_NAMES))
        stored, _ = await store.thread.append_user_message(group.id, NewMessage("user", "alice", "see",
                                                                                attachments=files))
        [(column,)] = await place.fetch("SELECT attachments FROM messages WHERE seq = ?", (stored.seq,))
        read = (await store.thread.get_message(group.id, stored.seq)).attachments
    leaves_no_form(column)
    leaves_no_form(repr(stored.attachments) + repr(read))
    assert [f.name for f in read] == ["***.txt"] * 3
    assert [f.url.rpartition("/")[2] for f in read] == ["***.txt?ex=1"] * 3
    assert [(f.attachment_id, f.message_id, f.channel_id) for f in read] == [("0", "9", "1"), ("1", "9", "1"),
                                                                             ("2", "9", "1")]


async def test_migration_14_masks_the_files_of_rows_stored_before_with_the_secrets_known_at_start(
        place: Place) -> None:
    """Rows stored before URLs were masked (written here as the older version wrote them: the raw
    name and URL in the row's JSON): opening the database masks them with the secrets the process
    knows then (its settings' and environment's, registered before the store opens) and the
    webhooks' tokens the database holds."""
    webhook_token = "whk-" + "t0ken" * 6
    async with await place.open() as store:
        group = await store.groups.create_group("console:m", "m", GroupSettings())
        await store.webhooks.save_webhook("1", "55", webhook_token)
    files = [dataclasses.asdict(leaky(s, n)) for n, s in enumerate([*SECRETS_IN_NAMES, webhook_token])]
    await place.execute("INSERT INTO messages (group_id, seq, author_type, author_name, text, created_at,"
                        " attachments) VALUES (?, 1, 'user', 'alice', 'see', 0, ?)", (group.id, json.dumps(files)))
    await place.execute("UPDATE groups SET latest_seq = 1 WHERE id = ?", (group.id,))
    await place.execute("DELETE FROM _migrations WHERE id = 14")  # as a database of the version before
    [(raw,)] = await place.fetch("SELECT attachments FROM messages WHERE seq = 1")
    assert TOKEN in raw and quote(ENCODED, safe="") in raw and json.dumps(ESCAPED)[1:-1] in raw
    SECRETS.clear()
    for secret in SECRETS_IN_NAMES:  # as the command line registers the settings' before it opens the store
        SECRETS.register(secret)
    async with await place.open() as store:
        read = (await store.thread.get_message(group.id, 1)).attachments
    [(column,)] = await place.fetch("SELECT attachments FROM messages WHERE seq = 1")
    leaves_no_form(column)
    assert webhook_token not in column
    assert [f.name for f in read] == ["***.txt"] * 4 and all("***" in f.url for f in read)
    assert [f.text for f in read] == ["key ***"] * 4
