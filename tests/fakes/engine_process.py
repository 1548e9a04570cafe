"""An engine in a process of its own, for tests of several processes on one database:

    python -m tests.fakes.engine_process TARGET NAME --posts 3 [--delay 0.4] [--hang-from 2]
        [--base-url URL --mcp-config FILE]

Opens the store at TARGET, runs an engine over the group `console:main` (scope `console:main`,
a scripted model whose planner takes `--delay` seconds a call and answers "planner answers
NAME#k"; from its `--hang-from`th call on it never answers: the process is busy until killed),
posts `--posts` messages "@planner question NAME-i" a little apart, then waits until
every row of the group is delivered and confirmed, and exits 0. Leases are kept every 0.1 s.

With `--base-url`, the model is the real openai client against that server instead (a test's
FakeOpenAI), and `--mcp-config` names the MCP servers' file whose tools the agents may be granted
(started with the engine, as `roundtable run` does).
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
from collections.abc import Sequence
from typing import Any

from bot.core.models import ChatMessage, Completion
from bot.core.runtime.engine import Engine
from bot.core.runtime.worker import RetryPolicy
from bot.llm.tokens import make_token_counter
from storage import open_store
from tests.fakes.scripted_llm import ScriptedLLM, kind_of
from tests.fakes.surface import RecordingSurface


class SlowLLM(ScriptedLLM):
    delay: float = 0.0
    hang_from: int = 0  # 0: every call answers

    async def complete(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Completion:
        if kind_of(messages)[0] == "participant":
            number = len(self.participant_order) + 1
            print(f"calling {number}", flush=True)
            if self.hang_from and number >= self.hang_from:
                await asyncio.Event().wait()
            await asyncio.sleep(self.delay)
        return await super().complete(messages, **kwargs)


async def main(target: str, name: str, posts: int, delay: float, hang_from: int = 0, base_url: str | None = None,
               mcp_config: str | None = None) -> int:
    from bot.core.features.tools import ToolRegistry
    from bot.llm.mcp_tools import McpServers
    from bot.llm.openai_llm import OpenAILLM

    calls = itertools.count(1)
    counter = make_token_counter()
    llm: Any
    if base_url is not None:
        llm = OpenAILLM(api_key="sk-test", base_url=base_url, default_model="fake-model", timeout=30, max_retries=0,
                        counter=counter)
    else:
        llm = SlowLLM(default_agent_reply=lambda agent, n: f"{agent} answers {name}#{next(calls)}")
        llm.delay, llm.hang_from = delay, hang_from
    servers = McpServers.from_environment({"ROUNDTABLE_MCP_CONFIG": mcp_config or ""})
    await servers.start()
    store = await open_store(target)
    engine = Engine(store, llm, RecordingSurface(), counter, scope="console:main",
                    retry=RetryPolicy(first=0.02, factor=2.0, cap=0.2), tools=ToolRegistry(servers.servers))
    engine.ownership.tick = 0.1
    store.owner_label = f"engine {name}"
    try:
        await engine.start()
        group = await store.groups.find_group("console:main")
        assert group is not None
        print(f"started pid {os.getpid()} owner={engine.owns(group.id)}", flush=True)
        for i in range(posts):
            await engine.post_user_message(await store.groups.get_group(group.id), author_name=name, user_id=name,
                                           text=f"@planner question {name}-{i}")
            await asyncio.sleep(0.05)
        print("posted", flush=True)
        while True:
            group = await store.groups.get_group(group.id)
            agents = await store.roster.list_agents(group.id)
            if all(a.delivered_through == group.latest_seq for a in agents) and \
                    not await store.posting.unconfirmed_messages(group.id):
                break
            await asyncio.sleep(0.05)
        print("all answered", flush=True)
        return 0
    finally:
        await engine.close()
        await store.close()
        await servers.close()
        if base_url is not None:
            await llm.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("name")
    parser.add_argument("--posts", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--hang-from", type=int, default=0)
    parser.add_argument("--base-url")
    parser.add_argument("--mcp-config")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.target, args.name, args.posts, args.delay, args.hang_from, args.base_url,
                              args.mcp_config)))
