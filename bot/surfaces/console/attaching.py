"""`/attach PATH` at the console: files for the person's next message (`bot.surfaces.console.surface`).

Several may wait (`/attach` alone lists them, `/detach` drops them): a text file is read at once and
kept with the row (not its path), an image is kept by its path and read when a run is made
(`bot.core.rules.attachments`). A path is no secret (masked anyway when it holds one) but says where
a person keeps files: only an image's is stored, as it must be read again.
"""
from __future__ import annotations

import asyncio
import mimetypes
from dataclasses import replace
from pathlib import Path

from bot.core.errors import InvalidInput
from bot.core.models import SharedFile
from bot.core.rules.attachments import image_size, size_text, take_in

ATTACH_MAX_BYTES = 25 * 1024 * 1024  # a file the console attaches (Discord's own limit for most servers)
ATTACH_MAX_FILES = 10  # files with one message (as Discord)


class Attachments:
    """The files attached to the person's next message: the console takes them with it (`take`), and
    keeps them back for the next one when it was not stored (`keep`)."""

    def __init__(self) -> None:
        self.files: list[SharedFile] = []

    def take(self) -> list[SharedFile]:
        """The files waiting, for the message being posted (none wait after it)."""
        files, self.files = self.files, []
        return files

    def keep(self, files: list[SharedFile]) -> None:
        """`files` taken for a message that was not stored wait again, before any attached since."""
        self.files = files + self.files

    async def attach(self, typed: str) -> list[str]:
        """`/attach PATH`: the file goes with the next message. `/attach` alone: what waits."""
        if not typed:
            if not self.files:
                return ["Nothing is attached. /attach PATH attaches a file (an image or a text file) to your "
                        "next message."]
            return [f"Attached to your next message: {', '.join(_label(f) for f in self.files)} "
                    "(/detach drops them)."]
        if len(self.files) >= ATTACH_MAX_FILES:
            raise InvalidInput(f"A message takes at most {ATTACH_MAX_FILES} files; send it first, or /detach.")
        path = Path(typed.strip('"').strip("'")).expanduser()  # noqa: ASYNC240 - $HOME, no disk
        data = await asyncio.to_thread(_read_attached, path)
        ctype = mimetypes.guess_type(path.name)[0] or ""
        dims = image_size(data)

        async def read() -> bytes:
            return data

        file = await take_in(SharedFile(path.name, "other", len(data), ctype, str(path.resolve()),
                                        width=dims[0] if dims else None, height=dims[1] if dims else None), read)
        if file.kind != "image":  # its content is in the row (or it is named only): its path is kept only
            file = replace(file, url="")  # where it is needed, to read an image again when a run is made
        self.files.append(file)
        what = {"image": "an image", "text": "a text file", "other": "a file agents see by name only"}[file.kind]
        note = f"; {file.note}" if file.note else ""
        return [f"Attached {_label(file)}: {what}{note}. It goes with your next message."]

    async def detach(self) -> list[str]:
        """`/detach`: the files waiting are dropped."""
        if not self.files:
            return ["Nothing was attached."]
        dropped, self.files = self.files, []
        return [f"Dropped {', '.join(f.name for f in dropped)}: your next message goes without them."]


def _read_attached(path: Path) -> bytes:
    """The content of the file `/attach` names (in a thread: it stats and reads); InvalidInput, saying
    why, when it is not a regular file that can be read or is over `ATTACH_MAX_BYTES`."""
    shown = str(path)
    if not path.exists():
        raise InvalidInput(f"No file at {shown} (from {Path.cwd()}): /attach takes the path of a file.")
    if path.is_dir():
        raise InvalidInput(f"{shown} is a directory: attach its files one at a time.")
    if not path.is_file():  # /dev/zero reads without end, a named pipe blocks
        raise InvalidInput(f"{shown} is not a regular file: /attach takes the path of a file.")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidInput(f"Could not read {shown}: {exc.strerror or type(exc).__name__}.") from None
    if size > ATTACH_MAX_BYTES:
        raise InvalidInput(f"{shown} is {size_text(size)}; a file can be at most {size_text(ATTACH_MAX_BYTES)}.")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"Could not read {shown}: {exc.strerror or type(exc).__name__}.") from None


def _label(file: SharedFile) -> str:
    return f"{file.name} ({size_text(file.size)})"
