"""The HTML export: one self-contained page a person enjoys reading.

Everything is inline (styles, avatars drawn as a coloured initial), and a
Content-Security-Policy forbids loading anything, so opening the file
fetches nothing. Message text is rendered from Markdown by
`bot.core.rules.markdown` (every character escaped); code blocks keep their
layout. Episodes are sections with their status, turns and tokens; every
message carries its routing decision (and, for an agent, the run behind it)
in a `<details>` to expand, with a summary on hover. Light and dark follow
the reader's setting. No script.
"""
from __future__ import annotations

import zlib
from pathlib import Path

from bot.core.models import Decision, Message, SharedFile
from bot.core.record.transcript import (
    Entry,
    Record,
    Totals,
    Write,
    author_label,
    chosen,
    count_runs,
    episode_line,
    file_facts,
    iso,
    summaries_line,
    tokens,
    totals_line,
    version_head,
    versions_summary,
    when,
)
from bot.core.rules.attachments import said
from bot.core.rules.markdown import escape, to_html
from bot.core.rules.tool_lines import call_head, call_parts

EXPORT_ARGUMENTS_MAX = 2_000  # characters of a tool call's arguments the page shows
EXPORT_RESULT_MAX = 4_000  # and of its result (the JSON export has all that was kept)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"

STYLE = """
:root{color-scheme:light dark;--bg:#f6f7f9;--card:#fff;--text:#1d2330;--muted:#667085;--line:#e4e7ec;
--code:#f0f2f5;--accent:#4f46e5;--notice:#fff8e6;--notice-line:#f2d48a}
@media (prefers-color-scheme:dark){:root{--bg:#15171c;--card:#1e2128;--text:#e6e8ee;--muted:#9aa3b2;
--line:#2e333d;--code:#272b34;--accent:#a5b4fc;--notice:#2b2617;--notice-line:#5c4d22}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--text);font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
main{max-width:860px;margin:0 auto;padding:24px 16px 64px}
header.top{margin-bottom:20px}
header.top h1{font-size:1.5rem;margin:0 0 4px}
.meta,.muted{color:var(--muted);font-size:.85rem}
.roster{display:flex;flex-wrap:wrap;gap:8px 16px;margin:12px 0 0;padding:0;list-style:none}
.roster li{display:flex;align-items:center;gap:8px;font-size:.9rem}
.roster .avatar{width:26px;height:26px;font-size:.8rem}
section.episode{margin:28px 0 8px}
.episode>h2{font-size:.8rem;font-weight:600;letter-spacing:.02em;color:var(--muted);margin:0 0 10px;
display:flex;align-items:center;gap:10px}
.episode>h2::after{content:"";flex:1;border-top:1px solid var(--line)}
.status{display:inline-block;padding:1px 8px;border-radius:999px;border:1px solid var(--line);
font-weight:600;color:var(--text)}
.status.terminated{border-color:#16a34a;color:#16a34a}.status.max_turns,.status.stalled{border-color:#d97706;
color:#d97706}.status.stopped{border-color:#dc2626;color:#dc2626}
article.msg{display:flex;gap:12px;background:var(--card);border:1px solid var(--line);border-radius:12px;
padding:12px 14px;margin:8px 0}
article.msg.user{border-left:3px solid var(--accent)}
article.notice{background:var(--notice);border-color:var(--notice-line);font-size:.9rem}
.avatar{flex:none;width:38px;height:38px;border-radius:50%;display:flex;align-items:center;justify-content:center;
color:#fff;font-weight:700;font-size:1rem;background:hsl(var(--hue) 50% 40%)}
.user .avatar{background:hsl(var(--hue) 25% 50%)}
.notice .avatar{background:#a16207}
.body{min-width:0;flex:1}
.who{display:flex;flex-wrap:wrap;align-items:baseline;gap:4px 10px}
.who .name{font-weight:700}
.who .kind{font-size:.75rem;color:var(--muted);border:1px solid var(--line);border-radius:6px;padding:0 6px}
.who a.seq{color:var(--muted);text-decoration:none;font-size:.8rem}
.who time{color:var(--muted);font-size:.8rem}
.text{overflow-wrap:anywhere}
.text p{margin:.35em 0}.text h3,.text h4,.text h5,.text h6{margin:.6em 0 .3em}
.text blockquote{margin:.4em 0;padding:0 12px;border-left:3px solid var(--line);color:var(--muted)}
.text ul,.text ol{margin:.35em 0;padding-left:1.4em}
.text code{font:0.88em/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--code);
padding:1px 5px;border-radius:5px}
.text pre{position:relative;background:var(--code);border-radius:8px;padding:12px 14px;overflow-x:auto;margin:.5em 0}
.text pre code{background:none;padding:0;white-space:pre}
.text pre .lang{position:absolute;top:4px;right:10px;font-size:.7rem;color:var(--muted)}
.text a{color:var(--accent)}
.files{margin:.3em 0;font-size:.9rem}.file span{color:var(--muted)}.file a{color:var(--accent)}
.file pre{background:var(--code);border-radius:8px;padding:8px 12px;overflow-x:auto;max-height:30em}
.mention{color:var(--accent);font-weight:600}
.spoiler{background:var(--text);color:transparent;border-radius:4px}.spoiler:hover{color:var(--bg)}
details.why{margin-top:6px;font-size:.82rem;color:var(--muted)}
details.why summary{cursor:pointer;list-style:none;display:inline}
details.why summary::-webkit-details-marker{display:none}
details.why summary::before{content:"\\25B8\\00a0";}
details.why[open] summary::before{content:"\\25BE\\00a0";}
details.why dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:6px 0 0;
padding:8px 10px;background:var(--code);border-radius:8px}
details.why dt{font-weight:600}details.why dd{margin:0;overflow-wrap:anywhere}
.tools{margin:.3em 0;font-size:.85rem}details.tool summary{cursor:pointer;color:var(--muted)}
details.tool pre{background:var(--code);border-radius:8px;padding:8px 12px;overflow-x:auto;max-height:30em;
white-space:pre-wrap;margin:4px 0}
footer.end{margin-top:32px;color:var(--muted);font-size:.85rem;text-align:center}
"""


def hue(name: str) -> int:
    """A stable colour per name."""
    return zlib.crc32(name.casefold().encode("utf-8")) % 360


def initial(name: str) -> str:
    letter = next((c for c in name if c.isalnum()), "?")
    return escape(letter.upper())


def avatar(name: str) -> str:
    return f'<div class="avatar" style="--hue:{hue(name)}" aria-hidden="true">{initial(name)}</div>'


def _facts(pairs: list[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in pairs if v) + "</dl>"


def decision_facts(decision: Decision) -> list[tuple[str, str]]:
    facts = [("routed", f"{decision.source} → {chosen(decision)}")]
    if decision.selector_raw:
        facts.append(("selector said", " | ".join(decision.selector_raw)))
        facts.append(("attempts", str(decision.attempts)))
    if decision.confidence is not None:
        facts.append(("confidence", f"{decision.confidence:.2f}"))
    if decision.usage.prompt_tokens or decision.usage.completion_tokens:
        on = f" on {decision.provider}" if decision.provider else ""
        model = f" ({decision.model}{on})" if decision.model else ""
        facts.append(("selector tokens", tokens(decision.usage) + model))
    if decision.note:
        facts.append(("note", decision.note))
    return facts


def file_href(file: SharedFile) -> str:
    """Where a file can be opened: its URL (Discord's expires after a day; Discord opens it again for a
    member), or a console file's path as a file: URL."""
    if file.url.startswith(("https://", "http://")):
        return file.url
    if file.url.startswith("/"):
        return Path(file.url).as_uri()
    return ""


def why(entry: Entry) -> str:
    """The routing decision (and the run) behind a message, folded; its summary shows on hover."""
    facts: list[tuple[str, str]] = []
    summary: list[str] = []
    if entry.run is not None:
        run = entry.run
        kind = " (an /ask, posted)" if run.kind == "direct" else ""
        facts.append(("run", f"#{run.id}{kind} {run.status} · {run.model or 'model not recorded'}"
                      + (f" on {run.provider}" if run.provider else "")))
        facts.append(("tokens", tokens(run.usage)))
        if run.private_text is not None:  # a worker's run: its final text was never posted
            facts.append(("worker's final text (private)", run.private_text or "(empty)"))
        if run.kind == "direct":
            summary.append("answers an /ask")
    if entry.earlier_task is not None:
        facts.append(("answers", f"the earlier task #{entry.earlier_task} (a person posted during the run)"))
        summary.append(f"answers #{entry.earlier_task}")
    if entry.picked_by is not None:
        picked = entry.picked_by
        facts.append(("picked by", f"#{picked.seq} ({picked.source})"))
        summary.append(f"picked by #{picked.seq} ({picked.source})")
    if entry.decision is not None:
        facts += decision_facts(entry.decision)
        summary.append(f"→ {chosen(entry.decision)} ({entry.decision.source})")
    if not facts:
        return ""
    text = escape(" · ".join(summary) or "routing")
    return f'<details class="why"><summary title="{text}">{text}</summary>{_facts(facts)}</details>'


def message_html(entry: Entry, people: dict[str, str]) -> str:
    m: Message = entry.message
    kind = {"user": "user", "agent": "agent", "system": "notice"}[m.author_type]
    label = author_label(m).strip(" ()")
    badge = f'<span class="kind">{escape(label)}</span>' if label else ""
    return (f'<article class="msg {kind}" id="m{m.seq}" data-seq="{m.seq}" data-author="{escape(m.author_name)}">'
            f"{avatar(m.author_name)}<div class=\"body\"><div class=\"who\"><span class=\"name\">"
            f"{escape(m.author_name)}</span>{badge}<a class=\"seq\" href=\"#m{m.seq}\">#{m.seq}</a>"
            f"<time datetime=\"{iso(m.created_at)}\">{escape(when(m.created_at))}</time></div>"
            f"<div class=\"text\">{to_html(said(m), people)}</div>{files_html(m)}{tools_html(entry)}"
            f"{versions_html(entry)}{why(entry)}"
            f"</div></article>\n")


def tools_html(entry: Entry) -> str:
    """The tool calls of the run behind a reply: a line each, its arguments and result folded under it."""
    lines = []
    for call in entry.calls:
        arguments, result = call_parts(call.arguments, call.status, call.result,
                                       arguments_max=EXPORT_ARGUMENTS_MAX, result_max=EXPORT_RESULT_MAX)
        head = call_head(call.tool, call.status, call.result, call.seconds)
        lines.append(f'<details class="tool"><summary>{escape(head)}</summary><pre>arguments: {escape(arguments)}'
                     f"</pre><pre>result: {escape(result)}</pre></details>")
    return f'<div class="tools">{"".join(lines)}</div>' if lines else ""


def versions_html(entry: Entry) -> str:
    """A regenerated reply's earlier texts, folded under one line."""
    if not entry.versions:
        return ""
    texts = "".join(f"<pre>{escape(version_head(v))}:\n{escape(v.text)}</pre>" for v in entry.versions)
    return (f'<div class="tools"><details class="tool versions"><summary>↻ {escape(versions_summary(entry.versions))}'
            f"</summary>{texts}</details></div>")


def files_html(message: Message) -> str:
    """A line per shared file: an image as a link (never loaded by the page), a text file's content
    folded under its name, another file by name."""
    lines = []
    for file in message.attachments:
        facts = escape(file_facts(file))
        href = file_href(file)
        name = (f'<a href="{escape(href)}" rel="noreferrer noopener" target="_blank">{escape(file.name)}</a>'
                if href else escape(file.name))
        if file.kind == "text" and file.text is not None:
            cut = f"\n… {file.chars - len(file.text):,} more characters not kept" if file.chars > len(file.text) else ""
            lines.append(f'<details class="file"><summary>📄 {escape(file.name)} <span>{facts}</span></summary>'
                         f"<pre><code>{escape(file.text + cut)}</code></pre></details>")
        else:
            icon = "🖼" if file.kind == "image" else "📎"
            lines.append(f'<div class="file">{icon} {name} <span>{facts}</span></div>')
    return f'<div class="files">{"".join(lines)}</div>' if lines else ""


async def write_html(record: Record, write: Write, now: float) -> Totals:
    group, rows = record.group, record.span
    totals = Totals()
    title = f"{group.name}: Roundtable transcript"
    roster = "".join(f'<li>{avatar(a.name)}<span><strong>{escape(a.name)}</strong> <span class="muted">'
                     f"{escape(a.role)}</span></span></li>"
                     for a in record.agents.values() if record.removed[a.id] is None)
    write(f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
          f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
          f'<meta name="viewport" content="width=device-width, initial-scale=1">'
          f'<meta name="generator" content="Roundtable"><title>{escape(title)}</title>'
          f"<style>{STYLE}</style></head><body><main>\n"
          f'<header class="top"><h1>{escape(group.name)}</h1><div class="meta">Messages #{rows.first}–'
          f"#{rows.through} of {group.latest_seq} · exported {escape(when(now))}</div>"
          f'<ul class="roster">{roster}</ul></header>\n')
    in_section = False
    async for entry in record.entries():
        totals.messages += 1
        if entry.episode is not None:
            totals.episodes += 1
            ep = entry.episode
            status = f'<span class="status {escape(ep.status)}">{escape(ep.status)}</span>'
            line = escape(episode_line(ep)).replace(f" · {escape(ep.status)} · ", f" · {status} · ", 1)
            write(("</section>\n" if in_section else "") + f'<section class="episode" id="episode-{ep.id}">'
                  f"<h2>{line}</h2>\n")
            in_section = True
        if entry.decision is not None:
            totals.selector_usage = totals.selector_usage + entry.decision.usage
        write(message_html(entry, record.people))
    await count_runs(record, totals)
    rolling = await summaries_line(record, totals)
    write(("</section>\n" if in_section else "") + '<footer class="end">'
          + escape(totals_line(totals) + (f" {rolling}." if rolling else "")) + "</footer>\n</main></body></html>\n")
    return totals
