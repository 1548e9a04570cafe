"""Files on Discord's CDN: the bytes of a file a person shared, and fresh copies of Discord's
signed attachment URLs (they last about a day: `?ex=<hex unix time>`), for shared files and
agents' pictures."""
from __future__ import annotations

import logging
import time
from urllib.parse import parse_qs, urlsplit

import discord
from discord.http import Route

from bot.core.models import Group, SharedFile
from bot.core.rules.attachments import FileUnavailable
from bot.core.rules.secrets import MASK
from bot.surfaces.discord.link import TRANSPORT_ERRORS, Link

log = logging.getLogger(__name__)

FRESH_MARGIN = 3600.0  # refresh a signed picture URL this long before it expires


def signed_expiry(url: str) -> float | None:
    """When one of Discord's signed attachment URLs expires (its `ex` parameter); None when unsigned."""
    ex = parse_qs(urlsplit(url).query).get("ex")
    try:
        return float(int(ex[0], 16)) if ex else None
    except ValueError:
        return None


class Cdn:
    """Shared files' bytes and fresh signed URLs (each refreshed copy remembered)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self._fresh: dict[str, str] = {}  # a stored signed URL -> its latest refreshed copy

    async def fresh_url(self, url: str) -> str:
        """`url`, or a fresh copy when it is one of Discord's signed attachment URLs that has
        expired or soon will."""
        if signed_expiry(url) is None:
            return url
        best = self._fresh.get(url, url)
        if (signed_expiry(best) or 0) > time.time() + FRESH_MARGIN:
            return best
        try:
            data = await self.link.bot.http.request(Route("POST", "/attachments/refresh-urls"),
                                                    json={"attachment_urls": [url]})
            self._fresh[url] = str(data["refreshed_urls"][0]["refreshed"])
        except (discord.HTTPException, *TRANSPORT_ERRORS, KeyError, IndexError, TypeError) as exc:
            log.warning("could not refresh an attachment's URL: %s", type(exc).__name__)
        return self._fresh.get(url, url)

    async def file_data(self, group: Group, file: SharedFile) -> bytes:
        """A shared file's bytes from Discord's CDN, its signed URL refreshed first when it has
        expired or soon will (a run made hours after the message, or after a restart)."""
        if not file.url:
            raise FileUnavailable("no URL was stored")
        try:
            if MASK in file.url:  # a secret in its name was masked out of the stored URL: ask for its message
                return await self.link.bot.http.get_from_cdn(await self._url_by_ids(file))
            return await self.link.bot.http.get_from_cdn(await self.fresh_url(file.url))
        except discord.HTTPException as exc:
            raise FileUnavailable(f"Discord's CDN answered HTTP {exc.status}") from None
        except TRANSPORT_ERRORS as exc:
            raise FileUnavailable(f"the CDN could not be reached ({type(exc).__name__})") from None

    async def _url_by_ids(self, file: SharedFile) -> str:
        """The current URL of a shared file, read from its message (by the ids its row keeps)."""
        if not (file.channel_id and file.message_id and file.attachment_id):
            raise FileUnavailable("its URL was masked and its message is not known")
        try:
            message = await self.link.channel(file.channel_id).fetch_message(int(file.message_id))
        except discord.NotFound:
            raise FileUnavailable("its message was deleted") from None
        for attachment in message.attachments:
            if str(attachment.id) == file.attachment_id:
                return attachment.url
        raise FileUnavailable("its message no longer has it")
