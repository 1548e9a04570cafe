"""fetch_url (SPEC §6b): a real aiohttp client against a local server on 127.0.0.1; the address
check as a pure table; a redirect to a refused address with a resolver injected."""
from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bot.core.features.tools import RunContext
from bot.llm.fetch_url import FetchTools, Refused, check_url, html_text, refused

CONTEXT = RunContext(1, 1, 1)
PAGE = ("<html><head><title>The  page</title><style>body{color:red}</style>"
        "<script>alert('x')</script></head><body><h1>Hello</h1><p>One &amp; two</p>"
        "<div>Three<br>Four</div></body></html>")


@pytest.mark.parametrize("address, is_refused", [
    ("127.0.0.1", True), ("127.9.9.9", True), ("10.1.2.3", True), ("172.16.0.1", True), ("192.168.1.1", True),
    ("169.254.169.254", True), ("224.0.0.1", True), ("240.0.0.1", True),
    ("0.0.0.0", True),  # noqa: S104 (an address checked, not bound)
    ("100.64.0.1", True), ("::1", True), ("::", True), ("fc00::1", True), ("fd12::1", True), ("fe80::1", True),
    ("::ffff:127.0.0.1", True), ("::ffff:10.0.0.1", True), ("ff02::1", True),
    ("93.184.216.34", False), ("8.8.8.8", False), ("1.1.1.1", False), ("2606:4700:4700::1111", False),
    ("::ffff:8.8.8.8", False),
])
def test_the_address_check(address: str, is_refused: bool) -> None:
    assert refused(ipaddress.ip_address(address)) is is_refused


@pytest.mark.parametrize("url, allowed", [
    ("http://example.org/", True), ("https://example.org/a?b", True), ("ftp://example.org/", False),
    ("file:///etc/passwd", False), ("example.org", False), ("http://127.0.0.1:8080/", False),
    ("http://[::1]/", False), ("http://10.0.0.1/", False), ("http://8.8.8.8/", True),
])
def test_the_url_check(url: str, allowed: bool) -> None:
    if allowed:
        assert check_url(url, False) == url
    else:
        with pytest.raises(Refused, match=r"not an http or https URL|private, loopback"):
            check_url(url, False)


def test_html_becomes_readable_text() -> None:
    assert html_text(PAGE) == "The page\n\nHello\nOne & two\nThree\nFour"


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def big(_: web.Request) -> web.Response:
        return web.Response(text="x" * 50_000, content_type="text/plain")

    async def binary(_: web.Request) -> web.Response:
        return web.Response(body=b"\x00\x01", content_type="image/png")

    async def to_page(_: web.Request) -> web.Response:
        raise web.HTTPFound("/page")

    async def to_private(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.2:{request.url.port}/page")

    async def to_named(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://inside.test:{request.url.port}/page")

    async def loop(_: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    app = web.Application()
    app.add_routes([web.get("/page", page), web.get("/big", big), web.get("/binary", binary),
                    web.get("/to-page", to_page), web.get("/to-private", to_private),
                    web.get("/to-named", to_named), web.get("/loop", loop)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def fetch(tools: FetchTools, url: str) -> tuple[str, bool]:
    output = await tools.call("fetch_url", {"url": url}, CONTEXT)
    return output.text, output.error


async def test_with_private_on_a_page_is_read_as_text_and_a_large_body_is_cut(server: str) -> None:
    tools = FetchTools(allow_private=True, max_bytes=10_000)
    text, error = await fetch(tools, f"http://{server}/page")
    assert not error and text == f"http://{server}/page\n\nThe page\n\nHello\nOne & two\nThree\nFour"
    text, error = await fetch(tools, f"http://{server}/to-page")
    assert not error and text.startswith(f"http://{server}/page\n\nThe page")
    text, error = await fetch(tools, f"http://{server}/big")
    assert not error and text.count("x") == 10_000 and "only the first 10,000 bytes" in text
    text, error = await fetch(tools, f"http://{server}/binary")
    assert error and "image/png, not text" in text
    text, error = await fetch(tools, f"http://{server}/loop")
    assert error and "redirected more than 5 times" in text
    text, error = await fetch(tools, f"http://{server}/missing")
    assert error and "HTTP 404" in text


async def test_with_private_off_loopback_is_refused(server: str) -> None:
    text, error = await fetch(FetchTools(), f"http://{server}/page")
    assert error and "127.0.0.1 is a private, loopback or link-local address" in text
    text, error = await fetch(FetchTools(), "gopher://example.org/")
    assert error and "not an http or https URL" in text


async def test_a_name_that_resolves_to_a_private_address_is_refused(server: str) -> None:
    async def lookup(host: str, port: int) -> list[str]:
        return {"mixed.test": ["93.184.216.34", "10.0.0.7"]}[host]

    port = server.rsplit(":", 1)[1]
    text, error = await fetch(FetchTools(lookup=lookup), f"http://mixed.test:{port}/page")
    assert error and "mixed.test resolves to 10.0.0.7" in text


async def test_a_redirect_from_an_allowed_host_to_a_private_one_is_refused(server: str) -> None:
    """"public.test" is let through to the local server (the lookup and the check are both
    injected: only 127.0.0.1 counts as public here); its redirects to 127.0.0.2 (an address)
    and to inside.test (a name resolving to 10.0.0.1) are refused."""
    asked: list[str] = []

    async def lookup(host: str, port: int) -> list[str]:
        asked.append(host)
        return {"public.test": ["127.0.0.1"], "inside.test": ["10.0.0.1"]}[host]

    port = server.rsplit(":", 1)[1]
    tools = FetchTools(lookup=lookup, refuse=lambda address: str(address) != "127.0.0.1" and refused(address))
    text, error = await fetch(tools, f"http://public.test:{port}/page")
    assert not error and "Hello" in text
    text, error = await fetch(tools, f"http://public.test:{port}/to-private")
    assert error and "127.0.0.2 is a private, loopback or link-local address" in text
    text, error = await fetch(tools, f"http://public.test:{port}/to-named")
    assert error and "inside.test resolves to 10.0.0.1" in text
    assert asked == ["public.test", "public.test", "public.test", "inside.test"]
