"""A command's answer when it is a table of facts (status, list, show, why, usage).

Discord shows a `Card` as an embed (title, fields, colour, thumbnail, footer);
the console prints `Card.lines()`. Plain answers stay plain text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Tone = Literal["neutral", "good", "warning", "bad"]


@dataclass(frozen=True)
class Field:
    name: str
    value: str
    inline: bool = True


@dataclass(frozen=True)
class Card:
    title: str
    description: str = ""
    fields: tuple[Field, ...] = ()
    tone: Tone = "neutral"
    thumbnail_url: str | None = None
    footer: str = ""

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
        return out


Reply = str | Card | tuple[Card, ...]


def reply_lines(reply: Reply) -> list[str]:
    """Any reply as plain lines (the console, and Discord's plain-text fallback)."""
    if isinstance(reply, str):
        return reply.splitlines()
    cards = (reply,) if isinstance(reply, Card) else reply
    out: list[str] = []
    for card in cards:
        out.extend(card.lines())
    return out
