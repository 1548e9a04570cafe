"""Each agent's one lock: a group run, a direct run and a schedule's firing never overlap for an agent.

A run takes its agent's lock with `holding`; another run of the agent is told
`Busy` at once (nothing waits hidden in a queue). The dispatcher skips agents
whose lock is held and waits for one to be released (`wait_unlocked`); the
schedule ticker lets a due schedule wait while its agent is busy.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from bot.core.errors import Busy
from bot.core.models import Agent


class AgentLocks:
    def __init__(self) -> None:
        self._locks: dict[int, asyncio.Lock] = {}
        self._released: dict[int, asyncio.Event] = {}
        self._holders: dict[int, str] = {}  # agent id -> what holds its lock ("a group run")

    @property
    def running(self) -> int:
        """Runs (group or direct) in flight in this process."""
        return len(self._holders)

    def lock(self, agent_id: int) -> asyncio.Lock:
        return self._locks.setdefault(agent_id, asyncio.Lock())

    def locked(self, agent_id: int) -> bool:
        return self.lock(agent_id).locked()

    async def wait_unlocked(self, agent_id: int) -> None:
        while self.lock(agent_id).locked():
            event = self._released.setdefault(agent_id, asyncio.Event())
            await event.wait()

    @contextlib.asynccontextmanager
    async def holding(self, agent: Agent, what: str) -> AsyncIterator[None]:
        """The agent's one lock, for any run kind (`what`: "a group run", "a direct run"); Busy at
        once when another run holds it (nothing waits hidden in a queue)."""
        lock = self.lock(agent.id)
        if lock.locked():
            raise Busy(f"{agent.name} is busy with {self._holders.get(agent.id, 'another run')}; "
                       "try again when it has answered.")
        async with lock:
            self._holders[agent.id] = what
            try:
                yield
            finally:
                self._holders.pop(agent.id, None)
                self._released.pop(agent.id, asyncio.Event()).set()
