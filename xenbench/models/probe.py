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

__all__ = ["PROBE_PAIRS", "PROBE_ITEMS", "SHARED_RANKING", "MIN_RANKING_SAMPLE", "probe_rate", "duration", "scoring_line",
           "degenerate_scores", "nonfinite_scores", "ranking_agreement", "collapsed_ranking", "warn_if_collapsed"]

#: Pairs the harness scores before a run to measure the CE's rate here (after a warm-up batch of 8).
PROBE_PAIRS = 64
#: At most this many items per probe: the pairs are about ``n_pairs / PROBE_ITEMS`` queries x these items.
PROBE_ITEMS = 64
# Scores spread less than this (std over the probe's pairs; for large scores, 1e-4 of |mean|) are "near-constant".
_FLAT = 1e-3
#: A CE whose median query ranks the items with a correlation of at least this to the other queries' mean ranking
#: ignores the query (:func:`collapsed_ranking`). Measured on noun.cognition, 300 random samples per size: the bundled
#: CEs reach at most 0.915 at 100 queries x 100 items and 0.88 from 100 x 300 up (medians: cls-ce ~0.6-0.7, emb-ce
#: ~0.73, emb-ce-marker ~0.85); the bundled backbone under an untrained head (three seeds) at least 0.924 at 100 x 100
#: (median 0.95). Below 100 x 100 the two overlap.
SHARED_RANKING = 0.92
#: The smallest sample judged (queries, items): on fewer, a trained CE's agreement varies too much to tell it apart.
MIN_RANKING_SAMPLE = (100, 100)


def probe_rate(ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item], *, n_pairs: int = PROBE_PAIRS,
               seed: int = 0, device: str = "auto", precision: str = "fp32",
               batch_size: int | None = None) -> ScoredMatrix:
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
    precision, batch_size
        As the scoring to be planned will use them (:func:`xenbench.models.scoring.score_matrix`).

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
    options = {"device": device, "precision": precision, "batch_size": batch_size, "progress": False}
    score_matrix(ce, qs[:1], its[:8], **options)  # warm-up: lazy init, first kernels
    return score_matrix(ce, qs, its, **options)


def duration(seconds: float) -> str:
    """A time to wait, as a person reads it: ``"45 s"``, ``"8.3 min"``, ``"46.0 h"``."""
    return f"{seconds:.0f} s" if seconds < 90 else (f"{seconds / 60:.1f} min" if seconds < 5400 else
                                                   f"{seconds / 3600:.1f} h")


def scoring_line(name: str, n_queries: int, n_items: int, pairs: int, probe: ScoredMatrix) -> str:
    """What scoring ``pairs`` pairs of ``n_queries`` x ``n_items`` with the CE ``name`` takes at the rate ``probe``
    (:func:`probe_rate`) measured, in one line::

        scoring 100 queries x 300 items = 30,000 pairs with my-ce takes about 1.7 min at the 290 pairs/s measured here on cpu
    """
    rate = probe.timing.n_pairs / max(probe.timing.wall_s, 1e-9)
    return (f"scoring {n_queries:,} queries x {n_items:,} items = {pairs:,} pairs with {name} takes about "
            f"{duration(pairs / rate)} at the {rate:.0f} pairs/s measured here on {probe.timing.device}")


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


def nonfinite_scores(scores: Any, model: str) -> str | None:
    """What is wrong when some of a CE's scores are NaN or infinite (as NaN weights or an fp16 overflow give), or None.

    ``xenbench score`` refuses such a block before writing it; :func:`xenbench.harness.preflight.plan_scoring` refuses
    the CE before a kernel starts with this text.

    Parameters
    ----------
    scores : array-like of any shape
    model
        The CE's name in the text.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    bad = int(s.size - np.isfinite(s).sum())
    if not bad:
        return None
    return (f"a CE whose scores are finite: {model} scored {bad} of {s.size} probe pairs NaN or inf (NaN weights in "
            f"the folder, or an overflow?)")


def ranking_agreement(scores: Any) -> float:
    """How much every query ranks the items alike: the median over queries of the correlation between a query's scores
    and the mean scores of the *other* queries, each query's scores centred (its own offset removed).

    1 means every query orders the items the same way (the query is ignored: an untrained or collapsed head); a CE
    that reads the query gives each its own order. NaN when fewer than 2 queries or items spread.

    Parameters
    ----------
    scores : array-like of shape (n_queries, n_items)

    Examples
    --------
    >>> alike = np.array([[1.0, 2.0, 3.0], [1.5, 2.5, 3.5], [0.0, 1.0, 2.0]])  # each query: the same order + offset
    >>> float(round(ranking_agreement(alike), 6))
    1.0
    >>> float(round(ranking_agreement(np.eye(3)), 6))  # each query its own item, the others' mean its opposite
    -1.0
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] < 2 or s.shape[1] < 2:
        return float("nan")
    r = s - s.mean(axis=1, keepdims=True)
    total = r.sum(axis=0)
    own = np.einsum("qi,qi->q", r, r)
    dots = r @ total - own  # r_q . (sum of the other rows)
    others = np.sqrt(np.maximum(total @ total - 2 * (r @ total) + own, 0.0))  # |sum of the other rows|
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = dots / (np.sqrt(own) * others)
    corr = corr[np.isfinite(corr)]
    return float(np.median(corr)) if corr.size else float("nan")


def collapsed_ranking(scores: Any, model: str) -> str | None:
    """A warning when a CE ranks the items nearly alike for every query (:func:`ranking_agreement` at least
    :data:`SHARED_RANKING`), as an untrained head on a pretrained encoder does: its scores spread, so
    :func:`degenerate_scores` passes them, but they follow the items, not the query. None when the CE reads the query,
    or when the sample is smaller than :data:`MIN_RANKING_SAMPLE` (not judged).

    Parameters
    ----------
    scores : array-like of shape (n_queries, n_items)
        The scored sample (rows: queries).
    model
        The CE's name in the warning.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] < MIN_RANKING_SAMPLE[0] or s.shape[1] < MIN_RANKING_SAMPLE[1]:
        return None
    agreement = ranking_agreement(s)
    if not agreement >= SHARED_RANKING:
        return None
    top = np.nanargmax(np.where(np.isfinite(s), s, -np.inf), axis=1)
    share = np.bincount(top).max() / top.size
    return (f"the CE {model} ranks the items nearly alike for every query: on {s.shape[0]} queries x {s.shape[1]} "
            f"items the median query's scores correlate {agreement:.2f} with the other queries' mean (from "
            f"{SHARED_RANKING} up the query barely matters; the bundled CEs stay below 0.92), and {share:.0%} of "
            f"the queries share one top-1 item. An untrained or collapsed head? Conclusions drawn from its scores are "
            f"not to be trusted")


def warn_if_collapsed(scores: Any, model: str) -> str | None:
    """:func:`collapsed_ranking`, and when it finds a collapse: a logged warning (the terminal of ``xenbench run`` shows
    a kernel's) and a caveat of the run (:func:`xenbench.provenance.record_caveat`), which its results file keeps and
    its findings show first. Called wherever a CE's scored sample is loaded (03/04/07's
    :func:`~xenbench.studies.setup.load_setup`, 02's :func:`~xenbench.studies.rank.load_matrices`, the pre-kernel
    plan of a cached sample)."""
    import logging

    from xenbench import provenance

    warning = collapsed_ranking(scores, model)
    if warning:
        logging.getLogger(__name__).warning(warning)
        provenance.record_caveat(warning)
    return warning
