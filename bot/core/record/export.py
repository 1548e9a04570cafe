"""The record as a file: a group's thread exported as HTML, JSON or Markdown.

`write_export(store, group, fmt, write)` streams: it reads the rows of the
range a page at a time (`bot.core.record.transcript.Record`), joins each row with its
routing decision, the run that wrote it and the episode it opens, and hands
each `Entry` to the format's writer, which writes it out at once. Memory
stays bounded by a page, whatever the length of the history.

The formats: `bot.core.record.export_json` (versioned, documented in
docs/export-schema.json), `bot.core.record.export_html` (one self-contained page),
and the Markdown writer here (for pasting into an issue or a doc).
"""
from __future__ import annotations

import time

from bot.core.errors import InvalidInput
from bot.core.models import Group, SharedFile
from bot.core.record.transcript import (
    PAGE,
    Entry,
    Record,
    Span,
    Totals,
    TranscriptStore,
    Write,
    author_label,
    chosen,
    count_runs,
    episode_line,
    file_facts,
    span,
    summaries_line,
    tokens,
    totals_line,
    version_head,
    when,
)
from bot.core.rules.attachments import said
from bot.core.rules.markdown import escape_html_in_prose
from bot.core.rules.secrets import mask
from bot.core.rules.tool_lines import call_head, call_parts

FORMATS = ("html", "json", "md")


# Markdown ---------------------------------------------------------------------------------------
async def write_markdown(record: Record, write: Write, now: float) -> Totals:
    group, rows = record.group, record.span
    totals = Totals()
    private_told: set[int] = set()  # worker runs whose final text was shown (on their first post)
    write(f"# {group.name}: Roundtable transcript\n\n")
    roster = ", ".join(f"{a.name} ({a.role})" for a in record.agents.values() if record.removed[a.id] is None)
    write(f"Messages #{rows.first}-#{rows.through} of {group.latest_seq}, exported {when(now)}. "
          f"Agents: {roster or 'none'}.\n")
    async for entry in record.entries():
        totals.messages += 1
        if entry.episode is not None:
            totals.episodes += 1
            write(f"\n---\n\n### {episode_line(entry.episode)}\n")
        if entry.decision is not None:
            totals.selector_usage = totals.selector_usage + entry.decision.usage
        write(f"\n{_md_head(entry)}\n{_md_quoted(entry, record, private_told)}\n")
    await count_runs(record, totals)
    rolling = await summaries_line(record, totals)
    write(f"\n---\n\n{totals_line(totals)}" + (f" {rolling}." if rolling else "") + "\n")
    return totals


def _md_head(entry: Entry) -> str:
    """A message's head line: its author, number and time, what it answers, who was chosen, the run."""
    m = entry.message
    head = f"**{_md_name(m.author_name)}**{author_label(m)} · #{m.seq} · {when(m.created_at)}"
    if entry.earlier_task is not None:
        head += f" · answers the earlier task #{entry.earlier_task}"
    if entry.decision is not None and entry.decision.source not in ("none", "superseded"):
        head += f" · → {chosen(entry.decision)} ({entry.decision.source})"
    if entry.run is not None:
        if entry.run.kind == "direct":
            head += " · answers an /ask"
        on = f" on {entry.run.provider}" if entry.run.provider else ""
        head += f" · {entry.run.model or 'model not recorded'}{on}, {tokens(entry.run.usage)} tokens"
    return head


def _md_quoted(entry: Entry, record: Record, private_told: set[int]) -> str:
    """A message's text as a quote, with its files, tool calls, earlier versions and (once per run,
    noted in `private_told`) a worker's private final text."""
    quoted = "\n".join(f"> {line}" if line else ">" for line in
                       escape_html_in_prose(said(entry.message), record.people).split("\n"))
    for file in entry.message.attachments:
        quoted += f"\n>\n> 📎 {_md_file(file)}"
    for call in entry.calls:
        arguments, result = call_parts(call.arguments, call.status, call.result)
        quoted += (f"\n>\n> {_md_name(call_head(call.tool, call.status, call.result, call.seconds))} · "
                   f"arguments `{_md_code(arguments)}` · result `{_md_code(result)}`")
    for version in entry.versions:  # a regenerated reply's earlier texts, each on one line
        quoted += (f"\n>\n> *{version_head(version)}:* "
                   + " ".join(escape_html_in_prose(version.text, record.people).split("\n")))
    run = entry.run
    if run is not None and run.private_text is not None and run.id not in private_told:  # a worker's run
        private_told.add(run.id)
        quoted += "\n>\n> *worker's final text (private):* " + " ".join(
            escape_html_in_prose(run.private_text, record.people).split("\n"))
    return quoted


def _md_file(file: SharedFile) -> str:
    name = _md_name(file.name)
    if file.url.startswith(("https://", "http://")):
        name = f"[{name}](<{file.url}>)"
    return f"{name} {file_facts(file)}"


def _md_code(text: str) -> str:
    """Text for an inline code span on one line (a backtick would end it)."""
    return " ".join(text.split()).replace("`", "'")


def _md_name(name: str) -> str:
    return "".join("\\" + c if c in "\\`*_[]<>#|~" else c for c in name)


# the entry point ----------------------------------------------------------------------------------
async def write_export(store: TranscriptStore, group: Group, fmt: str, write: Write, *, first: int | None = None,
                       last: int | None = None, now: float | None = None, page: int = PAGE) -> Totals:
    """Stream the group's rows first..last (default: all) to `write` in `fmt` (html, json or md).
    No secret the process knows is written (`bot.core.rules.secrets`, in its escaped forms too)."""
    if fmt not in FORMATS:
        raise InvalidInput(f"Unknown export format {fmt!r}: use one of {', '.join(FORMATS)}.")
    group = await store.groups.get_group(group.id)
    record = await Record(store, group, span(group, first, last), page=page).open()
    moment = time.time() if now is None else now

    def masked(text: str) -> object:
        return write(mask(text))

    if fmt == "json":
        from bot.core.record.export_json import write_json
        return await write_json(record, masked, moment)
    if fmt == "html":
        from bot.core.record.export_html import write_html
        return await write_html(record, masked, moment)
    return await write_markdown(record, masked, moment)


def file_name(group: Group, fmt: str, rows: Span | None = None) -> str:
    """`general-transcript.html`, `general-transcript-12-40.md`: safe on every file system."""
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in group.name.lstrip("#")).strip("-") or "group"
    suffix = f"-{rows.first}-{rows.through}" if rows is not None else ""
    return f"{stem[:60]}-transcript{suffix}.{fmt}"
