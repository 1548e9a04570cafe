"""A command's answer when it is a table of facts (status, list, show, why, usage), or a file.

Discord shows a `Card` as an embed (title, fields, colour, thumbnail, footer,
and a Mark read button); the console prints `Card.lines()`. Plain answers stay
plain text. An `Attachment` (an export) is a file: Discord sends it attached,
the console writes it in its working directory.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from bot.core.rules.secrets import mask

Tone = Literal["neutral", "good", "warning", "bad"]


@dataclass(frozen=True)
class Field:
    name: str
    value: str
    inline: bool = True


@dataclass(frozen=True)
class MarkRead:
    """An offer to mark rows read: each (group id, seq) moves the asker's cursor of that
    group through seq. Discord shows it as a Mark read button; the console names /read."""

    through: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Card:
    title: str
    description: str = ""
    fields: tuple[Field, ...] = ()
    tone: Tone = "neutral"
    thumbnail_url: str | None = None
    footer: str = ""
    mark_read: MarkRead | None = None
    page_size: int | None = None  # fields per page where a surface pages long cards

    def lines(self) -> list[str]:
        """The card as plain lines: the title, the description, one `name: value` per field."""
        out = [self.title]
        if self.description:
            out.extend(self.description.splitlines())
        for f in self.fields:
            value = f.value.splitlines() or [""]
            out.append(f"  {f.name}: {value[0]}")
            out.extend(f"    {more}" for more in value[1:])
        if self.footer:
            out.append(f"  ({self.footer})")
        if self.mark_read is not None:
            out.append("  (/read marks it read)")
        return out


@dataclass(frozen=True)
class Attachment:
    """A file for the asker. `path` is a temporary file that the surface owns from now on:
    it moves it where the asker gets it, or deletes it."""

    path: str
    filename: str
    text: str  # what it is, in one line
    elsewhere: str = ""  # how to get it another way, when it is too big for the surface


Reply = str | Card | tuple[Card, ...] | Attachment


def masked(reply: Reply) -> Reply:
    """`reply` with every secret the process knows masked (`bot.core.rules.secrets`) in each of its texts."""
    if isinstance(reply, str):
        return mask(reply)
    if isinstance(reply, Attachment):
        return replace(reply, text=mask(reply.text), elsewhere=mask(reply.elsewhere))
    if isinstance(reply, Card):
        return _masked_card(reply)
    return tuple(_masked_card(card) for card in reply)


def _masked_card(card: Card) -> Card:
    return replace(card, title=mask(card.title), description=mask(card.description), footer=mask(card.footer),
                   fields=tuple(Field(mask(f.name), mask(f.value), f.inline) for f in card.fields))


def reply_lines(reply: Reply) -> list[str]:
    """Any reply as plain lines (the console, and Discord's plain-text fallback)."""
    if isinstance(reply, str):
        return reply.splitlines()
    if isinstance(reply, Attachment):
        return [f"{reply.text} ({reply.filename})"]
    cards = (reply,) if isinstance(reply, Card) else reply
    out: list[str] = []
    for card in cards:
        out.extend(card.lines())
    return out
