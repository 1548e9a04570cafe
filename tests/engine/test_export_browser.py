"""The HTML export opened in a real browser: headless Chromium (the Debian package `chromium`)
renders it, shows every message in order, and logs nothing to its console (a page that tried to
fetch anything or run a script would log the Content-Security-Policy refusal)."""
from __future__ import annotations

import asyncio
import io
import re
import shutil
from pathlib import Path

import pytest

from bot.core.record.export import write_export
from tests.engine.test_export import Page, script, seed

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium)")
CONSOLE = re.compile(r":CONSOLE[^\]]*\] (.*)")


@pytest.fixture
def harness(sqlite_harness):
    """On SQLite only: one database is enough for what a browser shows."""
    return sqlite_harness


async def render(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM Chromium built from `page`, and every line its console logged."""
    assert CHROMIUM is not None
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
        "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()  # reaped here, not left to the garbage collector
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode(), CONSOLE.findall(err.decode(errors="replace"))


async def test_chromium_shows_every_message_and_logs_no_console_error(harness, tmp_path):
    async with harness.running(script()):
        await seed(harness)
        out = io.StringIO()
        await write_export(harness.store, harness.group, "html", out.write)
        stored = await harness.store.thread.messages(harness.group.id)
    page = tmp_path / "transcript.html"
    page.write_text(out.getvalue(), encoding="utf-8")
    dom, console = await render(page, tmp_path / "profile")
    assert console == []
    parsed = Page()
    parsed.feed(dom)
    assert [(int(m["seq"]), m["author"]) for m in parsed.messages] == [(m.seq, m.author_name) for m in stored]
    assert "Over by $200 <script>alert('x')</script>" in parsed.messages[2]["text"]
    assert [t for t, _ in parsed.tags].count("script") == 0  # the browser made no script of it either

    # The check can fail: the same page with an image to fetch is refused and logged.
    tampered = tmp_path / "tampered.html"
    tampered.write_text(out.getvalue().replace("</main>", '<img src="https://example.invalid/p.png"></main>'))
    _, console = await render(tampered, tmp_path / "profile2")
    assert any("Content Security Policy" in line for line in console), console
