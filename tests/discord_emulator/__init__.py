"""A local Discord-compatible server (REST v10 + gateway) for tests driving the
real discord.py client. See DiscordEmulator's docstring and
/work/shared/DISCORD-EMULATION.md.

Readiness: discord.py fires on_ready `guild_ready_timeout` (default 2 s) after
the last GUILD_CREATE, whether or not it chunks. Tests go faster with
``discord.Client(..., chunk_guilds_at_startup=False, guild_ready_timeout=0.1)``
(the bot can read such an option from its config), or by waiting on
``emu.wait_until_ready()`` (server side: READY + GUILD_CREATE sent) plus
``client.get_guild(...)`` instead of on_ready.
"""
from . import _util as perms
from ._gateway import GatewaySession
from ._interactions import InteractionRecord
from ._server import DEFAULT_TOKEN, RATE_LIMIT_BODY, DiscordEmulator, Hold, RequestRecord
from ._webhooks import Webhook

__all__ = [
    "DiscordEmulator", "Hold", "InteractionRecord", "RequestRecord", "GatewaySession", "Webhook",
    "DEFAULT_TOKEN", "RATE_LIMIT_BODY", "perms",
]
