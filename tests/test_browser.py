"""HTML reports in a real browser: every figure draws, nothing is fetched, no page error.

Needs a Chromium (Debian's ``chromium``; ``$XENBENCH_CHROMIUM`` overrides ``/usr/bin/chromium``) and the
``browser`` extra (python playwright, which drives that executable: no browser download). Run with
``make test-browser``; ``make test`` leaves these out (``-m "not browser"``).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from xenbench.notebook import run_notebook

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("XENBENCH_CHROMIUM", "/usr/bin/chromium")
# Without these, Chromium phones home at start-up; the closed network refuses it, noisily.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} missing: apt-get install chromium (or set $XENBENCH_CHROMIUM)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def reports(tmp_path_factory, notebook_kwargs) -> Path:
    """Reports of two real notebooks under their quick profile: the shared plotly.js and the self-contained form."""
    out = tmp_path_factory.mktemp("reports")
    run_notebook("00_data", profile="quick", out_dir=out, **notebook_kwargs)
    run_notebook("01_score_matrices", profile="quick", out_dir=out / "single", self_contained=True, **notebook_kwargs)
    return out


def _open(browser, path: Path) -> dict:
    page = browser.new_page()
    errors: list[str] = []
    remote: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda req: None if req.url.startswith(("file:", "data:", "blob:", "about:")) else
            remote.append(req.url))
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.plotly-graph-div')].every(d => d.querySelector('.main-svg'))",
        timeout=30_000)
    traces = page.evaluate("() => [...document.querySelectorAll('.plotly-graph-div')].map(d => (d.data || []).length)")
    page.close()
    return {"errors": errors, "remote": remote, "traces": traces}


def test_every_report_draws_its_figures_offline(browser, reports):
    htmls = sorted(reports.rglob("*.html"))
    assert len(htmls) == 2
    for html in htmls:
        seen = _open(browser, html)
        assert seen["traces"] and all(n > 0 for n in seen["traces"]), (html.name, seen["traces"])
        assert not seen["errors"], (html.name, seen["errors"])
        assert not seen["remote"], (html.name, seen["remote"])  # no CDN: works on a plane
