"""07_compare_methods on a user's data, scored on demand like 03/04 (tests/test_own_data.py): a BEIR folder and a
ZESHEL world through `xenbench run`, and its sizes checked before the kernel starts."""
from __future__ import annotations

import json
import re

import pytest

from test_own_data import _repo, small_beir, small_zeshel
from xenbench.cli import main
from xenbench.data.sources import load_dataset

pytestmark = pytest.mark.notebook

SMALL = ["-p", "model", str(_repo() / "models" / "cls-ce"), "-p", "max_queries", "34", "-p", "max_items", "null",
         "-p", "max_test_queries", "null", "-p", "k_values", "[1, 5]", "-p", "n_rounds", "2",
         "-p", "split_seeds", "[0, 1]", "-p", "anchor_seeds", "[0, 1]", "-p", "n_anchor_queries", "14",
         "-p", "n_dev_queries", "8", "-p", "budgets", "[10, 20]", "-p", "mf_items_per_query", "10",
         "-p", "mf_epochs", "1", "-p", "pefa_neighbors", "4", "-p", "timing_pairs", "16"]


def test_compare_runs_on_a_beir_folder_and_a_zeshel_world(tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    reports = tmp_path / "reports"
    specs = {"beir-small-beir": f"beir:{small_beir(tmp_path)}",
             "zeshel": f"zeshel:{small_zeshel(tmp_path, n_entities=40, n_mentions=72)}:w@test"}
    for tag, spec in specs.items():
        assert main(["run", "07_compare_methods", "--out", str(reports), "-p", "dataset", spec, *SMALL]) == 0, tag
        [path] = reports.glob(f"07_compare_methods.quick.{tag}*.results.json")
        results = json.loads(path.read_text(encoding="utf-8"))["results"]
        methods = {row["method"] for row in results["summary"]}
        # every CE stage, and the first stages: both datasets have gold labels for PEFA, and 40 items train PQ codes
        assert {"DE re-rank", "ANNCUR", "ADACUR TopK No-Split", "AXN DE, MF-IND", "PEFA-XS re-rank",
                "PQ codes re-rank"} <= methods, tag
        assert results["protocol"]["n_items"] == len(load_dataset(spec).items)  # every item: max_items null
        assert results["ce_cost"]["seconds_per_pair"] > 0
        assert {(r["budget"], r["k"]) for r in results["best"]} == {(10, 1), (10, 5), (20, 1), (20, 5)}
        assert results["params"]["model"].endswith("cls-ce")
    html = next(reports.glob("07_compare_methods.quick.zeshel*.html")).read_text(encoding="utf-8")
    assert html.index("celltag_summary-copy") < html.index("1.-Data,-splits-and-the-DE")  # the answer first


@pytest.mark.parametrize(("params", "message"), [
    (["-p", "budgets", "[10, 50]"], r"'budgets' parameter of notebook 07_compare_methods must be ints each <= the 40 "
                                    r"items of its data \(dataset 'beir:"),
    (["-p", "n_anchor_queries", "35"], r"'n_anchor_queries' .* <= the 34 queries .*max_queries 34\). Got 35"),
])
def test_compare_checks_sizes_before_the_kernel_starts(tmp_path, monkeypatch, capsys, params, message):
    monkeypatch.setenv("CI", "true")
    reports = tmp_path / "reports"
    assert main(["run", "07_compare_methods", "--out", str(reports), "-p", "dataset",
                 f"beir:{small_beir(tmp_path)}", *SMALL, *params]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not reports.exists() or not any(reports.rglob("*"))
