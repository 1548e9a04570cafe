"""Two `roundtable run` processes as shards 0 and 1 of 2, on one database (a SQLite file, or one
PostgreSQL schema), against the emulator with guilds on both shards: each guild's messages are
taken in and answered once, by its shard."""
from __future__ import annotations

import pytest

from bot.core.rules.shards import shard_of
from tests.discord.process import BotProcess, UniqueReplies, check_once
from tests.discord_emulator import DiscordEmulator
from tests.fakes.databases import Place
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.slow  # two bot processes, a shard each: CI runs it, the default run leaves it out


def guilds_on_both_shards(emu: DiscordEmulator) -> dict[int, tuple[str, str, str]]:
    """Shard -> (guild id, its channel, a member who posts there); the emulator's own guild is one of them."""
    found = {shard_of(int(emu.guild_id), 2): (emu.guild_id, emu.channel_id, emu.alice_id)}
    while len(found) < 2:
        guild = emu.add_guild(f"Guild {len(emu.guilds)}", owner_id=emu.alice_id)
        if shard_of(int(guild), 2) not in found:
            channel = emu.add_channel(guild, "general")
            found[shard_of(int(guild), 2)] = (guild, channel, emu.add_member(guild, "carol"))
    return found


async def test_two_shard_processes_answer_each_guild_once_from_its_own_shard(tmp_path, place: Place):
    async with DiscordEmulator() as emu, FakeOpenAI(UniqueReplies()) as llm:
        guilds = guilds_on_both_shards(emu)
        bots = [BotProcess(tmp_path, emu, llm, name=f"shard{i}", place=place,
                           env={"ROUNDTABLE_SHARDS": str(i), "ROUNDTABLE_SHARD_COUNT": "2"}) for i in (0, 1)]
        try:
            channels = {i: await bots[0].add_group(channel, guild_id=guild)
                        for i, (guild, channel, _) in guilds.items()}
            for bot in bots:
                await bot.start()
            for shard, session in enumerate(sorted(emu.connected_sessions, key=lambda s: s.shard)):
                assert session.shard == (shard, 2)
            for n in range(3):
                for i, (_, channel_id, person) in guilds.items():
                    await emu.user_post(channel_id, person, f"@echo message {n} in shard {i}'s guild")
                # each round answered before the next (two messages waiting for one agent are one run)
                def answered(n: int = n) -> bool:
                    replies = bots[0].query("SELECT COUNT(*) FROM messages WHERE author_type = 'agent'")[0][0]
                    return replies >= 2 * (n + 1)

                await emu.wait_for(answered, timeout=60, what=f"round {n}'s replies")
            await bots[0].wait_settled()
            totals = check_once(bots[0], list(channels.values()))
            assert totals == {"people": 6, "replies": 6}
            for i, channel in channels.items():
                (owner,) = bots[0].query("SELECT owner FROM leases WHERE group_id = ?", (channel.group_id,))[0]
                process = bots[i].proc
                assert process is not None and f"|{process.pid}|" in owner, (i, owner)  # led by its own shard
                other = bots[1 - i].log.read_text()
                assert f"group={channel.group_id} " not in other.replace(f"group={channel.group_id}:", "")
        finally:
            for bot in bots:
                await bot.close()
            emu.release_all()
