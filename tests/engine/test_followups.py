"""A follow-up to a finished episode continues its work (SPEC §6, issue 28 item 5): within the group's
followup_window however the episode ended (TERMINATE, tags mode's quiet end), or as a reply to a message
of that work; not with followup_window 0, nor after /roundtable newtask.

The real OpenAI adapter against the local OpenAI-compatible server, the real engine and store: every
request of the follow-up's episode (agents and selector) is read as the server received it."""
from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.llm.openai_llm import OpenAILLM
from tests.engine.test_context_kept import SUMMARY_OPENING, prompt, reply
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, message_text

TASK = "[TASK1] Plan a 3-day Tokyo trip for under $1,500"
FOLLOW_UP = "now make it 4 days"
EARLIER = f"<task>Earlier requests this continues (oldest first):\n[alice] {TASK}\nCurrent request:\n[alice] "
FIRST_EPISODE = 6  # agent replies before one ends with TERMINATE


def script() -> GroupChatScript:
    """The selector alternates planner and budget; the sixth agent reply ends with TERMINATE."""
    turn, replies = itertools.count(), itertools.count(1)

    def select(body: dict[str, Any]) -> str:
        text = "\n".join(message_text(m) for m in body["messages"])
        match = re.search(r"pick the one participant from ([^\n]*)", text)
        assert match is not None
        offered = [n.strip() for n in match.group(1).split(",")]
        while True:
            name = ("planner", "budget")[next(turn) % 2]
            if name in offered:
                return name

    def answer(name: str, n: int) -> str:
        return reply(name, n) + (" TERMINATE" if next(replies) == FIRST_EPISODE else "")

    return GroupChatScript(select, default_agent_reply=answer, other_default="Notes: the plan so far.")


@contextlib.asynccontextmanager
async def chat(harness: Any, **settings: object) -> AsyncIterator[FakeOpenAI]:
    replies = script()
    async with FakeOpenAI(replies) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with harness.running(llm, **({"context_budget": 1200, "selector_budget": 300,
                                                "max_agent_turns": 8} | settings)):
                roster = await harness.store.roster.list_agents(harness.group.id)
                for agent in roster:
                    if agent.name not in ("planner", "budget"):
                        await harness.store.roster.remove_agent(agent.id)
                yield server
        finally:
            await llm.aclose()


def requests_since(server: FakeOpenAI, start: int) -> list[tuple[str, str]]:
    """(kind, prompt) of each agent and selector request from `start` on (summaries left out)."""
    out = []
    for request in server.requests[start:]:
        kind, name = GroupChatScript.classify(request)
        text = prompt(request)
        if kind in ("selector", "participant") and SUMMARY_OPENING not in text:
            out.append((name or kind, text))
    return out


@pytest.mark.parametrize("how, continued", [
    ("within the window", True),
    ("followup_window 0", False),
    ("after newtask", False),
    ("a reply, followup_window 0", True),
])
async def test_a_follow_up_to_a_terminated_episode_keeps_its_task_in_every_request(harness, how, continued):
    window = 0 if "0" in how else 120
    async with chat(harness, followup_window=window) as server:
        await harness.say(TASK)
        await harness.idle(30)
        first = await harness.engine.episode_result((await harness.store.groups.get_group(harness.group.id)).episode_id)
        assert first.status == "terminated" and first.agent_turns == FIRST_EPISODE
        if how == "after newtask":
            said = await harness.verbs().groups.newtask(harness.group)
            assert said.startswith("The next message starts a new")
        start = len(server.requests)
        if how.startswith("a reply"):
            replied = [m for m in await harness.store.thread.messages(harness.group.id) if m.author_type == "agent"][2]
            group = await harness.store.groups.get_group(harness.group.id)
            await harness.engine.post_user_message(group, author_name="alice", user_id="alice", text=FOLLOW_UP,
                                                   reply_to=replied.seq)
        else:
            await harness.say(FOLLOW_UP)
        await harness.idle(30)
        requests = requests_since(server, start)
        assert {kind for kind, _ in requests} == {"selector", "planner", "budget"}
        assert len(requests) >= 10  # a whole episode: agents and selector up to the cap
        if continued:
            missing = [kind for kind, text in requests if "[TASK1]" not in text]
            assert missing == []  # none of them held it on main: the chain stopped at a terminated episode
            assert all(EARLIER + FOLLOW_UP in text for kind, text in requests if kind != "selector")
        else:
            assert not any(EARLIER in text for _, text in requests)
            assert any("[TASK1]" not in text for _, text in requests)  # trimmed away, and not carried


async def test_in_tags_mode_a_follow_up_keeps_the_quiet_episodes_task(harness):
    # In tags mode every episode ends quiet: nothing ever chained there.
    async with chat(harness, mode="tags") as server:
        await harness.say(f"@planner @budget {TASK}")
        await harness.idle(30)
        first = await harness.engine.episode_result((await harness.store.groups.get_group(harness.group.id)).episode_id)
        assert first.status == "quiet"
        start = len(server.requests)
        await harness.say(f"@planner @budget {FOLLOW_UP}")
        await harness.idle(30)
        requests = requests_since(server, start)
        assert sorted(kind for kind, _ in requests) == ["budget", "planner"]
        earlier = f"<task>Earlier requests this continues (oldest first):\n[alice] @planner @budget {TASK}\n"
        assert all(earlier in text for _, text in requests)
