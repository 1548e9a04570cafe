"""Direct runs (/ask): private answers, the agent's one lock both ways, post:true under the group's rules."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.core.errors import Busy, LLMTimeout, UserFacingError
from tests.fakes.scripted_llm import ScriptedLLM
from tests.support import eventually


async def runs(harness) -> list[tuple[Any, ...]]:
    rows = await harness.fetch(
        "SELECT a.name, r.kind, r.status, r.snapshot_seq FROM runs r JOIN agents a ON a.id = r.agent_id ORDER BY r.id")
    return [tuple(r) for r in rows]


async def agent(harness, name: str):
    found = await harness.store.roster.find_agent(harness.group.id, name)
    assert found is not None
    return found


async def test_a_private_answer_sees_the_last_ten_rows_and_changes_nothing_in_the_group(harness):
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} reply {n}",
                      direct={"planner": ["Day 1: Asakusa. TERMINATE"]})
    async with harness.running(llm, mode="tags"):
        for i in range(12):
            await harness.say(f"@budget note {i}")
            await harness.idle()
        before = await harness.store.groups.get_group(harness.group.id)
        planner = await agent(harness, "planner")
        answer = await harness.engine.ask(harness.group, planner, "What first?", asker="alice")
        assert answer.text == "Day 1: Asakusa." and answer.posted is None and answer.not_posted is None
        after = await harness.store.groups.get_group(harness.group.id)
        assert after.latest_seq == before.latest_seq  # nothing posted
        assert (await agent(harness, "planner")).delivered_through == planner.delivered_through
        kind, name, messages = llm.history[-1]
        assert (kind, name) == ("direct", "planner")
        assert messages[0].role == "system" and messages[0].content == "You plan trips."
        context = messages[1].content
        rows = [line for line in context.splitlines() if line.startswith("[")]
        assert len(rows) == 10 and rows[-1] == "[budget] budget reply 12"  # the last 10 rows, no more
        assert rows[0] == "[alice] @budget note 7" and "note 6" not in context
        assert messages[2].content.endswith("What first?") and "only they will see your answer" in messages[2].content
        assert (await runs(harness))[-1] == ("planner", "direct", "answered", after.latest_seq)
        usage = await harness.store.spending.usage_since(harness.group.id, 0)
        assert usage["planner"].prompt_tokens == llm.usage.prompt_tokens  # the direct run's tokens count


async def test_asking_an_agent_in_a_group_run_is_refused_at_once(harness):
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} reply {n}")
    llm.gate = asyncio.Event()
    async with harness.running(llm, mode="tags"):
        await harness.say("@planner draft it")
        await harness.until_called()
        planner = await agent(harness, "planner")
        with pytest.raises(Busy, match="planner is busy with a group run"):
            await harness.engine.ask(harness.group, planner, "quick question", asker="bob")
        assert not any(kind == "direct" for kind, _, _ in llm.history)  # no hidden queueing
        llm.gate.set()
        await harness.idle()
        assert [r[:3] for r in await runs(harness)] == [("planner", "group", "posted")]


async def test_a_group_delivery_waits_for_a_direct_run_then_runs_once(harness):
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} reply {n}", direct={"planner": ["privately: yes"]})
    llm.direct_gate = asyncio.Event()
    async with harness.running(llm, mode="tags"):
        planner = await agent(harness, "planner")
        asking = asyncio.create_task(harness.engine.ask(harness.group, planner, "can you?", asker="bob"))
        await eventually(lambda: any(kind == "direct" for kind, _, _ in llm.history), "the direct run's call")
        await harness.say("@planner and @budget: go")
        await eventually(lambda: llm.participant_order, "budget's run")  # budget runs; the planner waits for its lock
        assert llm.participant_order == ["budget"]
        with pytest.raises(Busy, match="planner is busy with a direct run"):
            await harness.engine.ask(harness.group, planner, "again?", asker="carol")
        llm.direct_gate.set()
        assert (await asking).text == "privately: yes"
        await harness.idle()
        assert sorted(llm.participant_order) == ["budget", "planner"]
        assert [r[:3] for r in await runs(harness) if r[0] == "planner"] == [
            ("planner", "direct", "answered"), ("planner", "group", "posted")]


async def test_post_true_posts_once_and_counts_toward_the_cap(harness):
    llm = ScriptedLLM(direct={"planner": ["Shared plan: Asakusa first.", "A second thought."]})
    async with harness.running(llm, max_agent_turns=1):
        await harness.say("hello all", who="alice")  # the selector answers TERMINATE: nobody speaks
        await harness.idle()
        planner = await agent(harness, "planner")
        seq = (await harness.store.groups.get_group(harness.group.id)).latest_seq
        answer = await harness.engine.ask(harness.group, planner, "share the plan", asker="alice", post=True)
        assert answer.posted is not None and answer.posted.seq == seq + 1
        await harness.idle()
        assert harness.surface.lines().count("[planner] Shared plan: Asakusa first.") == 1
        group = await harness.store.groups.get_group(harness.group.id)
        assert group.agent_streak == 1
        second = await harness.engine.ask(harness.group, planner, "more?", asker="alice", post=True)
        assert second.posted is None and second.text == "A second thought."
        assert second.not_posted is not None and "cap of 1" in second.not_posted
        assert (await harness.store.groups.get_group(harness.group.id)).latest_seq == seq + 1
        assert [r[2] for r in await runs(harness) if r[1] == "direct"] == ["posted", "refused"]


async def test_a_posted_answer_routes_whom_it_tags(harness):
    llm = ScriptedLLM(direct={"planner": ["@budget please check $1,450"]},
                      agents={"budget": ["Fits. TERMINATE"]})
    async with harness.running(llm):
        planner = await agent(harness, "planner")
        await harness.engine.ask(harness.group, planner, "ask budget", asker="alice", post=True)
        await harness.idle()
        assert llm.participant_order == ["budget"]
        assert harness.surface.lines() == ["[planner] @budget please check $1,450", "[budget] Fits. TERMINATE"]


async def test_a_failing_model_is_a_clear_answer_and_a_failed_run(harness):
    llm = ScriptedLLM(direct={"planner": [LLMTimeout("timed out after 30s")]})
    async with harness.running(llm):
        planner = await agent(harness, "planner")
        with pytest.raises(UserFacingError, match="planner could not answer: the model did not answer in time"):
            await harness.engine.ask(harness.group, planner, "hello?", asker="alice")
        assert [r[1:3] for r in await runs(harness)] == [("direct", "failed")]
        assert not harness.engine.locks.lock(planner.id).locked()


async def test_a_direct_run_spends_the_budget_and_is_refused_once_it_is_reached(harness):
    from bot.core.models import Completion, Usage

    big = Completion("A long private plan.", Usage(1_000_000, 100_000, 0), model="gpt-4o-mini")  # $0.21
    llm = ScriptedLLM(direct={"planner": [big, "never asked"]})
    async with harness.running(llm, monthly_budget=0.20):
        planner = await agent(harness, "planner")
        assert (await harness.engine.ask(harness.group, planner, "plan it all", asker="alice")).text
        group = await harness.store.groups.get_group(harness.group.id)
        assert group.paused  # the direct run's cost counts like any other
        with pytest.raises(UserFacingError, match=r"reached the monthly budget of \$0\.20"):
            await harness.engine.ask(group, planner, "one more?", asker="alice")
        assert [k for k, _, _ in llm.history] == ["direct"]


async def test_a_direct_run_reads_the_agents_notes_but_writes_none(harness):
    llm = ScriptedLLM(direct={"planner": ["From my notes: Asakusa."]})
    async with harness.running(llm):
        planner = await agent(harness, "planner")
        planner = await harness.store.roster.update_agent(planner.id, memory=True)
        await harness.store.notes.add_note(planner.id, "Alice prefers temples to shopping.")
        await harness.engine.ask(harness.group, planner, "what do you remember?", asker="alice")
        system = llm.history[-1][2][0].content
        assert system.startswith("You plan trips.") and "<memory>" in system
        assert "- Alice prefers temples to shopping." in system
        assert await harness.store.notes.note_count(planner.id) == 1
