"""Each setting is declared once (SPEC §10): `GroupSettings`' fields (bot/core/settings.py) and
`bot.config.Settings`' fields. config.example.env and docs/settings.md's table are checked against the
declarations both ways: every declared variable is in the example with its default and range, and
has its row in the table; every variable of the example and every row of the table is declared.

A new setting fails here until both files say it: the failure names what to add (the table's
row is given whole, to paste)."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from bot.config import ENV_SETTINGS, OTHER_KEYS, PROCESS_SETTINGS, PROVIDER_KEY, Settings, load_settings
from bot.core.settings import GROUP_SETTINGS, GroupSettings, Setting
from bot.core.verbs.commands import find
from bot.core.verbs.group_verbs import parse_config, settings_fields

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "config.example.env"
DOC = ROOT / "docs" / "settings.md"
TABLE_MARK = "<!-- settings table"
NONE = "—"
KEY_LINE = re.compile(r"^#? ?(?P<key>[A-Z][A-Z0-9_<>]*)=(?P<value>.*)$")


def declarations() -> tuple[Setting, ...]:
    """Every setting: the group settings (in /roundtable config's order), then the process's."""
    return GROUP_SETTINGS + PROCESS_SETTINGS


def row(s: Setting) -> str:
    """A setting's row in docs/settings.md's table."""
    option = f"`{s.option_name}`" if s.scope == "group" else NONE
    variable = f"`{s.env}`" if s.env else NONE
    return (f"| {option} | {variable} | {s.scope} | {s.default_text() or NONE} | {s.range_text() or NONE} "
            f"| {s.help} |")


def table_problems(declared: Sequence[Setting], doc: str) -> list[str]:
    _, found, after = doc.partition(TABLE_MARK)
    if not found:
        return [f"docs/settings.md has no table marked {TABLE_MARK!r}"]
    rows = [line for line in after.split("\n\n", 1)[0].splitlines()[1:] if line.startswith("|")][2:]  # no header
    wanted = [row(s) for s in declared]
    problems = [f"docs/settings.md lacks the row (or it differs): {r}" for r in wanted if r not in rows]
    others = {f"`{k}`" for k in OTHER_KEYS}
    problems += [f"docs/settings.md has a row no setting declares: {r}" for r in rows
                 if r not in wanted and r.split("|")[2].strip() not in others]
    return problems


def example_problems(declared: Sequence[Setting], example: str) -> list[str]:
    """Each variable as `KEY=default` with its range in its paragraph; each KEY of the example declared."""
    paragraphs = {}  # key -> (its value, the text of its paragraph)
    for paragraph in example.split("\n\n"):
        for line in paragraph.splitlines():
            match = KEY_LINE.match(line)
            if match:
                paragraphs[match["key"]] = (match["value"], paragraph)
    problems = []
    for s in (s for s in declared if s.env):
        if s.env not in paragraphs:
            problems.append(f"config.example.env lacks {s.env}={s.default_text()} (and a comment saying what it is)")
            continue
        value, paragraph = paragraphs[s.env]
        if value != s.default_text():
            problems.append(f"config.example.env: {s.env}={value}, but its default is {s.default_text()!r}")
        if s.kind in ("integer", "number") and s.range_text() and s.range_text() not in paragraph:
            problems.append(f"config.example.env: {s.env}'s comment does not give its range {s.range_text()}")
        if s.choices and not all(c in paragraph for c in s.choices):
            problems.append(f"config.example.env: {s.env}'s comment does not name {', '.join(s.choices)}")
    named = {s.env for s in declared} | set(OTHER_KEYS)
    problems += [f"config.example.env sets {key}, which no setting declares" for key in paragraphs
                 if key not in named and not PROVIDER_KEY.match(key)]
    return problems


def test_config_example_env_says_every_declared_variable_and_no_other() -> None:
    problems = example_problems(ENV_SETTINGS, EXAMPLE.read_text())
    assert problems == [], "\n".join(problems)


def test_docs_settings_table_has_a_row_for_every_setting_and_no_other() -> None:
    problems = table_problems(declarations(), DOC.read_text())
    assert problems == [], "\n".join(problems)


NEW = Setting("integer", 7, "a setting nobody wrote down", low=1, high=9, env="ROUNDTABLE_NEW", name="new")


def test_a_new_setting_is_missed_in_both_files_until_they_say_it() -> None:
    example, doc = EXAMPLE.read_text(), DOC.read_text()

    def added(problems: list[str], before: list[str]) -> list[str]:
        return [p for p in problems if p not in before]  # what NEW adds, whatever the files lack today

    in_example, in_table = example_problems(ENV_SETTINGS, example), table_problems(declarations(), doc)
    assert added(example_problems([*ENV_SETTINGS, NEW], example), in_example) == [
        "config.example.env lacks ROUNDTABLE_NEW=7 (and a comment saying what it is)"]
    assert added(table_problems([*declarations(), NEW], doc), in_table) == [
        "docs/settings.md lacks the row (or it differs): | `new` | `ROUNDTABLE_NEW` | group | 7 | 1-9 | "
        "a setting nobody wrote down |"]
    said = example + "\n# Things (1-9).\nROUNDTABLE_NEW=7\n"
    assert added(example_problems([*ENV_SETTINGS, NEW], said), in_example) == []
    assert added(example_problems([*ENV_SETTINGS, NEW], said.replace("(1-9)", "(some)")), in_example) == [
        "config.example.env: ROUNDTABLE_NEW's comment does not give its range 1-9"]
    assert added(example_problems([*ENV_SETTINGS, NEW], said.replace("NEW=7", "NEW=8")), in_example) == [
        "config.example.env: ROUNDTABLE_NEW=8, but its default is '7'"]
    # the other way: what the files say that nothing declares
    assert added(example_problems(ENV_SETTINGS, said), in_example) == [
        "config.example.env sets ROUNDTABLE_NEW, which no setting declares"]
    table = doc.replace(row(GROUP_SETTINGS[0]), row(GROUP_SETTINGS[0]) + "\n" + row(NEW))
    assert added(table_problems([*declarations(), NEW], table), in_table) == []
    assert added(table_problems(declarations(), table), in_table) == [
        f"docs/settings.md has a row no setting declares: {row(NEW)}"]


def test_every_group_setting_is_declared_once_and_named_once() -> None:
    assert [s.name for s in GROUP_SETTINGS] == [f.name for f in dataclasses.fields(GroupSettings)]
    options = [s.option_name for s in GROUP_SETTINGS]
    variables = [s.env for s in declarations() if s.env]
    assert len(set(options)) == len(options) and len(set(variables)) == len(variables)
    assert all(s.scope == "process" for s in PROCESS_SETTINGS)
    assert [f.name for f in dataclasses.fields(Settings) if f.name not in {s.name for s in PROCESS_SETTINGS}] == [
        "shards", "providers", "new_groups"]  # read by hand: two variables, a family of them, the group settings


@pytest.mark.parametrize("declared", GROUP_SETTINGS, ids=lambda s: s.option_name)
def test_each_group_setting_is_an_option_a_card_line_and_a_change(declared: Setting) -> None:
    """What the declaration derives: /roundtable config's option, the settings card's line, the change."""
    (option,) = [o for o in find(("roundtable", "config")).options if o.name == declared.option_name]
    assert (option.kind, option.description, option.low, option.high, option.choices) == (
        declared.kind, declared.help, declared.low, declared.high, declared.choices)
    assert declared.option_name in [f.name for f in settings_fields(GroupSettings())]
    given = {"boolean": True, "choice": declared.choices[-1] if declared.choices else "", "integer": declared.high,
             "number": declared.high, "model": "m", "role": "ops", "long_text": "be brief"}[declared.kind]
    changed = GroupSettings().with_changes(**parse_config({declared.option_name: given}))
    assert getattr(changed, declared.name) == given


@pytest.mark.parametrize("declared", [s for s in GROUP_SETTINGS if s.env], ids=lambda s: s.env)
def test_a_group_settings_variable_is_the_default_of_new_groups(declared: Setting) -> None:
    value = "off" if declared.kind == "boolean" else f"{declared.low:g}"
    settings = load_settings({"OPENAI_API_KEY": "k", declared.env: value}, need_discord=False)
    wanted = False if declared.kind == "boolean" else declared.low
    assert getattr(settings.new_groups, declared.name) == wanted
