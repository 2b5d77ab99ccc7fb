"""xenbench.studies.corpus: specs, stacking and gold rows against each dataset loaded on its own (with a fake encoder)."""
from __future__ import annotations

import numpy as np
import pytest

from xenbench.studies.corpus import corpus_specs, load_corpus, wordnet_el_domains
from xenbench.data.sources import load_dataset
from xenbench.errors import ParameterError


class _HashEncoder:
    """Deterministic stand-in for the DE: a text's embedding depends only on the text."""

    def _enc(self, texts):
        return np.array([[hash(t) % 97, len(t), 1.0] for t in texts], dtype=np.float32)

    def fit(self, items):
        self.item_embeddings_ = self._enc([it.id for it in items])
        return self

    def embed_queries(self, queries):
        return self._enc([q.id for q in queries])


def test_specs():
    assert len(corpus_specs("wordnet-el:all")) == len(wordnet_el_domains()) == 40
    assert corpus_specs("verb.weather,noun.Tops") == ["wordnet-el:verb.weather", "wordnet-el:noun.Tops"]
    assert corpus_specs(["wordnet-el:verb.weather"]) == ["wordnet-el:verb.weather"]
    with pytest.raises(ParameterError, match="dataset"):
        corpus_specs([])
    with pytest.raises(ParameterError, match="dataset"):
        corpus_specs(["verb.weather", "wordnet-el:verb.weather"])


def test_stacked_rows_and_gold_labels():
    enc = _HashEncoder()
    c = load_corpus(["verb.weather", "noun.Tops"], encoder=enc, progress=False)
    a, b = load_dataset("wordnet-el:verb.weather"), load_dataset("wordnet-el:noun.Tops")
    assert c.items.shape == (len(a.items) + len(b.items), 3) and len(c.queries) == len(a.queries) + len(b.queries)
    np.testing.assert_array_equal(c.items[len(a.items):], enc.fit(b.items).item_embeddings_)
    # the gold item of the first query of the second domain, as a global row
    q = b.queries[0]
    want = {len(a.items) + b.item_index[i] for i in b.gold[q.id]}
    assert set(c.relevant[len(a.queries)].indices) == want
    assert (c.item_source[:len(a.items)] == 0).all() and (c.query_source[len(a.queries):] == 1).all()
    sub = c.query_subset(np.array([0, len(a.queries)]))
    assert sub.relevant.shape == (2, len(c.items))
