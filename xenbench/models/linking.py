"""Entity-linking evaluation against gold items: accuracy@k of retrievers and of CE re-ranking.

(k-NN recall against the *exact CE* top-k lives in :mod:`xenbench.metrics`; this module measures how often
the *gold* item is found, which is what makes a cross-encoder worth approximating.)

:func:`accuracy_at_k` is **first-gold accuracy**: it looks for each query's *first* gold item only. With one gold
item per query (ZESHEL, WordNet-EL: entity linking) it equals Success@k; on data with several relevant items per
query it under-counts, so the notebooks report Success@k, nDCG@10, MRR@10 and R@100 of graded labels through
:func:`xenbench.metrics.label_metrics` beside it.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xenbench.data.datasets import Dataset, Item, Query


def gold_rows(dataset: Dataset, queries: Sequence[Query] | None = None) -> np.ndarray:
    """Row of each query's first gold item in ``dataset.items``, int64 of shape (nq,); -1 when it has none."""
    index = {it.id: r for r, it in enumerate(dataset.items)}
    queries = dataset.queries if queries is None else queries
    return np.array(
        [index.get((dataset.gold.get(q.id) or [None])[0], -1) for q in queries], dtype=np.int64
    )


def accuracy_at_k(I: np.ndarray, gold: np.ndarray, ks: Sequence[int] = (1, 64)) -> dict[int, float]:
    """Fraction of queries whose (first) gold row is among the first k of ``I``: first-gold accuracy@k.

    Equal to Success@k (:func:`xenbench.metrics.label_metrics`) when every query has exactly one relevant item, as
    in entity linking; with several, use Success@k, which counts any relevant item.

    Parameters
    ----------
    I : ndarray of shape (nq, m)
        Retrieved item rows, best first.
    gold : ndarray of shape (nq,)
        Gold item row per query (-1: none, counts as a miss).
    """
    hit_rank = np.where(I == gold[:, None], np.arange(I.shape[1])[None, :], I.shape[1]).min(axis=1)
    return {k: float((hit_rank < k).mean()) for k in ks}


def rerank(ce, queries: Sequence[Query], items: Sequence[Item], I: np.ndarray, *, progress: bool = False) -> np.ndarray:
    """Re-order each row of candidates ``I`` (nq, m) by exact CE scores; returns rows of shape (nq, m).

    Scores on the CE's current device; on CUDA with bf16 autocast (re-ranking tolerates its ~1e-2 noise).
    ``progress`` shows a bar of pairs scored.
    """
    from xenbench.models.scoring import score_pairs_sparse

    pairs = np.stack([np.repeat(np.arange(len(queries)), I.shape[1]), I.reshape(-1)], axis=1)
    precision = "bf16" if ce.device.type == "cuda" else "fp32"
    scores = score_pairs_sparse(ce, queries, items, pairs, device=ce.device, precision=precision, progress=progress)
    order = np.argsort(-scores.reshape(I.shape), axis=1, kind="stable")
    return np.take_along_axis(I, order, axis=1)
