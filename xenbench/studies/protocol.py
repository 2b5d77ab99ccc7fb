"""An honest evaluation protocol: settings chosen on dev queries, test results over seeds × splits, paired tests.

The papers ([ANNCUR] §3.2, [ADACUR] §3.1, Fig. 2) report each method at its "best possible" anchor /
re-rank split k_i per budget B_CE, read off the evaluation queries, with one draw of anchor items. This
module is the small set of pieces that replaces that by:

1. :func:`query_splits` — several seeded splits of the query rows into anchor queries Q_anc (the rows of
   R_anc), **dev** queries (where settings such as k_i, λ or a sampler are chosen) and **test** queries
   (where the chosen setting is reported). The three parts are disjoint.
2. :func:`choose_on_dev` / :func:`at_chosen` — pick the best setting per group on dev rows only, then
   read the rows of the test results at that setting. Against relevance labels, a method's setting is chosen on
   dev by :data:`LABEL_CHOICE` and every label measure is read at it (:mod:`xenbench.studies.labels`).
3. :func:`summarize` — mean over runs (seed × split) with a t-interval from the spread across runs, so the
   interval contains the variance of the anchor draw and of the query split; the mean per-query SE is
   reported beside it.
4. :func:`paired_test` — a per-query paired comparison of two methods measured on the same queries:
   mean difference, its t-interval, the paired t-test and Wilcoxon signed-rank p-values (scipy.stats).
   :func:`pool_by_query` first averages a query's values over the runs in which it was a test query, so
   each query counts once. :func:`holm` adjusts the p-values of a family of declared comparisons.
5. :func:`verdict` — **the one verdict rule** of notebooks 03, 04 and 05, stated there: a per-query paired test,
   Holm-adjusted over the notebook's declared family, *and* the interval across independent runs. Its inputs:
   :func:`pair_runs` (which runs are independent), :func:`compare_runs` (both halves from per-query values),
   :func:`run_interval` (the second half from per-run means alone); :func:`decide` applies it to a family.
6. :func:`run_seed` — the seed of one run, drawn from (split seed, seed) together, so every (split, seed) run
   makes its own random draws (ANNCUR's anchors, ADACUR's and AXN's first rounds, MF-IND's G and training).

Independent runs. A method that makes random draws (random anchors, a random first round, a seeded training) is
run once per (split, seed); a method that is deterministic given the split (DE re-rank, and every method whose
first round is the DE's top items and whose later rounds are greedy: ANNCUR DE, ADACUR DE+TopK, AXN DE) is run
once per split, and counts one run per split: repeating it over seeds would repeat one number and shrink its
interval without new evidence.

References
----------
.. [ANNCUR] Yadav et al. "Efficient Nearest Neighbor Search for Cross-Encoder Models using Matrix
   Factorization", EMNLP 2022, §3.2 (k_q, k_i, B_CE), §4.
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023, §3.1, Fig. 2.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from xenbench._validation import check_int
from xenbench.errors import ParameterError

__all__ = ["ALPHA", "LABEL_CHOICE", "VERDICTS", "Split", "query_splits", "run_seed", "choose_on_dev", "at_chosen", "summarize",
           "paired_test", "pool_by_query", "holm", "t_interval", "pair_runs", "run_interval", "compare_runs", "verdict",
           "decide"]

#: Family-wise significance level of the verdict rule (:func:`verdict`).
ALPHA: float = 0.05
#: The label measure a method's setting is chosen by on dev queries when it is scored against relevance labels (the
#: measure IR papers are judged on); the other label measures are read at that same setting.
LABEL_CHOICE: str = "nDCG@10"
#: The three verdicts of :func:`verdict`: challenger better, no established difference, challenger worse.
VERDICTS: tuple[str, str, str] = ("beats", "level", "loses")


class Split(NamedTuple):
    """Disjoint, sorted query rows: anchor (training) queries, dev queries and test queries; the one split type.

    ``anchor`` are the queries a method learns from: ANNCUR's and ADACUR's anchor queries Q_anc (R_anc =
    M[anchor]), AXN's scale β and MF-IND's training queries, PEFA's labelled queries (its kNN memory); empty when
    a method trains on no held-out queries (CCSA trains on every item and query). Settings are chosen on ``dev``
    and reported on ``test``. ``seed`` is the seed that drew it (the split's name in tables).

    Drawn by :func:`query_splits` (notebooks 03, 04, 07), :func:`xenbench.studies.splits.make_split` (05's random
    and in-domain regimes) and :func:`xenbench.studies.ccsa.eval_split` (06).
    """

    anchor: np.ndarray  # int64 (k_q,)
    dev: np.ndarray     # int64 (n_dev,)
    test: np.ndarray    # int64 (n_test,)
    seed: int


def query_splits(n_queries: int, n_anchor: int, n_dev: int, seeds: Sequence[int], *,
                 max_test: int | None = None) -> list[Split]:
    """One seeded split of ``range(n_queries)`` into anchor, dev and test rows per seed.

    Parameters
    ----------
    n_queries : int
        Rows of the score matrix M.
    n_anchor : int
        k_q = |Q_anc| ([ANNCUR] §3.2), >= 1.
    n_dev : int
        Dev queries (settings are chosen on them), >= 1; ``n_anchor + n_dev < n_queries``.
    seeds : sequence of int
        One split per seed (distinct seeds give different splits).
    max_test : int, optional
        Keep at most this many test rows (a seeded sample of the rest).

    Returns
    -------
    list of Split
        ``anchor``, ``dev``, ``test``: sorted int64 arrays, pairwise disjoint.

    Examples
    --------
    >>> s = query_splits(10, 3, 2, seeds=[0])[0]
    >>> len(s.anchor), len(s.dev), len(s.test)
    (3, 2, 5)
    """
    owner = "query_splits"
    n = check_int(n_queries, "n_queries", 3, None, owner)
    k_q = check_int(n_anchor, "n_anchor", 1, n - 2, owner)
    n_dev = check_int(n_dev, "n_dev", 1, n - k_q - 1, owner)
    seeds = list(seeds)
    if not seeds:
        raise ParameterError("seeds", "a non-empty list of ints >= 0", seeds, owner)
    seeds = [check_int(s, "seeds", 0, None, owner) for s in seeds]
    if len(set(seeds)) != len(seeds):
        raise ParameterError("seeds", "distinct seeds", seeds, owner)
    n_test = n - k_q - n_dev
    if max_test is not None:
        n_test = min(n_test, check_int(max_test, "max_test", 1, None, owner))
    out = []
    for seed in seeds:
        perm = np.random.default_rng([seed, 7]).permutation(n)
        parts = (perm[:k_q], perm[k_q:k_q + n_dev], perm[k_q + n_dev:k_q + n_dev + n_test])
        out.append(Split(*(np.sort(p).astype(np.int64) for p in parts), seed=seed))
    return out


def run_seed(split_seed: int, seed: int) -> int:
    """The seed of the run (split ``split_seed``, seed ``seed``): one 32-bit draw of NumPy's ``SeedSequence`` of both.

    Every random draw of a run takes this seed, so the runs of a protocol with S splits × R seeds make S·R
    independent draws (a seed alone would repeat its draw, e.g. the same anchor items, on every split), and the
    same (split, seed) always makes the same draw.

    >>> run_seed(0, 1) == run_seed(0, 1), run_seed(0, 1) == run_seed(1, 1), run_seed(0, 1) == run_seed(1, 0)
    (True, False, False)
    """
    owner = "run_seed"
    key = [check_int(split_seed, "split_seed", 0, None, owner), check_int(seed, "seed", 0, None, owner)]
    return int(np.random.SeedSequence(key).generate_state(1, np.uint32)[0])


def _check_frame(df: Any, name: str, columns: Sequence[str], owner: str) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame) or not set(columns) <= set(df.columns) or df.empty:
        got = sorted(df.columns) if isinstance(df, pd.DataFrame) else type(df).__name__
        raise ParameterError(name, f"a non-empty DataFrame with columns {list(columns)}", got, owner)
    return df


def choose_on_dev(results_dev: pd.DataFrame, by: Sequence[str], setting: str | Sequence[str], *,
                  score: str = "recall") -> pd.DataFrame:
    """The setting with the highest dev ``score`` per group ``by`` (ties: the first in sorted setting order).

    Only ``results_dev`` is read, so test rows cannot influence the choice.

    Parameters
    ----------
    results_dev : DataFrame
        One row per (group, setting) measured on **dev** queries, e.g. ``recall_vs_budget(...,
        all_splits=True)`` on the dev rows.
    by : sequence of str
        Group columns, e.g. ``("run", "method", "budget", "k")``.
    setting : str or sequence of str
        Column(s) naming the setting, e.g. ``"n_anchor_items"`` (k_i).
    score : str
        Column to maximize.

    Returns
    -------
    DataFrame
        Columns ``by + setting + [score]`` (the dev score of the chosen setting), one row per group.
    """
    owner = "choose_on_dev"
    by, setting = list(by), [setting] if isinstance(setting, str) else list(setting)
    df = _check_frame(results_dev, "results_dev", by + setting + [score], owner)
    ordered = df.sort_values(by + setting, kind="stable")
    idx = ordered.groupby(by, sort=True, dropna=False)[score].idxmax()  # first maximum in setting order
    return df.loc[idx.values, by + setting + [score]].reset_index(drop=True)


def at_chosen(results_test: pd.DataFrame, chosen: pd.DataFrame, by: Sequence[str],
              setting: str | Sequence[str]) -> pd.DataFrame:
    """Rows of ``results_test`` at the setting ``chosen`` (from :func:`choose_on_dev`) names for their group.

    Groups of ``results_test`` that ``chosen`` does not name are dropped.
    """
    by, setting = list(by), [setting] if isinstance(setting, str) else list(setting)
    keys = by + setting
    _check_frame(results_test, "results_test", keys, "at_chosen")
    _check_frame(chosen, "chosen", keys, "at_chosen")
    return results_test.merge(chosen[keys].drop_duplicates(), on=keys, how="inner").reset_index(drop=True)


def t_interval(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of ``values`` and its two-sided t-interval (NaN bounds for fewer than 2 values)."""
    from scipy import stats

    mean = float(values.mean())
    if values.size < 2:
        return mean, float("nan"), float("nan")
    se = float(values.std(ddof=1) / np.sqrt(values.size))
    half = float(stats.t.ppf(0.5 + confidence / 2, values.size - 1)) * se
    return mean, mean - half, mean + half


def summarize(per_run: pd.DataFrame, by: Sequence[str], *, value: str = "recall", se: str | None = "recall_se",
              confidence: float = 0.95, bounds: tuple[float, float] | None = (0.0, 1.0)) -> pd.DataFrame:
    """Mean of ``value`` over runs (seed × split) per group, with a t-interval from the spread across runs.

    Each row of ``per_run`` is one run's number for its group (e.g. the test recall of one method at one
    budget and k, for one anchor seed and one query split). The interval ``lo``–``hi`` is
    mean ± t_{n_runs−1} · sd_runs / √n_runs, so it includes the variance of the anchor draw and of the
    split (and, through the split, of the test queries).

    Parameters
    ----------
    per_run : DataFrame
        Columns ``by``, ``value`` (and ``se`` when given).
    by : sequence of str
        Group columns, e.g. ``("method", "budget", "k")``.
    value, se : str
        The per-run number and its per-query standard error (None: no such column).
    confidence : float
        Of the interval, in (0, 1).
    bounds : (float, float) or None
        The range ``value`` lies in (a recall: [0, 1]); the interval is clipped to it, since a t-interval of a mean
        near 1 with a wide spread passes 1 (e.g. 0.846 to 1.100), a recall no method can reach. None: not clipped.

    Returns
    -------
    DataFrame
        Columns ``by``, ``mean``, ``lo``, ``hi``, ``sd_runs``, ``min``, ``max``, ``se_query`` (mean of
        ``se`` over runs; NaN without it), ``n_runs``.
    """
    owner = "summarize"
    by = list(by)
    if not isinstance(confidence, float) or not 0 < confidence < 1:
        raise ParameterError("confidence", "a float in (0, 1)", confidence, owner)
    df = _check_frame(per_run, "per_run", by + [value] + ([se] if se else []), owner)
    out = []
    for key, g in df.groupby(by, sort=True, dropna=False):
        v = g[value].to_numpy(np.float64)
        mean, lo, hi = t_interval(v, confidence)
        if bounds is not None and v.size > 1:
            lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
        key = key if isinstance(key, tuple) else (key,)
        out.append({**dict(zip(by, key)), "mean": mean, "lo": lo, "hi": hi,
                    "sd_runs": float(v.std(ddof=1)) if v.size > 1 else float("nan"), "min": float(v.min()),
                    "max": float(v.max()), "se_query": float(g[se].mean()) if se else float("nan"),
                    "n_runs": int(v.size)})
    return pd.DataFrame(out, columns=by + ["mean", "lo", "hi", "sd_runs", "min", "max", "se_query", "n_runs"])


def paired_test(a_per_query: Any, b_per_query: Any, *, confidence: float = 0.95) -> dict[str, float]:
    """Paired comparison of two methods on the same queries: d_q = a_q − b_q.

    Parameters
    ----------
    a_per_query, b_per_query : array-like of shape (n,)
        Per-query values (e.g. Top-k-Recall) of method a and method b, in the same query order.
    confidence : float
        Of the interval, in (0, 1).

    Returns
    -------
    dict
        ``mean`` (mean of d), ``se`` (sd(d)/√n), ``lo``, ``hi`` (t-interval of the mean), ``p`` (two-sided
        paired t-test, ``scipy.stats.ttest_rel``), ``p_wilcoxon`` (two-sided Wilcoxon signed-rank test,
        zero differences dropped; 1.0 when every d_q is 0), ``n`` (queries), ``n_a_better``,
        ``n_b_better``. With all d_q equal, ``p`` is 1.0 if that value is 0, else 0.0.
    """
    from scipy import stats

    owner = "paired_test"
    a = np.asarray(a_per_query, dtype=np.float64)
    b = np.asarray(b_per_query, dtype=np.float64)
    if a.ndim != 1 or a.size < 2 or not np.isfinite(a).all():
        raise ParameterError("a_per_query", "a 1-d array of >= 2 finite numbers", f"shape {a.shape}", owner)
    if b.shape != a.shape or not np.isfinite(b).all():
        raise ParameterError("b_per_query", f"finite numbers of the same shape as a_per_query {a.shape}",
                             f"shape {b.shape}", owner)
    if not isinstance(confidence, float) or not 0 < confidence < 1:
        raise ParameterError("confidence", "a float in (0, 1)", confidence, owner)
    d = a - b
    mean, lo, hi = t_interval(d, confidence)
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        p = 1.0 if mean == 0.0 else 0.0
    else:
        p = float(stats.ttest_rel(a, b).pvalue)
    nz = d[d != 0]
    p_w = float(stats.wilcoxon(nz).pvalue) if nz.size else 1.0
    return {"mean": mean, "se": sd / np.sqrt(d.size), "lo": lo if sd else mean, "hi": hi if sd else mean, "p": p,
            "p_wilcoxon": p_w, "n": int(d.size), "n_a_better": int((d > 0).sum()), "n_b_better": int((d < 0).sum())}


def holm(p_values: Any) -> np.ndarray:
    """Holm's step-down adjusted p-values for a family of m tests (Holm 1979).

    With p sorted ascending, p̃_(i) = max_{j <= i} min(1, (m − j + 1) · p_(j)); rejecting where p̃ < α
    controls the family-wise error rate at α. Returned in the input order.

    >>> holm([0.01, 0.04, 0.03]).round(3).tolist()  # sorted: 3·0.01, 2·0.03, then max(0.06, 1·0.04)
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):
        raise ParameterError("p_values", "a 1-d array of p-values in [0, 1]", f"shape {p.shape}", "holm")
    order = np.argsort(p, kind="stable")
    m = p.size
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty_like(p)
    out[order] = adjusted
    return out


def pool_by_query(rows: Sequence[np.ndarray], values: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Average each query's values over the runs in which it appears.

    Parameters
    ----------
    rows : sequence of int arrays
        Per run, the query rows (e.g. ``split.test``).
    values : sequence of float arrays
        Per run, the values of those rows (same shapes).

    Returns
    -------
    rows, means : ndarray
        The distinct rows (sorted) and each one's mean value over the runs containing it.
    """
    owner = "pool_by_query"
    if len(rows) != len(values) or not rows:
        raise ParameterError("values", f"one array per run, as many as rows ({len(rows)})", len(values), owner)
    r = np.concatenate([np.asarray(x, dtype=np.int64).ravel() for x in rows])
    v = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in values])
    if r.size != v.size:
        raise ParameterError("values", "arrays of the same lengths as rows", f"{v.size} values for {r.size} rows", owner)
    uniq, inv = np.unique(r, return_inverse=True)
    sums = np.bincount(inv, weights=v, minlength=uniq.size)
    counts = np.bincount(inv, minlength=uniq.size)
    return uniq, sums / counts


def pair_runs(a: pd.DataFrame, b: pd.DataFrame, *, split: str = "split",
              seed: str | None = "seed") -> list[tuple[pd.Series, pd.Series]]:
    """The independent runs of a comparison: pairs (run of a, run of b) of one cell, matched within a split.

    A method with one run in a split is deterministic given the split (or was run once): that run pairs with
    every run of the other, so a pair of deterministic methods counts one run per split. Otherwise runs pair by
    ``seed``. ``a`` and ``b`` hold one row per run (columns ``split`` and, unless None, ``seed``).
    """
    owner = "pair_runs"
    _check_frame(a, "a", [split] + ([seed] if seed else []), owner)
    _check_frame(b, "b", [split] + ([seed] if seed else []), owner)
    matched = []
    for key, ga in a.groupby(split, sort=True):
        gb = b[b[split] == key]
        if gb.empty:
            continue
        if len(ga) == 1 or len(gb) == 1:
            matched += [(ra, rb) for _, ra in ga.iterrows() for _, rb in gb.iterrows()]
        elif seed is None or ga[seed].duplicated().any() or gb[seed].duplicated().any():
            raise ParameterError("a", f"one run per {split}, or one per ({split}, {seed}), of each method",
                                 f"{len(ga)} and {len(gb)} runs in {split} {key}", owner)
        else:
            by_seed = {s: r for s, (_, r) in zip(gb[seed], gb.iterrows())}
            matched += [(ra, by_seed[ra[seed]]) for _, ra in ga.iterrows() if ra[seed] in by_seed]
    if not matched:
        raise ParameterError("b", f"runs in at least one {split} of a", "no shared split", owner)
    return matched


def run_interval(a: pd.DataFrame, b: pd.DataFrame, *, split: str = "split", seed: str | None = "seed",
                 value: str = "recall", confidence: float = 0.95) -> dict[str, float]:
    """The interval across independent runs (:func:`pair_runs`) of the difference of a per-run ``value``.

    With both methods measured on the same test rows in a run, the difference of their mean recalls is the
    run's mean per-query difference, so this is the interval of :func:`compare_runs` from per-run means alone.

    Returns
    -------
    dict
        ``run_mean``, ``run_lo``, ``run_hi`` (:func:`t_interval`; NaN bounds below 2 runs) and ``n_runs``.
    """
    for name, df in (("a", a), ("b", b)):
        _check_frame(df, name, [value], "run_interval")
    d = np.array([float(ra[value]) - float(rb[value]) for ra, rb in pair_runs(a, b, split=split, seed=seed)])
    mean, lo, hi = t_interval(d, confidence)
    return {"run_mean": mean, "run_lo": lo, "run_hi": hi, "n_runs": int(d.size)}


def compare_runs(a: pd.DataFrame, b: pd.DataFrame, *, split: str = "split", seed: str | None = "seed",
                 confidence: float = 0.95) -> dict[str, float]:
    """Challenger ``a`` against baseline ``b`` over their runs of one cell: the two halves of :func:`verdict`.

    Runs pair within a split (:func:`pair_runs`: a method with one run in a split is deterministic given the
    split and pairs with every run of the other; otherwise runs pair by ``seed``). Each pair gives the
    per-query differences d_q = a_q − b_q on its test rows.

    * The per-query paired test: each query's d_q averaged over the pairs in which it was a test query
      (:func:`pool_by_query`, so each query counts once), then :func:`paired_test` against 0. Its p-values
      cover the queries only: the runs' own randomness (anchors, first rounds, training) is not in them.
    * The interval across runs: the t-interval of the pairs' mean differences (:func:`t_interval`); a
      deterministic pair counts one run per split.

    Parameters
    ----------
    a, b : DataFrame
        One row per run of each method in this cell, columns ``split``, ``seed`` (unless None: one run per
        split), ``rows`` (int array of test query rows) and ``per_query`` (float array, same order).
    split, seed : str
        Column names of the split and of the seed within the split (``seed=None``: every split is one run).
    confidence : float
        Of both intervals.

    Returns
    -------
    dict
        :func:`paired_test` of the pooled differences (``mean``, ``se``, ``lo``, ``hi``, ``p``,
        ``p_wilcoxon``, ``n`` queries, ``n_a_better``, ``n_b_better``) and ``run_mean``, ``run_lo``,
        ``run_hi``, ``n_runs`` (the interval across the independent runs; NaN bounds below 2 runs).
    """
    owner = "compare_runs"
    cols = [split, "rows", "per_query"] + ([seed] if seed else [])
    _check_frame(a, "a", cols, owner)
    _check_frame(b, "b", cols, owner)
    rows, diffs, means = [], [], []
    for ra, rb in pair_runs(a, b, split=split, seed=seed):
        if not np.array_equal(ra["rows"], rb["rows"]):
            raise ParameterError("b", "runs on the same test rows as a's in the same split", "different rows", owner)
        d = np.asarray(ra["per_query"], np.float64) - np.asarray(rb["per_query"], np.float64)
        rows.append(np.asarray(ra["rows"]))
        diffs.append(d)
        means.append(float(d.mean()))
    _, pooled = pool_by_query(rows, diffs)
    test = paired_test(pooled, np.zeros_like(pooled), confidence=confidence)
    run_mean, run_lo, run_hi = t_interval(np.asarray(means), confidence)
    return {**test, "run_mean": run_mean, "run_lo": run_lo, "run_hi": run_hi, "n_runs": len(means)}


def verdict(p_adjusted: float | Sequence[float], run_lo: float, run_hi: float, *, alpha: float = ALPHA) -> str:
    """The one verdict rule of notebooks 03, 04 and 05: does the challenger beat its baseline?

    A challenger **beats** its baseline only if both hold:

    1. the per-query paired test is significant after Holm adjustment over the notebook's declared family of
       comparisons: every adjusted p-value in ``p_adjusted`` (the paired t-test and the Wilcoxon signed-rank
       test of :func:`compare_runs`, each adjusted by :func:`holm` over the family) is below ``alpha``; and
    2. the interval across independent runs of the mean difference (``run_lo``, ``run_hi``; a deterministic
       method counts one run per split) lies entirely above 0.

    It **loses** to the baseline under the same two conditions with the interval entirely below 0. Otherwise
    the two are **level**: no difference established, which is not evidence of equality. The first condition
    controls the family-wise error over the queries; the second asks that the effect survive what the
    per-query test does not see (the randomness of anchors, first rounds, training and query splits).

    Parameters
    ----------
    p_adjusted : float or sequence of float
        Holm-adjusted p-value(s) of the per-query test(s); NaN counts as not significant.
    run_lo, run_hi : float
        Interval across independent runs of the challenger − baseline difference; NaN (fewer than 2 runs)
        cannot exclude 0.
    alpha : float
        Family-wise level, in (0, 1).

    Returns
    -------
    str
        One of :data:`VERDICTS`: ``"beats"``, ``"level"`` or ``"loses"``.

    Examples
    --------
    >>> verdict([0.001, 0.003], 0.02, 0.09), verdict(0.001, -0.01, 0.09), verdict(0.2, 0.02, 0.09)
    ('beats', 'level', 'level')
    >>> verdict(0.001, -0.09, -0.02)
    'loses'
    """
    if not isinstance(alpha, float) or not 0 < alpha < 1:
        raise ParameterError("alpha", "a float in (0, 1)", alpha, "verdict")
    ps = np.atleast_1d(np.asarray(p_adjusted, dtype=np.float64))
    if ps.size == 0 or not np.all(ps < alpha):  # NaN < alpha is False
        return "level"
    if run_lo > 0:
        return "beats"
    if run_hi < 0:
        return "loses"
    return "level"


def decide(family: pd.DataFrame, *, alpha: float = ALPHA, p_columns: Sequence[str] = ("p", "p_wilcoxon"),
           interval: tuple[str, str] = ("run_lo", "run_hi")) -> pd.DataFrame:
    """Apply :func:`verdict` to every row of a declared family of comparisons.

    Parameters
    ----------
    family : DataFrame
        One row per declared comparison (e.g. per (pair, budget, k) from :func:`compare_runs`), **all** of the
        family and nothing else: the Holm adjustment runs over its rows.
    alpha : float
        Family-wise level.
    p_columns : sequence of str
        The raw per-query p-values; each gets a ``<name>_holm`` column (:func:`holm` over the rows).
    interval : (str, str)
        Columns of the interval across runs.

    Returns
    -------
    DataFrame
        A copy with the ``*_holm`` columns and ``verdict`` (:data:`VERDICTS`).
    """
    owner = "decide"
    if not isinstance(family, pd.DataFrame) or not set(p_columns) | set(interval) <= set(family.columns):
        got = sorted(family.columns) if isinstance(family, pd.DataFrame) else type(family).__name__
        raise ParameterError("family", f"a DataFrame with columns {list(p_columns) + list(interval)}", got, owner)
    out = family.copy()
    holm_cols = [f"{c}_holm" for c in p_columns]
    for c, h in zip(p_columns, holm_cols):
        out[h] = holm(out[c].to_numpy(np.float64)) if len(out) else pd.Series(dtype=np.float64)
    out["verdict"] = [verdict([r[h] for h in holm_cols], r[interval[0]], r[interval[1]], alpha=alpha)
                      for _, r in out.iterrows()]
    return out
