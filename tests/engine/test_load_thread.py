"""load_thread over a real SQLite file keeps exactly the rows the trimming policy (SPEC §6) says.

The expectation is computed here, by `reference_window`, a plain restatement of
the policy (not the code under test): every line costs its tokens plus a
newline; when the thread with a 16-token marker and the task line is over
budget, the cut is the smallest multiple of budget // 2 that brings it under,
and the kept part starts at the first row whose earlier rows cost at least the
cut (else only the newest row). One case is also written out by hand, so the
reference is pinned too.
"""
from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.core.features.context import load_thread
from bot.core.models import GroupSettings, NewMessage
from storage.store import SqliteStore
from tests.fakes.rows import posted

MARKER = 16  # "[roundtable] (N earlier messages omitted)" and its newline


def reference_window(tokens: list[int], budget: int, task: int | None) -> tuple[int, int, int | None]:
    """(index of the first kept row, omitted count, index of the task shown first or None)."""
    cost = [max(t, 1) + 1 for t in tokens]
    n = len(cost)
    before = [sum(cost[:k]) for k in range(n + 1)]  # tokens of the rows before index k
    extra = MARKER + (cost[task] if task is not None else 0)
    step = max(1, budget // 2)
    cut = 0
    while before[n] + extra - cut > budget:
        cut += step
    if cut == 0:
        return 0, 0, None
    start = next((k for k in range(n) if before[k] >= cut), n - 1)
    pulled = task is not None and task < start
    return start, start - (1 if pulled else 0), task if pulled else None


async def fill(store: SqliteStore, n: int, task_at: int, tokens: Callable[[int], int]) -> tuple[int, int]:
    """Rows 1..n: people's messages (the task and every third row) and the planner's replies."""
    group = await store.groups.create_group("k", "g", GroupSettings())
    agent = await store.roster.add_agent(group.id, "planner", "r", "p")
    for i in range(1, n + 1):
        if i == task_at or i % 3 == 0:
            await store.thread.append_user_message(group.id, NewMessage("user", "alice", f"m{i}",
                                                                        token_count=tokens(i)))
        else:
            await posted(store, group.id, agent.id, f"r{i}", token_count=tokens(i))
    return group.id, agent.id


def line(i: int, task_at: int) -> str:
    return f"[alice] m{i}" if i == task_at or i % 3 == 0 else f"[planner] r{i}"


@pytest.mark.parametrize("n, budget, task_at, through", [
    (5, 1000, 1, 5), (60, 300, 1, 60), (60, 300, 30, 60), (200, 500, 150, 200), (200, 500, 150, 170),
    (60, 300, 59, 60), (40, 120, 1, 40), (3, 20, 1, 3), (1, 10, 1, 1),
])
async def test_load_thread_keeps_what_the_policy_says(tmp_path, n, budget, task_at, through):
    def tokens(i: int) -> int:
        return 7 + i % 5 if i == task_at or i % 3 == 0 else 9 + i % 4

    async with await SqliteStore.open(tmp_path / "t.db") as store:
        group_id, agent_id = await fill(store, n, task_at, tokens)
        got = await load_thread(store, group_id, through=through, budget=budget, task_seq=task_at)
        start, omitted, task = reference_window([tokens(i) for i in range(1, through + 1)], budget, task_at - 1)
        assert [m.seq for m in got.kept] == list(range(start + 1, through + 1))
        assert got.omitted == omitted
        assert (got.task_pulled_up.seq if got.task_pulled_up else None) == (task + 1 if task is not None else None)
        lines = ([line(task + 1, task_at)] if task is not None else []) + (
            [f"[roundtable] ({omitted} earlier messages omitted)"] if omitted else []) + [
            line(i, task_at) for i in range(start + 1, through + 1)]
        assert got.render() == "\n".join(lines)
        if n > 1:
            assert await store.thread.last_agent_author(group_id, through=n) == agent_id
        assert await store.thread.last_agent_author(group_id, through=0) is None


async def test_a_hand_computed_window(tmp_path):
    """20 rows of 10 tokens (11 with the newline), budget 120: 220 + 16 + 11 is 127 over, so the
    cut is 180 (three steps of 60); row 18 is the first whose earlier rows cost 180 or more
    (17 x 11 = 187). So rows 18-20 are kept (half the budget with the marker and the task),
    the task (row 1) is shown first and 16 rows are omitted: the window then grows for half a
    budget before it moves again."""
    async with await SqliteStore.open(tmp_path / "t.db") as store:
        group_id, _ = await fill(store, 20, 1, lambda i: 10)
        got = await load_thread(store, group_id, through=20, budget=120, task_seq=1)
    assert [m.seq for m in got.kept] == [18, 19, 20]
    assert got.omitted == 16 and got.task_pulled_up is not None and got.task_pulled_up.seq == 1
    assert got.render().splitlines()[:3] == ["[alice] m1", "[roundtable] (16 earlier messages omitted)", "[alice] m18"]
    assert reference_window([10] * 20, 120, 0) == (17, 16, 0)


async def test_an_empty_thread(tmp_path):
    async with await SqliteStore.open(tmp_path / "t.db") as store:
        group = await store.groups.create_group("k", "g", GroupSettings())
        got = await load_thread(store, group.id, through=0, budget=100, task_seq=None)
    assert got.kept == () and got.omitted == 0 and got.task_pulled_up is None and got.render() == ""


async def test_an_agents_prompt_window_moves_by_three_quarters_of_its_budget(harness):
    """Seed layout: each agent's own window."""
    from bot.core.features.context import MARKER_TOKENS, cut_point, participant_step
    from tests.fakes.scripted_llm import ScriptedLLM

    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} noted {n}")
    async with harness.running(llm, mode="tags", context_budget=1000, prompt_layout="seed"):
        for i in range(40):  # ~15 tokens a row: the thread passes 1,000 tokens
            await harness.say(f"@planner item {i}: " + "words " * 10)
            await harness.idle()
        store, group = harness.store, harness.group
        (snapshot,) = (await harness.fetch("SELECT MAX(snapshot_seq) FROM runs"))[0]
        total = await store.thread.thread_tokens(group.id, through=snapshot)
        cut = cut_point(total, 1000, MARKER_TOKENS, participant_step(1000))
        assert cut != cut_point(total, 1000, MARKER_TOKENS)  # half-budget steps would start elsewhere
        start = await store.thread.first_seq_at(group.id, tokens=cut)
        rows = {m.seq: m for m in await store.thread.messages(group.id)}
        prompt = "\n".join(m.content for m in llm.history[-1][2][1:])
        assert f"] {rows[start].text}" in prompt and f"] {rows[start - 1].text}\n" not in prompt + "\n"
