"""A cross-encoder tried on a few pairs: how fast it scores on this machine, and whether its scores spread.

One probe for both uses: before a notebook's kernel starts (:func:`xenbench.harness.preflight.plan_scoring`: the
time on-demand scoring will take, and a warning for a CE whose scores are near-constant), and in notebook 07
(:func:`xenbench.studies.compare.ce_seconds_per_pair`: the seconds per CE call on its wall-time axis).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from xenbench._validation import check_int
from xenbench.sampling import sample_rows

if TYPE_CHECKING:  # the scorer (torch, transformers) loads in probe_rate: degenerate_scores on cached scores needs none
    from xenbench.data.datasets import Item, Query
    from xenbench.models.crossencoder import CrossEncoder
    from xenbench.models.scoring import ScoredMatrix

__all__ = ["PROBE_PAIRS", "PROBE_ITEMS", "probe_rate", "degenerate_scores"]

#: Pairs the harness scores before a run to measure the CE's rate here (after a warm-up batch of 8).
PROBE_PAIRS = 64
#: At most this many items per probe: the pairs are about ``n_pairs / PROBE_ITEMS`` queries x these items.
PROBE_ITEMS = 64
# Scores spread less than this (std over the probe's pairs; for large scores, 1e-4 of |mean|) are "near-constant".
_FLAT = 1e-3


def probe_rate(ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item], *, n_pairs: int = PROBE_PAIRS,
               seed: int = 0, device: str = "auto") -> ScoredMatrix:
    """Score about ``n_pairs`` pairs of ``queries`` x ``items`` as the score stores are scored, and time it.

    The pairs are a seeded sample (:func:`xenbench.sampling.sample_rows`): ``min(len(items), 64)`` items and
    ``ceil(n_pairs / that)`` queries (at least 1, at most all). One warm-up batch (1 query x 8 items) is scored first
    and not timed: lazy initialization and first kernels are not the CE's rate.

    Parameters
    ----------
    ce : CrossEncoder
    queries : sequence of Query of length n_queries
    items : sequence of Item of length n_items
    n_pairs
        About how many pairs to time (>= 1).
    seed
        Seeds the sample of queries and items.
    device
        Where to score (:func:`xenbench._device.resolve_device`).

    Returns
    -------
    ScoredMatrix
        ``scores`` of shape (n_probe_queries, n_probe_items) and their ``timing``: ``timing.pairs_per_s`` is the rate,
        ``timing.wall_s / timing.n_pairs`` the seconds per CE call.
    """
    from xenbench.models.scoring import score_matrix

    n_pairs = check_int(n_pairs, "n_pairs", 1, None, "probe_rate")
    n_items = min(len(items), PROBE_ITEMS)
    n_queries = max(1, min(len(queries), -(-n_pairs // max(n_items, 1))))
    qs = [queries[r] for r in sample_rows(len(queries), n_queries, seed, kind="queries")]
    its = [items[c] for c in sample_rows(len(items), n_items, seed, kind="items")]
    score_matrix(ce, qs[:1], its[:8], device=device, progress=False)  # warm-up: lazy init, first kernels
    return score_matrix(ce, qs, its, device=device, progress=False)


def degenerate_scores(scores: Any, model: str) -> str | None:
    """A warning when a CE's scores are near-constant (std over every pair at most 1e-3, or 1e-4 of |mean| when that
    is larger), as a tiny or freshly initialized head gives; None when they spread.

    Parameters
    ----------
    scores : array-like of any shape
        Non-finite values are ignored.
    model
        The CE's name in the warning.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    s = s[np.isfinite(s)]
    if s.size < 2:
        return None
    spread, mean = float(s.std()), float(np.abs(s.mean()))
    if spread > _FLAT * max(1.0, 0.1 * mean):
        return None
    return (f"the CE {model} gives near-constant scores on this data (std {spread:.2g} around {s.mean():.4g} over "
            f"{s.size} pairs): an untrained or freshly initialized head? Every method will rank at random")
