"""Every notebook on a user's ZESHEL world too (with tests/test_own_data.py, all seven on both formats). A file of
its own so that the two slowest notebook tests run on different workers (`make test` runs files in parallel)."""
from __future__ import annotations

import json

import pytest
from test_own_data import _repo, small_zeshel, tiny_store_and_corpus_runs

from xenbench.cli import main

pytestmark = pytest.mark.notebook


def test_the_remaining_notebooks_run_on_a_zeshel_world(tmp_path, monkeypatch):
    """With the tests above, every notebook has run on a BEIR folder and on a ZESHEL world: here 03 (on the store
    scored on the world; 04 scores a world on demand and 02 runs on a world's stores in tests/test_own_data.py), 05
    and 06 on worlds that have only mentions/test.json."""
    monkeypatch.setenv("CI", "true")
    zeshel = f"zeshel:{small_zeshel(tmp_path, n_entities=40, n_mentions=72)}:w@test"  # 1-2 mentions per entity
    larger = f"zeshel:{small_zeshel(tmp_path / 'larger', n_entities=144, n_mentions=260)}:w"  # OPQ trains on >= d
    reports, scores = tmp_path / "reports", tmp_path / "scores"
    assert main(["score", str(_repo() / "models" / "cls-ce"), zeshel, "--out", str(scores / "cls-ce")]) == 0
    runs = {
        "06_ccsa_balance": tiny_store_and_corpus_runs(scores, larger)["06_ccsa_balance"],
        "03_adacur_rounds": ["-p", "dataset", zeshel, "-p", "scores_dir", str(scores), "-p", "ce", "cls-ce",
                             "-p", "max_items", "null", "-p", "max_test_queries", "null",
                             "-p", "k_values", "[1, 5]", "-p", "n_rounds", "2", "-p", "split_seeds", "[0]",
                             "-p", "n_anchor_queries", "20", "-p", "n_dev_queries", "10", "-p", "budgets", "[10, 20]",
                             "-p", "focus_budgets", "[10, 20]", "-p", "anchor_seeds", "[0]", "-p", "rounds_grid",
                             "[1, 2]", "-p", "latency_queries", "2"],
        "05_pefa_lambda": ["-p", "datasets", f"[{zeshel}]", "-p", "splits", "[random, by_item]", "-p", "k_values",
                           "[1, 5]", "-p", "n_neighbors", "[4]", "-p", "n_seeds", "1"],
    }
    for name, params in runs.items():
        assert main(["run", name, "--out", str(reports), *params]) == 0, name
        results = list(reports.glob(f"{name}.quick.*.results.json"))
        assert len(results) == 1, name
        saved = json.loads(results[0].read_text(encoding="utf-8"))["results"]["params"]
        assert "zeshel" in json.dumps(saved), name
