"""Worker mode (issue 29 item 8, SPEC §8): an agent with mode:worker runs privately and speaks only
through `group_post`. The real openai client against FakeOpenAI (tool-call deltas), the real engine
and a real database."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator
from typing import Any

from bot.core.features.worker import POSTED, waiting_for_a_person
from bot.core.record.export import write_export
from bot.llm.openai_llm import OpenAILLM
from bot.llm.tokens import make_token_counter
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call


@contextlib.asynccontextmanager
async def running(harness: Any, srv: FakeOpenAI, **settings: Any) -> AsyncIterator[Any]:
    llm = OpenAILLM(api_key="sk-test", base_url=srv.base_url, default_model="fake-model", timeout=10,
                    max_retries=0, counter=make_token_counter())
    async with llm, harness.running(llm, mode="tags", **settings) as h:
        planner = await h.store.roster.find_agent(h.group.id, "planner")
        await h.store.roster.update_agent(planner.id, mode="worker")
        yield h


def worker_calls(srv: FakeOpenAI) -> list[Any]:
    return [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner")]


def tool_results(request: Any) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_a_worker_speaks_only_through_group_post_and_keeps_its_final_text(harness):
    script = GroupChatScript(agents={"planner": [
        Reply(text="Thinking aloud.", tool_calls=[tool_call("group_post", content="Day 1: Asakusa.")]),
        Reply(tool_calls=[tool_call("group_post", content="Day 2: @budget please check the costs.")]),
        "Private notes: both days posted."]}, default_agent_reply="Costs look fine.")
    harness.surface.streams = True
    async with FakeOpenAI(script) as srv, running(harness, srv, stream=True) as h:
        await h.say("@planner plan two days")
        await h.idle(30)
        thread = await h.thread()
        runs = await h.fetch("SELECT status, private_text, posted_seq FROM runs ORDER BY id")
        posts = await h.fetch("SELECT source_run_id, author_name FROM messages WHERE author_type = 'agent'"
                              " ORDER BY seq")
        group = await h.store.groups.get_group(h.group.id)
        exports = {}
        for fmt in ("json", "html", "md"):
            out = io.StringIO()
            await write_export(h.store, group, fmt, out.write)
            exports[fmt] = out.getvalue()
        why = await h.verbs().record.why(group, "3")
    assert thread[:3] == ["[alice] @planner plan two days", "[planner] Day 1: Asakusa.",
                          "[planner] Day 2: @budget please check the costs."]
    assert thread[3] == "[budget] Costs look fine."  # the post's tag routed it, as a reply's would
    assert not any("Private notes" in t or "Thinking aloud" in t for t in thread)
    assert runs[0] == ("worked", "Private notes: both days posted.", None)
    assert posts[0] == posts[1] == (1, "planner")  # both posts belong to the worker's run
    first, _, third = worker_calls(srv)
    assert "group_post" in [t["function"]["name"] for t in first["tools"]]  # offered without a grant
    assert tool_results(third) == [POSTED, POSTED]
    assert all(d.agent != "planner" for d in harness.surface.drafts)  # a worker's run is not shown
    data = json.loads(exports["json"])
    worked = data["runs"][0]
    assert (worked["status"], worked["private_text"]) == ("worked", "Private notes: both days posted.")
    assert exports["md"].count("Private notes: both days posted.") == 1  # on the run's first post
    assert "<dd>Private notes: both days posted.</dd>" in exports["html"]
    assert [f.value for f in why.fields if f.name == "worker's final text (private)"] == [
        "Private notes: both days posted."]


async def test_a_post_over_the_cap_is_told_waiting_for_a_person(harness):
    script = GroupChatScript(agents={"planner": [
        Reply(tool_calls=[tool_call("group_post", content="One."), tool_call("group_post", content="Two.")]),
        "Done."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, max_agent_turns=1) as h:
        await h.say("@planner go")
        await h.idle(30)
        thread = await h.thread()
        runs = await h.fetch("SELECT status, private_text FROM runs ORDER BY id")
    assert [t for t in thread if t.startswith("[planner]")] == ["[planner] One."]
    assert tool_results(worker_calls(srv)[-1]) == [POSTED, waiting_for_a_person(1)]
    assert waiting_for_a_person(1).startswith("error: waiting for a person: the group has reached its cap of 1")
    assert runs == [("worked", "Done.")]


async def test_a_post_journaled_before_a_restart_is_not_posted_again(harness):
    reached, never = asyncio.Event(), asyncio.Event()
    replies = [Reply(tool_calls=[tool_call("group_post", content="Posted once.")])]

    async def planner(body: dict[str, Any]) -> Reply | str:
        if replies:
            return replies.pop()
        if not reached.is_set():  # the call after the post's result: held until the engine closes
            reached.set()
            await never.wait()
        return "Finished."

    script = GroupChatScript(agents={"planner": []}, default_agent_reply=None)
    async with FakeOpenAI(lambda body: planner(body) if GroupChatScript.classify(body)[0] == "participant"
                          else script(body)) as srv:
        async with running(harness, srv) as h:
            await h.say("@planner post it")
            await asyncio.wait_for(reached.wait(), 30)
        async with running(harness, srv) as h:
            await h.idle(30)
            thread = await h.thread()
            journal = await h.fetch("SELECT tool, status, result FROM tool_calls ORDER BY id")
            runs = await h.fetch("SELECT status, private_text FROM runs ORDER BY id")
    assert [t for t in thread if t.startswith("[planner]")] == ["[planner] Posted once."]
    assert journal == [("group_post", "done", POSTED)]
    assert runs[-1] == ("worked", "Finished.")
    assert tool_results(worker_calls(srv)[-1]) == [POSTED]

