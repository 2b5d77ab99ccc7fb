"""ANNCUR over a (k_q × k_i) grid of one or several CEs' matrices ([ANNCUR] Fig. 6, 8): the approximation error,
Top-k-Recall@m and the recall at a budget per cell, the k_q = k_i ill-conditioning of §B.2 (the diagonal spike), and
how the CEs compare cell by cell.

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
from typing import Any

import numpy as np
import pandas as pd

from xenbench._validation import check_int, check_seed, is_int
from xenbench.errors import ParameterError
from xenbench.methods.cur import PINV_RULES, pinv_cutoff, rerank_candidates
from xenbench.metrics import topk_indices
from xenbench.studies.rank.matrices import _check_matrices, _check_matrix

__all__ = ["GRID_FRACTIONS", "cur_grid", "cur_grids", "default_sizes", "diagonal_spike", "diagonal_spikes", "emb_wins",
           "offdiagonal_summary", "paired_sign_test", "spike_summary"]

#: The default grid of anchor counts (both k_q and k_i, so that the k_q = k_i diagonal exists), as fractions of the
#: largest count both can take (:func:`default_sizes`).
GRID_FRACTIONS = (0.1, 0.25, 0.5, 1.0)


def default_sizes(values: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
    """Notebook 02's grid sized from its data, for the parameters left None (the profiles file's ``sized_by``).

    With Q queries (after ``max_queries``) and N items: ``n_test`` = min(100, Q // 3) held-out queries (or, with
    ``k_q_values`` given, min(100, Q − max(k_q_values))); ``k_q_values`` = ``k_i_values`` = :data:`GRID_FRACTIONS` of
    A = min(Q − n_test, N), rounded, distinct (so the k_q = k_i diagonal is in the grid); ``budget`` = ``m`` =
    min(N, 1.5 · max(k_i_values)). On the bundled quick run (300 of 1001 queries, 2964 items) this is the quick
    profile's old grid: n_test 100, k_q = k_i = [20, 50, 100, 200], budget = m = 300.

    Parameters
    ----------
    values
        The notebook's parameters (``k_q_values``, ``k_i_values``, ``n_test``, ``budget``, ``m``); a given value is
        kept and sizes the others.
    sizes
        ``{"queries": Q, "items": N}`` (:func:`xenbench.harness.sizes.data_sizes`).

    Returns
    -------
    dict
        A value for each of the five parameters.

    Examples
    --------
    >>> default_sizes({"k_q_values": None, "k_i_values": None, "n_test": None, "budget": None, "m": None},
    ...               {"queries": 300, "items": 2964})
    {'n_test': 100, 'k_q_values': [20, 50, 100, 200], 'k_i_values': [20, 50, 100, 200], 'budget': 300, 'm': 300}
    >>> default_sizes({"k_q_values": None, "k_i_values": None, "n_test": None, "budget": None, "m": None},
    ...               {"queries": 40, "items": 25})
    {'n_test': 13, 'k_q_values': [2, 6, 12, 25], 'k_i_values': [2, 6, 12, 25], 'budget': 25, 'm': 25}
    """
    n_q, n_i = int(sizes["queries"]), int(sizes["items"])
    k_q = values.get("k_q_values")
    n_test = values.get("n_test")
    if n_test is None:
        n_test = max(1, min(100, n_q // 3 if not k_q else n_q - max(k_q)))
    largest = max(1, min(n_q - n_test, n_i))
    ladder = sorted({max(1, round(largest * f)) for f in GRID_FRACTIONS})
    k_i = values.get("k_i_values") or ladder
    budget = values.get("budget") or min(n_i, max(1, round(1.5 * max(k_i))))
    return {"n_test": n_test, "k_q_values": k_q or ladder, "k_i_values": k_i, "budget": budget,
            "m": values.get("m") or min(n_i, max(1, round(1.5 * max(k_i))))}


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
