"""Ranked lists out (xenbench.studies.labels.export_runs, xenbench.data.trec.write_trec_run): every run file and the
qrels beside it evaluate as written, with xenbench's numbers, in tools nobody here wrote.

Truth: ranx's ``evaluate`` with its default arguments (it refuses a pair whose query ids differ) reading the files
with its own readers; trec_eval's code (pytrec_eval) on the files as pytrec_eval parses them (rank column ignored, as
trec_eval does; RR@10 as ``trec_eval -M 10 -m recip_rank``: each list cut to its first 10 in trec_eval's order, score
descending, equal scores by doc id descending). No trec_eval binary installs from PyPI or Debian here; one built from
trec_eval 10.0's source printed the same numbers to its 4 decimals (see docs/USAGE.md).
"""
from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest

from xenbench.data.datasets import Dataset, Item, Query
from xenbench.data.trec import write_trec_run
from xenbench.errors import ParameterError
from xenbench.metrics import LABEL_MEASURES, label_metrics, topk_indices
from xenbench.studies.labels import choose_by_labels, export_runs

pytestmark = pytest.mark.usefixtures("one_thread")

#: xenbench's label measures and their names in ranx and in trec_eval (pytrec_eval).
RANX = {"nDCG@10": "ndcg@10", "RR@10": "mrr@10", "R@100": "recall@100", "Success@1": "hit_rate@1",
        "Success@10": "hit_rate@10"}
TREC_EVAL = {"nDCG@10": "ndcg_cut_10", "RR@10": "recip_rank", "R@100": "recall_100", "Success@1": "success_1",
             "Success@10": "success_10"}


def _sparse_world(n_queries: int = 20, n_items: int = 60, n_kept: int = 40) -> tuple[Dataset, np.ndarray]:
    """A corpus whose labels are sparse, sampled: each query has 1-3 relevant items (grades 1-3) and two judged not
    relevant (0 and -1); ``query0``'s relevant items all fall outside the kept sample, ``query1`` has no judgement.
    So 18 of the 20 listed queries have a relevant kept item. Returns the dataset and the kept items' rows."""
    rng = np.random.default_rng(11)
    items = [Item(f"doc{j}", f"t{j}", f"text {j}") for j in range(n_items)]
    queries = [Query(f"query{r}", f"query {r}") for r in range(n_queries)]
    kept = rng.permutation(n_items)[:n_kept]  # the sample, in another order than the corpus
    dropped = np.setdiff1d(np.arange(n_items), kept)
    qrels: dict[str, dict[str, int]] = {"query0": {f"doc{dropped[0]}": 2, f"doc{kept[0]}": 0}}
    for r in range(2, n_queries):
        picked = rng.choice(n_items, size=5, replace=False)
        n_rel = int(rng.integers(1, 4))
        grades = [int(g) for g in rng.integers(1, 4, size=n_rel)] + [0, -1]
        qrels[f"query{r}"] = {f"doc{picked[i]}": grades[i] for i in range(n_rel + 2)}
        sure = f"doc{kept[r]}"  # at least one relevant item is kept
        qrels[f"query{r}"][sure] = max(qrels[f"query{r}"].get(sure, 0), 1)
    return Dataset("sparse", items, queries, {}, {}, qrels), kept


def _records(ds: Dataset, kept: np.ndarray, ranked: dict[str, np.ndarray], test: np.ndarray) -> pd.DataFrame:
    """Label records of each method's lists, as the notebooks build them (:func:`choose_by_labels`)."""
    grades = ds.grades(items=[ds.items[i].id for i in kept])
    rows = []
    for method, lists in ranked.items():
        recs = choose_by_labels([math.nan], [lists[:0]], [lists], dev_rows=np.empty(0, np.int64), test_rows=test,
                                grades=grades, measures=LABEL_MEASURES)
        rows += [{"method": method, "budget": lists.shape[1], "split_seed": 0, "anchor_seed": 1, **r} for r in recs]
    return pd.DataFrame(rows)


#: ranx's own readers and its default ``evaluate`` (no make_comparable), one call, in a fresh interpreter whose numba
#: runs ranx's jitted functions as the Python they are written in (``NUMBA_DISABLE_JIT=1``, numba's switch for that):
#: the same code and IEEE arithmetic without compiling ranx's measures first (52 of the 56 CPU-s of a first call with
#: a cold numba cache, as in a fresh clone's `make test`; the switch must be set before numba loads, hence the process).
_RANX = """import json, sys
import ranx
qrels, run, metrics = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
got = ranx.evaluate(ranx.Qrels.from_file(qrels), ranx.Run.from_file(run), metrics)
print(json.dumps({m: float(got[m]) for m in metrics}))
"""


def _ranx(qrels_path, run_path, metrics: list[str]) -> dict[str, float]:
    import json
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _RANX, str(qrels_path), str(run_path), json.dumps(metrics)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "NUMBA_DISABLE_JIT": "1"},
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _trec_eval(qrels_path, run_path, measures: set[str]) -> dict[str, dict[str, float]]:
    """trec_eval's code on the files as written: pytrec_eval's parsers (the rank column ignored), every measure on
    the whole lists but ``recip_rank``, which is read on each list's first 10 in trec_eval's order (``-M 10``)."""
    import pytrec_eval

    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    with open(run_path) as f:
        run = pytrec_eval.parse_run(f)
    out = pytrec_eval.RelevanceEvaluator(qrels, measures - {"recip_rank"}).evaluate(run)
    if "recip_rank" in measures:
        # trec_eval's order: score descending, equal scores by doc id descending (strcmp; Python's str order on ids)
        top10 = {q: dict(sorted(d.items(), key=lambda x: (x[1], x[0]), reverse=True)[:10]) for q, d in run.items()}
        for q, v in pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10).items():
            out[q]["recip_rank"] = v["recip_rank"]
    return out


def test_an_exported_pair_evaluates_as_written_in_ranx_and_trec_eval(tmp_path):
    ds, kept = _sparse_world()
    test = np.arange(len(ds.queries))
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 3, size=(test.size, kept.size)).astype(np.float64)  # heavy ties among real scores
    ranked = {"Re-rank": topk_indices(scores, 30), "ANNCUR": topk_indices(-scores, 25)}
    runs = _records(ds, kept, ranked, test)
    out = export_runs(tmp_path / "nb.quick.runs", runs, ds, kept, relative_to=tmp_path)

    assert out["qrels"] == [{"split_seed": 0, "qrels": "nb.quick.runs/qrels.split0.txt", "n_listed": 20,
                             "n_judged": 18}]
    judged = {f"query{r}" for r in range(2, 20)}
    assert {f["file"] for f in out["files"]} == {"nb.quick.runs/ANNCUR.B25.split0.seed1.trec",
                                                 "nb.quick.runs/Re-rank.B30.split0.seed1.trec"}
    for f in out["files"]:
        mine = runs[runs["method"] == f["method"]]
        want = dict(zip(mine["measure"], mine["value"]))
        assert f["n_queries"] == 18 == set(mine["n_queries"]).pop()
        qrels_path, run_path = tmp_path / f["qrels"], tmp_path / f["file"]
        assert {line.split()[0] for line in run_path.read_text().splitlines()} == judged
        assert {line.split()[0] for line in qrels_path.read_text().splitlines()} == judged

        # ranx: its own readers and its default evaluate (no make_comparable), one call (_RANX)
        got = _ranx(qrels_path, run_path, list(RANX.values()))
        assert {m: got[RANX[m]] for m in RANX} == pytest.approx(want, abs=1e-12)

        # trec_eval's code: per query and averaged over the queries it evaluates (exactly the 18)
        per_query = _trec_eval(qrels_path, run_path, {"ndcg_cut.10", "recall.100", "success.1", "success.10",
                                                      "recip_rank"})
        assert set(per_query) == judged
        means = {m: float(np.mean([v[TREC_EVAL[m]] for v in per_query.values()])) for m in TREC_EVAL}
        assert means == pytest.approx(want, abs=1e-12)
        nd = mine[mine["measure"] == "nDCG@10"].iloc[0]
        assert [per_query[ds.queries[r].id]["ndcg_cut_10"] for r in nd["rows"]] == pytest.approx(nd["per_query"],
                                                                                                abs=1e-12)


def test_tied_scores_are_written_in_xenbench_order(tmp_path):
    """All of a list's real scores tie: xenbench's order is item index ascending (topk_indices); trec_eval would break
    the tie by doc id descending. The written scores make trec_eval read xenbench's order."""
    items = [Item(f"d{j:02d}", "t", "x") for j in range(40)]
    ds = Dataset("ties", items, [Query("q", "q")], {}, {}, {"q": {"d00": 3, "d01": 1, "d39": 0}})
    ranked = topk_indices(np.zeros((1, 40)), 40)
    assert ranked[0].tolist() == list(range(40))
    want = label_metrics(ranked, ds.grades(), ["nDCG@10"])["nDCG@10"]
    assert want == pytest.approx(1.0)  # the two relevant items first, in grade order

    out = export_runs(tmp_path / "t.runs", _records(ds, np.arange(40), {"M": ranked}, np.array([0])), ds)
    run_path, qrels_path = tmp_path / out["files"][0]["file"], tmp_path / out["files"][0]["qrels"]
    assert _trec_eval(qrels_path, run_path, {"ndcg_cut.10"})["q"]["ndcg_cut_10"] == pytest.approx(want, abs=1e-12)
    # the same list with its real (tied) scores: trec_eval reads d39 ... d00, the relevant items last
    tied = tmp_path / "tied.trec"
    tied.write_text("".join(f"q Q0 {items[j].id} {r} 0.0 M\n" for r, j in enumerate(ranked[0], start=1)))
    assert _trec_eval(qrels_path, tied, {"ndcg_cut.10"})["q"]["ndcg_cut_10"] == 0.0


def test_the_written_scores_alone_give_the_order(tmp_path):
    lists = {"q1": ["b", "a", "c", "z"], "q2": ["z"]}
    path = write_trec_run(tmp_path / "r.trec", lists, tag="t")
    rows = [line.split() for line in path.read_text().splitlines()]
    assert [(q, d, int(rank), float(s)) for q, _, d, rank, s, _ in rows] == [
        ("q1", "b", 1, 4.0), ("q1", "a", 2, 3.0), ("q1", "c", 3, 2.0), ("q1", "z", 4, 1.0), ("q2", "z", 1, 1.0)]


def test_runs_are_plain_text_unless_gzip_is_asked_for(tmp_path):
    ds, kept = _sparse_world(n_items=620, n_kept=600)
    test = np.arange(len(ds.queries))
    ranked = {"Deep": np.stack([np.random.default_rng(r).permutation(600) for r in test])}  # 18 x 600 > 10,000 lines
    runs = _records(ds, kept, ranked, test)
    plain = export_runs(tmp_path / "plain", runs, ds, kept)
    packed = export_runs(tmp_path / "packed", runs, ds, kept, compress=True)
    assert plain["files"][0]["file"] == "plain/Deep.B600.split0.seed1.trec"
    assert packed["files"][0]["file"] == "packed/Deep.B600.split0.seed1.trec.gz"
    assert packed["files"][0]["qrels"] == "packed/qrels.split0.txt.gz"
    text = (tmp_path / plain["files"][0]["file"]).read_bytes()
    assert len(text.splitlines()) == 18 * 600 and text.startswith(b"query2 Q0 ")
    assert gzip.decompress((tmp_path / packed["files"][0]["file"]).read_bytes()) == text
    assert gzip.decompress((tmp_path / packed["qrels"][0]["qrels"]).read_bytes()) == (
        tmp_path / plain["qrels"][0]["qrels"]).read_bytes()


def test_export_refuses_what_no_file_pair_can_hold(tmp_path):
    ds, kept = _sparse_world()
    lists = topk_indices(np.zeros((20, kept.size)), 5)

    def one(rows, ranked):
        return pd.DataFrame([{"method": "M", "budget": 5, "split_seed": 0, "anchor_seed": 1, "list_rows": rows,
                              "ranked": ranked}])

    with pytest.raises(ParameterError, match=r"The 'compress' parameter of export_runs must be True or False\. "
                                             r"Got 'yes' instead\."):
        export_runs(tmp_path / "a", one(np.arange(20), lists), ds, kept, compress="yes")
    empty = lists.copy()
    empty[2] = -1  # query2 has a relevant kept item and an empty list
    with pytest.raises(ParameterError, match=r"a non-empty list for every query with a relevant item .*'query2'"):
        export_runs(tmp_path / "b", one(np.arange(20), empty), ds, kept)
    # no listed query has a relevant kept item: no run file, and the qrels table says so
    out = export_runs(tmp_path / "c", one(np.array([0, 1]), lists[:2]), ds, kept, relative_to=tmp_path)
    assert out == {"folder": "c", "files": [], "qrels": [{"split_seed": 0, "qrels": None, "n_listed": 2,
                                                          "n_judged": 0}]}
    assert not any((tmp_path / "c").iterdir())
