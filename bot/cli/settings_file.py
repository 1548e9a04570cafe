"""The settings file (`.env`) as text to edit: change some keys, keep every other line as it was.

`SettingsFile.read(path)` parses the file the way python-dotenv reads it at start-up
(a line that is not KEY=value is refused, as `bot.config.load_env_file` refuses it);
a file that does not exist yet starts from `config.example.env` (its comments
explain every key) when the source tree has one, else empty. `set(key, value)`
rewrites that key's line in place (or appends one); `write()` replaces the file in
one step (a temporary file beside it, then a rename), readable by its owner only
(mode 0600): it holds the bot token and the API key.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bot.core.errors import ConfigError, InvalidInput

TEMPLATE = Path(__file__).resolve().parents[2] / "config.example.env"
_PLAIN = re.compile(r"[A-Za-z0-9_./:@%+,~=-]*")
PRIVATE = 0o600


def quoted(key: str, value: str) -> str:
    """`value` written so that python-dotenv reads it back unchanged: bare when it is made of
    safe characters, else in double quotes. InvalidInput for what no .env line can hold."""
    if "\n" in value or "\r" in value or "\x00" in value:
        raise InvalidInput(f"{key} cannot hold a line break")
    if "${" in value:  # python-dotenv would expand it as a variable
        raise InvalidInput(f"{key} cannot contain '${{'")
    if _PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class _Part:
    text: str  # as in the file, blank lines before it included
    key: str | None


@dataclass
class SettingsFile:
    path: Path
    exists: bool
    parts: list[_Part] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)  # as python-dotenv reads the text (a template's too)
    changed: list[str] = field(default_factory=list)  # keys set by `set`, in order

    @classmethod
    def read(cls, path: Path, *, template: Path | None = TEMPLATE) -> SettingsFile:
        """The file at `path`; one that does not exist yet starts from `template`'s text (its
        defaults, as copying it would give). `ConfigError` when the file cannot be read or has a
        malformed line."""
        from dotenv import dotenv_values
        from dotenv.parser import parse_stream

        exists = path.exists()
        if exists and not path.is_file():  # a directory, /dev/null, a pipe: never replaced by a file
            raise ConfigError(f"{path} is not a regular file; name a settings file to write")
        source = path if exists else template
        text = ""
        if source is not None and source.exists():
            try:
                text = source.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"{source} cannot be read ({exc.strerror or type(exc).__name__})") from None
            except UnicodeDecodeError:
                raise ConfigError(f"{source} is not UTF-8 text") from None
        parts = []
        for binding in parse_stream(io.StringIO(text)):
            if binding.error:
                raise ConfigError(f"{source}: line {binding.original.line} is not KEY=value; fix it, or make it a "
                                  "comment with #")
            parts.append(_Part(binding.original.string, binding.key))
        values = {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if v is not None}
        return cls(path, exists, parts, values)

    def get(self, key: str) -> str:
        """The file's value of `key` ("" when unset, or when the file does not exist yet)."""
        return self.values.get(key, "").strip() if self.exists else ""

    def set(self, key: str, value: str) -> None:
        """Set `key` (its last line, where python-dotenv takes it from; a new line at the end when
        the file has none). A value the file already holds changes nothing."""
        if self.values.get(key) == value:
            return
        text = f"{key}={quoted(key, value)}\n"
        for part in reversed(self.parts):
            if part.key == key:
                part.text = _line(part.text, key, quoted(key, value))
                break
        else:
            if self.parts and not self.parts[-1].text.endswith("\n"):
                self.parts[-1].text += "\n"
            self.parts.append(_Part(text, key))
        self.values[key] = value
        if key not in self.changed:
            self.changed.append(key)

    def text(self) -> str:
        return "".join(p.text for p in self.parts)

    def write(self) -> None:
        """Replace the file in one step, mode 0600 (a symlink's target is replaced)."""
        target = self.path.resolve()
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            os.fchmod(handle, PRIVATE)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(self.text())
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:  # Ctrl-C too: no temporary file left beside .env; re-raised
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        self.exists = True


def _line(text: str, key: str, value: str) -> str:
    """A part's text with its assignment replaced by `key=value` (blank lines before it kept)."""
    body = text.lstrip("\r\n")
    return text[: len(text) - len(body)] + f"{key}={value}\n"
