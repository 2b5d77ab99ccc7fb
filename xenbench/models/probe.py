"""A cross-encoder tried on a few hundred pairs: how fast it scores on this machine, and whether its scores spread.

One probe for both uses: before a notebook's kernel starts (:func:`xenbench.harness.preflight.plan_scoring`: the
time on-demand scoring will take, as a range, and the checks of a CE that cannot rank: near-constant scores here,
query-blind rankings in :mod:`xenbench.models.ce_check`), and in notebook 07
(:func:`xenbench.studies.compare.ce_seconds_per_pair`: the seconds per CE call on its wall-time axis).

The rate is measured in batches of :data:`PROBE_BATCH_QUERIES` queries x the probe's items, the first one a warm-up
(scored, not timed: lazy initialization and first kernels are not the CE's rate). The spread of the timed batches'
rates is the estimate's range: on a loaded machine one short probe was off by 0.5-1.9x; the range shows how much the
rate moved while it was measured (a load that changes later is not foreseen). Cost: at most :data:`PROBE_PAIRS` pairs
(512: 1.5-2 s at MiniLM-L6's 300 pairs/s on 2 idle cores), and no new batch once :data:`PROBE_SECONDS` have passed
with :data:`MIN_TIMED_BATCHES` timed.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from xenbench._validation import check_int
from xenbench.sampling import sample_rows

if TYPE_CHECKING:  # the scorer (torch, transformers) loads in probe_rate: degenerate_scores on cached scores needs none
    from xenbench.data.datasets import Item, Query
    from xenbench.models.crossencoder import CrossEncoder
    from xenbench.models.scoring import ScoreTiming

__all__ = ["PROBE_PAIRS", "PROBE_ITEMS", "PROBE_BATCH_QUERIES", "PROBE_SECONDS", "MIN_TIMED_BATCHES", "RateProbe",
           "probe_rate", "duration", "duration_range", "rate_range_text", "scoring_line", "degenerate_scores",
           "nonfinite_scores"]

#: Pairs the harness scores before a run: the CE's rate here (and its spread), and the sample the CE check judges.
PROBE_PAIRS = 512
#: At most this many items per probe: the pairs are about ``n_pairs / PROBE_ITEMS`` queries x these items.
PROBE_ITEMS = 32
#: Queries per timed batch (a batch: these queries x the probe's items, 64 pairs at the defaults).
PROBE_BATCH_QUERIES = 2
#: No batch starts after this many seconds of probing once :data:`MIN_TIMED_BATCHES` are timed: a slow CE (an LLM
#: reranker at a few pairs/s) costs at most about this plus one batch.
PROBE_SECONDS = 20.0
#: Timed batches (after the warm-up) the range needs at least.
MIN_TIMED_BATCHES = 3
# Scores spread less than this (std over the probe's pairs; for large scores, 1e-4 of |mean|) are "near-constant".
_FLAT = 1e-3
# The probe's clock (a test advances a fake one from its scorer: no timing in tests)
_clock = time.perf_counter


@dataclass(frozen=True)
class RateProbe:
    """What :func:`probe_rate` measured.

    Attributes
    ----------
    scores : ndarray of shape (n_probe_queries, n_probe_items), float32
        Every scored pair, the warm-up batch's included (rows: ``queries[rows]``, columns: ``items[cols]``).
    rows, cols : ndarray of int64
        The probe's queries and items, as indices into the ``queries`` and ``items`` given.
    batch_rates : tuple of float
        Pairs per second of each timed batch, in order (the warm-up excluded).
    timing : ScoreTiming
        The timed batches together: ``timing.wall_s / timing.n_pairs`` is the seconds per CE call.
    """

    scores: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    batch_rates: tuple[float, ...]
    timing: ScoreTiming

    @property
    def rate(self) -> float:
        """The median batch's pairs per second."""
        return float(np.median(self.batch_rates))

    @property
    def rate_range(self) -> tuple[float, float]:
        """The slowest and the fastest timed batch's pairs per second."""
        return float(min(self.batch_rates)), float(max(self.batch_rates))

    def seconds(self, pairs: int) -> tuple[float, float]:
        """How long ``pairs`` pairs take: at the fastest and at the slowest batch's rate (seconds, low <= high)."""
        low, high = self.rate_range
        return pairs / high, pairs / low


def _probe_sample(queries: Sequence[Query], items: Sequence[Item], n_pairs: int, seed: int,
                  relevant: Mapping[str, Sequence[str]] | None) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the probe: ``min(len(items), PROBE_ITEMS)`` items, ``ceil(n_pairs / that)`` queries.

    Without ``relevant``: seeded samples (:func:`xenbench.sampling.sample_rows`). With it (query id -> relevant item
    ids) and queries that have a relevant item among ``items``: the queries are drawn among those, and the items are
    their relevant items (at most half the probe's) and a seeded draw of the others, so the CE check can judge the
    probe against the labels.
    """
    n_items = min(len(items), PROBE_ITEMS)
    n_queries = max(1, min(len(queries), -(-n_pairs // max(n_items, 1))))
    index = {it.id: c for c, it in enumerate(items)}
    labelled = [] if relevant is None else [
        r for r, q in enumerate(queries) if any(i in index for i in relevant.get(q.id, ()))]
    if not labelled:
        return (sample_rows(len(queries), n_queries, seed, kind="queries"),
                sample_rows(len(items), n_items, seed, kind="items"))
    rows = np.asarray(labelled)[sample_rows(len(labelled), n_queries, seed, kind="queries")]
    gold = list(dict.fromkeys(index[i] for r in rows for i in relevant[queries[r].id] if i in index))
    gold = gold[: max(1, n_items // 2)]
    others = np.setdiff1d(np.arange(len(items)), gold)
    fill = others[sample_rows(len(others), n_items - len(gold), seed, kind="items")] if n_items > len(gold) else []
    return rows, np.sort(np.concatenate([np.asarray(gold, dtype=np.int64), np.asarray(fill, dtype=np.int64)]))


def probe_rate(ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item], *, n_pairs: int = PROBE_PAIRS,
               seed: int = 0, device: str = "auto", precision: str = "fp32", batch_size: int | None = None,
               relevant: Mapping[str, Sequence[str]] | None = None) -> RateProbe:
    """Score about ``n_pairs`` pairs of ``queries`` x ``items`` as the score stores are scored, in timed batches.

    The pairs: :func:`_probe_sample` (``min(len(items), PROBE_ITEMS)`` items, ``ceil(n_pairs / that)`` queries).
    They are scored in batches of
    :data:`PROBE_BATCH_QUERIES` queries x the probe's items; the first batch is a warm-up, not timed (with a single
    batch, it is scored once to warm up and once timed). No new batch starts once :data:`PROBE_SECONDS` have passed
    and :data:`MIN_TIMED_BATCHES` are timed: the scores then hold the rows scored.

    Parameters
    ----------
    ce : CrossEncoder
        Or any scorer :func:`~xenbench.models.scoring.score_matrix` takes.
    queries : sequence of Query of length n_queries
    items : sequence of Item of length n_items
    n_pairs
        About how many pairs to score (>= 1).
    seed
        Seeds the sample of queries and items.
    device
        Where to score (:func:`xenbench._device.resolve_device`).
    precision, batch_size
        As the scoring to be planned will use them (:func:`xenbench.models.scoring.score_matrix`).
    relevant : mapping of query id to relevant item ids, optional
        The labels (``Dataset.gold``): the probe keeps them in its sample (:func:`_probe_sample`).

    Returns
    -------
    RateProbe
        The scores, the sample, each timed batch's rate (``rate_range``: the estimate's range) and their timing.
    """
    from xenbench.models.scoring import ScoreTiming, score_matrix

    n_pairs = check_int(n_pairs, "n_pairs", 1, None, "probe_rate")
    rows, cols = _probe_sample(queries, items, n_pairs, seed, relevant)
    its = [items[c] for c in cols]
    options = {"device": device, "precision": precision, "batch_size": batch_size, "progress": False}
    starts = list(range(0, len(rows), PROBE_BATCH_QUERIES))
    blocks, rates, wall, timed_pairs, last = [], [], 0.0, 0, None
    begin = _clock()
    for b, a in enumerate([starts[0], *starts] if len(starts) == 1 else starts):
        if len(rates) >= MIN_TIMED_BATCHES and _clock() - begin > PROBE_SECONDS:
            break
        qs = [queries[r] for r in rows[a:a + PROBE_BATCH_QUERIES]]
        t0 = _clock()
        last = score_matrix(ce, qs, its, **options)
        spent = _clock() - t0
        if b == 0:  # the warm-up: lazy initialization, first kernels
            if len(starts) > 1:
                blocks.append(last.scores)
            continue
        blocks.append(last.scores)
        rates.append(last.scores.size / max(spent, 1e-9))
        wall, timed_pairs = wall + spent, timed_pairs + last.scores.size
    scores = np.concatenate(blocks, axis=0)
    t = last.timing
    timing = ScoreTiming(timed_pairs, wall, t.device, t.precision, t.batch_size, t.n_threads)
    return RateProbe(scores, rows[: scores.shape[0]], cols, tuple(rates), timing)


def duration(seconds: float) -> str:
    """A time to wait, as a person reads it: ``"45 s"``, ``"8.3 min"``, ``"46.0 h"``."""
    return f"{seconds:.0f} s" if seconds < 90 else (f"{seconds / 60:.1f} min" if seconds < 5400 else
                                                   f"{seconds / 3600:.1f} h")


def duration_range(low: float, high: float) -> str:
    """Two times to wait in one unit when they share it: ``"1.5-2.3 min"``, else ``"50 s-2.3 min"``."""
    a, b = duration(low), duration(high)
    unit_a, unit_b = a.split(" ")[1], b.split(" ")[1]
    return f"{a.split(' ')[0]}-{b}" if unit_a == unit_b and a != b else (a if a == b else f"{a}-{b}")


def rate_range_text(probe: RateProbe) -> str:
    """``"210-330 pairs/s"`` (``"300 pairs/s"`` when every batch ran alike)."""
    low, high = probe.rate_range
    return f"{low:.0f} pairs/s" if f"{low:.0f}" == f"{high:.0f}" else f"{low:.0f}-{high:.0f} pairs/s"


def scoring_line(name: str, n_queries: int, n_items: int, pairs: int, probe: RateProbe) -> str:
    """What scoring ``pairs`` pairs of ``n_queries`` x ``n_items`` with the CE ``name`` takes at the rates the timed
    batches of ``probe`` (:func:`probe_rate`) reached, as a range, in one line::

        scoring 100 queries x 300 items = 30,000 pairs with my-ce takes about 1.5-2.4 min at 210-330 pairs/s measured here on cpu
    """
    low, high = probe.seconds(pairs)
    return (f"scoring {n_queries:,} queries x {n_items:,} items = {pairs:,} pairs with {name} takes about "
            f"{duration_range(low, high)} at {rate_range_text(probe)} measured here on {probe.timing.device}")


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
