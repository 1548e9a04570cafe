"""`roundtable run` as a child process against the test's Discord emulator and model server,
to be killed (-9), stopped (SIGTERM) and started again on the same database.

Groups are set up straight in the database (group, webhook, agents), so a test
spends its time on the faults, not on slash commands. The database is a SQLite file in
tmp_path by default, or a `Place` (e.g. a fresh PostgreSQL schema) given to the process.
`check_once` is the exactly-once check every crash test ends with.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import signal
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.core.models import GroupSettings
from bot.core.rules.stop import strip_terminate
from bot.surfaces.discord.render import neutralize_mass_mentions, split_message
from storage import open_store
from tests.discord_emulator import DiscordEmulator
from tests.fakes.databases import Place, SqlitePlace
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply
from tests.support import eventually, quiet_period
from tests.support.spawn import start_roundtable


class UniqueReplies(GroupChatScript):
    """Every agent reply is different ("echo reply 7"), so a post shown twice is visible.
    `hang` makes the next participant calls wait (a model call in flight while the bot dies).
    A streamed reply comes in pieces of `piece` characters `every` seconds apart; `hold_end`
    (an event) keeps the next streamed reply from finishing until it is set."""

    def __init__(self, *, long: bool = False, delay: float = 0.0) -> None:
        super().__init__(selector=lambda body: "TERMINATE")
        self._n = itertools.count(1)
        self.long = long
        self.delay = delay
        self.hang = 0
        self.every = 0.0
        self.piece = 60
        self.hold_end: asyncio.Event | None = None
        self.texts: list[str] = []  # every participant reply, in order

    def _participant(self, name: str) -> Any:
        self.participant_order.append(name)
        n = next(self._n)
        text = f"{name} reply {n}."
        if self.long:  # about 5,000 characters: three chunks
            text += "\n\n" + "\n\n".join(f"Part {n}.{i}: " + "plenty of words " * 100 for i in range(3))
        self.texts.append(text)
        pieces = [text[i:i + self.piece] for i in range(0, len(text), self.piece)]
        hold_end, self.hold_end = self.hold_end, None
        if self.hang:
            self.hang -= 1
            return Reply(text=text, delay=120)
        return Reply(text=text, delay=self.delay, pieces=pieces, every=self.every, hold_end=hold_end)


@dataclass
class Channel:
    channel_id: str
    group_id: int


class BotProcess:
    def __init__(self, tmp_path: Path, emu: DiscordEmulator, llm: FakeOpenAI, *, name: str = "bot",
                 env: dict[str, str] | None = None, place: Place | None = None) -> None:
        self.tmp_path = tmp_path
        self.emu = emu
        self.llm = llm
        self.db = place.path if isinstance(place, SqlitePlace) else tmp_path / "roundtable.db"  # the SQLite file
        self.place = None if isinstance(place, SqlitePlace) else place  # another database, e.g. a PostgreSQL schema
        self.log = tmp_path / f"{name}.log"
        self.env = env or {}  # more settings (e.g. ROUNDTABLE_SHARDS)
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    # the database ------------------------------------------------------------
    @property
    def target(self) -> str:
        """ROUNDTABLE_DB of the process (a test may point `db` at another file before it starts)."""
        return self.place.target if self.place is not None else str(self.db)

    async def add_group(self, channel_id: str, agents: tuple[str, ...] = ("echo",), *, guild_id: str | None = None,
                        **settings: Any) -> Channel:
        """A group in `channel_id` (tags mode by default) with its webhook and agents, as /roundtable setup makes it."""
        store = await open_store(self.target)
        try:
            hook = self.emu.add_webhook(channel_id, "Roundtable")
            await store.webhooks.save_webhook(channel_id, hook.id, hook.token)
            group = await store.groups.create_group(
                f"discord:{channel_id}", f"#{self.emu.channels[channel_id].name}",
                GroupSettings(**{"mode": "tags", **settings}), guild_id=guild_id or self.emu.guild_id,
                channel_id=channel_id,
                setup_message_id=self.emu.snowflake())
            for name in agents:
                await store.roster.add_agent(group.id, name, f"{name}s", f"You are {name}.")
            return Channel(channel_id, group.id)
        finally:
            await store.close()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of `sql` (`?` placeholders), read beside the bot as an operator would. Blocking,
        like sqlite3: another place's query runs on its own event loop in a worker thread."""
        if self.place is None:
            with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30) as conn:
                return conn.execute(sql, params).fetchall()
        place = self.place
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(lambda: asyncio.run(place.fetch(sql, params))).result(timeout=30)

    # the process -------------------------------------------------------------
    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ROUNDTABLE_", "DISCORD_"))}
        env.update(DISCORD_TOKEN=self.emu.token, DISCORD_API_BASE_URL=self.emu.api_base,
                   DISCORD_GUILD_ID=self.emu.guild_id, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=self.llm.base_url,
                   ROUNDTABLE_DB=self.target, ROUNDTABLE_LOG_LEVEL="INFO", ROUNDTABLE_LLM_RETRIES="0")
        env.update(self.env)  # (may set the ones above, e.g. ROUNDTABLE_LOG_LEVEL)
        sessions = set(self.emu.sessions)
        self.starts += 1
        with open(self.log, "a") as log:
            log.write(f"\n===== start {self.starts} =====\n")
            log.flush()
            self.proc = await start_roundtable(
                "--env-file", os.devnull, "run",
                stdout=log, stderr=log, env=env, cwd=self.tmp_path)
        await self.emu.wait_for(
            lambda: any(s.ready for k, s in self.emu.sessions.items() if k not in sessions) or self.exited(),
            timeout=90, what="the bot's gateway session")  # a start is slow under load
        assert not self.exited(), self.tail()

    def exited(self) -> bool:
        return self.proc is None or self.proc.returncode is not None

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        await self.proc.wait()

    async def terminate(self, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            await self.kill()

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text().splitlines()[-lines:]) if self.log.exists() else "(no log)"

    # settling and checking ---------------------------------------------------
    def settled(self) -> bool:
        """Nothing left to route, run or show in any group."""
        (running,) = self.query("SELECT COUNT(*) FROM runs WHERE status = 'running'")[0]
        (unshown,) = self.query("SELECT COUNT(*) FROM messages WHERE confirmed = 0")[0]
        (behind,) = self.query(
            "SELECT COUNT(*) FROM agents a JOIN groups g ON g.id = a.group_id"
            " WHERE a.removed_at IS NULL AND a.enabled = 1 AND a.delivered_through < g.latest_seq")[0]
        (unrouted,) = self.query("SELECT COUNT(*) FROM groups WHERE routed_through < latest_seq")[0]
        (drafts,) = self.query("SELECT COUNT(*) FROM drafts")[0]  # provisional messages not finished or taken back
        return (running, unshown, behind, unrouted, drafts) == (0, 0, 0, 0, 0)

    async def wait_settled(self, timeout: float = 90) -> None:
        async def stable() -> bool:
            if not self.settled():
                return False
            await quiet_period(0.5)  # and stays so (a late catch-up would add rows)
            return self.settled()
        try:
            await eventually(stable, "the bot to settle", timeout=timeout, interval=0.1)
        except TimeoutError:
            raise AssertionError(f"the bot did not settle; its log ends:\n{self.tail()}") from None


def check_once(bot: BotProcess, channels: list[Channel]) -> dict[str, int]:
    """Every person's message in each channel is stored once, in Discord's order, and
    answered; every agent row is in the channel exactly once, chunk by chunk, showing
    what a whole post of it shows (no half reply), and nothing else was posted as an
    agent. Returns counts for the test's own checks."""
    emu, totals = bot.emu, {"people": 0, "replies": 0}
    for channel in channels:
        in_discord = [m for m in emu.channel_messages(channel.channel_id)]
        people = [m["id"] for m in in_discord if not m.get("webhook_id") and m["author"]["id"] != emu.bot_user_id]
        rows = bot.query("SELECT seq, author_type, external_ids, confirmed, text FROM messages WHERE group_id = ?"
                         " ORDER BY seq", (channel.group_id,))
        stored_people = [eval_ids(r[2])[0] for r in rows if r[1] == "user"]
        assert stored_people == people, f"channel {channel.channel_id}: {len(stored_people)} stored of {len(people)}"
        posted = [m for m in in_discord if m.get("webhook_id")]
        agent_ids = [i for r in rows if r[1] == "agent" for i in eval_ids(r[2])]
        assert sorted(agent_ids, key=int) == agent_ids, "agent chunks in seq order"
        assert agent_ids == [m["id"] for m in posted], (
            f"channel {channel.channel_id}: agent rows {len(agent_ids)} chunk ids vs {len(posted)} webhook posts")
        contents = [m["content"] for m in posted]
        assert len(set(contents)) == len(contents), "a reply was posted twice"
        chunks = [c for r in rows if r[1] == "agent"
                  for c in split_message(neutralize_mass_mentions(strip_terminate(r[4])))]
        assert contents == chunks, f"channel {channel.channel_id}: what the agent messages show is not the replies"
        if people:
            last_person = max(r[0] for r in rows if r[1] == "user")
            (answered,) = bot.query("SELECT COUNT(*) FROM runs WHERE group_id = ? AND status = 'posted'"
                                    " AND snapshot_seq >= ?", (channel.group_id, last_person))[0]
            assert answered >= 1, f"channel {channel.channel_id}: the last message was never answered"
        totals["people"] += len(people)
        totals["replies"] += sum(1 for r in rows if r[1] == "agent")
    return totals


def eval_ids(text: str) -> list[str]:
    import json

    return [str(i) for i in json.loads(text)]
