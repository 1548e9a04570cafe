"""The built-in tool `fetch_url(url)` (SPEC §6b): one `bot.core.ports.ToolSource` over aiohttp.

A GET of an http or https URL; text, JSON and XML are returned as they are, HTML as readable
text (tags, scripts and styles dropped, with the stdlib `html.parser`). At most `MAX_BYTES` are
read (the tool loop then cuts the result to `tool_result_max`), within `FETCH_TIMEOUT` seconds.

Addresses: the host name is resolved here (`lookup`) and every address it resolves to is checked
(`refused`): loopback, private, link-local, unspecified, multicast and reserved addresses are
refused, so an agent cannot read the host's own services or its network. The connection is made
to the addresses checked (the connector's resolver is this one), never to a second lookup's.
Redirects are followed by hand, at most `MAX_REDIRECTS`, each new URL checked the same way.
`ROUNDTABLE_FETCH_PRIVATE=on` (`allow_private`) turns the address check off (a host whose agents
should read its local network). Proxies of the environment are not used (they would bypass the
check). The tool is read-only (a GET): a call cut by a restart is run again.
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from bot.core.models import ToolOutput, ToolSpec
from bot.core.ports import ToolContext

log = logging.getLogger(__name__)

TOOL_NAME = "fetch_url"
MAX_BYTES = 2_000_000  # bytes of a body read
FETCH_TIMEOUT = 20.0  # seconds the whole fetch (redirects included) may take
MAX_REDIRECTS = 5
REDIRECTS = frozenset({301, 302, 303, 307, 308})
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/rss+xml",
              "application/atom+xml", "application/ld+json", "application/javascript")
USER_AGENT = "Roundtable fetch_url (+https://github.com/roundtable)"
SPEC = ToolSpec(
    TOOL_NAME,
    "Fetch a web page or text file by URL (GET, http or https) and return its readable text.",
    {"type": "object", "properties": {"url": {"type": "string", "description": "The http(s) URL to fetch."}},
     "required": ["url"]},
    read_only=True, idempotent=True, timeout=FETCH_TIMEOUT + 5,
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Lookup = Callable[[str, int], Awaitable[Sequence[str]]]


class Refused(Exception):
    """A URL or address fetch_url will not fetch; its text is the tool's error."""


def refused(address: Address) -> bool:
    """Whether fetch_url refuses `address`: loopback, private, link-local, unspecified, multicast,
    reserved (an IPv4 address mapped into IPv6 judged as the IPv4 one)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (address.is_loopback or address.is_private or address.is_link_local or address.is_unspecified
            or address.is_multicast or address.is_reserved or not address.is_global)


async def system_lookup(host: str, port: int) -> list[str]:
    """The addresses the system's resolver gives `host`."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class CheckedResolver(AbstractResolver):
    """aiohttp's resolver for fetch_url: `lookup`, then every address checked (see the module docstring)."""

    def __init__(self, lookup: Lookup, allow_private: bool, refuse: Callable[[Address], bool] = refused) -> None:
        self.lookup, self.allow_private, self.refuse = lookup, allow_private, refuse

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        try:
            found = await self.lookup(host, port)
        except OSError as exc:
            raise Refused(f"{host} could not be resolved ({exc.strerror or exc})") from None
        if not found:
            raise Refused(f"{host} could not be resolved")
        results: list[ResolveResult] = []
        for text in found:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            if not self.allow_private and self.refuse(address):
                raise Refused(f"{host} resolves to {address}, a private, loopback or link-local address; "
                              "fetch_url does not read those (ROUNDTABLE_FETCH_PRIVATE=on allows them)")
            results.append(ResolveResult(hostname=host, host=text, port=port, family=(
                socket.AF_INET6 if address.version == 6 else socket.AF_INET), proto=0, flags=socket.AI_NUMERICHOST))
        return results

    async def close(self) -> None:
        return None


def check_url(url: str, allow_private: bool, refuse: Callable[[Address], bool] = refused) -> str:
    """`url` when fetch_url may ask for it (http or https, with a host; an address literal not
    refused), else `Refused`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused(f"{url[:200]!r} is not an http or https URL")
    try:
        address = ipaddress.ip_address(parts.hostname)
    except ValueError:
        return url
    if not allow_private and refuse(address):
        raise Refused(f"{address} is a private, loopback or link-local address; fetch_url does not read those "
                      "(ROUNDTABLE_FETCH_PRIVATE=on allows them)")
    return url


class _Text(HTMLParser):
    """HTML to readable text: the text of the page, a line break at each block, no scripts or styles."""

    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})
    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
                        "header", "footer", "ul", "ol", "table", "pre", "blockquote", "hr", "title", "dd", "dt"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self.SKIP:
            self.skipping += 1
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self.SKIP and self.skipping:
            self.skipping -= 1
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self.skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The readable text of an HTML page: its title on the first line, then its text, blank runs squeezed."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = [re.sub(r"[ \t\r\f\v\u00a0]+", " ", line).strip() for line in "".join(parser.parts).split("\n")]
    text = "\n".join(line for line in lines if line)
    title = " ".join(parser.title.split())
    return f"{title}\n\n{text}" if title else text


class FetchTools:
    """The built-in source of `fetch_url` (`bot.core.ports.ToolSource`), offered to agents granted it."""

    name = ""

    def __init__(self, *, allow_private: bool = False, lookup: Lookup = system_lookup,
                 max_bytes: int = MAX_BYTES, timeout: float = FETCH_TIMEOUT,
                 refuse: Callable[[Address], bool] = refused) -> None:
        """`lookup` and `refuse` (the resolver and the address check) are seams for tests."""
        self.allow_private, self.lookup, self.max_bytes, self.timeout = allow_private, lookup, max_bytes, timeout
        self.refuse = refuse

    def tools(self) -> tuple[ToolSpec, ...]:
        return (SPEC,)

    async def call(self, tool: str, arguments: dict[str, object], context: ToolContext) -> ToolOutput:
        url = arguments.get("url")
        if not isinstance(url, str) or not url.strip():
            return ToolOutput('error: fetch_url needs a "url" (an http or https URL).', error=True)
        try:
            async with asyncio.timeout(self.timeout):
                return await self.fetch(url.strip())
        except Refused as exc:
            log.info("agent_id=%s: fetch_url refused: %s", context.agent_id, exc)
            return ToolOutput(f"error: {exc}.", error=True)
        except TimeoutError:
            return ToolOutput(f"error: {url[:200]} did not answer within {self.timeout:g} s.", error=True)
        except aiohttp.ClientError as exc:
            return ToolOutput(f"error: {url[:200]} could not be fetched ({type(exc).__name__}: "
                              f"{str(exc)[:200]}).", error=True)

    async def fetch(self, url: str) -> ToolOutput:
        """GET `url`, redirects followed by hand (each checked); the body as text."""
        connector = aiohttp.TCPConnector(resolver=CheckedResolver(self.lookup, self.allow_private, self.refuse),
                                         use_dns_cache=False, force_close=True)
        async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                         headers={"User-Agent": USER_AGENT}) as session:
            for _ in range(MAX_REDIRECTS + 1):
                check_url(url, self.allow_private, self.refuse)
                try:
                    async with session.get(url, allow_redirects=False) as response:
                        location = response.headers.get("Location")
                        if response.status in REDIRECTS and location:
                            url = urljoin(url, location)
                            continue
                        return await self._body(url, response)
                except aiohttp.ClientConnectorError as exc:
                    cause = exc.__cause__ or exc.__context__
                    if isinstance(cause, Refused):
                        raise cause from None
                    raise
            raise Refused(f"{url[:200]} redirected more than {MAX_REDIRECTS} times")

    async def _body(self, url: str, response: aiohttp.ClientResponse) -> ToolOutput:
        kind = response.content_type or "application/octet-stream"
        if response.status >= 400:
            return ToolOutput(f"error: {url[:200]} answered HTTP {response.status} {response.reason or ''}".rstrip()
                              + ".", error=True)
        if not kind.startswith(TEXT_TYPES):
            return ToolOutput(f"error: {url[:200]} is {kind}, not text or HTML; fetch_url reads only those.",
                              error=True)
        data = await response.content.read(self.max_bytes + 1)
        while len(data) <= self.max_bytes:
            more = await response.content.read(self.max_bytes + 1 - len(data))
            if not more:
                break
            data += more
        over = len(data) > self.max_bytes
        try:
            body = data[:self.max_bytes].decode(response.charset or "utf-8", errors="replace")
        except LookupError:  # a charset Python does not know
            body = data[:self.max_bytes].decode("utf-8", errors="replace")
        text = html_text(body) if kind in ("text/html", "application/xhtml+xml") else body
        head = f"{url}\n\n"
        note = f"\n[cut: only the first {self.max_bytes:,} bytes of the page were read]" if over else ""
        return ToolOutput(head + text + note)

