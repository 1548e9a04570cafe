"""A reply to a message the window no longer holds brings it back, quoted (SPEC §6): the replied-to
block is the agent's last message (after the cached prefix), it counts against the context budget,
and a deleted row in it reads "(deleted)", never its text.

The real OpenAI adapter against the local OpenAI-compatible server, the real engine and store."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from bot.core.features.replies import HEADER
from bot.llm.openai_llm import OpenAILLM
from tests.engine.test_context_kept import reply
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, message_text

PLAN = "[PLAN-A] Day 1: Asakusa and the Senso-ji at dawn, then Ueno park"


def answer(name: str, n: int) -> str:
    return PLAN if n == 1 else reply(name, n)


@contextlib.asynccontextmanager
async def chat(harness: Any) -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(GroupChatScript(default_agent_reply=answer)) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with harness.running(llm, mode="tags", followup_window=0, context_budget=1200):
                yield server
        finally:
            await llm.aclose()


def planner_calls(server: FakeOpenAI) -> list[list[str]]:
    """The planner's requests, each as its messages' texts."""
    return [[message_text(m) for m in r["messages"]] for r in server.requests
            if GroupChatScript.classify(r) == ("participant", "planner")]


async def test_a_reply_to_a_message_out_of_the_window_is_quoted_at_the_end(harness):
    async with chat(harness) as server:
        await harness.say("@planner plan a 3-day Tokyo trip")
        await harness.idle(30)
        planned = (await harness.store.thread.messages(harness.group.id))[-1]
        assert planned.text == PLAN
        for n in range(8):  # push the window past the plan
            await harness.say(f"@planner another idea, number {n}?")
            await harness.idle(30)
        before = planner_calls(server)[-1]
        assert PLAN not in "\n".join(before) and not any(HEADER in m for m in before)

        group = await harness.store.groups.get_group(harness.group.id)
        await harness.engine.post_user_message(group, author_name="bob", user_id="bob",
                                               text="@planner make that 4 days", reply_to=planned.seq)
        await harness.idle(30)
        quoted = planner_calls(server)[-1]
        assert quoted[-1] == "\n".join([HEADER, 'bob\'s reply "@planner make that 4 days" answers:',
                                        f"> [planner] {PLAN}"])
        assert PLAN not in "\n".join(quoted[:-1])  # only in the block: the thread still leaves it out
        # the reply continued the plan's work: its task is in the prompt's <task> too
        assert "Earlier requests this continues (oldest first):\n[alice] @planner plan a 3-day Tokyo trip" in quoted[1]

        await harness.store.thread.delete_message(harness.group.id, planned.seq)  # an operator deletes the plan
        await harness.say("@planner and what about day 4?")
        await harness.idle(30)
        latest = planner_calls(server)[-1]
        assert latest[-1].endswith("> [planner] (deleted)") and HEADER in latest[-1]
        assert "PLAN-A" not in "\n".join(latest)

