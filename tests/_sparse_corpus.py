"""A BEIR folder shaped like a real corpus, built from the bundled WordNet-EL, and a cheap scorer for it.

Real corpora differ from the bundled domains in two ways that matter to the notebooks: they are large (10^4-10^7
items) and their labels are sparse (a few relevant items per labelled query, many queries with no label at all).
:func:`write_sparse_corpus` writes such a folder deterministically from a seed: every item of the chosen WordNet-EL
domains (all 43 pooled: 95,840 items), a seeded sample of their queries (real example sentences), and, for a seeded
share of them, 1-3 relevant items: the query's own synset (grade 2, the bundled gold) plus 0-2 synsets that share a
lemma with it (grade 1: other senses of the same word, the near misses a real assessor marks partially relevant).
The other queries keep their text but no qrels line, as in a real folder where only some queries were judged.

:class:`DualEncoderDotScorer` is a scorer of the protocol (:mod:`xenbench.models.scorers`) whose score of a pair is
the dot product of the bundled dual encoder's embeddings: scoring 500 queries x 10^5 items takes minutes on a CPU,
where a cross-encoder takes days, so the notebooks can be run at corpus scale. It is a stand-in for a CE's cost
structure only: its scores equal the DE first stage's, so re-ranking the DE's candidates is exact by construction.

Tests and benchmarks share these (benchmarks/bench_corpus_scale.py imports this module, as bench_rerankers imports
_tiny_models): they are builders of test inputs, not something a user of xenbench runs on their own data.
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xenbench.data.beir import save_beir
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.data.sources import load_wordnet_el, wordnet_el_domains
from xenbench.errors import ParameterError

#: Grade of a query's own synset and of a synset sharing a lemma with it.
GOLD_GRADE, RELATED_GRADE = 2, 1
#: Further relevant items per labelled query are drawn uniformly from 0..MAX_RELATED (fewer if fewer share a lemma).
MAX_RELATED = 2


def lemmas(item: Item) -> list[str]:
    """The lemmas of a WordNet-EL item: its title split at ``", "``, lower-cased (``"mind, head"`` -> both)."""
    return [w.strip().lower() for w in item.title.split(",") if w.strip()]


def pooled_wordnet_el(domains: Sequence[str] | None = None) -> tuple[list[Item], list[Query], dict[str, str]]:
    """Every item and query of ``domains`` (default: all bundled domains, sorted), in domain then file order, and
    each query's gold item id (WordNet-EL has exactly one, in the query's own domain)."""
    names = list(domains) if domains is not None else wordnet_el_domains()
    items: list[Item] = []
    queries: list[Query] = []
    gold: dict[str, str] = {}
    for name in names:
        ds = load_wordnet_el(name)
        items += ds.items
        queries += ds.queries
        gold.update({qid: golds[0] for qid, golds in ds.gold.items()})
    return items, queries, gold


def sparse_corpus(*, n_queries: int, labelled: float, seed: int,
                  domains: Sequence[str] | None = None) -> Dataset:
    """The dataset :func:`write_sparse_corpus` writes (module docstring), in memory.

    Parameters
    ----------
    n_queries
        Queries kept, a seeded sample of the pooled queries (kept in pooled order); at most all of them.
    labelled
        Share of the kept queries that get qrels (``round(labelled * n_queries)``, a seeded sample), in (0, 1].
    seed
        Seeds both samples and the related items: the same seed gives the same dataset.
    domains
        WordNet-EL domains to pool (default all 43: 95,840 items, 23,552 queries).

    Returns
    -------
    Dataset
        Every item; the sampled queries; qrels (graded) and gold for the labelled ones; one split ``"test"`` listing
        the labelled queries in row order.
    """
    items, queries, gold = pooled_wordnet_el(domains)
    owner = "sparse_corpus"
    if not isinstance(n_queries, int) or not 1 <= n_queries <= len(queries):
        raise ParameterError("n_queries", f"an int in [1, {len(queries)}]", n_queries, owner)
    if not isinstance(labelled, float | int) or not 0 < labelled <= 1:
        raise ParameterError("labelled", "a share in (0, 1]", labelled, owner)
    rng = np.random.default_rng([seed, 52])
    kept = np.sort(rng.choice(len(queries), n_queries, replace=False))
    n_labelled = max(1, round(labelled * n_queries))
    judged = set(np.sort(rng.choice(kept, n_labelled, replace=False)).tolist())
    by_lemma: dict[str, list[int]] = {}
    for row, it in enumerate(items):
        for lemma in lemmas(it):
            by_lemma.setdefault(lemma, []).append(row)
    row_of = {it.id: row for row, it in enumerate(items)}
    qrels: dict[str, dict[str, int]] = {}
    for r in kept.tolist():
        if r not in judged:
            continue
        q = queries[r]
        g = row_of[gold[q.id]]
        related = sorted({j for lemma in lemmas(items[g]) for j in by_lemma[lemma]} - {g})
        n_extra = min(int(rng.integers(0, MAX_RELATED + 1)), len(related))
        extra = sorted(rng.choice(related, n_extra, replace=False).tolist()) if n_extra else []
        qrels[q.id] = {items[g].id: GOLD_GRADE, **{items[j].id: RELATED_GRADE for j in extra}}
    kept_queries = [queries[r] for r in kept.tolist()]
    name = f"sparse-wordnet-el-{len(items)}x{n_queries}-seed{seed}"
    return Dataset(name, items, kept_queries, {}, {"test": [q.id for q in kept_queries if q.id in qrels]}, qrels)


def write_sparse_corpus(folder: str | os.PathLike[str], *, n_queries: int, labelled: float = 0.7, seed: int = 0,
                        domains: Sequence[str] | None = None) -> Path:
    """Write :func:`sparse_corpus` as a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``) with
    :func:`xenbench.data.beir.save_beir`; the same arguments write the same bytes. Returns ``folder``."""
    return save_beir(sparse_corpus(n_queries=n_queries, labelled=labelled, seed=seed, domains=domains), folder)


def describe(ds: Dataset) -> dict[str, int | dict[int, int]]:
    """Sizes of a sparse corpus: items, queries, labelled queries, and how many labelled queries have r relevant
    items, for each r."""
    return {"items": len(ds.items), "queries": len(ds.queries), "labelled": len(ds.gold),
            "relevant_per_query": dict(sorted(Counter(len(g) for g in ds.gold.values()).items()))}


class DualEncoderDotScorer:
    """A scorer (:class:`xenbench.models.scorers.Scorer`): score(q, d) = e(q) · e(d), the bundled DE's embeddings.

    The embeddings are computed once, in two calls of :meth:`~xenbench.models.retrievers.DualEncoder.encode`
    (cached on disk by text), for the queries and items the scorer is built for; ``score`` then looks the texts up
    and takes the row-wise dot products of two (B, d) float32 gathers, so a pair costs about d multiply-adds. An
    item's embedding is that of :func:`~xenbench.models.retrievers.item_text` (``"title: text"``, what the DE first
    stage embeds), found from the ``"title text"`` string the engine hands a protocol scorer
    (:func:`~xenbench.models.pairs.document_text`), so the scores equal ``DualEncoder.scores`` up to float32
    summation order.

    Parameters
    ----------
    queries : sequence of Query
    items : sequence of Item
        Items with one document text must have one ``"title: text"`` (else a text would have two scores).
    encoder : DualEncoder, optional
        Default ``DualEncoder(device="cpu")``.

    Raises
    ------
    ParameterError
        Two items with one document text and two DE texts; at scoring time, a text the scorer was not built for.
    """

    def __init__(self, queries: Sequence[Query], items: Sequence[Item], *, encoder=None) -> None:
        from xenbench.models.fingerprint import texts_fingerprint
        from xenbench.models.pairs import document_text
        from xenbench.models.retrievers import DualEncoder, item_text

        de = encoder if encoder is not None else DualEncoder(device="cpu")
        self._item_row: dict[str, int] = {}
        for r, it in enumerate(items):
            first = self._item_row.setdefault(document_text(it), r)
            # WordNet-EL has synsets of equal title and gloss in two domains: one embedding serves both; but two
            # items whose "title: text" differ behind one "title text" string would be two scores for one text
            if item_text(items[first]) != item_text(it):
                raise ParameterError("items", "items whose 'title text' strings name one 'title: text' each",
                                     document_text(it), "DualEncoderDotScorer")
        self._items = de.fit(items).item_embeddings_
        self._query_row = {q.text: r for r, q in enumerate(queries)}
        self._queries = de.embed_queries(queries)
        self.name = "de-dot"
        self.max_length = de.max_length
        # the DE's weights and truncation, and the item texts the document strings were mapped back to
        key = f"{de._model_key}|{de.max_length}|{texts_fingerprint([], items)}"
        self.fingerprint = hashlib.sha256(key.encode()).hexdigest()
        self.device = "cpu"

    def _rows(self, texts: Sequence[str], index: dict[str, int], what: str) -> np.ndarray:
        try:
            return np.fromiter((index[t] for t in texts), dtype=np.int64, count=len(texts))
        except KeyError as err:
            raise ParameterError(what, f"texts of the {what} this DualEncoderDotScorer was built for",
                                 err.args[0][:80], "DualEncoderDotScorer.score") from None

    def score(self, query_texts: Sequence[str], item_texts: Sequence[str]) -> np.ndarray:
        """Scores of the pairs ``(query_texts[b], item_texts[b])``: float32 of shape (B,)."""
        q = self._queries[self._rows(query_texts, self._query_row, "queries")]
        d = self._items[self._rows(item_texts, self._item_row, "items")]
        return np.einsum("bd,bd->b", q, d)

    def __repr__(self) -> str:
        return f"DualEncoderDotScorer({len(self._query_row)} queries, {len(self._item_row)} items)"
