"""Approval on Discord (`bot.surfaces.discord.approvals`): a tool call held for a press of
Approve or Deny, asked on the agent's provisional message (its buttons and the request line
under its text), or, for a worker, in a message of its own.

`Asks`: the calls held and the lines shown for them, which the provisional messages read
(`controls`, `notes`). `Asking`: the runs' drafts and the asking itself."""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from bot.core.errors import DeliveryError
from bot.core.models import Agent, Approval, ApprovalAsk, DraftPart, Group
from bot.core.ports import HasDrafts
from bot.surfaces.discord.approvals import Waiting, buttons, decision_buttons, outcome_text, request_text
from bot.surfaces.discord.cdn import Cdn
from bot.surfaces.discord.controls import action_row, stop_button
from bot.surfaces.discord.drafts import Controls, DiscordDraft, DraftHooks
from bot.surfaces.discord.hooks import NO_MENTIONS, POST_TIMEOUT, HookHttp
from bot.surfaces.discord.link import Link

log = logging.getLogger(__name__)


class Asks:
    """The tool calls of this process held for a press, and the lines shown under each run's reply."""

    def __init__(self) -> None:
        self.approvals = Waiting()  # tool calls held for a press of Approve or Deny
        self.lines: dict[int, dict[str, str]] = {}  # run id -> approval key -> its line (request, then decision)

    def controls(self, group: Group, agent: Agent) -> Controls:
        held = self.approvals.of(group.id, agent.name)
        deciding = decision_buttons(held.ask.key) if held is not None else []
        return action_row([*deciding, stop_button(group.id, agent.id)])

    def notes(self, run_id: int) -> str:
        return "\n".join(self.lines.get(run_id, {}).values())


class Asking:
    """The drafts of the runs being written, and the approvals asked on them (or apart)."""

    def __init__(self, link: Link, store: HasDrafts, wire: DraftHooks, http: HookHttp, cdn: Cdn, asks: Asks) -> None:
        self.link = link
        self.store = store
        self.wire = wire
        self.http = http
        self.cdn = cdn
        self.asks = asks
        self._drafts: dict[tuple[int, int], DiscordDraft] = {}  # (group, agent) -> its run's draft, while it shows
        self._asked: dict[int, DiscordDraft] = {}  # run id -> the draft an approval began (its reply did not stream)

    def draft(self, group: Group, agent: Agent, run_id: int, parts: Sequence[DraftPart],
              text: Callable[[], str]) -> DiscordDraft | None:
        if self.link.closed or self.link.client is None:
            return None
        draft = self._drafts[(group.id, agent.id)] = DiscordDraft(self.wire, group, agent, run_id, parts, text)
        return draft

    async def approve(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        """Ask on the agent's provisional message (`bot.surfaces.discord.approvals`): the request
        line under what it shows, Approve / Deny before its Stop; a press (or the timeout) decides,
        and the line becomes the decision. A run that shows no provisional message yet (nothing
        streamed) posts it now: the reply is finished in it. A worker, whose runs are private,
        asks in a message of its own."""
        if agent.mode == "worker" or self.link.closed or self.link.client is None:
            return await self._approve_apart(group, agent, ask)
        draft = self._drafts.get((group.id, agent.id))
        run_id = int(ask.key.split(".")[0])
        if draft is None or not draft.live or draft.run_id != run_id:
            draft = self._asked.get(run_id)
            if draft is None:
                parts = await self.store.drafts.draft_parts(run_id)
                draft = self._asked[run_id] = DiscordDraft(self.wire, group, agent, run_id, parts, lambda: "")
        lines = self.asks.lines.setdefault(run_id, {})
        held = self.asks.approvals.hold(group.id, ask)
        lines[ask.key] = request_text(agent, ask)
        draft.grew()
        try:
            decision = await self.asks.approvals.wait(held)
            lines[ask.key] = outcome_text(agent, ask, decision)
        except BaseException:  # a cancel (⏹ Stop) above all; re-raised
            lines.pop(ask.key, None)  # stopped while it waited
            raise
        finally:
            draft.grew()
        return decision

    async def _approve_apart(self, group: Group, agent: Agent, ask: ApprovalAsk) -> Approval:
        """Post the request with Approve / Deny as the agent and wait for a press (or the timeout);
        then show the decision without the buttons. A request that cannot be posted is denied
        (nobody could have approved it)."""
        approvals = self.asks.approvals
        held = approvals.hold(group.id, ask)
        payload: dict[str, Any] = {"content": request_text(agent, ask), "username": agent.name,
                                   "components": buttons(ask.key),
                                   "allowed_mentions": {"parse": [], "users": [ask.starter_user_id]
                                                        if ask.starter_user_id else [], "replied_user": False}}
        if agent.avatar_url:
            payload["avatar_url"] = await self.cdn.fresh_url(agent.avatar_url)
        try:
            status, body = await self.http.call(group, "POST", None, payload, timeout=POST_TIMEOUT)
        except DeliveryError as exc:
            approvals.release(ask.key)
            log.warning("group=%s: could not ask for approval of %s (%s); denied", group.id, ask.tool, exc)
            return Approval(False, why="the request for approval could not be posted")
        if not (200 <= status < 300 and isinstance(body, dict) and "id" in body):
            approvals.release(ask.key)
            log.warning("group=%s: could not ask for approval of %s (HTTP %s); denied", group.id, ask.tool, status)
            return Approval(False, why="the request for approval could not be posted")
        decision = await approvals.wait(held)
        try:
            await self.http.call(group, "PATCH", str(body["id"]), {
                "content": outcome_text(agent, ask, decision), "components": [], "allowed_mentions": NO_MENTIONS},
                timeout=POST_TIMEOUT)
        except DeliveryError as exc:
            log.warning("group=%s: could not show the decision on %s's request (%s)", group.id, agent.name, exc)
        return decision

    async def done(self, run_id: int) -> None:
        """The run is over (its reply is shown, or its messages are taken back): the message an
        approval posted for it ends its updates first, and its lines are dropped."""
        asked = self._asked.pop(run_id, None)
        if asked is not None:
            await asked.finish()
        self.asks.lines.pop(run_id, None)
