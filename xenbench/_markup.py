"""The one place where text meets HTML: every Markdown or HTML fragment xenbench shows in a notebook or writes into a
report passes through here, so a user-chosen string (a file or folder name, a model name or hub id, a dataset name, a
parameter value, an item or query id or text) is shown as text, never run as markup.

* :func:`markdown_html`: Markdown rendered to HTML by markdown-it-py (CommonMark) with raw HTML off: any ``<tag>`` in
  the source, wherever it came from, becomes text (``&lt;tag&gt;``), and a link or image to a ``javascript:``,
  ``vbscript:``, ``file:`` or ``data:`` address is left as text (markdown-it's ``validateLink``).
* :func:`show_markdown`: display that HTML in a notebook (``text/html`` and the source as ``text/plain``), what
  ``xb.findings.show`` and the report's provenance header call instead of ``IPython.display.Markdown`` (which JupyterLab
  and nbconvert render with raw HTML passed through).
* :func:`escape`: one string for an HTML fragment built by hand (the sweep summary, a widget's status line).
"""
from __future__ import annotations

import html
from functools import lru_cache
from typing import Any

__all__ = ["escape", "markdown_html", "show_markdown"]


def escape(text: object) -> str:
    """``str(text)`` with ``& < > " '`` as HTML entities: text inside an element or a quoted attribute."""
    return html.escape(str(text), quote=True)


@lru_cache(maxsize=1)
def _renderer() -> Any:
    from markdown_it import MarkdownIt

    # "commonmark" with html off: raw HTML blocks and inline tags are escaped as text; tables are not needed.
    return MarkdownIt("commonmark", {"html": False})


def markdown_html(markdown: str) -> str:
    """``markdown`` rendered to an HTML fragment with every raw HTML tag of the source escaped as text.

    >>> markdown_html('**run** `<img src=x onerror="alert(1)">.trec`')
    '<p><strong>run</strong> <code>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;.trec</code></p>\\n'
    """
    return str(_renderer().render(str(markdown)))


def show_markdown(markdown: str) -> None:
    """Display ``markdown`` in a notebook as the HTML of :func:`markdown_html` (and itself as the plain text)."""
    from IPython.display import display

    display({"text/html": markdown_html(markdown), "text/plain": str(markdown)}, raw=True)
