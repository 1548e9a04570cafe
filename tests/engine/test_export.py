"""Exports of a seeded conversation (a real SQLite file, the real engine) in each format: JSON valid
against docs/export-schema.json with the figures of the run rows, HTML that holds every message in
order with its author and escapes text, Markdown that holds every message."""
from __future__ import annotations

import io
import json
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest

from bot.core.errors import InvalidInput
from bot.core.models import Completion, ContextSummary, Usage
from bot.core.record.export import write_export
from bot.core.rules.card import Attachment
from bot.surfaces.console.surface import keep_file
from tests.fakes.scripted_llm import ScriptedLLM

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "export-schema.json").read_text())
NOW = 1_754_561_472.0  # 2025-08-07 10:11:12 UTC
HOSTILE = "Over by $200 <script>alert('x')</script> <img src=x onerror=alert(1)>"


@pytest.fixture
def harness(sqlite_harness):
    """On SQLite only: it reads the SQLite file to check the export against it."""
    return sqlite_harness


def script() -> ScriptedLLM:
    return ScriptedLLM(
        selector=[Completion("planner", Usage(400, 2, 0), model="gpt-4.1-nano"),
                  Completion("budget", Usage(450, 2, 128), model="gpt-4.1-nano"), "TERMINATE"],
        agents={
            "planner": [Completion("Day 1: **Asakusa** and `Senso-ji`.\n\n```python\nbudget = 1_500  # <b>USD</b>\n```",
                                   Usage(1200, 80, 1024), model="gpt-4o-mini-2024-07-18")],
            "budget": [Completion(HOSTILE, Usage(1300, 30, 0), model="gpt-4o-mini")],
            "local": [Completion("Try **Tsukiji** for sushi. TERMINATE", Usage(900, 25, 0), model="llama-local")],
        },
    )


async def seed(harness) -> None:
    await harness.say("Plan a 3-day Tokyo trip for under $1,500 (alice's first <b>task</b>)")
    await harness.idle()
    await harness.say("@local what about sushi?", who="bob")
    await harness.idle()
    budget = await harness.store.roster.find_agent(harness.group.id, "budget")
    await harness.store.roster.remove_agent(budget.id)  # its messages keep its name; the export still lists it


async def export(harness, fmt: str, **kwargs) -> str:
    out = io.StringIO()
    await write_export(harness.store, harness.group, fmt, out.write, now=NOW, **kwargs)
    return out.getvalue()


def rows(path: Path, sql: str) -> list[sqlite3.Row]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_json_validates_against_its_schema_and_round_trips_the_run_rows(harness):
    async with harness.running(script()):
        await seed(harness)
        data = json.loads(await export(harness, "json", page=2))  # small pages: every boundary is crossed
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert (data["format"], data["version"]) == ("roundtable-export", 4)
    assert data["exported_at"] == "2025-08-07T10:11:12.000Z"
    messages = rows(harness.path, "SELECT * FROM messages ORDER BY seq")
    assert [m["seq"] for m in data["messages"]] == [m["seq"] for m in messages] == [1, 2, 3, 4, 5]
    for exported, row in zip(data["messages"], messages):
        assert (exported["author"]["name"], exported["author"]["type"], exported["text"], exported["episode_id"],
                exported["run_id"]) == (row["author_name"], row["author_type"], row["text"], row["episode_id"],
                                        row["source_run_id"])
    runs = rows(harness.path, "SELECT * FROM runs ORDER BY id")
    assert len(data["runs"]) == len(runs) == 3
    for exported, row in zip(data["runs"], runs):
        assert exported["id"] == row["id"] and exported["status"] == row["status"] == "posted"
        assert exported["model"] == row["model"] and exported["snapshot_seq"] == row["snapshot_seq"]
        assert exported["posted_seq"] == row["posted_seq"] and exported["episode_id"] == row["episode_id"]
        assert exported["usage"] == {"prompt_tokens": row["prompt_tokens"], "cached_tokens": row["cached_tokens"],
                                     "completion_tokens": row["completion_tokens"], "estimated": bool(row["estimated"])}
        assert exported["selector_usage"]["prompt_tokens"] == row["selector_prompt_tokens"]
        assert exported["selector_usage"]["completion_tokens"] == row["selector_completion_tokens"]
    assert [r["model"] for r in data["runs"]] == ["gpt-4o-mini-2024-07-18", "gpt-4o-mini", "llama-local"]
    assert data["totals"]["usage"] == {"prompt_tokens": 1200 + 1300 + 900, "cached_tokens": 1024,
                                       "completion_tokens": 80 + 30 + 25, "estimated": False}
    decisions = {r["seq"]: r for r in rows(harness.path, "SELECT * FROM decisions")}
    for exported in data["messages"]:
        stored, decision = decisions[exported["seq"]], exported["decision"]
        assert (decision["source"], decision["selector_raw"], decision["attempts"], decision["model"]) == (
            stored["source"], json.loads(stored["selector_raw"]), stored["attempts"], stored["model"])
    assert data["messages"][0]["decision"]["agent_names"] == ["planner"]
    bobs = data["messages"][3]
    assert bobs["tags"]["agent_names"] == ["local"] and bobs["decision"]["source"] == "tags"
    assert [e["status"] for e in data["episodes"]] == ["terminated", "terminated"]
    removed = {a["name"]: a["removed_at"] for a in data["agents"]}
    assert removed["planner"] is None and removed["budget"] is not None


class Page(HTMLParser):
    """The messages of an exported page: (seq, author, text) in document order, and every tag seen."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[dict[str, str]] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.episodes: list[str] = []
        self._depth = 0  # inside a message's text: the depth of open elements there
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "article":
            self.messages.append({"seq": a["data-seq"] or "", "author": a["data-author"] or "", "text": ""})
        if self._depth:
            self._depth += 1
        elif tag == "div" and a.get("class") == "text":
            self._depth = 1
        self._in_h2 = self._in_h2 or tag == "h2"

    def handle_endtag(self, tag):
        if self._depth:
            self._depth -= 1
        if tag == "h2":
            self._in_h2 = False

    def handle_data(self, data):
        if self._depth:
            self.messages[-1]["text"] += data
        if self._in_h2:
            self.episodes.append(data)


async def test_html_holds_every_message_in_order_with_its_author_and_escapes_text(harness):
    async with harness.running(script()):
        await seed(harness)
        page = await export(harness, "html", page=2)
        stored = await harness.store.thread.messages(harness.group.id)
    parser = Page()
    parser.feed(page)
    parser.close()
    assert [(int(m["seq"]), m["author"]) for m in parser.messages] == [(m.seq, m.author_name) for m in stored]
    texts = [m["text"] for m in parser.messages]
    assert "Plan a 3-day Tokyo trip for under $1,500 (alice's first <b>task</b>)" in texts[0]
    assert "Day 1: Asakusa and Senso-ji." in texts[1] and "budget = 1_500  # <b>USD</b>" in texts[1]
    assert HOSTILE in texts[2]  # the text, shown as text
    assert "Try Tsukiji for sushi. TERMINATE" in texts[4]
    tags = [t for t, _ in parser.tags]
    assert "script" not in tags and "img" not in tags and "iframe" not in tags and "link" not in tags
    assert not any(name.startswith("on") or name == "src" for _, attrs in parser.tags for name in attrs)
    csp = next(a["content"] for t, a in parser.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert csp is not None and csp.startswith("default-src 'none';")
    assert tags.count("section") == 2 and any("terminated" in e for e in parser.episodes)
    assert tags.count("details") == 5  # every message has its routing decision to expand
    assert '<summary title="picked by #1 (selector) · → budget (selector)">' in page
    assert "run" in page and "gpt-4o-mini-2024-07-18" in page


async def test_markdown_holds_every_message(harness):
    async with harness.running(script()):
        await seed(harness)
        md = await export(harness, "md")
        stored = await harness.store.thread.messages(harness.group.id)
    at = 0
    for message in stored:
        head = f"**{message.author_name}**"
        at = md.index(head, at)
        first_line = message.text.split("\n")[0].replace("<", "&lt;")
        at = md.index(f"> {first_line}", at)
    assert "&lt;script>alert('x')&lt;/script>" in md and "<script>" not in md
    assert "> ```python\n> budget = 1_500  # <b>USD</b>\n> ```" in md  # code keeps its text
    assert md.count("### Episode") == 2 and "\n5 messages, 2 episodes; 3 runs, every run over these" in md


async def test_a_range_and_the_page_size_change_nothing_else(harness):
    async with harness.running(script()):
        await seed(harness)
        part = json.loads(await export(harness, "json", first=2, last=3))
        for fmt in ("json", "html", "md"):
            assert await export(harness, fmt, page=1) == await export(harness, fmt, page=500)
        with pytest.raises(InvalidInput, match="there is no #9"):
            await export(harness, "md", first=9)
        with pytest.raises(InvalidInput, match="its start is after its end"):
            await export(harness, "md", first=3, last=2)
        with pytest.raises(InvalidInput, match="Unknown export format 'pdf'"):
            await export(harness, "pdf")
    assert [m["seq"] for m in part["messages"]] == [2, 3] and part["range"] == {"from": 2, "to": 3}
    assert [r["snapshot_seq"] for r in part["runs"]] == [2]  # the run that answered #2; #1's run is before
    assert [e["task_seq"] for e in part["episodes"]] == [1]  # the episode the range starts in


async def test_an_empty_group_has_nothing_to_export(harness):
    async with harness.running(ScriptedLLM()):
        with pytest.raises(InvalidInput, match="has no messages yet"):
            await export(harness, "html")


async def test_the_export_verb_makes_a_file_the_console_keeps(harness, tmp_path):
    async with harness.running(script()):
        await seed(harness)
        attachment = await harness.verbs().record.export(harness.group, "md")
    assert isinstance(attachment, Attachment) and attachment.filename == "main-transcript.md"
    assert attachment.text == "main: 5 messages, 2 episodes, as Markdown."
    assert attachment.elsewhere == f"roundtable export --group {harness.group.id} --format md --out FILE"
    made = Path(attachment.path).read_text()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "main-transcript.md").write_text("someone else's file")
    said = keep_file(attachment, tmp_path / "out")
    assert said == f"main: 5 messages, 2 episodes, as Markdown. Written to {tmp_path}/out/main-transcript-1.md"
    assert (tmp_path / "out" / "main-transcript-1.md").read_text() == made
    assert (tmp_path / "out" / "main-transcript.md").read_text() == "someone else's file"
    assert not Path(attachment.path).exists()


async def test_the_formats_agree_on_what_an_ask_is_and_on_their_totals(harness):
    # HTML labelled an /ask post:true answer "picked by #N (selector)" (JSON: a direct run), and its footer
    # summed only the runs that wrote a row, leaving out private /ask answers and failed runs.
    llm = ScriptedLLM(selector=["planner", "TERMINATE"],
                      agents={"planner": [Completion("Day 1.", Usage(1000, 50, 0), model="gpt-4o-mini")]},
                      direct={"planner": [Completion("Privately: day 2.", Usage(300, 20, 0), model="gpt-4o-mini"),
                                          Completion("Posted: day 3.", Usage(500, 30, 0), model="gpt-4o-mini")]})
    async with harness.running(llm):
        verbs = harness.verbs()
        await harness.say("Plan a trip")
        await harness.idle()
        planner = await verbs.roster.agent(harness.group, "planner")
        await harness.engine.ask(harness.group, planner, "and day 2?", asker="alice")
        posted = await harness.engine.ask(harness.group, planner, "and day 3?", asker="alice", post=True)
        await harness.idle()
        assert posted.posted is not None
        data = json.loads(await export(harness, "json"))
        page, md = await export(harness, "html"), await export(harness, "md")
    assert [(r["kind"], r["status"]) for r in data["runs"]] == [("group", "posted"), ("direct", "answered"),
                                                                 ("direct", "posted")]
    totals = data["totals"]
    assert totals["runs"] == 3 and totals["usage"]["prompt_tokens"] == 1000 + 300 + 500
    seq = posted.posted.seq
    article = page[page.index(f'id="m{seq}"'):]
    article = article[:article.index("</article>")]
    assert "picked by" not in article and "answers an /ask" in article and "(an /ask, posted)" in article
    assert f"#{seq}" in md and "answers an /ask" in md.split(f"· #{seq} ·")[1].split("\n")[0]
    usage, selector = totals["usage"], totals["selector_usage"]
    assert (totals["messages"], totals["episodes"]) == (3, 1)
    line = ("3 messages, 1 episode; 3 runs, every run over these messages "
            "(its snapshot in the range): replies, failed and empty runs and private /ask answers included: "
            f"{usage['prompt_tokens']:,} prompt / {usage['cached_tokens']:,} cached / "
            f"{usage['completion_tokens']:,} completion tokens; the selector, for these messages' routing: "
            f"{selector['prompt_tokens']:,} prompt / {selector['cached_tokens']:,} cached / "
            f"{selector['completion_tokens']:,} completion tokens.")
    assert f'<footer class="end">{line}</footer>' in page.replace("&#x27;", "'")
    assert md.rstrip().endswith(line)


async def test_rolling_summaries_are_exported_with_their_cost_in_every_format(harness):
    async with harness.running(script()):
        await seed(harness)
        store, group_id = harness.store, harness.group.id
        await store.summaries.save_context_summary(group_id, ContextSummary(2, 0, "Notes: <b>Asakusa</b> first.", 12,
                                                                            model="gpt-4o-mini"), Usage(300, 60, 0))
        await store.summaries.save_context_summary(group_id, ContextSummary(4, 2, "Notes: sushi at Tsukiji.", 10,
                                                                            model="gpt-4o-mini"), Usage(250, 50, 128))
        data = json.loads(await export(harness, "json"))
        html = await export(harness, "html")
        md = await export(harness, "md")
        later = json.loads(await export(harness, "json", first=3))
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert [(s["after_seq"], s["through_seq"], s["text"], s["calls"]) for s in data["summaries"]] == [
        (0, 2, "Notes: <b>Asakusa</b> first.", 1), (2, 4, "Notes: sushi at Tsukiji.", 1)]
    assert data["summaries"][1]["usage"] == {"prompt_tokens": 250, "cached_tokens": 128, "completion_tokens": 50,
                                             "estimated": False}
    assert data["totals"]["summary_usage"] == {"prompt_tokens": 550, "cached_tokens": 128, "completion_tokens": 110,
                                               "estimated": False}
    assert [s["through_seq"] for s in later["summaries"]] == [4]  # the range's own
    line = "2 rolling summaries (what context windows cut): 550 prompt / 128 cached / 110 completion tokens"
    assert line in md and line in html
