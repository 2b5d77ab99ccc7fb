"""PEFA-XS (Eq. 8) and PEFA-XL (Eq. 6) against brute-force scoring, the λ = 1 limit, HNSW against exact
search, the relevance matrix of the bundled labels, and Recall@k on hand-checkable cases."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xenbench.cur import NotFittedError
from xenbench.errors import ParameterError
from xenbench.metrics import label_recall
from xenbench.experiments import select_lambda
from xenbench.pefa import PefaXL, PefaXS, label_coverage, lambda_sweep, relevance_matrix
from xenbench.plots import recall_vs_lambda_lines

N_ITEMS, M_TRAIN, D = 120, 80, 16


def unit(X: np.ndarray) -> np.ndarray:
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def problem():
    """Items P, training queries Q with 1-2 relevant items each, test queries T."""
    rng = np.random.default_rng(0)
    P = unit(rng.standard_normal((N_ITEMS, D)))
    gold = rng.integers(0, N_ITEMS, size=M_TRAIN)
    Q = unit(P[gold] + 0.8 * rng.standard_normal((M_TRAIN, D)))  # a query is near its gold item
    Y = sp.lil_matrix((M_TRAIN, N_ITEMS))
    Y[np.arange(M_TRAIN), gold] = 1
    Y[np.arange(0, M_TRAIN, 4), rng.integers(0, N_ITEMS, size=M_TRAIN // 4)] = 1
    T = unit(Q[:30] + 0.3 * rng.standard_normal((30, D)))  # test queries near training queries
    return P, Q, Y.tocsr(), T


def test_xs_equals_brute_force_scoring_of_eq8(problem):
    P, Q, Y, T = problem
    lam = 0.4
    knn = (Y.T @ Q.astype(np.float64))
    norms = np.linalg.norm(knn, axis=1, keepdims=True)
    knn = np.where(norms > 0, knn / np.where(norms > 0, norms, 1), 0.0)
    scores = T.astype(np.float64) @ (lam * P + (1 - lam) * knn).T
    D, I = PefaXS(lam).fit(P, Q, Y).search(T, k=10)
    np.testing.assert_array_equal(I, np.argsort(-scores, axis=1, kind="stable")[:, :10])
    np.testing.assert_allclose(D, np.take_along_axis(scores, I, axis=1), atol=1e-5)


def test_lambda_one_is_the_erm_alone(problem):
    P, Q, Y, T = problem
    _, I = PefaXS(1.0).fit(P, Q, Y).search(T, k=10)
    np.testing.assert_array_equal(I, np.argsort(-(T @ P.T), axis=1, kind="stable")[:, :10])


@pytest.mark.parametrize("lam,n_neighbors", [(0.5, 5), (0.1, 16), (0.0, 3)])
def test_xl_equals_a_naive_union_of_both_searches(problem, lam, n_neighbors):
    P, Q, Y, T = problem
    k = 8
    D, I = PefaXL(lam, n_neighbors).fit(P, Q, Y).search(T, k=k)
    dense_Y = Y.toarray()
    for r, q in enumerate(T.astype(np.float64)):
        erm = q @ P.T
        neighbours = np.argsort(-(q @ Q.T), kind="stable")[:n_neighbors]
        score: dict[int, float] = {}
        for j in np.argsort(-erm, kind="stable")[:k]:  # the ERM's candidates
            score[int(j)] = score.get(int(j), 0.0) + lam * erm[j]
        for i in neighbours:  # the kNN model's: items labelled for the neighbours
            for j in np.nonzero(dense_Y[i])[0]:
                score[int(j)] = score.get(int(j), 0.0) + (1 - lam) * (q @ Q[i]) / n_neighbors
        best = sorted(score, key=lambda j: (-score[j], j))[:k]
        np.testing.assert_array_equal(I[r, :len(best)], best)
        np.testing.assert_allclose(D[r, :len(best)], [score[j] for j in best], atol=1e-5)


def test_hnsw_matches_exact_search_and_is_reproducible(problem):
    P, Q, Y, T = problem
    exact = PefaXS(0.5).fit(P, Q, Y).search(T, k=10)[1]
    first = PefaXS(0.5, index="hnsw").fit(P, Q, Y).search(T, k=10)[1]
    again = PefaXS(0.5, index="hnsw").fit(P, Q, Y).search(T, k=10)[1]
    np.testing.assert_array_equal(first, again)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(first, exact)]) >= 0.99


def test_label_recall_by_hand():
    retrieved = np.array([[3, 1, 0], [2, -1, -1], [0, 1, 2]])
    relevant = sp.csr_matrix(np.array([[1, 0, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0]]))  # query 3 has none
    np.testing.assert_allclose(label_recall(retrieved, relevant, 1, per_query=True), [0.5, 1.0])
    assert label_recall(retrieved, relevant, 3) == pytest.approx((1.0 + 1.0) / 2)
    with pytest.raises(ParameterError, match="k"):
        label_recall(retrieved, relevant, 4)


def test_relevance_matrix_of_the_bundled_labels():
    from xenbench.data import load_dataset

    ds = load_dataset("wordnet-el:verb.weather")
    rows = np.arange(0, len(ds.queries), 3)
    Y = relevance_matrix(ds, rows)
    assert Y.shape == (rows.size, len(ds.items))
    for i, r in enumerate(rows[:20]):
        assert {ds.items[j].id for j in Y[i].indices} == set(ds.gold[ds.queries[r].id])
    kept = np.arange(0, len(ds.items), 2)
    assert relevance_matrix(ds, rows, kept).nnz <= Y.nnz  # gold items outside the sample are dropped


def test_lambda_sweep_rows(problem):
    P, Q, Y, T = problem
    Y_eval = Y[:30]
    sweep = lambda_sweep(P, Q, Y, T, Y_eval, [0.0, 1.0], k_values=(1, 10), n_neighbors=(4,))
    assert set(sweep["method"]) == {"PEFA-XS", "PEFA-XL k=4"} and len(sweep) == 2 * 2 * 2
    erm = sweep[sweep["lam"] == 1.0]
    assert erm["recall"].nunique() <= 2  # λ = 1: both variants rank by the ERM alone (one value per k)
    assert (sweep[sweep["lam"] == 0.0].set_index(["method", "k"])["recall"]
            >= erm.set_index(["method", "k"])["recall"]).all()  # test queries sit next to labelled ones
    chosen = select_lambda(sweep, by=("method", "k"))
    assert len(chosen) == 4 and set(chosen.columns) == {"method", "k", "lam", "recall"}
    fig = recall_vs_lambda_lines(sweep, chosen)
    assert sum(tr.marker.symbol == "star" for tr in fig.data) == 4


def test_label_coverage():
    Y_train = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 1, 0, 0]]))
    Y_eval = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1], [0, 0, 0, 0]]))
    assert label_coverage(Y_train, Y_eval) == pytest.approx(1 / 3)  # the last query has no label: left out


def test_errors(problem):
    P, Q, Y, T = problem
    with pytest.raises(ParameterError, match="lam"):
        PefaXS(1.5).fit(P, Q, Y)
    with pytest.raises(ParameterError, match="L2-normalized"):
        PefaXS().fit(2 * P, Q, Y)
    with pytest.raises(ParameterError, match="Y"):
        PefaXL().fit(P, Q, Y[:10])
    with pytest.raises(ParameterError, match="index"):
        PefaXS(index="ivf").fit(P, Q, Y)
    with pytest.raises(ParameterError, match="n_neighbors"):
        PefaXL(n_neighbors=M_TRAIN + 1).fit(P, Q, Y)
    with pytest.raises(NotFittedError):
        PefaXL().search(T, 3)
