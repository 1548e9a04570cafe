"""Which Discord servers (guilds) a process serves when the bot runs as several shards.

Discord sends a guild's events to one gateway connection, its shard:
`(guild_id >> 22) % shard_count` (discord.com/developers/docs/topics/gateway#sharding).
A process running shards `ids` of `count` takes in, answers commands for and
leads the groups of those guilds only; the groups of other guilds are
another process's (leases keep it so even while processes restart).
"""
from __future__ import annotations

from dataclasses import dataclass

from bot.core.errors import InvalidInput

MAX_SHARDS = 1024


def shard_of(guild_id: int, count: int) -> int:
    """The shard that receives `guild_id`'s events when the bot runs `count` shards."""
    return (guild_id >> 22) % count


@dataclass(frozen=True)
class Shards:
    ids: tuple[int, ...]
    count: int

    def serves(self, guild_id: str | int | None) -> bool:
        """Whether this process's shards receive that guild (a group without a guild: no)."""
        if guild_id is None:
            return False
        return shard_of(int(guild_id), self.count) in self.ids

    def __str__(self) -> str:
        return f"shards {','.join(map(str, self.ids))} of {self.count}"


def parse_shards(ids: str | None, count: str | int | None) -> Shards | None:
    """`--shards 0,1 --shard-count 4` (or their settings) as `Shards`; None when neither is given.

    InvalidInput, naming what to write, when one comes without the other or a value does not fit."""
    ids_text = (ids or "").strip()
    count_text = str(count).strip() if count is not None else ""
    if not ids_text and not count_text:
        return None
    if not count_text:
        raise InvalidInput("shards need a shard count too: add --shard-count N (ROUNDTABLE_SHARD_COUNT)")
    try:
        total = int(count_text)
    except ValueError:
        raise InvalidInput(f"the shard count must be a whole number (got {count_text!r})") from None
    if not 1 <= total <= MAX_SHARDS:
        raise InvalidInput(f"the shard count must be from 1 to {MAX_SHARDS} (got {total})")
    if not ids_text:
        return Shards(tuple(range(total)), total)  # every shard in this process
    chosen: list[int] = []
    for part in ids_text.split(","):
        try:
            shard = int(part.strip())
        except ValueError:
            raise InvalidInput(f"shard ids are whole numbers separated by commas, e.g. 0,1 "
                               f"(got {ids_text!r})") from None
        if not 0 <= shard < total:
            raise InvalidInput(f"shard {shard} does not exist with a shard count of {total} (use 0 to {total - 1})")
        if shard not in chosen:
            chosen.append(shard)
    return Shards(tuple(sorted(chosen)), total)
