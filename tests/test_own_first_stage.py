"""The issue's researcher: a BEIR folder with graded qrels and a BM25 run file, through 00, 03, 04 and 07 with each
first stage (DE, TF-IDF, BM25, the run file); every notebook reports the label measures and exports runs that
ir-measures scores to the numbers it reported."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from xenbench.cli import main
from xenbench.data.sources import load_dataset
from xenbench.data.trec import write_trec_run
from xenbench.models.retrievers import BM25Retriever

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import word_pair_texts, write_beir  # noqa: E402

pytestmark = pytest.mark.notebook

REPO = Path(__file__).resolve().parent.parent


def graded_beir(root: Path, n_items: int = 40, n_queries: int = 36) -> Path:
    """Queries about one of 12 items (grade 3) and a second item sharing its first word (grade 1); a judged non-relevant
    pair (grade 0) per query."""
    items, queries = word_pair_texts(n_items, n_queries, n_gold=12)
    qrels = [(f"q{k}", f"d{k % 12 + offset}", grade)
             for k in range(n_queries) for offset, grade in ((0, 3), (12, 1), (24, 0))]
    return write_beir(root / "graded-beir", items, queries, qrels)


def bm25_run(folder: Path, path: Path) -> Path:
    """A user's BM25 run of every query (here made with bm25s, as pyserini would make one), top 30."""
    ds = load_dataset(f"beir:{folder}")
    _, I = BM25Retriever().fit(ds.items).search(ds.queries, 30)
    return write_trec_run(path, {q.id: [ds.items[j].id for j in row] for q, row in zip(ds.queries, I)}, tag="bm25")


def _results(reports: Path, name: str) -> dict:
    (path,) = reports.glob(f"{name}.quick.*.results.json")
    return json.loads(path.read_text(encoding="utf-8"))["results"]


def test_graded_beir_and_a_bm25_run_through_00_03_04_07(tmp_path, monkeypatch):
    import ir_measures

    monkeypatch.setenv("CI", "true")
    folder = graded_beir(tmp_path)
    run = bm25_run(folder, tmp_path / "bm25.trec")
    spec, model = f"beir:{folder}", str(REPO / "models" / "cls-ce")
    assert load_dataset(spec).qrels["q0"] == {"d0": 3, "d12": 1, "d24": 0}
    reports = tmp_path / "reports"
    common = ["--out", str(reports), "-p", "dataset", spec, "-p", "model", model, "-p", "max_queries", "null",
              "-p", "max_items", "null", "-p", "max_test_queries", "null", "-p", "k_values", "[1, 5]",
              "-p", "n_rounds", "2", "-p", "split_seeds", "[0, 1]", "-p", "budgets", "[10, 20]"]
    runs = {
        "00_data": ["--out", str(reports), "-p", "dataset", spec, "-p", "eval_datasets", f"[{spec}]", "-p",
                    "first_stages", f"[de, tfidf, bm25, 'run:{run}']", "-p", "n_candidates", "10",
                    "-p", "max_queries", "null"],
        "03_adacur_rounds": [*common, "-p", "first_stage", f"run:{run}", "-p", "n_anchor_queries", "14",
                             "-p", "n_dev_queries", "8", "-p", "focus_budgets", "[10, 20]", "-p", "anchor_seeds",
                             "[0, 1]", "-p", "rounds_grid", "[1, 2]", "-p", "latency_queries", "2"],
        "04_axn_lambda": [*common, "-p", "first_stage", "bm25", "-p", "n_anchor_queries", "14", "-p", "n_dev_queries",
                          "8", "-p", "first_round_seeds", "[0, 1]", "-p", "mf_items_per_query", "10",
                          "-p", "mf_epochs", "1"],
        "07_compare_methods": [*common, "-p", "first_stages", f"[tfidf, bm25, 'run:{run}']", "-p", "n_anchor_queries",
                               "14", "-p", "n_dev_queries", "8", "-p", "anchor_seeds", "[0, 1]", "-p", "axn_lambdas",
                               "[0.0, 1.0]", "-p", "mf_items_per_query", "10", "-p", "mf_epochs", "1",
                               "-p", "pefa_neighbors", "4", "-p", "pq_bytes", "null", "-p", "timing_pairs", "16"],
    }
    for name, params in runs.items():
        assert main(["run", name, *params]) == 0, name
    labels = _results(reports, "00_data")["label_metrics"]
    assert {r["retriever"] for r in labels} == {"DE", "TF-IDF", "BM25", "run bm25"}
    # the run file is xenbench's own BM25, top 30: the same lists, the same measures (R@100 of 30 items aside)
    by = {(r["retriever"], r["measure"]): r["value"] for r in labels}
    for m in ("nDCG@10", "RR@10", "Success@1", "Success@10"):
        assert by["run bm25", m] == pytest.approx(by["BM25", m], abs=1e-12)
    assert _results(reports, "03_adacur_rounds")["protocol"]["first_stage"] == f"run:{run}"
    assert _results(reports, "04_axn_lambda")["protocol"]["first_stage"] == "bm25"
    compared = _results(reports, "07_compare_methods")
    assert {"TF-IDF re-rank", "BM25 re-rank", "run bm25 re-rank"} <= {r["method"] for r in compared["label_summary"]}
    assert compared["label_best"] and {r["measure"] for r in compared["label_best"]} == {"nDCG@10"}
    for name in ("03_adacur_rounds", "04_axn_lambda", "07_compare_methods"):
        results = _results(reports, name)
        graded = {r["measure"] for r in results["label_runs"]}
        assert {"nDCG@10", "RR@10", "R@100", "Success@1", "Success@10"} <= graded
        exported = results["runs_exported"]
        assert exported["folder"].endswith(".runs") and (reports / exported["folder"]).is_dir()
        record = exported["files"][0]
        qrels = list(ir_measures.read_trec_qrels(str(reports / record["qrels"])))
        assert {q.relevance for q in qrels} == {0, 1, 3}  # the grades travel to the qrels beside the runs
        keys = {k: v for k, v in record.items() if k not in ("file", "qrels", "n_queries", "depth", "setting")}
        mine = [r for r in results["label_runs"] if all(r[k] == v for k, v in keys.items())]
        got = ir_measures.calc_aggregate([ir_measures.parse_measure(r["measure"]) for r in mine], qrels,
                                         ir_measures.read_trec_run(str(reports / record["file"])))
        assert {str(m): v for m, v in got.items()} == pytest.approx({r["measure"]: r["value"] for r in mine},
                                                                     abs=1e-12), name
