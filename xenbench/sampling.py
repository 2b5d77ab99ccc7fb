"""Seeded row samples: one convention for every notebook, so the same seed picks the same items everywhere.

A sample of ``size`` of ``n`` rows is ``numpy.random.default_rng([seed, stream]).choice(n, size,
replace=False)``, sorted (rows stay in dataset order), with one stream per kind of row: items and queries
are drawn independently. ``size`` None or >= ``n`` keeps every row.

A corpus with relevance labels is sampled so that its labels survive (:func:`labelled_sample`, notebooks 03, 04
and 07): the queries are drawn from those with a relevant item, and the item sample holds every relevant item of
every sampled query, then a seeded random fill. A random item sample of a sparse-label corpus keeps almost no
relevant item (1–3 per query among 10^4–10^6 items), so every label measure would rest on a handful of queries.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from xenbench._validation import check_int, check_seed
from xenbench.errors import ParameterError

__all__ = ["STREAMS", "Sample", "labelled_sample", "sample_rows"]

STREAMS = {"items": 1, "queries": 2}


def sample_rows(n: int, size: int | None, seed: int = 0, *, kind: str) -> np.ndarray:
    """Sorted seeded sample of ``min(n, size)`` rows of ``range(n)``, int64 (all of them when ``size`` is None).

    Parameters
    ----------
    n : int
        Rows to draw from (>= 1).
    size : int or None
        Rows wanted (>= 1).
    seed : int
        The user's seed (>= 0).
    kind : {"items", "queries"}
        Which stream of ``seed`` draws (:data:`STREAMS`).

    Examples
    --------
    >>> sample_rows(10, 3, 0, kind="items").tolist() == sorted(
    ...     np.random.default_rng([0, 1]).choice(10, 3, replace=False).tolist())
    True
    >>> sample_rows(4, None, 7, kind="queries").tolist()
    [0, 1, 2, 3]
    """
    owner = "sample_rows"
    if kind not in STREAMS:
        raise ParameterError("kind", f"one of {list(STREAMS)}", kind, owner)
    n = check_int(n, "n", 1, None, owner)
    size = check_int(size, "size", 1, None, owner, allow_none=True)
    seed = check_seed(seed, owner)
    if size is None or size >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng([seed, STREAMS[kind]]).choice(n, size=size, replace=False)).astype(np.int64)


@dataclass(frozen=True)
class Sample:
    """Which query rows and item rows of a corpus a run works on (:func:`labelled_sample`).

    Attributes
    ----------
    queries, items : int64 ndarray
        Sorted rows of the corpus' queries and items.
    n_relevant : int
        Items kept because they are relevant to a sampled query (all of them; 0 without labels).
    labelled : bool
        Whether the corpus has labels: then every sampled query has a relevant item among ``items``.
    n_corpus_queries, n_corpus_items : int
        The corpus' sizes.
    """

    queries: np.ndarray
    items: np.ndarray
    n_relevant: int
    labelled: bool
    n_corpus_queries: int
    n_corpus_items: int

    @property
    def n_random(self) -> int:
        """Items drawn at random (the fill after the relevant ones)."""
        return int(self.items.size) - self.n_relevant

    def describe(self) -> str:
        """One sentence: what was kept, and why a sample with its relevant items is easier than the corpus."""
        nq, ni = int(self.queries.size), int(self.items.size)
        if not self.labelled:
            return (f"A seeded sample of {nq:,} of the corpus' {self.n_corpus_queries:,} queries and {ni:,} of its "
                    f"{self.n_corpus_items:,} items (the corpus has no relevance labels).")
        if ni == self.n_corpus_items:
            return (f"{nq:,} queries with a relevant item (of the corpus' {self.n_corpus_queries:,}) over the whole "
                    f"corpus of {ni:,} items.")
        return (f"{nq:,} queries with a relevant item (of the corpus' {self.n_corpus_queries:,}) and {ni:,} of its "
                f"{self.n_corpus_items:,} items: the {self.n_relevant:,} relevant to a sampled query and "
                f"{self.n_random:,} drawn at random. Every relevant item is kept, so the sample is easier than the "
                f"corpus (fewer distractors per relevant item, {self.n_random / max(self.n_relevant, 1):.1f} random "
                f"items per relevant one): label measures read higher here than over the whole corpus.")


def labelled_sample(n_queries: int, n_items: int, relevant: Sequence[Sequence[int]] | None,
                    max_queries: int | None, max_items: int | None, seed: int = 0, *,
                    owner: str = "labelled_sample") -> Sample:
    """The seeded sample of a corpus that keeps its labels.

    Without labels (``relevant`` None or every list empty): ``max_queries`` queries and ``max_items`` items drawn
    independently (:func:`sample_rows`). With labels: the queries are a seeded sample of ``max_queries`` of those
    with a relevant item (stream ``"queries"`` over their rows); the items are the union R of their relevant items,
    then ``max_items - |R|`` drawn from the others (stream ``"items"``). ``None`` keeps every eligible row.

    Parameters
    ----------
    n_queries, n_items : int
        The corpus' sizes.
    relevant : sequence of int sequences, or None
        ``relevant[q]``: the item rows relevant to query row q (grade > 0), one entry per query.
    max_queries, max_items : int or None
        Rows wanted (None: all).
    seed : int
        The user's seed.
    owner : str
        Who asks, for the error message.

    Raises
    ------
    ParameterError
        Naming ``max_items`` when it cannot hold the relevant items of the sampled queries (with the least that
        does), before any work.

    Examples
    --------
    >>> s = labelled_sample(4, 10, [[7], [], [2, 3], [9]], max_queries=2, max_items=4, seed=0)
    >>> s.labelled, s.items.size, set(s.items) >= {i for q in s.queries for i in [[7], [], [2, 3], [9]][q]}
    (True, 4, True)
    >>> 1 in s.queries  # query 1 has no relevant item
    False
    """
    n_queries = check_int(n_queries, "n_queries", 1, None, owner)
    n_items = check_int(n_items, "n_items", 1, None, owner)
    max_queries = check_int(max_queries, "max_queries", 1, None, owner, allow_none=True)
    max_items = check_int(max_items, "max_items", 1, None, owner, allow_none=True)
    if relevant is not None and len(relevant) != n_queries:
        raise ParameterError("relevant", f"one list of item rows per query ({n_queries})", len(relevant), owner)
    eligible = [q for q, rel in enumerate(relevant or ()) if len(rel)]
    if not eligible:
        return Sample(sample_rows(n_queries, max_queries, seed, kind="queries"),
                      sample_rows(n_items, max_items, seed, kind="items"), 0, False, n_queries, n_items)
    pool = np.asarray(eligible, dtype=np.int64)
    queries = pool[sample_rows(pool.size, max_queries, seed, kind="queries")]
    rel = np.unique(np.concatenate([np.asarray(relevant[q], dtype=np.int64) for q in queries]))
    if rel.size and (rel.min() < 0 or rel.max() >= n_items):
        raise ParameterError("relevant", f"item rows in [0, {n_items})", [int(rel.min()), int(rel.max())], owner)
    if max_items is None or max_items >= n_items:
        items = np.arange(n_items, dtype=np.int64)
    elif rel.size > max_items:
        raise ParameterError("max_items", f"at least {rel.size:,} here: the {queries.size:,} sampled queries (those "
                             f"with a relevant item) have {rel.size:,} relevant items, and the sample keeps every one "
                             "so that their labels survive. Or lower max_queries", max_items, owner)
    else:
        others = np.setdiff1d(np.arange(n_items, dtype=np.int64), rel, assume_unique=True)
        fill = others[sample_rows(others.size, max_items - rel.size, seed, kind="items")] if max_items > rel.size \
            else others[:0]
        items = np.sort(np.concatenate([rel, fill]))
    return Sample(queries, items, int(rel.size), True, n_queries, n_items)
