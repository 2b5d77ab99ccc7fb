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
  with fixed held-out test queries, including the k_q = k_i ill-conditioning of §B.2;
* comparing CEs (notebook 02), on ``{ce: M}`` mappings: :func:`load_matrices` (stores that must agree
  on ids), :func:`matrix_summary`, :func:`rank_table`, :func:`skew_table`, :func:`cur_grids`,
  :func:`diagonal_spikes`, :func:`emb_wins`, :func:`rank_orderings` (which CE each rank rule puts lower) and
  :func:`paired_sign_test`. The conclusions built from them live in :mod:`xenbench.studies.findings.rank`.

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
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from xenbench._validation import NP_REAL_TYPES, check_array, check_float, check_int, check_seed, is_float, is_int
from xenbench.methods.cur import PINV_RULES, pinv_cutoff, rerank_candidates
from xenbench.errors import DataError, ParameterError
from xenbench.metrics import topk_indices
from xenbench.sampling import sample_rows
from xenbench.studies.stats import center_rows, score_skew  # one centering and skew convention, re-exported

__all__ = [
    "center_rows",
    "cur_grid",
    "cur_grids",
    "available_ces",
    "ce_layouts",
    "paired_sign_test",
    "rank_orderings",
    "diagonal_spike",
    "diagonal_spikes",
    "emb_wins",
    "energy_label",
    "energy_rank",
    "load_matrices",
    "lowest",
    "matrix_summary",
    "numerical_rank",
    "numpy_relative_tolerance",
    "numpy_tolerance",
    "offdiagonal_summary",
    "per_ce",
    "rank_table",
    "score_skew",
    "singular_values",
    "skew_table",
    "spike_summary",
    "store_attrs",
]

logger = logging.getLogger(__name__)

_CENTERS = (None, "rows", "both")


# ------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------
def _check_matrix(M: object, owner: str, name: str = "M") -> np.ndarray:
    return check_array(M, name, owner, expected="a non-empty float array of shape (n_queries, n_items)",
                       finite_expected="finite (no NaN or inf)")


def _check_int_list(values: object, name: str, lo: int, hi: int, owner: str, hi_name: str) -> list[int]:
    expected = f"a non-empty list of distinct ints in [{lo}, {hi_name}={hi}]"
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)) or len(values) == 0:
        raise ParameterError(name, expected, values, owner)
    out = []
    for v in values:
        if not is_int(v, lo, hi):
            raise ParameterError(name, expected, list(values), owner)
        out.append(int(v))
    if len(set(out)) != len(out):
        raise ParameterError(name, expected, list(values), owner)
    return out


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
    else:
        check_float(tol, "tol", 0, None, "numerical_rank", types=NP_REAL_TYPES, expected="None or a float >= 0")
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
        if not is_float(t, 0, 1, closed="right", types=NP_REAL_TYPES):
            raise ParameterError("thresholds", "a non-empty sequence of floats in (0, 1]", list(thresholds),
                                 "energy_rank")
        # Relative slack of a few ulps so that t = 1.0 (or an exact boundary) survives cumsum rounding.
        r = int(np.searchsorted(energy, t * energy[-1] * (1 - 8 * np.finfo(np.float64).eps), side="left")) + 1
        out[float(t)] = min(r, s.size)
    return out


# ------------------------------------------------------------------------------------------------
# ANNCUR over a (k_q × k_i) grid
# ------------------------------------------------------------------------------------------------
def _found(T: np.ndarray, items: np.ndarray, k: int) -> float:
    """Top-k-Recall of ranking ``items`` (nq, n) by exact score: the share of each exact top-k (``T``) among them."""
    return float(np.take_along_axis(T, items, axis=1).sum() / (T.shape[0] * k))


def cur_grid(
    M: np.ndarray,
    k_q_values: Sequence[int],
    k_i_values: Sequence[int],
    *,
    n_test: int,
    seed: int = 0,
    budget: int | None = None,
    m: int | None = None,
    k: int = 10,
    pinv_rules: Sequence[str] = ("cutoff",),
) -> pd.DataFrame:
    """ANNCUR's approximation error and Top-k-Recall for every (k_q, k_i) and pinv rule ([ANNCUR] Fig. 6, 8).

    One seeded permutation of the queries fixes the ``n_test`` held-out test queries (the same for
    every cell) and the order in which the other queries become anchor queries: Q_anc = the first k_q
    of that order. One seeded permutation of the items gives the anchor items: I_anc = its first k_i.
    Both are nested (a larger grid cell extends a smaller one), which keeps neighbouring cells
    comparable; two matrices of the same shape get the same anchors and test queries for the same
    seed, so two CEs are compared "for the same choice of anchor queries and anchor items" (§3.3).

    Every cell computes what :class:`~xenbench.methods.cur.AnnCur` ``(k_i, pinv=rule)`` fitted on R_anc = M[Q_anc]
    with anchor items I_anc computes (U = pinv(R_anc[:, I_anc]) with the rule's cut-off,
    :data:`~xenbench.methods.cur.PINV_RULES`; ŝ = f(q, I_anc) · U · R_anc for the test queries), and two recalls:

    * the paper's **Top-k-Recall@m** ([ANNCUR] Fig. 6, and the authors' code): the m items with the highest ŝ over
      all items are retrieved and re-ranked exactly; the k_i anchor calls are not counted in m;
    * **Top-k-Recall at a budget of B_CE CE calls**, of :func:`~xenbench.methods.baselines.anncur_with_budget`: k_i
      anchor calls, then the B_CE − k_i non-anchor items with the highest ŝ, anchors re-ranked for free (the
      "free anchors" rule, :data:`~xenbench.methods.cur.BUDGET_RULES`).

    It does so from one SVD of R_anc[:, I_anc] per cell, which also gives the condition number, and without a
    BudgetCounter; the tests check that it agrees with the AnnCur / anncur_with_budget path.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores of a domain (converted to float64; its dtype sets the "cutoff" rule's precision).
    k_q_values : sequence of int
        Numbers of anchor queries k_q, each in [1, n_queries − n_test], distinct.
    k_i_values : sequence of int
        Numbers of anchor items k_i, each in [1, n_items], distinct.
    n_test : int
        Number of held-out test queries, in [1, n_queries − 1].
    seed : int, default 0
        Seed of both permutations.
    budget : int, optional
        B_CE, CE calls per test query for ``recall_at_budget``; cells with k_i > B_CE get NaN. None: no such column.
    m : int, optional
        Items retrieved for ``recall_at_m``, in [1, n_items]. None: no such column.
    k : int, default 10
        Size of the exact top-k of both recalls.
    pinv_rules : sequence of str, default ("cutoff",)
        Pinv rules of :data:`~xenbench.methods.cur.PINV_RULES`, distinct; every cell is computed under each.

    Returns
    -------
    grid : DataFrame
        One row per (pinv rule, k_q, k_i), in the order of the arguments, with columns

        ``pinv``: the rule; ``k_q``, ``k_i``: the cell;
        ``diagonal``: k_q == k_i (R_anc[:, I_anc] square, §B.2);
        ``error``: ‖M_test − M̃_test‖_F / ‖M_test‖_F (§B.1, Fig. 8);
        ``error_centered``: ‖M_test − M̃_test‖_F / ‖M_test − row means‖_F, the same error relative
        to the per-query variation of the scores (a large per-query offset, which ranks nothing,
        makes ``error`` look small);
        ``cond``: condition number σ_max / σ_min of R_anc[:, I_anc] (inf if singular);
        ``recall_at_m``: the paper's Top-k-Recall@m on the test queries, in [0, 1] (only with ``m``);
        ``recall_at_budget``: Top-k-Recall at B_CE CE calls, in [0, 1] (only with ``budget``).

    Raises
    ------
    ParameterError
        Out-of-range or repeated k values, ``n_test``, ``budget``, ``m``, ``k``, ``seed`` or an unknown pinv rule.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> M = rng.standard_normal((60, 3)) @ rng.standard_normal((3, 80))  # rank 3
    >>> g = cur_grid(M, [5, 10], [4, 8], n_test=20, budget=20, m=10, k=5)
    >>> bool((g["error"] < 1e-8).all()), g["recall_at_budget"].tolist(), g["recall_at_m"].tolist()
    (True, [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    """
    owner = "cur_grid"
    stored = _check_matrix(M, owner)
    score_dtype = stored.dtype if np.issubdtype(stored.dtype, np.floating) else np.dtype(np.float64)
    M = stored.astype(np.float64)
    n_queries, n_items = M.shape
    if n_queries < 2:
        raise ParameterError("M", "a matrix with at least 2 queries (anchor and test)", f"shape {M.shape}", owner)
    n_test = check_int(n_test, "n_test", 1, n_queries - 1, owner, f"n_queries - 1={n_queries - 1}")
    n_pool = n_queries - n_test
    k_qs = _check_int_list(k_q_values, "k_q_values", 1, n_pool, owner, "n_queries - n_test")
    k_is = _check_int_list(k_i_values, "k_i_values", 1, n_items, owner, "n_items")
    check_seed(seed, owner)
    k = check_int(k, "k", 1, n_items, owner, f"n_items={n_items}")
    if budget is not None:
        budget = check_int(budget, "budget", 1, n_items, owner, f"n_items={n_items}")
    if m is not None:
        m = check_int(m, "m", 1, n_items, owner, f"n_items={n_items}")
    rules = list(pinv_rules) if isinstance(pinv_rules, (list, tuple)) else []
    if not rules or len(set(rules)) != len(rules) or any(r not in PINV_RULES for r in rules):
        raise ParameterError("pinv_rules", f"a non-empty list of distinct rules of {list(PINV_RULES)}", pinv_rules,
                             owner)

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
    T = np.zeros(M_test.shape, dtype=bool)  # exact top-k of every test query
    np.put_along_axis(T, topk_indices(M_test, k), True, axis=1)

    rows = []
    for rule in rules:
        for k_q in k_qs:
            R_anc = M[pool[:k_q]]  # (k_q, n_items)
            for k_i in k_is:
                anchors = item_order[:k_i]
                intersection = R_anc[:, anchors]  # R_anc[:, I_anc], (k_q, k_i)
                # One SVD gives both U = pinv(R_anc[:, I_anc]) (the cut-off of AnnCur(pinv=rule).fit) and the
                # condition number; tests check that this path equals AnnCur + anncur_with_budget.
                u, sv, vt = np.linalg.svd(intersection, full_matrices=False)
                keep = sv > pinv_cutoff(intersection.shape, score_dtype, rule) * sv[0]
                C_test = M_test[:, anchors]  # e_q = f(q, I_anc), (n_test, k_i)
                weights = ((C_test @ vt[keep].T) / sv[keep]) @ u[:, keep].T  # C_test · U, (n_test, k_q)
                M_hat = weights @ R_anc  # ŝ for all items, (n_test, n_items)
                diff = np.linalg.norm(M_test - M_hat)
                row = {
                    "pinv": rule, "k_q": k_q, "k_i": k_i, "diagonal": k_q == k_i,
                    "error": float(diff / norm),
                    "error_centered": float(diff / norm_centered) if norm_centered > 0 else float("inf"),
                    "cond": float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf"),
                }
                if m is not None:
                    row["recall_at_m"] = _found(T, topk_indices(M_hat, m), k)
                if budget is not None:
                    row["recall_at_budget"] = (_found(T, rerank_candidates(M_hat, anchors, budget), k)
                                               if k_i <= budget else float("nan"))
                rows.append(row)
    return pd.DataFrame(rows)


def diagonal_spike(grid: pd.DataFrame, value: str = "error") -> pd.DataFrame:
    """Compare each k_q = k_i cell of a :func:`cur_grid` with its neighbours in the same k_q row.

    ANNCUR §B.2: the error spikes (and recall drops) when R_anc[:, I_anc] is square. For every k_q
    that is also one of the k_i values, this reports the value on the diagonal, at the nearest
    smaller and larger k_i of the grid, and the ratio of the diagonal value to the better-behaved
    of its two neighbours (for ``error``/``error_centered``/``cond``: the larger neighbour, so a
    ratio > 1 means the diagonal is worse than both; for a recall column: the smaller neighbour, ratio < 1
    means worse than both).

    Parameters
    ----------
    grid : DataFrame
        Output of :func:`cur_grid` for one pinv rule (columns ``k_q``, ``k_i`` and ``value``).
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
    if "pinv" in grid.columns and grid["pinv"].nunique() > 1:
        raise ParameterError("grid", "the cells of one pinv rule (select grid[grid['pinv'] == rule])",
                             f"rules {list(grid['pinv'].unique())}", "diagonal_spike")
    higher_is_better = value.startswith("recall")
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


# ------------------------------------------------------------------------------------------------
# comparing CEs: one score matrix per CE, keyed by the CE's store name (notebook 02)
# ------------------------------------------------------------------------------------------------
# Labels of the rank table (rank_table); the results JSON of notebook 02 is keyed by them.
NUMPY_RANK = "numpy rank (tol = σ₁·max(m,n)·eps32)"
NUMPY_RANK_F64 = "numpy rank, if the scores were float64"
NUMPY_RANK_CENTERED = "numpy rank, row-centered"
TOP_SHARE = "σ₁²/‖M‖² (share of the top component)"


def energy_label(t: float, *, centered: bool = False) -> str:
    """Column label of the energy rank at threshold ``t`` in :func:`rank_table`.

    Examples
    --------
    >>> energy_label(0.99, centered=True)
    'energy rank 99%, row-centered'
    """
    return f"energy rank {t:.0%}" + (", row-centered" if centered else "")


def _check_matrices(matrices: object, owner: str, min_count: int = 1) -> dict[str, np.ndarray]:
    if not isinstance(matrices, Mapping) or len(matrices) < min_count:
        raise ParameterError("matrices", f"a mapping of at least {min_count} CE names to score matrices",
                             type(matrices).__name__, owner)
    return {str(ce): _check_matrix(m, owner, f"matrices[{ce!r}]") for ce, m in matrices.items()}


def load_matrices(
    scores_dir: str | os.PathLike[str],
    ces: Sequence[str],
    *,
    max_queries: int | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Read the score matrix of every CE from ``scores_dir/<ce>`` (a :class:`~xenbench.data.store.ScoreStore`).

    All stores must score the same queries and items in the same order (their ``query_ids`` and
    ``item_ids`` attributes are compared with the first store's), so that the CEs are compared on
    the same pairs.

    Parameters
    ----------
    scores_dir : path
        Folder holding one complete score store per CE.
    ces : sequence of str
        Store names (sub-folders of ``scores_dir``), at least one; the result keeps this order.
    max_queries : int, optional
        Keep a seeded random subsample of this many queries (rows, in their original order), the same
        rows for every CE. None, or a value >= the number of queries: all rows.
    seed : int, default 0
        Seed of the subsample (:func:`xenbench.sampling.sample_rows`, kind ``"queries"``).

    Returns
    -------
    matrices : dict of str to ndarray of shape (n_queries, n_items)
        ``{ce: scores}`` in the stores' dtype (float32).

    Raises
    ------
    DataError
        A store does not score the same queries and items in the same order as the first one (or
        cannot be read, see :meth:`~xenbench.data.store.ScoreStore.open`).
    ParameterError
        Empty or repeated ``ces``, ``max_queries`` < 1, negative ``seed``.
    """
    from xenbench.data.store import ScoreStore  # lazy: xenbench.studies.rank needs no zarr until stores are read

    owner = "load_matrices"
    if isinstance(ces, (str, bytes)) or not isinstance(ces, Sequence) or not ces or len(set(ces)) != len(ces):
        raise ParameterError("ces", "a non-empty sequence of distinct store names", ces, owner)
    check_int(max_queries, "max_queries", 1, None, owner, allow_none=True)
    check_seed(seed, owner)
    stores = {ce: ScoreStore.open(Path(scores_dir) / ce) for ce in ces}
    first = ces[0]
    ids = (stores[first].attrs.get("query_ids"), stores[first].attrs.get("item_ids"))
    for ce, store in stores.items():
        if (store.attrs.get("query_ids"), store.attrs.get("item_ids")) != ids:
            raise DataError(store.path, f"{ce} and {first} do not score the same queries and items in the same order")
    matrices = {ce: store.to_numpy() for ce, store in stores.items()}
    n_all = matrices[first].shape[0]
    if max_queries is not None and max_queries < n_all:
        rows = sample_rows(n_all, max_queries, seed, kind="queries")
        matrices = {ce: m[rows] for ce, m in matrices.items()}
    return matrices


def store_attrs(scores_dir: str | os.PathLike[str], ces: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The manifest (attributes) of every CE's score store ``scores_dir/<ce>``, for :func:`matrix_summary`.

    Parameters
    ----------
    scores_dir : path
        Folder holding one score store per CE.
    ces : sequence of str
        Store names.

    Returns
    -------
    attrs : dict of str to dict
        ``{ce: ScoreStore.open(scores_dir / ce).attrs}``.
    """
    from xenbench.data.store import ScoreStore

    return {ce: ScoreStore.open(Path(scores_dir) / ce).attrs for ce in ces}


def matrix_summary(
    matrices: Mapping[str, np.ndarray], attrs: Mapping[str, Mapping[str, Any]] | None = None
) -> pd.DataFrame:
    """One row per CE: model kind, precision, dtype, shape and score statistics of its matrix.

    Parameters
    ----------
    matrices : mapping of str to ndarray of shape (n_queries, n_items)
        ``{ce: scores}`` (:func:`load_matrices`).
    attrs : mapping of str to mapping, optional
        ``{ce: store attributes}`` (:func:`store_attrs`); gives the "model kind"
        (``attrs["model_config"]["kind"]``) and "precision" columns, None where missing.

    Returns
    -------
    summary : DataFrame
        Index: the CEs. Columns ``model kind``, ``precision``, ``dtype``, ``queries``, ``items``,
        ``mean score``, ``std of scores`` (over all pairs), ``mean per-query std`` (mean over queries
        of the std of the query's scores).
    """
    matrices = _check_matrices(matrices, "matrix_summary")
    attrs = attrs or {}
    return pd.DataFrame({
        ce: {"model kind": attrs.get(ce, {}).get("model_config", {}).get("kind"),
             "precision": attrs.get(ce, {}).get("precision"), "dtype": str(m.dtype),
             "queries": m.shape[0], "items": m.shape[1], "mean score": float(m.mean()),
             "std of scores": float(m.std()), "mean per-query std": float(m.std(axis=1).mean())}
        for ce, m in matrices.items()
    }).T


def per_ce(func: Callable[..., Any], matrices: Mapping[str, np.ndarray], **kwargs: Any) -> dict[str, Any]:
    """Apply ``func(M, **kwargs)`` to every CE's matrix.

    Parameters
    ----------
    func : callable
        E.g. :func:`singular_values`, :func:`score_skew`, :func:`center_rows`.
    matrices : mapping of str to ndarray
        ``{ce: scores}``.
    **kwargs
        Passed to ``func``.

    Returns
    -------
    results : dict
        ``{ce: func(matrices[ce], **kwargs)}``, in the order of ``matrices``.

    Examples
    --------
    >>> per_ce(singular_values, {"a": np.diag([2.0, 1.0])})["a"].tolist()
    [2.0, 1.0]
    """
    from tqdm.auto import tqdm

    # A bar per CE: one SVD of a 1001 x 2964 matrix takes seconds.
    return {ce: func(m, **kwargs) for ce, m in tqdm(matrices.items(), desc=getattr(func, "__name__", "per CE"),
                                                     total=len(matrices), disable=len(matrices) < 2)}


def numpy_relative_tolerance(M: np.ndarray) -> float:
    """NumPy's default rank tolerance relative to σ₁: ``max(M.shape) * eps(M.dtype)``.

    Examples
    --------
    >>> bool(numpy_relative_tolerance(np.zeros((3, 4))) == 4 * np.finfo(np.float64).eps)
    True
    """
    M = _check_matrix(M, "numpy_relative_tolerance")
    return float(max(M.shape) * np.finfo(M.dtype).eps)


def rank_table(
    matrices: Mapping[str, np.ndarray],
    thresholds: Sequence[float] = (0.9, 0.99),
    *,
    s: Mapping[str, np.ndarray] | None = None,
    s_centered: Mapping[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Numerical and energy ranks of every CE's score matrix, as stored and row-centered.

    Parameters
    ----------
    matrices : mapping of str to ndarray of shape (n_queries, n_items)
        ``{ce: scores}``.
    thresholds : sequence of float, default (0.9, 0.99)
        Energy fractions of :func:`energy_rank`.
    s, s_centered : mapping of str to ndarray, optional
        Precomputed singular values of every matrix, as is and with ``center="rows"``
        (``per_ce(singular_values, matrices)``), to avoid repeating the SVDs.

    Returns
    -------
    ranks : DataFrame
        One row per CE (index) with columns :data:`NUMPY_RANK` (NumPy's rule at the matrix's own
        dtype), :data:`NUMPY_RANK_F64` (the same singular values against a float64 tolerance),
        :data:`NUMPY_RANK_CENTERED` (row-centered singular values, tolerance of the dtype),
        :data:`TOP_SHARE` (σ₁² / Σσ²), then ``energy_label(t)`` for every t and
        ``energy_label(t, centered=True)`` for every t.

    Examples
    --------
    >>> M = np.array([[3.0, 0.0], [0.0, 1.0]])  # σ = 3, 1: energies 9, 1 of 10
    >>> rank_table({"a": M}).loc["a", ["energy rank 90%", "energy rank 99%"]].tolist()
    [1, 2]
    """
    matrices = _check_matrices(matrices, "rank_table")
    s = dict(s) if s is not None else per_ce(singular_values, matrices)
    s_centered = dict(s_centered) if s_centered is not None else per_ce(singular_values, matrices, center="rows")
    ranks = {}
    for ce, m in matrices.items():
        energy, energy_c = energy_rank(s[ce], thresholds), energy_rank(s_centered[ce], thresholds)
        ranks[ce] = {
            NUMPY_RANK: numerical_rank(m, s=s[ce]),
            NUMPY_RANK_F64: numerical_rank(m.astype(np.float64), s=s[ce]),
            NUMPY_RANK_CENTERED: numerical_rank(m, s=s_centered[ce]),
            TOP_SHARE: float(s[ce][0] ** 2 / np.sum(s[ce] ** 2)),
            **{energy_label(t): r for t, r in energy.items()},
            **{energy_label(t, centered=True): r for t, r in energy_c.items()},
        }
    return pd.DataFrame.from_dict(ranks, orient="index")


def _rank_column(ranks_table: pd.DataFrame, column: str, owner: str) -> dict[str, int]:
    if not isinstance(ranks_table, pd.DataFrame) or column not in ranks_table.columns or len(ranks_table) < 2:
        raise ParameterError("ranks_table", f"a rank_table of at least 2 CEs with column {column!r}",
                             type(ranks_table).__name__, owner)
    return {str(ce): int(v) for ce, v in ranks_table[column].items()}


def skew_table(matrices: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Skewness of the per-query score distributions and the share of far-right-tail pairs, per CE.

    Parameters
    ----------
    matrices : mapping of str to ndarray of shape (n_queries, n_items)
        ``{ce: scores}``.

    Returns
    -------
    skew : DataFrame
        One row per CE with columns ``median skewness`` and ``mean skewness`` (of :func:`score_skew`
        over queries, NaNs of constant rows ignored) and ``share of pairs > 5 sd above the query
        mean`` / ``> 10 sd`` (of the z-scores ``center_rows(M, scale=True)``).

    Examples
    --------
    >>> t = skew_table({"a": np.array([[0.0, 0.0, 0.0, 4.0], [1.0, 2.0, 3.0, 4.0]])})
    >>> round(float(t.loc["a", "mean skewness"]), 4), float(t.loc["a", "share of pairs > 5 sd above the query mean"])
    (0.5774, 0.0)
    """
    matrices = _check_matrices(matrices, "skew_table")
    skew, z = per_ce(score_skew, matrices), per_ce(center_rows, matrices, scale=True)
    return pd.DataFrame({
        ce: {"median skewness": float(np.nanmedian(skew[ce])), "mean skewness": float(np.nanmean(skew[ce])),
             "share of pairs > 5 sd above the query mean": float((z[ce] > 5).mean()),
             "share of pairs > 10 sd above the query mean": float((z[ce] > 10).mean())}
        for ce in matrices
    }).T


def cur_grids(matrices: Mapping[str, np.ndarray], k_q_values: Sequence[int], k_i_values: Sequence[int],
              **kwargs: Any) -> pd.DataFrame:
    """:func:`cur_grid` of every CE's matrix, stacked, with a ``ce`` column.

    Parameters
    ----------
    matrices : mapping of str to ndarray of shape (n_queries, n_items)
        ``{ce: scores}``, all of the same shape (so the same seed gives every CE the same test queries
        and anchors).
    k_q_values, k_i_values : sequence of int
        The grid (see :func:`cur_grid`).
    **kwargs
        ``n_test``, ``seed``, ``budget``, ``k`` of :func:`cur_grid`.

    Returns
    -------
    grid : DataFrame
        The columns of :func:`cur_grid` plus ``ce``; the CEs in the order of ``matrices``.
    """
    from tqdm.auto import tqdm

    matrices = _check_matrices(matrices, "cur_grids")
    return pd.concat([cur_grid(m, k_q_values, k_i_values, **kwargs).assign(ce=ce)
                      for ce, m in tqdm(matrices.items(), desc="CUR grid per CE", total=len(matrices))],
                     ignore_index=True)


def _rules(grid: pd.DataFrame) -> list[str]:
    return list(grid["pinv"].unique()) if "pinv" in grid.columns else ["cutoff"]


def _of_rule(grid: pd.DataFrame, rule: str) -> pd.DataFrame:
    return grid[grid["pinv"] == rule] if "pinv" in grid.columns else grid


def diagonal_spikes(grid: pd.DataFrame,
                    values: Sequence[str] = ("error_centered", "recall_at_m", "recall_at_budget", "cond")) -> pd.DataFrame:
    """:func:`diagonal_spike` of every CE and pinv rule of a :func:`cur_grids` table for every value column.

    Parameters
    ----------
    grid : DataFrame
        Output of :func:`cur_grids` (with a ``ce`` column).
    values : sequence of str, default ("error_centered", "recall_at_m", "recall_at_budget", "cond")
        Columns to compare (those absent from ``grid`` are skipped).

    Returns
    -------
    spikes : DataFrame
        The columns of :func:`diagonal_spike` plus ``ce``, ``pinv`` and ``value``; rules, then CEs in order of
        appearance, then values.
    """
    if not isinstance(grid, pd.DataFrame) or "ce" not in grid.columns:
        raise ParameterError("grid", "a DataFrame from cur_grids (with a 'ce' column)", type(grid).__name__,
                             "diagonal_spikes")
    return pd.concat([diagonal_spike(part[part["ce"] == ce], value).assign(ce=ce, pinv=rule, value=value)
                      for rule in _rules(grid) for part in [_of_rule(grid, rule)] for ce in grid["ce"].unique()
                      for value in values if value in grid.columns], ignore_index=True)


def spike_summary(spikes: pd.DataFrame) -> pd.DataFrame:
    """Min, median and max of the diagonal/neighbour ratio per (pinv, ce, value) of :func:`diagonal_spikes`."""
    by = ["pinv", "ce", "value"] if "pinv" in spikes.columns else ["ce", "value"]
    return spikes.groupby(by)["ratio"].agg(["min", "median", "max"])


#: The CUR quality columns of :func:`cur_grid` compared between CEs: lower is better for the errors, higher for the
#: recalls (the paper's Top-k-Recall@m and recall at a budget of B_CE CE calls).
_CUR_VALUES = ["error", "error_centered", "recall_at_m", "recall_at_budget"]


def _values(grid: pd.DataFrame) -> list[str]:
    return [v for v in _CUR_VALUES if v in grid.columns]


def offdiagonal_summary(grid: pd.DataFrame) -> pd.DataFrame:
    """Min, median and max of the errors and recalls over the k_q ≠ k_i cells, per pinv rule and CE.

    Parameters
    ----------
    grid : DataFrame
        Output of :func:`cur_grids` (columns ``ce``, ``diagonal``, ``error``, ``error_centered``, and the recalls).

    Returns
    -------
    summary : DataFrame
        Index: (pinv, CE), sorted; columns: (value, statistic).
    """
    off = grid[~grid["diagonal"]]
    by = ["pinv", "ce"] if "pinv" in grid.columns else ["ce"]
    return off.groupby(by)[_values(grid)].agg(["min", "median", "max"])


def emb_wins(grid: pd.DataFrame, cls_ce: str, emb_ce: str, *, pinv: str = "cutoff") -> dict[str, int]:
    """In how many k_q ≠ k_i cells of a :func:`cur_grids` table ``emb_ce`` beats ``cls_ce``, under one pinv rule.

    Parameters
    ----------
    grid : DataFrame
        Output of :func:`cur_grids`.
    cls_ce, emb_ce : str
        The two CEs (values of the ``ce`` column).
    pinv : str, default "cutoff"
        The pinv rule whose cells are compared (:data:`~xenbench.methods.cur.PINV_RULES`).

    Returns
    -------
    wins : dict
        ``error`` and ``error_centered``: cells where ``emb_ce`` has the strictly lower value; ``recall_at_m`` and
        ``recall_at_budget``: cells where it has the strictly higher recall (cells without one skipped);
        ``cells``: off-diagonal cells; ``cells_with_recall_at_budget``: those with a recall at the budget for both.
    """
    off = _of_rule(grid, pinv)
    off = off[~off["diagonal"]]
    values = _values(grid)
    wide = off.pivot_table(index=["k_q", "k_i"], columns="ce", values=values)
    wins = {v: int(((wide[v][emb_ce] > wide[v][cls_ce]) if v.startswith("recall")
                    else (wide[v][emb_ce] < wide[v][cls_ce])).sum()) for v in values}
    wins["cells"] = len(wide)
    if "recall_at_budget" in values:
        wins["cells_with_recall_at_budget"] = int(wide["recall_at_budget"].notna().all(axis=1).sum())
    return wins


def lowest(values: Mapping[str, float]) -> str:
    """The key with the strictly lowest value, or ``"tie"``.

    Examples
    --------
    >>> lowest({"a": 2, "b": 1}), lowest({"a": 1, "b": 1})
    ('b', 'tie')
    """
    best = min(values.values())
    winners = [ce for ce, v in values.items() if v == best]
    return winners[0] if len(winners) == 1 else "tie"


#: The rank rules :func:`rank_orderings` compares: numpy's default tolerance on the raw and on the row-centered
#: spectrum, and the energy ranks (no tolerance) of both.
ORDERING_RULES = (NUMPY_RANK, NUMPY_RANK_CENTERED, energy_label(0.9), energy_label(0.99),
                  energy_label(0.9, centered=True), energy_label(0.99, centered=True))


def rank_orderings(ranks_table: pd.DataFrame, rules: Sequence[str] = ORDERING_RULES) -> pd.DataFrame:
    """Which CE each rank rule puts lower: one row per rule of ``rules`` present in ``ranks_table``.

    Parameters
    ----------
    ranks_table : DataFrame
        :func:`rank_table` (one row per CE, the [CLS]-CE first).
    rules : sequence of str
        Columns of ``ranks_table`` (default :data:`ORDERING_RULES`); absent ones are skipped.

    Returns
    -------
    orderings : DataFrame
        Index: the rules. Columns: one per CE (its rank), ``ordering`` (the CEs from lowest to highest rank,
        joined by ``" < "``, or ``" = "`` for equal ranks) and ``lowest`` (the CE with the strictly lowest rank,
        or ``"tie"``).

    Examples
    --------
    >>> t = pd.DataFrame({NUMPY_RANK: [5, 9], NUMPY_RANK_CENTERED: [7, 7]}, index=["cls", "emb"])
    >>> rank_orderings(t)["ordering"].tolist()
    ['cls < emb', 'cls = emb']
    """
    owner = "rank_orderings"
    if not isinstance(ranks_table, pd.DataFrame) or len(ranks_table) < 2:
        raise ParameterError("ranks_table", "a rank_table of at least 2 CEs", type(ranks_table).__name__, owner)
    rows = {}
    for rule in rules:
        if rule not in ranks_table.columns:
            continue
        r = _rank_column(ranks_table, rule, owner)
        ordered = sorted(r, key=lambda ce: r[ce])  # stable: equal ranks keep the table's order
        text = ordered[0]
        for a, b in zip(ordered, ordered[1:]):
            text += (" = " if r[a] == r[b] else " < ") + b
        rows[rule] = {**r, "ordering": text, "lowest": lowest(r)}
    if not rows:
        raise ParameterError("rules", f"columns of ranks_table ({list(ranks_table.columns)})", list(rules), owner)
    return pd.DataFrame.from_dict(rows, orient="index")


def paired_sign_test(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Two-sided exact sign test of paired values: does ``a`` tend to be lower than ``b``?

    Parameters
    ----------
    a, b : sequence of float
        Paired values (e.g. one CE's and another's error in the same grid cells), same length; pairs with a
        NaN or equal values are dropped.

    Returns
    -------
    test : dict
        ``lower`` (pairs with a < b), ``higher`` (a > b), ``n`` (their sum) and ``p`` (two-sided binomial
        p-value of ``lower`` out of ``n`` under P(a < b) = 1/2; 1.0 when n = 0).

    Examples
    --------
    >>> paired_sign_test([1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2])["p"]
    0.03125
    """
    from math import comb

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ParameterError("b", f"a 1-d sequence as long as a ({x.shape})", y.shape, "paired_sign_test")
    ok = ~(np.isnan(x) | np.isnan(y))
    lower, higher = int((x[ok] < y[ok]).sum()), int((x[ok] > y[ok]).sum())
    n = lower + higher
    if n == 0:
        return {"lower": 0, "higher": 0, "n": 0, "p": 1.0}
    tail = sum(comb(n, j) for j in range(0, min(lower, higher) + 1)) / 2**n
    return {"lower": lower, "higher": higher, "n": n, "p": float(min(1.0, 2 * tail))}


def available_ces(scores_dir: str | os.PathLike[str], ces: Sequence[str],
                  optional: Sequence[str] = ()) -> list[str]:
    """The stores to compare: ``ces`` (all required), then those of ``optional`` that exist in ``scores_dir``.

    Notebook 02 lists the paper-layout [EMB]-CE (``emb-ce-marker``) as optional: it joins the comparison once
    its score store has been computed (``xenbench score models/emb-ce-marker ...``), and is skipped, with a log
    line, before.

    Examples
    --------
    >>> available_ces("/nonexistent", ["a", "b"], ["c"])
    ['a', 'b']
    """
    out = list(ces)
    for ce in optional:
        if ce in out:
            continue
        if (Path(scores_dir) / ce).is_dir():
            out.append(ce)
        else:
            logger.info("optional store %s is not in %s: compared without it", ce, scores_dir)
    return out


def ce_roles(layouts: Mapping[str, Mapping[str, Any]]) -> tuple[str, list[str]]:
    """Which CE is the [CLS]-CE and which are [EMB]-CEs, read from their layouts (:func:`ce_layouts`), never from
    their order or names.

    Returns
    -------
    (cls_ce, emb_ces)
        The one CE whose model kind is ``"cls"``, and those of kind ``"emb"`` in the given order.

    Raises
    ------
    DataError
        Unless exactly one CE is a [CLS]-CE and at least one an [EMB]-CE (a manifest without the model's kind
        counts as neither).

    Examples
    --------
    >>> ce_roles({"a": {"kind": "emb"}, "b": {"kind": "cls"}, "c": {"kind": "emb"}})
    ('b', ['a', 'c'])
    """
    kinds = {str(ce): (layout or {}).get("kind") for ce, layout in layouts.items()}
    cls = [ce for ce, kind in kinds.items() if kind == "cls"]
    emb = [ce for ce, kind in kinds.items() if kind == "emb"]
    if len(cls) != 1 or not emb:
        raise DataError("ce_roles", f"the score stores' manifests must name exactly one [CLS]-CE and at least one "
                                    f"[EMB]-CE (model_config.kind); found {kinds}")
    return cls[0], emb


def is_anncur_layout(layout: Mapping[str, Any]) -> bool:
    """Whether a :func:`ce_layouts` entry is ANNCUR's own [EMB]-CE (§2.6): marker pooling, raw dot (no scale).

    >>> is_anncur_layout({"kind": "emb", "pooling": "markers", "scale": None})
    True
    """
    return layout.get("kind") == "emb" and layout.get("pooling") == "markers" and layout.get("scale") is None


def ce_layouts(attrs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The scoring layout of every CE, from its store's manifest (:func:`store_attrs`).

    Returns
    -------
    layouts : dict
        ``{ce: {"kind": "cls" | "emb" | None, "pooling": str | None, "scale": float | None}}`` from
        ``attrs[ce]["model_config"]`` (None where the manifest lacks it). An [EMB]-CE with ``pooling="mean"`` and a
        scale is xenbench's mean-pooled cosine variant; ``pooling="markers"`` with no scale is ANNCUR's layout.

    Examples
    --------
    >>> ce_layouts({"e": {"model_config": {"kind": "emb", "pooling": "markers", "scale": None}}, "x": {}})
    {'e': {'kind': 'emb', 'pooling': 'markers', 'scale': None}, 'x': {'kind': None, 'pooling': None, 'scale': None}}
    """
    return {str(ce): {key: (a.get("model_config") or {}).get(key) for key in ("kind", "pooling", "scale")}
            for ce, a in attrs.items()}
