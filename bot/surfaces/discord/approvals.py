"""Tool calls held for approval on Discord (SPEC §6b "Approval").

The agent's provisional message shows what it wants to run, and carries two buttons, Approve
and Deny, before its ⏹ Stop (`custom_id` `roundtable:approval:<key>:yes|no`, `APPROVE_ID`;
`bot.surfaces.discord.controls`); the group's webhook belongs to the application, so its
messages can carry them. A run with no provisional message yet posts it then, and its reply is
finished in it. A worker's run is private: it asks in a message of its own. A press by the person whose message started
the episode, or by an operator, decides; anyone else is told privately who may. Nobody pressing
within the group's `approval_timeout` denies. Then the request line becomes the decision and who
made it, and Approve / Deny go (Stop stays while the run works).

Decisions are in memory (`Waiting`): a press that finds nothing waiting (the run ended, or a
restart came between) is told the request is no longer open; a run that was waiting when the
process stopped asks again when it resumes (its journal row is still `pending`).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from bot.core.models import Agent, Approval, ApprovalAsk

log = logging.getLogger(__name__)

APPROVE_ID = r"roundtable:approval:(?P<key>[0-9.]+):(?P<choice>yes|no)"
ARGUMENTS_SHOWN = 600  # characters of a call's arguments shown in the request


def custom_id(key: str, approve: bool) -> str:
    return f"roundtable:approval:{key}:{'yes' if approve else 'no'}"


def decision_buttons(key: str) -> list[dict[str, object]]:
    """Approve (green) and Deny (red)."""
    return [{"type": 2, "style": 3, "label": "Approve", "custom_id": custom_id(key, True)},
            {"type": 2, "style": 4, "label": "Deny", "custom_id": custom_id(key, False)}]


def buttons(key: str) -> list[dict[str, object]]:
    """One action row: Approve and Deny."""
    return [{"type": 1, "components": decision_buttons(key)}]


def request_text(agent: Agent, ask: ApprovalAsk) -> str:
    arguments = ask.arguments if len(ask.arguments) <= ARGUMENTS_SHOWN else ask.arguments[:ARGUMENTS_SHOWN] + "…"
    who = f"<@{ask.starter_user_id}> or an operator" if ask.starter_user_id else "An operator"
    arguments = arguments.replace("`", "'")
    return (f"⏸️ {agent.name} wants to run **{ask.tool}** with `{arguments}`.\n"
            f"{who}: Approve or Deny (denied after {ask.timeout:g} s without an answer).")


def outcome_text(agent: Agent, ask: ApprovalAsk, decision: Approval) -> str:
    if decision.approved:
        return f"✅ {agent.name}'s call of **{ask.tool}** was approved by {decision.by}."
    if decision.by:
        return f"🚫 {agent.name}'s call of **{ask.tool}** was denied by {decision.by}."
    return f"🚫 {agent.name}'s call of **{ask.tool}** was denied: nobody approved it within {ask.timeout:g} s."


@dataclass
class Held:
    ask: ApprovalAsk
    group_id: int
    decided: asyncio.Future[Approval] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Waiting:
    """The calls of this process waiting for a press, by key."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}

    def hold(self, group_id: int, ask: ApprovalAsk) -> Held:
        held = self._held[ask.key] = Held(ask, group_id)
        return held

    def get(self, key: str) -> Held | None:
        return self._held.get(key)

    def of(self, group_id: int, agent_name: str) -> Held | None:
        """The agent's call in the group that waits for a press now (its calls run one at a time)."""
        return next((h for h in self._held.values() if h.group_id == group_id and h.ask.agent_name == agent_name
                     and not h.decided.done()), None)

    def release(self, key: str) -> None:
        self._held.pop(key, None)

    async def wait(self, held: Held) -> Approval:
        """The decision, or a denial by timeout after the ask's timeout."""
        try:
            async with asyncio.timeout(held.ask.timeout):
                return await asyncio.shield(held.decided)
        except TimeoutError:
            return Approval(False)
        finally:
            self.release(held.ask.key)

    def decide(self, key: str, approved: bool, by: str) -> bool:
        """Settle a waiting call; False when it is not waiting (any more)."""
        held = self._held.get(key)
        if held is None or held.decided.done():
            return False
        held.decided.set_result(Approval(approved, by))
        log.info("group=%s: %s's call of %s %s by %s", held.group_id, held.ask.agent_name, held.ask.tool,
                 "approved" if approved else "denied", by)
        return True

