"""Editing `.env` (`bot.cli.settings_file`): one key changed, every other byte kept, values that python-dotenv
reads back unchanged, written in one step readable by its owner only."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from dotenv import dotenv_values

from bot.cli.settings_file import SettingsFile, quoted
from bot.core.errors import ConfigError, InvalidInput

EXISTING = '''# my notes

OPENAI_API_KEY=old
export ROUNDTABLE_MODEL=m1  # inline comment
ROUNDTABLE_BRIEF="two
lines"
OPENAI_API_KEY=older-wins-not
'''


@pytest.mark.parametrize("value", ["sk-abc_123.x", "http://h:8/v1?x=1&y=2", "with space", 'a"quote', "back\\slash",
                                   "hash #not a comment", "p@ss:w/rd$", "", "ünïcode"])
def test_values_read_back_unchanged(tmp_path: Path, value: str) -> None:
    file = SettingsFile.read(tmp_path / ".env", template=None)
    file.set("KEY", value)
    file.write()
    assert dotenv_values(tmp_path / ".env")["KEY"] == value


@pytest.mark.parametrize("value, problem", [("a\nb", "cannot hold a line break"), ("x${HOME}", "cannot contain")])
def test_what_no_line_can_hold_is_refused(value: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        quoted("KEY", value)


def test_one_key_changes_and_every_other_byte_stays(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text(EXISTING)
    file = SettingsFile.read(path)
    assert file.get("OPENAI_API_KEY") == "older-wins-not" and file.get("ROUNDTABLE_BRIEF") == "two\nlines"
    file.set("OPENAI_API_KEY", "new key")
    file.set("ROUNDTABLE_MODEL", "m1")  # the same value: nothing changes
    file.set("DISCORD_TOKEN", "t")
    file.write()
    assert path.read_text() == EXISTING.replace('OPENAI_API_KEY=older-wins-not\n', 'OPENAI_API_KEY="new key"\n') \
        + "DISCORD_TOKEN=t\n"
    assert file.changed == ["OPENAI_API_KEY", "DISCORD_TOKEN"]
    assert dotenv_values(path)["OPENAI_API_KEY"] == "new key"


def test_written_in_one_step_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text("A=1")  # no newline at the end
    path.chmod(0o644)
    file = SettingsFile.read(path)
    file.set("B", "2")
    file.write()
    assert path.read_text() == "A=1\nB=2\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == [".env"]  # no temporary file left


def test_a_new_file_starts_from_the_template(tmp_path: Path) -> None:
    template = tmp_path / "example.env"
    template.write_text("# explain A\nA=default\n# explain B\nB=\n")
    file = SettingsFile.read(tmp_path / ".env", template=template)
    assert file.get("A") == ""  # the file does not exist yet: a template is not a setting
    file.set("B", "given")
    file.write()
    assert (tmp_path / ".env").read_text() == "# explain A\nA=default\n# explain B\nB=given\n"


@pytest.mark.parametrize("make", ["directory", "fifo", "malformed"])
def test_what_cannot_be_a_settings_file_is_refused(tmp_path: Path, make: str) -> None:
    path = tmp_path / "target"
    if make == "directory":
        path.mkdir()
    elif make == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("A=1\nnot a setting\n")
    with pytest.raises(ConfigError, match=r"not a regular file|line 2 is not KEY=value"):
        SettingsFile.read(path)
