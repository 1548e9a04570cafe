"""Publishing a committed row: agents' chunks through the group's webhook, system rows as the bot.

Exactly once. Each chunk's id is recorded as soon as Discord answers. Webhook executes go out
once per attempt (`HookHttp.execute`); notices carry an enforced nonce. When an attempt may have
reached the channel without its id being recorded (a crash, a reset connection, a 5xx),
`publish(resume=True)` first reads the channel after the last recorded id and records the chunks
that did arrive, then sends the rest. A webhook execute has no nonce, and one that timed out (or
got a gateway's 502/504) may still be committed later: the channel is read back again after
growing waits (LATE_READS) before it is sent again, and after it was sent again a late copy is
looked for for a while (LATE_CHECKS) and deleted through the webhook, so one copy stays, the one
the row records. Unknown Webhook (10015) -> recreate once and resend; likewise a post that lands
in another channel (an admin moved the webhook), after deleting it there through the webhook.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import discord
from discord.http import Route

from bot.core.errors import DeliveryError
from bot.core.models import Agent, Group, Message
from bot.core.ports import HasDrafts, HasThread, Recorder
from bot.core.rules.stop import strip_terminate
from bot.surfaces.discord.cdn import Cdn
from bot.surfaces.discord.drafts import DraftHooks, publish_over
from bot.surfaces.discord.hooks import (
    HookHttp,
    MaybeLater,
    MovedWebhook,
    UnknownWebhook,
    Webhooks,
    allowed_mentions,
    hook_channel,
)
from bot.surfaces.discord.link import SCAN_LIMIT, TRANSPORT_ERRORS, Link
from bot.surfaces.discord.render import neutralize_mass_mentions, split_message

log = logging.getLogger(__name__)

# A webhook execute that timed out (or got a gateway's 502/504) may still be committed by Discord
# later. Before posting it again the channel is read back after each of these waits; after posting
# it again it is looked for at these times (seconds after), and a late copy found is deleted: often
# early, so a copy that lands in the first minute is gone within 20 s of landing.
LATE_READS = (2.0, 10.0)
LATE_CHECKS = (5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0)


def rendered(message: Message) -> str:
    """A row's text as Discord shows it: TERMINATE hidden, @everyone/@here defused."""
    text = strip_terminate(message.text) if message.author_type == "agent" else message.text
    return neutralize_mass_mentions(text)


class PublisherStore(HasThread, HasDrafts, Protocol):
    """The rows shown (and found again after a crash), and the provisional messages a row takes over."""


class Publisher:
    """Shows committed rows, chunk by chunk, each recorded once (see the module's docstring)."""

    def __init__(self, link: Link, store: PublisherStore, hooks: Webhooks, http: HookHttp, cdn: Cdn,
                 drafts: DraftHooks) -> None:
        self.link = link
        self.store = store
        self.hooks = hooks
        self.http = http
        self.cdn = cdn
        self.drafts = drafts
        self._late: dict[tuple[int, int], tuple[str, str]] = {}  # (group, seq) -> the hook of a post that may land late

    async def publish(self, group: Group, message: Message, agent: Agent | None, *,
                      resume: bool = False, record: Recorder) -> None:
        if message.author_type == "user":
            return  # people's messages are already in the channel
        chunks = split_message(rendered(message))
        if message.author_type == "agent" and message.source_run_id is not None:
            parts = await self.store.drafts.draft_parts(message.source_run_id)
            if parts:  # it was streamed: its provisional messages become its chunks
                tagged = message.tags.user_ids
                message = await publish_over(self.drafts, group, message, chunks, parts, record,
                                             lambda chunk: bool(allowed_mentions(chunk, tagged)["users"]))
        done = len(message.external_ids)
        if done >= len(chunks):
            return
        key = (group.id, message.seq)
        if resume:
            for external_id in await self._arrived_settled(group, message, agent, chunks[done:]):
                log.info("group=%s seq=%s: chunk %d had reached the channel already", group.id, message.seq, done + 1)
                self._late.pop(key, None)
                await record(external_id)
                done += 1
        for index in range(done, len(chunks)):
            if message.author_type == "agent":
                external_id = await self._post_as_agent(group, message, agent, chunks[index])
            else:
                external_id = await self._post_as_bot(group, message, index, chunks[index])
            await record(external_id)
            hook = self._late.pop(key, None)
            if hook is not None:  # posted again while the first request may still land
                self.link.spawn(self._drop_late_copy(group, message, chunks[index], external_id, hook),
                                f"late-copy-{group.id}-{message.seq}")

    async def _post_as_agent(self, group: Group, message: Message, agent: Agent | None, chunk: str) -> str:
        payload: dict[str, Any] = {
            "content": chunk,
            "username": message.author_name,  # the row's snapshot: a later rename never changes an old row
            "allowed_mentions": allowed_mentions(chunk, message.tags.user_ids),
        }
        if agent is not None and agent.avatar_url:
            payload["avatar_url"] = await self.cdn.fresh_url(agent.avatar_url)
        params = {"wait": "true"}
        if group.parent_channel_id and group.channel_id:
            params["thread_id"] = group.channel_id
        for attempt in (1, 2):
            hook_id, token = await self.http.hook(group)
            try:
                return await self.http.execute(group, hook_id, token, payload, params)
            except MaybeLater:
                self._late[(group.id, message.seq)] = (hook_id, token)
                raise
            except UnknownWebhook:
                if attempt == 2:
                    raise DeliveryError("Discord does not know the group's new webhook either") from None
                log.warning("group=%s webhook was deleted; creating a new one", group.id)
            except MovedWebhook:
                if attempt == 2:
                    where = self.link.where(group)
                    raise DeliveryError("the group's new webhook posts in another channel too", problem=(
                        f"My webhook's posts land outside {where}; check the webhooks in Server Settings > "
                        f"Integrations and give my role Manage Webhooks in {where}.")) from None
                log.warning("group=%s webhook %s was moved to another channel; creating a new one", group.id, hook_id)
            await self.hooks.forget(hook_channel(group))
        raise AssertionError("unreachable")

    async def _post_as_bot(self, group: Group, message: Message, index: int, chunk: str) -> str:
        payload = {"content": chunk, "allowed_mentions": {"parse": []},
                   # Discord drops a second create with the same nonce (e.g. discord.py repeating a 502).
                   "nonce": f"rt{group.id}.{message.seq}.{index}"[:25], "enforce_nonce": True}
        route = Route("POST", "/channels/{channel_id}/messages", channel_id=int(group.channel_id or 0))
        try:
            sent = await self.link.bot.http.request(route, json=payload)
        except discord.HTTPException as exc:
            raise self.http.refusal(group, exc.status, exc.code, None, need="Send Messages") from None
        except TRANSPORT_ERRORS as exc:
            raise DeliveryError(f"the post did not complete ({type(exc).__name__})", maybe_shown=True) from None
        return str(sent["id"])

    # finding what arrived --------------------------------------------------
    async def _arrived_settled(self, group: Group, message: Message, agent: Agent | None,
                               chunks: list[str]) -> list[str]:
        """`_arrived`; when the row's last post may still land, read again after each of LATE_READS."""
        found = await self._arrived(group, message, agent, chunks)
        waits = list(LATE_READS) if (group.id, message.seq) in self._late else []
        while not found and waits:
            log.info("group=%s seq=%s: its post may still land; looking again in %.0fs before posting it again",
                     group.id, message.seq, waits[0])
            await asyncio.sleep(waits.pop(0))
            found = await self._arrived(group, message, agent, chunks)
        return found

    async def _drop_late_copy(self, group: Group, message: Message, chunk: str, kept: str,
                              hook: tuple[str, str]) -> None:
        """A chunk was posted again (as `kept`) while an earlier request for it might still land:
        look for that copy for a while (LATE_CHECKS) and delete it through the webhook, so one stays."""
        after = await self._after(group, message, parts=False)
        where = {"thread_id": group.channel_id} if group.parent_channel_id and group.channel_id else None
        waited = 0.0
        for at in LATE_CHECKS:
            await asyncio.sleep(max(0.0, at - waited))
            waited = at
            try:
                async for seen in self.link.channel(group.channel_id or "0").history(
                        limit=SCAN_LIMIT, after=after, oldest_first=True):
                    if (str(seen.webhook_id) == hook[0] and str(seen.id) != kept and self._ours(seen, message, None)
                            and seen.content.strip() == chunk.strip()
                            and await self.store.thread.find_message_by_external_id(str(seen.id)) is None):
                        log.warning("group=%s seq=%s: an earlier attempt's post landed late; deleting that copy",
                                    group.id, message.seq)
                        await self.http.delete_post(group, f"{Route.BASE}/webhooks/{hook[0]}/{hook[1]}",
                                                    str(seen.id), group.channel_id or "", where)
                        return
            except (discord.HTTPException, *TRANSPORT_ERRORS) as exc:
                log.debug("group=%s: looking for a late copy failed: %s", group.id, type(exc).__name__)

    async def _arrived(self, group: Group, message: Message, agent: Agent | None, chunks: list[str]) -> list[str]:
        """Ids of the leading `chunks` already in the channel after the row's last recorded
        part (or after the rows before it), in order."""
        after = await self._after(group, message)
        found: list[str] = []
        try:
            async for seen in self.link.channel(group.channel_id or "0").history(
                    limit=SCAN_LIMIT, after=after, oldest_first=True):
                if len(found) == len(chunks):
                    break
                if self._ours(seen, message, agent) and seen.content.strip() == chunks[len(found)].strip():
                    found.append(str(seen.id))
        except discord.HTTPException as exc:
            raise self.http.refusal(group, exc.status, exc.code, None, need="Read Message History") from None
        except TRANSPORT_ERRORS as exc:
            raise DeliveryError(f"could not read the channel back ({type(exc).__name__})", maybe_shown=True) from None
        return found

    async def _after(self, group: Group, message: Message, *, parts: bool = True) -> discord.Object:
        """Where the row's posts can start: after its last recorded part (`parts`), or else after
        the rows before it (or the group's setup; or else the last ten minutes)."""
        anchor = (message.external_ids[-1] if parts and message.external_ids
                  else await self.store.thread.last_external_id(group.id,
                                                                before_seq=message.seq) or group.setup_message_id)
        return discord.Object(int(anchor)) if anchor else discord.Object(
            discord.utils.time_snowflake(discord.utils.utcnow()) - (600_000 << 22))

    def _ours(self, seen: discord.Message, message: Message, agent: Agent | None) -> bool:
        if message.author_type == "agent":  # posted under the row's name; a copy under the current one counts too
            names = {message.author_name} | ({agent.name} if agent else set())
            return seen.webhook_id is not None and seen.author.name in names
        return seen.webhook_id is None and self.link.bot.user is not None and seen.author.id == self.link.bot.user.id
