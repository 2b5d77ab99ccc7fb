"""ANNCUR against independent truths: exact recovery of low-rank matrices, the k_q = k_i spike (§B.2),
the oracle U being at least as good as the skeleton U, and the estimator/search contracts."""
from __future__ import annotations

import numpy as np
import pytest

from xenbench.methods.baselines import anncur_with_budget
from xenbench.methods.cur import AnnCur, NotFittedError, approximation_error, oracle_cur, pinv_rtol
from xenbench.metrics import BudgetCounter, topk_recall
from xenbench.errors import ParameterError


def low_rank(n_queries: int, n_items: int, rank: int, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n_queries, rank)) @ rng.standard_normal((rank, n_items)) / np.sqrt(rank)
    return (M + noise * rng.standard_normal((n_queries, n_items))).astype(np.float32)


@pytest.mark.parametrize("n_anchor_items", [6, 12, 25, 45])
def test_exact_recovery_of_low_rank_matrix(n_anchor_items):
    # rank 5 < k_q = 30 and < k_i: the skeleton decomposition is exact up to float32 rounding of M.
    M = low_rank(80, 300, rank=5)
    cur = AnnCur(n_anchor_items, seed=1).fit(M[:30])
    test = M[30:]
    assert approximation_error(test, cur.transform(test[:, cur.anchor_items_])) < 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_error_spikes_when_k_q_equals_k_i(seed):
    # ANNCUR §B.2: with noise, R_anc[:, I_anc] is square and ill-conditioned when k_q = k_i.
    M = low_rank(140, 400, rank=10, noise=0.1, seed=seed)
    R, test = M[:40], M[40:]

    def error(k_i: int) -> float:
        cur = AnnCur(k_i, seed=100 + seed).fit(R)
        return approximation_error(test, cur.transform(test[:, cur.anchor_items_]))

    others = [error(k_i) for k_i in (20, 30, 50, 60)]
    assert error(40) > 3 * max(others)


def test_oracle_cur_recovers_low_rank_and_beats_skeleton():
    M = low_rank(60, 200, rank=4)
    rows, cols = np.arange(20), np.arange(0, 200, 10)
    assert approximation_error(M, oracle_cur(M, rows, cols)) < 1e-5
    noisy = low_rank(60, 200, rank=6, noise=0.2, seed=3).astype(np.float64)
    skeleton = noisy[:, cols] @ np.linalg.pinv(noisy[np.ix_(rows, cols)]) @ noisy[rows]
    # U = pinv(C) M pinv(R) minimizes ||M - C U R||_F over all U, so it is never worse.
    assert approximation_error(noisy, oracle_cur(noisy, rows, cols)) <= approximation_error(noisy, skeleton) + 1e-12


def test_fit_stores_paper_quantities():
    M = low_rank(50, 120, rank=6, noise=0.05)
    R = M[:20]
    cur = AnnCur(8, seed=4).fit(R)
    assert cur.anchor_items_.shape == (8,) and cur.anchor_items_.dtype == np.int64
    assert np.unique(cur.anchor_items_).size == 8
    np.testing.assert_allclose(cur.U_, np.linalg.pinv(R[:, cur.anchor_items_].astype(np.float64)), atol=1e-10)
    np.testing.assert_allclose(cur.item_embeddings_, cur.U_ @ R.astype(np.float64), atol=1e-10)
    assert cur.U_.shape == (8, 20) and cur.item_embeddings_.shape == (8, 120)


def test_seeded_and_explicit_anchor_items():
    R = low_rank(20, 100, rank=3)
    a = AnnCur(10, seed=7).fit(R).anchor_items_
    np.testing.assert_array_equal(a, AnnCur(10, seed=7).fit(R).anchor_items_)
    assert not np.array_equal(a, AnnCur(10, seed=8).fit(R).anchor_items_)
    chosen = np.array([5, 1, 99])
    np.testing.assert_array_equal(AnnCur(3, anchor_items=chosen).fit(R).anchor_items_, chosen)


def test_search_contract_matches_brute_force_on_transform():
    M = low_rank(40, 150, rank=5, noise=0.1)
    cur = AnnCur(12).fit(M[:15])
    C_test = M[15:, cur.anchor_items_]
    D, I = cur.search(C_test, 7)
    assert D.dtype == np.float32 and I.dtype == np.int64 and D.shape == I.shape == (25, 7)
    S_hat = cur.transform(C_test)
    np.testing.assert_array_equal(I, np.argsort(-S_hat, axis=1, kind="stable")[:, :7])
    np.testing.assert_allclose(D, np.take_along_axis(S_hat, I, axis=1), rtol=1e-6)
    assert (np.diff(D, axis=1) <= 0).all()


def test_parameter_errors():
    R = low_rank(10, 50, rank=2)
    with pytest.raises(ParameterError, match=r"The 'n_anchor_items' parameter of AnnCur must be an int in \[1, n_items\]. Got 0 instead."):
        AnnCur(0).fit(R)
    with pytest.raises(ParameterError, match=r"The 'n_anchor_items' parameter of AnnCur must be an int in \[1, n_items\]. Got 51 instead."):
        AnnCur(51).fit(R)
    with pytest.raises(ParameterError, match=r"The 'anchor_items' parameter of AnnCur must be 'random' or an int array"):
        AnnCur(3, anchor_items="greedy").fit(R)
    with pytest.raises(ParameterError, match=r"The 'anchor_items' parameter of AnnCur must be distinct indices"):
        AnnCur(3, anchor_items=np.array([1, 1, 2])).fit(R)
    with pytest.raises(ParameterError, match=r"The 'anchor_items' parameter of AnnCur must be a 1-d int array of shape \(3,\)"):
        AnnCur(3, anchor_items=np.array([1, 2])).fit(R)
    with pytest.raises(ParameterError, match=r"The 'R_anc' parameter of AnnCur must be finite"):
        AnnCur(3).fit(np.full((4, 5), np.nan))
    cur = AnnCur(3).fit(R)
    with pytest.raises(ParameterError, match=r"The 'C_test' parameter of AnnCur.transform must be a float array of shape \(nq, k_i=3\)"):
        cur.transform(np.zeros((2, 4)))
    with pytest.raises(ParameterError, match=r"The 'k' parameter of AnnCur.search must be an int in \[1, n_items\]. Got 0 instead."):
        cur.search(np.zeros((2, 3)), 0)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        AnnCur(3).transform(np.zeros((1, 3)))


def test_approximation_error_values():
    assert approximation_error(np.ones((2, 2)), np.ones((2, 2))) == 0.0
    assert approximation_error(np.array([[3.0, 4.0]]), np.array([[3.0, 0.0]])) == pytest.approx(0.8)
    with pytest.raises(ParameterError, match="The 'M_hat' parameter of approximation_error must be an array of the shape"):
        approximation_error(np.ones((2, 2)), np.ones((2, 3)))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_float32_scores_with_a_large_offset_are_recovered(seed):
    # M = rank-5 + 1000 (rank 6), stored in float32: each entry is within half an ulp(1000) = 3.1e-5 of
    # the exact matrix. With the cut-off taken from float32 (pinv_rtol), CUR reconstructs the held-out
    # queries to within 4 ulp(1000) = 2.4e-4 (1e-4 of the rank-5 part's spread ≈ 2.2) even in the
    # square k_q = k_i case; keeping the float64 cut-off on the same float32 values inverts the
    # rounding noise's singular values (≈ 1e-6 · σ_max) and misses it (measured 5.7e-4 to 1.3e-2).
    rng = np.random.default_rng(seed)
    M = (rng.standard_normal((130, 5)) @ rng.standard_normal((5, 400)) + 1000.0).astype(np.float32)
    ulp = float(np.spacing(np.float32(1000.0)))
    for k_q, k_i in ((30, 30), (20, 60), (30, 10)):
        cur = AnnCur(k_i, seed=seed).fit(M[:k_q])
        assert cur.score_dtype_ == np.float32
        err = np.abs(cur.transform(M[40:, cur.anchor_items_]) - M[40:]).max()
        assert err <= 4 * ulp, (k_q, k_i, err)
    old = AnnCur(30, seed=seed).fit(M[:30].astype(np.float64))  # float64 cut-off on float32 data
    assert np.abs(old.transform(M[40:, old.anchor_items_]) - M[40:]).max() > 4 * ulp


def test_pinv_rtol_uses_the_stored_precision():
    from xenbench.methods.cur import pinv_rtol

    assert pinv_rtol((30, 100), np.float32) == 100 * float(np.finfo(np.float32).eps)
    assert pinv_rtol((30, 100)) == 100 * float(np.finfo(np.float64).eps)
    M = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert oracle_cur(M, np.array([0, 1]), np.array([0, 1])).shape == (3, 4)


# --- named rules: the pinv of U and the budget rule ------------------------------------------------------------


def test_pinv_rules_plain_is_numpys_default_and_cutoff_drops_float32_noise():
    # An exactly rank-2 matrix stored in float32: the square intersection's third singular value is rounding noise.
    rng = np.random.default_rng(0)
    M = (rng.standard_normal((40, 2)) @ rng.standard_normal((2, 30))).astype(np.float32)
    anchors = np.array([0, 1, 2])
    plain = AnnCur(3, anchor_items=anchors, pinv="plain").fit(M[:3])
    cut = AnnCur(3, anchor_items=anchors).fit(M[:3])
    intersection = M[:3][:, anchors].astype(np.float64)
    np.testing.assert_array_equal(plain.U_, np.linalg.pinv(intersection))  # NumPy's default rcond 1e-15
    s = np.linalg.svd(intersection, compute_uv=False)
    assert s[2] / s[0] < pinv_rtol((3, 3), np.float32)  # below the cut-off: noise of the stored scores
    assert np.linalg.matrix_rank(cut.U_) == 2 and np.linalg.matrix_rank(plain.U_, tol=0) == 3
    # the plain inverse amplifies the noise: its approximation of held-out rows is worse
    err = {name: approximation_error(M[10:], c.transform(M[10:, anchors])) for name, c in (("plain", plain), ("cut", cut))}
    assert err["cut"] < err["plain"] < 1e-6  # tiny here (exact rank 2); the §B.2 spike needs noisy scores
    with pytest.raises(ParameterError, match=r"'pinv' parameter of AnnCur must be one of \['cutoff', 'plain'\]"):
        AnnCur(3, pinv="exact").fit(M[:3])


def test_budget_rules_differ_where_an_anchor_takes_a_rerank_slot():
    # Rank 1, so ŝ is exact; the anchor (item 0) scores highest. B_CE = 2, k_i = 1: one re-ranking call.
    v = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    M = np.outer([1.0, 2.0, 3.0], v)
    R_anc, M_test = M[:2], M[2:]
    free = AnnCur(1, anchor_items=np.array([0])).fit(R_anc)
    authors = AnnCur(1, anchor_items=np.array([0]), budget_rule="authors' code").fit(R_anc)
    c_free, c_auth = BudgetCounter(M_test, 2), BudgetCounter(M_test, 2)
    _, I_free = anncur_with_budget(free, c_free, 2)
    _, I_auth = anncur_with_budget(authors, c_auth, 2)
    assert I_free.tolist() == [[0, 1]]  # the anchor, re-ranked for free, and the best non-anchor item
    assert I_auth.tolist() == [[0]]  # the top k_r = 1 by ŝ over all items: the anchor takes the slot
    assert c_free.calls.tolist() == [2] and c_auth.calls.tolist() == [1]
    assert topk_recall(M_test, I_free, 2) == 1.0 and topk_recall(M_test, I_auth, 2) == 0.5
    # With the anchor ranked low by ŝ, both rules re-rank the same non-anchor item; only the free anchor differs.
    low = AnnCur(1, anchor_items=np.array([4]), budget_rule="authors' code").fit(R_anc)
    assert anncur_with_budget(low, M_test, 2)[1].tolist() == [[0]]
    with pytest.raises(ParameterError, match=r"'budget_rule' parameter of AnnCur must be one of"):
        AnnCur(1, budget_rule="paper").fit(R_anc)
