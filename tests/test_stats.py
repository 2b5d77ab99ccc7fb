"""xenbench.studies.stats against hand-computed values on a five-query, five-item dataset."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from xenbench.studies import stats
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.errors import ParameterError

ITEMS = [Item("apple-n", "apple, malus", "a fruit"),       # row 0
         Item("apple2-n", "apple", "a tree"),               # row 1: shares the lemma "apple"
         Item("pear-n", "pear", "another fruit"),           # row 2
         Item("run-v", "run, sprint", "move fast"),         # row 3
         Item("mouse-n", "mouse", "a small rodent")]        # row 4
QUERIES = [Query("q0", "she ate apples today", (8, 14)),    # "apples": plural of the gold lemma "apple"
           Query("q1", "a pear", (2, 6)),                    # "pear"
           Query("q2", "no mention here"),                   # no span
           Query("q3", "he sprinted", (3, 11)),              # "sprinted": the gold's second lemma "sprint"
           Query("q4", "three mice", (6, 10)),               # "mice": irregular, longest common prefix -> "mouse"
           Query("q5", "a query without gold")]
GOLD = {"q0": ["apple-n"], "q1": ["pear-n"], "q2": ["pear-n"], "q3": ["run-v"], "q4": ["mouse-n"]}


@pytest.fixture
def ds() -> Dataset:
    return Dataset("toy", list(ITEMS), list(QUERIES), {k: list(v) for k, v in GOLD.items()})


def test_title_lemmas_and_mention_text():
    assert stats.title_lemmas(Item("x", "Dog, domestic dog, ", "")) == ["dog", "domestic dog"]
    assert stats.title_lemmas(Item("x", "", "")) == []
    assert stats.mention_text(QUERIES[0]) == "apples"
    assert stats.mention_text(QUERIES[2]) is None


def test_text_lengths_in_words_and_tokens():
    got = stats.text_lengths(["a b  c", "", "one"])
    assert got.dtype == np.int64 and got.tolist() == [3, 0, 1]

    def chars(texts, add_special_tokens, truncation):  # a stand-in tokenizer: one token per character
        assert add_special_tokens is False and truncation is False
        return {"input_ids": [list(t) for t in texts]}

    assert stats.text_lengths(["ab", "c d"], unit="tokens", tokenizer=chars).tolist() == [2, 3]
    assert stats.text_lengths([], unit="tokens", tokenizer=chars).tolist() == []
    with pytest.raises(ParameterError, match="The 'unit' parameter of text_lengths must be 'words' or 'tokens'"):
        stats.text_lengths(["a"], unit="chars")


def test_dataset_lengths_measure_title_colon_text(ds):
    got = stats.dataset_lengths(ds)
    assert got["queries"].tolist() == [4, 2, 3, 2, 2, 4]
    # "apple, malus: a fruit" = 4 words, "apple: a tree" = 3, "pear: another fruit" = 3, ...
    assert got["items"].tolist() == [4, 3, 3, 4, 4]


def test_mention_ambiguity_counts_items_sharing_the_mention(ds):
    # q0: "apples" -> lemma "apple" is a title lemma of rows 0 and 1; q2 has no span; q3: "sprint" only row 3;
    # q4: "mice" is no regular form of "mouse" -> the gold lemma with the longest common prefix, row 4.
    assert stats.mention_ambiguity(ds).tolist() == [2, 1, 0, 1, 1, 0]
    assert stats.mention_ambiguity(ds, [QUERIES[1], QUERIES[0]]).tolist() == [1, 2]


def test_sample_queries_keeps_dataset_order(ds):
    with_gold = ["q0", "q1", "q2", "q3", "q4"]
    assert [q.id for q in stats.sample_queries(ds)] == with_gold
    assert [q.id for q in stats.sample_queries(ds, 10)] == with_gold
    three = [q.id for q in stats.sample_queries(ds, 3, seed=1)]
    assert len(three) == 3 and three == sorted(three) and set(three) <= set(with_gold)
    assert three == [q.id for q in stats.sample_queries(ds, 3, seed=1)]  # seeded
    keep = np.sort(np.random.default_rng([1, 2]).choice(5, size=3, replace=False))  # seed 1, the queries' stream
    assert three == [with_gold[i] for i in keep]
    for bad in (0, True, 1.0, np.int64(2)):
        with pytest.raises(ParameterError, match="'max_queries' parameter of sample_queries must be None or an int >= 1"):
            stats.sample_queries(ds, bad)


def test_sample_pairs(ds):
    queries, items = stats.sample_pairs(ds, 2, None, seed=0)
    assert len(queries) == 2 and items == ITEMS
    _, items = stats.sample_pairs(ds, None, 3, seed=4)
    keep = np.sort(np.random.default_rng([4, 1]).choice(5, size=3, replace=False))  # seed 4, the items' stream
    assert items == [ITEMS[i] for i in keep]
    with pytest.raises(ParameterError, match="'n_items' parameter of sample_pairs must be None or an int >= 1"):
        stats.sample_pairs(ds, None, 0)


def test_query_examples(ds):
    df = stats.query_examples(ds, n=2, seed=0)
    assert list(df.columns) == ["query", "mention", "gold title", "gold text"] and len(df) == 2
    by_text = {q.text: q for q in QUERIES}
    for _, row in df.iterrows():
        q = by_text[row["query"]]
        gold = ds.item(GOLD[q.id][0])
        assert (row["mention"], row["gold title"], row["gold text"]) == (stats.mention_text(q), gold.title, gold.text)


class _FirstItems:
    """A retriever that returns items 0, 1, 2, ... for every query."""

    def fit(self, items):
        self.n = len(items)
        return self

    def search(self, queries, k):
        I = np.tile(np.arange(min(k, self.n)), (len(queries), 1))
        return np.zeros(I.shape, np.float32), I


def test_baseline_accuracy_by_hand(ds):
    # gold rows of q0..q4: 0, 2, 2, 3, 4. Top-1 = item 0 hits q0 only (1/5); top-3 = items 0..2 hit q0, q1, q2.
    df = stats.baseline_accuracy([ds], k=3, retrievers={"first": _FirstItems})
    assert list(df.columns) == ["dataset", "retriever", "n_queries", "n_items", "k", "accuracy", "seconds"]
    assert df[["dataset", "retriever", "n_queries", "n_items", "k"]].values.tolist() == [
        ["toy", "first", 5, 5, 1], ["toy", "first", 5, 5, 3]]
    np.testing.assert_allclose(df["accuracy"], [1 / 5, 3 / 5])
    with pytest.raises(ParameterError, match="The 'k' parameter of baseline_accuracy must be an int >= 1"):
        stats.baseline_accuracy([ds], k=0, retrievers={"first": _FirstItems()})


def test_center_rows_and_score_summary():
    M = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 6.0]])
    np.testing.assert_allclose(stats.center_rows(M), [[-1, 0, 1], [-2, -2, 4]])
    row = stats.score_summary({"m": M}).iloc[0]
    assert row["matrix"] == "m" and row["shape"] == (2, 3)
    assert row["std"] == pytest.approx(math.sqrt(26 / 6))  # squares 1+0+1+4+4+16 over 6 entries, mean 0
    # skew of [-2, -2, 4]: m3 / m2^1.5 = 16 / 8^1.5 = 1/sqrt(2); of [-1, 0, 1]: 0
    assert row["median_query_skew"] == pytest.approx(1 / (2 * math.sqrt(2)))
    # (max - mean) / std: 1 / sqrt(2/3) and 4 / sqrt(8)
    assert row["median_top1_z"] == pytest.approx((math.sqrt(1.5) + math.sqrt(2)) / 2)
    assert isinstance(stats.score_summary({}), pd.DataFrame)


def test_one_sampling_convention_across_notebooks(ds):
    """Notebook 01's item sample (sample_pairs) is `xenbench score --n-items`'s and, on data without labels, 03/04/07's
    max_items sample under the same seed (with labels, those keep the relevant items first: test_sparse_corpus.py);
    queries come from their own stream."""
    from xenbench.cli import _ids
    from xenbench.sampling import labelled_sample, sample_rows

    big = ds.subset(ds.query_ids, ds.item_ids)
    for seed in (0, 3):
        _, items = stats.sample_pairs(big, None, 3, seed=seed)
        rows = labelled_sample(len(big.queries), len(big.items), None, None, 3, seed).items
        assert [it.id for it in items] == [big.items[r].id for r in rows]
        assert _ids(None, big.item_ids, 3, seed, "items", "toy") == [it.id for it in items]
        assert np.array_equal(sample_rows(50, 10, seed, kind="items"),
                              np.sort(np.random.default_rng([seed, 1]).choice(50, 10, replace=False)))
    assert not np.array_equal(sample_rows(50, 10, 0, kind="items"), sample_rows(50, 10, 0, kind="queries"))
    with pytest.raises(ParameterError, match="The 'kind' parameter of sample_rows must be one of"):
        sample_rows(5, 2, 0, kind="rows")
