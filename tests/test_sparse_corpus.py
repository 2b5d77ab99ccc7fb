"""A corpus shaped like a researcher's (thousands of items, 1–3 relevant items per judged query, half the queries
unjudged): the sample that notebooks 03, 04 and 07 work on keeps the labels, first stages learn from the whole
corpus, and 03 and 07 run at the README's first-run sizes (issue: labels lost to a random item sample)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from xenbench.data.datasets import corpus_sample
from xenbench.data.sources import load_dataset
from xenbench.errors import ParameterError
from xenbench.sampling import sample_rows
from xenbench.studies import setup as study_setup
from xenbench.studies.setup import Setup, first_stage_lists, first_stage_matrix

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import sparse_beir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    return f"beir:{sparse_beir(tmp_path_factory.mktemp('sparse') / 'mine')}"


def _relevant(ds) -> list[set[int]]:
    g = ds.grades()
    return [set(g.indices[g.indptr[r]:g.indptr[r + 1]].tolist()) for r in range(g.shape[0])]


def test_a_random_item_sample_loses_the_labels_that_the_labelled_sample_keeps(corpus):
    ds = load_dataset(corpus)
    relevant = _relevant(ds)
    assert len(ds.items) == 3000 and 0 < sum(map(bool, relevant)) < len(ds.queries)  # sparse, partly judged
    # what a random sample of 100 items keeps of the labels of 40 random queries: almost nothing
    items = set(sample_rows(len(ds.items), 100, 0, kind="items").tolist())
    queries = sample_rows(len(ds.queries), 40, 0, kind="queries")
    assert sum(bool(relevant[q] & items) for q in queries) <= 3
    for seed in (0, 1):
        s = corpus_sample(ds, 40, 100, seed)
        kept = set(s.items.tolist())
        assert s.labelled and s.queries.size == 40 and s.items.size == 100
        assert all(relevant[q] and relevant[q] <= kept for q in s.queries)  # every sampled query keeps all of them
        assert s.n_relevant == len(set().union(*(relevant[q] for q in s.queries)))
        assert s.n_random == 100 - s.n_relevant
        again = corpus_sample(ds, 40, 100, seed)
        np.testing.assert_array_equal(s.items, again.items)  # seeded
        np.testing.assert_array_equal(s.queries, again.queries)
    assert not np.array_equal(corpus_sample(ds, 40, 100, 0).items, corpus_sample(ds, 40, 100, 1).items)
    with pytest.raises(ParameterError, match=r"'max_items' parameter of load_setup must be at least \d+ here: the 40 "
                                             r"sampled queries .* Or lower max_queries"):
        corpus_sample(ds, 40, 20, 0, owner="load_setup")


def test_bm25_and_tfidf_learn_from_the_whole_corpus_not_the_sample(corpus):
    """The first stage's scores on the sample are those of an index of the whole corpus (bm25s and scikit-learn used
    directly), restricted to the sample's columns; an index of the sample alone gives other scores."""
    import bm25s
    from bm25s.tokenization import Tokenizer
    from sklearn.feature_extraction.text import TfidfVectorizer

    ds = load_dataset(corpus)
    s = corpus_sample(ds, 40, 100, 0)
    queries = ds.subset([ds.queries[r].id for r in s.queries])
    setup = Setup(M=np.zeros((40, 100), np.float32), dataset=queries, items=s.items, attrs={}, sample=s)
    texts = [f"{it.title}: {it.text}" for it in ds.items]
    tok = Tokenizer(stopwords="en")
    index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    index.index(tok.tokenize(texts, return_as="ids", show_progress=False), show_progress=False)
    q_ids = tok.tokenize([q.text for q in queries.queries], update_vocab=False, return_as="ids", show_progress=False)
    want = np.stack([index.get_scores(list(ids))[s.items] for ids in q_ids])
    np.testing.assert_allclose(first_stage_matrix(setup, "bm25", report=False), want, rtol=1e-6)
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(texts)
    tfidf = (vec.transform([q.text for q in queries.queries]) @ vec.transform([texts[i] for i in s.items]).T)
    np.testing.assert_allclose(first_stage_matrix(setup, "tfidf", report=False), tfidf.toarray(), rtol=1e-5, atol=1e-7)
    sample_only = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit([texts[i] for i in s.items])
    alone = sample_only.transform([q.text for q in queries.queries]) @ sample_only.transform(
        [texts[i] for i in s.items]).T
    assert not np.allclose(alone.toarray(), tfidf.toarray())  # the sample's own statistics differ


def test_a_first_stage_shorter_than_the_sample_is_reported_and_filled_in_a_seeded_order(corpus, caplog):
    ds = load_dataset(corpus)
    s = corpus_sample(ds, 40, 100, 0)
    queries = ds.subset([ds.queries[r].id for r in s.queries])
    setup = Setup(M=np.zeros((40, 100), np.float32), dataset=queries, items=s.items, attrs={}, sample=s)
    full = first_stage_matrix(setup, "bm25", report=False)
    with caplog.at_level("WARNING"):
        a = first_stage_matrix(setup, "bm25", depth=50, seed=3)
    assert "get fewer than the 100 kept items from its top 50 over the corpus of 3,000 items" in caplog.text
    returned = setup.returned["bm25"]
    assert (returned < 100).all() and (returned <= 50).all()
    for row in range(40):  # the returned items first, in BM25's order; then every other item, strictly below
        order = np.argsort(-a[row], kind="stable")
        head = order[:returned[row]]
        assert (np.diff(full[row][head]) <= 0).all()
        rest = a[row][order[returned[row]:]]
        assert returned[row] == 0 or rest.max() < a[row][head].min()
        assert np.unique(rest).size == rest.size  # no ties among them: the tie rule never falls back to column order
    np.testing.assert_array_equal(a, first_stage_matrix(setup, "bm25", depth=50, seed=3, report=False))  # seeded
    assert not np.array_equal(a, first_stage_matrix(setup, "bm25", depth=50, seed=4, report=False))


def test_first_stage_lists_are_the_top_k_of_first_stage_matrix_a_block_of_rows_at_a_time(corpus, monkeypatch):
    """07's first stages read lists (no queries x items array): blocks of 7 query rows give each row's top k of the
    whole matrix, the seeded order of the items not returned included (one random stream across the blocks)."""
    from xenbench.metrics import topk_indices

    ds = load_dataset(corpus)
    s = corpus_sample(ds, 40, 100, 0)
    queries = ds.subset([ds.queries[r].id for r in s.queries])
    setup = Setup(M=np.zeros((40, 100), np.float32), dataset=queries, items=s.items, attrs={}, sample=s)
    monkeypatch.setattr(study_setup, "_DEPTH_ROWS", 7)
    for spec, depth in (("bm25", 30), ("tfidf", None)):
        full = first_stage_matrix(setup, spec, depth=depth, seed=3, report=False)
        returned = setup.returned[spec].copy()
        D, I = first_stage_lists(setup, spec, 60, depth=depth, seed=3, report=False)
        assert D.shape == I.shape == (40, 60) and D.dtype == np.float32 and I.dtype == np.int64
        np.testing.assert_array_equal(I, topk_indices(full, 60))
        np.testing.assert_array_equal(D, np.take_along_axis(full, I, axis=1))
        np.testing.assert_array_equal(setup.returned[spec], returned)


@pytest.mark.notebook
def test_03_and_07_finish_at_the_readme_first_run_sizes_with_every_label_number_counted(corpus, tmp_path,
                                                                                       monkeypatch):
    """The README's first run, on the sparse corpus with a bundled CE: it finished (a random sample once crashed in
    label_summary), every split's dev and test queries have labels, and the label numbers carry their counts."""
    from xenbench.cli import main

    monkeypatch.setenv("CI", "true")
    reports = tmp_path / "reports"
    common = ["--out", str(reports), "-p", "dataset", corpus, "-p", "model", str(REPO / "models" / "cls-ce"),
              "-p", "max_queries", "40", "-p", "max_items", "100", "-p", "n_anchor_queries", "20",
              "-p", "n_dev_queries", "10", "-p", "max_test_queries", "null", "-p", "split_seeds", "[0, 1]",
              "-p", "anchor_seeds", "[0, 1]", "-p", "budgets", "[10, 20]", "-p", "k_values", "[1, 10]",
              "-p", "n_rounds", "2"]
    assert main(["run", "03_adacur_rounds", *common, "-p", "focus_budgets", "[10, 20]", "-p", "rounds_grid", "[1, 2]",
                 "-p", "latency_queries", "2"]) == 0
    assert main(["run", "07_compare_methods", *common, "-p", "mf_items_per_query", "10", "-p", "mf_epochs", "1",
                 "-p", "pefa_neighbors", "4", "-p", "timing_pairs", "16", "-p", "first_stages", "[bm25]"]) == 0
    r03 = json.loads(next(reports.glob("03_adacur_rounds.*.results.json")).read_text(encoding="utf-8"))["results"]
    assert r03["label_summary"] and {row["n_queries"] for row in r03["label_summary"]} == {10}  # 40 - 20 - 10
    r07 = json.loads(next(reports.glob("07_compare_methods.*.results.json")).read_text(encoding="utf-8"))["results"]
    assert r07["label_best"] and {row["n_queries"] for row in r07["label_best"]} == {10}
    html = next(reports.glob("03_adacur_rounds.*.html")).read_text(encoding="utf-8")
    assert "each run on 10 test queries with a relevant item" in html
    assert "drawn at random" in html  # the sample's make-up is said


def test_fit_sizes_the_sample_to_the_timeout_keeping_ten_test_queries(corpus):
    """xenbench run --fit: the fewest queries that leave FIT_MIN_TEST test queries beside the anchor and dev ones, and
    as many items as the share of the timeout scores at the measured rate; the whole corpus and more queries when it
    fits; a refusal naming the timeout when even the least sample does not."""
    from xenbench.harness import load_spec, profile_values
    from xenbench.harness.preflight import FIT_MIN_TEST, FIT_SHARE, fit_sizes
    from xenbench.harness.sizes import check_sizes

    spec = load_spec("03_adacur_rounds")
    values = {**profile_values(spec, "quick"), "dataset": corpus, "model": "x", "n_anchor_queries": 20,
              "n_dev_queries": 10, "max_test_queries": None}
    ds = load_dataset(corpus)
    caps = fit_sizes(spec, values, {}, ds, pairs_per_s=100.0, timeout=100)
    assert caps == {"max_queries": 20 + 10 + FIT_MIN_TEST, "max_items": int(FIT_SHARE * 100 * 100 // 40)}
    # a probe 4% faster (156 items would fit) chooses the same round size: the same sample, its scores cached
    assert fit_sizes(spec, values, {}, ds, pairs_per_s=104.0, timeout=100) == caps
    assert fit_sizes(spec, values, {}, ds, pairs_per_s=140.0, timeout=100)["max_items"] == 200  # 210 fit
    assert check_sizes(spec, {**values, **caps}) == {"queries": 40, "items": 150}
    labelled = corpus_sample(ds).queries.size
    everything = fit_sizes(spec, values, {}, ds, pairs_per_s=1e6, timeout=100)  # 6e7 pairs: the whole corpus fits
    assert everything == {"max_queries": None, "max_items": None} and labelled * 3000 <= 6e7
    with pytest.raises(ParameterError, match=r"'timeout' parameter of notebook 03_adacur_rounds must be longer for "
                                             r"--fit to find a sample: the least this notebook needs \(max_queries 40, "
                                             r"max_items \d+\)") as refused:
        fit_sizes(spec, values, {}, ds, pairs_per_s=1.0, timeout=100)
    least = int(str(refused.value).split("max_items ")[1].split(")")[0])
    longer = math.ceil(40 * least / 1.0 / FIT_SHARE * 1.25)
    assert f"Raise it (xenbench run --fit --timeout {longer}). Got 100 instead." in str(refused.value)
    assert fit_sizes(spec, values, {}, ds, pairs_per_s=1.0, timeout=longer)["max_queries"] == 40  # and it fits


@pytest.mark.parametrize(("params", "message"), [
    # 20 anchor + 10 dev of 33 sampled queries leave 3 test queries per split: too few for a label measure
    (["-p", "max_queries", "33"], r"The 'max_queries' parameter of notebook 03_adacur_rounds must be at least "
                                  r"n_anchor_queries \+ n_dev_queries \+ 5 = 35 queries of the sample \(33 now\)"),
    (["-p", "max_test_queries", "2"], r"The 'max_test_queries' parameter of notebook 03_adacur_rounds must be at "
                                      r"least 5: test queries with a relevant item per split"),
    # 40 sampled queries hold more relevant items than 20 items
    (["-p", "max_items", "20", "-p", "budgets", "[10]", "-p", "focus_budgets", "[10]", "-p", "k_values", "[1]"],
     r"The 'max_items' parameter of notebook 03_adacur_rounds must be at least \d+ here: the 40 sampled queries"),
])
def test_label_coverage_is_checked_before_the_kernel(corpus, tmp_path, kernel_calls, capsys, params, message):
    import re

    from xenbench.cli import main

    code = main(["run", "03_adacur_rounds", "--out", str(tmp_path / "r"), "-p", "dataset", corpus, "-p", "model",
                 str(REPO / "models" / "cls-ce"), "-p", "max_queries", "40", "-p", "max_items", "100",
                 "-p", "n_anchor_queries", "20", "-p", "n_dev_queries", "10", *params])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and re.search(message, err[0]), err
    assert not kernel_calls and not (tmp_path / "r").exists()
