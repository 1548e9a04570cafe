"""Tool calls held for approval in group runs (issue 29 item 7, SPEC §6b "Approval"): the real openai
client against FakeOpenAI, the real engine and a real database; the surface decides (the Discord
buttons and the console's [y/N] have their own tests: tests/discord/test_approval.py,
tests/test_console_approval.py)."""
from __future__ import annotations

from bot.core.models import Approval
from tests.engine.test_tools import Counter, grant, journal, participant_calls, running
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call
from tests.support import eventually


def add_script(after: str = "Done.") -> GroupChatScript:
    return GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__add", n=2)]), after]})


async def confirm_on(harness, *patterns: str) -> None:
    agent = await harness.store.roster.find_agent(harness.group.id, "planner")
    await harness.store.tools.grant_tools(agent.id, list(patterns), confirm=True)


async def test_an_approved_call_runs_once_and_records_who_approved_it(harness):
    counter = Counter()
    harness.surface.decide = lambda ask: Approval(True, "alice")
    async with FakeOpenAI(add_script()) as srv, running(harness, srv, counter) as h:
        await confirm_on(h, "counter.add")
        await h.say("@planner add two")
        await h.idle(30)
        rows = await journal(h)
    assert counter.calls == {"add": 1}
    (ask,) = harness.surface.asked
    assert (ask.agent_name, ask.tool, ask.arguments, ask.starter_user_id, ask.starter_name, ask.timeout) == (
        "planner", "counter.add", '{"n": 2}', "alice", "alice", 600.0)
    assert rows == [("counter__add", "done", '{"n": 2}', "[approved by alice]\ncounter is 2")]
    assert participant_calls(srv)[-1]["messages"][-1]["content"] == "[approved by alice]\ncounter is 2"


async def test_a_denied_call_does_not_run_and_the_model_is_told_by_whom(harness):
    counter = Counter()
    harness.surface.decide = lambda ask: Approval(False, "bob")
    async with FakeOpenAI(add_script("It was not allowed.")) as srv, running(harness, srv, counter) as h:
        await confirm_on(h, "counter.*")
        await h.say("@planner add two")
        await h.idle(30)
        rows = await journal(h)
        assert (await h.thread())[-1] == "[planner] It was not allowed."
    assert counter.calls == {}
    told = "error: denied by bob: this call of counter.add did not run."
    assert rows == [("counter__add", "done", '{"n": 2}', told)]
    assert participant_calls(srv)[-1]["messages"][-1]["content"] == told


async def test_no_answer_in_time_denies(harness):
    counter = Counter()  # the recording surface's default decision: nobody answered in time
    async with FakeOpenAI(add_script()) as srv, running(harness, srv, counter, approval_timeout=5) as h:
        await confirm_on(h, "counter.add")
        await h.say("@planner add two")
        await h.idle(30)
        rows = await journal(h)
    assert counter.calls == {}
    assert harness.surface.asked[0].timeout == 5.0
    assert rows[0][3] == "error: denied: nobody approved this call of counter.add in time; it did not run."


async def test_a_tool_without_confirm_is_not_held(harness):
    counter = Counter()
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__get")]), "It is 0."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, counter) as h:
        await grant(h, "counter.get")
        await h.say("@planner read it")
        await h.idle(30)
    assert counter.calls == {"get": 1} and harness.surface.asked == []


async def test_a_run_waiting_for_approval_when_the_process_stops_asks_again_when_it_resumes(harness):
    counter = Counter()
    harness.surface.hold_approvals = True
    async with FakeOpenAI(add_script()) as srv:
        async with running(harness, srv, counter) as h:
            await confirm_on(h, "counter.add")
            await h.say("@planner add two")
            await eventually(lambda: harness.surface.asked, "the call to be held for approval")
            assert [r[:2] for r in await journal(h)] == [("counter__add", "pending")]
        harness.surface.hold_approvals = False
        harness.surface.decide = lambda ask: Approval(True, "alice")
        async with running(harness, srv, counter) as h:  # the same database, started again
            await h.idle(30)
            rows = await journal(h)
            assert (await h.thread())[-1] == "[planner] Done."
    assert len(harness.surface.asked) == 2  # asked again
    assert counter.calls == {"add": 1}
    assert [r[:2] for r in rows] == [("counter__add", "done")]


async def test_max_tool_steps_is_the_groups(harness):
    counter = Counter()
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__get")])] * 3 + ["Gave up."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, counter, max_tool_steps=3) as h:
        await grant(h, "counter.get")
        await h.say("@planner read it")
        await h.idle(30)
        assert (await h.thread())[-1] == "[planner] Gave up."
    calls = participant_calls(srv)
    assert len(calls) == 4 and "tools" not in calls[3]
    assert counter.calls == {"get": 3}
