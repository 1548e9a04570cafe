"""/agent edit's steps without a store (`bot.core.verbs.roster_verbs`): what changes, and what it says."""
from __future__ import annotations

import dataclasses

import pytest

from bot.core.errors import InvalidInput
from bot.core.models import Agent
from bot.core.ports import AgentChanges
from bot.core.verbs.roster_verbs import setting_changes, switch_changes, unchanged_answer, updated_answer

PLANNER = Agent(1, 1, "planner", "plans", "You plan.", temperature=0.3)


@pytest.mark.parametrize("given, expected", [
    ({"temperature": 0.3}, {}),  # as it is
    ({"temperature": 0.7, "max_tokens": 500}, {"temperature": 0.7, "max_tokens": 500}),
    ({"temperature": None}, {"temperature": None}),  # cleared
    ({"context_budget": None}, {}),  # not set, so nothing to clear
    ({"context_budget": 800}, {"context_budget": 800}),
])
def test_setting_changes_are_what_differs(given: dict[str, float | int | None], expected: AgentChanges) -> None:
    assert setting_changes(PLANNER, given) == expected


def test_a_setting_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidInput):
        setting_changes(PLANNER, {"temperature": 9})


@pytest.mark.parametrize("memory, mode, expected", [
    (None, None, {}),
    (False, "talk", {}),
    (True, None, {"memory": True}),
    (None, "worker", {"mode": "worker"}),
])
def test_switch_changes_are_what_differs(memory: bool | None, mode: str | None, expected: AgentChanges) -> None:
    assert switch_changes(PLANNER, memory, mode) == expected


@pytest.mark.parametrize("settings, memory, mode, said", [
    ({"temperature": 0.3}, None, None, "planner has these model settings already: temperature 0.3, max_tokens "
                                       "default (no cap), context_budget the group's."),
    (None, False, None, "Memory is already off for planner."),
    (None, None, "talk", "planner is already in talk mode."),
    (None, None, None, "Nothing to change for planner: give role, prompt, model, avatar, memory, mode, "
                       "temperature, max_tokens or context_budget."),
])
def test_unchanged_answer(settings: dict[str, object] | None, memory: bool | None, mode: str | None,
                          said: str) -> None:
    assert unchanged_answer(PLANNER, settings, memory, mode) == said


@pytest.mark.parametrize("update, said", [
    ({"mode": "worker", "memory": True},
     "Updated planner: worker mode: its runs are private and it speaks only through group_post."),
    ({"mode": "talk"}, "Updated planner: talk mode: it posts its replies."),
    ({"memory": True}, "Updated planner: memory is on."),
    ({"max_tokens": 500}, "Updated planner: temperature 0.3, max_tokens 500, context_budget the group's."),
    ({"role": "drafts"}, "Updated planner."),
])
def test_updated_answer_names_what_changed(update: AgentChanges, said: str) -> None:
    agent = dataclasses.replace(PLANNER, **update)
    assert updated_answer(agent, update) == said
