"""The label currency of notebooks 03, 04 and 07 (xenbench.studies.labels and the drivers' ``labels=``): settings
chosen on dev by nDCG@10, ranked lists written as TREC run files that ir-measures and trec_eval's code score to the
same numbers, and Top-k-Recall left exactly as it was."""
from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from xenbench.data.datasets import Dataset, Item, Query
from xenbench.data.trec import read_trec_run
from xenbench.errors import ParameterError
from xenbench.methods.baselines import rerank_baseline
from xenbench.studies.protocol import query_splits
from xenbench.metrics import LABEL_MEASURES, BudgetCounter, label_metrics, topk_indices
from xenbench.studies.adacur import adacur_protocol_runs
from xenbench.studies.axn import axn_paired_comparisons, axn_protocol_runs
from xenbench.studies.labels import choose_by_labels, export_runs, label_summary

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------------------------
# choosing on dev, by hand
# ----------------------------------------------------------------------------------------------
def test_choose_by_labels_by_hand():
    # rows 0, 1 dev; rows 2, 3 test; item 0 relevant to rows 0 and 2, item 1 to rows 1 and 3 (grade 2)
    grades = sp.csr_matrix(np.array([[1, 0, 0], [0, 2, 0], [1, 0, 0], [0, 2, 0]]))
    dev = {1.0: np.array([[2, 0, 1], [2, 1, 0]]),   # relevant at ranks 2 and 2: nDCG 1/log2(3) each
           2.0: np.array([[0, 1, 2], [1, 0, 2]])}   # relevant at rank 1 twice: nDCG 1
    test_2 = np.array([[1, 0, 2], [1, 2, 0]])       # row 2: item 0 at rank 2; row 3: item 1 at rank 1

    def never():
        raise AssertionError("the test lists of a setting not chosen are never computed")

    recs = choose_by_labels([1.0, 2.0], [dev[1.0], dev[2.0]], [never, lambda: test_2], dev_rows=np.array([0, 1]),
                            test_rows=np.array([2, 3]), grades=grades, measures=["nDCG@10", "Success@1", "RR@10"])
    by = {r["measure"]: r for r in recs}
    assert {r["setting"] for r in recs} == {2.0}
    assert by["nDCG@10"]["value"] == pytest.approx((1 / math.log2(3) + 1) / 2, abs=1e-12)
    assert by["nDCG@10"]["dev_value"] == pytest.approx(1.0)
    assert by["Success@1"]["per_query"].tolist() == [0.0, 1.0] and by["RR@10"]["value"] == pytest.approx(0.75)
    assert by["Success@1"]["rows"].tolist() == [2, 3] and by["Success@1"]["ranked"] is test_2
    # ties go to the first setting; a test query without a relevant item is not counted
    tie = choose_by_labels([5.0, 7.0], [dev[2.0], dev[2.0]], [test_2, never], dev_rows=np.array([0, 1]),
                           test_rows=np.array([2, 3]), grades=sp.csr_matrix(np.array([[1, 0, 0], [0, 2, 0],
                                                                                      [1, 0, 0], [0, 0, 0]])),
                           measures=["nDCG@10"])
    assert tie[0]["setting"] == 5.0 and tie[0]["rows"].tolist() == [2] and tie[0]["list_rows"].tolist() == [2, 3]
    with pytest.raises(ParameterError, match="The 'choose_by' parameter of choose_by_labels must be one of the"):
        choose_by_labels([1.0], [dev[1.0]], [test_2], dev_rows=np.array([0, 1]), test_rows=np.array([2, 3]),
                         grades=grades, measures=["Success@1"])


# ----------------------------------------------------------------------------------------------
# ranked lists out: files that ir-measures and trec_eval's code score to xenbench's numbers
# ----------------------------------------------------------------------------------------------
def _toy(n_queries: int = 30, n_items: int = 40) -> Dataset:
    rng = np.random.default_rng(7)
    items = [Item(f"doc{j}", f"t{j}", f"text {j}") for j in range(n_items)]
    queries = [Query(f"query{r}", f"query {r}") for r in range(n_queries)]
    qrels = {}
    for r in range(n_queries - 3):  # the last 3 queries have no relevant item
        picked = rng.choice(n_items, size=3, replace=False)
        qrels[f"query{r}"] = {f"doc{picked[0]}": 3, f"doc{picked[1]}": 1, f"doc{picked[2]}": 0}
    return Dataset("toy", items, queries, {}, {}, qrels)


@pytest.mark.parametrize("compress", [False, True])
def test_exported_runs_score_to_the_reported_numbers(tmp_path, compress):
    import ir_measures
    import pytrec_eval

    depth = 12
    ds = _toy()
    items = np.arange(len(ds.items))[::-1]  # the kept items in another order than the dataset's
    grades = ds.grades(items=[ds.items[i].id for i in items])
    rng = np.random.default_rng(0)
    records = []
    for split_seed in (0, 1):
        test = np.sort(rng.choice(len(ds.queries), size=12, replace=False))
        ranked = np.stack([rng.permutation(len(items))[:depth] for _ in test])
        ranked[0, -2:] = -1  # a shorter list
        recs = choose_by_labels([np.nan], [ranked[:0]], [ranked], dev_rows=np.empty(0, np.int64), test_rows=test,
                                grades=grades, measures=LABEL_MEASURES)
        records += [{"split_seed": split_seed, "anchor_seed": 0, "method": "A method, tuned λ", "budget": depth, **r}
                    for r in recs]
    runs = pd.DataFrame(records)
    out = export_runs(tmp_path / "nb.quick.runs", runs, ds, items, compress=compress, relative_to=tmp_path)
    gz = ".gz" if compress else ""
    assert out["folder"] == "nb.quick.runs"
    measures = [ir_measures.parse_measure(m) for m in LABEL_MEASURES]
    for f in out["files"]:
        assert f["qrels"] == f"nb.quick.runs/qrels.split{f['split_seed']}.txt{gz}"
        qrels = list(ir_measures.read_trec_qrels(str(tmp_path / f["qrels"])))
        path = tmp_path / f["file"]
        assert path.name == f"A-method-tuned.B{depth}.split{f['split_seed']}.seed0.trec{gz}"
        mine = runs[runs["split_seed"] == f["split_seed"]]
        # round trip: the file holds the list of each test query with a relevant item (those scored), in order
        first = mine.iloc[0]
        lists = read_trec_run(path).lists
        assert list(lists) == [ds.queries[r].id for r in first["rows"]] and f["n_queries"] == first["n_queries"]
        assert {q.query_id for q in qrels} == set(lists)  # the qrels judge exactly the run's queries
        for r, row in zip(first["list_rows"], first["ranked"]):
            if r in first["rows"]:
                assert lists[ds.queries[r].id] == [ds.items[items[j]].id for j in row if j >= 0]
        # ir-measures on the files gives the reported means; trec_eval's code (pytrec_eval) the per-query nDCG@10
        got = ir_measures.calc_aggregate(measures, qrels, ir_measures.read_trec_run(str(path)))
        want = dict(zip(mine["measure"], mine["value"]))
        assert {str(m): v for m, v in got.items()} == pytest.approx(want, abs=1e-12)
        run = {q: {d: float(len(v) - i) for i, d in enumerate(v)} for q, v in lists.items()}
        with (gzip.open if compress else open)(tmp_path / f["qrels"], "rt") as handle:
            evaluator = pytrec_eval.RelevanceEvaluator(pytrec_eval.parse_qrel(handle), {"ndcg_cut.10"})
        per_query = evaluator.evaluate(run)
        nd = mine[mine["measure"] == "nDCG@10"].iloc[0]
        assert [per_query[ds.queries[r].id]["ndcg_cut_10"] for r in nd["rows"]] == pytest.approx(nd["per_query"],
                                                                                                abs=1e-12)


def test_label_summary_is_the_mean_over_runs():
    runs = pd.DataFrame({"method": "m", "budget": 10, "measure": "nDCG@10", "value": [0.2, 0.4, 0.6],
                         "value_se": 0.01, "setting": [1.0, 1.0, 2.0]})
    s = label_summary(runs).iloc[0]
    assert s["mean"] == pytest.approx(0.4) and s["n_runs"] == 3 and s["setting"] == "1×2, 2×1"


# ----------------------------------------------------------------------------------------------
# the drivers: Top-k-Recall unchanged, label records where they belong
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small():
    """60 queries x 50 items of rank-5 scores; the "first stage" a noisy view; each query's relevant items: its CE
    top-1 (grade 2) and a random one (grade 1), every 6th query none."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((60, 5)), rng.standard_normal((50, 5))
    M = (A @ B.T + 0.05 * rng.standard_normal((60, 50))).astype(np.float32)
    first = M + 0.7 * rng.standard_normal(M.shape)
    g = np.zeros((60, 50), dtype=np.int64)
    for r in range(60):
        if r % 6:
            g[r, rng.integers(50)] = 1
            g[r, int(np.argmax(M[r]))] = 2
    U = A + 0.3 * rng.standard_normal(A.shape)
    return M, first, sp.csr_matrix(g), U / np.linalg.norm(U, axis=1, keepdims=True), B / np.linalg.norm(B, axis=1,
                                                                                                          keepdims=True)


def test_adacur_protocol_labels_leave_the_recalls_as_they_were(small):
    M, first, grades, _, _ = small
    splits = query_splits(60, 20, 12, [0, 1])
    kw = dict(k_values=(1, 5), de_scores=first, n_rounds=2)
    plain = adacur_protocol_runs(M, splits, [0, 1], [10, 20], **kw)
    runs, labels = adacur_protocol_runs(M, splits, [0, 1], [10, 20], labels=grades, **kw)
    pd.testing.assert_frame_equal(plain.drop(columns=["per_query", "rows"]), runs.drop(columns=["per_query", "rows"]))
    assert all(np.array_equal(a, b) for a, b in zip(plain["per_query"], runs["per_query"]))
    # DE re-rank's labels are label_metrics of the first stage's top B_CE re-ranked by the CE, by hand
    sp0 = splits[0]
    row = labels[(labels["method"] == "DE re-rank") & (labels["budget"] == 10) & (labels["split_seed"] == sp0.seed)
                 & (labels["measure"] == "nDCG@10")].iloc[0]
    _, I = rerank_baseline(BudgetCounter(M[sp0.test], 10), topk_indices(first[sp0.test], 10), 10)
    assert np.array_equal(row["ranked"], I) and row["list_rows"].tolist() == sp0.test.tolist()
    want = label_metrics(I, grades[sp0.test], ["nDCG@10"])["nDCG@10"]
    assert row["value"] == pytest.approx(want, abs=1e-12)
    assert set(row["rows"]) == {r for r in sp0.test if r % 6}  # queries without a relevant item are not counted
    # every (run, method, budget) has each measure once; deterministic methods one run per split
    counts = labels.groupby(["split_seed", "anchor_seed", "method", "budget"])["measure"].agg(sorted)
    assert all(c == sorted(LABEL_MEASURES) for c in counts)
    assert set(labels.loc[labels["method"] == "DE re-rank", "anchor_seed"]) == {0}
    anncur = labels[labels["method"] == "ANNCUR"]
    assert set(anncur["setting"]) <= {1.0, 2.0, 5.0, 8.0, 10.0, 15.0}  # a k_i of the grid, chosen on dev


def test_axn_protocol_labels_and_their_comparisons(small):
    M, first, grades, U, V = small
    splits = query_splits(60, 20, 12, [0, 1])
    kw = dict(seeds=[0, 1], lambdas=(0.0, 0.5, 1.0), budgets=[10, 20], k_values=(1, 5), n_rounds=2, mf_epochs=0,
              progress=False, device="cpu", de_scores=first)
    plain, dev_plain = axn_protocol_runs(M, splits, V, U, **kw)
    runs, dev, labels = axn_protocol_runs(M, splits, V, U, labels=grades, **kw)
    pd.testing.assert_frame_equal(plain.drop(columns=["per_query", "rows"]), runs.drop(columns=["per_query", "rows"]))
    pd.testing.assert_frame_equal(dev_plain, dev)
    assert set(labels["method"]) == {"AXN, tuned λ", "AXN, λ = 0", "AXN DE, tuned λ", "AXN DE, λ = 0",
                                     "ADACUR TopK No-Split", "DE re-rank"}
    assert set(labels.loc[labels["method"] == "AXN DE, λ = 0", "setting"]) == {0.0}
    assert labels.loc[labels["method"] == "DE re-rank", "dev_value"].isna().all()  # nothing to choose
    # the first stage's ranking is AXN DE's first round and DE re-rank's list
    sp0 = splits[0]
    rr = labels[(labels["method"] == "DE re-rank") & (labels["split_seed"] == sp0.seed) & (labels["budget"] == 10)].iloc[0]
    _, I = rerank_baseline(BudgetCounter(M[sp0.test], 10), np.argsort(-first[sp0.test], axis=1, kind="stable"), 10)
    assert np.array_equal(rr["ranked"], I)
    comp = axn_paired_comparisons(labels[labels["measure"].isin(["Success@1", "nDCG@10"])], cell="measure")
    assert set(comp["measure"]) == {"Success@1", "nDCG@10"} and {"verdict", "p_holm"} <= set(comp.columns)
    assert len(comp) == 2 * 2 * 2  # the 2 declared pairs without MF-IND × 2 budgets × 2 measures
