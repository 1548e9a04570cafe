"""The typing indicator's task (`Notices.working`) ends with the agent's work, and a shutdown that
arrives while that task is still ending is never lost: once a run's cancel was swallowed there, its
dispatcher went on to wait for work that never came, and `Engine.close` waited for it forever (a test's
teardown hung under load)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bot.surfaces.discord.notices import Notices
from tests.support import wait_event


class SlowToStopChannel:
    """A channel whose typing request, once cancelled, takes a while to end (a real request closes its
    connection first): the moment a shutdown can arrive while `working` waits for the typing task."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.stopping = asyncio.Event()

    async def typing(self) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()  # the request never answers
        except asyncio.CancelledError:
            self.stopping.set()
            await asyncio.Event().wait()  # its clean-up, until the task is cancelled again
            raise


def notices_over(channel: object) -> Notices:
    link = SimpleNamespace(channel=lambda channel_id: channel)
    return Notices(link, store=None)  # type: ignore[arg-type]  # only `link.channel` is used by `working`


async def test_a_cancel_that_arrives_while_the_typing_task_ends_is_not_swallowed():
    channel = SlowToStopChannel()
    notices = notices_over(channel)
    done_working = asyncio.Event()
    group, agent = SimpleNamespace(id=1, channel_id="10"), SimpleNamespace(name="planner")

    async def run() -> str:
        async with notices.working(group, agent):
            await done_working.wait()  # the model answered
        return "went on after the cancel"

    task = asyncio.create_task(run())
    await wait_event(channel.started, "the typing request")
    done_working.set()
    await wait_event(channel.stopping, "the typing task asked to stop")  # `working` waits for its end now
    task.cancel()  # the engine shuts down just then
    await asyncio.wait([task])
    assert task.cancelled(), task.result()


async def test_the_typing_task_ends_with_the_work_and_the_work_goes_on():
    class QuickChannel:
        def __init__(self) -> None:
            self.started = asyncio.Event()

        async def typing(self) -> None:
            self.started.set()
            await asyncio.Event().wait()

    channel = QuickChannel()
    notices = notices_over(channel)
    group, agent = SimpleNamespace(id=1, channel_id="10"), SimpleNamespace(name="planner")
    before = asyncio.all_tasks()
    async with notices.working(group, agent):
        await wait_event(channel.started, "the typing request")
    assert not [t for t in asyncio.all_tasks() - before if t.get_name().startswith("typing-") and not t.done()]
