"""What a prompt keeps when its window moves (issue 22): the open tasks a follow-up continues, and a
rolling summary in place of the cut rows; a failing summary call never fails a turn.

The real OpenAI adapter against the local OpenAI-compatible server, the real engine and store."""
from __future__ import annotations

import contextlib
import itertools
import random
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.core.features.spending import tally, usage_card
from bot.core.rules.prompts import PARTICIPANT_PROMPT
from bot.llm.openai_llm import OpenAILLM
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, RecordedRequest, Reply, message_text

TASK = "Plan a 3-day Tokyo trip for under $1,500"
FOLLOW_UP = "keep going: refine the plan"
SUMMARY_OPENING = "You keep the running notes of a group chat"
PLACES = ("Asakusa", "Shibuya", "Ueno", "Ginza", "Shinjuku", "Odaiba", "Yanaka", "Nakameguro", "Akihabara")
SMALL = {"context_budget": 1200, "selector_budget": 300, "max_agent_turns": 6}


def reply(name: str, n: int) -> str:
    """About 100 tokens, different for every reply (alike replies would stop the chat as stalled)."""
    rng = random.Random(f"{name}/{n}")
    return f"{name} #{n}: " + " ".join(f"{rng.choice(PLACES)} {rng.randint(2, 900) * 10} yen," for _ in range(18))


def script(summary: list[Any] | None = None) -> GroupChatScript:
    """The selector rotates planner -> budget -> local among those it is offered."""
    turn = itertools.count()

    def select(body: dict[str, Any]) -> str:
        text = "\n".join(message_text(m) for m in body["messages"])
        match = re.search(r"pick the one participant from ([^\n]*)", text)
        assert match is not None
        offered = [n.strip() for n in match.group(1).split(",")]
        while True:
            name = ("planner", "budget", "local")[next(turn) % 3]
            if name in offered:
                return name

    return GroupChatScript(select, default_agent_reply=reply, summary=summary or [],
                           other_default="Notes: the plan is at 1,450 dollars so far.")


def prompt(request: RecordedRequest) -> str:
    return "\n".join(message_text(m) for m in request["messages"])


def calls(server: FakeOpenAI, what: str) -> list[str]:
    """The prompts of one caller ('selector', 'summary' or an agent's name), in order."""
    out = []
    for request in server.requests:
        text = prompt(request)
        kind = ("selector" if "Choose who speaks next." in text else "summary" if SUMMARY_OPENING in text
                else next((n for n in ("planner", "budget", "local") if f"You are {n}, the " in text), "other"))
        if kind == what:
            out.append(text)
    return out


@contextlib.asynccontextmanager
async def two_episodes(replies: GroupChatScript, harness: Any, turns: int = 6, layout: str = "seed",
                       **settings: Any) -> AsyncIterator[FakeOpenAI]:
    """The task, `turns` agent turns (the cap), the follow-up, as many more; the store is open meanwhile."""
    async with FakeOpenAI(replies) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with harness.running(llm, **(SMALL | {"max_agent_turns": turns, "prompt_layout": layout} | settings)):
                await harness.say(TASK)
                await harness.idle(30)
                await harness.say(FOLLOW_UP)
                await harness.idle(30)
                yield server
        finally:
            await llm.aclose()


async def test_the_task_and_the_follow_up_stay_in_every_prompt_once_the_thread_is_trimmed(harness):
    async with two_episodes(script(), harness) as server:
        agents = [m for m in await harness.store.thread.messages(harness.group.id) if m.author_type == "agent"]
        assert len(agents) == 12  # two episodes of 6 (the cap)
        for caller in ("selector", "planner", "budget", "local"):
            last = calls(server, caller)[-1]
            assert TASK in last and FOLLOW_UP in last, caller
        last = calls(server, "planner")[-1]
        assert (f"<task>Earlier requests this continues (oldest first):\n[alice] {TASK}\n"
                f"Current request:\n[alice] {FOLLOW_UP}</task>") in last
        assert "[planner] planner #1:" not in last  # the thread was trimmed: the first replies are cut
        selector = calls(server, "selector")[-1]
        assert f"<conversation>\n[alice] {TASK}\n[alice] {FOLLOW_UP}\n[roundtable] (" in selector  # pulled up, in order


async def test_a_rolling_summary_stands_where_the_cut_rows_were_made_once_per_move_and_billed(harness):
    async with two_episodes(script(), harness, turns=10) as server:
        summaries = calls(server, "summary")
        stored = await harness.fetch("SELECT through_seq, after_seq, calls, prompt_tokens, text FROM context_summaries"
                                     " ORDER BY through_seq")
        assert len(summaries) >= 2 and len(stored) == len(summaries)  # one call per window move, none repeated
        assert all(row[2] == 1 and row[3] > 0 for row in stored)
        assert [row[1] for row in stored[1:]] == [row[0] for row in stored[:-1]]  # each rolls the one before
        assert "<notes>\nNotes: the plan is at 1,450 dollars so far.\n</notes>" in summaries[-1]  # it extends the last
        assert "<notes>\n(none yet" in summaries[0]
        for agent in ("planner", "budget", "local"):
            last = calls(server, agent)[-1]
            found = re.search(r"<conversation>\[roundtable\] \(summary of the (\d+) earlier messages\) Notes: the plan "
                              r"is at 1,450 dollars so far\.</conversation>", last)
            assert found is not None, agent  # where the cut rows were: the thread's start, before the kept rows
            assert "earlier messages omitted" not in last
            omitted = int(found.group(1))
            assert any(row[0] == omitted + 2 for row in stored)  # the two tasks are in <task>, not counted
        selector = calls(server, "selector")[-1]
        assert "summary of the" not in selector  # a 300-token window has no room for one
        spends = {s.who: s for s in await harness.store.spending.spending(harness.group.id, 0)}
        assert spends["rolling summary"].kind == "summary" and spends["rolling summary"].calls == len(summaries)
        line_of = {line.who: line for line in tally(await harness.store.spending.spending(harness.group.id, 0), {})}
        assert line_of["rolling summary"].usage.prompt_tokens == sum(row[3] for row in stored)
        card = await usage_card(harness.store, harness.group, {}, 7)
        assert not isinstance(card, str) and "rolling summary" in [f.name for f in card.fields]
        group = await harness.store.groups.get_group(harness.group.id)
        seen = await harness.verbs().record.context_seen(group, group.latest_seq)
        assert seen.endswith("were trimmed to fit context_budget 1200; a rolling summary stands for them"), seen


async def test_a_failing_summary_call_leaves_the_cut_rows_out_and_never_fails_a_turn(harness) -> None:
    failure = Reply(status=500, headers={"x-should-retry": "false"}, error_body={"error": {"message": "down"}})
    async with two_episodes(script(summary=[failure] * 50), harness) as server:
        rows = await harness.store.thread.messages(harness.group.id)
        assert len([m for m in rows if m.author_type == "agent"]) == 12  # every turn was posted
        assert not [m for m in rows if "could not answer" in m.text]
        assert await harness.fetch("SELECT COUNT(*) FROM context_summaries") == [(0,)]
        failed = calls(server, "summary")
        starts = {re.search(r"\((\d+) earlier messages omitted\)", p).group(1)  # type: ignore[union-attr]
                  for agent in ("planner", "budget", "local") for p in calls(server, agent)
                  if "earlier messages omitted" in p}
        assert failed and len(failed) == len(starts)  # tried once per window, not once per turn
        last = calls(server, "planner")[-1]
        assert "earlier messages omitted" in last and TASK in last and FOLLOW_UP in last


def shared_part(request: RecordedRequest) -> str:
    """What a shared-layout request sends before its caller's own part: the header and the thread window."""
    system, user = (message_text(m) for m in request["messages"][:2])
    return system + "\0" + user.split("\n</conversation>")[0]


def caller(request: RecordedRequest) -> str:
    text = prompt(request)
    return ("selector" if "Choose who speaks next." in text else "summary" if SUMMARY_OPENING in text
            else next((n for n in ("planner", "budget", "local") if f"You are {n}, the " in text), "other"))


async def test_under_the_shared_layout_every_caller_sends_the_same_bytes_first_with_one_cache_key(harness):
    """Issue 31: the selector, each agent and the summary writer open with the same header and thread
    window, each caller's own part last; a call extends the one before it (whoever made it) until the
    window moves, and it moves for the whole group at once; one prompt_cache_key for the group."""
    # (the selector's own window, read while the thread is too short to be cached, is as large as the group's)
    async with two_episodes(script(), harness, turns=10, layout="shared", context_budget=2000,
                            selector_budget=2000) as server:
        requests = [r for r in server.requests if "messages" in r]
        assert {caller(r) for r in requests} == {"selector", "planner", "budget", "local", "summary"}
        assert {r.get("prompt_cache_key") for r in requests} == {f"roundtable-{harness.group.id}"}
        for r in requests:
            assert [m["role"] for m in r["messages"][:2]] == ["system", "user"], caller(r)
            assert re.match(r"<task>.*</task>\n\n<conversation>\n", message_text(r["messages"][1]), re.DOTALL)
        extended = moved = 0
        for previous, current in itertools.pairwise(requests):
            before, now = shared_part(previous), shared_part(current)
            first = [p.split("<conversation>\n")[1].split("\n")[0] for p in (before, now)]
            if now.startswith(before):
                extended += 1
            elif before.split("<conversation>")[0] == now.split("<conversation>")[0]:  # (a new episode: a new task)
                moved += 1  # only where the window moved; a summary call reads the window the prompts read
                assert first[0] != first[1] and caller(current) != "summary", (caller(current), now)
        assert extended > 4 * moved
        summaries = [i for i, r in enumerate(requests) if caller(r) == "summary"]
        assert summaries
        for i in summaries:  # the next call (the selector's) reads the moved window: after it, every caller does
            starts = {shared_part(r).split("<conversation>\n")[1].split("\n")[0] for r in requests[i + 1:i + 4]}
            assert len(starts) == 1 and starts != {shared_part(requests[i]).split("<conversation>\n")[1].split("\n")[0]}


@pytest.mark.parametrize("layout", ["seed", "shared"])
async def test_every_prompt_still_says_who_the_agent_is_its_role_the_others_and_the_eligible_names(harness, layout):
    """The quality guard (issue 31): under either layout each agent's last prompt names it, its role and the
    others and holds every sentence of seed 000's Participant instructions, the selector's lists the names it
    may pick, and every caller's last prompt holds the task and the follow-up."""
    sentences = re.split(r"(?<=\.)\s+", " ".join(PARTICIPANT_PROMPT.split("</conversation>\n\n", 1)[1].split()))
    async with two_episodes(script(), harness, turns=10, layout=layout) as server:
        roles = {a.name: a.role for a in await harness.store.roster.list_agents(harness.group.id)}
        for name, role in roles.items():
            last = calls(server, name)[-1]
            assert f"You are {name}, the {role} in a group chat" in last, (layout, name)
            assert all(sentence in " ".join(last.split()) for sentence in sentences), (layout, name)
            if layout == "shared":  # its own part (who it is, the others, "Write your next message.") comes last
                assert re.search(r"The other participants are: [^\n]*\.\n\nWrite your next message\.$", last), name
            others = re.search(r"The other participants are: ([^\n]*)\.", last)
            assert others is not None and set(roles) - {name} <= set(others.group(1).split(", ")), (layout, name)
            assert TASK in last and FOLLOW_UP in last, (layout, name)
        offers = [re.search(r"pick the one participant from ([^\n]*)", p) for p in calls(server, "selector")]
        assert all(o is not None and set(o.group(1).split(", ")) <= set(roles) for o in offers), layout
        assert [o.group(1) for o in offers[1:4] if o] == ["budget, local", "planner, local", "planner, budget"]
        assert TASK in calls(server, "selector")[-1] and FOLLOW_UP in calls(server, "selector")[-1]
