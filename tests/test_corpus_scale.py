"""The sparse-label BEIR folder built from WordNet-EL (tests/_sparse_corpus.py) and its cheap DE dot-product scorer:
what benchmarks/bench_corpus_scale.py runs the notebooks on at 10^5 items, checked here on one domain of 3,039."""
from __future__ import annotations

import numpy as np
import pytest

import _sparse_corpus as sc
from xenbench.data.beir import load_beir
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
    queries, items = ds.queries[:7], ds.items[:60]
    scorer = sc.DualEncoderDotScorer(queries, items)
    # the engine hands the scorer "title text" strings, length-sorted, in batches of 16 pairs
    got = score_matrix(scorer, queries, items, batch_size=16, device="cpu", progress=False).scores
    want = DualEncoder(device="cpu").fit(items).scores(queries)  # cosine of "title: text" embeddings
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert np.ptp(want) > 0.3  # the comparison is not between two near-constant matrices
    with pytest.raises(ParameterError, match="texts of the items this DualEncoderDotScorer was built for"):
        scorer.score([queries[0].text], ["no such item"])
