"""The notebooks in a real browser: every HTML report offline, and 04's AXN explorer live in JupyterLab.

* ``test_every_report_draws_its_figures_offline``: every notebook of ``notebooks/`` runs once under its
  ``quick`` profile into one folder (self-contained reports, the default; the reports ``make test`` made at the same
  commit, with nothing changed since, are reused: tests/_kept_reports.py), and ``01_score_matrices`` once more
  with the shared plotly.js (``self_contained=False``) into ``shared/``; each ``*.html`` is opened from disk and
  every plotly figure must have drawn with at least one trace, with no page error and no request other than
  ``file:``/``data:``.
* ``test_a_report_copied_alone_draws_its_figures``: each default report, copied alone into an empty folder, draws
  as many figures as it has plotly divs; the shared-plotly report copied alone draws none ("Plotly is not
  defined"), which is why it is opt-in.
* ``test_axn_explorer_live_in_jupyterlab``: a JupyterLab (127.0.0.1, a free port, a random token, no
  news/update/extension-manager look-ups, its own config/settings/workspace/runtime folders) serves a
  temporary root mirroring the repository (a copy of ``notebooks/04_axn_lambda.ipynb`` and its ``.yaml``;
  ``data/`` and ``models/`` symlinked), so nothing touches the committed notebook; ``save_results`` writes
  into that root too (``$XENBENCH_REPORTS``). The test runs all cells from the Run menu, waits for every
  cell to finish, then moves the explorer's λ slider one step (keyboard, on its handle) and changes its B_CE
  dropdown, and checks that each change redraws the ``FigureWidget`` (its traces' x/y change and the title
  names the new value), with no page error and no request leaving the server. Afterwards the kernel, the
  server and every process they started are stopped, and the test fails if one survives.

Needs a Chromium (Debian's ``chromium``; ``$XENBENCH_CHROMIUM`` overrides ``/usr/bin/chromium``), the
``browser`` extra (python playwright, which drives that executable: no browser download), and JupyterLab
with ipywidgets, anywidget and plotly's lab extension (all installed with the package). Run with
``make test-browser`` (8-10 minutes on 2 cores, mostly the notebooks; less after ``make test`` at the same commit);
``make test`` leaves these out (``-m "not browser"``). One test:
``pytest -m browser tests/test_browser.py -k jupyterlab``.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from _kept_reports import kept

from xenbench._io import REPO_ROOT
from xenbench.harness import NOTEBOOKS_DIR, REPORTS_ENV, list_notebooks, load_spec, run_notebook

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("XENBENCH_CHROMIUM", "/usr/bin/chromium")
# Without these, Chromium phones home at start-up; the closed network refuses it, noisily.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
# Requests a page makes without the network.
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


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


# ------------------------------------------------------------------------------------------------
# Every HTML report, offline
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reports(tmp_path_factory, notebook_kwargs) -> Path:
    """Every notebook's report under its quick profile (self-contained), and 01's with the shared plotly.js. A report
    that tests/test_notebooks.py made and checked at today's checkout (`make test`, before this in CI) is reused."""
    out = tmp_path_factory.mktemp("reports")
    for name in list_notebooks():
        made = kept(f"{name}.quick.html")
        if made is not None:
            shutil.copy2(made, out / made.name)
        else:
            run_notebook(name, profile="quick", out_dir=out, **notebook_kwargs)
    run_notebook("01_score_matrices", profile="quick", out_dir=out / "shared", self_contained=False, **notebook_kwargs)
    return out


def _open(browser, path: Path) -> dict:
    page = browser.new_page()
    errors: list[str] = []
    remote: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda req: None if req.url.startswith(LOCAL_SCHEMES) else remote.append(req.url))
    try:
        page.goto(path.as_uri(), wait_until="load", timeout=60_000)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.plotly-graph-div')].every(d => d.querySelector('.main-svg'))",
            timeout=60_000)
        traces = page.evaluate(
            "() => [...document.querySelectorAll('.plotly-graph-div')].map(d => (d.data || []).length)")
    finally:
        page.close()
    return {"errors": errors, "remote": remote, "traces": traces}


def test_every_report_draws_its_figures_offline(browser, reports):
    names = list_notebooks()
    expected = {f"{name}.quick.html" for name in names} | {"shared/01_score_matrices.quick.html"}
    htmls = sorted(reports.rglob("*.html"))
    assert {h.relative_to(reports).as_posix() for h in htmls} == expected
    # Each default report carries its plotly.js; the opt-in shared form has one file beside the reports.
    assert not list(reports.glob("*.js"))
    assert len(list((reports / "shared").glob("plotly-*.min.js"))) == 1
    for html in htmls:
        seen = _open(browser, html)
        assert seen["traces"] and all(n > 0 for n in seen["traces"]), (html.name, seen["traces"])
        assert not seen["errors"], (html.name, seen["errors"])
        assert not seen["remote"], (html.name, seen["remote"])  # no CDN: works on a plane


def _drawn(browser, path: Path, *, wait: bool) -> dict:
    """Open a report from disk: its plotly divs, how many drew (an SVG with at least one trace), page errors."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(path.as_uri(), wait_until="load", timeout=60_000)
        if wait:
            page.wait_for_function("() => [...document.querySelectorAll('.plotly-graph-div')]"
                                   ".every(d => d.querySelector('.main-svg'))", timeout=60_000)
        counts = page.evaluate("""() => {
            const divs = [...document.querySelectorAll('.plotly-graph-div')];
            return [divs.length, divs.filter(d => d.querySelector('.main-svg') && (d.data || []).length > 0).length];
        }""")
    finally:
        page.close()
    return {"divs": counts[0], "drawn": counts[1], "errors": errors}


def test_a_report_copied_alone_draws_its_figures(browser, reports, tmp_path):
    for html in sorted(reports.glob("*.html")):
        alone = tmp_path / html.stem / html.name
        alone.parent.mkdir()
        shutil.copy2(html, alone)  # mailed, attached, moved: nothing beside it
        seen = _drawn(browser, alone, wait=True)
        assert seen["divs"] > 0 and seen["drawn"] == seen["divs"], (html.name, seen)
        assert not seen["errors"], (html.name, seen["errors"])
    # The opt-in shared form needs its plotly file: copied alone, it draws nothing.
    alone = tmp_path / "shared-alone" / "01_score_matrices.quick.html"
    alone.parent.mkdir()
    shutil.copy2(reports / "shared" / alone.name, alone)
    seen = _drawn(browser, alone, wait=False)
    assert seen["divs"] > 0 and seen["drawn"] == 0, seen
    assert any("Plotly is not defined" in e for e in seen["errors"]), seen["errors"]


# ------------------------------------------------------------------------------------------------
# No script in a report: a user's names shown as text (issue 54)
# ------------------------------------------------------------------------------------------------

# Any element an injected payload would have built: an event handler or a javascript: link holding "pwned" (plotly keeps
# a label's raw text in data-unformatted attributes and its figure's JSON in a script, which run nothing; a script that
# ran would have changed the title).
_INJECTED = """() => [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a =>
    a.value.includes('pwned') && (a.name.startsWith('on') || /^\\s*javascript:/i.test(a.value))))
    .map(e => e.outerHTML.slice(0, 200))"""


def test_payloads_in_a_reports_findings_run_no_script(browser, tmp_path, notebook_kwargs):
    """A report whose findings, figure, table and printed text name a run file ``<img src=x onerror=...>.trec``, a
    dataset and a CE folder holding tags, a ``javascript:`` link and a caveat naming a CE (the findings of 00 and 03
    through ``xb.findings.show``, the provenance header, the report's copy of the findings at the top): opened in
    Chromium, nothing runs (the title stays, no element carries a payload's handler) and every payload is on the page
    as text."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _payloads import poisoned_results
    from test_notebook_harness import write_tiny

    folder = tmp_path / "nbs"
    folder.mkdir()
    poisoned = poisoned_results(folder)
    # plotly draws a figure's labels itself (its own few tags, no handlers, no javascript: links): a CE's name as a
    # trace, an item's as hover text and a tick, a dataset's as the title
    labels = [p for _, payloads in poisoned for p in payloads[:2]]
    figure = ("import plotly.graph_objects as go\n"
              f"labels = {labels!r}\n"
              "go.Figure(go.Bar(x=labels, y=[1] * len(labels), name=labels[0], hovertext=labels)).update_layout("
              "title=labels[1])")
    # a table (pandas escapes its cells) and printed text (a stream: nbconvert escapes it) with the same names
    table = f"import pandas as pd\nprint({labels!r})\npd.DataFrame({{'name': {labels!r}, 'n': range({len(labels)})}})"
    body = [figure, table] + [f"xb.findings.show({str(path)!r})" for path, _ in poisoned]
    path = write_tiny(folder, body=body)
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"][-1]["metadata"]["tags"] = ["findings"]  # the report repeats these findings at the top
    path.write_text(json.dumps(nb), encoding="utf-8")
    report = run_notebook(path, out_dir=tmp_path / "reports", **notebook_kwargs).with_suffix(".html")
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        page.goto(report.as_uri(), wait_until="load", timeout=60_000)
        page.wait_for_function("() => document.querySelector('.plotly-graph-div .main-svg')", timeout=60_000)
        for point in page.query_selector_all(".plotly-graph-div .point")[:4]:
            point.hover(force=True)  # the hover label of each bar
        page.wait_for_timeout(1000)  # an onerror of a broken image fires after load
        title, injected = page.title(), page.evaluate(_INJECTED)
        text = page.evaluate("() => document.body.innerText")
        links = page.evaluate("() => [...document.querySelectorAll('a[href^=\"javascript:\"]')].length")
    finally:
        page.close()
    assert "pwned" not in title and not dialogs and not injected and links == 0, (title, dialogs, injected, links)
    for _, payloads in poisoned:
        for p in payloads:
            assert p in text, p  # shown, as text


# ------------------------------------------------------------------------------------------------
# JupyterLab: 04's AXN explorer reacts to its controls
# ------------------------------------------------------------------------------------------------

LAB_NOTEBOOK = "04_axn_lambda"
LAB_TIMEOUT_MS = 600_000  # kernel start plus the quick profile: ~1-3 min on a loaded 2-core box
CHANGE_TIMEOUT_MS = 180_000  # one explorer redraw (AXN rounds for one query) in the kernel

# The explorer's FigureWidget: the plotly div inside the one widget box that also holds a slider. Its
# fingerprint is the x/y of every trace (typed arrays as lists) and the title.
_FIGURE = """() => {
    const boxes = [...document.querySelectorAll('.widget-vbox')]
        .filter(b => b.querySelector('.widget-hslider') && b.querySelector('.js-plotly-plot'));
    if (boxes.length !== 1) return null;
    const gd = boxes[0].querySelector('.js-plotly-plot');
    if (!gd.data || !gd.data.length || !gd.querySelector('.main-svg')) return null;
    const title = gd.layout && gd.layout.title ? (gd.layout.title.text ?? gd.layout.title) : '';
    const plain = (k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v;
    return {n: gd.data.length, title: String(title),
            xy: JSON.stringify(gd.data.map(t => [t.x ?? null, t.y ?? null]), plain)};
}"""
# Redrawn: other traces, and a title naming the new value (traces and layout arrive in separate messages).
_CHANGED = f"""([xy, title]) => {{
    const f = ({_FIGURE})();
    return f !== null && f.xy !== xy && f.title.includes(title);
}}"""
# Every code cell has finished (or was skipped after an error): nothing queued or running, one has run.
_SETTLED = """() => {
    const p = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')].map(e => e.textContent);
    const s = document.querySelector('.jp-Notebook-ExecutionIndicator');
    return p.length > 0 && !p.some(t => t.includes('*')) && p.some(t => /\\[\\d+\\]/.test(t))
        && (!s || s.dataset.status === 'idle');
}"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, token: str, method: str, path: str, timeout: float = 10) -> object:
    """Call the Jupyter server's REST API; returns the decoded JSON (None for an empty body)."""
    req = urllib.request.Request(base + path, method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (http://127.0.0.1 only)
        body = resp.read()
    return json.loads(body) if body else None


def _lab_root(tmp: Path) -> Path:
    """A root like the repository's, with a copy of the notebook: JupyterLab saves into the copy only."""
    root = tmp / "root"
    (root / "notebooks").mkdir(parents=True)
    for suffix in (".ipynb", ".yaml"):
        shutil.copy2(NOTEBOOKS_DIR / f"{LAB_NOTEBOOK}{suffix}", root / "notebooks")
    for folder in ("data", "models"):  # the notebook's paths are relative: ../data/scores/...
        (root / folder).symlink_to(REPO_ROOT / folder, target_is_directory=True)
    return root


def _start_lab(tmp: Path, root: Path, port: int, token: str) -> subprocess.Popen:
    """JupyterLab in its own process group, with private config/data/runtime/settings/workspace folders."""
    dirs = {name: tmp / name for name in ("config", "data", "runtime", "settings", "workspaces", "reports")}
    for d in dirs.values():
        d.mkdir()
    # No "Would you like to get notified about official Jupyter news?" toast, no update check.
    notification = dirs["settings"] / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
           "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
           "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]), REPORTS_ENV: str(dirs["reports"])}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root}", "--ServerApp.terminals_enabled=False",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly"]  # the default manager asks PyPI about extensions
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = (tmp / "jupyterlab.log").open("wb")
    try:
        return subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


def _wait_ready(proc: subprocess.Popen, base: str, token: str, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            _api(base, token, "GET", "/api/status", timeout=5)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer in {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")


def _descendants(pid: int) -> list:
    import psutil  # installed with IPython (the kernel's)

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _stop_lab(proc: subprocess.Popen, base: str, token: str, known: list) -> list[str]:
    """Shut kernels and server down (REST API first, then signals); returns what had to be killed or survived."""
    import psutil

    known = {p.pid: p for p in [*known, *_descendants(proc.pid)]}
    try:
        for kernel in _api(base, token, "GET", "/api/kernels") or []:
            _api(base, token, "DELETE", f"/api/kernels/{kernel['id']}", timeout=60)
        _api(base, token, "POST", "/api/shutdown")
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        pass  # the server is gone or stuck: the signals below
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    _, alive = psutil.wait_procs(list(known.values()), timeout=30)
    leftover = []
    for p in alive:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                leftover.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            p.kill()
        except psutil.NoSuchProcess:
            pass
    if proc.poll() is None:
        leftover.append(f"{proc.pid} jupyterlab")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    return leftover


def _cell_errors(page) -> list[str]:
    """The text of error outputs (tracebacks), for an assertion message."""
    return page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output')]
        .filter(e => e.dataset.mimeType === 'application/vnd.jupyter.stderr').map(e => e.textContent)
        .filter(t => /Error|Traceback/.test(t)).map(t => t.slice(-1500))""")


def test_axn_explorer_live_in_jupyterlab(browser, tmp_path):
    lambdas = [float(x) for x in load_spec(NOTEBOOKS_DIR / f"{LAB_NOTEBOOK}.yaml").profiles["quick"]["lambdas"]]
    root = _lab_root(tmp_path)
    port, token = _free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "jupyterlab.log"
    proc = _start_lab(tmp_path, root, port, token)
    started: list = []  # processes JupyterLab started (its kernel)
    context = None
    errors: list[str] = []
    remote: list[str] = []
    try:
        _wait_ready(proc, base, token, log)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda req: None if req.url.startswith((base, *LOCAL_SCHEMES)) else remote.append(req.url))
        page.goto(f"{base}/lab/tree/notebooks/{LAB_NOTEBOOK}.ipynb?token={token}", timeout=120_000)
        page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=120_000)
        # The kernel the notebook asked for has started and is idle.
        page.wait_for_function("() => document.body.innerText.includes('| Idle')", timeout=180_000)
        started = _descendants(proc.pid)
        assert started, "no kernel process under JupyterLab"

        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        page.wait_for_function("() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]"
                               ".some(e => e.textContent.includes('*'))", timeout=60_000)
        page.wait_for_function(_SETTLED, timeout=LAB_TIMEOUT_MS, polling=1000)
        prompts = page.evaluate("() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]"
                                ".map(e => e.textContent)")
        assert all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts), (prompts, _cell_errors(page))

        # The explorer: a VBox with the λ slider, the B_CE dropdown and a drawn FigureWidget.
        page.wait_for_function(f"() => ({_FIGURE})() !== null", timeout=120_000)
        explorer = page.locator(".widget-vbox").filter(has=page.locator(".widget-hslider")).filter(
            has=page.locator(".js-plotly-plot"))
        assert explorer.count() == 1
        first = page.evaluate(_FIGURE)
        assert first["n"] > 0, first

        # λ: one step along the slider, by keyboard on its handle (back one step if it starts at the end).
        readout = explorer.locator(".widget-hslider .widget-readout")
        lam0 = float(readout.text_content())
        assert lam0 in lambdas, (lam0, lambdas)
        step = -1 if lam0 == lambdas[-1] else 1
        handle = explorer.locator(".widget-hslider .noUi-handle")
        handle.scroll_into_view_if_needed()
        handle.focus()
        page.keyboard.press("ArrowRight" if step > 0 else "ArrowLeft")
        lam1 = lambdas[lambdas.index(lam0) + step]
        page.wait_for_function(_CHANGED, arg=[first["xy"], f"λ = {lam1:g},"], timeout=CHANGE_TIMEOUT_MS)
        second = page.evaluate(_FIGURE)
        assert float(readout.text_content()) == lam1
        assert f"λ = {lam1:g}," in second["title"], (second["title"], lam1)
        assert second["xy"] != first["xy"]

        # B_CE: another value of the dropdown.
        select = explorer.locator(".widget-dropdown").filter(
            has=page.locator("label.widget-label", has_text=re.compile(r"^B_CE$"))).locator("select")
        budget0 = select.input_value()
        options = select.locator("option").evaluate_all("os => os.map(o => o.value)")
        budget1 = next(o for o in options if o != budget0)
        select.select_option(budget1)
        page.wait_for_function(_CHANGED, arg=[second["xy"], f"B_CE = {budget1}"], timeout=CHANGE_TIMEOUT_MS)
        third = page.evaluate(_FIGURE)
        assert f"B_CE = {budget1}" in third["title"], (third["title"], budget1)
        assert f"λ = {lam1:g}," in third["title"], third["title"]
        assert third["xy"] not in (first["xy"], second["xy"])
        status = explorer.locator(".widget-html").all_text_contents()
        assert not any("Error" in s for s in status), status

        assert not errors, errors
        assert not remote, remote  # JupyterLab, its extensions and the widgets stay on 127.0.0.1
    except BaseException:
        if context is not None and context.pages:  # for the post-mortem, beside jupyterlab.log
            with contextlib.suppress(Exception):
                context.pages[0].screenshot(path=str(tmp_path / "jupyterlab.png"), full_page=True)
        raise
    finally:
        if context is not None:
            context.close()
        leftover = _stop_lab(proc, base, token, started)
    assert not leftover, f"processes started by the test were still alive (killed): {leftover}"
