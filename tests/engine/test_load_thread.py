"""load_thread (window from stored token counts) keeps exactly what trim_thread keeps."""
import pytest

from bot.core.context import load_thread, trim_thread
from bot.core.models import GroupSettings, NewMessage
from storage.store import SqliteStore
from tests.fakes.rows import posted


@pytest.mark.parametrize("n, budget, task_at", [(5, 1000, 1), (60, 300, 1), (60, 300, 30), (200, 500, 150)])
async def test_load_thread_matches_trim_thread(tmp_path, n, budget, task_at):
    store = await SqliteStore.open(tmp_path / "t.db")
    try:
        group = await store.create_group("k", "g", GroupSettings())
        agent = await store.add_agent(group.id, "planner", "r", "p")
        for i in range(1, n + 1):
            if i == task_at or i % 3 == 0:
                await store.append_user_message(group.id, NewMessage("user", "alice", f"m{i}", token_count=7 + i % 5))
            else:
                await posted(store, group.id, agent.id, f"r{i}", token_count=9 + i % 4)
        everything = await store.messages(group.id)
        expected = trim_thread(everything, budget, task_seq=task_at)
        got = await load_thread(store, group.id, through=n, budget=budget, task_seq=task_at)
        assert got.render() == expected.render()
        assert [m.seq for m in got.kept] == [m.seq for m in expected.kept]
        assert await store.last_agent_author(group.id, through=n) == agent.id
        assert await store.last_agent_author(group.id, through=0) is None
    finally:
        await store.close()
