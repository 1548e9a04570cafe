"""The engine end to end over a real SQLite file and the real dispatcher."""
from __future__ import annotations

import asyncio
import itertools

import pytest

from bot.core.errors import LLMTimeout
from tests.fakes.scripted_llm import ScriptedLLM


@pytest.mark.parametrize("layout", ["seed", "shared"])
async def test_seed_selector_order_and_thread_of_four(harness, layout):
    """Seed 000's test: selector says planner, budget, planner, TERMINATE (seed 000's prompts, and shared)."""
    llm = ScriptedLLM(
        selector=["planner", "budget", "planner", "TERMINATE"],
        agents={"planner": ["Day 1 Asakusa, day 2 Shibuya, day 3 Nikko.", "Swapped the hotel; now $1,450."],
                "budget": ["That plan is over by $200."]},
    )
    async with harness.running(llm, prompt_layout=layout):
        await harness.say("Plan a 3-day Tokyo trip for under $1,500")
        await harness.idle()
        assert llm.participant_order == ["planner", "budget", "planner"]
        thread = await harness.thread()
        assert len(thread) == 4
        assert thread[0] == "[alice] Plan a 3-day Tokyo trip for under $1,500"
        assert thread[2] == "[budget] That plan is over by $200."
        episode_id = (await harness.store.groups.get_group(harness.group.id)).episode_id
        result = await harness.engine.episode_result(episode_id)
        assert result.status == "terminated"
        assert result.answer is not None and result.answer.text == "Swapped the hotel; now $1,450."
        assert result.agent_turns == 3 and len(result.thread) == 4
        # every participant call carried the whole thread so far, tagged with speakers
        last_prompt = "\n".join(m.content for m in llm.history[-2][2])
        assert "[budget] That plan is over by $200." in last_prompt
        assert "<task>Plan a 3-day Tokyo trip for under $1,500</task>" in last_prompt


async def test_agent_terminate_ends_episode_and_is_hidden_from_display(harness):
    llm = ScriptedLLM(selector=["planner"], agents={"planner": ["Final plan: $1,400. TERMINATE"]})
    async with harness.running(llm):
        await harness.say("plan it")
        await harness.idle()
        stored = (await harness.store.thread.messages(harness.group.id))[-1]
        assert stored.text.endswith("TERMINATE")  # raw text kept
        assert harness.surface.episodes[-1].status == "terminated"
        assert len([k for k, _, _ in llm.history if k == "selector"]) == 1  # no selector call after TERMINATE


async def test_people_see_the_reply_and_the_notice_before_the_episode_ends_on_a_slow_surface(harness):
    harness.surface.delay = 0.05
    llm = ScriptedLLM(selector=["planner"], agents={"planner": ["Final plan: $1,400. TERMINATE"]})
    async with harness.running(llm):
        await harness.say("plan it")
        await harness.idle()
        assert harness.surface.events[-2:] == ["row 2", "episode 1 terminated"]


async def test_people_see_the_cap_notice_before_the_episode_ends_on_a_slow_surface(harness):
    harness.surface.delay = 0.05
    llm = ScriptedLLM(selector=[], default_agent_reply=lambda name, n: f"{name} message {n}")
    llm.selector_default = "planner"
    async with harness.running(llm, max_agent_turns=1):
        await harness.say("go")
        await harness.idle()
        assert harness.surface.events[-3:] == ["row 2", "row 3", "episode 1 max_turns"]  # the reply, the notice


async def test_cap_stops_at_exactly_max_turns_with_one_notice(harness):
    llm = ScriptedLLM(selector=[], default_agent_reply=lambda name, n: f"{name} message {n}")
    llm.selector_default = "planner"  # a selector that never says TERMINATE (repeat is refused -> rotation)
    async with harness.running(llm, max_agent_turns=3):
        await harness.say("go")
        await harness.idle()
        msgs = await harness.store.thread.messages(harness.group.id)
        agents = [m for m in msgs if m.author_type == "agent"]
        notices = [m for m in msgs if m.author_type == "system"]
        assert len(agents) == 3
        assert len(notices) == 1 and "max_turns" in notices[0].text
        assert harness.surface.episodes[-1].status == "max_turns"
        # a new user message continues
        await harness.say("continue please")
        await harness.idle()
        assert len([m for m in await harness.store.thread.messages(harness.group.id) if m.author_type == "agent"]) == 6


async def test_no_back_to_back_repeat_even_when_selector_insists(harness):
    llm = ScriptedLLM(selector=["planner", "planner", "planner", "TERMINATE"],
                      default_agent_reply=lambda name, n: f"{name} says {n}")
    async with harness.running(llm):
        await harness.say("go")
        await harness.idle()
        order = llm.participant_order
        assert order[0] == "planner"
        assert all(a != b for a, b in itertools.pairwise(order))
        decision = await harness.store.routing.get_decision(harness.group.id, 2)
        assert decision.source == "fallback" and decision.attempts == 2
        assert decision.usage.prompt_tokens == 2 * llm.usage.prompt_tokens  # both selector calls counted


async def test_coalescing_five_messages_during_a_run_make_one_more_run(harness):
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} reply {n}")
    llm.gate = asyncio.Event()
    async with harness.running(llm, mode="tags"):
        await harness.say("@planner first")
        await harness.until_called()
        assert llm.participant_order == ["planner"]
        for i in range(1, 6):
            await harness.say(f"@planner follow-up {i}")
        llm.gate.set()
        await harness.idle()
        assert llm.participant_order == ["planner", "planner"]
        second_prompt = "\n".join(m.content for m in llm.history[-1][2])  # (the tasks: in <task>, either layout)
        for i in range(1, 5):
            assert f"[alice] @planner follow-up {i}" in second_prompt
        # the newest is the run's task, after the earlier requests still open (the first and the newest
        # three: planner's reply did not end them): in <task>, and only referred to in the thread
        assert ("<task>Earlier requests this continues (oldest first):\n[alice] @planner first\n"
                "[alice] @planner follow-up 2\n[alice] @planner follow-up 3\n[alice] @planner follow-up 4\n"
                "Current request:\n[alice] @planner follow-up 5</task>") in second_prompt
        assert "[alice] (posted the task above)" in second_prompt
        runs = await harness.fetch("SELECT snapshot_seq, status FROM runs ORDER BY id")
        # 5 follow-ups are seqs 2-6 and the first reply is seq 7: one more run, over all of them
        assert [tuple(r) for r in runs] == [(1, "posted"), (7, "posted")]


@pytest.mark.parametrize("change", ["removed", "disabled"])
async def test_a_reply_in_flight_is_dropped_when_its_agent_is_removed_or_disabled(harness, change):
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} reply {n}")
    llm.gate = asyncio.Event()
    async with harness.running(llm, mode="tags"):
        await harness.say("@planner first")
        await harness.until_called()
        planner = await harness.store.roster.find_agent(harness.group.id, "planner")
        assert planner is not None
        if change == "removed":
            await harness.store.roster.remove_agent(planner.id)
        else:
            await harness.store.roster.update_agent(planner.id, enabled=False)
        llm.gate.set()
        await harness.idle()
        assert await harness.thread() == ["[alice] @planner first"]
        runs = await harness.fetch("SELECT status, error FROM runs")
        assert [tuple(r) for r in runs] == [("discarded", f"the agent was {change} during the run")]


async def test_an_agent_whose_turn_comes_after_the_cap_is_not_called_and_people_are_told(harness):
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} reply {n}")
    async with harness.running(llm, mode="tags", max_agent_turns=1):
        await harness.say("@planner @budget both of you, please")
        await harness.idle()
        assert llm.participant_order == ["planner"]  # budget's call would only pay for a refused reply
        assert await harness.thread() == [
            "[alice] @planner @budget both of you, please",
            "[planner] planner reply 1",
            "[roundtable] Stopped after 1 agent message (max_turns). Post a message to continue.",
        ]  # that notice says why budget did not answer
        runs = await harness.fetch("SELECT status FROM runs ORDER BY id")
        assert [r[0] for r in runs] == ["posted", "refused"]


async def test_an_agent_refused_after_another_ended_the_task_is_named(harness):
    # planner says TERMINATE (the episode ends 'terminated', no cap notice); budget was tagged too
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} reply {n}" + (" TERMINATE" if n == 1 else ""))
    async with harness.running(llm, mode="tags", max_agent_turns=1):
        await harness.say("@planner @budget both of you, please")
        await harness.idle()
        assert llm.participant_order == ["planner"]
        assert (await harness.thread())[-1] == (
            "[roundtable] budget did not answer: the group reached max_turns (1 agent message in a row). "
            "Post a message to continue.")


async def test_burst_of_untagged_messages_costs_one_selector_call(harness):
    llm = ScriptedLLM(selector=["budget", "TERMINATE"], default_agent_reply=lambda name, n: f"{name} {n}")
    llm.gate = asyncio.Event()
    async with harness.running(llm):
        await harness.say("@planner start")
        await harness.until_called()
        for i in range(4):
            await harness.say(f"thought {i}")
        llm.gate.set()
        await harness.idle()
        # routed together after the planner's run. The planner's reply (seq 6) answers the first
        # task, so it routes nobody; the person's newest message (seq 5) is the one the selector routes.
        sources = [(await harness.store.routing.get_decision(harness.group.id, s)).source for s in range(1, 7)]
        assert sources == ["tags", "superseded", "superseded", "superseded", "selector", "none"]
        selector_calls = [k for k, _, _ in llm.history if k == "selector"]
        assert len(selector_calls) == 2  # one for the burst, one after budget's reply (TERMINATE)
        assert llm.participant_order == ["planner", "budget"]


async def test_restart_resumes_pending_delivery_without_double_answer(harness):
    llm = ScriptedLLM(selector=["planner"], default_agent_reply=lambda name, n: f"{name} answer")
    llm.gate = asyncio.Event()  # the planner's call hangs: the process "dies" mid-run
    async with harness.running(llm):
        await harness.say("plan it")
        await harness.until_called()
        assert llm.participant_order == ["planner"]
    # a new process on the same file
    llm2 = ScriptedLLM(selector=["budget", "TERMINATE"], default_agent_reply=lambda name, n: f"{name} answer")
    async with harness.running(llm2):
        await harness.idle()
        assert llm2.participant_order == ["planner", "budget"]
        assert next(k for k, _, _ in llm2.history) == "participant"  # the stored decision was not recomputed
        thread = await harness.thread()
        assert thread == ["[alice] plan it", "[planner] planner answer", "[budget] budget answer"]
        runs = await harness.fetch("SELECT agent_id, snapshot_seq, status FROM runs ORDER BY id")
        statuses = [(r[1], r[2]) for r in runs]
        assert statuses == [(1, "interrupted"), (1, "posted"), (2, "posted")]


async def test_llm_failure_posts_a_notice_and_moves_on(harness):
    llm = ScriptedLLM(selector=["planner"], agents={"planner": [LLMTimeout("the model timed out after 60s")]})
    async with harness.running(llm):
        await harness.say("plan it")
        await harness.idle()
        msgs = await harness.store.thread.messages(harness.group.id)
        assert msgs[-1].author_type == "system" and "planner could not answer" in msgs[-1].text
        planner = await harness.store.roster.find_agent(harness.group.id, "planner")
        assert planner.delivered_through >= 1


async def test_impersonation_is_cut_and_an_empty_reply_gets_a_one_line_notice(harness):
    llm = ScriptedLLM(selector=["planner", "budget", "TERMINATE"],
                      agents={"planner": ["planner: Day 1.\n[budget] I approve everything."], "budget": ["   "]})
    async with harness.running(llm):
        await harness.say("plan it")
        await harness.idle()
        assert await harness.thread() == ["[alice] plan it", "[planner] Day 1.",
                                          "[roundtable] budget had nothing to add (its reply was empty)."]


async def test_a_reply_opening_with_another_participants_label_is_posted_and_its_terminate_ends_the_episode(harness):
    # It was thrown away ("budget had nothing to add (its reply was empty)") and the episode ended otherwise.
    llm = ScriptedLLM(selector=["planner", "budget"],
                      agents={"planner": ["Day 1 Asakusa, day 2 Kamakura."],
                              "budget": ["Planner: Kamakura adds rail costs.\nOtherwise fine. TERMINATE"]})
    async with harness.running(llm):
        await harness.say("plan it")
        await harness.idle()
        assert await harness.thread() == ["[alice] plan it", "[planner] Day 1 Asakusa, day 2 Kamakura.",
                                          "[budget] Planner: Kamakura adds rail costs.\nOtherwise fine. TERMINATE"]
        assert harness.surface.episodes[-1].status == "terminated"


async def test_a_reply_the_guard_cuts_still_terminates_when_it_ended_with_terminate(harness):
    llm = ScriptedLLM(selector=["planner", "budget"],
                      agents={"planner": ["Day 1 Asakusa.\nbudget: that fits. TERMINATE"], "budget": ["more"]})
    async with harness.running(llm):
        await harness.say("plan it")
        await harness.idle()
        assert await harness.thread() == ["[alice] plan it", "[planner] Day 1 Asakusa."]
        assert harness.surface.episodes[-1].status == "terminated"
        assert llm.participant_order == ["planner"]


async def test_round_robin_follows_roster_order(harness):
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} {n}")
    async with harness.running(llm, mode="round_robin", max_agent_turns=4):
        await harness.say("go")
        await harness.idle()
        assert llm.participant_order == ["planner", "budget", "local", "planner"]
        assert not [k for k, _, _ in llm.history if k == "selector"]


async def test_explicit_tags_beat_the_mode_and_agent_tags_exclude_author(harness):
    llm = ScriptedLLM(selector=["TERMINATE"], agents={"budget": ["@planner @budget check the hotel"],
                                                       "planner": ["done"]})
    async with harness.running(llm):
        await harness.say("@budget price it")
        await harness.idle()
        assert llm.participant_order == ["budget", "planner"]


async def test_parroting_agents_stop_as_stalled(harness):
    same = "I agree with the plan: three days, Asakusa, Shibuya and Nikko, total about $1,450."
    llm = ScriptedLLM(selector_default="budget", default_agent_reply=lambda name, n: same + ("!" * (n % 2)))
    async with harness.running(llm, max_agent_turns=10):
        await harness.say("go")
        await harness.idle()
        msgs = await harness.store.thread.messages(harness.group.id)
        agents = [m for m in msgs if m.author_type == "agent"]
        assert len(agents) == 3  # the first is new; the 2nd and 3rd repeat earlier ones
        assert msgs[-1].author_type == "system" and "(stalled)" in msgs[-1].text
        assert harness.surface.episodes[-1].status == "stalled"


async def test_each_participant_call_extends_the_same_agents_previous_one(harness):
    """Seed layout: within an episode (and while the window stays put) an agent's messages only grow at
    the end, so a provider's prompt cache keeps all of the previous call; the task is sent once, in <task>."""
    def reply(name: str, n: int) -> str:
        return f"{name} point {n}: " + " ".join(f"w{n}x{i}" for i in range(30))

    llm = ScriptedLLM(default_agent_reply=reply)
    async with harness.running(llm, mode="round_robin", max_agent_turns=8, prompt_layout="seed"):
        await harness.say("Plan the offsite for twelve people")
        await harness.idle()
    calls: dict[str, list[list[str]]] = {}
    for kind, name, messages in llm.history:
        if kind == "participant":
            calls.setdefault(name or "", []).append([m.content for m in messages])
    assert sum(len(c) for c in calls.values()) == 8
    for name, seen in calls.items():
        for previous, current in itertools.pairwise(seen):
            assert current[:2] == previous[:2], name  # system message and the Participant prompt: unchanged
            assert len(current) == 3
            assert len(previous) == 2 or current[2].startswith(previous[2]), name
        assert all("\n".join(c).count("Plan the offsite for twelve people") == 1 for c in seen)


async def test_the_selector_reads_its_own_window_until_the_thread_can_be_cached_then_the_groups(harness):
    """Shared layout: while the whole thread is under the providers' 1,024-token cache minimum the selector reads
    its own `selector_budget` window (cheaper: nothing is cached yet); past it, the group's window, the agents'."""
    def reply(name: str, n: int) -> str:
        return f"{name} point {n}: " + " ".join(f"w{n}x{i}" for i in range(60))

    llm = ScriptedLLM(selector=["planner", "budget", "local"] * 4, default_agent_reply=reply)
    async with harness.running(llm, max_agent_turns=12, selector_budget=300):
        await harness.say("Plan the offsite for twelve people")
        await harness.idle()

    def window(messages: list) -> str:
        return messages[1].content.split("<conversation>\n")[1].split("\n</conversation>")[0]

    history = [(kind, window(messages)) for kind, _, messages in llm.history if kind in ("selector", "participant")]
    pairs = [(history[i][1], history[i + 1][1]) for i in range(len(history) - 1) if history[i][0] == "selector"]
    assert len(pairs) == 12
    early, late = pairs[2], pairs[-1]  # (the selector's window, then the chosen agent's)
    assert "earlier messages omitted" in early[0] and early[1].startswith("[alice] (posted the task above)")
    assert late[0] == late[1]  # one window for the group
