"""Spectra and ranks of CE score matrices: singular values, NumPy's numerical rank (ANNCUR Table 3(b)), energy
ranks (no tolerance), their table per CE and which CE each rule puts lower; the per-query score skew of Fig. 1(b).

Precision. Singular values are computed in float64 whatever the dtype of ``M``; the default rank
tolerance uses the machine epsilon of ``M``'s own dtype (the precision the scores were stored with), as
NumPy does. bf16 or fp16 noise in the scores inflates such a rank; the energy ranks are robust to it.

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

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from xenbench._validation import NP_REAL_TYPES, check_float, is_float
from xenbench.errors import ParameterError
from xenbench.studies.rank.matrices import _check_matrices, _check_matrix, per_ce
from xenbench.studies.stats import center_rows, score_skew

__all__ = ["NUMPY_RANK", "NUMPY_RANK_CENTERED", "NUMPY_RANK_F64", "ORDERING_RULES", "TOP_SHARE", "energy_label",
           "energy_rank", "lowest", "numerical_rank", "numpy_relative_tolerance", "numpy_tolerance", "rank_orderings",
           "rank_table", "singular_values", "skew_table"]

_CENTERS = (None, "rows", "both")


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


def numpy_relative_tolerance(M: np.ndarray) -> float:
    """NumPy's default rank tolerance relative to σ₁: ``max(M.shape) * eps(M.dtype)``.

    Examples
    --------
    >>> bool(numpy_relative_tolerance(np.zeros((3, 4))) == 4 * np.finfo(np.float64).eps)
    True
    """
    M = _check_matrix(M, "numpy_relative_tolerance")
    return float(max(M.shape) * np.finfo(M.dtype).eps)


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
