"""Does a cross-encoder read the query? Evidence from its own scored sample, against baselines it must beat.

An untrained or collapsed head on a pretrained encoder gives scores that spread (so a near-constant check passes
them) but follow the items, not the query: every query gets nearly the same ranking. Two tests judge a scored sample
(rows: queries, columns: items) before its scores are trusted:

* **Labels** (where the sample holds a relevant item of a query): the CE's Success@k against the labels must beat
  chance, computed exactly (a random ranking puts one of a query's r relevant items among its top k of n with
  probability 1 − C(n − r, k) / C(n, k)), with a one-sided p-value below :data:`P_MAX` (the number of hits of a random
  ranking is Poisson-binomial: exact), and its gain over chance must be at least :data:`FIRST_STAGE_SHARE` of the
  gain of a first stage that reads the query (BM25 on the same sample, where the caller gives one).
* **No labels needed** (first-stage agreement): each query's top-k BM25 items (BM25 fitted on the sample's texts) are
  ranked under the query's own CE scores and under a random other query's (seeded derangements of the queries: the
  query-shuffled baseline). A CE that ignores the query ranks them as high under another query's scores (about 0);
  one that reads it ranks them higher under its own. The mean difference in percentile must be at least
  :data:`MIN_FIRST_STAGE_AGREEMENT` and :data:`MIN_AGREEMENT_T` standard errors above 0. Without texts (02's score
  stores), the CE's own top-k items stand in for BM25's (:func:`query_dependence`, at least
  :data:`MIN_QUERY_DEPENDENCE`): weaker, as a head that reads a query's length or style but not its meaning passes it
  more easily.

Calibrated on trained and untrained heads on the bundled WordNet-EL data and on a BEIR folder of another shape
(``tests/test_ce_check.py``; the table and the command that measures it: docs/USAGE.md, "Bounds and checks").
Cheap (numpy and scipy; BM25 through bm25s, a few hundred ms): it runs on the probe's sample before a kernel starts
and on a report's score matrix.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["P_MAX", "FIRST_STAGE_SHARE", "MIN_FIRST_STAGE_AGREEMENT", "MIN_AGREEMENT_T", "MIN_QUERY_DEPENDENCE", "MIN_QUERIES", "MIN_LABELLED", "CECheck",
           "success_k", "first_stage_agreement", "query_dependence", "success_at_k", "check_ce", "labels_of_sample", "sample_evidence",
           "warn_if_untrained"]

#: The label test: a CE whose Success@k a random ranking reaches with at least this probability is flagged.
P_MAX = 0.01
#: The label test, with a first stage: a CE whose gain over chance is below this share of the first stage's is flagged.
FIRST_STAGE_SHARE = 0.25
#: The label-free test with a first stage: a CE whose :func:`first_stage_agreement` is below this is flagged.
MIN_FIRST_STAGE_AGREEMENT = 0.04
#: ... or whose agreement is not above 0 by at least this many standard errors over the queries (one-sided p ~ 0.02).
MIN_AGREEMENT_T = 2.0
#: The label-free test without a first stage (02's score stores): a CE whose :func:`query_dependence` is below this is
#: flagged. Weaker: a head that reads the query's length or style but not its meaning can pass it.
MIN_QUERY_DEPENDENCE = 0.2
#: Queries a sample needs for the label-free test (fewer: not judged).
MIN_QUERIES = 8
#: Queries with a relevant item in the sample that the label test needs (fewer: not judged).
MIN_LABELLED = 4
#: Items the check judges at most (:func:`judged_items`): a corpus-scale sample is judged on every relevant item of its
#: queries and a seeded random fill up to this many, the size of the samples the thresholds were calibrated on; a
#: whole corpus of 10^5 items would cost minutes and gigabytes (BM25 and percentiles over every pair) for no change.
MAX_JUDGED_ITEMS = 5000
# Shuffles of the queries averaged for the shuffled baseline (seeded): its spread over shuffles is ~0.01 at 16 queries
_SHUFFLES = 20


def success_k(n_items: int) -> int:
    """The k of Success@k and of the top-k items: 10, at most a tenth of the items, at least 1."""
    return max(1, min(10, n_items // 10))


@dataclass(frozen=True)
class CECheck:
    """What :func:`check_ce` found on one scored sample. NaN where a test was not run (too few queries, no labels,
    no first stage).

    Attributes
    ----------
    model : str
    n_queries, n_items : int
        The sample's shape.
    k : int
        Of Success@k and the top-k items (:func:`success_k`).
    query_dependence : float
        (own − shuffled) / (own − ½): 0 for a CE that ranks alike for every query (:func:`query_dependence`).
    n_labelled : int
        Queries with at least one relevant item among the sample's items.
    success, chance, p_value : float
        The CE's Success@k on those queries, a random ranking's (exact expectation), and the probability that a random
        ranking hits at least as many of them.
    first_stage : float
        The first stage's Success@k on the same queries.
    first_stage_agreement, agreement_t : float
        :func:`first_stage_agreement` with the first stage (no labels needed), and its mean over queries divided by
        its standard error.
    """

    model: str
    n_queries: int
    n_items: int
    k: int
    query_dependence: float
    n_labelled: int = 0
    success: float = float("nan")
    chance: float = float("nan")
    p_value: float = float("nan")
    first_stage: float = float("nan")
    first_stage_agreement: float = float("nan")
    agreement_t: float = float("nan")

    @property
    def failures(self) -> list[str]:
        """The failed test in words; empty when the CE passed (or nothing was judged). One test decides: the labels
        where at least :data:`MIN_LABELLED` queries have a relevant item in the sample, else the first-stage
        agreement where a first stage is given, else the query dependence."""
        out = []
        if self.n_labelled >= MIN_LABELLED:  # the labels are the direct evidence: they decide where they judge
            vs = (f"; BM25 on the same sample {self.first_stage:.2f}" if math.isfinite(self.first_stage) else "")
            label = (f"Success@{self.k} {self.success:.2f} on the {self.n_labelled} queries with a relevant item in "
                     f"the sample, chance {self.chance:.2f} (p = {self.p_value:.2g}){vs}")
            if not self.p_value < P_MAX:
                out.append(f"it does not beat chance on the labels ({label})")
            elif (math.isfinite(self.first_stage)
                  and self.success - self.chance < FIRST_STAGE_SHARE * (self.first_stage - self.chance)):
                out.append(f"it gains less than {FIRST_STAGE_SHARE:.0%} of the first stage's gain over chance "
                           f"({label})")
        elif math.isfinite(self.first_stage_agreement):
            if self.first_stage_agreement < MIN_FIRST_STAGE_AGREEMENT or not self.agreement_t >= MIN_AGREEMENT_T:
                out.append(f"its rankings do not follow the query (first-stage agreement "
                           f"{self.first_stage_agreement:.2f}, {self.agreement_t:.1f} standard errors above 0; flagged "
                           f"below {MIN_FIRST_STAGE_AGREEMENT} or {MIN_AGREEMENT_T}: it ranks each query's top "
                           f"{self.k} BM25 items no higher than a random other query's scores do)")
        elif self.query_dependence < MIN_QUERY_DEPENDENCE:
            out.append(f"its rankings barely depend on the query (query dependence {self.query_dependence:.2f}, "
                       f"flagged below {MIN_QUERY_DEPENDENCE}: a random other query's scores rank each query's top "
                       f"{self.k} items almost as high as its own do)")
        return out

    @property
    def flagged(self) -> bool:
        return bool(self.failures)

    def warning(self) -> str | None:
        """One line for the terminal and the report's caveats, or None when the CE passed."""
        failures = self.failures
        if not failures:
            return None
        return (f"the CE {self.model} does not read the query on {self.n_queries} queries x {self.n_items} items: "
                f"{'; and '.join(failures)}. An untrained or collapsed head? Conclusions drawn from its scores are "
                f"not to be trusted")


def _percentiles(scores: np.ndarray) -> np.ndarray:
    """Each row's items as percentiles of that row, ties averaged: 1 at the top, 0 at the bottom."""
    from scipy.stats import rankdata

    return (rankdata(scores, axis=1, method="average") - 1.0) / max(scores.shape[1] - 1, 1)


def first_stage_agreement(scores: Any, first_stage: Any, *, seed: int = 0, k: int | None = None,
                          per_query: bool = False) -> Any:
    """How much more a CE ranks each query's first-stage top items under the query's own scores than under a random
    other query's: the label-free test when a first stage is at hand.

    For each query q with a positive first-stage score, T_q are its first stage's top-k items (positive scores only).
    Returns the mean over those queries of (mean percentile of T_q under q's CE scores) − (the same under π(q)'s), π a
    seeded random derangement (averaged over 20; a partner whose first-stage top item is q's is left out: it asks about
    the same thing, as near-duplicate queries do). About 0 for a CE that ranks alike for every query, whatever the
    first stage; positive for one that agrees with the first stage query by query; negative for one that ranks the
    relevant items last (a head of the wrong sign). NaN when fewer than 2 queries have a positive first-stage score.

    Parameters
    ----------
    scores, first_stage : array-like of shape (n_queries, n_items)
    seed
        Seeds the derangements.
    k
        First-stage items per query; default :func:`success_k`.
    per_query
        Return each judged query's difference (ndarray) instead of their mean.

    Examples
    --------
    >>> bm25 = np.eye(4)  # query q matches item q
    >>> float(round(first_stage_agreement(np.eye(4) + 0.1 * np.arange(4), bm25, k=1), 6))  # the CE agrees, by query
    0.675
    >>> abs(round(first_stage_agreement(np.tile(np.arange(4.0), (4, 1)), bm25, k=1), 6))  # one ranking for all
    0.0
    """
    s = np.asarray(scores, dtype=np.float64)
    f = np.asarray(first_stage, dtype=np.float64)
    if s.ndim != 2 or s.shape != f.shape or s.shape[1] < 2:
        return float("nan")
    f = np.where(np.isfinite(f), f, -np.inf)
    rows = np.flatnonzero((f > 0).any(axis=1))
    if rows.size < 2:
        return np.full(rows.size, np.nan) if per_query else float("nan")
    s = np.where(np.isfinite(s), s, -np.inf)[rows]
    f = f[rows]
    k = min(k or success_k(s.shape[1]), s.shape[1])
    top = np.argsort(-f, axis=1, kind="stable")[:, :k]
    weight = np.take_along_axis(f, top, axis=1) > 0  # only items the first stage found
    pct = _percentiles(s)
    found = weight.sum(axis=1)

    def mean_pct(p: np.ndarray) -> np.ndarray:  # per query: the mean percentile of its first-stage top items
        return (np.take_along_axis(p, top, axis=1) * weight).sum(axis=1) / found

    own = mean_pct(pct)
    rng = np.random.default_rng(seed)
    shuffled, pairs = np.zeros(len(rows)), np.zeros(len(rows))
    for _ in range(_SHUFFLES):
        order = rng.permutation(len(rows))
        partner = np.empty(len(rows), dtype=np.int64)
        partner[order] = np.roll(order, -1)
        # a partner whose first stage puts the same item first asks about the same thing: not a baseline
        other = top[partner, 0] != top[:, 0]
        shuffled += np.where(other, mean_pct(pct[partner]), 0.0)
        pairs += other
    kept = pairs > 0
    diff = own[kept] - shuffled[kept] / pairs[kept]
    if per_query:
        return diff
    return float(diff.mean()) if diff.size else float("nan")


def query_dependence(scores: Any, *, seed: int = 0, k: int | None = None) -> float:
    """How much a CE's rankings depend on the query, against a query-shuffled baseline.

    For each query q, T_q are its top-k items. ``own`` is the mean percentile of T_q under q's own scores (about 1),
    ``shuffled`` the mean percentile of T_q under the scores of π(q), π a seeded random derangement of the queries
    (averaged over 20 of them). Returns ``(own − shuffled) / (own − ½)``: 0 when every query ranks the items alike,
    about 1 when another query's ranking says nothing about this query's top items.

    Parameters
    ----------
    scores : array-like of shape (n_queries, n_items)
        Non-finite scores rank lowest.
    seed
        Seeds the derangements.
    k
        Top items per query; default :func:`success_k`.

    Returns
    -------
    float
        NaN when fewer than 2 queries or items; 0 when no row spreads.

    Examples
    --------
    >>> alike = np.array([[1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 3.5, 4.5], [0.0, 1.0, 2.0, 3.0]])  # same order, offsets
    >>> abs(round(query_dependence(alike, k=1), 6))
    0.0
    >>> float(round(query_dependence(np.eye(4), k=1), 6))  # each query its own item, ranked last-equal by the others
    1.333333
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] < 2 or s.shape[1] < 2:
        return float("nan")
    s = np.where(np.isfinite(s), s, -np.inf)
    n_q, n_i = s.shape
    k = min(k or success_k(n_i), n_i)
    pct = _percentiles(s)
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    own = float(np.take_along_axis(pct, top, axis=1).mean())
    if own - 0.5 <= 1e-12:
        return 0.0
    rng = np.random.default_rng(seed)
    shuffled = 0.0
    for _ in range(_SHUFFLES):
        order = rng.permutation(n_q)  # one random cycle through every query: no query is its own partner
        partner = np.empty(n_q, dtype=np.int64)
        partner[order] = np.roll(order, -1)
        shuffled += float(np.take_along_axis(pct[partner], top, axis=1).mean()) / _SHUFFLES
    return (own - shuffled) / (own - 0.5)


def _hits(scores: np.ndarray, relevant: np.ndarray, k: int) -> np.ndarray:
    """Whether a relevant item ranks in each row's top k; a tie counts against the CE (all tied items rank first)."""
    s = np.where(np.isfinite(scores), scores, -np.inf)
    best = np.where(relevant, s, -np.inf).max(axis=1)
    return (s >= best[:, None]).sum(axis=1) <= k


def _poisson_binomial_sf(p: np.ndarray, hits: int) -> float:
    """P(X >= hits) for X a sum of independent Bernoulli(p_j): exact, by convolution."""
    dist = np.zeros(len(p) + 1)
    dist[0] = 1.0
    for j, pj in enumerate(p, start=1):
        dist[1:j + 1] = dist[1:j + 1] * (1 - pj) + dist[:j] * pj
        dist[0] *= 1 - pj
    return float(min(1.0, dist[hits:].sum()))


def success_at_k(scores: Any, relevant: Any, k: int) -> tuple[float, float, float, int]:
    """Success@k of ``scores`` against ``relevant`` on the rows with a relevant item, against a random ranking.

    Parameters
    ----------
    scores : array-like of shape (n_queries, n_items)
    relevant : array-like of bool, shape (n_queries, n_items)
    k : int

    Returns
    -------
    (success, chance, p_value, n_labelled)
        The share of labelled rows with a relevant item in the top k (ties count against the scores); its expectation
        under a random ranking, mean over rows of 1 − C(n − r, k) / C(n, k) (r relevant of n items); the exact
        probability that a random ranking hits at least as many rows; the labelled rows. NaN when no row is labelled.

    Examples
    --------
    >>> rel = np.eye(4, dtype=bool)
    >>> success_at_k(np.eye(4), rel, 1)  # every row's item on top; a random ranking: 1/4 each, all four 1/256
    (1.0, 0.25, 0.00390625, 4)
    """
    s, rel = np.asarray(scores, dtype=np.float64), np.asarray(relevant, dtype=bool)
    labelled = rel.any(axis=1)
    n_lab, n = int(labelled.sum()), s.shape[1]
    if not n_lab:
        return float("nan"), float("nan"), float("nan"), 0
    hits = _hits(s[labelled], rel[labelled], k)
    r = rel[labelled].sum(axis=1)
    chance = np.array([1.0 - math.comb(n - rj, k) / math.comb(n, k) for rj in r.tolist()])
    return float(hits.mean()), float(chance.mean()), _poisson_binomial_sf(chance, int(hits.sum())), n_lab


def labels_of_sample(gold: Mapping[str, Sequence[str]], query_ids: Sequence[str],
                     item_ids: Sequence[str]) -> np.ndarray:
    """``relevant[a, b]``: item ``item_ids[b]`` is in ``gold[query_ids[a]]``; bool of shape (n_queries, n_items)."""
    col = {i: b for b, i in enumerate(item_ids)}
    rel = np.zeros((len(query_ids), len(item_ids)), dtype=bool)
    for a, q in enumerate(query_ids):
        for g in gold.get(q, ()):
            if g in col:
                rel[a, col[g]] = True
    return rel


def judged_items(gold: Mapping[str, Sequence[str]], queries: Sequence[Any], items: Sequence[Any], *,
                 max_items: int = MAX_JUDGED_ITEMS, seed: int = 0) -> np.ndarray:
    """Column indices of ``items`` the check judges: all of them when at most ``max_items``, else every item relevant
    to one of ``queries`` (``gold``) and a seeded random fill of the others up to ``max_items`` (more only when the
    relevant items alone exceed it), in column order.

    >>> from types import SimpleNamespace as N
    >>> items = [N(id=f"d{j}") for j in range(10)]
    >>> cols = judged_items({"q": ["d7", "d9"]}, [N(id="q")], items, max_items=4)
    >>> len(cols), {7, 9} <= set(cols.tolist()), len(judged_items({}, [N(id="q")], items, max_items=20))
    (4, True, 10)
    """
    n = len(items)
    if n <= max_items:
        return np.arange(n)
    col = {it.id: j for j, it in enumerate(items)}
    relevant = np.array(sorted({col[g] for q in queries for g in gold.get(q.id, ()) if g in col}), dtype=np.int64)
    rest = np.setdiff1d(np.arange(n), relevant)
    fill = np.random.default_rng(seed).choice(rest, size=max(0, min(rest.size, max_items - relevant.size)),
                                              replace=False)
    return np.sort(np.concatenate([relevant, fill]))


def sample_evidence(gold: Mapping[str, Sequence[str]], queries: Sequence[Any], items: Sequence[Any]) -> dict[str, Any]:
    """What :func:`check_ce` judges a sample of ``queries`` x ``items`` against, as its keyword arguments:
    ``relevant`` (:func:`labels_of_sample` of ``gold``; None when no query has a relevant item among ``items``) and
    ``first_stage``, BM25's scores of the same pairs (:class:`~xenbench.models.retrievers.BM25Retriever` fitted on
    ``items``: a first stage that reads the query, with no model to load; a few hundred ms on 1,000 x 600).
    """
    from xenbench.models.retrievers import BM25Retriever

    rel = labels_of_sample(gold, [q.id for q in queries], [i.id for i in items])
    return {"relevant": rel if rel.any() else None,
            "first_stage": BM25Retriever().fit(list(items)).scores(list(queries))}


def check_ce(scores: Any, model: str, *, relevant: Any = None, first_stage: Any = None, seed: int = 0) -> CECheck:
    """Judge a CE on its scored sample: query dependence (no labels needed) and, where ``relevant`` marks items,
    Success@k against chance and against ``first_stage`` (module docstring).

    Parameters
    ----------
    scores : array-like of shape (n_queries, n_items)
    model
        The CE's name in the warning.
    relevant : array-like of bool, shape (n_queries, n_items), optional
        The labels restricted to the sample (:func:`labels_of_sample`).
    first_stage : array-like of shape (n_queries, n_items), optional
        A first stage's scores of the same pairs (e.g. BM25 on the sample's texts).
    seed
        Seeds the query shuffles.

    Returns
    -------
    CECheck
        ``.warning()`` is the line to show, or None.
    """
    s = np.asarray(scores, dtype=np.float64)
    n_q, n_i = s.shape
    k = success_k(n_i)
    judged = n_q >= MIN_QUERIES
    dependence = query_dependence(s, seed=seed, k=k) if judged else float("nan")
    agreement, t_stat = float("nan"), float("nan")
    if judged and first_stage is not None:
        diff = first_stage_agreement(s, first_stage, seed=seed, k=k, per_query=True)
        if diff.size >= MIN_QUERIES:
            agreement = float(diff.mean())
            spread = float(diff.std(ddof=1)) / math.sqrt(diff.size)
            t_stat = agreement / spread if spread > 0 else math.copysign(math.inf, agreement)
    if relevant is None:
        return CECheck(model, n_q, n_i, k, dependence, first_stage_agreement=agreement, agreement_t=t_stat)
    success, chance, p_value, n_lab = success_at_k(s, relevant, k)
    fs = success_at_k(first_stage, relevant, k)[0] if first_stage is not None and n_lab else float("nan")
    return CECheck(model, n_q, n_i, k, dependence, n_lab, success, chance, p_value, fs, agreement, t_stat)


def warn_if_untrained(scores: Any, model: str, *, relevant: Any = None, first_stage: Any = None) -> str | None:
    """:func:`check_ce`, and when the CE fails: a logged warning (the terminal of ``xenbench run`` shows a kernel's)
    and a caveat of the run (:func:`xenbench.provenance.record_caveat`), which its results file keeps and its findings
    show first ("These findings are not to be trusted"). Called wherever a CE's scored sample is loaded (03/04/07's
    :func:`~xenbench.studies.setup.load_setup`, 02's :func:`~xenbench.studies.rank.load_matrices`, the pre-kernel
    plan). Returns the warning, or None."""
    import logging

    from xenbench import provenance

    warning = check_ce(scores, model, relevant=relevant, first_stage=first_stage).warning()
    if warning:
        logging.getLogger(__name__).warning(warning)
        provenance.record_caveat(warning)
    return warning
