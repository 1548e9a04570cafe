"""Regenerate reply (SPEC §8, §12; Roundtable issue 30 item 2): the group's newest agent message is
written again by the same agent over the same snapshot, as a new run; the row's text is replaced and
shown again (its parts edited), every earlier text kept as a version, later prompts reading the new
text. Refused, with the reason, on anything else, while a run is active, or for someone not allowed.

The real OpenAI adapter against the local OpenAI-compatible server, the real engine and store (both
databases through `place`)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema
import pytest

from bot.core.errors import Busy, Forbidden, InvalidInput, UserFacingError
from bot.core.models import RunResult
from bot.core.record.export import write_export
from bot.core.rules.secrets import SECRETS
from bot.llm.openai_llm import OpenAILLM
from tests.engine.test_context_kept import prompt
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, RecordedRequest
from tests.support import eventually

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "export-schema.json").read_text())
FIRST, SECOND = "Day 1: temples in Asakusa.", "Day 1: sushi at Tsukiji, then temples."
TASK = "Plan day 1 in Tokyo"


def planner_calls(server: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in server.requests if "You are planner, the " in prompt(r)]


def chat() -> GroupChatScript:
    return GroupChatScript(selector=["planner", "TERMINATE", "budget", "TERMINATE"],
                           agents={"planner": [FIRST, SECOND], "budget": ["That fits the budget."]})


async def test_regenerate_runs_again_on_the_same_snapshot_and_keeps_the_old_text(harness) -> None:
    async with FakeOpenAI(chat()) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with harness.running(llm):
                await harness.say(TASK)
                await harness.idle()
                group = await harness.store.groups.get_group(harness.group.id)
                original = await harness.store.thread.get_message(group.id, 2)
                assert (original.author_name, original.text) == ("planner", FIRST)

                done = await harness.engine.regenerate(group, None, user_id="alice", operator=False)

                assert (done.message.seq, done.message.text) == (2, SECOND)
                assert done.run.kind == "regenerate" and done.run.status == "posted"
                assert done.run.id != original.source_run_id and done.run.replaces_seq == 2
                first, again = planner_calls(server)
                assert again["messages"] == first["messages"]  # the same prompt inputs: the same snapshot
                assert await harness.thread() == [f"[alice] {TASK}", f"[planner] {SECOND}"]  # no new row
                (version,) = await harness.store.thread.message_versions(group.id)
                assert (version.seq, version.version, version.text, version.run_id) == (
                    2, 1, FIRST, original.source_run_id)
                await eventually(lambda: [m.text for m in harness.surface.published if m.seq == 2] == [FIRST, SECOND],
                                 "the row shown again with its new text")
                await harness.idle()
                shown = await harness.store.thread.get_message(group.id, 2)
                assert shown.confirmed and shown.regenerated_at is not None and shown.source_run_id == done.run.id
                runs = await harness.fetch("SELECT kind, status, prompt_tokens > 0 FROM runs ORDER BY id")
                assert runs == [("group", "posted", True), ("regenerate", "posted", True)]  # counted as any run
                cursors = await harness.fetch("SELECT name, delivered_through FROM agents ORDER BY id")
                assert dict(cursors)["planner"] == 2  # nothing new to deliver

                await harness.say("And the budget?")
                await harness.idle()
                (budget,) = [r for r in server.requests if "You are budget, the " in prompt(r)]
                assert SECOND in prompt(budget) and FIRST not in prompt(budget)  # later prompts: the new text
                await exported_with_versions(harness, original.source_run_id, done.run.id)
        finally:
            await llm.aclose()


async def exported_with_versions(harness, first_run: int | None, run: int) -> None:
    """Every export keeps the earlier text: JSON (valid against docs/export-schema.json) in `versions`,
    HTML folded under the message, Markdown on a line of its own."""
    group = await harness.store.groups.get_group(harness.group.id)
    out: dict[str, str] = {}
    for fmt in ("json", "html", "md"):
        buffer = io.StringIO()
        await write_export(harness.store, group, fmt, buffer.write, now=0.0)
        out[fmt] = buffer.getvalue()
    data = json.loads(out["json"])
    jsonschema.validate(data, SCHEMA)
    assert data["version"] == 4
    reply = next(m for m in data["messages"] if m["seq"] == 2)
    assert reply["text"] == SECOND and reply["run_id"] == run and reply["regenerated_at"] is not None
    assert [(v["version"], v["text"], v["run_id"]) for v in reply["versions"]] == [(1, FIRST, first_run)]
    assert [(r["kind"], r["replaces_seq"]) for r in data["runs"] if r["agent_name"] == "planner"] == [
        ("group", None), ("regenerate", 2)]
    assert all(m["versions"] == [] for m in data["messages"] if m["seq"] != 2)
    assert "↻ regenerated: 1 earlier version" in out["html"] and f"earlier version 1 (run #{first_run}, " in out["html"]
    assert FIRST in out["html"] and SECOND in out["html"]
    assert f"> *earlier version 1 (run #{first_run}, " in out["md"] and f"UTC):* {FIRST}" in out["md"]


async def test_a_regenerate_that_fails_leaves_the_message_as_it_was(sqlite_harness) -> None:
    script = GroupChatScript(selector=["planner", "TERMINATE"], agents={"planner": [FIRST]})
    async with FakeOpenAI(script) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with sqlite_harness.running(llm) as harness:
                await harness.say(TASK)
                await harness.idle()
                group = await harness.store.groups.get_group(harness.group.id)
                with pytest.raises(InvalidInput, match=r"planner could not write #2 again .*the message is unchanged"):
                    await harness.engine.regenerate(group, 2, user_id=None, operator=True)  # the script ran out
                assert await harness.thread() == [f"[alice] {TASK}", f"[planner] {FIRST}"]  # no failure notice
                assert await harness.store.thread.message_versions(group.id) == []
                assert await harness.fetch("SELECT kind, status FROM runs ORDER BY id") == [
                    ("group", "posted"), ("regenerate", "failed")]
        finally:
            await llm.aclose()


async def test_a_regenerate_cut_before_it_settled_changes_nothing_after_a_restart(sqlite_harness) -> None:
    """A crash (kill -9) mid-regenerate leaves its run 'running': the next start marks it interrupted,
    runs nothing again for it, and the message keeps its text, with no version."""
    script = GroupChatScript(selector=["planner", "TERMINATE"], agents={"planner": [FIRST]})
    async with FakeOpenAI(script) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with sqlite_harness.running(llm) as harness:
                await harness.say(TASK)
                await harness.idle()
                planner = await harness.store.roster.find_agent(harness.group.id, "planner")
                assert planner is not None
                # what a process killed during the model call leaves: the run started, nothing settled
                await harness.store.runs.start_run(harness.group.id, planner.id, "regenerate", 1, replaces=2)
            calls = len(server.requests)
            async with sqlite_harness.running(llm) as harness:
                await harness.idle()
                assert await harness.fetch("SELECT kind, status FROM runs ORDER BY id") == [
                    ("group", "posted"), ("regenerate", "interrupted")]
                assert await harness.thread() == [f"[alice] {TASK}", f"[planner] {FIRST}"]
                assert await harness.store.thread.message_versions(harness.group.id) == []
                assert len(server.requests) == calls  # nothing ran again for it
                run = (await harness.fetch("SELECT id FROM runs WHERE kind = 'regenerate'"))[0][0]
                late = await harness.store.runs.finish_run(run, RunResult("posted"), cap=0)  # a late settle: refused
                assert late.run.status == "interrupted" and late.reply is None
        finally:
            await llm.aclose()


# refusals -------------------------------------------------------------------------------------------
REFUSALS = [  # (what, target seq (None: the newest agent message), user, operator, error, its words)
    ("a person's message", 1, "alice", False, InvalidInput, "#1 is a message from alice, not an agent"),
    ("an older agent message", 2, "alice", True, InvalidInput, "Only the newest agent message can be regenerated: "
                                                               "#2 is older (the newest is #4, by budget)"),
    ("a notice", 5, "alice", True, InvalidInput, "#5 is a notice from the bot"),
    ("someone else", None, "carol", False, Forbidden, "Only bob (who started this task) or an operator can "
                                                      "regenerate this reply."),
    ("no such message", 40, "bob", False, InvalidInput, "There is no message #40 in this group."),
    ("during a run", None, "bob", False, Busy, "An agent is still working in this group; regenerate once it is done."),
    ("paused", None, "bob", False, Busy, "The group is paused: /roundtable resume first, then regenerate."),
]


@pytest.mark.parametrize("what, seq, user, operator, error, words", REFUSALS,
                         ids=[r[0] for r in REFUSALS])
async def test_refusals_say_why(sqlite_harness, what: str, seq: int | None, user: str, operator: bool,
                               error: type[UserFacingError], words: str) -> None:
    script = GroupChatScript(selector=["planner", "TERMINATE", "budget", "TERMINATE"],
                             agents={"planner": [FIRST], "budget": ["That fits."], "local": ["Try Yanaka."]})
    async with FakeOpenAI(script) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with sqlite_harness.running(llm) as harness:
                await harness.say(TASK)
                await harness.idle()
                await harness.say("And the budget?", who="bob")
                await harness.idle()
                await harness.store.thread.append_system_message(harness.group.id, harness.engine.notice("a notice"))
                await harness.idle()
                group = await harness.store.groups.get_group(harness.group.id)
                rows = [(m.seq, m.author_name) for m in await harness.store.thread.messages(group.id)]
                assert rows == [(1, "alice"), (2, "planner"), (3, "bob"), (4, "budget"), (5, "roundtable")]
                if what == "paused":
                    await harness.store.groups.update_group(group.id, paused=True)
                calls = len(server.requests)
                local = await harness.store.roster.find_agent(group.id, "local")
                assert local is not None
                async with harness.engine.locks.holding(local, "a test's run") if what == "during a run" \
                        else _nothing():
                    with pytest.raises(error) as raised:
                        await harness.engine.regenerate(group, seq, user_id=user, operator=operator)
                assert words in str(raised.value), str(raised.value)
                assert len(server.requests) == calls  # no model call
                assert await harness.store.thread.message_versions(group.id) == []
        finally:
            await llm.aclose()


class _nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_a_secret_in_the_new_text_is_masked_in_the_row_what_is_shown_and_the_record(sqlite_harness) -> None:
    secret = "sk-regenerate-secret-4471"
    SECRETS.register(secret)
    script = GroupChatScript(selector=["planner", "TERMINATE"],
                             agents={"planner": [FIRST, f"Use the key {secret} to book."]})
    async with FakeOpenAI(script) as server:
        llm = OpenAILLM(api_key="k", base_url=server.base_url, default_model="m", max_retries=0)
        try:
            async with sqlite_harness.running(llm) as harness:
                await harness.say(TASK)
                await harness.idle()
                group = await harness.store.groups.get_group(harness.group.id)
                done = await harness.engine.regenerate(group, None, user_id="alice", operator=False)
                await harness.idle()
                assert secret not in done.message.text and done.message.text.startswith("Use the key ")
                shown = [m.text for m in harness.surface.published if m.seq == 2]
                assert shown[-1] == done.message.text  # what was shown is the masked text
                raw = await harness.fetch("SELECT text FROM messages UNION ALL SELECT text FROM message_versions")
                assert raw and not [row for row in raw if secret in row[0]]
        finally:
            await llm.aclose()
