"""Message text as safe HTML: the Markdown subset, and that nothing in a message becomes markup
or a fetch (scripts, event handlers, javascript: links, images)."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest

from bot.core.rules.markdown import escape_html_in_prose, to_html


@pytest.mark.parametrize("text, html", [
    ("plain", "<p>plain</p>"),
    ("**bold** *it* _em_ __under__ ~~gone~~ ||secret||",
     '<p><strong>bold</strong> <em>it</em> <em>em</em> <u>under</u> <del>gone</del> '
     '<span class="spoiler">secret</span></p>'),
    ("line one\nline two\n\nnext paragraph", "<p>line one<br>line two</p><p>next paragraph</p>"),
    ("# Big\n### small", "<h3>Big</h3><h5>small</h5>"),
    ("- a\n- b\n\n3. c\n4. d", '<ul><li>a</li><li>b</li></ul><ol start="3"><li>c</li><li>d</li></ol>'),
    ("> quoted *x*\n> more", "<blockquote><p>quoted <em>x</em><br>more</p></blockquote>"),
    ("```python\nx = '<b>'\n```", '<pre><span class="lang">python</span><code class="language-python">'
                                  "x = &#x27;&lt;b&gt;&#x27;</code></pre>"),
    ("```inline <i>```", "<pre><code>inline &lt;i&gt;</code></pre>"),
    ("say `a < b` **now**", "<p>say <code>a &lt; b</code> <strong>now</strong></p>"),
    ("`**not bold**`", "<p><code>**not bold**</code></p>"),
    (r"\*not em\* 2\*3", "<p>*not em* 2*3</p>"),
    ("a_b_c snake_case_name", "<p>a_b_c snake_case_name</p>"),
    ("[docs](https://example.org/a?b=1&c=2)",
     '<p><a href="https://example.org/a?b=1&amp;c=2" rel="noopener noreferrer nofollow">docs</a></p>'),
    ("see https://example.org/x). ok", '<p>see <a href="https://example.org/x" rel="noopener noreferrer nofollow">'
                                       "https://example.org/x</a>). ok</p>"),
    ("<@123456789> hi <@999999999>", '<p><span class="mention">@alice</span> hi &lt;@999999999&gt;</p>'),
])
def test_markdown(text, html):
    assert to_html(text, {"123456789": "alice"}) == html


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[click](javascript:alert(1))",
    "[click](data:text/html;base64,PHNjcmlwdD4=)",
    "![pixel](https://tracker.example/p.gif)",
    "```\n</code></pre><script>alert(1)</script>\n```",
    "`</code><script>x</script>`",
    '[x](https://e.org/"onmouseover="alert(1))',
    "**<b onclick=alert(1)>bold</b>**",
    "<style>body{display:none}</style><iframe src=https://e.org></iframe>",
    "\x00<script>\x00",
    "> <svg onload=alert(1)>",
    "- <object data=x>",
]
SAFE_TAGS = {"p", "br", "h3", "h4", "h5", "h6", "blockquote", "ul", "ol", "li", "pre", "code", "strong", "em", "u",
             "del", "span", "a"}


@pytest.mark.parametrize("text", HOSTILE)
def test_nothing_in_a_message_becomes_markup_or_a_fetch(text):
    parser = Elements()
    parser.feed(to_html(text))
    for tag, attrs in parser.tags:
        assert tag in SAFE_TAGS, (tag, text)
        assert not any(name.startswith("on") or name in ("src", "style") for name in attrs), (tag, attrs)
        if tag == "a":
            assert (attrs["href"] or "").startswith(("https://", "http://", "mailto:")), attrs
            assert attrs["rel"] == "noopener noreferrer nofollow"


def test_a_script_stays_text():
    assert to_html("hi <script>alert('x')</script>") == "<p>hi &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</p>"


@pytest.mark.parametrize("text, md", [
    ("a <b>bold</b> word", "a &lt;b>bold&lt;/b> word"),
    ("keep `<b>` and\n```\n<i>\n```\nafter <i>", "keep `<b>` and\n```\n<i>\n```\nafter &lt;i>"),
    ("ping <@123456789>", "ping @alice"),
])
def test_markdown_export_escapes_html_only_in_prose(text, md):
    assert escape_html_in_prose(text, {"123456789": "alice"}) == md
