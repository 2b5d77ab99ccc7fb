"""Quick-profile HTML reports kept by tests/test_notebooks.py for tests/test_browser.py.

`make test` runs every notebook under its quick profile; `make test-browser` (run after it in CI) opens the same
reports in a browser. A report is kept with the commit it was made at, and reused only when the checkout is still
that commit with nothing changed: otherwise the browser test runs the notebook again.
"""
from __future__ import annotations

from pathlib import Path

from xenbench._io import REPO_ROOT, write_bytes_atomic, write_text_atomic
from xenbench.provenance import git_state

REPO = REPO_ROOT
#: Git-ignored, like .pytest_cache.
KEPT = REPO / ".test-reports"


def checkout_commit() -> str | None:
    """HEAD's commit if the checkout has no change (tracked or untracked; ignored files aside), else None."""
    state = git_state(REPO)
    return None if state["dirty"] is not False else state["commit"]


def keep(html: Path) -> None:
    """Keep a passing report with the commit it was made at (nothing is kept from a changed checkout)."""
    commit = checkout_commit()
    if commit is None:
        return
    write_bytes_atomic(KEPT / html.name, html.read_bytes())
    write_text_atomic(KEPT / f"{html.name}.commit", commit)


def kept(name: str) -> Path | None:
    """The kept report ``<name>`` (e.g. ``01_score_matrices.quick.html``) if it was made at today's checkout."""
    commit, html, stamp = checkout_commit(), KEPT / name, KEPT / f"{name}.commit"
    if commit is None or not html.is_file() or not stamp.is_file():
        return None
    return html if stamp.read_text(encoding="utf-8") == commit else None
