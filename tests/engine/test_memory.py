"""Agent memory in group runs: the real openai client against a scripted local server that speaks
tool calls (FakeOpenAI), the real engine and a real SQLite file."""
from __future__ import annotations

import contextlib
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bot.core.errors import UserFacingError
from bot.core.features.memory import MAX_TOOL_STEPS, REMINDER
from bot.core.models import Run
from bot.core.record.export import write_export
from bot.llm.openai_llm import OpenAILLM
from bot.llm.tokens import make_token_counter
from tests.fakes.openai_server import (
    FakeOpenAI,
    GroupChatScript,
    RecordedRequest,
    Reply,
    message_text,
    rough_tokens,
    tool_call,
)

NOTE = "Alice wants trains, not planes; budget $1,500."
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "export-schema.json").read_text())


def write(note: str = NOTE, text: str = "") -> Reply:
    return Reply(text=text, tool_calls=[tool_call("memory_write", note=note)])


@contextlib.asynccontextmanager
async def group(harness: Any, script: GroupChatScript, *, memory: bool = True, **settings: Any
                ) -> AsyncIterator[tuple[FakeOpenAI, Any]]:
    """The harness over a FakeOpenAI playing `script`; planner's memory on (through /agent edit's verb)."""
    async with FakeOpenAI(script) as srv:
        llm = OpenAILLM(api_key="sk-test", base_url=srv.base_url, default_model="fake-model", timeout=10,
                        max_retries=0, counter=make_token_counter())
        async with llm, harness.running(llm, mode="tags", **settings):
            if memory:
                answer = await harness.verbs().roster.edit_agent(harness.group, "planner", memory=True)
                assert answer == "Updated planner: memory is on."
            yield srv, harness


def planner_calls(srv: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner")]


async def runs_of(harness: Any) -> list[Run]:
    pages = [page async for page in harness.store.record.run_pages(harness.group.id)]
    return [run for page in pages for run in page]


async def planner_notes(harness: Any) -> list[str]:
    agent = await harness.store.roster.find_agent(harness.group.id, "planner")
    return [n.text for n in await harness.store.notes.notes(agent.id)]


def system_text(request: RecordedRequest) -> str:
    """The agent's system prompt as sent: under the shared layout (the default), the start of its own part,
    after the group's thread window; under the seed layout, the system message."""
    texts = [message_text(m) for m in request["messages"]]
    if len(texts) > 1 and "\n</conversation>\n\n" in texts[1] and "</roles>" in texts[0]:
        return texts[1].split("\n</conversation>\n\n", 1)[1].split("\n\nYou are ", 1)[0]
    return texts[0]


async def test_writes_on_the_first_step(harness):
    script = GroupChatScript(agents={"planner": [write(), "Day 1 by train to Kyoto."]})
    async with group(harness, script) as (srv, h):
        await h.say("@planner plan a trip")
        await h.idle()
        assert await h.thread() == ["[alice] @planner plan a trip", "[planner] Day 1 by train to Kyoto."]
        assert await planner_notes(h) == [NOTE]
        (run,) = await runs_of(h)
        assert run.status == "posted" and run.memory_skipped is False
    first, second = planner_calls(srv)
    assert [t["function"]["name"] for t in first["tools"]] == ["memory_write"]
    assert "tool_choice" not in first
    assert system_text(first).startswith("You plan trips.") and system_text(first).endswith(
        "<memory>\nMemory is on: you have no notes yet. Save what you want to remember with memory_write.\n</memory>")
    call_id = second["messages"][-2]["tool_calls"][0]["id"]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": call_id, "content": "Saved."}
    assert not any(REMINDER in message_text(m) for r in srv.requests for m in r["messages"])
    # the run's tokens are both calls' (the fake counts ~4 characters a token)
    assert run.usage.prompt_tokens == sum(prompt_tokens(r) for r in (first, second)) > prompt_tokens(second)


def prompt_tokens(request: RecordedRequest) -> int:
    return rough_tokens("\n".join(message_text(m) for m in request["messages"]))


async def test_writes_only_after_the_reminder(harness):
    script = GroupChatScript(agents={"planner": ["Day 1 by train to Kyoto.", write()]})
    async with group(harness, script) as (srv, h):
        await h.say("@planner plan a trip")
        await h.idle()
        assert await h.thread() == ["[alice] @planner plan a trip", "[planner] Day 1 by train to Kyoto."]
        assert await planner_notes(h) == [NOTE]
        (run,) = await runs_of(h)
        assert run.status == "posted" and run.memory_skipped is False
    first, reminded = planner_calls(srv)
    assert reminded["messages"][-2:] == [{"role": "assistant", "content": "Day 1 by train to Kyoto."},
                                         {"role": "user", "content": REMINDER}]
    assert reminded["tools"] == first["tools"]


async def test_never_writes_is_memory_skipped(harness):
    script = GroupChatScript(agents={"planner": ["Day 1 by train to Kyoto.", "Nothing to remember."]})
    async with group(harness, script) as (srv, h):
        await h.say("@planner plan a trip")
        await h.idle()
        assert await h.thread() == ["[alice] @planner plan a trip", "[planner] Day 1 by train to Kyoto."]
        assert await planner_notes(h) == []
        (run,) = await runs_of(h)
        assert run.status == "posted" and run.memory_skipped is True
        stored = (await h.store.record.runs_by_id([run.id]))[run.id]
        assert stored.memory_skipped is True
        out = io.StringIO()
        await write_export(h.store, h.group, "json", out.write)
        exported = json.loads(out.getvalue())
        jsonschema.Draft202012Validator(SCHEMA).validate(exported)
        assert [r["memory_skipped"] for r in exported["runs"]] == [True]
    assert len(planner_calls(srv)) == 2  # one reminder, one more step: no more


async def test_notes_appear_in_the_next_runs_system_prompt_and_clear_empties_them(harness):
    script = GroupChatScript(agents={"planner": [
        write(), "Day 1 by train.",  # run 1: writes
        write("Alice liked Kyoto."), "Day 2 in Nara.",  # run 2: sees the first note
        write("Start again."), "Fresh plan.",  # run 3, after clear: no notes
    ]})
    async with group(harness, script, brief="Answer in English.") as (srv, h):
        await h.say("@planner plan a trip")
        await h.idle()
        await h.say("@planner and day 2?")
        await h.idle()
        verbs = h.verbs()
        planner = await verbs.roster.agent(h.group, "planner")
        shown = await verbs.memory.show(planner)
        assert [f.value for f in shown.fields] == ["Alice liked Kyoto.", NOTE]  # newest first
        assert shown.description == "2 notes, newest first; memory is on."
        card = await verbs.roster.show_agent(h.group, "planner")
        assert ("memory", "on, 2 notes") in [(f.name, f.value) for f in card.fields]
        assert await verbs.memory.clear(planner) == "Cleared 2 notes of planner."
        assert await verbs.memory.clear(planner) == "planner had no notes to clear."
        assert await verbs.memory.show(planner) == "planner has no notes (memory is on)."
        await h.say("@planner start over")
        await h.idle()
        assert [r.memory_skipped for r in await runs_of(h)] == [False, False, False]
    calls = planner_calls(srv)
    second_run = system_text(calls[2])
    assert second_run.startswith("You plan trips.\n\n<memory>\n")  # its own part; the brief is the group's:
    assert message_text(calls[2]["messages"][0]).startswith("<brief>\nAnswer in English.\n</brief>")  # shared
    assert second_run.endswith(f"oldest first (save a new one with memory_write):\n- {NOTE}\n</memory>")
    assert "no notes yet" in system_text(calls[4])
    assert NOTE not in json.dumps(calls[4]["messages"][0])


async def test_memory_off_sends_no_tools_and_no_reminder(harness):
    script = GroupChatScript(agents={"planner": ["Day 1 by train."]})
    async with group(harness, script, memory=False) as (srv, h):
        await h.say("@planner plan a trip")
        await h.idle()
        (run,) = await runs_of(h)
        assert run.status == "posted" and run.memory_skipped is None
    (only,) = planner_calls(srv)
    assert "tools" not in only and "<memory>" not in system_text(only)


async def test_bad_tool_calls_get_error_results_and_the_steps_are_bounded(harness):
    bad = [Reply(tool_calls=[tool_call("web_search", q="trains")]),
           Reply(tool_calls=[tool_call("memory_write", note="")]),
           Reply(tool_calls=[tool_call("memory_write", arguments="{not json")]),
           Reply(tool_calls=[tool_call("memory_write", note="x" * 501)])]
    script = GroupChatScript(agents={"planner": [*bad, write(text="Noted.")]})
    async with group(harness, script) as (srv, h):
        await h.say("@planner plan a trip")
        await h.idle()
        (run,) = await runs_of(h)
        assert await planner_notes(h) == [NOTE]  # written in the reminder step
        # no text before the reminder: the reminder step's text is the reply
        assert await h.thread() == ["[alice] @planner plan a trip", "[planner] Noted."]
        assert run.memory_skipped is False
    calls = planner_calls(srv)
    assert len(calls) == MAX_TOOL_STEPS + 1
    results = [m["content"] for m in calls[MAX_TOOL_STEPS]["messages"] if m["role"] == "tool"]
    assert results[0] == "error: there is no tool named 'web_search'; the only tool is memory_write."
    assert results[1].startswith("error: the note is empty")
    assert results[2].startswith("error: the arguments must be a JSON object")
    assert results[3].startswith("error: the note is 501 characters long; the limit is 500.")
    assert calls[MAX_TOOL_STEPS]["messages"][-1] == {"role": "user", "content": REMINDER}


async def test_a_failed_reminder_step_keeps_the_reply(harness):
    script = GroupChatScript(agents={"planner": ["Day 1 by train.", Reply(status=500, headers={
        "x-should-retry": "false"})]})
    async with group(harness, script) as (_srv, h):
        await h.say("@planner plan a trip")
        await h.idle()
        assert await h.thread() == ["[alice] @planner plan a trip", "[planner] Day 1 by train."]
        (run,) = await runs_of(h)
        assert run.status == "posted" and run.memory_skipped is True


@pytest.mark.parametrize("script, reason", [
    (GroupChatScript(takes_tools=False), "Memory stays off for planner: model fake-model answered without the tool "
                                         "call it was asked for, so it does not take tool calls; memory needs them."),
    ([Reply(status=400, error_body={"error": {"message": "'tools' is not supported by this server"}})],
     "Memory stays off for planner: model fake-model does not take tool calls (the endpoint said: 'tools' is not "
     "supported by this server); memory needs them."),
])
async def test_memory_cannot_be_turned_on_without_tool_calls(harness, script, reason):
    async with group(harness, script, memory=False) as (_srv, h):
        with pytest.raises(UserFacingError) as info:
            await h.verbs().roster.edit_agent(h.group, "planner", memory=True)
        assert str(info.value) == reason
        assert (await h.store.roster.find_agent(h.group.id, "planner")).memory is False  # nothing changed


async def test_an_agent_with_memory_on_keeps_its_model_when_the_new_one_takes_no_tool_calls(harness):
    script = GroupChatScript()
    async with group(harness, script) as (srv, h):  # memory turned on: fake-model takes tool calls
        script.takes_tools = False
        verbs = h.verbs()
        with pytest.raises(UserFacingError) as info:
            await verbs.roster.edit_agent(h.group, "planner", model="tiny-model")
        assert str(info.value) == ("planner keeps its model: memory is on for it, and model tiny-model answered "
                                   "without the tool call it was asked for, so it does not take tool calls; "
                                   "memory needs them.")
        agent = await h.store.roster.find_agent(h.group.id, "planner")
        assert (agent.model, agent.memory) == (None, True)
        assert await verbs.roster.edit_agent(h.group, "planner", memory=False) == "Updated planner: memory is off."
        assert await verbs.roster.edit_agent(h.group, "planner", model="tiny-model") == "Updated planner."
        assert await verbs.roster.edit_agent(h.group, "planner", memory=False) == "Memory is already off for planner."
    probes = [r["model"] for r in srv.requests if "tool_choice" in r]
    assert probes == ["fake-model", "tiny-model"]  # turning memory off, or a model change with it off, asks nothing


async def test_usage_counts_every_model_call_and_its_tokens(harness) -> None:
    # A run counted as one call: the reminder's call was left out of the count (its tokens were in), and the
    # memory check made when memory was turned on was not counted at all.
    script = GroupChatScript(agents={"planner": ["Day 1 by train to Kyoto.", write()]})
    async with group(harness, script) as (srv, h):
        await h.say("@planner plan a trip")
        await h.idle()
        card = await h.verbs().record.usage(h.group, 1)
    assert [GroupChatScript.classify(r)[0] for r in srv.requests] == ["probe", "participant", "participant"]
    prompt = sum(rough_tokens("\n".join(message_text(m) for m in r["messages"])) for r in srv.requests)
    completion = rough_tokens("Day 1 by train to Kyoto.")
    shown = {f.name: f.value for f in card.fields}
    assert shown["planner"] == (f"3 calls · {prompt:,} prompt / 0 cached / {completion:,} completion tokens · "
                                "no price known for fake-model (3 calls)")
    assert shown["total"] == shown["planner"]


async def test_the_memory_check_through_a_named_provider_is_counted_there(harness):
    from bot.llm.providers import Providers

    script = GroupChatScript()
    async with FakeOpenAI(script) as default, FakeOpenAI(GroupChatScript()) as local:
        def client(name: str, url: str) -> OpenAILLM:
            return OpenAILLM(api_key="sk-test", base_url=url, default_model="fake-model", timeout=10, max_retries=0,
                             counter=make_token_counter(), provider=name)
        llm = Providers({"default": client("default", default.base_url), "local": client("local", local.base_url)},
                        default_model="fake-model")
        async with harness.running(llm, mode="tags"):
            verbs = harness.verbs()
            await verbs.roster.edit_agent(harness.group, "planner", model="local/small-model")
            said = await verbs.roster.edit_agent(harness.group, "planner", memory=True)
            assert said == "Updated planner: memory is on."
            spent = await harness.store.spending.spending(harness.group.id, 0)
    assert [r["model"] for r in local.requests] == ["small-model"] and default.requests == []
    (check,) = spent
    prompt = rough_tokens(message_text(local.requests[0]["messages"][0]))
    assert (check.who, check.kind, check.model, check.provider, check.calls, check.usage.prompt_tokens) == (
        "planner", "agent", "small-model", "local", 1, prompt)
