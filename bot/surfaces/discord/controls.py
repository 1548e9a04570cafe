"""The buttons on an agent's provisional message (SPEC §8 "People steer a reply", §6b "Approval").

While a run works, its provisional messages carry ⏹ Stop (`custom_id`
`roundtable:stop:<group id>.<agent id>`, `STOP_ID`): it names the agent's run in the group,
not one run, so a message an interrupted run left and the next run took over stops that
run. While one of its tool calls waits for approval they carry Approve and Deny before it
(`bot.surfaces.discord.approvals`). The committed reply's final edit removes them all.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

STOP_ID = r"roundtable:stop:(?P<group>[0-9]+)\.(?P<agent>[0-9]+)"
STOP_LABEL, STOP_EMOJI = "Stop", "⏹️"


def stop_custom_id(group_id: int, agent_id: int) -> str:
    return f"roundtable:stop:{group_id}.{agent_id}"


def stop_button(group_id: int, agent_id: int) -> dict[str, Any]:
    return {"type": 2, "style": 2, "label": STOP_LABEL, "emoji": {"name": STOP_EMOJI},
            "custom_id": stop_custom_id(group_id, agent_id)}


def action_row(buttons: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One action row holding `buttons`."""
    return [{"type": 1, "components": [dict(b) for b in buttons]}]
