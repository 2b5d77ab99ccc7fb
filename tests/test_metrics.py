"""Metric sanity: perfect → 1, disjoint → 0, hand-computed examples, ties, and CE-call accounting."""
from __future__ import annotations

import numpy as np
import pytest

from xenbench.errors import ParameterError
from xenbench.metrics import (
    BudgetCounter,
    BudgetExceededError,
    approximation_errors,
    exact_topk,
    recall_under_budget,
    topk_indices,
    topk_of_lists,
    topk_recall,
)


def _literal_recall(M: np.ndarray, S: np.ndarray, k: int) -> np.ndarray:
    """Top-k-Recall@m exactly as the papers define it: re-rank S by exact scores, intersect top-k."""
    out = []
    for q in range(M.shape[0]):
        T = set(np.argsort(-M[q], kind="stable")[:k].tolist())
        s = np.unique(S[q][S[q] >= 0])
        s = s[np.argsort(-M[q, s], kind="stable")][:k]  # s is index-sorted, so ties go to lower index
        out.append(len(T & set(s.tolist())) / k)
    return np.array(out)


@pytest.fixture
def M() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32)


def test_perfect_retrieval_scores_one(M):
    assert topk_recall(M, np.argsort(-M, axis=1)[:, :5], 5) == 1.0
    assert topk_recall(M, np.argsort(-M, axis=1), 5) == 1.0  # a superset of T too


def test_disjoint_retrieval_scores_zero(M):
    assert topk_recall(M, np.argsort(-M, axis=1)[:, 5:15], 5) == 0.0


def test_hand_computed_example():
    M = np.array([[0.9, 0.1, 0.5, 0.3, 0.7],
                  [0.0, 0.8, 0.6, 0.4, 0.2]], dtype=np.float32)
    # T(q0) = {0, 4, 2}, T(q1) = {1, 2, 3}; S(q0) = {4, 1, 3}: hits {4} -> 1/3; S(q1) = {1, 2, 0}: hits {1, 2} -> 2/3.
    S = np.array([[4, 1, 3], [1, 2, 0]])
    np.testing.assert_allclose(topk_recall(M, S, 3, per_query=True), [1 / 3, 2 / 3])
    assert topk_recall(M, S, 3) == pytest.approx(0.5)


def test_matches_literal_rerank_definition(M):
    rng = np.random.default_rng(1)
    S = np.stack([rng.choice(40, 12, replace=False) for _ in range(6)])
    for k in (1, 3, 10):
        np.testing.assert_allclose(topk_recall(M, S, k, per_query=True), _literal_recall(M, S, k))


def test_duplicates_padding_and_short_lists():
    M = np.array([[5.0, 4.0, 3.0, 2.0]])
    assert topk_recall(M, np.array([[0, 0, 0]]), 2) == 0.5  # duplicates count once
    assert topk_recall(M, np.array([[1, -1, -1]]), 2) == 0.5  # -1 is padding
    assert topk_recall(M, np.array([[0]]), 3) == pytest.approx(1 / 3)  # m < k


def test_ties_go_to_lower_index():
    M = np.array([[1.0, 2.0, 2.0, 2.0, 0.0]])
    np.testing.assert_array_equal(exact_topk(M, 2), [[1, 2]])
    assert topk_recall(M, np.array([[3]]), 1) == 0.0  # tied with T = {1} but not in it
    assert topk_recall(M, np.array([[2, 1]]), 1) == 1.0


def test_topk_indices_equals_stable_argsort():
    rng = np.random.default_rng(2)
    scores = rng.integers(0, 4, size=(50, 30)).astype(np.float64)  # many ties
    scores[rng.random(scores.shape) < 0.2] = -np.inf
    for k in (1, 7, 30):
        np.testing.assert_array_equal(topk_indices(scores, k), np.argsort(-scores, axis=1, kind="stable")[:, :k])


def test_topk_of_lists_equals_stable_argsort_of_the_dense_rows():
    """A top-m search's lists (faiss's D, I: ties, -inf scores, -1 places, m below and above k) read as the dense row
    they stand for (-inf outside the list) would be: the same items in the same order, ties included."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 25))
        m, k, nq = int(rng.integers(1, n + 1)), int(rng.integers(1, n + 1)), int(rng.integers(1, 6))
        I = np.stack([rng.permutation(n)[:m] for _ in range(nq)])
        D = rng.integers(-2, 3, size=(nq, m)).astype(np.float32)  # many ties
        D[rng.random(D.shape) < 0.2] = -np.inf
        I[rng.random(I.shape) < 0.2] = -1
        dense = np.full((nq, n), -np.inf)
        for q in range(nq):
            ok = I[q] >= 0
            dense[q, I[q][ok]] = D[q][ok]
        want = np.argsort(-dense, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(topk_of_lists(D, I, n, k), want)
    with pytest.raises(ParameterError, match="'I'"):
        topk_of_lists(np.zeros((1, 2)), np.array([[0, 5]]), 5, 2)
    with pytest.raises(ParameterError, match="'k'"):
        topk_of_lists(np.zeros((1, 2)), np.array([[0, 1]]), 5, 6)


def test_recall_parameter_errors(M):
    with pytest.raises(ParameterError, match=r"The 'k' parameter of topk_recall must be an int in \[1, n_items=40\]. Got 0 instead."):
        topk_recall(M, np.zeros((6, 3), int), 0)
    with pytest.raises(ParameterError, match=r"The 'retrieved' parameter of topk_recall must be an int array of shape \(n_queries=6, m\)"):
        topk_recall(M, np.zeros((5, 3), int), 1)
    with pytest.raises(ParameterError, match=r"item indices in \[0, n_items=40\) or -1 for padding. Got 'values in \[40, 40\]'"):
        topk_recall(M, np.full((6, 1), 40), 1)


def test_recall_under_budget(M):
    S = np.argsort(-M, axis=1)[:, :4]
    assert recall_under_budget(M, S, 2, calls=np.full(6, 4), budget=4) == 1.0
    with pytest.raises(BudgetExceededError, match="query 2 spent 5 CE calls, more than the budget B_CE=4"):
        recall_under_budget(M, S, 2, calls=np.array([4, 4, 5, 0, 0, 0]), budget=4)


def test_approximation_errors_hand_example():
    exact = np.array([[4.0, 3.0, 2.0, 1.0]])
    approx = np.array([[3.0, 3.0, 2.0, 5.0]])  # |diff| = 1, 0, 0, 4
    errs = approximation_errors(exact, approx, k=2, anchors=np.array([[2, 3]]))
    assert errs == {"all": pytest.approx(1.25), "topk": pytest.approx(0.5), "anchors": pytest.approx(2.0)}


def test_budget_counter_counts_distinct_pairs_and_never_exceeds():
    M = np.arange(12, dtype=np.float32).reshape(3, 4)
    counter = BudgetCounter(M, budget=3)
    np.testing.assert_array_equal(counter.score(np.array([[0, 1], [2, 2], [3, 0]])), [[0, 1], [6, 6], [11, 8]])
    np.testing.assert_array_equal(counter.calls, [2, 1, 2])
    counter.score(np.array([[0, 1]]), rows=np.array([0]))  # already scored: free
    np.testing.assert_array_equal(counter.calls, [2, 1, 2])
    with pytest.raises(BudgetExceededError, match="query 2 would spend 4 CE calls, more than the budget B_CE=3"):
        counter.score(np.array([[1, 2]]), rows=np.array([2]))
    np.testing.assert_array_equal(counter.calls, [2, 1, 2])  # a refused request charges nothing
    assert not counter.scored[2, 1]
    np.testing.assert_array_equal(counter.remaining(), [1, 2, 1])


def test_budget_counter_parameter_errors():
    with pytest.raises(ParameterError, match=r"The 'budget' parameter of BudgetCounter must be an int in \[1, n_items=4\]. Got 0 instead."):
        BudgetCounter(np.zeros((2, 4), np.float32), budget=0)
    counter = BudgetCounter(np.zeros((2, 4), np.float32))
    with pytest.raises(ParameterError, match=r"The 'items' parameter of BudgetCounter.score must be item indices in \[0, 4\)"):
        counter.score(np.array([[4], [0]]))
    with pytest.raises(ParameterError, match="The 'rows' parameter of BudgetCounter.score must be distinct query rows"):
        counter.score(np.array([[0], [1]]), rows=np.array([1, 1]))
