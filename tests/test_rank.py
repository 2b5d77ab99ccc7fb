"""Rank analysis against independent truths: planted ranks and singular values, hand-computed energy
ranks and skewness, exact CUR recovery of low-rank matrices, agreement of cur_grid with the AnnCur /
anncur_with_budget path, the k_q = k_i spike (ANNCUR §B.2), and parameter errors."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from xenbench.methods.baselines import anncur_with_budget
from xenbench.methods.cur import AnnCur, approximation_error
from xenbench.errors import DataError, ParameterError
from xenbench.metrics import topk_recall
from xenbench.studies.findings.rank import describe_ranks, findings, rank_verdict
from xenbench.studies.rank import (
    NUMPY_RANK,
    NUMPY_RANK_CENTERED,
    TOP_SHARE,
    available_ces,
    ce_layouts,
    data_line,
    paired_sign_test,
    rank_orderings,
    center_rows,
    cur_grid,
    cur_grids,
    diagonal_spike,
    diagonal_spikes,
    emb_wins,
    energy_label,
    energy_rank,
    load_matrices,
    lowest,
    matrix_summary,
    numerical_rank,
    numpy_relative_tolerance,
    numpy_tolerance,
    offdiagonal_summary,
    per_ce,
    rank_table,
    score_skew,
    singular_values,
    skew_table,
    spike_summary,
    store_attrs,
)


def planted(n_queries: int, n_items: int, rank: int, *, noise: float = 0.0, seed: int = 0,
            dtype: type = np.float64) -> np.ndarray:
    """A rank-``rank`` matrix with singular values 1..rank (times 10), plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((n_queries, rank)))
    V, _ = np.linalg.qr(rng.standard_normal((n_items, rank)))
    M = (U * (10.0 * np.arange(rank, 0, -1))) @ V.T
    return (M + noise * rng.standard_normal((n_queries, n_items))).astype(dtype)


# ------------------------------------------------------------------------------------------------
# singular values and ranks
# ------------------------------------------------------------------------------------------------
def test_singular_values_match_numpy_and_planted_values():
    M = planted(40, 70, rank=6)
    s = singular_values(M)
    assert s.shape == (40,) and s.dtype == np.float64
    np.testing.assert_allclose(s, np.linalg.svd(M, compute_uv=False), rtol=1e-12, atol=1e-12)
    # planted σ = 60, 50, ..., 10, then zeros (to float64 rounding of the product)
    np.testing.assert_allclose(s[:6], [60, 50, 40, 30, 20, 10], rtol=1e-12)
    assert s[6:].max() < 1e-12


@pytest.mark.parametrize("center", ["rows", "both"])
def test_centered_singular_values_equal_those_of_the_explicitly_centered_matrix(center):
    rng = np.random.default_rng(1)
    M = rng.standard_normal((30, 50)).astype(np.float32) + 5.0
    X = M.astype(np.float64) - M.astype(np.float64).mean(axis=1, keepdims=True)
    if center == "both":
        X = X - X.mean(axis=0, keepdims=True)
    np.testing.assert_allclose(singular_values(M, center=center), np.linalg.svd(X, compute_uv=False),
                               rtol=1e-10, atol=1e-10)


def test_row_centering_removes_an_offset_that_numpy_counts_as_rank_one():
    M = planted(30, 50, rank=4) + 5.0  # constant offset: one more rank, and a large σ₁
    assert numerical_rank(M) == 5
    assert numerical_rank(M, s=singular_values(M, center="rows")) == 4


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("rank", [1, 7, 25])
def test_numerical_rank_of_planted_rank_with_noise_below_tolerance(rank, dtype):
    # numpy's tolerance is σ₁ · max(m, n) · eps(dtype) = 60..250 · 200 · eps; noise of σ₁ · eps / 10 per
    # entry gives singular values of about σ₁ · eps / 10 · (sqrt(m) + sqrt(n)) ≈ 2.5 σ₁ eps, far below.
    eps = np.finfo(dtype).eps
    clean = planted(120, 200, rank)
    M = planted(120, 200, rank, noise=10.0 * rank * eps / 10, dtype=dtype)
    assert np.abs(M - clean).max() > 0  # the noise is there
    assert numerical_rank(M) == rank
    assert numerical_rank(M) == np.linalg.matrix_rank(M)


def test_numpy_tolerance_is_sigma_max_times_max_dim_times_eps_of_the_dtype():
    M = planted(20, 30, rank=3)
    assert numpy_tolerance(M) == pytest.approx(30.0 * 30 * np.finfo(np.float64).eps)
    assert numpy_tolerance(M.astype(np.float32)) == pytest.approx(30.0 * 30 * np.finfo(np.float32).eps, rel=1e-6)


def test_explicit_tolerance_and_precomputed_singular_values():
    M = planted(20, 30, rank=5)  # σ = 50, 40, 30, 20, 10
    s = singular_values(M)
    assert numerical_rank(M, tol=25.0) == 3
    assert numerical_rank(M, tol=25.0, s=s) == 3
    assert numerical_rank(M, tol=15.0) == 4


@pytest.mark.parametrize(
    "s, thresholds, expected",
    [
        ([3.0, 2.0, 1.0], (0.5, 0.9, 1.0), {0.5: 1, 0.9: 2, 1.0: 3}),  # energies 9, 4, 1 of 14
        ([1.0, 1.0, 1.0, 1.0], (0.5, 0.75, 0.76), {0.5: 2, 0.75: 3, 0.76: 4}),  # exact boundaries
        ([1.0, 3.0, 2.0], (0.9,), {0.9: 2}),  # order of the input does not matter
        ([5.0, 0.0, 0.0], (0.99, 1.0), {0.99: 1, 1.0: 1}),
        ([4.0, 3.0], (0.64, 0.65), {0.64: 1, 0.65: 2}),  # 16 / 25 = 0.64 exactly
    ],
)
def test_energy_rank_on_hand_computed_values(s, thresholds, expected):
    assert energy_rank(np.array(s), thresholds) == expected


def test_energy_rank_default_thresholds():
    s = np.sqrt(np.array([90.0, 9.0, 0.9, 0.1]))  # energies sum to 100
    assert energy_rank(s) == {0.9: 1, 0.99: 2}


# ------------------------------------------------------------------------------------------------
# score distributions
# ------------------------------------------------------------------------------------------------
def test_score_skew_hand_computed_and_invariant_to_shift_and_scale():
    M = np.array([[0.0, 0.0, 0.0, 4.0],  # mean 1, m2 = 3, m3 = (−1 −1 −1 + 27)/4 = 6: g1 = 6 / 3^1.5
                  [1.0, 2.0, 3.0, 4.0],  # symmetric
                  [0.0, 4.0, 4.0, 4.0]])  # mirror of the first
    g = score_skew(M)
    np.testing.assert_allclose(g, [6 / 3 ** 1.5, 0.0, -6 / 3 ** 1.5], atol=1e-12)
    np.testing.assert_allclose(score_skew(3.0 * M - 7.0), g, atol=1e-12)


def test_score_skew_agrees_with_scipy_and_marks_constant_rows():
    rng = np.random.default_rng(0)
    M = rng.exponential(size=(5, 300)).astype(np.float32)
    np.testing.assert_allclose(score_skew(M), scipy.stats.skew(M.astype(np.float64), axis=1), rtol=1e-10)
    assert np.isnan(score_skew(np.ones((2, 4)))).all()


def test_center_rows_gives_zero_mean_rows_and_unit_std_when_scaled():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((6, 40)) * 3 + np.arange(6)[:, None]
    M[2] = 5.0  # a constant row
    Z = center_rows(M)
    np.testing.assert_allclose(Z.mean(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(Z, M - M.mean(axis=1, keepdims=True))
    S = center_rows(M, scale=True)
    np.testing.assert_allclose(np.delete(S.std(axis=1), 2), 1.0)
    assert (S[2] == 0).all()


# ------------------------------------------------------------------------------------------------
# cur_grid
# ------------------------------------------------------------------------------------------------
def test_cur_grid_recovers_an_exactly_low_rank_matrix():
    # rank 5 < k_q, k_i: the skeleton decomposition is exact to float64 rounding, so the approximate
    # scores rank every item exactly and any budget >= k finds the whole top-k.
    M = planted(100, 300, rank=5)
    grid = cur_grid(M, [8, 20, 40], [6, 10, 30], n_test=30, seed=3, budget=40, m=10, k=10,
                    pinv_rules=["plain", "cutoff"])
    assert list(grid.columns) == ["pinv", "k_q", "k_i", "diagonal", "error", "error_centered", "cond", "recall_at_m",
                                  "recall_at_budget"]
    assert grid[["pinv", "k_q", "k_i"]].values.tolist() == [[r, q, i] for r in ("plain", "cutoff") for q in (8, 20, 40)
                                                             for i in (6, 10, 30)]
    assert (grid["error"] < 1e-9).all()
    assert (grid["error_centered"] < 1e-9).all()
    assert (grid["recall_at_budget"] == 1.0).all() and (grid["recall_at_m"] == 1.0).all()  # m = k: exact ranking
    # below the rank the approximation cannot be exact
    low = cur_grid(M, [3, 20], [3, 20], n_test=30, seed=3)
    assert (low.loc[(low["k_q"] < 5) | (low["k_i"] < 5), "error"] > 0.05).all()
    assert not {"recall_at_m", "recall_at_budget"} & set(low.columns)  # no budget or m, no recall
    with pytest.raises(ParameterError, match=r"'pinv_rules' parameter of cur_grid must be a non-empty list"):
        cur_grid(M, [8], [6], n_test=30, pinv_rules=["exact"])


def test_cur_grid_is_deterministic_given_the_seed():
    M = planted(80, 150, rank=10, noise=0.5, seed=1)
    a = cur_grid(M, [10, 30], [15, 40], n_test=20, seed=7, budget=60)
    b = cur_grid(M, [10, 30], [15, 40], n_test=20, seed=7, budget=60)
    pd.testing.assert_frame_equal(a, b)
    c = cur_grid(M, [10, 30], [15, 40], n_test=20, seed=8, budget=60)
    assert not np.allclose(a["error"], c["error"])


@pytest.mark.parametrize("noise", [0.3, 0.0])
@pytest.mark.parametrize("rule", ["cutoff", "plain"])
def test_cur_grid_equals_annCur_and_anncur_with_budget(noise, rule):
    # Reference path: the documented permutations, AnnCur.fit/transform and anncur_with_budget.
    # noise = 0: float32 rounding of an exactly rank-12 matrix leaves singular values near eps32 · σ₁,
    # which only the float32 pinv cut-off (AnnCur's, from the stored dtype) drops.
    M = planted(90, 200, rank=12, noise=noise, seed=2).astype(np.float32)
    k_qs, k_is, n_test, seed, budget, m, k = [10, 25, 40], [5, 25, 60], 30, 11, 80, 100, 10
    grid = cur_grid(M, k_qs, k_is, n_test=n_test, seed=seed, budget=budget, m=m, k=k, pinv_rules=[rule])

    rng = np.random.default_rng(seed)
    order = rng.permutation(M.shape[0])
    test, pool = np.sort(order[:n_test]), order[n_test:]
    items = rng.permutation(M.shape[1])
    M_test = M[test]
    for row in grid.itertuples():
        cur = AnnCur(row.k_i, anchor_items=items[: row.k_i], pinv=rule).fit(M[pool[: row.k_q]])
        M_hat = cur.transform(M_test[:, cur.anchor_items_])
        if rule == "plain" and noise == 0:  # noise-level singular values inverted: both paths only agree to ~1e-9
            assert row.error == pytest.approx(approximation_error(M_test, M_hat), abs=1e-8)
        else:
            assert row.error == pytest.approx(approximation_error(M_test, M_hat), rel=1e-8)
        _, retrieved = anncur_with_budget(cur, M_test, budget)
        assert row.recall_at_budget == pytest.approx(topk_recall(M_test, retrieved, k), abs=1e-12)
        # The paper's Top-k-Recall@m is the authors' budget rule with k_i + m calls: the top m by ŝ over all items.
        cur.budget_rule = "authors' code"
        _, top_m = anncur_with_budget(cur, M_test, row.k_i + m)
        assert top_m.shape == (n_test, m)
        assert row.recall_at_m == pytest.approx(topk_recall(M_test, top_m, k), abs=1e-12)
        intersection = M[pool[: row.k_q]][:, items[: row.k_i]].astype(np.float64)
        assert row.cond == pytest.approx(np.linalg.cond(intersection), rel=1e-8)


def test_cur_grid_recall_is_nan_where_anchors_exceed_the_budget():
    M = planted(60, 100, rank=4, noise=0.1)
    grid = cur_grid(M, [10], [5, 20, 50], n_test=20, budget=20, m=20, k=5)
    assert grid["recall_at_budget"].isna().tolist() == [False, False, True]
    assert grid["recall_at_m"].notna().all()  # the paper's m does not count the anchor calls
    # k_i = budget: all calls are anchors, nothing re-ranked
    assert 0 <= grid["recall_at_budget"].iloc[1] <= 1


def test_error_spikes_on_the_diagonal_k_q_equals_k_i():
    # ANNCUR §B.2: with noise, R_anc[:, I_anc] is square and ill-conditioned when k_q = k_i.
    M = planted(200, 400, rank=10, noise=1.0, seed=4)
    grid = cur_grid(M, [20, 40, 80], [10, 20, 40, 80, 120], n_test=60, seed=0, budget=200, k=10)
    spikes = diagonal_spike(grid, "error")
    assert spikes["k_q"].tolist() == [20, 40, 80]
    assert (spikes["ratio"] > 3).all()
    for k_q, row in grid.groupby("k_q"):  # the square intersection is by far the worst conditioned
        assert row.loc[row["diagonal"], "cond"].item() > 5 * row.loc[~row["diagonal"], "cond"].max()
    recall = diagonal_spike(grid, "recall_at_budget")
    assert (recall["ratio"] < 1).all()


def test_diagonal_spike_reports_neighbours():
    grid = pd.DataFrame({"k_q": [10, 10, 10, 20, 20], "k_i": [5, 10, 20, 10, 20],
                         "error": [0.2, 2.0, 0.1, 0.3, 0.9]})
    out = diagonal_spike(grid)
    assert out["k_q"].tolist() == [10, 20]
    assert out["diagonal"].tolist() == [2.0, 0.9]
    assert out["below"].tolist() == [0.2, 0.3]
    assert out["above"].iloc[0] == 0.1 and np.isnan(out["above"].iloc[1])
    np.testing.assert_allclose(out["ratio"], [2.0 / 0.2, 0.9 / 0.3])  # the worse (larger) neighbour
    recall = pd.DataFrame({"k_q": [10, 10, 10], "k_i": [5, 10, 20], "recall": [0.8, 0.4, 0.9]})
    assert diagonal_spike(recall, "recall")["ratio"].tolist() == [0.5]  # the worse (smaller) neighbour


# ------------------------------------------------------------------------------------------------
# parameter errors
# ------------------------------------------------------------------------------------------------
M_SMALL = planted(20, 30, rank=3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_test=0), r"'n_test' parameter of cur_grid must be an int in \[1, n_queries - 1=19\]"),
        (dict(n_test=20), r"'n_test' parameter of cur_grid must be an int in \[1, n_queries - 1=19\]"),
        (dict(k_q_values=[5, 16]), r"'k_q_values' parameter of cur_grid must be a non-empty list of distinct "
                                   r"ints in \[1, n_queries - n_test=15\]"),
        (dict(k_q_values=[]), r"'k_q_values' parameter of cur_grid must be a non-empty list"),
        (dict(k_i_values=[4, 4]), r"'k_i_values' parameter of cur_grid must be a non-empty list of distinct "
                                  r"ints in \[1, n_items=30\]"),
        (dict(k_i_values=[2.5]), r"'k_i_values' parameter of cur_grid"),
        (dict(budget=31), r"'budget' parameter of cur_grid must be an int in \[1, n_items=30\]"),
        (dict(k=0), r"'k' parameter of cur_grid must be an int in \[1, n_items=30\]"),
        (dict(seed=-1), r"'seed' parameter of cur_grid must be a non-negative int"),
    ],
)
def test_cur_grid_parameter_errors(kwargs, message):
    args = dict(k_q_values=[5], k_i_values=[4], n_test=5) | kwargs
    with pytest.raises(ParameterError, match=message):
        cur_grid(M_SMALL, args.pop("k_q_values"), args.pop("k_i_values"), **args)


def test_matrix_parameter_errors():
    with pytest.raises(ParameterError, match=r"'M' parameter of singular_values must be a non-empty float array"):
        singular_values(np.ones((3, 4), dtype=np.int64))
    bad = M_SMALL.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ParameterError, match=r"'M' parameter of numerical_rank must be finite"):
        numerical_rank(bad)
    with pytest.raises(ParameterError, match=r"'center' parameter of singular_values must be one of "
                                              r"\[None, 'rows', 'both'\]"):
        singular_values(M_SMALL, center="columns")
    with pytest.raises(ParameterError, match=r"'tol' parameter of numerical_rank must be None or a float >= 0"):
        numerical_rank(M_SMALL, tol=-1.0)
    with pytest.raises(ParameterError, match=r"'s' parameter of numerical_rank must be the singular values of M"):
        numerical_rank(M_SMALL, s=np.ones(5))


@pytest.mark.parametrize(
    "s, thresholds, message",
    [
        (np.zeros(3), (0.9,), r"'s' parameter of energy_rank must be a 1-d array of non-negative finite"),
        (np.array([1.0, -1.0]), (0.9,), r"'s' parameter of energy_rank"),
        (np.ones(3), (0.0,), r"'thresholds' parameter of energy_rank must be a non-empty sequence of floats "
                             r"in \(0, 1\]"),
        (np.ones(3), (1.5,), r"'thresholds' parameter of energy_rank"),
        (np.ones(3), (), r"'thresholds' parameter of energy_rank"),
    ],
)
def test_energy_rank_parameter_errors(s, thresholds, message):
    with pytest.raises(ParameterError, match=message):
        energy_rank(s, thresholds)


def test_diagonal_spike_parameter_errors():
    with pytest.raises(ParameterError, match=r"'value' parameter of diagonal_spike must be a column of grid"):
        diagonal_spike(pd.DataFrame({"k_q": [1], "k_i": [1], "error": [0.1]}), "recall")


# ------------------------------------------------------------------------------------------------
# figures (xenbench.viz.plots.rank): built from these results, diagonal marked, raw scores not embedded
# ------------------------------------------------------------------------------------------------
def test_rank_figures_build_from_the_results():
    from xenbench.viz.plots import rank as plots

    Ms = {"cls": planted(60, 120, rank=8, noise=0.2, seed=0), "emb": planted(60, 120, rank=4, noise=0.2, seed=1)}
    spectra = plots.singular_value_spectra({n: singular_values(m) for n, m in Ms.items()},
                                           centered={n: singular_values(m, center="rows") for n, m in Ms.items()},
                                           rel_tol=1e-3)
    assert len(spectra.data) == 5  # 2 CEs x (raw, centered) + the tolerance line
    hist = plots.score_skew_histograms({n: center_rows(m, scale=True) for n, m in Ms.items()},
                                       skew={n: score_skew(m) for n, m in Ms.items()}, bins=50)
    assert [len(t.x) for t in hist.data if t.type == "scatter"] == [50, 50]  # binned, not 7200 raw scores
    grid = pd.concat([cur_grid(m, [10, 20], [10, 20, 30], n_test=20, budget=40).assign(ce=n) for n, m in Ms.items()])
    for value in ("error", "error_centered", "recall_at_budget", "cond"):
        fig = plots.cur_heatmaps(grid, value)
        assert len(fig.data) == 2
        assert len(fig.layout.shapes) == 4  # k_q = k_i cells (10 and 20) outlined in both panels
    curves = plots.cur_error_curves(grid)
    assert sum(t.mode == "markers" for t in curves.data) == 4  # the circled diagonal points


# ------------------------------------------------------------------------------------------------
# comparing CEs ({ce: M} mappings, notebook 02): loading, tables, verdict
# ------------------------------------------------------------------------------------------------
def _store(path, M, query_ids, item_ids, **attrs):
    from xenbench.data.store import ScoreStore

    nq, ni = M.shape
    store = ScoreStore.create(path, nq, ni, chunks=(nq, None),
                              attrs={"query_ids": query_ids, "item_ids": item_ids, **attrs})
    store.write_chunk(0, M)
    return store


M_A = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [10.0, 11.0, 12.0]], dtype=np.float32)


def test_load_matrices_reads_every_store_in_order(tmp_path):
    _store(tmp_path / "a", M_A, ["q0", "q1", "q2", "q3"], ["i0", "i1", "i2"])
    _store(tmp_path / "b", 2 * M_A, ["q0", "q1", "q2", "q3"], ["i0", "i1", "i2"])
    M = load_matrices(tmp_path, ["b", "a"])
    assert list(M) == ["b", "a"]
    np.testing.assert_array_equal(M["a"], M_A)
    np.testing.assert_array_equal(M["b"], 2 * M_A)
    assert M["a"].dtype == np.float32
    # max_queries >= n_queries: all rows
    np.testing.assert_array_equal(load_matrices(tmp_path, ["a"], max_queries=4)["a"], M_A)


def test_load_matrices_subsamples_the_same_rows_for_every_ce_in_order(tmp_path):
    _store(tmp_path / "a", M_A, ["q0", "q1", "q2", "q3"], ["i0", "i1", "i2"])
    _store(tmp_path / "b", 2 * M_A, ["q0", "q1", "q2", "q3"], ["i0", "i1", "i2"])
    M = load_matrices(tmp_path, ["a", "b"], max_queries=2, seed=3)
    assert M["a"].shape == (2, 3)
    np.testing.assert_array_equal(M["b"], 2 * M["a"])  # the same rows
    rows = [int(row[0] - 1) // 3 for row in M["a"]]  # row r of M_A starts with 3r + 1
    assert rows == sorted(rows) and len(set(rows)) == 2
    np.testing.assert_array_equal(M["a"], M_A[rows])
    # seeded: the same rows again
    np.testing.assert_array_equal(load_matrices(tmp_path, ["a", "b"], max_queries=2, seed=3)["a"], M["a"])


@pytest.mark.parametrize("query_ids, item_ids", [
    (["q0", "q1", "q2", "q3"], ["i0", "i2", "i1"]),  # items in another order
    (["q0", "q1", "q2", "x"], ["i0", "i1", "i2"]),  # another query
])
def test_load_matrices_rejects_stores_that_disagree_on_ids(tmp_path, query_ids, item_ids):
    _store(tmp_path / "a", M_A, ["q0", "q1", "q2", "q3"], ["i0", "i1", "i2"])
    _store(tmp_path / "c", M_A, query_ids, item_ids)
    with pytest.raises(DataError, match=r"c: c and a do not score the same queries and items in the same order"):
        load_matrices(tmp_path, ["a", "c"])


def test_load_matrices_parameter_errors(tmp_path):
    with pytest.raises(ParameterError, match=r"'ces' parameter of load_matrices must be a non-empty sequence"):
        load_matrices(tmp_path, [])
    with pytest.raises(ParameterError, match=r"'ces' parameter of load_matrices"):
        load_matrices(tmp_path, ["a", "a"])
    with pytest.raises(ParameterError, match=r"'max_queries' parameter of load_matrices must be None or an int"):
        load_matrices(tmp_path, ["a"], max_queries=0)


def test_matrix_summary_on_hand_computed_values(tmp_path):
    M = {"a": np.array([[1.0, 3.0], [1.0, 3.0]], dtype=np.float32), "b": np.array([[0.0, 0.0], [2.0, 6.0]])}
    _store(tmp_path / "a", M["a"], ["q0", "q1"], ["i0", "i1"], model_config={"kind": "cls"}, precision="fp32")
    summary = matrix_summary(M, attrs=store_attrs(tmp_path, ["a"]))
    assert list(summary.index) == ["a", "b"]
    assert summary.loc["a"].to_dict() == {
        "model kind": "cls", "precision": "fp32", "dtype": "float32", "queries": 2, "items": 2,
        "mean score": 2.0, "std of scores": 1.0, "mean per-query std": 1.0,
    }
    b = summary.loc["b"]
    assert b["model kind"] is None and b["precision"] is None and b["dtype"] == "float64"
    assert b["mean score"] == 2.0 and b["std of scores"] == pytest.approx(np.sqrt(6.0))  # (4+4+4+16)/4 - 0
    assert b["mean per-query std"] == 1.0  # (0 + 2) / 2


def test_per_ce_and_numpy_relative_tolerance():
    M = {"a": np.diag([3.0, 1.0]), "b": np.diag([2.0, 2.0])}
    assert {ce: s.tolist() for ce, s in per_ce(singular_values, M).items()} == {"a": [3.0, 1.0], "b": [2.0, 2.0]}
    assert per_ce(center_rows, M, scale=True)["b"].tolist() == [[1.0, -1.0], [-1.0, 1.0]]
    assert numpy_relative_tolerance(np.zeros((3, 5), dtype=np.float32)) == 5 * np.finfo(np.float32).eps


def test_rank_table_on_hand_computed_values():
    # a: σ = 3, 1 (energies 9 + 1); row-centered [[1.5, -1.5], [-0.5, 0.5]] has rank 1.
    # b: σ = 2, 2; row-centered [[1, -1], [-1, 1]] has rank 1.
    M = {"a": np.diag([3.0, 1.0]), "b": np.diag([2.0, 2.0])}
    table = rank_table(M)
    assert list(table.index) == ["a", "b"]
    assert table.to_dict(orient="index") == {
        "a": {NUMPY_RANK: 2, "numpy rank, if the scores were float64": 2, "numpy rank, row-centered": 1,
              "σ₁²/‖M‖² (share of the top component)": 0.9,
              "energy rank 90%": 1, "energy rank 99%": 2,
              "energy rank 90%, row-centered": 1, "energy rank 99%, row-centered": 1},
        "b": {NUMPY_RANK: 2, "numpy rank, if the scores were float64": 2, "numpy rank, row-centered": 1,
              "σ₁²/‖M‖² (share of the top component)": 0.5,
              "energy rank 90%": 2, "energy rank 99%": 2,
              "energy rank 90%, row-centered": 1, "energy rank 99%, row-centered": 1},
    }
    pre = rank_table(M, s=per_ce(singular_values, M), s_centered=per_ce(singular_values, M, center="rows"))
    pd.testing.assert_frame_equal(pre, table)
    assert list(rank_table(M, (0.5,)).columns)[-2:] == [energy_label(0.5), energy_label(0.5, centered=True)]


def test_rank_table_float64_rank_differs_from_the_float32_rank():
    M = {"f32": planted(80, 100, rank=10, noise=1e-5, seed=0, dtype=np.float32)}
    row = rank_table(M).loc["f32"]
    assert row[NUMPY_RANK] == 10  # noise 1e-5 < σ₁ · 100 · 1.2e-7
    assert row["numpy rank, if the scores were float64"] == 80  # but far above the float64 tolerance


def test_ce_roles_come_from_the_manifests_not_the_order():
    from xenbench.errors import DataError
    from xenbench.studies.rank import ce_roles

    assert ce_roles({"e1": {"kind": "emb"}, "c": {"kind": "cls"}, "e2": {"kind": "emb"}}) == ("c", ["e1", "e2"])
    for bad in ({"a": {"kind": "emb"}, "b": {"kind": "emb"}}, {"a": {"kind": "cls"}, "b": {"kind": "cls"}},
                {"a": {"kind": "cls"}, "b": {"kind": None}}):
        with pytest.raises(DataError, match="exactly one \\[CLS\\]-CE and at least one \\[EMB\\]-CE"):
            ce_roles(bad)


def test_describe_ranks_prints_the_hand_computed_numbers():
    M = {"cls": planted(40, 50, rank=12, seed=0), "emb": planted(40, 50, rank=3, seed=1)}
    text = describe_ranks(rank_table({"emb": M["emb"], "cls": M["cls"]}), (40, 50), "cls", "emb").split("\n")
    assert text[0] == "numpy rank: cls 12, emb 3 (full rank would be 40); ANNCUR's YuGiOh matrices: 315 vs 45."
    assert text[1].startswith("cls: its top singular component holds ")
    assert text[2].startswith("Row-centered energy ranks (90% / 99%): cls ")
    assert len(text) == 3


def test_skew_table_on_hand_computed_values():
    # Row of 99 zeros and a one: Bernoulli(p = 0.01) skewness (1 − 2p)/√(p(1 − p)), z of the one = 0.99/√0.0099.
    spike = np.zeros((1, 100))
    spike[0, 7] = 1.0
    table = skew_table({"spike": spike, "sym": np.array([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 4.0]])})
    p = 0.01
    assert table.loc["spike", "median skewness"] == pytest.approx((1 - 2 * p) / np.sqrt(p * (1 - p)))
    assert table.loc["spike", "share of pairs > 5 sd above the query mean"] == 0.01  # z = 9.95
    assert table.loc["spike", "share of pairs > 10 sd above the query mean"] == 0.0
    assert table.loc["sym", "median skewness"] == pytest.approx(2 / np.sqrt(3) / 2)  # median of 0 and 1.1547
    assert table.loc["sym", "mean skewness"] == pytest.approx(2 / np.sqrt(3) / 2)
    assert table.loc["sym", "share of pairs > 5 sd above the query mean"] == 0.0


def test_cur_grids_stacks_cur_grid_per_ce():
    M = {"cls": planted(60, 80, rank=8, noise=0.1, seed=0), "emb": planted(60, 80, rank=3, noise=0.1, seed=1)}
    grid = cur_grids(M, [5, 10], [5, 20], n_test=20, seed=2, budget=30, k=5)
    assert grid["ce"].tolist() == ["cls"] * 4 + ["emb"] * 4
    for ce, m in M.items():
        expected = cur_grid(m, [5, 10], [5, 20], n_test=20, seed=2, budget=30, k=5)
        pd.testing.assert_frame_equal(grid[grid["ce"] == ce].drop(columns="ce").reset_index(drop=True), expected)


def _hand_grid() -> pd.DataFrame:
    # Two CEs on cells (1, 2), (2, 1) and the diagonal (1, 1); the second off-diagonal cell has no recall.
    return pd.DataFrame({
        "k_q": [1, 2, 1] * 2, "k_i": [2, 1, 1] * 2, "diagonal": [False, False, True] * 2,
        "error": [0.5, 0.4, 9.0, 0.4, 0.5, 9.0],
        "error_centered": [0.75, 0.5, 9.0, 0.5, 0.25, 9.0],
        "recall_at_m": [0.5, 0.75, 0.1, 0.75, 0.5, 0.1],
        "recall_at_budget": [0.5, np.nan, 0.0, 0.6, np.nan, 0.0],
        "cond": [1.0, 1.0, 1e6, 1.0, 1.0, 1e6],
        "ce": ["cls"] * 3 + ["emb"] * 3,
    })


def test_emb_wins_and_offdiagonal_summary_on_a_hand_grid():
    grid = _hand_grid()
    assert emb_wins(grid, "cls", "emb") == {"error": 1, "error_centered": 2, "recall_at_m": 1, "recall_at_budget": 1,
                                            "cells": 2, "cells_with_recall_at_budget": 1}
    assert emb_wins(grid, "emb", "cls") == {"error": 1, "error_centered": 0, "recall_at_m": 1, "recall_at_budget": 0,
                                            "cells": 2, "cells_with_recall_at_budget": 1}
    summary = offdiagonal_summary(grid)  # the diagonal's 9.0 is left out
    assert summary.loc["cls", ("error", "max")] == 0.5 and summary.loc["emb", ("error", "median")] == 0.45
    assert summary.loc["cls", ("recall_at_budget", "median")] == 0.5
    assert summary.loc["emb", ("error_centered", "min")] == 0.25
    # with a pinv column, each rule is its own group and emb_wins reads one rule
    two = pd.concat([grid.assign(pinv="cutoff"), grid.assign(pinv="plain", error=grid["error"] * 10)])
    assert emb_wins(two, "cls", "emb", pinv="plain") == emb_wins(grid, "cls", "emb")
    assert offdiagonal_summary(two).loc[("plain", "cls"), ("error", "max")] == 5.0


def test_diagonal_spikes_and_summary_on_a_hand_grid():
    grid = pd.DataFrame({"k_q": [2, 2, 2], "k_i": [1, 2, 3], "error_centered": [1.0, 10.0, 2.0],
                         "recall_at_m": [0.5, 0.1, 0.4], "cond": [1.0, 100.0, 4.0], "ce": ["a"] * 3})
    spikes = diagonal_spikes(grid)
    assert spikes[["ce", "value", "k_q", "diagonal", "ratio"]].to_dict(orient="records") == [
        {"ce": "a", "value": "error_centered", "k_q": 2, "diagonal": 10.0, "ratio": 5.0},  # / max(1, 2)
        {"ce": "a", "value": "recall_at_m", "k_q": 2, "diagonal": 0.1, "ratio": 0.25},  # / min(0.5, 0.4)
        {"ce": "a", "value": "cond", "k_q": 2, "diagonal": 100.0, "ratio": 25.0},  # / max(1, 4)
    ]
    summary = spike_summary(spikes)
    assert summary.loc[("cutoff", "a", "cond")].tolist() == [25.0, 25.0, 25.0]
    two = diagonal_spikes(pd.concat([grid.assign(pinv="plain"), grid.assign(pinv="cutoff", error_centered=1.0)]))
    assert two[two["value"] == "error_centered"][["pinv", "ratio"]].values.tolist() == [["plain", 5.0], ["cutoff", 1.0]]
    with pytest.raises(ParameterError, match="one pinv rule"):
        diagonal_spike(pd.concat([grid.assign(pinv="plain"), grid.assign(pinv="cutoff")]), "cond")
    assert list(summary.columns) == ["min", "median", "max"]
    with pytest.raises(ParameterError, match=r"'grid' parameter of diagonal_spikes must be a DataFrame from cur_grids"):
        diagonal_spikes(grid.drop(columns="ce"))


def test_lowest():
    assert lowest({"a": 3, "b": 1, "c": 2}) == "b"
    assert lowest({"a": 1.0, "b": 1.0}) == "tie"


def _hand_verdict_inputs(r_np=(10, 4)):
    ranks = pd.DataFrame({NUMPY_RANK: list(r_np), energy_label(0.9, centered=True): [5, 2],
                          energy_label(0.99, centered=True): [8, 3]}, index=["cls", "emb"])
    skews = pd.DataFrame({"median skewness": [2.0, 0.5]}, index=["cls", "emb"])
    spikes = pd.DataFrame({"ce": ["cls", "cls", "emb", "emb"], "value": ["error_centered"] * 3 + ["recall_at_m"],
                           "ratio": [4.0, 6.0, 2.0, 0.1]})
    return ranks, skews, _hand_grid(), spikes


def test_rank_verdict_on_hand_computed_values():
    verdict = rank_verdict(*_hand_verdict_inputs(), "cls", "emb")
    assert verdict == {
        "cls_ce": "cls", "emb_ce": "emb",
        "numpy_rank": {"cls": 10, "emb": 4},
        "numpy_rank_ratio_cls_over_emb": 2.5,
        "emb_much_lower_numpy_rank": True,  # 4 · 2 <= 10
        "energy_rank_99_centered": {"cls": 8, "emb": 3},
        "energy_rank_ratio_cls_over_emb": 8 / 3,
        "lower_energy_rank": "emb",
        "median_skewness": {"cls": 2.0, "emb": 0.5},
        "median_offdiag": {"cls": {"error": 0.45, "error_centered": 0.625, "recall_at_m": 0.625, "recall_at_budget": 0.5},
                           "emb": {"error": 0.45, "error_centered": 0.375, "recall_at_m": 0.625,
                                   "recall_at_budget": 0.6}},
        "median_diagonal_spike_error_centered": {"cls": 5.0, "emb": 2.0},
        "better_error_centered": "emb",
        "better_recall_at_m": "tie",
        "better_recall_at_budget": "emb",
        "better_error": "tie",  # both medians 0.45
        "lower_numpy_rank": "emb",
        # emb lower in both cells: p = 2 · (1/2)² = 0.5; recall has one cell; error splits 1:1
        "sign_tests": {"error": {"lower": 1, "higher": 1, "n": 2, "p": 1.0},
                       "error_centered": {"lower": 2, "higher": 0, "n": 2, "p": 0.5},
                       "recall_at_m": {"lower": 1, "higher": 1, "n": 2, "p": 1.0},
                       "recall_at_budget": {"lower": 1, "higher": 0, "n": 1, "p": 1.0}},
    }
    assert rank_verdict(*_hand_verdict_inputs(r_np=(10, 6)), "cls", "emb")["emb_much_lower_numpy_rank"] is False
    with pytest.raises(ParameterError, match="'emb_ce' parameter of rank_verdict"):
        rank_verdict(*_hand_verdict_inputs(), "cls", "cls")


def test_paired_sign_test_against_the_binomial():
    t = paired_sign_test([1, 1, 1, 1, 1, 3, 2], [2, 2, 2, 2, 2, 2, 2])  # 5 lower, 1 higher, 1 tie dropped
    assert (t["lower"], t["higher"], t["n"]) == (5, 1, 6)
    assert t["p"] == pytest.approx(scipy.stats.binomtest(5, 6, 0.5).pvalue)
    assert paired_sign_test([np.nan, 1.0], [1.0, 1.0]) == {"lower": 0, "higher": 0, "n": 0, "p": 1.0}
    with pytest.raises(ParameterError, match="'b' parameter of paired_sign_test"):
        paired_sign_test([1.0, 2.0], [1.0])


def test_rank_orderings_name_the_lower_ce_per_rule():
    ranks = pd.DataFrame({NUMPY_RANK: [3, 4, 4], NUMPY_RANK_CENTERED: [9, 5, 5],
                          energy_label(0.99, centered=True): [8, 3, 2]}, index=["cls", "emb", "marker"])
    o = rank_orderings(ranks)
    assert o["ordering"].tolist() == ["cls < emb = marker", "emb = marker < cls", "marker < emb < cls"]
    assert o["lowest"].tolist() == ["cls", "tie", "marker"]
    assert o.loc[NUMPY_RANK, "emb"] == 4
    with pytest.raises(ParameterError, match="'rules' parameter of rank_orderings"):
        rank_orderings(ranks, ["nothing"])


def test_available_ces_adds_optional_stores_that_exist(tmp_path):
    (tmp_path / "emb-ce-marker").mkdir()
    assert available_ces(tmp_path, ["cls-ce", "emb-ce"], ["emb-ce-marker", "other"]) == [
        "cls-ce", "emb-ce", "emb-ce-marker"]
    assert available_ces(tmp_path, ["cls-ce", "emb-ce"], []) == ["cls-ce", "emb-ce"]


def test_data_line_names_each_ce_its_kind_and_model_and_the_sample_of_the_data():
    attrs = {"mine": {"model": "/m/my-ce", "dataset": "beir:/d/mine", "query_ids": ["a", "b", "c", "d", "e"],
                      "model_config": {"kind": "cls"}},
             "theirs": {"model_config": {"kind": "emb", "pooling": "mean", "scale": 20.0}},
             "odd": {}}
    M = {ce: np.zeros((3, 4)) for ce in attrs}
    assert data_line("scores/mine", attrs, M) == (
        "mine ([CLS]-CE, /m/my-ce), theirs ([EMB]-CE, ?), odd (kind unknown, ?) from scores/mine: 3 of the 5 queries "
        "x 4 items of beir:/d/mine")
    attrs["mine"]["query_ids"] = ["a", "b", "c"]  # every query kept: no "of the"
    assert data_line("s", {"mine": attrs["mine"]}, {"mine": M["mine"]}) == (
        "mine ([CLS]-CE, /m/my-ce) from s: 3 queries x 4 items of beir:/d/mine")


def _findings_results(emb_better: bool, r_np=(3, 4)) -> dict:
    """A hand-made notebook-02 results dict: 8 off-diagonal cells in which one CE is better everywhere."""
    cells = [(q, i) for q in (1, 2, 3) for i in (1, 2, 3) if q != i] + [(4, 1), (4, 2)]
    good = {"error": 0.3, "error_centered": 0.4, "recall_at_m": 0.9, "recall_at_budget": 0.8}
    bad = {"error": 0.5, "error_centered": 0.9, "recall_at_m": 0.6, "recall_at_budget": 0.5}
    grid = []
    for ce in ("cls", "emb"):
        vals = good if (ce == "emb") == emb_better else bad
        grid += [{"pinv": "cutoff", "k_q": q, "k_i": i, "diagonal": False, **vals, "cond": 1.0, "ce": ce}
                 for q, i in cells]
        grid += [{"pinv": "cutoff", "k_q": 1, "k_i": 1, "diagonal": True, "error": 9.0, "error_centered": 9.0,
                  "recall_at_m": 0.1, "recall_at_budget": 0.0, "cond": 1e6, "ce": ce}]
    ranks = {"cls": {NUMPY_RANK: r_np[0], NUMPY_RANK_CENTERED: 9, energy_label(0.9, centered=True): 5,
                     energy_label(0.99, centered=True): 8},
             "emb": {NUMPY_RANK: r_np[1], NUMPY_RANK_CENTERED: 9, energy_label(0.9, centered=True): 2,
                     energy_label(0.99, centered=True): 3}}
    return {"params": {"k": 10, "budget": 50, "m": 50}, "ces": ["cls", "emb"], "shape": [40, 50], "ranks": ranks,
            "layouts": {"cls": {"kind": "cls", "pooling": "mean", "scale": None},
                        "emb": {"kind": "emb", "pooling": "mean", "scale": 20.0}},
            "skew": {"cls": {"median skewness": 2.0}, "emb": {"median skewness": 0.5}}, "grid": grid,
            "diagonal_spikes": [{"pinv": "cutoff", "ce": "cls", "value": "error_centered", "ratio": 5.0},
                                {"pinv": "cutoff", "ce": "emb", "value": "error_centered", "ratio": 2.0},
                                {"pinv": "plain", "ce": "cls", "value": "error_centered", "ratio": 50.0},
                                {"pinv": "plain", "ce": "emb", "value": "error_centered", "ratio": 20.0}]}


def _past_layouts(lines: list[str]) -> list[str]:
    assert lines[0].startswith("Layouts compared: ")
    return lines[1:]


def test_findings_state_what_the_numbers_say():
    lines = _past_layouts(findings(_findings_results(emb_better=True)))
    assert lines[0] == ("Which tolerance rule yields which ordering (full rank 40): numpy's default tolerance on the raw "
                        "spectrum: cls < emb (cls 3, emb 4); numpy's default tolerance on the row-centered spectrum: "
                        "cls = emb (cls 9, emb 9); 99% energy rank of the row-centered spectrum: emb < cls (cls 8, "
                        "emb 3); 90% energy rank of the row-centered spectrum: emb < cls (cls 5, emb 2).")
    assert lines[1].startswith("ANNCUR's rank(emb) ≪ rank(cls) (at least 2× lower; the paper's ratio was 7): does not "
                               "hold by numpy's default tolerance on the raw spectrum (ratio 0.75);")
    assert "holds by 99% energy rank of the row-centered spectrum (ratio 2.67)" in lines[1]
    assert lines[2] == "Median per-query skewness: cls 2.00, emb 0.50: cls's scores are the more right-skewed."
    # 8 of 8 cells: p = 2 / 2⁸
    assert "by error_centered, emb beats cls (emb better in 8 of 8 off-diagonal cells, sign test p = 0.0078)" in lines[3]
    assert lines[3].startswith("CUR with xenbench's cut-off (singular values below")
    assert ("the paper's Top-10-Recall@50 (50 items retrieved by ŝ, anchor calls not counted) 0.600 vs 0.900" in lines[3]
            and "Top-10-Recall at B_CE = 50 CE calls (anchor calls included, anchors re-ranked free) 0.500 vs 0.800"
            in lines[3])
    assert "by Top-10-Recall@50, emb beats cls" in lines[3] and "by recall at B_CE = 50, emb beats cls" in lines[3]
    assert ("numpy's default tolerance on the raw spectrum (lower: cls) does not agree" in lines[4]
            and "99% energy rank of the row-centered spectrum (lower: emb) agrees" in lines[4])
    assert lines[5] == ("At k_q = k_i (ANNCUR §B.2), error_centered over the worse neighbour's (the next smaller or larger k_i "
                        "of the grid in the same k_q row; median over the diagonal cells) with the plain pinv (NumPy's default cut-off 1e-15, as the ANNCUR authors' code): "
                        "50.0× (cls), 20.0× (emb); with xenbench's cut-off (singular values below "
                        "max(k_q, k_i)·eps(float32)·σ₁ dropped): 5.0× (cls), 2.0× (emb).")
    assert lines[6] == ("Both recalls with m = B_CE = 50: the paper's Top-10-Recall@50 is +10.0 points above "
                        "Top-10-Recall at B_CE = 50 calls on average over the k_q ≠ k_i cells (most +10.0 at k_q = 1, "
                        "k_i = 2, cls): the budget charges the k_i anchor calls, the paper's m does not.")
    # The numbers flip, so does the text.
    flipped = _past_layouts(findings(_findings_results(emb_better=False, r_np=(10, 4))))
    assert "by error_centered, cls beats emb (emb better in 0 of 8" in flipped[3]
    assert "holds by numpy's default tolerance on the raw spectrum (ratio 2.50)" in flipped[1]
    assert "numpy's default tolerance on the raw spectrum: emb < cls (cls 10, emb 4)" in flipped[0]
    assert "99% energy rank of the row-centered spectrum (lower: emb) does not agree" in flipped[4]


def test_findings_name_the_top_component_share_behind_the_raw_numpy_rank():
    res = _findings_results(emb_better=True)
    res["ranks"]["cls"][TOP_SHARE], res["ranks"]["emb"][TOP_SHARE] = 0.9935, 0.6222
    lines = _past_layouts(findings(res))
    assert lines[1] == ("numpy's tolerance is σ₁ · max(m, n) · eps, so a common offset (a dominant top component) "
                        "raises it and lowers the raw-spectrum rank: the top singular component holds 99.35% of ‖M‖² "
                        "for cls, 62.22% of ‖M‖² for emb; the row-centered rules remove the offset.")
    assert lines[2:] == _past_layouts(findings(_findings_results(emb_better=True)))[1:]  # nothing else moves


def test_findings_say_within_noise_when_the_cells_split():
    res = _findings_results(emb_better=True)
    for row in res["grid"]:  # emb better in half the cells only
        if row["ce"] == "emb" and row["k_q"] == 2:
            row.update(error_centered=0.95, recall_at_m=0.5, recall_at_budget=0.4)
    lines = _past_layouts(findings(res))
    assert "by error_centered, emb and cls are within noise" in lines[3]
    assert "cannot be checked" in lines[4]


def test_findings_compare_every_emb_ce_with_the_cls_ce():
    res = _findings_results(emb_better=True)
    res["ces"] = ["cls", "emb", "marker"]
    res["ranks"]["marker"] = dict(res["ranks"]["emb"])
    res["skew"]["marker"] = {"median skewness": 1.0}
    res["layouts"]["marker"] = {"kind": "emb", "pooling": "markers", "scale": None}
    res["grid"] += [{**row, "ce": "marker"} for row in res["grid"] if row["ce"] == "emb"]
    lines = findings(res)
    assert any(line.startswith("ANNCUR's rank(marker) ≪ rank(cls)") for line in lines)
    assert "cls < emb = marker (cls 3, emb 4, marker 4)" in lines[1]
    # the roles come from the manifests: listing the [CLS]-CE last changes nothing but the order of the lists
    res["ces"] = ["emb", "marker", "cls"]
    again = findings(res)
    assert any(line.startswith("ANNCUR's rank(marker) ≪ rank(cls)") for line in again)
    assert any(line.startswith("ANNCUR's rank(emb) ≪ rank(cls)") for line in again)


def test_findings_name_each_ces_layout():
    res = _findings_results(emb_better=True)
    res["layouts"] = ce_layouts({"cls": {"model_config": {"kind": "cls", "pooling": "mean", "scale": None}},
                                 "emb": {"model_config": {"kind": "emb", "pooling": "mean", "scale": 20.0}}})
    first = findings(res)[0]
    assert first == ("Layouts compared: cls: [CLS]-CE, linear head on the [CLS] state; emb: [EMB]-CE, 20 · cosine of "
                     "the mean-pooled query and item segments (xenbench's variant, not ANNCUR's layout).")
    res["layouts"]["emb"] = {"kind": "emb", "pooling": "markers", "scale": None}
    assert findings(res)[0].endswith("emb: [EMB]-CE, raw dot of the [unused0]/[unused1] mean and the [unused2] state "
                                     "(ANNCUR's [EMB]-CE layout).")
