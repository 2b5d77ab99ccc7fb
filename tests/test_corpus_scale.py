"""The sparse-label BEIR folder built from WordNet-EL (tests/_sparse_corpus.py) and its cheap DE dot-product scorer:
what benchmarks/bench_corpus_scale.py runs the notebooks on at 10^5 items, checked here on one domain of 3,039."""
from __future__ import annotations

import numpy as np
import pytest

import _sparse_corpus as sc
from xenbench.data.beir import load_beir
from xenbench.data.datasets import Item
from xenbench.data.sources import load_wordnet_el
from xenbench.errors import ParameterError

DOMAIN = "noun.attribute"  # 3,039 items, 1,193 queries: the smallest single domain of >= 3,000 items


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_sparse_corpus_keeps_every_item_and_labels_a_share_of_queries_with_one_to_three_relevant(tmp_path):
    folder = sc.write_sparse_corpus(tmp_path / "a", n_queries=400, labelled=0.6, seed=3, domains=[DOMAIN])
    ds = load_beir(folder)
    source = load_wordnet_el(DOMAIN)
    assert ds.item_ids == source.item_ids and len(ds.items) == 3039  # every item, in the domain's order
    kept = set(ds.query_ids)
    assert len(kept) == len(ds.queries) == 400 and kept <= set(source.query_ids)
    assert [q for q in source.query_ids if q in kept] == ds.query_ids  # a sample, in the domain's order
    assert len(ds.gold) == round(0.6 * 400) and ds.splits == {"test": [q for q in ds.query_ids if q in ds.gold]}
    titles = {it.id: it.title for it in ds.items}
    counts = set()
    for qid, judged in ds.qrels.items():
        counts.add(len(judged))
        # exactly one grade-2 item: the synset whose gloss the example comes from (WordNet-EL's id '<synset>:<k>')
        assert [i for i, g in judged.items() if g == 2] == [qid.rsplit(":", 1)[0]] == source.gold[qid]
        gold_lemmas = {w.strip().lower() for w in titles[source.gold[qid][0]].split(",")}
        for item_id, grade in judged.items():
            if grade == 1:  # another synset sharing a lemma with the gold
                assert gold_lemmas & {w.strip().lower() for w in titles[item_id].split(",")}
                assert item_id != source.gold[qid][0]
    assert counts == {1, 2, 3}  # 1-3 relevant items per labelled query, each count present


def test_sparse_corpus_is_a_function_of_its_seed(tmp_path):
    a = sc.write_sparse_corpus(tmp_path / "a", n_queries=300, seed=7, domains=[DOMAIN])
    b = sc.write_sparse_corpus(tmp_path / "b", n_queries=300, seed=7, domains=[DOMAIN])
    c = sc.write_sparse_corpus(tmp_path / "c", n_queries=300, seed=8, domains=[DOMAIN])
    assert _files(a) == _files(b)
    assert _files(a)["corpus.jsonl"] == _files(c)["corpus.jsonl"]  # every item, whatever the seed
    assert _files(a)["queries.jsonl"] != _files(c)["queries.jsonl"]
    assert _files(a)["qrels/test.tsv"] != _files(c)["qrels/test.tsv"]


def test_sparse_corpus_refuses_bad_sizes():
    with pytest.raises(ParameterError, match="'n_queries' parameter of sparse_corpus"):
        sc.sparse_corpus(n_queries=1194, labelled=0.5, seed=0, domains=[DOMAIN])
    with pytest.raises(ParameterError, match="'labelled' parameter of sparse_corpus"):
        sc.sparse_corpus(n_queries=10, labelled=0.0, seed=0, domains=[DOMAIN])


def test_dot_scorer_through_the_engine_equals_the_dual_encoders_scores():
    from xenbench.models.retrievers import DualEncoder
    from xenbench.models.scoring import score_matrix

    ds = sc.sparse_corpus(n_queries=50, labelled=0.5, seed=0, domains=[DOMAIN])
    # an item of another id with the same title and text (WordNet-EL has such synsets in two domains) shares its text
    queries, items = ds.queries[:7], [*ds.items[:60], Item("copy", ds.items[3].title, ds.items[3].text)]
    scorer = sc.DualEncoderDotScorer(queries, items)
    # the engine hands the scorer "title text" strings, length-sorted, in batches of 16 pairs
    got = score_matrix(scorer, queries, items, batch_size=16, device="cpu", progress=False).scores
    want = DualEncoder(device="cpu").fit(items).scores(queries)  # cosine of "title: text" embeddings
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert np.ptp(want) > 0.3  # the comparison is not between two near-constant matrices
    np.testing.assert_array_equal(got[:, 60], got[:, 3])
    with pytest.raises(ParameterError, match="texts of the items this DualEncoderDotScorer was built for"):
        scorer.score([queries[0].text], ["no such item"])


def test_dot_scorer_refuses_one_document_text_behind_two_dual_encoder_texts():
    # "red fox" + "a dog" and "red" + "fox a dog" are one "title text" string, two "title: text" strings
    with pytest.raises(ParameterError, match="'title text' strings name one 'title: text' each. Got 'red fox a dog'"):
        sc.DualEncoderDotScorer([], [Item("a", "red fox", "a dog"), Item("b", "red", "fox a dog")])


# -- the benchmark's measurement and its page (benchmarks/bench_corpus_scale.py) ------------------------------------


def _bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_corpus_scale.py"
    spec = importlib.util.spec_from_file_location("bench_corpus_scale", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cell_stages_read_papermill_times_and_the_kernels_high_water_mark(tmp_path):
    """Three cells over a hand-made sample trace: the first raises VmHWM to 300 MB (exact), the second stays below it
    (its highest sampled RSS, 250 MB, a lower bound), the third raises it to 500 MB; CPU seconds are tick differences
    between the samples at the cells' edges."""
    import json

    bench = _bench()
    t0 = 1_700_000_000.0

    def stamp(t: float) -> str:
        import datetime

        return datetime.datetime.fromtimestamp(t0 + t, datetime.timezone.utc).isoformat().replace("+00:00", "Z")

    cells = [("x = xb.studies.setup.load_setup(a)\ny = xb.studies.protocol.query_splits(b)", 0, 10),
             ("print(1)", 10, 12), ("xb.studies.compare.compare_protocol_runs(c)", 12, 20)]
    nb = {"cells": [{"cell_type": "markdown", "source": "# t", "metadata": {}}] + [
        {"cell_type": "code", "source": src, "metadata": {"papermill": {"start_time": stamp(a), "end_time": stamp(b)}}}
        for src, a, b in cells]}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    mb = 1024  # kB per MB
    samples = [[t0 + t, rss * mb, hwm * mb, ticks] for t, rss, hwm, ticks in
               [(0, 100, 100, 0), (5, 300, 300, 400), (10, 200, 300, 900), (11, 250, 300, 1000), (12, 200, 300, 1100),
                (16, 500, 500, 1500), (20, 400, 500, 1900)]]
    rows = bench.cell_stages(tmp_path / "nb.ipynb", samples, tick_s=0.01)
    assert [r["stage"] for r in rows] == ["studies.setup.load_setup, studies.protocol.query_splits", "print(1)",
                                          "studies.compare.compare_protocol_runs"]
    assert [r["wall_s"] for r in rows] == [10, 2, 8]
    assert [r["cpu_s"] for r in rows] == [9.0, 2.0, 8.0]
    assert [(r["peak_rss_mb"], r["peak_exact"]) for r in rows] == [(300, True), (250, False), (500, True)]


def test_the_corpus_scale_block_of_the_benchmarks_page_is_its_committed_run_rendered():
    from pathlib import Path

    bench = _bench()
    text = (Path(__file__).resolve().parents[1] / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8")
    block = text.split(bench.BEGIN, 1)[1].split(bench.END, 1)[0].strip()
    want = bench.render(bench.load_document()) if bench.COMMITTED.is_file() else \
        f"Not run yet: there is no `{bench.COMMITTED.relative_to(bench.ROOT)}`."
    assert block == want, "docs/BENCHMARKS.md's corpus-scale block is stale: run `python benchmarks/run_all.py --docs`"


def test_a_run_of_one_notebook_replaces_its_rows_only():
    bench = _bench()

    def row(stage: str, peak: float) -> dict:
        return {"stage": stage, "wall_s": 1.0, "cpu_s": 1.0, "peak_rss_mb": peak, "peak_exact": True}

    doc = {"date": "d0", "command": "all",
           "stages": [row("generate: x", 1), row("07_compare_methods: the whole xenbench run", 2),
                      row("07_compare_methods cell: a", 3), row("07_compare_methods cell: b", 4),
                      row("03_adacur_rounds cell: a", 5)]}
    new = {"date": "d1", "command": "only 07", "load_average": 9.0, "load_average_end": 8.0,
           "stages": [row("generate: x", 10), row("07_compare_methods: the whole xenbench run", 20),
                      row("07_compare_methods cell: a", 30)]}
    merged = bench.merge_stages(doc, new, ["07_compare_methods", "04_axn_lambda"])
    assert [s["peak_rss_mb"] for s in merged["stages"]] == [1, 20, 30, 5]  # 07's rows in their place, others kept
    assert merged["stages"][1]["stage"] == ("07_compare_methods: the whole xenbench run (re-measured d1, load average "
                                            "9.0 to 8.0: `only 07`)")
    assert merged["command"] == "all" and doc["stages"][1]["peak_rss_mb"] == 2  # the header kept; doc untouched
