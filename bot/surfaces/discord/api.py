"""Which Discord API the discord.py clients talk to: discord.com, or a Discord-compatible server
(DISCORD_API_BASE_URL: a local emulator, a proxy). Both the bot (`client`) and `roundtable doctor`
(`doctor`) point discord.py there before they log in."""
from __future__ import annotations

import aiohttp
import discord
import yarl

from bot.core.errors import ConfigError
from bot.core.rules.secrets import redact_url


async def point_at(api_base_url: str) -> None:
    """Send REST and the gateway to a Discord-compatible server (`.../api/v10`)."""
    discord.http.Route.BASE = api_base_url.rstrip("/")
    try:
        async with aiohttp.ClientSession() as session:
            url_of_gateway = f"{discord.http.Route.BASE}/gateway"
            async with session.get(url_of_gateway, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                url = (await resp.json(content_type=None))["url"]
    except (aiohttp.ClientError, OSError, KeyError, ValueError, TimeoutError) as exc:
        raise ConfigError(f"DISCORD_API_BASE_URL={redact_url(api_base_url)} did not answer GET /gateway "
                          f"({type(exc).__name__}); "
                          "check that the server runs and the URL ends with the version path, e.g. /api/v10") from None
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
