"""Discord's side of the doctor: the token, the Message Content intent, and each group
channel's webhook and the bot's permissions there, as `bot.core.rules.doctor.Check`s.

Two ways to look, worded alike:

- `RestDoctor` (`roundtable doctor`, `roundtable init`): Discord's REST API with the
  token only, no gateway connection. The bot's permissions in a channel are computed
  by discord.py from the server's roles, the bot's member and the channel's
  overwrites, fetched for the purpose.
- `channel_checks(bot, group)` (`/roundtable doctor` in the running bot, beside the core's checks:
  the database, the model endpoints, the MCP servers as the bot holds them): the
  gateway's cache.

Every Discord or network failure becomes a failed check here; nothing raises.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiohttp
import discord

from bot.config import Settings
from bot.core.errors import ConfigError
from bot.core.models import Group
from bot.core.rules.doctor import Check
from bot.surfaces.discord import permissions
from bot.surfaces.discord.api import point_at

TOKEN, INTENT = "Discord token", "Message Content intent"
TIMEOUT = 30.0  # seconds for all of one look at Discord
Place = tuple[discord.Member, dict[int, discord.abc.GuildChannel]]  # the bot in a server, and its channels
NETWORK_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
TOKEN_FIX = "copy a fresh token from the Developer Portal (your application > Bot > Reset Token) into DISCORD_TOKEN"  # noqa: S105 - advice to the user, not a secret
INTENT_FIX = ("turn it on in the Developer Portal (your application > Bot > Privileged Gateway Intents > "
              "Message Content) and save")


def intent_check(app: discord.AppInfo) -> Check:
    flags = app.flags
    if flags.gateway_message_content or flags.gateway_message_content_limited:
        return Check(INTENT, True, "on (the bot can read what people write)")
    return Check(INTENT, False, "off: the bot would not be let in (or would see empty messages)", INTENT_FIX)


def permission_check(where: str, granted: discord.Permissions, *, thread: bool) -> Check:
    lacking = permissions.missing(granted, thread=thread)
    name = f"{where} permissions"
    if not lacking:
        return Check(name, True, "the bot has every permission it needs there")
    return Check(name, False, f"the bot lacks {', '.join(lacking)}",
                 f"give the bot's role {', '.join(lacking)} in {where} (channel settings > Permissions) or in "
                 "Server Settings > Roles")


async def webhook_check(client: discord.Client, where: str, stored: tuple[str, str] | None, channel_id: int,
                        can_manage: bool) -> Check:
    """The group's stored webhook still exists and posts in its channel. None stored, deleted
    or moved is fine while the bot may make a new one (it does at its next post)."""
    name = f"{where} webhook"
    remade = "the bot makes a new one at its next post"
    if stored is None:
        found = "none stored"
    else:
        try:
            async with asyncio.timeout(TIMEOUT):
                hook = await discord.Webhook.partial(int(stored[0]), stored[1], client=client).fetch(
                    prefer_auth=False)
        except discord.NotFound:
            found = "the stored webhook was deleted"
        except (discord.HTTPException, *NETWORK_ERRORS) as exc:
            return Check(name, False, f"could not look it up ({_why(exc)})", "check the network and try again")
        else:
            if hook.channel_id == channel_id:
                return Check(name, True, f"{hook.name!r} exists and posts there")
            found = "the stored webhook was moved to another channel"
    if can_manage:
        return Check(name, True, f"{found}; {remade}")
    return Check(name, False, f"{found}, and the bot may not make one (no Manage Webhooks)",
                 f"give the bot's role Manage Webhooks in {where}; {remade}")


async def channel_checks(bot: discord.Client, group: Group, stored: tuple[str, str] | None) -> list[Check]:
    """The webhook and the permissions of a group's channel, from the running bot's cache."""
    where = group.name
    channel_id = int(group.parent_channel_id or group.channel_id or 0)
    channel = bot.get_channel(channel_id)
    if not isinstance(channel, discord.TextChannel):
        return [_gone(where)]
    granted = channel.permissions_for(channel.guild.me)
    return [await webhook_check(bot, where, stored, channel_id, granted.manage_webhooks),
            permission_check(where, granted, thread=group.parent_channel_id is not None)]


def _gone(where: str) -> Check:
    return Check(f"{where} channel", False, "the channel no longer exists, or the bot cannot see it",
                 f"give the bot's role View Channel in {where}, or run /roundtable disable there if it is gone")


def _why(exc: BaseException) -> str:
    if isinstance(exc, discord.HTTPException):
        return f"Discord answered {exc.status}"
    return type(exc).__name__


class RestDoctor:
    """A discord.py client that only logs in (REST, no gateway) to look at the set-up.

        async with RestDoctor(settings) as doctor:
            checks = await doctor.identify()   # the token, the intent
            checks += await doctor.groups(groups, webhooks)
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = discord.Client(intents=discord.Intents.none())
        self.app: discord.AppInfo | None = None
        self._guilds: dict[int, Place | Check] = {}

    async def __aenter__(self) -> RestDoctor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.client.close()

    async def identify(self) -> list[Check]:
        """The token (who the bot is) and, when it works, the Message Content intent."""
        if self.settings.discord_api_base_url:
            try:
                await point_at(self.settings.discord_api_base_url)
            except ConfigError as exc:
                return [Check(TOKEN, False, str(exc).split("; ")[0], "check that the server runs and the URL ends "
                                                                     "with the version path, e.g. /api/v10")]
        try:
            async with asyncio.timeout(TIMEOUT):
                await self.client.login(self.settings.discord_token or "")
        except discord.LoginFailure:
            return [Check(TOKEN, False, "Discord rejected DISCORD_TOKEN (401 Unauthorized)", TOKEN_FIX)]
        except (discord.HTTPException, *NETWORK_ERRORS) as exc:
            return [Check(TOKEN, False, f"could not reach Discord ({_why(exc)})",
                          "check the network, or DISCORD_API_BASE_URL when it is set")]
        user, self.app = self.client.user, self.client.application
        if user is None or self.app is None:  # login sets both
            raise RuntimeError("discord.py logged in without the bot's user or application")
        return [Check(TOKEN, True, f"the bot is {user.name} (id {user.id}, application {self.app.id})"),
                intent_check(self.app)]

    async def guild_check(self, guild_id: int) -> Check:
        """DISCORD_GUILD_ID names a server the bot is in (`roundtable run` syncs its commands there)."""
        name = "DISCORD_GUILD_ID"
        try:
            async with asyncio.timeout(TIMEOUT):
                guild = await self.client.fetch_guild(guild_id)
        except (discord.Forbidden, discord.NotFound):
            invite = f": {permissions.invite_url(self.app.id)}" if self.app else ""
            return Check(name, False, f"the bot is not in server {guild_id}, where the commands would be synced",
                         f"invite it there{invite}, or clear DISCORD_GUILD_ID")
        except (discord.HTTPException, *NETWORK_ERRORS) as exc:
            return Check(name, False, f"could not look at server {guild_id} ({_why(exc)})",
                         "check the network and try again")
        return Check(name, True, f"the commands are synced to {guild.name} at once")

    async def groups(self, groups: Sequence[Group], webhooks: dict[str, tuple[str, str]]) -> list[Check]:
        """Each Discord group's webhook and the bot's permissions in its channel (after `identify`)."""
        checks: list[Check] = []
        for group in groups:
            try:
                async with asyncio.timeout(TIMEOUT):
                    checks.extend(await self._group(group, webhooks))
            except (discord.HTTPException, *NETWORK_ERRORS) as exc:
                checks.append(Check(f"{group.name} channel", False, f"could not look at it ({_why(exc)})",
                                    "check the network and try again"))
        return checks

    async def _group(self, group: Group, webhooks: dict[str, tuple[str, str]]) -> list[Check]:
        where = group.name
        place = await self._guild(int(group.guild_id or 0), where)
        if isinstance(place, Check):
            return [place]
        me, channels = place
        channel_id = int(group.parent_channel_id or group.channel_id or 0)
        channel = channels.get(channel_id)
        if not isinstance(channel, discord.TextChannel):
            return [_gone(where)]
        granted = channel.permissions_for(me)
        return [await webhook_check(self.client, where, webhooks.get(str(channel_id)), channel_id,
                                    granted.manage_webhooks),
                permission_check(where, granted, thread=group.parent_channel_id is not None)]

    async def _guild(self, guild_id: int, where: str) -> Place | Check:
        """The bot's member and the channels of a server, fetched once; a failed check when the
        bot is not in it."""
        if guild_id not in self._guilds:
            try:
                guild = await self.client.fetch_guild(guild_id)
                me = await guild.fetch_member(self.client.user.id)  # type: ignore[union-attr]  # logged in
                channels: dict[int, discord.abc.GuildChannel] = {c.id: c for c in await guild.fetch_channels()}
                self._guilds[guild_id] = (me, channels)
            except (discord.Forbidden, discord.NotFound):
                invite = permissions.invite_url(self.app.id) if self.app else "the invite URL of roundtable init"
                self._guilds[guild_id] = Check(f"{where} server", False,
                                               f"the bot is no longer in the server of {where} (id {guild_id})",
                                               f"invite it again: {invite}")
        return self._guilds[guild_id]
