"""A deleted message and the rolling summaries written from it (SPEC §1, issue 28 item 2): once a row is
deleted, the summaries that read it are not reused; the next prompt that needs one has it written
again from the tombstone, and no later request to the model holds the deleted text. An edit that
lands while an agent's delivery waits reaches that agent's run.

The real OpenAI adapter against the local OpenAI-compatible server, the real engine and store."""
from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any

import pytest

from bot.llm.openai_llm import OpenAILLM
from tests.engine.test_context_kept import SMALL, calls, prompt, script
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, ReplyLike
from tests.support import wait_event

SECRET = "the door code is 4471-SWORDFISH"
TASK = f"Plan a 3-day Tokyo trip for under $1,500 ({SECRET})"
LEAKY_NOTES = f"Notes: alice said {SECRET}; the plan is at 1,450 dollars."


@pytest.mark.parametrize("layout", ["seed", "shared"])
async def test_a_summary_written_from_a_deleted_row_is_written_again_without_it(harness, layout) -> None:
    replies = script(summary=[LEAKY_NOTES] * 200)
    async with FakeOpenAI(replies) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with harness.running(llm, **(SMALL | {"max_agent_turns": 10, "prompt_layout": layout})):
                await harness.say(TASK)
                await harness.idle(60)
                await harness.say("keep going: refine the plan")
                await harness.idle(60)
                before = await harness.fetch("SELECT through_seq, text FROM context_summaries ORDER BY through_seq")
                assert before and all(SECRET in row[1] for row in before)  # the summaries hold the task's text
                asked = len(server.requests)
                summaries_before = len(calls(server, "summary"))

                tombstone = await harness.store.thread.delete_message(harness.group.id, 1)
                assert tombstone is not None and tombstone.text == ""
                replies.set_summary([])  # from now on the notes say nothing of the code
                await harness.say("one more pass, please")
                await harness.idle(60)

                after = server.requests[asked:]
                assert after, "no model call after the deletion"
                leaked = [prompt(r) for r in after if SECRET in prompt(r) or "SWORDFISH" in prompt(r)]
                assert not leaked, leaked[0][:400]
                rewritten = calls(server, "summary")[summaries_before:]
                assert rewritten, "no summary was written again"
                # every summary that read row 1 was set aside: the first one written again starts afresh
                assert ("<notes>\n(none yet" if layout == "seed" else "There are no notes yet.") in rewritten[0]
                assert "[alice] (deleted)" in rewritten[0]
                stored = await harness.fetch("SELECT through_seq, text FROM context_summaries ORDER BY through_seq")
                assert not [row for row in stored if "SWORDFISH" in row[1]]
                planner = calls(server, "planner")[-1]
                assert re.search(r"\[alice\] \(deleted\)", planner), planner[:600]
                raw = await harness.fetch("SELECT text, attachments FROM messages WHERE seq = 1")
                assert raw == [("", "[]")]
        finally:
            await llm.aclose()


@pytest.mark.parametrize("hand", ["edit", "delete"])
async def test_an_edit_or_deletion_while_an_agents_delivery_waits_reaches_that_run(harness, hand) -> None:
    """Two agents tagged: the first one's call is held while the second's delivery waits its turn; the
    person edits (or deletes) the message, the episode's task, meanwhile. The held run read the text as
    it was; the waiting one, which starts after, reads the new text marked (edited), or "(deleted)"
    and none of the text. (On main the episode's task was kept in memory as first read: the waiting run
    still saw "3 days", or the deleted text.)"""
    script = GroupChatScript(default_agent_reply=lambda name, n: f"{name} answer {n}")
    started, release = asyncio.Event(), asyncio.Event()
    first: list[str] = []

    async def respond(body: dict[str, Any]) -> ReplyLike:
        kind, name = GroupChatScript.classify(body)
        if kind == "participant" and name is not None and not first:
            first.append(name)
            started.set()
            await release.wait()
        reply = script(body)
        return await reply if inspect.isawaitable(reply) else reply

    async with FakeOpenAI(respond) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with harness.running(llm, mode="tags"):
                await harness.say("@planner @budget plan Tokyo for 3 days")
                await wait_event(started, "the first agent's call")
                if hand == "edit":
                    changed = await harness.store.thread.edit_message(harness.group.id, 1,
                                                                      "@planner @budget plan Tokyo for 5 days")
                else:
                    changed = await harness.store.thread.delete_message(harness.group.id, 1)
                assert changed is not None
                release.set()
                await harness.idle(60)
                prompts = {str(GroupChatScript.classify(r)[1]): prompt(r) for r in server.requests
                           if GroupChatScript.classify(r)[0] == "participant"}
                assert sorted(prompts) == ["budget", "planner"]
                held, waited = first[0], ({"budget", "planner"} - set(first)).pop()
                assert "plan Tokyo for 3 days" in prompts[held]  # its prompt was made before the change
                assert "3 days" not in prompts[waited]
                if hand == "edit":
                    assert "<task>@planner @budget plan Tokyo for 5 days (edited)</task>" in prompts[waited]
                else:
                    assert "<task>(deleted)</task>" in prompts[waited] and "plan Tokyo" not in prompts[waited]
                assert [m.author_name for m in await harness.store.thread.messages(harness.group.id)] == \
                    ["alice", held, waited]  # a change answers nobody: no third reply
        finally:
            await llm.aclose()
