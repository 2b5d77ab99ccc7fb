"""Graded qrels, TREC run and qrels files, label metrics through ir-measures, BM25 and a run file as a first stage.

Truth is independent of the code under test: nDCG, MRR and recall written out by hand from their definitions on a
3-query graded qrels; pytrec_eval (trec_eval's code) and ir-measures reading the files xenbench writes; BM25's Lucene
formula evaluated by hand on a 3-document corpus.
"""
from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np
import pytest

from xenbench.data.beir import load_beir, save_beir
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.data.trec import check_run, read_trec_qrels, read_trec_run, write_trec_qrels, write_trec_run
from xenbench.errors import DataError, ParameterError
from xenbench.metrics import LABEL_MEASURES, label_metrics
from xenbench.models.linking import accuracy_at_k, gold_rows
from xenbench.models.retrievers import (
    BM25Retriever,
    RunRetriever,
    check_first_stage,
    first_stage_label,
    make_retriever,
)

ITEMS = [Item(f"d{j}", f"title {j}", f"text {j}") for j in range(6)]
QUERIES = [Query(q, f"query {q}") for q in ("qa", "qb", "qc", "qd")]
# qa: graded (3, 2, 1 and a judged non-relevant d3); qb: one relevant; qc: one relevant never retrieved; qd: none.
QRELS = {"qa": {"d1": 3, "d2": 2, "d3": 0, "d4": 1}, "qb": {"d2": 1}, "qc": {"d5": 2}}
RANKED = {"qa": ["d3", "d1", "d4", "d2"], "qb": ["d1", "d2"], "qc": ["d0"], "qd": ["d1"]}


def _dataset() -> Dataset:
    return Dataset("toy", list(ITEMS), list(QUERIES), {}, {"test": ["qa", "qb", "qc"]}, QRELS)


def _ranked_rows(ds: Dataset) -> np.ndarray:
    out = np.full((len(ds.queries), 4), -1, dtype=np.int64)
    for r, q in enumerate(ds.queries):
        cols = [ds.item_index[d] for d in RANKED[q.id]]
        out[r, :len(cols)] = cols
    return out


# ------------------------------------------------------------------------------------------------
# label metrics by hand
# ------------------------------------------------------------------------------------------------
def _by_hand() -> dict[str, float]:
    """The means over qa, qb, qc (qd has no relevant item: trec_eval leaves it out) of trec_eval's definitions:
    nDCG@10 = Σ gain / log2(rank + 1) over the ideal ordering's, gain = grade; RR@10 = 1 / rank of the first relevant
    item; R@100 = relevant retrieved / relevant; Success@1 = a relevant item at rank 1."""
    log2 = math.log2
    dcg_a = 0 / log2(2) + 3 / log2(3) + 1 / log2(4) + 2 / log2(5)   # d3 (0), d1 (3), d4 (1), d2 (2)
    idcg_a = 3 / log2(2) + 2 / log2(3) + 1 / log2(4)                 # 3, 2, 1
    ndcg = {"qa": dcg_a / idcg_a, "qb": (1 / log2(3)) / (1 / log2(2)), "qc": 0.0}
    rr = {"qa": 1 / 2, "qb": 1 / 2, "qc": 0.0}
    recall = {"qa": 3 / 3, "qb": 1 / 1, "qc": 0 / 1}
    success1 = {"qa": 0.0, "qb": 0.0, "qc": 0.0}
    mean = lambda d: sum(d.values()) / 3  # noqa: E731
    return {"nDCG@10": mean(ndcg), "RR@10": mean(rr), "R@100": mean(recall), "Success@1": mean(success1),
            "Success@10": 2 / 3}


def test_label_metrics_by_hand():
    ds = _dataset()
    got = label_metrics(_ranked_rows(ds), ds.grades(), LABEL_MEASURES)
    want = _by_hand()
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=1e-12), name
    rows, per_query = label_metrics(_ranked_rows(ds), ds.grades(), ["nDCG@10"], per_query=True)
    assert rows.tolist() == [0, 1, 2]  # qd, without a relevant item, is not counted
    assert per_query["nDCG@10"][1] == pytest.approx(1 / math.log2(3), abs=1e-12)


def test_label_metrics_perfect_disjoint_and_bad_inputs():
    grades = np.array([[1, 0, 2], [0, 1, 0]])
    perfect = label_metrics(np.array([[2, 0, 1], [1, 0, 2]]), grades)
    assert all(v == pytest.approx(1.0) for v in perfect.values())
    disjoint = label_metrics(np.array([[1, -1, -1], [0, 2, -1]]), grades)
    assert all(v == 0.0 for v in disjoint.values())
    assert all(math.isnan(v) for v in label_metrics(np.array([[0]]), np.array([[0]])).values())
    negative = np.array([[-1, 0, 2], [0, -1, 0]])  # row 1: judged, nothing relevant: not counted (nor exported)
    rows, values = label_metrics(np.array([[0, 2, 1], [1, 0, 2]]), negative, ["nDCG@10"], per_query=True)
    assert rows.tolist() == [0] and values["nDCG@10"][0] == pytest.approx(1 / math.log2(3))
    assert negative.tolist() == [[-1, 0, 2], [0, -1, 0]]  # the caller's grades are not touched
    with pytest.raises(ParameterError, match="The 'measures' parameter of label_metrics"):
        label_metrics(np.array([[0]]), np.array([[1]]), ["nDCG at ten"])
    with pytest.raises(ParameterError, match="The 'ranked' parameter of label_metrics must be an int array with 2 rows"):
        label_metrics(np.array([[0]]), grades)
    with pytest.raises(ParameterError, match=r"item columns in \[0, 3\)"):
        label_metrics(np.array([[3], [0]]), grades)


def test_success_at_k_is_first_gold_accuracy_with_one_gold_item():
    # one relevant item per query (entity linking): accuracy_at_k (first gold) == Success@k
    ds = Dataset("one", list(ITEMS), list(QUERIES[:3]), {"qa": ["d1"], "qb": ["d2"], "qc": ["d5"]})
    I = np.array([[1, 0, 2], [0, 2, 1], [0, 1, 2]])
    acc = accuracy_at_k(I, gold_rows(ds), (1, 2, 3))
    success = label_metrics(I, ds.grades(), ["Success@1", "Success@2", "Success@3"])
    assert [success[f"Success@{k}"] for k in (1, 2, 3)] == [acc[1], acc[2], acc[3]] == [1 / 3, 2 / 3, 2 / 3]


# ------------------------------------------------------------------------------------------------
# run and qrels files: written, read back, scored by trec_eval's code and by ir-measures
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["run.trec", "run.trec.gz"])
def test_run_round_trip_and_trec_eval_agrees(tmp_path, name):
    import ir_measures
    import pytrec_eval

    ds = _dataset()
    path = write_trec_run(tmp_path / name, RANKED, tag="toy")
    if name.endswith(".gz"):
        assert gzip.decompress(path.read_bytes()).decode().splitlines()[0] == "qa Q0 d3 1 4 toy"
    run = read_trec_run(path)
    assert run.lists == RANKED and run.tag == "toy" and run.depth == 1
    qrels_path = write_trec_qrels(tmp_path / "qrels.txt", QRELS)
    assert read_trec_qrels(qrels_path) == QRELS
    want = label_metrics(_ranked_rows(ds), ds.grades(), LABEL_MEASURES)
    measures = [ir_measures.parse_measure(m) for m in LABEL_MEASURES]
    got = ir_measures.calc_aggregate(measures, ir_measures.read_trec_qrels(str(qrels_path)),
                                     ir_measures.read_trec_run(str(path)))
    assert {str(m): v for m, v in got.items()} == pytest.approx(want, abs=1e-12)
    # trec_eval's own code, on the same files: per-query nDCG@10 averaged over the judged queries
    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    text = gzip.decompress(path.read_bytes()).decode() if name.endswith(".gz") else path.read_text()
    lines = [line.split() for line in text.splitlines()]
    trec_run: dict[str, dict[str, float]] = {}
    for qid, _, doc, _, score, _ in lines:
        trec_run.setdefault(qid, {})[doc] = float(score)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recip_rank"}).evaluate(trec_run)
    assert np.mean([v["ndcg_cut_10"] for v in per_query.values()]) == pytest.approx(want["nDCG@10"], abs=1e-12)


def test_run_order_is_by_score_then_rank(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("q1 Q0 a 3 1.0 t\nq1 Q0 b 1 5.0 t\nq1 Q0 c 2 1.0 t\n\nq2 Q0 a 1 -2 t\n")
    assert read_trec_run(path).lists == {"q1": ["b", "c", "a"], "q2": ["a"]}


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("q1 Q0 a 1 1.0\n", 1, "expected 6 whitespace-separated columns (query-id Q0 doc-id rank score tag), got 5"),
        ("q1 Q0 a 1 1.0 t\nq1 Q0 b one 0.5 t\n", 2, "rank 'one' is not an integer"),
        ("q1 Q0 a 1 inf t\n", 1, "score 'inf' is not a finite number"),
        ("q1 Q0 a 1 1.0 t\nq1 Q0 a 2 0.5 t\n", 2, "duplicate doc-id 'a' for query 'q1' (first on line 1)"),
        ("q1 Q0 a 1 1.0 t\nq1 Q0 b 1 0.5 t\n", 2,
         "duplicate rank 1 for query 'q1' (first on line 1): each row of a query needs its own rank"),
        ("\n\n", None, "no run lines: expected lines 'query-id Q0 doc-id rank score tag'"),
    ],
)
def test_bad_run_lines(tmp_path, text, line, problem):
    path = tmp_path / "bad.trec"
    path.write_text(text)
    where = re.escape(str(path)) + (f":{line}" if line else "")
    with pytest.raises(DataError, match=rf"^{where}: {re.escape(problem)}$"):
        read_trec_run(path)


def test_bad_gzip_and_bad_qrels(tmp_path):
    (tmp_path / "cut.trec.gz").write_bytes(gzip.compress("".join(f"q1 Q0 d{i} {i} 1.0 t\n" for i in range(500)).encode())[:200])
    with pytest.raises(DataError, match="not a readable gzip file"):
        read_trec_run(tmp_path / "cut.trec.gz")
    (tmp_path / "q.txt").write_text("q1 0 a 1\nq1 0 a 2\n")
    with pytest.raises(DataError, match=r"q\.txt:2: \('q1', 'a'\) judged twice \(first on line 1\)$"):
        read_trec_qrels(tmp_path / "q.txt")
    (tmp_path / "g.txt").write_text("q1 0 a 0.5\n")
    with pytest.raises(DataError, match=r"g\.txt:1: grade '0\.5' is not an integer"):
        read_trec_qrels(tmp_path / "g.txt")
    with pytest.raises(ParameterError, match="ids without whitespace"):
        write_trec_run(tmp_path / "x.trec", {"q 1": ["a"]}, tag="t")
    with pytest.raises(ParameterError, match="lists of distinct doc ids"):
        write_trec_run(tmp_path / "x.trec", {"q1": ["a", "a"]}, tag="t")


def test_check_run_refuses_in_one_line(tmp_path):
    ds = _dataset()
    ok = dict(query_ids=ds.query_ids, evaluated=["qa", "qb"], item_ids=ds.item_ids, dataset="toy")
    path = write_trec_run(tmp_path / "r.trec", {"qa": ["d1"], "qb": ["d2", "d9"]}, tag="t")
    with pytest.raises(DataError, match=r"r\.trec:2: doc id 'd9' is not an item of toy \(1 such id\(s\) in query 'qb'"):
        check_run(read_trec_run(path), **ok)
    path = write_trec_run(tmp_path / "r.trec", {"qa": ["d1"], "qz": ["d2"]}, tag="t")
    with pytest.raises(DataError, match=r"r\.trec:2: query id 'qz' is not a query of toy"):
        check_run(read_trec_run(path), **ok)
    path = write_trec_run(tmp_path / "r.trec", {"qa": ["d1"]}, tag="t")
    with pytest.raises(DataError, match=r"r\.trec: misses 1 of the 2 queries the notebook ranks with the "
                                        r"'first_stage' run \(first: 'qb'\)"):
        check_run(read_trec_run(path), **ok)
    check_run(read_trec_run(write_trec_run(tmp_path / "r.trec", RANKED, tag="t")), **ok)


# ------------------------------------------------------------------------------------------------
# graded qrels in BEIR folders
# ------------------------------------------------------------------------------------------------
def _beir(folder: Path, qrels: dict[str, str]) -> Path:
    import json

    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": it.id, "title": it.title, "text": it.text}) + "\n"
                                                 for it in ITEMS))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q.id, "text": q.text}) + "\n" for q in QUERIES))
    for name, text in qrels.items():
        (folder / "qrels" / name).write_text(text)
    return folder


def test_beir_graded_qrels_in_both_formats(tmp_path):
    beir_tsv = "query-id\tcorpus-id\tscore\nqa\td1\t3\nqa\td2\t2\nqa\td3\t0\nqa\td4\t1.0\nqd\td0\t0\n"
    trec_tsv = "qb 0 d2 1\nqc 0 d5 2\n"  # a .tsv of TREC qrels lines, told by its shape
    ds = load_beir(_beir(tmp_path / "f", {"train.tsv": beir_tsv, "test.tsv": trec_tsv}))
    assert ds.qrels == QRELS  # qd has no relevant item: nothing evaluates it, its judgement is not kept
    assert ds.gold == {"qa": ["d1", "d2", "d4"], "qb": ["d2"], "qc": ["d5"]}
    assert ds.splits == {"test": ["qb", "qc"], "train": ["qa"]}
    assert ds.grades().toarray()[0].tolist() == [0, 3, 2, 0, 1, 0]
    assert ds.grades(["qc", "qa"], ["d5", "d1"]).toarray().tolist() == [[2, 0], [0, 3]]
    # saved with its grades, read back equal; a TREC file named <split>.qrels is read as such
    assert load_beir(save_beir(ds, tmp_path / "out"), name="f") == ds
    assert (tmp_path / "out" / "qrels" / "train.tsv").read_text().splitlines()[1:] == \
        ["qa\td1\t3", "qa\td2\t2", "qa\td3\t0", "qa\td4\t1"]
    named = load_beir(_beir(tmp_path / "g", {"test.qrels": "qa 0 d1 3\nqa 0 d2 2\nqa 0 d3 0\nqa 0 d4 1\n"}))
    assert named.qrels == {"qa": QRELS["qa"]} and named.splits == {"test": ["qa"]}
    # a subset keeps grades of kept items only
    assert ds.subset(item_ids=["d1", "d3", "d5"]).qrels == {"qa": {"d1": 3, "d3": 0}, "qc": {"d5": 2}}


@pytest.mark.parametrize(
    ("files", "where", "problem"),
    [
        ({"t.tsv": "query-id\tcorpus-id\tscore\nqa\td1\t0.5\n"}, "t.tsv:2",
         "grade '0.5' is not an integer of ASCII digits (relevance grades are integers, as trec_eval and ir-measures "
         "read them: e.g. 0, 1, 2)"),
        ({"t.tsv": "query-id\tcorpus-id\tscore\nqa\td1\t1\nqa\td1\t2\n"}, "t.tsv:3",
         "('qa', 'd1') judged 1 on line 2 and 2 here: one grade per pair"),
        ({"t.tsv": "qa 0 d1 1\nqa 0 d2\n"}, "t.tsv:2",
         "expected 4 whitespace-separated columns (query-id 0 doc-id grade), got 3"),
        ({"t.qrels": "qa 0 d9 1\n"}, "t.qrels:1", "unknown corpus id 'd9' (not in corpus.jsonl)"),
        ({"a.tsv": "qa 0 d1 1\n", "b.tsv": "qa 0 d1 2\n"}, "b.tsv",
         "('qa', 'd1') is judged 2 here and 1 in a.tsv: one grade per pair across the qrels files"),
        ({"t.tsv": "qa 0 d1 1\n", "t.qrels": "qa 0 d1 1\n"}, "qrels",
         "split 't' has two qrels files: keep one of ['t.qrels', 't.tsv']"),
    ],
)
def test_bad_graded_qrels(tmp_path, files, where, problem):
    with pytest.raises(DataError, match=rf"/{re.escape(where)}: {re.escape(problem)}$"):
        load_beir(_beir(tmp_path / "f", files))


def test_dataset_qrels_and_gold_agree():
    assert Dataset("d", ITEMS, QUERIES, {"qa": ["d1"]}).qrels == {"qa": {"d1": 1}}
    with pytest.raises(ParameterError, match="The 'gold' parameter of Dataset must be the items of qrels"):
        Dataset("d", ITEMS, QUERIES, {"qa": ["d2"]}, {}, {"qa": {"d1": 1}})


# ------------------------------------------------------------------------------------------------
# BM25 and a run file as first stages
# ------------------------------------------------------------------------------------------------
def test_bm25_is_lucene_bm25_by_hand():
    items = [Item("a", "", "cat cat dog"), Item("b", "", "dog bird"), Item("c", "", "fish fish fish fish cat")]
    k1, b = 1.5, 0.75
    docs = [["cat", "cat", "dog"], ["dog", "bird"], ["fish"] * 4 + ["cat"]]
    avgdl = sum(map(len, docs)) / 3

    def bm25(terms: list[str], doc: list[str]) -> float:
        total = 0.0
        for t in terms:
            df = sum(t in d for d in docs)
            if not df:
                continue
            idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
            tf = doc.count(t)
            total += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avgdl))  # Lucene >= 8: no (k1 + 1) factor
        return total

    queries = [Query("q1", "the cat"), Query("q2", "dog and fish"), Query("q3", "zebra")]
    bm = BM25Retriever(k1=k1, b=b).fit(items)
    want = np.array([[bm25(t, d) for d in docs] for t in (["cat"], ["dog", "fish"], [])])
    np.testing.assert_allclose(bm.scores(queries), want, rtol=1e-6)
    D, I = bm.search(queries, 2)
    assert D.dtype == np.float32 and I.dtype == np.int64 and I.shape == (3, 2)
    assert I.tolist()[0] == [0, 2] and I.tolist()[2] == [0, 1]  # no match: ties in item order


def test_run_retriever_follows_the_run(tmp_path):
    path = write_trec_run(tmp_path / "bm25.trec", {"qa": ["d3", "d9", "d1"], "qb": ["d2"]}, tag="t")
    r = make_retriever(f"run:{path}").fit(ITEMS[1:4])  # items d1, d2, d3: d9 is not among them
    D, I = r.search(QUERIES[:2], 3)
    assert I.tolist() == [[2, 0, -1], [1, -1, -1]]
    assert D[0, :2].tolist() == [2.0, 1.0] and np.isneginf(D[:, -1]).all()
    with pytest.raises(DataError, match=r"bm25\.trec: has no list for query 'qc'"):
        r.scores(QUERIES[:3])
    assert isinstance(r, RunRetriever) and first_stage_label(f"run:{path}") == "run bm25"
    assert [first_stage_label(s) for s in ("de", "tfidf", "bm25")] == ["DE", "TF-IDF", "BM25"]
    for bad in ("BM25", "run:", "run: ", 3):
        with pytest.raises(ParameterError, match="The 'first_stage' parameter must be 'de', 'tfidf', 'bm25' or 'run:"):
            check_first_stage(bad)
