"""Agents' tools in group runs (issue 29, SPEC §6b): the real openai client against FakeOpenAI (which
streams tool-call deltas), the real engine and a real database; the tools are an in-process source
whose calls the test holds on events and counts.

The "never twice" tests close the engine while a call runs (or after its result was journaled) and
open it again on the same database: the run resumes from its journal."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema

from bot.core.features.tools import MAX_CALLS_PER_ANSWER, UNKNOWN, ToolRegistry, too_many
from bot.core.models import ToolOutput, ToolSpec
from bot.core.ports import ToolContext
from bot.core.record.export import write_export
from bot.core.record.replay import episode_report, replay_message, side_by_side
from bot.core.rules.secrets import SECRETS
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
from tests.support import eventually

SECRET = "sk-live-tool-secret-0a1b2c3d4e5f6a7b"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "export-schema.json").read_text())
ADD = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


class Counter:
    """A tool source named `counter`: `add` (not idempotent), `get` (read-only), `leak` (returns a
    secret), `big` (a long result), `slow` (never answers), `broken` (raises). `hold` keeps the
    next calls of `add`/`get` waiting until `release` is set."""

    name = "counter"

    def __init__(self) -> None:
        self.value = 0
        self.calls: dict[str, int] = {}
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.hold = False

    def tools(self) -> list[ToolSpec]:
        return [ToolSpec("add", "Add n to the counter", ADD),
                ToolSpec("get", "Read the counter", read_only=True),
                ToolSpec("leak", "Show the configuration"),
                ToolSpec("big", "A long listing"),
                ToolSpec("slow", "Never answers", timeout=0.2),
                ToolSpec("broken", "Always fails")]

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        self.calls[tool] = self.calls.get(tool, 0) + 1
        self.entered.set()
        if self.hold and tool in ("add", "get"):
            await self.release.wait()
        if tool == "add":
            self.value += int(arguments["n"])  # type: ignore[call-overload]
            return ToolOutput(f"counter is {self.value}")
        if tool == "get":
            return ToolOutput(f"counter is {self.value}")
        if tool == "leak":
            return ToolOutput(f"api_key={SECRET}")
        if tool == "big":
            return ToolOutput("y" * 50_000)
        if tool == "slow":
            await asyncio.Event().wait()
        raise RuntimeError(f"the database at {SECRET} is down")


def participant_calls(srv: FakeOpenAI, name: str = "planner") -> list[RecordedRequest]:
    return [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", name)]


@contextlib.asynccontextmanager
async def running(harness: Any, srv: FakeOpenAI, counter: Counter, **settings: Any) -> AsyncIterator[Any]:
    harness.engine_options["tools"] = ToolRegistry([counter])
    llm = OpenAILLM(api_key="sk-test", base_url=srv.base_url, default_model="fake-model", timeout=10,
                    max_retries=0, counter=make_token_counter())
    async with llm, harness.running(llm, mode="tags", **settings) as h:
        yield h


async def grant(harness: Any, *patterns: str) -> None:
    agent = await harness.store.roster.find_agent(harness.group.id, "planner")
    await harness.store.tools.grant_tools(agent.id, list(patterns))


async def journal(harness: Any) -> list[tuple[Any, ...]]:
    return await harness.fetch("SELECT tool, status, arguments, result FROM tool_calls ORDER BY id")


async def test_no_tool_until_granted_then_the_loop_streams_and_runs_them(harness):
    SECRETS.register(SECRET)
    harness.surface.streams = True
    counter = Counter()
    script = GroupChatScript(agents={"planner": [
        "No tools yet.",
        Reply(text="Counting.", tool_calls=[tool_call("counter__add", n=2), tool_call("counter__leak"),
                                            tool_call("counter__big"), tool_call("counter__slow"),
                                            tool_call("counter__broken"), tool_call("counter__add", arguments="{x"),
                                            tool_call("shell__run", cmd="rm -rf /")]),
        "The counter is 2."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, counter, stream=True) as h:
        await h.say("@planner count")
        await h.idle()
        await grant(h, "counter.*")
        await h.say("@planner count again")
        await h.idle(30)
        rows = await journal(h)
        thread = await h.thread()
    first, second, third = participant_calls(srv)
    assert "tools" not in first and first["stream"] is True
    assert [t["function"]["name"] for t in second["tools"]] == [
        "counter__add", "counter__big", "counter__broken", "counter__get", "counter__leak", "counter__slow"]
    assert second["stream"] is True and third["tools"] == second["tools"]
    results = {m["tool_call_id"]: m["content"] for m in third["messages"] if m["role"] == "tool"}
    assert len(results) == 7
    add, leak, big, slow, broken, bad, ungranted = results.values()
    assert add == "counter is 2" and counter.calls["add"] == 1
    assert leak == "api_key=***" and SECRET not in json.dumps(third)
    assert big.startswith("y" * 20_000) and big.endswith("only the first 20,000 are shown]")
    assert slow == "error: counter.slow did not answer within 0.2 s."
    assert broken.startswith("error: counter.broken failed (RuntimeError:") and SECRET not in broken
    assert bad.startswith("error: the arguments must be a JSON object")
    assert ungranted.startswith("error: there is no tool named 'shell__run'")
    assert thread[-1] == "[planner] The counter is 2."  # the text of the step before is not the reply
    assert [r[:2] for r in rows] == [(t, "done") for t in (
        "counter__add", "counter__leak", "counter__big", "counter__slow", "counter__broken", "counter__add",
        "shell__run")]
    assert SECRET not in repr(rows)
    shown = [d.shown for d in harness.surface.drafts]
    assert shown[1][0] == "Counting", shown  # the tool step's text was streamed, then the next step's
    assert any(s.endswith("\n\nThe") for s in shown[1]), shown
    assert shown[1][-1].startswith("🔧 counter.add · n=2 … ✓ "), shown  # then a line per call
    lines = shown[1][-1]
    assert "\n🔧 counter.leak … ✓ " in lines and "🔧 counter.slow … ✗ counter.slow did not answer" in lines
    assert shown[1][-1].endswith("\n\nThe counter is 2") and SECRET not in repr(shown)


async def test_the_steps_are_bounded_and_a_last_call_without_tools_answers(harness):
    counter = Counter()
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__get")])] * 8 + ["Gave up."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, counter) as h:
        await grant(h, "counter.get")
        await h.say("@planner read it")
        await h.idle(30)
        assert (await h.thread())[-1] == "[planner] Gave up."
    calls = participant_calls(srv)
    assert len(calls) == 9 and all("tools" in c for c in calls[:8]) and "tools" not in calls[8]
    assert counter.calls == {"get": 8}
    assert calls[8]["messages"][-1]["content"].startswith("You have used all your tool steps.")


async def crashed_mid_call(harness: Any, srv: FakeOpenAI, counter: Counter, tool: str) -> None:
    """Run the engine until `tool` runs, then close it (a restart) while the call is held."""
    counter.hold = True
    async with running(harness, srv, counter) as h:
        await grant(h, "counter.*")
        await h.say("@planner count")
        await asyncio.wait_for(counter.entered.wait(), 30)
        assert [r[:2] for r in await journal(h)] == [(tool, "running")]
    counter.hold = False


async def test_a_call_cut_by_a_restart_is_not_repeated_and_the_model_is_told(harness):
    counter = Counter()
    script = GroupChatScript(agents={"planner": [Reply(text="Adding.", tool_calls=[tool_call("counter__add", n=5)]),
                                                 "I could not tell whether it was added."]})
    async with FakeOpenAI(script) as srv:
        await crashed_mid_call(harness, srv, counter, "counter__add")
        async with running(harness, srv, counter) as h:  # the same database, started again
            await h.idle(30)
            thread = await h.thread()
            rows = await journal(h)
            (call_id,) = [r[0] for r in await h.fetch("SELECT call_id FROM tool_calls")]
    assert counter.calls == {"add": 1}  # never twice
    _, resumed = participant_calls(srv)
    assert call_id.startswith("call_fake")  # the id the model gave the call, kept
    assert resumed["messages"][-2] == {"role": "assistant", "content": "Adding.", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "counter__add", "arguments": '{"n": 5}'}}]}
    assert resumed["messages"][-1] == {"role": "tool", "tool_call_id": call_id, "content": UNKNOWN}
    told = [t for t in thread if "was cut by a restart" in t]
    assert told == ["[roundtable] planner's call of counter.add was cut by a restart: its outcome is unknown and it "
                    "was not repeated."]
    assert thread[-1] == "[planner] I could not tell whether it was added."
    assert [r[:2] for r in rows] == [("counter__add", "unknown")]


async def test_a_read_only_call_cut_by_a_restart_runs_again(harness):
    counter = Counter()
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__get")]), "It is 0."]})
    async with FakeOpenAI(script) as srv:
        await crashed_mid_call(harness, srv, counter, "counter__get")
        async with running(harness, srv, counter) as h:
            await h.idle(30)
            assert (await h.thread())[-1] == "[planner] It is 0."
            assert [r[:2] for r in await journal(h)] == [("counter__get", "done")]
    assert counter.calls == {"get": 2}
    resumed = participant_calls(srv)[-1]
    assert resumed["messages"][-1]["content"] == "counter is 0"


async def test_a_result_journaled_before_a_restart_is_reused(harness):
    counter = Counter()
    reached, never = asyncio.Event(), asyncio.Event()
    replies = [Reply(tool_calls=[tool_call("counter__add", n=7)])]

    async def planner(body: dict[str, Any]) -> Reply | str:
        if replies:
            return replies.pop()
        if not reached.is_set():  # the call after the tool's result: held until the engine closes
            reached.set()
            await never.wait()
        return "Added 7."

    script = GroupChatScript(agents={"planner": []}, default_agent_reply=None)
    async with FakeOpenAI(lambda body: planner(body) if GroupChatScript.classify(body)[0] == "participant"
                          else script(body)) as srv:
        async with running(harness, srv, counter) as h:
            await grant(h, "counter.add")
            await h.say("@planner add 7")
            await asyncio.wait_for(reached.wait(), 30)
        async with running(harness, srv, counter) as h:
            await h.idle(30)
            assert (await h.thread())[-1] == "[planner] Added 7."
            assert [r[:2] for r in await journal(h)] == [("counter__add", "done")]
    assert counter.calls == {"add": 1} and counter.value == 7
    resumed = participant_calls(srv)[-1]
    assert resumed["messages"][-1]["content"] == "counter is 7"


async def test_history_search_finds_what_the_window_dropped(harness):
    """An agent granted history_search and history_read looks back past its context window: the
    needle is in no prompt, yet the tools find and read it; a deleted row shows as (deleted), a
    secret is masked; the rows are the group's own, bounded."""
    SECRETS.register(SECRET)
    filler = " ".join(["the weather in the mountains stays cold and windy through the week"] * 4)
    script = GroupChatScript(agents={"planner": [
        Reply(tool_calls=[tool_call("history_search", query="ZEBRA_code"), tool_call("history_read", from_seq=1,
                                                                                       to_seq=3)]),
        "The code word was zebra."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, Counter(), context_budget=500) as h:
        agents = {a.name: a for a in await h.store.roster.list_agents(h.group.id)}
        for agent in agents.values():  # the thread is written while nobody answers
            await h.store.roster.update_agent(agent.id, enabled=False)
        await h.say(f"the code word is zebra_code_42, the key {SECRET}")
        await h.say("a message someone deletes: zebra_code_gone")
        await h.say("zebra 100% literal")
        await h.store.thread.delete_message(h.group.id, 2)
        for i in range(40):
            await h.say(f"note {i}: {filler}")
        await h.idle()
        await h.store.roster.update_agent(agents["planner"].id, enabled=True)
        await grant(h, "history_search", "history_read")
        await h.say("@planner what was the code word?")
        await h.idle(30)
    first, second = participant_calls(srv)
    assert "zebra_code_42" not in json.dumps(first["messages"])  # the window no longer holds it
    assert [t["function"]["name"] for t in first["tools"]] == ["history_read", "history_search"]
    found, read = (m["content"] for m in second["messages"] if m["role"] == "tool")
    assert found == "1 message(s) containing 'ZEBRA_code', newest first:\n#1 [alice] the code word is zebra_code_42, " \
                    "the key ***"
    assert read == ("#1 [alice] the code word is zebra_code_42, the key ***\n#2 [alice] (deleted)\n"
                    "#3 [alice] zebra 100% literal")
    assert SECRET not in json.dumps(second)


async def test_ask_and_a_schedule_use_the_agents_grants(harness):
    """SPEC §6b: direct runs (/ask) and schedules use the agent's grants: the direct run offers the
    granted tools, runs the call and answers with what it returned (journaled in the direct run);
    the scheduled run does the same in the group."""
    from bot.core.rules.schedule import When

    counter = Counter()
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("counter__get")]), "Still 5."]})
    script.set_direct("planner", [Reply(tool_calls=[tool_call("counter__add", n=5)]), "Added: the counter is 5."])
    harness.engine_options["clock"] = lambda: 1_800_000_000.0
    async with FakeOpenAI(script) as srv, running(harness, srv, counter) as h:
        await grant(h, "counter.*")
        planner = await h.store.roster.find_agent(h.group.id, "planner")
        answer = await h.engine.ask(h.group, planner, "add five", asker="alice")
        assert answer.text == "Added: the counter is 5." and counter.value == 5
        await h.store.schedules.add_schedule(planner.id, When(every_seconds=3600), "read the counter",
                                             next_run_at=1_800_000_000.0 - 1)
        await h.engine.scheduler.tick()
        await h.idle(30)
        rows = await journal(h)
        runs = await h.fetch("SELECT kind, status, calls FROM runs ORDER BY id")
        thread = await h.thread()
    direct = [r for r in srv.requests if GroupChatScript.classify(r) == ("direct", "planner")]
    scheduled = participant_calls(srv)
    assert [t["function"]["name"] for t in direct[0]["tools"]][:2] == ["counter__add", "counter__big"]
    assert [m["content"] for m in direct[1]["messages"] if m["role"] == "tool"] == ["counter is 5"]
    assert [t["function"]["name"] for t in scheduled[0]["tools"]][:2] == ["counter__add", "counter__big"]
    assert [m["content"] for m in scheduled[1]["messages"] if m["role"] == "tool"] == ["counter is 5"]
    assert [r[:2] for r in rows] == [("counter__add", "done"), ("counter__get", "done")]
    assert runs[0] == ("direct", "answered", 2)
    assert thread[-1] == "[planner] Still 5."


async def test_the_draft_shows_each_call_and_the_reply_keeps_a_compact_line(harness):
    """SPEC §6b "Visible": while the run uses tools its draft shows a line per call (running, then
    ✓ with its seconds or ✗ with why), then the reply's text; the published reply ends with a compact
    line of the calls (show_tools on), which the stored row (what later prompts read) does not hold;
    with show_tools off only the reply is published."""
    harness.surface.streams = True
    counter = Counter()
    counter.hold = True
    script = GroupChatScript(agents={"planner": [
        Reply(text="", tool_calls=[tool_call("counter__add", n=2), tool_call("counter__broken")]),
        "The counter is 2.",
        Reply(text="", tool_calls=[tool_call("counter__get")]),
        "Still 2."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, counter, stream=True) as h:
        await grant(h, "counter.*")
        await h.say("@planner count")
        await eventually(lambda: counter.entered.is_set(), "the call of counter.add to start")
        draft = harness.surface.drafts[-1]
        await eventually(lambda: draft.shown and draft.shown[-1] == "🔧 counter.add · n=2 …",
                         "the draft to show the running call")
        counter.release.set()
        await h.idle(30)
        published = [m.text for m in harness.surface.published if m.author_type == "agent"]
        thread = await h.thread()
        reply = [m for m in await h.store.thread.messages(h.group.id) if m.author_type == "agent"][-1]
        why = (await h.verbs().record.why(h.group, str(reply.seq))).lines()
        usage = {f.name: f.value for f in (await h.verbs().record.usage(h.group, 1)).fields}
        requests = list(srv.requests)
        group = await h.store.groups.get_group(h.group.id)
        await h.store.groups.update_group(group.id, settings=group.settings.with_changes(show_tools=False))
        await h.say("@planner again")
        await h.idle(30)
        published_off = [m.text for m in harness.surface.published if m.author_type == "agent"]
    last = draft.shown[-1]
    add, broken, text = last.split("\n", 2)
    assert re.fullmatch(r"🔧 counter\.add · n=2 … ✓ \d+\.\d s", add), last
    assert broken.startswith("🔧 counter.broken … ✗ counter.broken failed (RuntimeError:"), last
    assert text == "\nThe counter is 2", last  # (a closing "." may still become TERMINATE: held back)
    assert published == ["The counter is 2.\n\n🔧 counter.add ✓ · counter.broken ✗"]
    assert thread[-1] == "[planner] The counter is 2."  # the row (and so later prompts) holds the reply only
    assert published_off[-1] == "Still 2."
    assert why[why.index("  🔧 counter.add ✓: arguments: {\"n\": 2}"):][:2] == [
        "  🔧 counter.add ✓: arguments: {\"n\": 2}", "    result: counter is 2"], why
    broken_at = why.index("  🔧 counter.broken ✗: arguments: {}")
    assert why[broken_at + 1].startswith("    result: error: counter.broken failed") and SECRET not in repr(why)
    # usage counts every step: both model calls of the run, and the tokens of each
    steps = [r for r in requests if GroupChatScript.classify(r) == ("participant", "planner")]
    prompt = sum(rough_tokens("\n".join(message_text(m) for m in r["messages"])) for r in steps)
    assert len(steps) == 2 and usage["planner"].startswith(f"2 calls · {prompt:,} prompt / 0 cached / "), usage
    assert "counter.get" in harness.surface.drafts[-1].shown[-1]  # the draft shows the call all the same


async def test_the_exports_and_replay_show_each_call_with_its_arguments_and_result(harness):
    """SPEC §6b "Visible": the JSON export (version 3 and later) lists each run's calls, valid against its
    schema; HTML and Markdown show each under the reply it led to; `roundtable replay` of the reply
    lists them; no secret anywhere."""
    SECRETS.register(SECRET)
    counter = Counter()
    script = GroupChatScript(agents={"planner": [
        Reply(text="", tool_calls=[tool_call("counter__add", n=2), tool_call("counter__broken")]),
        "The counter is 2."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, counter) as h:
        await grant(h, "counter.*")
        await h.say("@planner count")
        await h.idle(30)
        outputs = {}
        for fmt in ("json", "html", "md"):
            out = io.StringIO()
            await write_export(h.store, h.group, fmt, out.write)
            outputs[fmt] = out.getvalue()
        reply = [m for m in await h.store.thread.messages(h.group.id) if m.author_type == "agent"][-1]
        replayed = await replay_message(h.store, h.llm, h.group, reply.seq, model=None)
    data = json.loads(outputs["json"])
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data["version"] == 4
    (run,) = [r for r in data["runs"] if r["tool_calls"]]
    add, broken = run["tool_calls"]
    assert (add["name"], add["model_name"], add["arguments"], add["status"], add["result"], add["error"]) == (
        "counter.add", "counter__add", '{"n": 2}', "done", "counter is 2", False)
    assert broken["name"] == "counter.broken" and broken["error"] and broken["result"].startswith("error:")
    assert add["started_at"] and add["finished_at"] and run["calls"] == 2
    html, md = outputs["html"], outputs["md"]
    assert '<details class="tool"><summary>🔧 counter.add ✓ ' in html
    assert "<pre>arguments: {&quot;n&quot;: 2}</pre><pre>result: counter is 2</pre>" in html
    assert "> 🔧 counter.add ✓ " in md and '· arguments `{"n": 2}` · result `counter is 2`' in md
    assert "> 🔧 counter.broken ✗ " in md
    lines = side_by_side(replayed, h.group)
    assert '  🔧 counter.add ✓ arguments: {"n": 2}' in lines and "    result: counter is 2" in lines, lines
    assert "(🔧 counter.add ✓ · counter.broken ✗)" in episode_report([replayed], 1)[1]
    assert SECRET not in repr(outputs) + repr(lines)


async def test_an_answer_with_50_calls_runs_only_the_first_ten(harness):
    """An answer asking for 50 calls at once (streamed, as tool-call deltas) runs the first
    MAX_CALLS_PER_ANSWER; each other call is journaled with an error result the model reads and never
    runs; the turn goes on to the reply."""
    harness.surface.streams = True
    counter = Counter()
    script = GroupChatScript(agents={"planner": [
        Reply(text="Counting.", tool_calls=[tool_call("counter__add", n=1) for _ in range(50)]),
        "Ten were added."]})
    async with FakeOpenAI(script) as srv, running(harness, srv, counter, stream=True) as h:
        await grant(h, "counter.*")
        await h.say("@planner add fifty")
        await h.idle(30)
        rows = await journal(h)
        thread = await h.thread()
        published = [m.text for m in harness.surface.published if m.author_type == "agent"]
    assert counter.calls == {"add": MAX_CALLS_PER_ANSWER} and counter.value == MAX_CALLS_PER_ANSWER
    _, second = participant_calls(srv)
    results = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert len(results) == 50  # every call of the answer is answered (the API needs one result per call)
    assert results[:MAX_CALLS_PER_ANSWER] == [f"counter is {n}" for n in range(1, MAX_CALLS_PER_ANSWER + 1)]
    assert results[MAX_CALLS_PER_ANSWER:] == [too_many()] * (50 - MAX_CALLS_PER_ANSWER)
    assert too_many().startswith("error: too many calls in one answer; only the first 10 ran")
    assert [r[1] for r in rows] == ["done"] * 50
    assert thread[-1] == "[planner] Ten were added."
    assert published == ["Ten were added.\n\n🔧 counter.add ✓ ×10 · counter.add ✗ ×40"]  # a short line
