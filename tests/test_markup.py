"""Every user-chosen string that reaches a report's Markdown or HTML is shown as text (issue 54): the findings of a
run (``xb.findings.show``), the provenance header, the sweep summary and a widget's status line go through
:mod:`xenbench._markup`. Here the HTML is checked for raw tags; tests/test_browser.py opens it in Chromium."""
from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest

from xenbench import _markup
from xenbench.studies import findings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _payloads import EXTRA, payload, poisoned_results  # noqa: E402

# A tag that a browser would build from the text: "<" followed by a letter, "/" or "!".
RAW_TAG = re.compile(r"<\s*/?\s*(img|script|svg|details|iframe|a\s+href\s*=\s*['\"]?javascript)", re.IGNORECASE)


@pytest.fixture
def shown(monkeypatch) -> list:
    import IPython.display

    out: list = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: out.append((obj, kw)))
    return out


def test_findings_show_escapes_every_user_field(tmp_path, shown):
    for path, payloads in poisoned_results(tmp_path):
        shown.clear()
        findings.show(path)
        [(bundle, kw)] = shown
        assert kw == {"raw": True} and set(bundle) == {"text/html", "text/plain"}, bundle  # not IPython's Markdown
        page = bundle["text/html"]
        visible = html.unescape(re.sub(r"<[^>]*>", "", page))  # the text a reader sees
        for p in payloads:  # each payload reached the page whole, as text (a tag would have been stripped here)
            assert p in visible, (p, page[:3000])
        assert not RAW_TAG.search(page), RAW_TAG.search(page)
        assert 'href="javascript:' not in page.lower()


@pytest.mark.parametrize("text", [payload("x"), *EXTRA, "`" + payload("code") + "`", "**" + payload("bold") + "**",
                                  "<!-- c --><img src=x onerror=alert(1)>", "![i](data:text/html,<script>x</script>)"])
def test_markdown_html_leaves_no_raw_tag(text):
    page = _markup.markdown_html(text)
    assert not RAW_TAG.search(page), page
    assert "javascript:" not in re.sub(r"<[^>]*>", "", page) or 'href="javascript:' not in page


def test_escape_and_the_provenance_header(shown):
    assert _markup.escape(payload("x")) == "&lt;img src=x onerror=&quot;document.title=&#x27;pwned-x&#x27;&quot;&gt;"
    from xenbench import provenance

    prov = {"git": {"commit": "abc", "dirty": False}, "inputs": [{"kind": "run", "path": payload("input"),
                                                                  "sha256": "0" * 64}]}
    _markup.show_markdown("**Provenance.** " + provenance.summary(prov).replace("\n", "  \n"))
    [(bundle, _)] = shown
    page = bundle["text/html"]
    assert payload("input") in html.unescape(re.sub(r"<[^>]*>", "", page)) and not RAW_TAG.search(page)
