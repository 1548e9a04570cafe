"""PostgreSQL restarting under an engine (staged through a TCP proxy: the shared test server is
never restarted): the outage is one WARNING when it starts and one when it ends, nothing worse;
a message posted meanwhile is stored and answered once the server is back; and the engine listens
for other processes' rows again, so a row another store appends wakes it at once, not at the
keeper's next look."""
from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from bot.core.models import GroupSettings, NewMessage, Tags
from bot.core.runtime.engine import Engine
from bot.llm.tokens import make_token_counter
from storage import open_store
from tests.engine.conftest import FAST_RETRY
from tests.fakes.databases import PostgresPlace
from tests.fakes.scripted_llm import ScriptedLLM
from tests.fakes.surface import RecordingSurface
from tests.fakes.tcp_proxy import TcpProxy
from tests.support import bound, eventually

RELISTENED = "listening for other processes' messages again"


async def test_a_restart_of_the_server_is_two_warnings_and_the_engine_listens_again(
        pg: PostgresPlace, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} answer {n}")
    admin = await asyncpg.connect(pg.url)
    async with TcpProxy.to_url(pg.url) as proxy, await pg.open() as other:  # another process: not through it
        store = await open_store(proxy.url(pg.target))
        group = await store.groups.create_group("console:main", "main", GroupSettings(mode="tags"))
        planner = await store.roster.add_agent(group.id, "planner", "plans", "You plan.")
        engine = Engine(store, llm, RecordingSurface(), make_token_counter(), retry=FAST_RETRY)
        engine.ownership.tick = 3600  # the keeper never looks: only a notification can wake the engine
        await engine.start()
        try:
            async def say(text: str) -> None:
                await engine.post_user_message(group, author_name="alice", user_id="alice", text=text)

            await say("@planner first")
            await eventually(lambda: len(llm.participant_order) == 1, "the first answer")
            await engine.wait_idle(group.id, bound(30))

            await proxy.down(admin)  # the server ends every connection, and takes none for now
            during = asyncio.create_task(say("@planner while the server restarts"))
            await eventually(lambda: any("lost the connection to PostgreSQL" in r.getMessage() for r in caplog.records),
                        "the outage was noticed")
            await proxy.up()
            await during
            await eventually(lambda: len(llm.participant_order) == 2, "the answer to the message of the outage")
            await eventually(lambda: any(RELISTENED in r.getMessage() for r in caplog.records), "listening again")
            await engine.wait_idle(group.id, bound(30))

            await other.thread.append_user_message(group.id, NewMessage(
                "user", "bob", "@planner from another process", author_user_id="bob",
                tags=Tags(agent_ids=(planner.id,), agent_names=("planner",))))
            await eventually(lambda: len(llm.participant_order) == 3, "woken by the other process's row")
        finally:
            await engine.close()
            await store.close()
            await admin.close()
    # The product's loggers, and asyncio's reports of tasks that touched the database: under xdist a
    # worker's earlier test may leave an unrelated client for the garbage collector to report here.
    loud = [(r.levelname, r.name, r.getMessage()) for r in caplog.records
            if r.levelno >= logging.WARNING and (r.name.split(".")[0] in ("bot", "storage") or _ours(r))]
    assert len(loud) == 2, loud
    assert loud[0][:2] == ("WARNING", "storage.pg") and "lost the connection to PostgreSQL" in loud[0][2]
    assert loud[1][:2] == ("WARNING", "storage.pg") and "is reachable again after" in loud[1][2]
    assert not [r for r in caplog.records if "another operation" in r.getMessage()]


def _ours(record: logging.LogRecord) -> bool:
    """An asyncio report (a task's exception never retrieved ...) about this test's database work."""
    if record.name != "asyncio":
        return False
    text = record.getMessage() + (logging.Formatter().formatException(record.exc_info) if record.exc_info else "")
    return any(word in text for word in ("asyncpg", "storage", "bot/"))
