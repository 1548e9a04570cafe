"""The tool loop's pure rules (bot.core.features.tools): names, grants, cutting; tables, no I/O."""
from __future__ import annotations

import pytest

from bot.core.errors import InvalidInput
from bot.core.features.tools import (
    ToolRegistry,
    check_pattern,
    cut,
    decision_of,
    denied,
    granted,
    matches,
    model_name,
    needs_approval,
)
from bot.core.models import Approval, ToolGrant, ToolOutput, ToolSpec


@pytest.mark.parametrize("name, seen", [
    ("memory_write", "memory_write"),
    ("counter.add", "counter__add"),
    ("my server.get-time", "my_server__get-time"),
    ("files.read.file", "files__read_file"),
    ("x." + "y" * 100, ("x__" + "y" * 100)[:64]),
])
def test_model_name(name, seen):
    assert model_name(name) == seen


@pytest.mark.parametrize("pattern, name, covered", [
    ("counter.*", "counter.add", True),
    ("counter.*", "counter.get", True),
    ("counter.*", "counters.add", False),
    ("counter.add", "counter.add", True),
    ("counter.add", "counter.addition", False),
    ("memory_write", "memory_write", True),
])
def test_matches(pattern, name, covered):
    assert matches(pattern, name) is covered


@pytest.mark.parametrize("pattern", ["counter.*", "counter.add", "fetch_url", "my-server.get_time"])
def test_patterns_written_right(pattern):
    assert check_pattern(f" {pattern} ") == pattern


@pytest.mark.parametrize("pattern", ["", "counter.", "*", "a b.c", "counter.*x", "<@123>"])
def test_patterns_written_wrong(pattern):
    with pytest.raises(InvalidInput, match="is not a tool name"):
        check_pattern(pattern)


def test_granted_is_sorted_and_only_what_a_grant_covers():
    specs = [ToolSpec("counter.get", ""), ToolSpec("clock.now", ""), ToolSpec("counter.add", "")]
    assert [s.name for s in granted(specs, [ToolGrant("counter.*")])] == ["counter.add", "counter.get"]
    assert granted(specs, []) == []


@pytest.mark.parametrize("length, limit, kept", [(10, 10, 10), (11, 10, 10), (0, 10, 0)])
def test_cut(length, limit, kept):
    text = "x" * length
    out = cut(text, limit)
    assert out.startswith("x" * kept)
    if length > limit:
        assert out.endswith(f"[cut: the result had {length:,} characters; only the first {limit:,} are shown]")
    else:
        assert out == text


class Source:
    def __init__(self, name: str, specs: list[ToolSpec]) -> None:
        self.name, self.specs = name, specs

    def tools(self) -> list[ToolSpec]:
        return self.specs

    async def call(self, tool: str, arguments: dict[str, object], context: object) -> ToolOutput:
        return ToolOutput("")


def test_offered_tools_by_the_models_name_in_a_stable_order():
    registry = ToolRegistry([Source("counter", [ToolSpec("get", "g"), ToolSpec("add", "a")]),
                             Source("", [ToolSpec("memory_write", "m", builtin=True)])])
    assert registry.names() == ["counter.add", "counter.get"]  # built-ins are not granted
    assert not registry.offered([])  # no tool until granted
    box = registry.offered([ToolGrant("counter.*")], ["memory_write"])
    assert [t.name for t in box.tools] == ["counter__add", "counter__get", "memory_write"]
    assert [t.name for t in registry.offered([ToolGrant("counter.add")]).tools] == ["counter__add"]
    assert box.missing("web") == ("error: there is no tool named 'web'; the tools are counter__add, counter__get, "
                                  "memory_write.")


@pytest.mark.parametrize("typed, offered", [
    ("", ["counter.*", "counter.add", "counter.get", "fetch_url", "history_read", "search.*", "search.web"]),
    ("fe", ["fetch_url"]),
    ("COUNTER", ["counter.*", "counter.add", "counter.get"]),
    ("counter.add, hist", ["counter.add, history_read"]),
    ("counter.add,c", ["counter.add,counter.*", "counter.add,counter.get", "counter.add,fetch_url",
                       "counter.add,search.*", "counter.add,search.web"]),
    ("fetch_url history", ["fetch_url history_read"]),
    ("web", ["search.web"]),
    ("nothing", []),
])
def test_tool_choices_complete_the_last_name_of_a_grant(typed, offered):
    from bot.core.verbs.commands import tool_choices

    names = ["counter.add", "counter.get", "fetch_url", "history_read", "search.web"]
    assert tool_choices(names, typed) == offered


@pytest.mark.parametrize("spec, grants, held", [
    (ToolSpec("add", "a"), [ToolGrant("counter.*")], False),  # nothing says confirm
    (ToolSpec("add", "a", confirm=True), [ToolGrant("counter.*")], True),  # the tool's default (MCP: destructive)
    (ToolSpec("add", "a", confirm=True), [ToolGrant("counter.add", confirm=False)], False),  # confirm:off
    (ToolSpec("add", "a"), [ToolGrant("counter.*", confirm=True)], True),  # confirm:on for the server's tools
    (ToolSpec("add", "a"), [ToolGrant("counter.*", confirm=True), ToolGrant("counter.add", confirm=False)],
     False),  # the tool's own grant over server.*
    (ToolSpec("add", "a"), [ToolGrant("counter.get", confirm=True)], False),  # another tool's grant
    (ToolSpec("add", "a", builtin=True, confirm=True), [], False),  # built-ins never wait
])
def test_needs_approval(spec, grants, held):
    assert needs_approval(spec, "counter.add", grants) is held


def test_the_offered_box_holds_the_tools_that_need_approval():
    registry = ToolRegistry([Source("files", [ToolSpec("read", "r"), ToolSpec("delete", "d", confirm=True)])])
    assert registry.offered([ToolGrant("files.*")]).held == {"files__delete"}
    assert registry.offered([ToolGrant("files.*", confirm=True)]).held == {"files__delete", "files__read"}


@pytest.mark.parametrize("decision, told", [
    (Approval(False, "bob"), "error: denied by bob: this call of files.delete did not run."),
    (Approval(False), "error: denied: nobody approved this call of files.delete in time; it did not run."),
    (Approval(False, why="nobody can be asked"), "error: denied: nobody can be asked; this call of files.delete did "
                                                 "not run."),
])
def test_denied(decision, told):
    assert denied("files.delete", decision) == told


@pytest.mark.parametrize("result, said", [
    ("[approved by Bob]\ndeleted old", "files.delete: approved by Bob"),
    ("error: denied by Alice: this call of files.delete did not run.", "files.delete: denied by Alice"),
    ("error: denied: nobody approved this call of files.delete in time; it did not run.",
     "files.delete: denied (nobody approved it in time)"),
    ("error: denied: nobody can be asked; this call of files.delete did not run.",
     "files.delete: denied (nobody can be asked)"),
    ("deleted old", None),
    (None, None),
])
def test_decision_of_a_journaled_call(result, said):
    assert decision_of("files__delete", result) == said
