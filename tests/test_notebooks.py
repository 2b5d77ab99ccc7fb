"""One test per notebook in notebooks/: it runs end to end under its `quick` profile.

Run as their own group: ``pytest -m notebook`` (or deselect them with ``-m "not notebook"``).
"""
from __future__ import annotations

import json
import re
import time

import nbformat
import pytest

from xenbench.notebook import NOTEBOOKS_DIR, SUMMARY_TAG, list_notebooks, run_notebook

NOTEBOOKS = list_notebooks()


@pytest.mark.notebook
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_with_quick_profile(name, reports_dir, notebook_kwargs):
    start = time.perf_counter()
    executed = run_notebook(name, profile="quick", out_dir=reports_dir, **notebook_kwargs)
    print(f"{name} (quick): {time.perf_counter() - start:.1f} s")

    assert executed == (reports_dir / f"{name}.quick.ipynb").resolve()
    nb = nbformat.read(executed, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors

    results = json.loads((reports_dir / f"{name}.quick.results.json").read_text(encoding="utf-8"))
    assert results["notebook"] == name
    assert results["profile"] == "quick"
    assert results["results"]

    html = (reports_dir / f"{name}.quick.html").read_text(encoding="utf-8")
    assert 'class="plotly-graph-div"' in html  # at least one figure survived the export
    shared = re.search(r'<script type="text/javascript" src="(plotly-[\w.-]+\.min\.js)"></script>', html)
    assert shared and (reports_dir / shared.group(1)).is_file()  # plotly.js beside the report: works offline
    assert not re.search(r'src="https?://', html)  # and nothing is fetched from a CDN
    assert len(html.encode("utf-8")) < 2 * 2**20
    source = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    if any(SUMMARY_TAG in c.metadata.get("tags", []) for c in source.cells):  # its answer comes before the details
        assert html.index(f"celltag_{SUMMARY_TAG}-copy") < html.index("<h2")
    leftovers = [p.name for p in reports_dir.iterdir() if p.name.startswith(".") or ".failed." in p.name]
    assert not leftovers  # no temporary or failed notebook beside a successful run
