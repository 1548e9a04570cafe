"""Nothing lost, nothing twice, at the engine: episodes credited to the task a run answered,
posts retried in order, one process per group (leases, on SQLite and PostgreSQL), a process
touching only its scope."""
from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from bot.core.errors import DeliveryError
from bot.core.models import GroupSettings, NewMessage, RunResult
from bot.core.runtime.engine import Engine
from bot.core.runtime.worker import RetryPolicy
from bot.llm.tokens import make_token_counter
from storage import LOCKED_MESSAGE, SqlStore
from tests.engine.conftest import FAST_RETRY
from tests.fakes.databases import Place
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.scripted_llm import ScriptedLLM
from tests.fakes.surface import RecordingSurface
from tests.support import bound, eventually, quiet_period


async def test_a_person_posting_during_a_run_keeps_its_tokens_and_terminate_in_the_first_task(harness):
    llm = ScriptedLLM(selector=["budget", "TERMINATE"],
                      agents={"planner": ["Task A is done. TERMINATE"], "budget": ["Task B costs $10."]})
    llm.gate = asyncio.Event()
    async with harness.running(llm):
        await harness.say("@planner task A")
        await harness.until_called()
        await harness.say("task B")  # a new task while the planner still works on A
        llm.gate.set()
        await harness.idle()
        store, group_id = harness.store, harness.group.id
        rows = await store.thread.messages(group_id)
        assert [f"[{m.author_name}] {m.text}" for m in rows] == [
            "[alice] @planner task A", "[alice] task B", "[planner] Task A is done. TERMINATE",
            "[budget] Task B costs $10."]
        a, b = rows[0].episode_id, rows[1].episode_id
        assert rows[2].episode_id == a and rows[3].episode_id == b
        episode_a, episode_b = await store.episodes.get_episode(a), await store.episodes.get_episode(b)
        assert (episode_a.status, episode_a.agent_turns, episode_a.prompt_tokens) == ("superseded", 1, 100)
        # B ended by the selector's TERMINATE after budget spoke, not by the planner's reply to A
        assert (episode_b.status, episode_b.agent_turns) == ("terminated", 1)
        assert (await store.routing.get_decision(group_id, 4)).terminate
        assert llm.participant_order == ["planner", "budget"]
        statuses = [(e.id, e.status) for e in harness.surface.episodes if not e.running]
        assert (b, "terminated") == statuses[-1] and statuses.count((b, "terminated")) == 1


async def test_a_persons_message_waits_out_a_locked_database_and_is_stored_once(harness):
    harness.store_options["busy_timeout_ms"] = 50
    async with harness.running(mode="tags"):
        group = await harness.store.groups.get_group(harness.group.id)
        told: list[str] = []
        async with harness.place.hold_write_lock():  # another process writes for far longer than 50 ms
            posting = asyncio.create_task(harness.engine.post_user_message(
                group, author_name="alice", user_id="alice", text="kept through the lock", waiting=told.append))
            await eventually(lambda: told, "the first wait told")
            await quiet_period()  # several more tries, all refused (they leave no trace to wait for)
            assert not posting.done()
        message = await asyncio.wait_for(posting, bound())
        assert told == [LOCKED_MESSAGE]  # once, at the first wait
        rows = [(m.seq, m.text) for m in await harness.store.thread.messages(group.id)]
        assert rows == [(message.seq, "kept through the lock")]


async def test_a_late_reply_to_an_older_task_does_not_use_up_the_new_tasks_cap(harness):
    llm = ScriptedLLM(agents={"planner": ["About A."], "budget": ["About B."]})
    llm.gate = asyncio.Event()
    async with harness.running(llm, max_agent_turns=1):
        await harness.say("@planner task A")
        await harness.until_called()
        await harness.say("@budget task B")
        llm.gate.set()
        await harness.idle()
        assert await harness.thread() == ["[alice] @planner task A", "[alice] @budget task B", "[planner] About A.",
                                          "[budget] About B.", "[roundtable] " + "Stopped after 1 agent message "
                                          "(max_turns). Post a message to continue."]


@pytest.mark.parametrize("failures, expected_first_retry", [(1, 1.0), (2, 2.0), (3, 4.0), (7, 60.0), (50, 60.0)])
def test_the_default_retry_policy_retries_within_2_s_then_backs_off_to_60_s(failures, expected_first_retry):
    assert RetryPolicy().delay(failures) == expected_first_retry
    assert RetryPolicy().delay(failures, hint=0.5) == 0.5  # the surface's Retry-After, as given: not backed off
    assert RetryPolicy().delay(failures, hint=500.0) == 500.0  # nor cut to the cap


async def test_a_surface_failure_is_retried_while_running_in_seq_order(harness):
    llm = ScriptedLLM(selector=["budget", "TERMINATE"],
                      agents={"planner": ["First."], "budget": ["Second."]})
    async with harness.running(llm):
        harness.surface.fail_next = 3  # the first reply is refused three times
        await harness.say("@planner go")
        await harness.idle()
        shown = [m.text for m in harness.surface.published if m.author_type == "agent"]
        assert shown == ["First.", "Second."]
        assert all(m.confirmed for m in await harness.store.thread.messages(harness.group.id))
        assert harness.surface.alerts == []  # a passing fault is not announced


async def test_a_lasting_refusal_is_recorded_told_once_and_cleared(harness):
    llm = ScriptedLLM(agents={"planner": ["Waited."]})
    async with harness.running(llm, mode="tags"):
        harness.surface.fail_next, harness.surface.problem = 6, "Give my role Send Messages."
        await harness.say("@planner go")
        await harness.idle()
        assert harness.surface.alerts == ["Give my role Send Messages."]
        assert [m.text for m in harness.surface.published if m.author_type == "agent"] == ["Waited."]
        assert (await harness.store.groups.get_group(harness.group.id)).delivery_problem is None


class ScriptedFailures(RecordingSurface):
    """Fails its first posts as scripted: "refused" (a missing permission), "down" (a 503); each
    failure is `seconds_apart` later on the engine's clock than the one before."""

    def __init__(self, failures: list[str], clock: StepClock, seconds_apart: float) -> None:
        super().__init__()
        self.script, self.clock, self.seconds_apart = list(failures), clock, seconds_apart

    async def publish(self, group, message, agent, *, resume=False, record):
        if message.author_type == "agent" and self.script:
            self.clock.now += self.seconds_apart
            kind = self.script.pop(0)
            raise DeliveryError(f"Discord answered {kind}", problem="Give my role Send Messages."
                                if kind == "refused" else None)
        await super().publish(group, message, agent, resume=resume, record=record)


class StepClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("failures, seconds_apart, told", [
    (["refused"], 1.0, False),  # one refusal the next attempt gets past: a warning in the log only
    (["refused", "down"], 1.0, False),  # what failed the second time was not the refusal
    (["refused", "refused"], 1.0, True),  # a second refusal in a row: it lasts
    (["refused", "down", "down"], 6.0, True),  # still not shown 10 s after the refusal
])
async def test_a_refusal_is_told_only_when_it_lasts(sqlite_harness, caplog, failures, seconds_apart, told):
    clock = StepClock()
    sqlite_harness.engine_options["clock"] = clock
    sqlite_harness.surface = ScriptedFailures(failures, clock, seconds_apart)
    async with sqlite_harness.running(ScriptedLLM(agents={"planner": ["Shown."]}), mode="tags"):
        await sqlite_harness.say("@planner go")
        await sqlite_harness.idle()
        shown = [m.text for m in sqlite_harness.surface.published if m.author_type == "agent"]
        assert shown == ["Shown."]
        assert sqlite_harness.surface.alerts == (["Give my role Send Messages."] if told else [])
        assert (await sqlite_harness.store.groups.get_group(sqlite_harness.group.id)).delivery_problem is None
    assert any(r.levelname == "ERROR" and "Send Messages" in r.getMessage() for r in caplog.records) == told


class CountingLLM(ScriptedLLM):
    """Counts participant calls in flight per agent, over every engine that shares it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_flight: Counter[str] = Counter()
        self.most: Counter[str] = Counter()

    async def complete(self, messages, **kwargs):
        from tests.fakes.scripted_llm import kind_of
        kind, name = kind_of(messages)
        if kind != "participant":
            return await super().complete(messages, **kwargs)
        self.in_flight[name] += 1
        self.most[name] = max(self.most[name], self.in_flight[name])
        try:
            await asyncio.sleep(0.02)
            return await super().complete(messages, **kwargs)
        finally:
            self.in_flight[name] -= 1


async def open_engine(place: Place, llm, scope: str) -> tuple[SqlStore, Engine, RecordingSurface]:
    store = await place.open()
    surface = RecordingSurface()
    engine = Engine(store, llm, surface, make_token_counter(), scope=scope, retry=FAST_RETRY)
    engine.ownership.tick = 0.05
    return store, engine, surface


async def test_two_processes_on_one_group_never_run_it_together_and_the_second_takes_over(place: Place):
    llm = CountingLLM(default_agent_reply=lambda name, n: f"{name} says {n}")
    store_a, a, _surface_a = await open_engine(place, llm, "console:main")
    store_b, b, surface_b = await open_engine(place, llm, "console:main")
    try:
        group = await store_a.groups.create_group("console:main", "main", GroupSettings(mode="tags"))
        await store_a.roster.add_agent(group.id, "planner", "plans", "You plan.")
        await a.start()
        await b.start()
        assert a.owns(group.id) and not b.owns(group.id)
        holder = await b.claim(group)
        assert holder is not None and "pid" in holder
        for i in range(6):  # both processes take messages; only the owner runs them
            engine = a if i % 2 else b
            await engine.post_user_message(await store_a.groups.get_group(group.id), author_name="you", user_id="you",
                                           text=f"@planner question {i}")
            await asyncio.sleep(0.03)
        await eventually(lambda: all_answered(store_a, group.id), "every question answered")
        assert surface_b.published == [m for m in surface_b.published if m.author_type == "user"]
        await a.close()  # the owner stops: the other takes the group over
        await eventually(lambda: b.owns(group.id), "the other process taking the group over")
        await b.post_user_message(await store_b.groups.get_group(group.id), author_name="you", user_id="you",
                                  text="@planner still there?")
        await b.wait_idle(group.id, bound())
        assert [m.text for m in surface_b.published if m.author_type == "agent"][-1].startswith("planner says")
        assert llm.most["planner"] == 1
        # every question answered exactly once: each call posted one reply, over a later snapshot than the last
        runs = await place.fetch("SELECT snapshot_seq, status, posted_seq FROM runs ORDER BY id")
        assert [status for _, status, _ in runs] == ["posted"] * len(runs)
        snapshots = [snapshot for snapshot, _, _ in runs]
        assert snapshots == sorted(set(snapshots)) and len(runs) == llm.participant_order.count("planner")
        replies = [m.text for m in await store_b.thread.messages(group.id) if m.author_type == "agent"]
        assert len(replies) == len(set(replies)) == len(runs)
    finally:
        for engine in (a, b):
            await engine.close()
        await store_a.close()
        await store_b.close()


async def all_answered(store: SqlStore, group_id: int) -> bool:
    group = await store.groups.get_group(group_id)
    agents = await store.roster.list_agents(group_id)
    return bool(group.latest_seq) and all(x.delivered_through == group.latest_seq for x in agents) and not \
        await store.posting.unconfirmed_messages(group_id)


async def test_a_console_never_touches_a_discord_groups_rows(place: Place):
    bot_store = await place.open()
    discord = await bot_store.groups.create_group("discord:42", "#general", GroupSettings(mode="tags"))
    agent = await bot_store.roster.add_agent(discord.id, "planner", "plans", "You plan.")
    await bot_store.thread.append_user_message(discord.id, NewMessage("user", "Alice", "@planner hi",
                                                                      author_user_id="1"))
    run = await bot_store.runs.start_run(discord.id, agent.id, "group", 1)  # the bot is mid-run
    await bot_store.runs.finish_run((await bot_store.runs.start_run(discord.id, agent.id, "group", 1)).id,
                                    RunResult("posted", reply=NewMessage("agent", "planner", "not shown yet",
                                                                              author_agent_id=agent.id)), cap=5)
    llm = ScriptedLLM(default_agent_reply=lambda name, n: "console reply")
    store, console, surface = await open_engine(place, llm, "console:main")
    try:
        group = await store.groups.create_group("console:main", "main", GroupSettings())
        await console.start()
        assert console.owns(group.id) and not console.owns(discord.id)
        console.wake(discord.id)  # even asked directly
        await quiet_period()  # it had its chance (a wake that does nothing leaves nothing to wait for)
        assert (await store.runs.get_run(run.id)).status == "running"  # the bot's run is not marked interrupted
        assert [m.confirmed for m in await store.thread.messages(discord.id)] == [True, False]  # not shown here
        assert surface.published == [] and llm.history == []
        assert not console.owns(discord.id)
    finally:
        await console.close()
        await store.close()
        await bot_store.close()


@pytest.mark.parametrize("reply, expected", [
    (Reply(status=401, error_body={"error": {"message": "Incorrect API key sk-secret-abc echo token=xyz"}}),
     "planner could not answer: the model service refused the request (HTTP 401). Its turn was skipped."),
    (Reply(status=500, headers={"x-should-retry": "false"}, error_body={"error": {"message": "db at 10.0.0.5 down"}}),
     "planner could not answer: the model service failed (HTTP 500). Its turn was skipped."),
    (Reply("late", delay=5), "planner could not answer: the model did not answer in time. Its turn was skipped."),
    (Reply(status=404, error_body={"error": {"message": "model 'llama3' not found, try pulling it first"}}),
     "planner could not answer: the model service refused the request (HTTP 404: model 'llama3' not found, try "
     "pulling it first). Its turn was skipped."),
    (Reply(status=400, error_body={"error": {"message": "key sk-secret-abc is bad for http://10.0.0.5:8000/v1/x; "
                                                        + "see the docs " * 20}}),
     "planner could not answer: the model service refused the request (HTTP 400: key *** is bad for <url> see the "
     "docs see the docs see the docs see the docs see the docs see the d…). Its turn was skipped."),
])
async def test_a_failure_notice_names_the_kind_of_failure_and_a_refusals_reason_never_the_server(harness, reply,
                                                                                                  expected):
    from bot.llm.openai_llm import OpenAILLM

    async with FakeOpenAI([reply]) as server:
        # a short timeout only where the case is the timeout: under load a refusal may take over a second
        llm = OpenAILLM(api_key="sk-secret-abc", base_url=server.base_url, default_model="m",
                        timeout=1 if reply.delay else 60, max_retries=0)
        try:
            async with harness.running(llm, mode="tags"):
                await harness.say("@planner go")
                await harness.idle()
                notice = (await harness.store.thread.messages(harness.group.id))[-1]
        finally:
            await llm.aclose()
    assert notice.author_type == "system" and notice.text == expected
    assert str(server.port) not in notice.text and "127.0.0.1" not in notice.text


class FixedIdSurface(RecordingSurface):
    """Answers every agent post with the same id (as if a read-back found another row's post),
    or, with `broken`, fails on rows with that text as a bug would."""

    broken: str | None = None

    async def publish(self, group, message, agent, *, resume=False, record):
        if message.text == self.broken:
            raise RuntimeError("a bug in the surface")
        self.published.append(message)
        if message.author_type == "agent":
            await record("same-id")


async def test_a_posted_id_another_row_holds_is_counted_as_shown_and_the_group_goes_on(harness):
    harness.surface = FixedIdSurface()
    async with harness.running(ScriptedLLM(agents={"planner": ["First.", "Second."]}), mode="tags"):
        await harness.say("@planner one")
        await harness.idle()
        await harness.say("@planner two")
        await harness.idle()
        rows = await harness.store.thread.messages(harness.group.id)
        assert [(r.text, r.confirmed, r.external_ids) for r in rows if r.author_type == "agent"] == [
            ("First.", True, ("same-id",)), ("Second.", True, ())]


async def test_a_row_that_keeps_failing_unexpectedly_is_skipped_so_the_rows_behind_it_go_out(harness):
    harness.surface = FixedIdSurface()
    harness.surface.broken = "First."
    async with harness.running(ScriptedLLM(agents={"planner": ["First.", "Second."]}), mode="tags"):
        await harness.say("@planner one")
        await harness.until_called(1)
        await harness.say("@planner two")
        await harness.idle()
        assert [m.text for m in harness.surface.published if m.author_type == "agent"] == ["Second."]
        assert all(r.confirmed for r in await harness.store.thread.messages(harness.group.id))
