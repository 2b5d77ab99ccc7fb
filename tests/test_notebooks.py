"""One test per notebook in notebooks/: it runs end to end under its `quick` profile.

Run as their own group: ``pytest -m notebook`` (or deselect them with ``-m "not notebook"``).
"""
from __future__ import annotations

import json
import re
import time

import nbformat
import pytest
from _kept_reports import keep

from xenbench.harness import FINDINGS_TAG, NOTEBOOKS_DIR, SUMMARY_TAG, list_notebooks, run_notebook

NOTEBOOKS = list_notebooks()


def _check_exported_runs(reports_dir, results) -> None:
    """Every ranked list the run exported is a TREC run file beside its results; ir-measures scores each, with the
    qrels named beside it, to the label values the run reported (``label_runs``; 05 reports none: it reads back)."""
    import ir_measures
    import pandas as pd

    from xenbench.data.trec import read_trec_run

    exported = results["runs_exported"]
    assert (reports_dir / exported["folder"]).is_dir() and exported["files"]
    labels = pd.DataFrame(results.get("label_runs") or [])
    for record in exported["files"]:
        run = read_trec_run(reports_dir / record["file"])
        assert len(run.lists) == record["n_queries"] and max(map(len, run.lists.values())) == record["depth"]
        if labels.empty or record["qrels"] is None:
            continue
        keys = {k: v for k, v in record.items() if k not in ("file", "qrels", "n_queries", "depth", "setting")}
        mine = labels[(labels[list(keys)] == pd.Series(keys)).all(axis=1)]
        assert len(mine) == mine["measure"].nunique() > 0, record
        measures = [ir_measures.parse_measure(m) for m in mine["measure"]]
        got = ir_measures.calc_aggregate(measures, ir_measures.read_trec_qrels(str(reports_dir / record["qrels"])),
                                         ir_measures.read_trec_run(str(reports_dir / record["file"])))
        assert {str(m): v for m, v in got.items()} == pytest.approx(dict(zip(mine["measure"], mine["value"])),
                                                                     abs=1e-12), record


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
    if results["results"].get("runs_exported"):
        _check_exported_runs(reports_dir, results["results"])

    html = (reports_dir / f"{name}.quick.html").read_text(encoding="utf-8")
    assert 'class="plotly-graph-div"' in html  # at least one figure survived the export
    assert "plotly.js v" in html and not list(reports_dir.glob("*.js"))  # self-contained: works copied alone
    assert not re.search(r'src="https?://', html)  # and nothing is fetched from a CDN
    assert len(html.encode("utf-8")) < 7 * 2**20  # the 4.6 MB plotly.js and at most ~2 MB of report

    # A newcomer reads the report: library warnings are a handful of lines, not screens of them (each message
    # once, summarized), and no progress bar is frozen before its end.
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in outputs)
    warnings = [line for line in text.splitlines() if re.search(r"\bwarn(ing)?\b", line, re.IGNORECASE)]
    assert len(warnings) <= 5, warnings[:10]
    frozen = re.findall(r"^.*\b(\d+)%\|.*$", text, re.MULTILINE)
    assert all(p == "100" for p in frozen), [line for line in text.splitlines() if "%|" in line][:5]
    source = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    # Its answer comes before the details: the summary figure, then the findings in words right under it.
    findings = html.index(f"celltag_{FINDINGS_TAG}-copy")
    assert findings < html.index("<h2") and "Findings of this run" in html[findings:html.index("<h2")]
    if any(SUMMARY_TAG in c.metadata.get("tags", []) for c in source.cells):
        assert html.index(f"celltag_{SUMMARY_TAG}-copy") < findings
    # reports/ stays small: the executed notebook holds no copy of plotly.js (the HTML does, to draw on its own)
    assert "plotly.js v" not in executed.read_text(encoding="utf-8") and executed.stat().st_size < 2 * 2**20
    leftovers = [p.name for p in reports_dir.iterdir() if p.name.startswith(".") or ".failed." in p.name]
    assert not leftovers  # no temporary or failed notebook beside a successful run
    keep(reports_dir / f"{name}.quick.html")  # make test-browser opens it rather than running the notebook again
