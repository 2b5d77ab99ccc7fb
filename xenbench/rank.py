"""Rank analysis of CE score matrices: spectra, numerical and energy ranks, score skew, CUR grids.

ANNCUR (§2.6, §3.3, Table 3(b)) argues that a [CLS]-CE, whose per-query score distribution is strongly
skewed (a few items score high, Fig. 1(b)), yields a query-item score matrix of much higher rank than an
[EMB]-CE scoring a dot product of contextualized query/item embeddings, and that the lower rank makes
the CUR approximation of ANNCUR better at equal numbers of anchor queries k_q and anchor items k_i
(Fig. 6: Top-10-Recall, Fig. 8: approximation error). This module measures each link of that chain:

* :func:`singular_values`, :func:`numerical_rank` (NumPy's ``matrix_rank`` rule, the measure of
  Table 3(b)) and :func:`energy_rank` (how many singular values hold 90% / 99% of ‖M‖_F², a measure
  that does not depend on a tolerance and so not on the float precision of the scores);
* :func:`center_rows` and :func:`score_skew`: the zero-mean per-query score distributions of Fig. 1(b)
  and their skewness;
* :func:`cur_grid` and :func:`diagonal_spike`: ANNCUR's error and Top-k-Recall over a (k_q × k_i) grid
  with fixed held-out test queries, including the k_q = k_i ill-conditioning of §B.2.

Precision. Singular values are computed in float64 whatever the dtype of ``M``; the default rank
tolerance uses the machine epsilon of ``M``'s own dtype (the precision the scores were stored with), as
NumPy does. bf16 or fp16 noise in the scores inflates such a rank; the energy ranks are robust to it.

A constant offset matters. A per-query (or global) offset adds a large rank-1 component: it inflates
σ₁, hence NumPy's *relative* tolerance σ₁·max(m, n)·eps, and it can hold almost all of ‖M‖_F², so the
uncentered energy rank is 1. Neither changes any query's ranking of items. ``center="rows"`` removes
the per-query means (as Fig. 1(b) does for its histograms) before the analysis.

References
----------
.. [ANNCUR] Yadav, Monath, Angell, Zaheer, McCallum. "Efficient Nearest Neighbor Search for
   Cross-Encoder Models using Matrix Factorization", EMNLP 2022: §2.6 and Fig. 1(b) ([EMB]-CE, score
   distributions), §3.3 and Table 3(b) (numpy rank of the YuGiOh matrices: 315 [CLS] vs 45 [EMB]),
   Fig. 6 (Top-10-Recall over k_q × k_i), Fig. 8 (approximation error over k_q × k_i), §B.2
   (ill-conditioning at k_q = k_i).
.. [NumPy] ``numpy.linalg.matrix_rank``: default ``tol = S.max() * max(M.shape) * eps(M.dtype)``.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from xenbench.cur import pinv_rtol
from xenbench.errors import ParameterError
from xenbench.metrics import topk_indices

__all__ = [
    "center_rows",
    "cur_grid",
    "diagonal_spike",
    "energy_rank",
    "numerical_rank",
    "numpy_tolerance",
    "score_skew",
    "singular_values",
]

logger = logging.getLogger(__name__)

_CENTERS = (None, "rows", "both")


# ------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------
def _check_matrix(M: object, owner: str, name: str = "M") -> np.ndarray:
    M = np.asarray(M)
    if M.ndim != 2 or min(M.shape) < 1 or not np.issubdtype(M.dtype, np.floating):
        raise ParameterError(name, "a non-empty float array of shape (n_queries, n_items)",
                             f"{M.dtype} array of shape {M.shape}", owner)
    if not np.isfinite(M).all():
        raise ParameterError(name, "finite (no NaN or inf)", "an array with NaN or inf", owner)
    return M


def _check_int(value: object, name: str, lo: int, hi: int, owner: str, hi_name: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        bound = f"{hi_name}={hi}" if hi_name else f"{hi}"
        raise ParameterError(name, f"an int in [{lo}, {bound}]", value, owner)
    return int(value)


def _check_int_list(values: object, name: str, lo: int, hi: int, owner: str, hi_name: str) -> list[int]:
    expected = f"a non-empty list of distinct ints in [{lo}, {hi_name}={hi}]"
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)) or len(values) == 0:
        raise ParameterError(name, expected, values, owner)
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise ParameterError(name, expected, list(values), owner)
        out.append(int(v))
    if len(set(out)) != len(out):
        raise ParameterError(name, expected, list(values), owner)
    return out


def center_rows(M: np.ndarray, *, scale: bool = False) -> np.ndarray:
    """Per-query zero-mean scores M − mean_i M[q, i] (ANNCUR Fig. 1(b)), optionally divided by the row std.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Scores.
    scale : bool, default False
        Also divide every row by its standard deviation (z-scores), so that CEs whose scores live on
        different scales can be compared by the *shape* of their distributions. Constant rows stay 0.

    Returns
    -------
    Z : ndarray of shape (n_queries, n_items), float64
    """
    M = _check_matrix(M, "center_rows").astype(np.float64)
    Z = M - M.mean(axis=1, keepdims=True)
    if scale:
        std = Z.std(axis=1, keepdims=True)
        Z = np.divide(Z, std, out=np.zeros_like(Z), where=std > 0)
    return Z


def _centered(M: np.ndarray, center: str | None, owner: str) -> np.ndarray:
    if center not in _CENTERS:
        raise ParameterError("center", f"one of {list(_CENTERS)}", center, owner)
    M = M.astype(np.float64)
    if center == "rows":
        M = M - M.mean(axis=1, keepdims=True)
    elif center == "both":  # double centering: removes per-query and per-item offsets
        M = M - M.mean(axis=1, keepdims=True) - M.mean(axis=0, keepdims=True) + M.mean()
    return M


# ------------------------------------------------------------------------------------------------
# spectra and ranks
# ------------------------------------------------------------------------------------------------
def singular_values(M: np.ndarray, *, center: str | None = None) -> np.ndarray:
    """Singular values σ₁ ≥ σ₂ ≥ … of a score matrix, computed in float64.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Score matrix (any float dtype; it is converted to float64 before the SVD).
    center : {None, "rows", "both"}, default None
        None: M as is. "rows": subtract each query's mean score first (removes per-query offsets,
        which do not change any ranking but add a rank-1 component). "both": double centering (also
        removes per-item offsets).

    Returns
    -------
    s : ndarray of shape (min(n_queries, n_items),), float64
        Descending.

    Examples
    --------
    >>> singular_values(np.diag([3.0, 1.0])).tolist()
    [3.0, 1.0]
    """
    M = _centered(_check_matrix(M, "singular_values"), center, "singular_values")
    return np.linalg.svd(M, compute_uv=False)


def numpy_tolerance(M: np.ndarray, s: np.ndarray | None = None) -> float:
    """NumPy's default rank tolerance ``S.max() * max(M.shape) * eps(M.dtype)`` ([NumPy] matrix_rank).

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        The matrix whose rank is measured; its dtype sets eps (float32: 1.19e-7, float64: 2.22e-16).
    s : ndarray of shape (min(n_queries, n_items),), optional
        Its singular values, if already computed (:func:`singular_values`).

    Returns
    -------
    tol : float
    """
    M = _check_matrix(M, "numpy_tolerance")
    if s is None:
        s = singular_values(M)
    return float(np.max(s, initial=0.0) * max(M.shape) * np.finfo(M.dtype).eps)


def numerical_rank(M: np.ndarray, tol: float | None = None, *, s: np.ndarray | None = None) -> int:
    """Number of singular values above ``tol``: the measure of ANNCUR Table 3(b) ("rank using numpy").

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Score matrix.
    tol : float, optional
        Absolute threshold. Default: NumPy's ``S.max() * max(M.shape) * eps(M.dtype)``
        (:func:`numpy_tolerance`) -- relative to σ₁ and to the precision of ``M``'s dtype, so the same
        scores give a higher rank in float64 than in float32, and a large constant offset (which
        raises σ₁) lowers it.
    s : ndarray of shape (min(n_queries, n_items),), optional
        Precomputed singular values of ``M`` (float64, :func:`singular_values`), to avoid a second SVD.

    Returns
    -------
    rank : int
        Equal to ``np.linalg.matrix_rank(M)`` except possibly for singular values within float
        rounding of the threshold (NumPy runs the SVD in ``M``'s dtype, this function in float64).

    Examples
    --------
    >>> numerical_rank(np.outer([1.0, 2.0, 3.0], [1.0, 1.0]))
    1
    """
    M = _check_matrix(M, "numerical_rank")
    if s is None:
        s = singular_values(M)
    else:
        s = np.asarray(s, dtype=np.float64)
        if s.shape != (min(M.shape),):
            raise ParameterError("s", f"the singular values of M, shape ({min(M.shape)},)", f"shape {s.shape}",
                                 "numerical_rank")
    if tol is None:
        tol = numpy_tolerance(M, s)
    elif isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not tol >= 0:
        raise ParameterError("tol", "None or a float >= 0", tol, "numerical_rank")
    return int(np.count_nonzero(s > tol))


def energy_rank(s: np.ndarray, thresholds: Sequence[float] = (0.9, 0.99)) -> dict[float, int]:
    """Smallest r with Σ_{j≤r} σ_j² ≥ t · Σ_j σ_j², for every threshold t.

    The best rank-r approximation (Eckart-Young) leaves a relative squared Frobenius error of
    1 − t, so the energy rank at t = 0.99 is the rank needed for a 10% relative error
    ‖M − M_r‖_F / ‖M‖_F. Unlike :func:`numerical_rank` it needs no tolerance.

    Parameters
    ----------
    s : array of shape (n,)
        Singular values (any order, non-negative, not all zero).
    thresholds : sequence of float, default (0.9, 0.99)
        Energy fractions t in (0, 1].

    Returns
    -------
    ranks : dict
        ``{t: r}`` with 1 ≤ r ≤ n.

    Examples
    --------
    >>> energy_rank(np.array([3.0, 2.0, 1.0]), (0.5, 0.9, 1.0))  # energies 9, 4, 1 of 14
    {0.5: 1, 0.9: 2, 1.0: 3}
    """
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 1 or s.size == 0 or not np.isfinite(s).all() or (s < 0).any() or not (s > 0).any():
        raise ParameterError("s", "a 1-d array of non-negative finite singular values, not all zero",
                             f"array of shape {s.shape}", "energy_rank")
    if isinstance(thresholds, (str, bytes)) or not isinstance(thresholds, (Sequence, np.ndarray)) or not len(thresholds):
        raise ParameterError("thresholds", "a non-empty sequence of floats in (0, 1]", thresholds, "energy_rank")
    energy = np.cumsum(np.sort(s)[::-1] ** 2)
    out = {}
    for t in thresholds:
        if isinstance(t, bool) or not isinstance(t, (int, float, np.floating)) or not 0 < t <= 1:
            raise ParameterError("thresholds", "a non-empty sequence of floats in (0, 1]", list(thresholds),
                                 "energy_rank")
        # Relative slack of a few ulps so that t = 1.0 (or an exact boundary) survives cumsum rounding.
        r = int(np.searchsorted(energy, t * energy[-1] * (1 - 8 * np.finfo(np.float64).eps), side="left")) + 1
        out[float(t)] = min(r, s.size)
    return out


def score_skew(M: np.ndarray) -> np.ndarray:
    """Skewness of every query's score distribution over the items (ANNCUR §2.6, Fig. 1(b)).

    ANNCUR describes the [CLS]-CE's scores as "significantly skewed with only a small fraction of
    items getting high scores": a long right tail of each query's scores. This is measured by the
    sample skewness (Fisher-Pearson, g₁ = m₃ / m₂^{3/2}, the biased estimator of
    ``scipy.stats.skew``) of each row; it is invariant to the per-query shift and scale, so the
    zero-mean adjustment of Fig. 1(b) and the CE's score scale do not change it. A symmetric
    distribution gives 0, a right tail > 0.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Scores.

    Returns
    -------
    skew : ndarray of shape (n_queries,), float64
        NaN for a query whose scores are all equal.

    Examples
    --------
    >>> score_skew(np.array([[0.0, 0.0, 0.0, 4.0], [1.0, 2.0, 3.0, 4.0]])).round(3).tolist()
    [1.155, 0.0]
    """
    Z = center_rows(M)
    m2 = (Z ** 2).mean(axis=1)
    m3 = (Z ** 3).mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m2 > 0, m3 / np.where(m2 > 0, m2, 1.0) ** 1.5, np.nan)


# ------------------------------------------------------------------------------------------------
# ANNCUR over a (k_q × k_i) grid
# ------------------------------------------------------------------------------------------------
def _recall_at_budget(M_hat: np.ndarray, T: np.ndarray, anchors: np.ndarray, budget: int, k: int) -> float:
    """Top-k-Recall of anncur_with_budget: anchors (scored, free to re-rank) + top B_CE − k_i others by ŝ."""
    nq = M_hat.shape[0]
    found = T[:, anchors].sum(axis=1)
    if budget > anchors.size:
        keys = M_hat.copy()
        keys[:, anchors] = -np.inf  # never re-retrieve an anchor
        extra = topk_indices(keys, budget - anchors.size)
        found = found + np.take_along_axis(T, extra, axis=1).sum(axis=1)
    return float(found.sum() / (nq * k))


def cur_grid(
    M: np.ndarray,
    k_q_values: Sequence[int],
    k_i_values: Sequence[int],
    *,
    n_test: int,
    seed: int = 0,
    budget: int | None = None,
    k: int = 10,
) -> pd.DataFrame:
    """ANNCUR's approximation error and Top-k-Recall@B_CE for every (k_q, k_i) ([ANNCUR] Fig. 6, 8).

    One seeded permutation of the queries fixes the ``n_test`` held-out test queries (the same for
    every cell) and the order in which the other queries become anchor queries: Q_anc = the first k_q
    of that order. One seeded permutation of the items gives the anchor items: I_anc = its first k_i.
    Both are nested (a larger grid cell extends a smaller one), which keeps neighbouring cells
    comparable; two matrices of the same shape get the same anchors and test queries for the same
    seed, so two CEs are compared "for the same choice of anchor queries and anchor items" (§3.3).

    Every cell computes what :class:`~xenbench.cur.AnnCur` fitted on R_anc = M[Q_anc] with anchor
    items I_anc computes (U = pinv(R_anc[:, I_anc]) with the same cut-off, ŝ = f(q, I_anc) · U · R_anc
    for the test queries), and, with a budget, the Top-k-Recall of
    :func:`~xenbench.adacur.anncur_with_budget` (k_i anchor calls, then the B_CE − k_i non-anchor items
    with the highest ŝ; anchors re-ranked for free). It does so from one SVD of R_anc[:, I_anc] per
    cell, which also gives the condition number, and without a BudgetCounter; the tests check that
    it agrees with the AnnCur / anncur_with_budget path.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores of a domain (converted to float64).
    k_q_values : sequence of int
        Numbers of anchor queries k_q, each in [1, n_queries − n_test], distinct.
    k_i_values : sequence of int
        Numbers of anchor items k_i, each in [1, n_items], distinct.
    n_test : int
        Number of held-out test queries, in [1, n_queries − 1].
    seed : int, default 0
        Seed of both permutations.
    budget : int, optional
        B_CE, CE calls per test query for the recall column; cells with k_i > B_CE get NaN recall.
        None: no recall column.
    k : int, default 10
        Size of the exact top-k of Top-k-Recall@B_CE.

    Returns
    -------
    grid : DataFrame
        One row per (k_q, k_i), in the order of the arguments, with columns

        ``k_q``, ``k_i``: the cell;
        ``diagonal``: k_q == k_i (R_anc[:, I_anc] square, §B.2);
        ``error``: ‖M_test − M̃_test‖_F / ‖M_test‖_F (§B.1, Fig. 8);
        ``error_centered``: ‖M_test − M̃_test‖_F / ‖M_test − row means‖_F, the same error relative
        to the per-query variation of the scores (a large per-query offset, which ranks nothing,
        makes ``error`` look small);
        ``cond``: condition number σ_max / σ_min of R_anc[:, I_anc] (inf if singular);
        ``recall``: Top-k-Recall@B_CE on the test queries, in [0, 1] (only with a budget).

    Raises
    ------
    ParameterError
        Out-of-range or repeated k values, ``n_test``, ``budget``, ``k`` or ``seed``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> M = rng.standard_normal((60, 3)) @ rng.standard_normal((3, 80))  # rank 3
    >>> g = cur_grid(M, [5, 10], [4, 8], n_test=20, budget=20, k=5)
    >>> bool((g["error"] < 1e-8).all()), g["recall"].tolist()
    (True, [1.0, 1.0, 1.0, 1.0])
    """
    owner = "cur_grid"
    M = _check_matrix(M, owner).astype(np.float64)
    n_queries, n_items = M.shape
    if n_queries < 2:
        raise ParameterError("M", "a matrix with at least 2 queries (anchor and test)", f"shape {M.shape}", owner)
    n_test = _check_int(n_test, "n_test", 1, n_queries - 1, owner, "n_queries - 1")
    n_pool = n_queries - n_test
    k_qs = _check_int_list(k_q_values, "k_q_values", 1, n_pool, owner, "n_queries - n_test")
    k_is = _check_int_list(k_i_values, "k_i_values", 1, n_items, owner, "n_items")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError("seed", "a non-negative int", seed, owner)
    k = _check_int(k, "k", 1, n_items, owner, "n_items")
    if budget is not None:
        budget = _check_int(budget, "budget", 1, n_items, owner, "n_items")

    rng = np.random.default_rng(seed)
    query_order = rng.permutation(n_queries)
    test_rows = np.sort(query_order[:n_test])
    pool = query_order[n_test:]  # anchor queries Q_anc = pool[:k_q]
    item_order = rng.permutation(n_items)  # anchor items I_anc = item_order[:k_i]

    M_test = M[test_rows]
    norm = np.linalg.norm(M_test)
    norm_centered = np.linalg.norm(M_test - M_test.mean(axis=1, keepdims=True))
    if norm == 0:
        raise ParameterError("M", "test queries with a non-zero Frobenius norm", "all-zero test rows", owner)

    if budget is not None:
        T = np.zeros(M_test.shape, dtype=bool)  # exact top-k of every test query
        np.put_along_axis(T, topk_indices(M_test, k), True, axis=1)

    rows = []
    for k_q in k_qs:
        R_anc = M[pool[:k_q]]  # (k_q, n_items)
        for k_i in k_is:
            anchors = item_order[:k_i]
            intersection = R_anc[:, anchors]  # R_anc[:, I_anc], (k_q, k_i)
            # One SVD gives both U = pinv(R_anc[:, I_anc]) (same cut-off as AnnCur.fit) and the
            # condition number; tests check that this path equals AnnCur + anncur_with_budget.
            u, sv, vt = np.linalg.svd(intersection, full_matrices=False)
            keep = sv > pinv_rtol(intersection.shape) * sv[0]
            C_test = M_test[:, anchors]  # e_q = f(q, I_anc), (n_test, k_i)
            weights = ((C_test @ vt[keep].T) / sv[keep]) @ u[:, keep].T  # C_test · U, (n_test, k_q)
            M_hat = weights @ R_anc  # ŝ for all items, (n_test, n_items)
            diff = np.linalg.norm(M_test - M_hat)
            row = {
                "k_q": k_q, "k_i": k_i, "diagonal": k_q == k_i,
                "error": float(diff / norm),
                "error_centered": float(diff / norm_centered) if norm_centered > 0 else float("inf"),
                "cond": float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf"),
            }
            if budget is not None:
                row["recall"] = _recall_at_budget(M_hat, T, anchors, budget, k) if k_i <= budget else float("nan")
            rows.append(row)
    return pd.DataFrame(rows)


def diagonal_spike(grid: pd.DataFrame, value: str = "error") -> pd.DataFrame:
    """Compare each k_q = k_i cell of a :func:`cur_grid` with its neighbours in the same k_q row.

    ANNCUR §B.2: the error spikes (and recall drops) when R_anc[:, I_anc] is square. For every k_q
    that is also one of the k_i values, this reports the value on the diagonal, at the nearest
    smaller and larger k_i of the grid, and the ratio of the diagonal value to the better-behaved
    of its two neighbours (for ``error``/``error_centered``/``cond``: the larger neighbour, so a
    ratio > 1 means the diagonal is worse than both; for ``recall``: the smaller neighbour, ratio < 1
    means worse than both).

    Parameters
    ----------
    grid : DataFrame
        Output of :func:`cur_grid` (columns ``k_q``, ``k_i`` and ``value``).
    value : str, default "error"
        Column to compare.

    Returns
    -------
    spikes : DataFrame
        Columns ``k_q``, ``diagonal``, ``below`` (value at the next smaller k_i, NaN if none),
        ``above`` (next larger k_i), ``ratio``.
    """
    if not isinstance(grid, pd.DataFrame) or not {"k_q", "k_i"} <= set(grid.columns):
        raise ParameterError("grid", "a DataFrame from cur_grid (columns k_q, k_i, ...)", type(grid).__name__,
                             "diagonal_spike")
    if value not in grid.columns:
        raise ParameterError("value", f"a column of grid, one of {sorted(set(grid.columns) - {'k_q', 'k_i'})}",
                             value, "diagonal_spike")
    higher_is_better = value == "recall"
    out = []
    for k_q, part in grid.groupby("k_q", sort=True):
        part = part.sort_values("k_i")
        k_i = part["k_i"].to_numpy()
        vals = part[value].to_numpy(dtype=np.float64)
        if k_q not in k_i:
            continue
        j = int(np.flatnonzero(k_i == k_q)[0])
        below = vals[j - 1] if j > 0 else np.nan
        above = vals[j + 1] if j + 1 < len(vals) else np.nan
        neighbours = np.array([below, above])
        neighbours = neighbours[np.isfinite(neighbours)]
        if neighbours.size == 0:
            ref = np.nan
        else:
            ref = neighbours.min() if higher_is_better else neighbours.max()
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = vals[j] / ref if np.isfinite(ref) else np.nan
        out.append({"k_q": int(k_q), "diagonal": vals[j], "below": below, "above": above, "ratio": float(ratio)})
    return pd.DataFrame(out, columns=["k_q", "diagonal", "below", "above", "ratio"])
