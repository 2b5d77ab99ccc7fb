"""Quick-profile HTML reports kept by tests/test_notebooks.py for tests/test_browser.py.

`make test` runs every notebook under its quick profile; `make test-browser` (run after it in CI) opens the same
reports in a browser. A report is kept with the commit it was made at, and reused only when the checkout is still
that commit with nothing changed: otherwise the browser test runs the notebook again.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Git-ignored, like .pytest_cache.
KEPT = REPO / ".test-reports"


def checkout_commit() -> str | None:
    """HEAD's commit if the checkout has no change (tracked or untracked; ignored files aside), else None."""
    try:
        git = lambda *a: subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True,  # noqa: E731
                                        check=True).stdout.strip()
        head, changes = git("rev-parse", "HEAD"), git("status", "--porcelain")
    except (OSError, subprocess.CalledProcessError):
        return None
    return None if changes else head


def keep(html: Path) -> None:
    """Keep a passing report with the commit it was made at (nothing is kept from a changed checkout)."""
    commit = checkout_commit()
    if commit is None:
        return
    KEPT.mkdir(exist_ok=True)
    for src, name, text in ((html, html.name, None), (None, html.name + ".commit", commit)):
        tmp = KEPT / f".{name}.{os.getpid()}.tmp"
        shutil.copy2(src, tmp) if src is not None else tmp.write_text(text, encoding="utf-8")
        tmp.replace(KEPT / name)


def kept(name: str) -> Path | None:
    """The kept report ``<name>`` (e.g. ``01_score_matrices.quick.html``) if it was made at today's checkout."""
    commit, html = checkout_commit(), KEPT / name
    stamp = KEPT / (name + ".commit")
    if commit is None or not html.is_file() or not stamp.is_file():
        return None
    return html if stamp.read_text(encoding="utf-8") == commit else None
