"""A reply shown while it is written (the group's `stream` setting), through the engine: what the
surface's draft is shown, when it stops, what becomes of provisional messages a run leaves, and
that usage, cost, why and the exports do not depend on streaming."""
from __future__ import annotations

import json
from pathlib import Path

from bot.core.errors import LLMUnavailable
from bot.core.record.export import write_export
from bot.core.rules.stop import strip_terminate
from bot.llm.openai_llm import OpenAILLM
from bot.llm.tokens import make_token_counter
from tests.engine.conftest import Harness
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply
from tests.fakes.scripted_llm import ScriptedLLM
from tests.fakes.surface import RecordingSurface

TRICKY = ("planner: Here is the plan for Tokyo.\nDay 1: Asakusa and <@42> will love it.\n"
          "budget: that is my line\nmore TERMINATE")


class OrderedSurface(RecordingSurface):
    """Notes each draft's state when its row is published: it must have stopped by then."""

    def __init__(self) -> None:
        super().__init__()
        self.streams = True
        self.states_at_publish: list[str] = []

    async def publish(self, group, message, agent, *, resume=False, record):
        if message.author_type == "agent":
            self.states_at_publish += [d.state for d in self.drafts if d.run_id == message.source_run_id]
        await super().publish(group, message, agent, resume=resume, record=record)


async def test_the_draft_shows_only_what_the_committed_reply_shows_and_stops_before_it_is_published(harness):
    harness.surface = OrderedSurface()
    llm = ScriptedLLM(agents={"planner": [TRICKY, "Second: done."]})
    async with harness.running(llm, mode="tags"):
        await harness.say("@planner plan Tokyo")
        await harness.idle()
        await harness.say("@planner again")
        await harness.idle()
    rows = [m for m in harness.surface.published if m.author_type == "agent"]
    assert [strip_terminate(r.text) for r in rows] == [
        "Here is the plan for Tokyo.\nDay 1: Asakusa and <@42> will love it.", "Second: done."]
    first, second = harness.surface.drafts
    assert first.shown and first.shown[-1] == "Here is the plan for Tokyo.\nDay 1: Asakusa and"
    for shown in first.shown:
        assert rows[0].text.startswith(shown) and "<@" not in shown and "budget" not in shown
    assert second.shown[-1] == "Second: done" and all(not s.endswith(".") for s in second.shown)
    assert harness.surface.states_at_publish == ["stopped", "stopped"]
    assert llm.streamed == 2


async def test_a_streamed_reply_opening_with_another_participants_label_is_shown_and_committed(harness):
    # The label at the start is an address: the draft shows it as it grows, the committed reply keeps it.
    harness.surface = OrderedSurface()
    llm = ScriptedLLM(agents={"planner": ["budget: Kamakura adds rail costs.\nOtherwise fine.\nalice: ok TERMINATE"]})
    async with harness.running(llm, mode="tags"):
        await harness.say("@planner plan Tokyo")
        await harness.idle()
    rows = [m for m in harness.surface.published if m.author_type == "agent"]
    assert [r.text for r in rows] == ["budget: Kamakura adds rail costs.\nOtherwise fine."]
    (draft,) = harness.surface.drafts
    assert draft.shown and draft.shown[-1] == rows[0].text
    assert all(rows[0].text.startswith(shown) for shown in draft.shown)
    assert harness.surface.episodes[-1].status == "terminated"  # cut before its TERMINATE, which still counts


async def test_stream_off_is_not_streamed_and_memory_runs_are(harness):
    harness.surface.streams = True
    llm = ScriptedLLM(agents={"planner": ["Whole."]}, default_agent_reply=lambda name, n: "Also whole.")
    async with harness.running(llm, mode="tags", stream=False):
        await harness.say("@planner go")
        await harness.idle()
        await harness.store.groups.update_group(harness.group.id,
                                                settings=harness.group.settings.with_changes(stream=True))
        budget = await harness.store.roster.find_agent(harness.group.id, "budget")
        assert budget is not None
        await harness.store.roster.update_agent(budget.id, memory=True)
        await harness.say("@budget go")
        await harness.idle()
    # stream off: none; a memory run (tools) streams its answer and its reminder's (issue 29)
    assert llm.streamed == 2 and len(harness.surface.drafts) == 1
    assert [m.text for m in harness.surface.published if m.author_type == "agent"] == ["Whole.", "Also whole."]


async def test_a_run_that_posts_nothing_takes_its_draft_back(harness):
    harness.surface.streams = True
    llm = ScriptedLLM(agents={"planner": [LLMUnavailable("server error: HTTP 503"), "TERMINATE"]})
    async with harness.running(llm, mode="tags"):
        await harness.say("@planner go")
        await harness.idle()
        await harness.say("@planner again")
        await harness.idle()
    assert [d.state for d in harness.surface.drafts] == ["discarded", "discarded"]
    assert [m.author_type for m in harness.surface.published] == ["user", "system", "user"]


async def test_an_interrupted_runs_provisional_messages_go_to_the_agents_next_run_or_are_taken_back(harness):
    harness.surface.streams = True
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} reply {n}.")
    async with harness.running(llm, mode="tags"):
        store, group_id = harness.store, harness.group.id
        planner = await store.roster.find_agent(group_id, "planner")
        budget = await store.roster.find_agent(group_id, "budget")
        assert planner is not None and budget is not None
        await harness.say("@budget and @planner, earlier")  # (the runs that died mid-stream)
        await harness.idle()
        for agent, text in ((planner, "Half a rep"), (budget, "Half of mine")):
            run = await store.runs.start_run(group_id, agent.id, "group", 1)
            part = await store.drafts.add_draft(group_id, agent.id, run.id, 0, agent.name, text)
            await store.drafts.draft_posted(part.id, f"msg-{agent.name}")
        await store.runs.interrupt_running_runs(group_id)
        await harness.say("@planner again")
        await harness.idle()
    planner_draft = harness.surface.drafts[-1]
    assert planner_draft.agent == "planner" and [p.external_id for p in planner_draft.parts] == ["msg-planner"]
    assert [p.external_id for p in harness.surface.removed] == ["msg-budget"]  # budget had nothing to answer
    assert await harness.fetch("SELECT COUNT(*) FROM drafts") == [(0,)]


async def run_conversation(where: Path, server: FakeOpenAI, stream: bool) -> tuple[Harness, OpenAILLM]:
    harness = Harness(where)
    harness.surface.streams = True
    llm = OpenAILLM(api_key="sk-test", base_url=server.base_url, default_model="gpt-4o-mini", timeout=5,
                    counter=make_token_counter())
    async with harness.running(llm, mode="selector", stream=stream):  # type: ignore[arg-type]
        await harness.say("Plan a day in Tokyo")
        await harness.idle()
        await harness.say("@budget and the cost?")
        await harness.idle()
    return harness, llm


async def test_usage_cost_why_and_exports_are_the_same_streamed_or_not(tmp_path):
    def script() -> GroupChatScript:
        return GroupChatScript(selector=["planner", "TERMINATE"], agents={
            "planner": [Reply(text="Day 1: Asakusa, then Ueno. TERMINATE", usage="omit")],
            "budget": ["About 80 dollars a day."]})

    exports = {}
    for stream in (True, False):
        async with FakeOpenAI(script()) as server:
            harness, llm = await run_conversation(tmp_path / f"s{stream}.db", server, stream)
            await llm.aclose()
            streamed = [bool(r.get("stream")) for r in server.requests
                        if GroupChatScript.classify(r)[0] == "participant"]
            assert streamed == [stream, stream]  # (the selector's calls are never streamed)
            assert not any(r.get("stream") for r in server.requests if GroupChatScript.classify(r)[0] == "selector")
        async with harness.running(ScriptedLLM()):
            store, group = harness.store, harness.group
            runs = await harness.fetch("SELECT prompt_tokens, completion_tokens, cached_tokens, estimated, status,"
                                       " model FROM runs ORDER BY id")
            usage = await store.spending.usage_since(group.id, 0)
            why = [await store.routing.get_decision(group.id, seq) for seq in range(1, 6)]
            pieces: list[str] = []
            await write_export(store, group, "json", pieces.append, now=0.0)
            export = json.loads("".join(pieces))
            assert export["group"]["settings"].pop("stream") is stream  # the only difference
        exports[stream] = (runs, usage, [(d.source, d.agent_names, d.usage) if d else None for d in why],
                           _without_times(export))
    assert exports[True] == exports[False]
    runs = exports[True][0]
    assert runs[0][3] == 1 and runs[1][3] == 0  # the planner's usage estimated (none sent), the budget's not


def _without_times(data: object) -> object:
    """An export without the moments it was made and things happened."""
    if isinstance(data, dict):
        return {k: _without_times(v) for k, v in data.items()
                if not any(word in k for word in ("_at", "time", "exported", "created", "started", "ended"))}
    if isinstance(data, list):
        return [_without_times(v) for v in data]
    return data
