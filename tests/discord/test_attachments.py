"""What people share in Discord reaches the agents: images as image parts (fetched when the run is
made, the expired URL refreshed first, also after a restart), text files inlined (cut with a note past
max_text), and a model that takes no images gets a line naming the file instead."""
from __future__ import annotations

import base64
import logging
import struct
import time
import zlib
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bot.core.rules.attachments import image_format
from tests.fakes.openai_server import GroupChatScript, Reply, ReplyLike, image_urls, message_text
from tests.support import eventually


def png(width: int, height: int) -> bytes:
    """A valid PNG of that size (one grey pixel row repeated)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def participant_requests(harness, name: str) -> list[dict[str, Any]]:
    return [r for r in harness.llm_server.requests
            if GroupChatScript.classify(r) == ("participant", name)]


async def test_an_image_reaches_the_model_as_an_image_part_also_after_a_restart_with_its_url_expired(
        harness, script):
    emu = harness.emu
    script.set_agent("planner", ["I see a grey square.", "Still grey."])
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    image = png(64, 48)
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner what is this?", attachments=[("shot.png", image)])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=15)
    await harness.idle()
    [request] = participant_requests(harness, "planner")
    data_url = "data:image/png;base64," + base64.b64encode(image).decode()
    assert image_urls(request) == [data_url]
    text = "".join(message_text(m) for m in request["messages"])
    assert "[image: shot.png, 64×48, " in text
    row = (await harness.store.thread.messages(1))[-2]
    assert row.text == "@planner what is this?"
    [file] = row.attachments
    assert (file.name, file.kind, file.width, file.height, file.size) == ("shot.png", "image", 64, 48, len(image))
    assert file.attachment_id and file.message_id and file.channel_id == emu.channel_id

    # Paused: the next image waits; the bot stops, the URL expires, the bot starts, then the run is made.
    await harness.command("roundtable pause")
    emu.attachment_ttl = 1.0
    second = png(8, 8)
    posted = await emu.user_post(emu.channel_id, emu.alice_id, "@planner and this one?",
                                 attachments=[("small.png", second)])

    async def stored() -> bool:
        return any(r.text == "@planner and this one?" for r in await harness.store.thread.messages(1))
    await eventually(stored, "the message stored")
    await harness.idle()
    await harness.stop()
    url = posted["attachments"][0]["url"]
    expires = int(parse_qs(urlsplit(url).query)["ex"][0], 16)
    await emu.wait_for(lambda: time.time() > expires + 0.01, timeout=10, what="the URL to expire")
    await harness.start()
    await harness.command("roundtable resume")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=15)
    await harness.idle()
    later = participant_requests(harness, "planner")[-1]
    assert "data:image/png;base64," + base64.b64encode(second).decode() in image_urls(later)
    assert any(r["original"] == url for r in emu.refreshed_urls)


async def test_a_python_file_is_inlined_and_a_long_log_is_cut_with_a_note(harness, script):
    emu = harness.emu
    script.set_agent("planner", ["Read the code.", "Read the log."])
    await harness.setup_group(("planner", "reviews"), mode="tags")
    source = "".join(f"def f{i}(x):\n    return x + {i}  # line {i}\n" for i in range(690))  # ~30 kB
    assert 29_000 < len(source) < 33_000
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner review this", attachments=[("app.py", source.encode())])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=15)
    log_text = "".join(f"2025-01-01 12:00:{i % 60:02d} INFO request {i} served\n" for i in range(5200))
    assert len(log_text) > 200_000
    await emu.user_post(emu.channel_id, emu.alice_id, "@planner why so slow?",
                        attachments=[("big.log", log_text.encode())])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=15)
    await harness.idle()
    first, second = participant_requests(harness, "planner")
    first_text = "".join(message_text(m) for m in first["messages"])
    assert source.rstrip("\n") in first_text and '<file name="app.py"' in first_text
    assert not image_urls(first)
    second_text = "".join(message_text(m) for m in second["messages"])
    kept = log_text[:40_000]  # max_text's default
    assert kept.rstrip("\n") in second_text and log_text[:40_001] not in second_text
    assert f"… {len(log_text) - 40_000:,} more characters of big.log left out" in second_text
    rows = await harness.store.thread.messages(1)
    stored = [f for r in rows for f in r.attachments]
    assert [(f.name, f.kind, f.chars) for f in stored] == [("app.py", "text", len(source)),
                                                          ("big.log", "text", len(log_text))]
    assert stored[1].text == log_text  # the whole log is kept, for restarts and exports


async def test_a_model_that_takes_no_images_gets_a_line_naming_the_file_and_the_log_says_so_once(
        harness, script, caplog):
    emu = harness.emu
    harness.llm_server.text_only.add("plain-model")
    script.set_agent("critic", ["No picture for me.", "Still none."])
    await harness.setup_group(mode="tags")
    reply = await harness.command("agent add", {"name": "critic", "role": "criticises", "prompt": "You criticise.",
                                                "model": "plain-model"})
    assert reply["data"]["content"].startswith("Added critic"), reply
    caplog.set_level(logging.INFO, logger="bot.llm.openai_llm")
    for n in (1, 2):
        await emu.user_post(emu.channel_id, emu.alice_id, f"@critic look {n}", attachments=[(f"p{n}.png", png(4, 4))])
        await emu.wait_for(lambda n=n: len(harness.webhook_posts()) >= n, timeout=15)
    await harness.idle()
    requests = [r for r in harness.llm_server.requests if r["model"] == "plain-model"]
    # The first call carried the image and was refused; it was repeated at once without it; the
    # second message's call went without the image from the start.
    assert [bool(image_urls(r)) for r in requests] == [True, False, False]
    assert [p["content"] for p in harness.webhook_posts()] == ["No picture for me.", "Still none."]
    last = "".join(message_text(m) for m in requests[-1]["messages"])
    assert "[image: p2.png, 4×4, " in last and "(not shown: this model does not take images)" in last
    told = [r for r in caplog.records if "does not take images" in r.getMessage()]
    assert len(told) == 1 and "plain-model" in told[0].getMessage()


UNSUPPORTED_IMAGE = {"error": {"message": "You uploaded an unsupported image. Please make sure your image has of one "
                               "the following formats: ['png', 'jpeg', 'gif', 'webp'].",
                               "type": "invalid_request_error", "param": None, "code": "invalid_image_format"}}


async def test_a_file_named_png_that_is_no_image_is_not_sent_and_the_model_keeps_taking_images(harness, script):
    """A person shares `shot.png` that is not an image (a text file renamed, a broken upload). A
    provider refuses a whole call carrying it (OpenAI's 400 'unsupported image'): the call that
    followed went without images and the model was taken as one that takes none, for every
    group, until a restart. It is not sent; the next real image is."""
    emu = harness.emu

    def vision_model(body: dict) -> ReplyLike:
        for url in image_urls(body):
            if image_format(base64.b64decode(url.split(",", 1)[1])) is None:
                return Reply(status=400, error_body=UNSUPPORTED_IMAGE)
        return script(body)

    harness.llm_server.responder = vision_model
    script.set_agent("critic", ["Not a picture.", "A grey square."])
    await harness.setup_group(("critic", "criticises"), mode="tags")
    await emu.user_post(emu.channel_id, emu.alice_id, "@critic look", attachments=[("shot.png", b"just some text")])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=15)
    await emu.user_post(emu.channel_id, emu.alice_id, "@critic and this", attachments=[("real.png", png(4, 4))])
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=15)
    await harness.idle()
    first, second = participant_requests(harness, "critic")
    assert not image_urls(first)
    assert "[image: shot.png, 14 B] (not shown: it is not a PNG, JPEG, GIF or WebP image)" in "".join(
        message_text(m) for m in first["messages"])
    assert image_urls(second) == ["data:image/png;base64," + base64.b64encode(png(4, 4)).decode()]
    assert [p["content"] for p in harness.webhook_posts()] == ["Not a picture.", "A grey square."]


async def test_an_image_named_after_the_bot_token_is_stored_and_exported_masked_and_still_reaches_the_model(
        harness, script):
    """A person posts `<bot token>.png`: Discord's URL ends with that name. The row keeps the name and
    the URL masked; the image is found by its message's ids when the run is made; an export written
    later (by a process that does not know the token: `roundtable export` with other settings) holds
    the token in no form."""
    from bot.core.record.export import write_export
    from bot.core.rules.secrets import SECRETS

    emu = harness.emu
    SECRETS.register(emu.token)  # as the wiring registers DISCORD_TOKEN at start
    script.set_agent("planner", ["A grey square."])
    await harness.setup_group(("planner", "drafts the itinerary"), mode="tags")
    image = png(16, 16)
    posted = await emu.user_post(emu.channel_id, emu.alice_id, "@planner what is this?",
                                 attachments=[(f"{emu.token}.png", image)])
    assert emu.token in posted["attachments"][0]["url"]
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 1, timeout=30)
    await harness.idle()
    [request] = participant_requests(harness, "planner")
    assert image_urls(request) == ["data:image/png;base64," + base64.b64encode(image).decode()]
    row = next(r for r in await harness.store.thread.messages(1) if r.attachments)
    [file] = row.attachments
    assert file.name == "***.png" and file.url.split("?")[0].endswith("/***.png")
    group = await harness.store.groups.get_group(1)
    SECRETS.clear()
    for fmt in ("json", "md", "html"):
        parts: list[str] = []
        await write_export(harness.store, group, fmt, parts.append)
        page = "".join(parts)
        assert "***.png" in page and emu.token not in page, fmt


async def test_what_agents_could_not_use_is_told_to_the_person_in_one_line_once_not_per_agent(harness, script):
    """A 30 MB log, a `.png` that is text, an image whose link is gone by the time the run is made, an
    image over max_images: the person reads it in the channel (SPEC §8), not only the model. What is
    known when the message is stored is one line then; what the first run finds (the fake and the gone
    image) is one line after it; the second agent reading the same message repeats neither."""
    emu = harness.emu
    script.set_agent("planner", ["Seen."])
    script.set_agent("critic", ["Seen too."])
    await harness.setup_group(("planner", "plans"), ("critic", "checks"), mode="tags", max_images=3)
    await harness.command("roundtable pause")
    posted = await emu.user_post(emu.channel_id, emu.alice_id, "@planner @critic look at these", attachments=[
        ("a.png", png(8, 8)), ("fake.png", b"just some text, no picture"), ("gone.png", png(4, 4)),
        ("over.png", png(2, 2)), {"filename": "big.log", "data": b"x", "size": 30 * 2**20}])
    emu.files.pop(posted["attachments"][2]["id"])  # deleted (or expired) before the run is made

    def notices() -> list[str]:
        return [m["content"] for m in emu.channel_messages(emu.channel_id)
                if not m.get("webhook_id") and m["content"].startswith("📎")]
    await emu.wait_for(lambda: len(notices()) >= 1, timeout=30, what="the line of what is known at once")
    assert notices() == ["📎 Alice, not used: over.png (only 3 images of a message are sent); "
                         "big.log (not read: larger than 4.0 MB)."]
    await harness.command("roundtable resume")
    await emu.wait_for(lambda: len(harness.webhook_posts()) >= 2, timeout=30)
    await harness.idle()
    assert notices()[1:] == ["📎 Alice, not used: fake.png (it is not a PNG, JPEG, GIF or WebP image); "
                             "gone.png (it could not be fetched: deleted, or its link expired)."]
    assert len(participant_requests(harness, "planner")) == len(participant_requests(harness, "critic")) == 1
