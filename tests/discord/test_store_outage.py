"""The database takes no writes for a while (a full disk, a read-only database): the channel is
told once, by the bot directly; `/roundtable status` shows it while it lasts; the channel is told
once when it works again; and what people posted meanwhile is stored and answered, in order."""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.core.rules.store_health import StoreHealth
from storage.store import SqlStore
from tests.discord.conftest import BotHarness
from tests.discord_emulator import DiscordEmulator
from tests.fakes.faults import FullDisk, read_only, refusing_inserts
from tests.fakes.openai_server import GroupChatScript

AFTER = 0.5  # seconds of failing writes before people are told (10 s in production)
NOTICE = "I can't save anything to my database"
FIXED = "My database works again"


@pytest.fixture
def script() -> GroupChatScript:
    return GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")


def bot_posts(emu: DiscordEmulator, text: str) -> list[dict[str, Any]]:
    return [m for m in emu.channel_messages(emu.channel_id) if text in m["content"]]


@contextlib.contextmanager
def full_disk(harness: BotHarness) -> Iterator[None]:
    disk = FullDisk(harness.db.parent)
    disk.fill()
    try:
        yield
    finally:
        disk.free()


def opened(harness: BotHarness) -> SqlStore:
    assert harness.store is not None, "the harness has started"
    return harness.store


FAULTS: dict[str, Callable[[BotHarness], contextlib.AbstractContextManager[None]]] = {
    "a full disk": full_disk,  # for real: a tmpfs filled up (root with mount rights only)
    "a read-only database": lambda h: read_only(opened(h)),  # SQLite's own refusal
    "a full file (inserts refused at the sqlite3 level)": lambda h: refusing_inserts(opened(h)),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_people_are_told_once_when_the_database_takes_no_writes_and_once_when_it_works_again(
        harness, script, fault, tmp_path: Path, caplog) -> None:
    emu = harness.emu
    with contextlib.ExitStack() as mounts:
        await harness.stop()
        if fault == "a full disk":
            reason = FullDisk.unavailable(tmp_path / "probe")
            if reason is not None:
                pytest.skip(reason)
            harness.db = mounts.enter_context(FullDisk(tmp_path / "disk")).where / "roundtable.db"
        harness.store_options = {"health": StoreHealth(after=AFTER)}
        await harness.start()
        await harness.setup_group(("planner", "plans"), mode="tags")
        caplog.set_level(logging.WARNING)

        def retries() -> int:
            return sum("not stored yet" in r.getMessage() for r in caplog.records)

        with FAULTS[fault](harness):
            await emu.user_post(emu.channel_id, emu.alice_id, "@planner one")
            await emu.wait_for(lambda: bot_posts(emu, NOTICE), timeout=15, what="the notice")
            await emu.user_post(emu.channel_id, emu.bob_id, "@planner two")
            status = await harness.command("roundtable status")
            problem = harness.embed_fields(status)["database problem"]
            assert problem.startswith("nothing can be saved for ") and "messages posted meanwhile" in problem
            assert status["data"]["embeds"][0]["color"] == 0xE74C3C  # red
            tried = retries()
            await emu.wait_for(lambda: retries() >= tried + 4, timeout=15, what="more failed writes")
        await emu.wait_for(lambda: bot_posts(emu, FIXED), timeout=15, what="the recovery")
        await emu.wait_for(lambda: [m for m in emu.channel_messages(emu.channel_id) if m.get("webhook_id")],
                           timeout=15, what="an answer")
        await harness.idle()

        notice, fixed = bot_posts(emu, NOTICE), bot_posts(emu, FIXED)
        assert len(notice) == 1 and len(fixed) == 1  # once per outage, not per failed write
        for post in (*notice, *fixed):
            assert post["author"]["id"] == str(emu.bot_user_id) and not post.get("webhook_id")
        assert notice[0]["content"].endswith("(This notice is posted directly and is not in the history: "
                                             "the database cannot store it.)")
        assert fixed[0]["content"].startswith("My database works again (it could not be written for ")
        rows = await harness.store.thread.messages(1)
        people = [(r.author_name, r.text) for r in rows if r.author_type == "user"]
        assert people == [("Alice", "@planner one"), ("Bob", "@planner two")]  # nothing posted meanwhile is lost
        assert rows[-1].author_name == "planner" and rows[-1].confirmed
        assert not any(NOTICE in r.text or FIXED in r.text for r in rows)
        status = await harness.command("roundtable status")
        assert "database problem" not in harness.embed_fields(status)
        await harness.stop()
