"""What people share: files attached to their messages, as rows keep them and prompts show them.

Taking a file in (`take_in`, when its message is stored): an image (PNG, JPEG, GIF, WebP,
by content type or extension) is kept by reference only: its bytes are fetched through the
surface when a run is made (Discord's URLs expire; the surface refreshes them first). A text
file (by content type, by extension, or for an unknown type by sniffing: valid UTF-8
without NUL bytes) is read at once and its content kept in the row (at most `KEPT_CHARS`
characters; every secret the process knows masked, as in a message's text), so restarts and
exports have it. Anything else is named only.

Showing files in an agent's prompt (`PromptFiles`): each text file's content follows the
message's text inside `<file name=...>` ... `</file>` (the name escaped as an XML attribute, a
`</file` in the content written `<\\/file`, so no file ends its block early), all of a message's files together
within the group's `max_text` characters, a cut one ending with a visible note
("… 12,000 more characters of log.txt left out"). An image gets a line naming it, and,
for a model that takes images, the image itself right after the line (an image part
between the prompt's text parts: the prompt texts stay verbatim, their pieces joined are
exactly the text). At most `max_images` images of one message, and of one prompt (the
task's first, then the newest); the others, and every image for a model that takes none,
keep their line with a note saying why they are not shown. The selector, catch-up
summaries and /ask see the short lines only (`brief_text`).

The budget: a row's token count (counted once, when it is stored) includes its inlined
text as `max_text` was then, and each image it may send at OpenAI's billing estimate
(`image_tokens`: 85 + 170 per 512-px tile after fitting 2048 px and a 768-px short side).
"""
from __future__ import annotations

import base64
import html
import logging
import math
import re
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from bot.core.models import ChatMessage, GroupSettings, ImagePart, Message, SharedFile
from bot.core.rules.secrets import mask

log = logging.getLogger(__name__)

KEPT_CHARS = 1_000_000  # characters of a text file kept in its row
READ_BYTES = 4 * 1024 * 1024  # a text file larger than this is not read (named only)
SNIFF_BYTES = 1024 * 1024  # a file of unknown type is read to see whether it is text up to this size
IMAGE_BYTES = 20 * 1024 * 1024  # larger images are not sent (OpenAI takes up to 20 MB an image)
UNKNOWN_IMAGE_TOKENS = 765  # an image whose size is not known: as a 1024 x 1024 one
CACHED_IMAGE_BYTES = 64 * 1024 * 1024  # fetched images kept in memory for the next runs

IMAGE_TYPES = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif",
               "image/webp": "webp"}
IMAGE_EXTENSIONS = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
                    ".webp": "image/webp"}
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript", "application/x-yaml",
              "application/yaml", "application/toml", "application/x-sh", "application/sql",
              "application/x-python", "application/ld+json", "application/x-ndjson", "application/csv")
TEXT_EXTENSIONS = frozenset(
    ".txt .md .markdown .rst .log .py .pyi .ipynb .js .mjs .cjs .ts .tsx .jsx .json .jsonl .ndjson .csv .tsv "
    ".yaml .yml .toml .ini .cfg .conf .xml .html .htm .css .scss .sql .sh .bash .zsh .fish .ps1 .bat .c .h "
    ".cpp .hpp .cc .cs .java .kt .kts .go .rs .rb .php .swift .lua .r .pl .scala .dart .vue .svelte .diff "
    ".patch .tex .srt .vtt .env.example .properties .gradle .dockerfile .makefile .mk .cmake .proto .graphql "
    ".gql .tf .hcl .nix .el .clj .ex .exs .erl .hs .ml .jl .m .asm .s .v .sv .vhd .txt~".split())
TEXT_NAMES = frozenset({"dockerfile", "makefile", "readme", "license", "changelog", "procfile", "gemfile"})

Fetch = Callable[[], Awaitable[bytes]]


class FileUnavailable(Exception):
    """A file's bytes could not be had (expired, deleted, unreadable); the text says why, for the log."""


def size_text(size: int) -> str:
    """245 B, 12 KB, 3.4 MB."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{round(size / 1024):,} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _extension(name: str) -> str:
    lowered = name.lower()
    return lowered[lowered.rfind("."):] if "." in lowered else ""


def image_type(name: str, content_type: str) -> str | None:
    """The image's content type when it is an image a model takes, else None."""
    ctype = content_type.split(";")[0].strip().lower()
    if ctype in IMAGE_TYPES:
        return "image/jpeg" if ctype == "image/jpg" else ctype
    if not ctype or ctype == "application/octet-stream":
        return IMAGE_EXTENSIONS.get(_extension(name))
    return None


def declared_text(name: str, content_type: str) -> bool:
    """A text file by its content type or its name."""
    ctype = content_type.split(";")[0].strip().lower()
    base = name.lower().rsplit("/", 1)[-1]
    return (ctype.startswith(TEXT_TYPES) or _extension(name) in TEXT_EXTENSIONS or base in TEXT_NAMES
            or (base.startswith(".") and "." not in base[1:]))  # .gitignore, .bashrc


def unknown_type(name: str, content_type: str) -> bool:
    """No content type and no name that tells: worth a look (sniffing) when small."""
    ctype = content_type.split(";")[0].strip().lower()
    return (not ctype or ctype == "application/octet-stream") and _extension(name) not in IMAGE_EXTENSIONS


def decode_text(data: bytes) -> str | None:
    """The text of `data` when it is UTF-8 without NUL bytes (a BOM is dropped), else None."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def masked_file(file: SharedFile) -> SharedFile:
    """`file` with every secret the process knows masked in its name, URL and text (a file named
    `<token>.txt` has the token in its URL too: Discord's CDN URL ends with the name, percent-encoded
    where needed). A URL so masked no longer fetches: the surface finds the file by its ids instead."""
    text = mask(file.text) if file.text else file.text
    return replace(file, name=mask(file.name), url=mask(file.url), text=text)


async def take_in(file: SharedFile, fetch: Fetch) -> SharedFile:
    """`file` (its name, type and size known) with its kind decided and, for a text file, its
    content read through `fetch`. Never raises: a text file that cannot be read is kept with a note."""
    file = masked_file(file)  # (a secret in a name, and so in the URL: as in the text)
    ctype = image_type(file.name, file.content_type)
    if ctype is not None:
        return replace(file, kind="image", content_type=file.content_type or ctype)
    textual = declared_text(file.name, file.content_type)
    sniff = not textual and unknown_type(file.name, file.content_type) and 0 < file.size <= SNIFF_BYTES
    if not (textual or sniff):
        return replace(file, kind="other")
    if file.size > READ_BYTES:
        return replace(file, kind="text", note=f"not read: larger than {size_text(READ_BYTES)}")
    try:
        data = await fetch()
    except FileUnavailable as exc:
        log.warning("file %s could not be read: %s", file.name, exc)
        return replace(file, kind="text" if textual else "other", note="could not be fetched" if textual else "")
    text = decode_text(data[:READ_BYTES])
    if text is None:
        return replace(file, kind="text", note="not read: not UTF-8 text") if textual else replace(file, kind="other")
    text = mask(text.replace("\r\n", "\n"))  # stored and shown as a message's text is (bot.core.rules.secrets)
    return replace(file, kind="text", text=text[:KEPT_CHARS], chars=len(text), size=file.size or len(data))


# prompts ----------------------------------------------------------------------------------------
def image_tokens(width: int | None, height: int | None) -> int:
    """OpenAI's estimate for an image at detail auto/high: fit in 2048 x 2048, shortest side at
    most 768, then 170 tokens per 512-px tile plus 85."""
    if not width or not height or width <= 0 or height <= 0:
        return UNKNOWN_IMAGE_TOKENS
    w, h = float(width), float(height)
    scale = min(1.0, 2048 / max(w, h))
    w, h = w * scale, h * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def _describe(file: SharedFile) -> str:
    parts = [file.name]
    if file.kind == "image" and file.width and file.height:
        parts.append(f"{file.width}×{file.height}")
    parts.append(size_text(file.size))
    return ", ".join(parts)


def file_line(file: SharedFile, why_not: str = "") -> str:
    """`[image: shot.png, 1280×720, 245 KB]`, `[file: report.pdf, 1.2 MB]` (with a note when given)."""
    label = "image" if file.kind == "image" else "file"
    return f"[{label}: {_describe(file)}{f' (not shown: {why_not})' if why_not else ''}]"


DELETED = "(deleted)"
EDITED = "(edited)"


def said(message: Message) -> str:
    """A row's own text as prompts, /catchup and exports show it (SPEC §1): a tombstone's is "(deleted)"
    (its text is gone), an edited row's ends with "(edited)"."""
    if message.deleted:
        return DELETED
    if message.edited_at is not None:
        return f"{message.text} {EDITED}" if message.text else EDITED
    return message.text


def brief_text(message: Message) -> str:
    """The message's text with one short line per file (the selector, summaries and /ask read this)."""
    text = said(message)
    if not message.attachments:
        return text
    lines = [file_line(f) for f in message.attachments]
    return "\n".join([text, *lines] if text else lines)


def text_files(files: Sequence[SharedFile], max_text: int) -> list[str]:
    """Each text file's block, its content within what is left of `max_text` characters (shared by
    the message's files, in order), a cut one ending with a note saying how much was left out."""
    blocks, left = [], max_text
    for file in files:
        if file.kind != "text":
            continue
        text = file.text if file.text is not None or file.note else ""  # (a row keeps no empty text)
        if text is None:
            blocks.append(file_line(file, file.note))
            continue
        shown = text[:max(left, 0)]
        left -= len(shown)
        missing = file.chars - len(shown)
        lines = [f'<file name="{file_attribute(file.name)}" size="{size_text(file.size)}">']
        if shown:
            lines.append(file_content(shown.rstrip("\n")))
        if missing > 0:
            lines.append(f"… {missing:,} more characters of {file.name} left out")
        lines.append("</file>")
        blocks.append("\n".join(lines))
    return blocks


_CLOSING = re.compile(r"<(?=/file)", re.IGNORECASE)


def file_attribute(name: str) -> str:
    """A file's name as a `<file name="...">` attribute: `&`, `<`, `>` and `"` escaped as in XML, so
    a name can neither end the attribute nor open a tag."""
    return html.escape(name, quote=False).replace('"', "&quot;")


def file_content(text: str) -> str:
    """A text file's content inside its `<file>` block: a `</file` in it is written `<\\/file`, so the
    file cannot end its block early (and seem to be the person's own words after it)."""
    return _CLOSING.sub(lambda _: "<\\", text)


# what the person is told -----------------------------------------------------------------------------
def unused_files(files: Sequence[SharedFile], max_images: int) -> list[tuple[str, str]]:
    """(name, why) of each file of a message that agents cannot use, as far as is known when it is
    stored: a text file not read (too large, not UTF-8, not fetched), an image over `max_images` or
    too large to send, a file of another kind (agents see its name only). Images that cannot be
    fetched, or are no image after all, are known when a run is made (`ImageSource.unused`)."""
    unused, shown = [], 0
    for file in files:
        if file.kind == "text" and file.note:
            unused.append((file.name, file.note))
        elif file.kind == "other":
            unused.append((file.name, "agents see only its name: it is no image or text file"))
        elif file.kind == "image":
            if shown >= max_images:
                unused.append((file.name, f"only {max_images} image{'' if max_images == 1 else 's'} "
                                          "of a message are sent"))
            elif file.size > IMAGE_BYTES:
                unused.append((file.name, f"{size_text(file.size)}, more than the {size_text(IMAGE_BYTES)} "
                                          "a model takes"))
            else:
                shown += 1
    return unused


SHOWN_NAMES = 3  # names of one reason in the line; more are counted


def unused_line(author: str, unused: Sequence[tuple[str, str]]) -> str:
    """The one short line that tells a person what of their message agents could not use, the files
    grouped by why: `alice, not used: a.png, b.png and 14 more (only 4 images of a message are sent);
    big.log (not read: larger than 4.0 MB)`."""
    reasons: dict[str, list[str]] = {}
    for name, why in unused:
        reasons.setdefault(why, []).append(name)
    parts = []
    for why, names in reasons.items():
        more = len(names) - SHOWN_NAMES
        shown = ", ".join(names[:SHOWN_NAMES]) + (f" and {more} more" if more > 0 else "")
        parts.append(f"{shown} ({why})")
    return f"📎 {author}, not used: {'; '.join(parts)}."


def counted_text(text: str, files: Sequence[SharedFile], max_text: int) -> str:
    """A message's text as agents' prompts show it, images as their lines (for counting its tokens)."""
    blocks = text_files(files, max_text)
    others = [file_line(f) for f in files if f.kind != "text"]
    return "\n".join(part for part in [text, *others, *blocks] if part)


def images_tokens(files: Sequence[SharedFile], max_images: int) -> int:
    """The estimated tokens of the images of one message that a prompt may send."""
    return sum(image_tokens(f.width, f.height) for f in [f for f in files if f.kind == "image"][:max_images])


@dataclass(frozen=True)
class _Slot:
    seq: int
    index: int  # the file's place in its message
    file: SharedFile
    task: bool
    over: str = ""  # why it is not sent whatever the model (per-message limit, size)


class PromptFiles:
    """Shows people's files in one agent prompt, and after the prompt is filled, turns the
    images' places into image parts (`parts`, then `fill_images` fetches them).

    `images=False`: the model takes no images (each gets its line and a note instead).
    """

    def __init__(self, settings: GroupSettings, *, images: bool, task_seq: int | None = None) -> None:
        self.max_text = settings.max_text
        self.max_images = settings.max_images
        self.images = images
        self.task_seq = task_seq
        self.withheld = 0  # images named only because the model takes none
        self._nonce = secrets.token_hex(6)
        self._marker = re.compile(f"\x00{self._nonce}:(\\d+)\x00")
        self._slots: list[_Slot] = []

    def text(self, message: Message) -> str:
        """The message's text with its files, an image's line followed by a marker for its part."""
        text = said(message)
        if not message.attachments:
            return text
        lines = [text] if text else []
        shown = 0
        for index, file in enumerate(message.attachments):
            if file.kind == "image":
                over = ""
                if shown >= self.max_images:
                    over = f"only {self.max_images} image{'' if self.max_images == 1 else 's'} of a message are sent"
                elif file.size > IMAGE_BYTES:
                    over = f"{size_text(file.size)} is more than the {size_text(IMAGE_BYTES)} a model takes"
                else:
                    shown += 1
                lines.append(self._image(message, index, file, over))
            elif file.kind == "other":
                lines.append(file_line(file))
        lines.extend(text_files(message.attachments, self.max_text))
        return "\n".join(lines)

    def _image(self, message: Message, index: int, file: SharedFile, over: str) -> str:
        if over:
            return file_line(file, over)
        if not self.images:
            self.withheld += 1
            return file_line(file, NO_IMAGES)
        self._slots.append(_Slot(message.seq, index, file, message.seq == self.task_seq))
        return f"{file_line(file)}\x00{self._nonce}:{len(self._slots) - 1}\x00"

    def _sent(self) -> set[int]:
        """The slots sent as images: the task's first, then the newest, up to `max_images`."""
        order = [i for i, s in enumerate(self._slots) if s.task]
        order += [i for i in reversed(range(len(self._slots))) if not self._slots[i].task]
        return set(order[:self.max_images])

    def parts(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """`messages` with each image marker made a slot (`_Slot` placeholders in `parts`) or its note."""
        sent = self._sent()
        out = []
        for message in messages:
            pieces = self._marker.split(message.content)
            if len(pieces) == 1:
                out.append(message)
                continue
            parts: list[str | ImagePart] = []
            for i, piece in enumerate(pieces):
                if i % 2 == 0:
                    if piece:
                        parts.append(piece)
                    continue
                slot = self._slots[int(piece)]
                if int(piece) in sent:
                    parts.append(ImagePart(f"slot:{piece}", "", image_tokens(slot.file.width, slot.file.height)))
                else:
                    parts.append(_NOT_ALL.format(n=self.max_images))
            out.append(_joined(message, parts))
        return out

    async def fill_images(self, messages: Sequence[ChatMessage], images: ImageSource) -> list[ChatMessage]:
        """Fetch each image slot's bytes (`images`): a data URL, or a note when it cannot be had."""
        out = []
        for message in messages:
            if not message.images:
                out.append(message)
                continue
            parts: list[str | ImagePart] = []
            for part in message.parts:
                if isinstance(part, ImagePart) and part.url.startswith("slot:"):
                    slot = self._slots[int(part.url[5:])]
                    url = await images.data_url(slot.seq, slot.index, slot.file)
                    if url is None:
                        parts.append(f" (not shown: {images.why_not(slot.seq, slot.index, slot.file)})")
                    else:
                        parts.append(ImagePart(url, f" (not shown: {NO_IMAGES})", part.tokens))
                else:
                    parts.append(part)
            out.append(_joined(message, parts))
        return out


NO_IMAGES = "this model does not take images"
_NOT_ALL = " (not shown: only the newest {n} images of a prompt are sent)"


def _joined(message: ChatMessage, parts: list[str | ImagePart]) -> ChatMessage:
    """`message` with `parts` (adjacent text pieces merged); plain text when no image is left."""
    merged: list[str | ImagePart] = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] = merged[-1] + part
        else:
            merged.append(part)
    text = "".join(p for p in merged if isinstance(p, str))
    if not any(isinstance(p, ImagePart) for p in merged):
        return replace(message, content=text, parts=())
    return replace(message, content=text, parts=tuple(merged))


ImageKey = tuple[int, int, int, str]  # group, seq, the file's place, the file (its attachment id, else its URL)


class ImageSource:
    """Images' bytes through the surface, as data URLs, kept in memory (up to `CACHED_IMAGE_BYTES`,
    least recently used dropped first) so the runs of an episode fetch each image once. The key names
    the file too: an edit that drops a file moves the next one to its place (SPEC §1)."""

    def __init__(self, fetch: Callable[[SharedFile], Awaitable[bytes]], group_id: int,
                 cache: OrderedDict[ImageKey, str] | None = None) -> None:
        self._fetch = fetch
        self._group_id = group_id
        self._cache = cache if cache is not None else OrderedDict()
        self._refused: dict[ImageKey, str] = {}  # images fetched and not sent: why
        self.unused: dict[tuple[int, int], tuple[str, str]] = {}  # (seq, index) -> (name, why) of each not sent

    def why_not(self, seq: int, index: int, file: SharedFile) -> str:
        """Why `data_url` gave no URL for the image."""
        return self._refused.get(self._key(seq, index, file), "it could not be fetched")

    def _key(self, seq: int, index: int, file: SharedFile) -> ImageKey:
        return (self._group_id, seq, index, file.attachment_id or file.url)

    async def data_url(self, seq: int, index: int, file: SharedFile) -> str | None:
        key = self._key(seq, index, file)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        try:
            data = await self._fetch(file)
        except FileUnavailable as exc:
            log.warning("group=%s seq=%s: image %s could not be fetched: %s", self._group_id, seq, file.name, exc)
            self.unused[(seq, index)] = (file.name, "it could not be fetched: deleted, or its link expired")
            return None
        if len(data) > IMAGE_BYTES:
            log.warning("group=%s seq=%s: image %s is %s; not sent", self._group_id, seq, file.name,
                        size_text(len(data)))
            self.unused[(seq, index)] = (file.name, f"{size_text(len(data))}, more than the "
                                                    f"{size_text(IMAGE_BYTES)} a model takes")
            return None
        ctype = image_format(data)
        if ctype is None:  # a provider refuses the whole call for it (and it is no image anyway)
            log.warning("group=%s seq=%s: %s is not a PNG, JPEG, GIF or WebP image; not sent", self._group_id, seq,
                        file.name)
            self._refused[key] = "it is not a PNG, JPEG, GIF or WebP image"
            self.unused[(seq, index)] = (file.name, self._refused[key])
            return None
        url = f"data:{ctype};base64,{base64.b64encode(data).decode('ascii')}"
        self._cache[key] = url
        while len(self._cache) > 1 and sum(len(v) for v in self._cache.values()) > CACHED_IMAGE_BYTES:
            self._cache.popitem(last=False)  # a few dozen entries at most: the sum is cheap
        return url


def image_format(data: bytes) -> str | None:
    """The content type of a PNG, JPEG, GIF or WebP image by its first bytes; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) read from a PNG, GIF, JPEG or WebP header; None when it cannot be told."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data[:2] == b"\xff\xd8":
            return _jpeg_size(data)
    except (IndexError, ValueError):
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    """A WebP's size, from its first chunk (lossy, lossless or extended)."""
    chunk = data[12:16]
    if chunk == b"VP8 ":
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """A JPEG's size, from its first start-of-frame segment (the segments before it skipped)."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
        i += 2 + length
    return None
