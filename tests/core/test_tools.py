"""The tool loop's pure rules (bot.core.features.tools): names, grants, cutting; tables, no I/O."""
from __future__ import annotations

import pytest

from bot.core.errors import InvalidInput
from bot.core.features.tools import ToolRegistry, check_pattern, cut, granted, matches, model_name
from bot.core.models import ToolGrant, ToolOutput, ToolSpec


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
