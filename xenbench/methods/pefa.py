"""PEFA: parameter-free adapters that add a kNN model over labelled training queries to an
embedding retrieval model (ERM), with no training ([PEFA] §3).

With L2-normalized item embeddings P (n × d), training query embeddings Q (m × d) and the training
relevance matrix Y ∈ {0, 1}^{m × n}, a test query q̂ scores item j by the convex combination (Eq. 2)

    f(q̂, p_j) = λ · ⟨q̂, p_j⟩ + (1 − λ) · f_kNN(q̂, p_j),

λ = 1 being the ERM alone. Two kNN models (Eq. 4):

* **PEFA-XL** (Eq. 6): f_kNN = Σ_{i ∈ NN(q̂, Q; k)} (⟨q̂, q_i⟩ / k) · Y_ij, the items labelled for the
  test query's k nearest training queries. Two ANN indices (items, training queries); as in the
  authors' code, the candidates are the union of the two searches' items and a part an item did not
  get from its search counts 0 (no exact re-scoring).
* **PEFA-XS** (Eq. 8): f = ⟨q̂, λ · p_j + (1 − λ) · Π(Qᵀ Y_{:,j})⟩ with Π the L2 normalization (Π(0) = 0
  for items without training queries); query-independent, so one index over the mixed item vectors.

Both kNN models only reach items labelled for some training query (Y_{:,j} ≠ 0). A test query whose gold
item is such an item has a *seen* gold and can gain; one with an *unseen* gold can only lose ranks to
labelled items. :func:`seen_golds` marks them; notebook 05's driver (:mod:`xenbench.studies.pefa`) reports the
paired gain over the ERM (λ = 1) on all / seen / unseen test queries at the setting chosen on dev.

Indices are faiss inner-product indices: ``index="flat"`` (exact) or ``"hnsw"`` with the paper's
M = 32, efConstruction = 500, efSearch = 300 (built with one thread, so the graph is reproducible).

References
----------
.. [PEFA] Chang, Jiang, Wang, Jiang, Yu, Dhillon. "PEFA: Parameter-Free Adapters for Large-scale
   Embedding-based Retrieval Models", WSDM 2024: §3 (Eq. 2-8), §4 (Recall@k, HNSW settings, Table 4).
"""
from __future__ import annotations

from collections.abc import Sequence

import faiss
import numpy as np
import scipy.sparse as sp

from xenbench._validation import check_array, check_float, check_int, check_is_fitted
from xenbench.errors import NotFittedError, ParameterError  # noqa: F401  (NotFittedError: old import path)
from xenbench.metrics import topk_indices

__all__ = ["INDEXES", "PefaXL", "PefaXS", "label_coverage", "relevance_matrix", "seen_golds"]


INDEXES = ("flat", "hnsw")


def relevance_matrix(dataset, query_rows: Sequence[int], item_rows: Sequence[int] | None = None) -> sp.csr_matrix:
    """Y ∈ {0, 1}^{m × n} of ``dataset``'s gold labels: queries ``query_rows``, items ``item_rows`` (default all).

    Gold items outside ``item_rows`` are dropped (a sampled item set).
    """
    items = np.arange(len(dataset.items)) if item_rows is None else np.asarray(item_rows)
    column = {dataset.items[r].id: c for c, r in enumerate(items)}
    rows, cols = [], []
    for i, q in enumerate(np.asarray(query_rows)):
        for item_id in dataset.gold.get(dataset.queries[q].id, []):
            if item_id in column:
                rows.append(i)
                cols.append(column[item_id])
    return sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(query_rows), len(items)))


def seen_golds(Y_train: sp.spmatrix, Y_eval: sp.spmatrix) -> np.ndarray:
    """For each eval query with a relevant item (the queries :func:`~xenbench.metrics.label_recall` keeps, in
    order): whether one of its relevant items is labelled for some training query (its gold is *seen*).

    Only such queries can gain from the kNN model: items without training queries get f_kNN = 0 (Eq. 6)
    and Π(0) = 0 (Eq. 8).

    >>> seen_golds(sp.csr_matrix([[1, 0, 0]]), sp.csr_matrix([[0, 1, 0], [0, 0, 0], [1, 0, 1]]))
    array([False,  True])
    """
    Y_train, Y_eval = sp.csr_matrix(Y_train), sp.csr_matrix(Y_eval)
    if Y_train.shape[1] != Y_eval.shape[1]:
        raise ParameterError("Y_eval", f"{Y_train.shape[1]} item columns like Y_train", Y_eval.shape[1], "seen_golds")
    labelled = np.asarray(Y_train.sum(axis=0)).reshape(-1) > 0
    has = np.diff(Y_eval.indptr) > 0
    covered = np.asarray(Y_eval[:, labelled].sum(axis=1)).reshape(-1) > 0
    return covered[has]


def label_coverage(Y_train: sp.spmatrix, Y_eval: sp.spmatrix) -> float:
    """Share of eval queries (with a relevant item) whose gold is seen (:func:`seen_golds`)."""
    return float(seen_golds(Y_train, Y_eval).mean())


def _unit_rows(X: object, name: str, owner: str) -> np.ndarray:
    X = check_array(X, name, owner, expected="a finite, non-empty float array of shape (rows, d)")
    norms = np.linalg.norm(X, axis=1)
    if not np.allclose(norms, 1.0, atol=1e-3):
        raise ParameterError(name, "L2-normalized rows (PEFA's scores are cosines)",
                             f"row norms in [{norms.min():.3g}, {norms.max():.3g}]", owner)
    return np.ascontiguousarray(X, dtype=np.float32)


def _check_lam(lam: object, owner: str) -> float:
    return check_float(lam, "lam", 0, 1, owner)


def _ann(X: np.ndarray, kind: str, owner: str) -> faiss.Index:
    """Inner-product index over the rows of X (float32): exact, or HNSW with the paper's settings."""
    if kind == "flat":
        index = faiss.IndexFlatIP(X.shape[1])
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(X.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 500
        index.hnsw.efSearch = 300
    else:
        raise ParameterError("index", f"one of {INDEXES}", kind, owner)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # HNSW insertion order decides the graph: keep it sequential
    try:
        index.add(X)
    finally:
        faiss.omp_set_num_threads(threads)
    return index


def _search(index: faiss.Index, vectors: np.ndarray, kind: str, queries: np.ndarray, k: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Top-k rows of ``vectors`` by inner product, in the one order of :mod:`xenbench.metrics` (higher score first,
    equal scores by lower row): exact over every row for ``"flat"`` (faiss's order among ties is its own), and the
    HNSW candidates re-ordered by that rule for ``"hnsw"``."""
    if kind == "flat":
        D, I = np.empty((len(queries), k), np.float32), np.empty((len(queries), k), np.int64)
        for a in range(0, len(queries), 1024):  # blocks of queries: at most 1024 x n scores in memory
            S = queries[a:a + 1024] @ vectors.T
            I[a:a + 1024] = topk_indices(S, k)
            D[a:a + 1024] = np.take_along_axis(S, I[a:a + 1024], axis=1)
        return D, I
    D, I = index.search(queries, k)
    order = np.lexsort((np.where(I < 0, np.iinfo(np.int64).max, I), -np.where(I < 0, -np.inf, D)), axis=1)
    return np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1).astype(np.int64)


class PefaXS:
    """PEFA-XS (Eq. 8): one index over λ · p_j + (1 − λ) · Π(Qᵀ Y_{:,j}).

    Parameters
    ----------
    lam : float, default 0.5
        λ in [0, 1]; 1 is the ERM alone.
    index : {"flat", "hnsw"}, default "flat"
        Exact inner-product search or HNSW (M = 32, efC = 500, efS = 300).

    Examples
    --------
    >>> P = np.eye(3, dtype=np.float32); Q = P[[2]]; Y = sp.csr_matrix(np.array([[1.0, 0, 0]]))
    >>> PefaXS(lam=0.3).fit(P, Q, Y).search(P[[2]], k=1)[1]  # item 0 is labelled for this query
    array([[0]])
    """

    def __init__(self, lam: float = 0.5, *, index: str = "flat") -> None:
        self.lam = lam
        self.index = index

    def fit(self, P: np.ndarray, Q: np.ndarray, Y: sp.spmatrix) -> "PefaXS":
        """Build the index of mixed item vectors from P (n × d), Q (m × d) and Y (m × n)."""
        owner = type(self).__name__
        lam = _check_lam(self.lam, owner)
        P, Q = _unit_rows(P, "P", owner), _unit_rows(Q, "Q", owner)
        Y = _check_Y(Y, Q.shape[0], P.shape[0], owner)
        knn = np.asarray(Y.T @ Q, dtype=np.float64)  # Qᵀ Y_{:,j} for every item, (n, d)
        norms = np.linalg.norm(knn, axis=1, keepdims=True)
        knn = np.divide(knn, norms, out=np.zeros_like(knn), where=norms > 0)  # Π, with Π(0) = 0
        self.item_vectors_ = (lam * P + (1.0 - lam) * knn).astype(np.float32)
        self.index_ = _ann(self.item_vectors_, self.index, owner)
        return self

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k items of each test query (nq × d, L2-normalized): scores D and item rows I, (nq, k)."""
        check_is_fitted(self, "index_", "fit(P, Q, Y)")
        owner = f"{type(self).__name__}.search"
        queries = _unit_rows(queries, "queries", owner)
        k = check_int(k, "k", 1, self.index_.ntotal, owner, "n_items")
        return _search(self.index_, self.item_vectors_, self.index, queries, k)


class PefaXL:
    """PEFA-XL (Eq. 6): the ERM's candidates united with the items of the k nearest training queries.

    Parameters
    ----------
    lam : float, default 0.5
        λ in [0, 1]; 1 is the ERM alone.
    n_neighbors : int, default 32
        k of NN(q̂, Q; k), the training queries the kNN model reads (the paper tries 16, 32, 64).
    index : {"flat", "hnsw"}, default "flat"
        Kind of both indices.
    """

    def __init__(self, lam: float = 0.5, n_neighbors: int = 32, *, index: str = "flat") -> None:
        self.lam = lam
        self.n_neighbors = n_neighbors
        self.index = index

    def fit(self, P: np.ndarray, Q: np.ndarray, Y: sp.spmatrix) -> "PefaXL":
        """Build the item index over P (n × d) and the training-query index over Q (m × d); keep Y (m × n)."""
        owner = type(self).__name__
        _check_lam(self.lam, owner)
        P, Q = _unit_rows(P, "P", owner), _unit_rows(Q, "Q", owner)
        self.Y_ = _check_Y(Y, Q.shape[0], P.shape[0], owner)
        check_int(self.n_neighbors, "n_neighbors", 1, Q.shape[0], owner, "number of training queries")
        self.P_ = P
        self.item_index_ = _ann(P, self.index, owner)
        self.query_index_ = _ann(Q, self.index, owner)
        return self

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k items of each test query by Eq. 6 over the union of both searches' candidates.

        Returns
        -------
        D : ndarray of shape (nq, k), float32
            Scores; -inf where fewer than k candidates exist.
        I : ndarray of shape (nq, k), int64
            Item rows, best first (ties: lower row); -1 where fewer than k candidates exist.
        """
        check_is_fitted(self, "item_index_", "fit(P, Q, Y)")
        owner = f"{type(self).__name__}.search"
        queries = _unit_rows(queries, "queries", owner)
        n_items = self.item_index_.ntotal
        k = check_int(k, "k", 1, n_items, owner, "n_items")
        lam, kk = float(self.lam), int(self.n_neighbors)
        D_p, I_p = _search(self.item_index_, self.P_, self.index, queries, k)  # the ERM's candidates, ⟨q̂, p_j⟩
        if lam == 1.0:  # the ERM alone (Eq. 2): kNN-only candidates must not enter with a score of 0
            return D_p.astype(np.float32), I_p
        D_q, I_q = self.query_index_.search(queries, kk)  # NN(q̂, Q; k) and ⟨q̂, q_i⟩
        nq = queries.shape[0]
        found = I_q >= 0
        W = sp.csr_matrix(((D_q[found] / kk).astype(np.float64), (np.nonzero(found)[0], I_q[found])),
                          shape=(nq, self.Y_.shape[0]))
        knn = (W @ self.Y_).tocsr()  # f_kNN on the items labelled for the neighbours, (nq, n)
        D = np.full((nq, k), -np.inf, np.float32)
        I = np.full((nq, k), -1, np.int64)
        for r in range(nq):
            # Union of both candidate sets; an item missing from one search gets 0 for that part.
            lo, hi = knn.indptr[r], knn.indptr[r + 1]
            erm = I_p[r] >= 0
            cols = np.concatenate([I_p[r][erm], knn.indices[lo:hi]])
            part = np.concatenate([lam * D_p[r][erm].astype(np.float64), (1.0 - lam) * knn.data[lo:hi]])
            items, where = np.unique(cols, return_inverse=True)
            score = np.bincount(where, weights=part, minlength=items.size)
            order = np.lexsort((items, -score))[:k]  # score desc, then item row asc
            D[r, :order.size], I[r, :order.size] = score[order], items[order]
        return D, I


def _check_Y(Y: object, m: int, n: int, owner: str) -> sp.csr_matrix:
    if not sp.issparse(Y) and not isinstance(Y, np.ndarray):
        raise ParameterError("Y", f"a (sparse) {m} x {n} relevance matrix", type(Y).__name__, owner)
    Y = sp.csr_matrix(Y, dtype=np.float64)
    if Y.shape != (m, n):
        raise ParameterError("Y", f"shape (m={m} training queries, n={n} items)", Y.shape, owner)
    return Y

