"""The requests behind streamed replies (`bot.surfaces.discord.drafts`): provisional messages
posted, edited and deleted through the group's webhook, and the ones that landed unrecorded
found by reading the channel back. `DraftWire` implements `DraftHooks`."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

import discord
from discord.http import Route

from bot.core.errors import DeliveryError
from bot.core.models import Agent, DraftPart, Group
from bot.core.ports import HasDrafts, HasThread
from bot.surfaces.discord.asking import Asks
from bot.surfaces.discord.cdn import Cdn
from bot.surfaces.discord.drafts import DRAFT_TIMEOUT, Controls, HookPace
from bot.surfaces.discord.hooks import (
    NO_MENTIONS,
    POST_TIMEOUT,
    UNKNOWN_MESSAGE,
    UNKNOWN_WEBHOOK,
    HookHttp,
    allowed_mentions,
)
from bot.surfaces.discord.link import SCAN_LIMIT, TRANSPORT_ERRORS, Link

log = logging.getLogger(__name__)

SHOWN_KEPT = 2000  # our messages whose latest content is remembered (to skip an edit that changes nothing)


class DraftWireStore(HasDrafts, HasThread, Protocol):
    """The provisional messages recorded, and the rows (a message found is no row's part)."""


class DraftWire:
    """Implements `DraftHooks`: provisional messages through the group's webhook, and what they show."""

    def __init__(self, link: Link, store: DraftWireStore, http: HookHttp, cdn: Cdn, asks: Asks) -> None:
        self.link = link
        self.store = store
        self.http = http
        self.cdn = cdn
        self.asks = asks
        self._shown: dict[str, str] = {}  # message id -> the content Discord last accepted for it
        self._buttoned: set[str] = set()  # our messages that may carry buttons (a final edit removes them)

    def pace(self, group: Group) -> HookPace:
        return self.http.pace(group)

    def shown(self, message_id: str) -> str | None:
        return self._shown.get(message_id)

    def controls(self, group: Group, agent: Agent) -> Controls:
        return self.asks.controls(group, agent)

    def notes(self, run_id: int) -> str:
        return self.asks.notes(run_id)

    def spawn(self, coro: Coroutine[object, object, None], name: str) -> asyncio.Task[None]:
        return self.link.spawn(coro, name)

    async def draft_post(self, group: Group, agent: Agent, chunk: str, *, components: Controls = ()) -> str:
        payload: dict[str, Any] = {"content": chunk, "username": agent.name, "allowed_mentions": NO_MENTIONS,
                                   "components": list(components)}
        if agent.avatar_url:
            payload["avatar_url"] = await self.cdn.fresh_url(agent.avatar_url)
        status, body = await self.http.call(group, "POST", None, payload, timeout=DRAFT_TIMEOUT)
        if 200 <= status < 300 and isinstance(body, dict) and "id" in body:
            landed = str(body.get("channel_id") or group.channel_id)
            if group.channel_id and landed != group.channel_id:  # the webhook was moved: the post shows it
                hook_id, token = await self.http.hook(group)
                await self.http.delete_post(group, f"{Route.BASE}/webhooks/{hook_id}/{token}", str(body["id"]),
                                            landed)
                raise DeliveryError("the webhook posts in another channel", problem="the webhook was moved")
            self._remember(str(body["id"]), chunk)
            if components:
                self._buttoned.add(str(body["id"]))
            return str(body["id"])
        code = body.get("code") if isinstance(body, dict) else None
        raise self.http.refusal(group, status, code, body, need="Manage Webhooks and Send Messages")

    async def draft_edit(self, group: Group, message_id: str, chunk: str, *, tagged: Sequence[str] = (),
                         final: bool = False, components: Controls | None = None) -> bool:
        if final:
            components = []  # a committed reply carries no buttons (SPEC §8)
        if self._shown.get(message_id) == chunk and components is None:
            return True
        if self._shown.get(message_id) == chunk and not components and message_id not in self._buttoned:
            return True
        payload: dict[str, Any] = {"content": chunk, "allowed_mentions": allowed_mentions(chunk, tuple(tagged))
                                   if final else NO_MENTIONS}
        if components is not None:
            payload["components"] = list(components)
        status, body = await self.http.call(group, "PATCH", message_id, payload,
                                            timeout=POST_TIMEOUT if final else DRAFT_TIMEOUT)
        if 200 <= status < 300:
            self._remember(message_id, chunk)
            if components:
                self._buttoned.add(message_id)
            elif components is not None:
                self._buttoned.discard(message_id)
            return True
        code = body.get("code") if isinstance(body, dict) else None
        if status == 404 and code in (UNKNOWN_MESSAGE, UNKNOWN_WEBHOOK):
            return False
        raise self.http.refusal(group, status, code, body, need="Manage Webhooks and Send Messages")

    async def draft_delete(self, group: Group, message_id: str) -> None:
        status, body = await self.http.call(group, "DELETE", message_id, None, timeout=DRAFT_TIMEOUT)
        code = body.get("code") if isinstance(body, dict) else None
        if status == 404 and code == UNKNOWN_WEBHOOK:  # made by a webhook deleted since: delete it as the bot
            try:
                await self.link.bot.http.delete_message(int(group.channel_id or 0), int(message_id))
            except discord.NotFound:
                pass
            except discord.Forbidden:
                log.warning("group=%s: provisional message %s of a deleted webhook stays (deleting it needs Manage "
                            "Messages)", group.id, message_id)
            except (discord.HTTPException, *TRANSPORT_ERRORS) as exc:
                raise DeliveryError(f"could not delete a provisional message ({type(exc).__name__})") from None
        elif not (200 <= status < 300 or status == 404):
            raise self.http.refusal(group, status, code, body, need="Manage Webhooks")
        self._shown.pop(message_id, None)
        self._buttoned.discard(message_id)

    async def settle_parts(self, group: Group, parts: Sequence[DraftPart]) -> list[DraftPart]:
        pending = [p for p in parts if p.external_id is None]
        if not pending:
            return list(parts)
        found = await self._find_parts(group, pending, {p.external_id for p in parts if p.external_id})
        for part in pending:
            if part.id in found:
                log.info("group=%s run=%s: a provisional message had landed unrecorded (%s)", group.id, part.run_id,
                         found[part.id])
                await self.store.drafts.draft_posted(part.id, found[part.id])
        await self.store.drafts.drop_drafts(p.id for p in pending if p.id not in found)
        return [replace(p, external_id=found.get(p.id, p.external_id)) for p in parts
                if p.external_id is not None or p.id in found]

    async def _find_parts(self, group: Group, pending: Sequence[DraftPart], known: set[str | None]) -> dict[int, str]:
        """The ids of the channel's webhook messages that carry the pending parts' texts under their
        authors' names, posted since shortly before the earliest of them; by part id."""
        since = datetime.fromtimestamp(min(p.created_at for p in pending) - 60, tz=UTC)
        found: dict[int, str] = {}
        try:
            async for seen in self.link.channel(group.channel_id or "0").history(
                    limit=SCAN_LIMIT, after=discord.Object(discord.utils.time_snowflake(since)), oldest_first=True):
                if seen.webhook_id is None or str(seen.id) in known:
                    continue
                for part in pending:
                    if (part.id not in found and seen.author.name == part.author_name
                            and seen.content.strip() == part.text.strip()
                            and await self.store.thread.find_message_by_external_id(str(seen.id)) is None):
                        found[part.id] = str(seen.id)
                        known.add(str(seen.id))
                        break
        except discord.HTTPException as exc:
            raise self.http.refusal(group, exc.status, exc.code, None, need="Read Message History") from None
        except TRANSPORT_ERRORS as exc:
            raise DeliveryError(f"could not read the channel back ({type(exc).__name__})") from None
        return found

    def _remember(self, message_id: str, content: str) -> None:
        self._shown.pop(message_id, None)
        self._shown[message_id] = content
        while len(self._shown) > SHOWN_KEPT:
            self._shown.pop(next(iter(self._shown)))
