"""The record read in pages (exports) and spending per model, on SQLite and PostgreSQL (`place`)."""
from __future__ import annotations

from bot.core.models import Completion, Decision, GroupSettings, NewMessage, RunResult, Summary, Usage
from tests.fakes.databases import Place
from tests.fakes.rows import agent_reply


def user(text: str = "hi") -> NewMessage:
    return NewMessage("user", "alice", text, author_user_id="alice")


async def collect(pages) -> list[list[int]]:
    out = []
    async for page in pages:
        out.append([getattr(item, "seq", None) or item.id for item in page])
    return out


async def test_pages_cover_a_range_in_order(place: Place) -> None:
    async with await place.open() as store:
        group = await store.groups.create_group("k", "n", GroupSettings())
        other = await store.groups.create_group("k2", "n2", GroupSettings())
        a = await store.roster.add_agent(group.id, "a", "r", "p")
        for i in range(3):  # episodes 1..3: a task (#1, #3, #5) and a reply each
            await store.thread.append_user_message(group.id, user(f"task {i}"))
            await agent_reply(store, group.id, a.id, f"reply {i}", usage=Usage(10 * (i + 1), 1, 0))
        await store.thread.append_user_message(other.id, user())
        assert await collect(store.record.message_pages(group.id, size=4)) == [[1, 2, 3, 4], [5, 6]]
        assert await collect(store.record.message_pages(group.id, after=1, through=4, size=2)) == [[2, 3], [4]]
        assert await collect(store.record.message_pages(group.id, after=6)) == []
        runs = [run for page in [p async for p in store.record.run_pages(group.id, size=2)] for run in page]
        assert [r.snapshot_seq for r in runs] == [1, 3, 5] and [r.usage.prompt_tokens for r in runs] == [10, 20, 30]
        assert await collect(store.record.run_pages(group.id, after=2, through=4)) == [[runs[1].id]]
        # rows #4..#5: the episode #4 belongs to (opened by #3) and the one #5 opens
        episodes = [e for page in [p async for p in store.record.episode_pages(group.id, after=3, through=5, size=1)]
                    for e in page]
        assert [e.task_seq for e in episodes] == [3, 5]
        assert set(await store.record.runs_by_id([runs[0].id, runs[2].id, 999])) == {runs[0].id, runs[2].id}
        assert [e.task_seq for e in (await store.record.episodes_by_id([1, 3])).values()] == [1, 5]
        await store.roster.remove_agent(a.id)
        b = await store.roster.add_agent(group.id, "b", "r", "p")
        roster = await store.record.roster_ever(group.id)
        assert [(agent.name, removed is None) for agent, removed in roster] == [("b", True), ("a", False)]
        assert b.id in {agent.id for agent, _ in roster}


async def test_spending_per_model_with_calls(place: Place) -> None:
    async with await place.open() as store:
        group = await store.groups.create_group("k", "n", GroupSettings())
        a = await store.roster.add_agent(group.id, "a", "r", "p")
        await store.thread.append_user_message(group.id, user())
        await store.routing.record_decision(group.id, Decision(1, "fallback", (a.id,), ("a",), ("x", "y"), 2,
                                                               usage=Usage(7, 2, 1), model="sel-model"))
        decision = await store.routing.get_decision(group.id, 1)
        assert decision is not None and decision.model == "sel-model"
        for model, calls in (("m1", 1), ("m1", 1), ("m2", 2)):  # m2: a memory run reminded to save a note
            run = await store.runs.start_run(group.id, a.id, "group", 1)
            await store.runs.finish_run(run.id, RunResult("empty", Usage(100, 10, 50), model=model, calls=calls), cap=5)
        assert (await store.runs.get_run(run.id)).model == "m2" and (await store.runs.get_run(run.id)).calls == 2
        old = await store.runs.start_run(group.id, a.id, "group", 1)  # a failed call: no model answered
        await store.runs.finish_run(old.id, RunResult("failed", error="timeout", calls=1), cap=5)
        refused = await store.runs.start_run(group.id, a.id, "group", 1)  # the cap refused it before any call
        await store.runs.finish_run(refused.id, RunResult("refused", calls=0), cap=5)
        await store.spending.record_call(group.id, a.id, "memory check", Completion("", Usage(30, 5, 0), "m2"))
        for _ in range(2):  # the same rows summarised twice: two calls, both paid
            await store.reading.save_summary(group.id, Summary(0, 1, "text", model="cheap"), prompt_tokens=40,
                                             completion_tokens=4)
        spent = sorted(((s.who, s.model, s.kind, s.calls, s.usage) for s in await store.spending.spending(group.id, 0)),
                       key=str)
        assert spent == sorted([
            ("a", "", "agent", 1, Usage()),
            ("a", "m1", "agent", 2, Usage(200, 20, 100)),
            ("a", "m2", "agent", 2, Usage(100, 10, 50)),  # one run, two calls
            ("a", "m2", "agent", 1, Usage(30, 5, 0)),  # the memory check: a call of its own
            ("selector", "sel-model", "selector", 2, Usage(7, 2, 1)),
            ("catch-up", "cheap", "catch-up", 2, Usage(80, 8, 0)),
        ], key=str)
        assert await store.spending.spending(group.id, 10**12) == []
