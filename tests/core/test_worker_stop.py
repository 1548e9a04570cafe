"""A group's worker (dispatcher, outbox) told to stop for good ends, even when the pass it was in
lost the cancel that `stop` sent (a part swallowing it, as the typing indicator's once did; Python
3.11's `asyncio.wait_for` can too, when what it waits for ends at the same moment): it never goes
back to waiting for work, which left `Engine.close` waiting for it forever."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine

from bot.core.runtime.worker import GroupWorker, RetryPolicy
from tests.support import bound, wait_event


class LosesTheCancel(GroupWorker):
    """A pass that waits for nothing in particular and loses the cancel it gets there."""

    def __init__(self, tasks: list[asyncio.Task[object]]) -> None:
        def spawn(coro: Coroutine[object, object, object], name: str) -> asyncio.Task[object]:
            task = asyncio.create_task(coro, name=name)
            tasks.append(task)
            return task

        super().__init__(1, retry=RetryPolicy(), lost=lambda group_id: None, spawn=spawn)
        self.draining = asyncio.Event()

    async def drain(self) -> None:
        self.draining.set()
        with contextlib.suppress(asyncio.CancelledError):  # lost: the pass ends as if its work were done
            await asyncio.Event().wait()


async def test_a_stopped_worker_ends_even_when_its_pass_lost_the_cancel():
    tasks: list[asyncio.Task[object]] = []
    worker = LosesTheCancel(tasks)
    worker.start()
    await wait_event(worker.draining, "the worker's pass")
    worker.stop()
    done, _ = await asyncio.wait(tasks, timeout=bound())
    assert done == set(tasks), "the stopped worker went back to waiting for work"
