"""Shared files through the engine: images fetched once through the surface per process, a file that
cannot be fetched named with a note (the run goes on), a model known to take no images never fetched."""
from __future__ import annotations

import base64
import logging
from dataclasses import replace

from bot.core.models import ImagePart, SharedFile

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 30


def image(url: str) -> SharedFile:
    return SharedFile(url, "image", len(PNG), "image/png", url, width=100, height=80)


async def post(h, text: str, *files: SharedFile) -> None:
    group = await h.store.groups.get_group(h.group.id)
    await h.engine.post_user_message(group, author_name="alice", user_id="alice", text=text, attachments=files)


def images_sent(h, call: int) -> list[ImagePart]:
    _, _, messages = [c for c in h.llm.history if c[0] == "participant"][call]
    return [i for m in messages for i in m.images]


async def test_an_image_is_fetched_once_and_a_missing_one_is_named(sqlite_harness):
    h = sqlite_harness
    h.surface.files["a.png"] = PNG
    h.llm.default_agent_reply = lambda name, n: f"{name} {n}"
    async with h.running(mode="tags"):
        await post(h, "@planner look", image("a.png"), image("gone.png"))
        await h.until_called(1)
        await h.idle()
        await post(h, "@planner again")
        await h.until_called(2)
        await h.idle()
        rows = await h.store.thread.messages(h.group.id)
    first, second = images_sent(h, 0), images_sent(h, 1)
    assert [i.url[:22] for i in first] == ["data:image/png;base64,"] and second == first
    assert h.surface.fetched.count("a.png") == 1  # the second run took it from memory
    _, _, messages = next(c for c in h.llm.history if c[0] == "participant")
    text = "".join(m.content for m in messages)
    assert "[image: gone.png, 100×80, 38 B] (not shown: it could not be fetched)" in text
    assert rows[0].token_count > 2 * 85  # both images counted in the row's tokens (one tile each)


async def test_a_model_known_to_take_no_images_is_never_sent_them_and_the_log_says_so_once(sqlite_harness, caplog):
    h = sqlite_harness
    h.surface.files["a.png"] = PNG
    h.llm.text_only = {None}  # the agents' (default) model
    h.llm.default_agent_reply = lambda name, n: f"{name} {n}"
    caplog.set_level(logging.INFO, logger="bot.core.runtime.turn")
    async with h.running(mode="tags"):
        for n in (1, 2):
            await post(h, f"@planner look {n}", image("a.png"))
            await h.until_called(n)
            await h.idle()
    assert h.surface.fetched == [] and images_sent(h, 0) == images_sent(h, 1) == []
    _, _, messages = [c for c in h.llm.history if c[0] == "participant"][1]
    assert "(not shown: this model does not take images)" in "".join(m.content for m in messages)
    assert len([r for r in caplog.records if "does not take images" in r.getMessage()]) == 1


async def test_exports_show_each_file_and_the_page_loads_none(sqlite_harness):
    import json

    from bot.core.record.export import write_export

    h = sqlite_harness
    shot = SharedFile("shot.png", "image", 2048, "image/png", "https://cdn.example/shot.png?ex=1", attachment_id="9",
                      message_id="8", channel_id="7", width=640, height=480)
    log = SharedFile("app.log", "text", 20, "text/plain", "https://cdn.example/app.log", text="<b>boom</b>\n",
                     chars=12)
    async with h.running(mode="tags"):
        await h.store.groups.update_group(h.group.id, paused=True)  # nobody answers: only the record matters
        await post(h, "see", shot, log)
        group = await h.store.groups.get_group(h.group.id)
        pages: dict[str, str] = {}
        for fmt in ("html", "json", "md"):
            parts: list[str] = []
            await write_export(h.store, group, fmt, parts.append)
            pages[fmt] = "".join(parts)
    html = pages["html"]
    assert '<a href="https://cdn.example/shot.png?ex=1" rel="noreferrer noopener" target="_blank">shot.png</a>' in html
    assert "(image, 640×480, 2 KB)" in html and "<img" not in html
    assert "<summary>📄 app.log <span>(text, 20 B, 12 characters)</span></summary>" in html
    assert "&lt;b&gt;boom&lt;/b&gt;" in html and "<b>boom" not in html
    data = json.loads(pages["json"])
    [message] = data["messages"]
    assert [f["name"] for f in message["attachments"]] == ["shot.png", "app.log"]
    assert message["attachments"][0]["discord"] == {"attachment_id": "9", "message_id": "8", "channel_id": "7"}
    assert message["attachments"][1]["text"] == "<b>boom</b>\n"
    assert "> 📎 [shot.png](<https://cdn.example/shot.png?ex=1>) (image, 640×480, 2 KB)" in pages["md"]


async def test_an_image_an_edit_removed_is_not_sent_from_memory_in_its_place(sqlite_harness):
    """An edit that drops the first of two images moves the second to the first place: the next run
    sends the second image, never the dropped one remembered at that place (issue 30 item 6)."""
    h = sqlite_harness
    first_png, second_png = PNG + b"first", PNG + b"second"
    h.surface.files["a.png"], h.surface.files["b.png"] = first_png, second_png
    h.llm.default_agent_reply = lambda name, n: f"{name} {n}"
    async with h.running(mode="tags"):
        await post(h, "@planner look", replace(image("a.png"), attachment_id="a1"),
                   replace(image("b.png"), attachment_id="b2"))
        await h.until_called(1)
        await h.idle()
        assert await h.store.thread.edit_message(h.group.id, 1, "@planner look at this one", attachment_ids=["b2"])
        await post(h, "@planner again")
        await h.until_called(2)
        await h.idle()
    sent = [base64.b64decode(i.url.split(",", 1)[1]) for i in images_sent(h, 1)]
    assert sent == [second_png]
