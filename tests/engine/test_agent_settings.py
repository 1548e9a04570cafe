"""Muted agents and per-agent model settings (issue 30 items 3 and 5; SPEC §6, §8): the real openai
client against FakeOpenAI, the real engine and a real database (both backends), an injected clock."""
from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.core.errors import InvalidInput
from bot.core.rules.mute import tag_notice
from bot.llm.openai_llm import OpenAILLM
from bot.llm.tokens import make_token_counter
from tests.fakes.openai_server import SELECTOR_MARK, FakeOpenAI, GroupChatScript, message_text

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC, the fake clock's start
HOUR = 3600.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def running(harness: Any, srv: FakeOpenAI, clock: FakeClock | None = None,
                  **settings: Any) -> AsyncIterator[Any]:
    llm = OpenAILLM(api_key="sk-test", base_url=srv.base_url, default_model="fake-model", timeout=10,
                    max_retries=0, counter=make_token_counter())
    harness.engine_options = {"clock": clock or FakeClock()}
    async with llm, harness.running(llm, **settings) as h:
        yield h


def calls_of(srv: FakeOpenAI, name: str) -> list[Any]:
    return [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", name)]


def replies() -> GroupChatScript:
    return GroupChatScript(default_agent_reply=lambda name, n: f"{name} reply {n}")


async def notices(h: Any) -> list[str]:
    return [m.text for m in await h.store.thread.messages(h.group.id) if m.author_type == "system"]


# model settings -------------------------------------------------------------
async def test_an_agents_temperature_and_max_tokens_are_sent_only_for_it(harness):
    async with FakeOpenAI(replies()) as srv, running(harness, srv, mode="tags") as h:
        verbs = h.verbs()
        answer = await verbs.roster.edit_agent(h.group, "planner", settings={"temperature": 0.3, "max_tokens": 500})
        await h.say("@planner @budget go")
        await h.idle(30)
        shown = await verbs.roster.show_agent(h.group, "planner")
    assert answer == "Updated planner: temperature 0.3, max_tokens 500, context_budget the group's."
    [planner] = calls_of(srv, "planner")
    [budget] = calls_of(srv, "budget")
    assert (planner["temperature"], planner["max_tokens"]) == (0.3, 500)
    assert "temperature" not in budget and "max_tokens" not in budget  # unset: nothing sent
    assert {f.name: f.value for f in shown.fields}["model settings"] == (
        "temperature 0.3, max_tokens 500, context_budget the group's")


async def test_streamed_replies_carry_the_settings_too(harness):
    harness.surface.streams = True
    async with FakeOpenAI(replies()) as srv, running(harness, srv, mode="tags", stream=True) as h:
        await h.verbs().roster.edit_agent(h.group, "planner", settings={"temperature": 1.5, "max_tokens": 64})
        await h.say("@planner go")
        await h.idle(30)
    [planner] = calls_of(srv, "planner")
    assert planner.get("stream") is True
    assert (planner["temperature"], planner["max_tokens"]) == (1.5, 64)


async def test_a_refused_temperature_is_dropped_for_that_model_and_said_once(harness, caplog):
    caplog.set_level(logging.WARNING, logger="bot.llm.openai_llm")
    async with FakeOpenAI(replies(), refuses=("temperature",)) as srv, running(harness, srv, mode="tags") as h:
        await h.verbs().roster.edit_agent(h.group, "planner", settings={"temperature": 0.7})
        await h.say("@planner first")
        await h.idle(30)
        await h.say("@planner second")
        await h.idle(30)
        thread = await h.thread()
    first, retried, second = calls_of(srv, "planner")
    assert first["temperature"] == 0.7 and "temperature" not in retried and "temperature" not in second
    assert thread[-1] == "[planner] planner reply 2" and thread[1] == "[planner] planner reply 1"  # no failed turn
    said = [r.getMessage() for r in caplog.records if "refuses temperature" in r.getMessage()]
    assert len(said) == 1 and "sent without temperature from now on" in said[0]


async def test_an_agents_context_budget_overrides_the_groups(harness):
    long = " ".join(["word"] * 150)  # ~150 tokens a message
    async with FakeOpenAI(replies()) as srv, running(harness, srv, mode="selector", context_budget=200_000) as h:
        verbs = h.verbs()
        await verbs.roster.edit_agent(h.group, "planner", settings={"context_budget": 500})
        for n in range(8):
            await h.say(f"note {n}: {long}")
        await h.say("@planner @budget sum it up")
        await h.idle(30)
        await verbs.roster.edit_agent(h.group, "planner", settings={"context_budget": None})
        await h.say("@planner again")
        await h.idle(30)
    small, cleared = ("\n".join(message_text(m) for m in r["messages"]) for r in calls_of(srv, "planner"))
    [budget] = ("\n".join(message_text(m) for m in r["messages"]) for r in calls_of(srv, "budget"))
    assert "note 2:" not in small and "earlier messages omitted" in small  # its own 500 tokens
    assert "note 2:" in budget and "omitted" not in budget  # the group's 200,000
    assert "note 2:" in cleared and "omitted" not in cleared  # `default` gives the group's back


@pytest.mark.parametrize("settings, error", [
    ({"temperature": 2.5}, "temperature must be a number from 0 to 2, or default (got 2.5)"),
    ({"max_tokens": 0}, "max_tokens must be a whole number from 1 to 128,000, or default (got 0)"),
    ({"context_budget": 100}, "context_budget must be a whole number from 500 to 200,000, or default (got 100)"),
])
async def test_a_setting_out_of_range_is_refused_and_changes_nothing(sqlite_harness, settings, error):
    async with FakeOpenAI(replies()) as srv, running(sqlite_harness, srv) as h:
        with pytest.raises(InvalidInput) as refused:
            await h.verbs().roster.edit_agent(h.group, "planner", settings=settings)
        planner = await h.store.roster.find_agent(h.group.id, "planner")
    assert str(refused.value) == error + "."
    assert (planner.temperature, planner.max_tokens, planner.context_budget) == (None, None, None)


# mute -----------------------------------------------------------------------
async def test_a_muted_agent_is_left_out_of_all_and_a_tag_of_it_is_told_once(harness):
    clock = FakeClock()
    async with FakeOpenAI(replies()) as srv, running(harness, srv, clock, mode="tags") as h:
        verbs = h.verbs()
        said = await verbs.roster.mute_agent(h.group, "local", "1h")
        await h.say("@all hello")
        await h.idle(30)
        after_all = await notices(h)
        await h.say("@local @local what do you think, @LOCAL?")  # one notice for the message, not per tag
        await h.idle(30)
        await h.say("@local and @planner, please")
        await h.idle(30)
        thread = await h.thread()
        muted = await h.store.roster.find_agent(h.group.id, "local")
    assert said.startswith("local is muted until 09:00 UTC (1h left): it is left out of selection, rotation and @all")
    assert calls_of(srv, "local") == []
    assert len(calls_of(srv, "planner")) == 2 and len(calls_of(srv, "budget")) == 1
    assert after_all == []  # @all leaves it out silently
    line = tag_notice([muted], T0)
    assert line == ("local is muted until 09:00 UTC (1h left). A muted agent does not answer tags; "
                    "/agent unmute lifts a mute.")
    assert thread.count(f"[roundtable] {line}") == 2  # once per message that tags it
    assert thread[thread.index("[alice] @local @local what do you think, @LOCAL?") + 1] == f"[roundtable] {line}"


async def test_a_muted_agent_is_left_out_of_the_selector_and_the_rotation(harness):
    script = GroupChatScript(selector=["budget", "TERMINATE"], default_agent_reply=lambda name, n: f"{name} {n}")
    async with FakeOpenAI(script) as srv, running(harness, srv, mode="selector") as h:
        verbs = h.verbs()
        await verbs.roster.mute_agent(h.group, "planner", None)
        await h.say("what should we do?")
        await h.idle(30)
        await h.store.groups.update_group(h.group.id, settings=h.group.settings.with_changes(mode="round_robin",
                                                                                               max_agent_turns=3))
        await h.say("go round")
        await h.idle(30)
    selector = next(r for r in srv.requests if any(SELECTOR_MARK in message_text(m) for m in r["messages"]))
    text = "\n".join(message_text(m) for m in selector["messages"])
    assert "budget: keeps the total honest" in text and "planner" not in text  # not in its roles, nor to pick
    assert calls_of(srv, "planner") == []  # neither picked by the selector nor in the rotation
    assert len(calls_of(srv, "local")) + len(calls_of(srv, "budget")) >= 3


async def test_a_mute_ends_by_itself_when_its_time_is_up_also_after_a_restart(harness):
    clock = FakeClock()
    async with FakeOpenAI(replies()) as srv:
        async with running(harness, srv, clock, mode="tags") as h:
            verbs = h.verbs()
            await verbs.roster.mute_agent(h.group, "local", "30m")
            clock.now += 20 * 60
            listed = await verbs.roster.list_agents(h.group)
            status = await verbs.record.status(h.group)
            await h.say("@local still there?")
            await h.idle(30)
        clock.now += 10 * 60  # the mute's time is up while the bot is down
        async with running(harness, srv, clock, mode="tags") as h:
            verbs = h.verbs()
            shown = await verbs.roster.show_agent(h.group, "local")
            await h.say("@local now?")
            await h.idle(30)
            thread = await h.thread()
            relisted = await verbs.roster.list_agents(h.group)
            unmuted = await verbs.roster.unmute_agent(h.group, "local")
    assert [f.name for f in listed.fields][2] == "local (muted until 08:30 UTC (10m left))"
    agents = {f.name: f.value for f in status.fields}["agents"]
    assert "local (muted until 08:30 UTC (10m left)): read through #" in agents
    assert shown.title == "local" and [f.name for f in relisted.fields][2] == "local"
    assert len(calls_of(srv, "local")) == 1 and thread[-1] == "[local] local reply 1"
    assert unmuted == "local is not muted."


async def test_unmute_lifts_a_mute_until_unmuted_and_bad_durations_are_refused(harness):
    clock = FakeClock()
    async with FakeOpenAI(replies()) as srv, running(harness, srv, clock, mode="tags") as h:
        verbs = h.verbs()
        with pytest.raises(InvalidInput, match=r"for must be a duration such as 30m, 1h, 2d or 1h30m \(got 'soon'\)"):
            await verbs.roster.mute_agent(h.group, "local", "soon")
        said = await verbs.roster.mute_agent(h.group, "local")
        clock.now += 400 * 86400  # a year on: still muted
        shown = await verbs.roster.show_agent(h.group, "local")
        await h.say("@local hi")
        await h.idle(30)
        unmuted = await verbs.roster.unmute_agent(h.group, "local")
        await h.say("@local hi again")
        await h.idle(30)
    assert said.startswith("local is muted until unmuted:")
    assert shown.title == "local (muted until unmuted)"
    assert unmuted == "local is unmuted: it can be selected and tagged again."
    assert len(calls_of(srv, "local")) == 1
