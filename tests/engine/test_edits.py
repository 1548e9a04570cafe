"""A deleted message and the rolling summaries written from it (SPEC §1, issue 28 item 2): once a row is
deleted, the summaries that read it are not reused; the next prompt that needs one has it written
again from the tombstone, and no later request to the model holds the deleted text.

The real OpenAI adapter against the local OpenAI-compatible server, the real engine and store."""
from __future__ import annotations

import re

import pytest

from bot.adapters.openai_llm import OpenAILLM
from tests.engine.test_context_kept import SMALL, calls, prompt, script
from tests.fakes.openai_server import FakeOpenAI

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

                tombstone = await harness.store.delete_message(harness.group.id, 1)
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
