"""Writing rows the way the engine does, for store and context tests."""
from __future__ import annotations

from typing import Protocol

from bot.core.models import FinishedRun, Message, NewMessage, RunResult, Usage
from bot.core.ports import HasGroups, HasRoster, HasRuns


class ReplyStore(HasGroups, HasRoster, HasRuns, Protocol):
    """What writing a reply asks: the group's latest row, the agent, its run."""


async def agent_reply(
    store: ReplyStore, group_id: int, agent_id: int, text: str = "reply", *, snapshot: int | None = None,
    cap: int = 1000, token_count: int = 0, usage: Usage | None = None,
) -> FinishedRun:
    """A group run of the agent over `snapshot` (default: the latest row) that posts `text`."""
    if snapshot is None:
        snapshot = (await store.groups.get_group(group_id)).latest_seq
    agent = await store.roster.get_agent(agent_id)
    run = await store.runs.start_run(group_id, agent_id, "group", snapshot)
    reply = NewMessage("agent", agent.name, text, author_agent_id=agent_id, source_run_id=run.id,
                       token_count=token_count)
    return await store.runs.finish_run(run.id, RunResult("posted", usage or Usage(), reply=reply), cap=cap)


async def posted(store: ReplyStore, group_id: int, agent_id: int, text: str = "reply", **kwargs: object) -> Message:
    """The reply row of `agent_reply` (which must be posted)."""
    finished = await agent_reply(store, group_id, agent_id, text, **kwargs)  # type: ignore[arg-type]
    assert finished.reply is not None, finished.run
    return finished.reply
