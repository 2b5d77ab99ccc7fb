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
labelled items. :func:`seen_golds` marks them, :func:`evaluate_per_query` and :func:`subset_gains` report
the paired gain over the ERM (λ = 1) on all / seen / unseen test queries at the setting chosen on dev
(:func:`choose_on_dev`), and :func:`tune_and_test` runs one split end to end.

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
import pandas as pd
import scipy.sparse as sp

from xenbench._validation import check_array, check_choice, check_float, check_int, check_is_fitted
from xenbench.errors import NotFittedError, ParameterError  # noqa: F401  (NotFittedError: old import path)
from xenbench.metrics import label_recall, mean_se, topk_indices

__all__ = ["SUBSETS", "PefaXL", "PefaXS", "across_seeds", "choose_on_dev", "evaluate_per_query", "gain_by_seen_share",
           "label_coverage", "lambda_sweep", "paired_comparisons", "relevance_matrix", "seen_golds", "subset_gains",
           "tune_and_test"]

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


def lambda_sweep(P: np.ndarray, Q_train: np.ndarray, Y_train: sp.spmatrix, Q_eval: np.ndarray, Y_eval: sp.spmatrix,
                 lambdas: Sequence[float], k_values: Sequence[int] = (1, 10, 100), *,
                 n_neighbors: Sequence[int] = (32,), index: str = "flat") -> pd.DataFrame:
    """Recall@k of PEFA-XS and PEFA-XL (each n_neighbors) for every λ on labelled eval queries.

    Returns
    -------
    DataFrame
        Columns ``method`` ("PEFA-XS", "PEFA-XL k=32", ...), ``lam``, ``k``, ``recall`` (mean over eval
        queries with a relevant item), ``recall_se`` and ``n_test_queries``.
    """
    k_max = max(k_values)
    models = [("PEFA-XS", lambda lam: PefaXS(lam, index=index))]
    models += [(f"PEFA-XL k={kk}", lambda lam, kk=kk: PefaXL(lam, kk, index=index)) for kk in n_neighbors]
    rows = []
    for name, make in models:
        for lam in lambdas:
            _, I = make(lam).fit(P, Q_train, Y_train).search(Q_eval, k_max)
            for k in k_values:
                r = label_recall(I, Y_eval, k, per_query=True)
                recall, se = mean_se(r)
                rows.append({"method": name, "lam": float(lam), "k": int(k), "recall": recall, "recall_se": se,
                             "n_test_queries": int(r.size)})
    return pd.DataFrame(rows)


# -- tuned on dev, reported per test query: seen and unseen golds ----------------------------------------------------

def _model(method: str, lam: float, n_neighbors: int, index: str) -> PefaXS | PefaXL:
    return PefaXS(lam, index=index) if method == "PEFA-XS" else PefaXL(lam, n_neighbors, index=index)


def choose_on_dev(sweep_dev: pd.DataFrame) -> pd.DataFrame:
    """The setting of each method per Recall@k cut-off chosen on dev queries (a :func:`lambda_sweep`).

    PEFA-XS: the λ with the best dev recall; PEFA-XL: the (k of NN, λ) pair with the best dev recall (ties:
    smaller λ, then fewer neighbours).

    Returns
    -------
    DataFrame
        Columns ``method`` ("PEFA-XS", "PEFA-XL"), ``k``, ``lam``, ``n_neighbors`` (0 for XS) and
        ``dev_recall``.
    """
    df = sweep_dev.copy()
    df["n_neighbors"] = df["method"].str.extract(r"k=(\d+)", expand=False).fillna("0").astype(int)
    df["method"] = np.where(df["method"].str.startswith("PEFA-XL"), "PEFA-XL", df["method"])
    df = df.sort_values(["method", "k", "recall", "lam", "n_neighbors"], ascending=[True, True, False, True, True])
    best = df.groupby(["method", "k"], sort=False).head(1)
    return (best[["method", "k", "lam", "n_neighbors", "recall"]].rename(columns={"recall": "dev_recall"})
            .sort_values(["method", "k"]).reset_index(drop=True))


def evaluate_per_query(P: np.ndarray, Q_train: np.ndarray, Y_train: sp.spmatrix, Q_eval: np.ndarray,
                       Y_eval: sp.spmatrix, chosen: pd.DataFrame, *, index: str = "flat",
                       eval_rows: np.ndarray | None = None) -> pd.DataFrame:
    """Recall@k of every eval query (with a relevant item) for each ``chosen`` setting and for the DE alone.

    Parameters
    ----------
    chosen : DataFrame
        Rows of :func:`choose_on_dev`: ``method``, ``k``, ``lam``, ``n_neighbors``.
    eval_rows : int ndarray of shape (n_eval,), optional
        The dataset rows of the eval queries (the rows of ``Q_eval``), so a query is known across splits.

    Returns
    -------
    DataFrame
        One row per (setting, eval query): ``method``, ``k``, ``lam``, ``n_neighbors``, ``query`` (position among
        the eval queries with a relevant item), ``row`` (its dataset row; with ``eval_rows``), ``seen``
        (:func:`seen_golds`), ``recall`` and ``de_recall`` (the DE, λ = 1, on the same query: a paired comparison).
    """
    k_max = int(chosen["k"].max())
    seen = seen_golds(Y_train, Y_eval)
    has = np.diff(sp.csr_matrix(Y_eval).indptr) > 0  # the queries label_recall keeps, in order
    rows = None if eval_rows is None else np.asarray(eval_rows, dtype=np.int64)[has]
    _, I_de = PefaXS(1.0, index=index).fit(P, Q_train, Y_train).search(Q_eval, k_max)
    searched: dict[tuple[str, float, int], np.ndarray] = {}
    frames = []
    for row in chosen.itertuples(index=False):
        key = (row.method, float(row.lam), int(row.n_neighbors))
        if key not in searched:
            searched[key] = _model(row.method, *key[1:], index).fit(P, Q_train, Y_train).search(Q_eval, k_max)[1]
        k = int(row.k)
        r = label_recall(searched[key], Y_eval, k, per_query=True)
        frames.append(pd.DataFrame({
            "method": row.method, "k": k, "lam": float(row.lam), "n_neighbors": int(row.n_neighbors),
            "query": np.arange(r.size)} | ({} if rows is None else {"row": rows}) | {
            "seen": seen, "recall": r, "de_recall": label_recall(I_de, Y_eval, k, per_query=True)}))
    return pd.concat(frames, ignore_index=True)


def subset_gains(per_query: pd.DataFrame) -> pd.DataFrame:
    """Recall and gain over the DE on all eval queries and on those whose gold is seen / unseen in training.

    The gain is the mean of the per-query differences recall − de_recall (paired); ``gain_se`` is its
    standard error and ``p_value`` the two-sided paired t-test (NaN below 2 queries or when every
    difference is 0). ``share`` is the subset's share of the eval queries, so the overall recall is the
    share-weighted mean of the seen and unseen recalls.

    Returns
    -------
    DataFrame
        Columns ``method``, ``k``, ``lam``, ``n_neighbors``, ``subset`` ("all", "seen", "unseen"), ``n``,
        ``share``, ``recall``, ``de_recall``, ``gain``, ``gain_se``, ``p_value``.
    """
    from scipy import stats

    rows = []
    for (method, k, lam, nn), g in per_query.groupby(["method", "k", "lam", "n_neighbors"], sort=False):
        for subset, mask in (("all", np.ones(len(g), bool)), ("seen", g["seen"].to_numpy(bool)),
                             ("unseen", ~g["seen"].to_numpy(bool))):
            sub = g[mask]
            d = (sub["recall"] - sub["de_recall"]).to_numpy(np.float64)
            row = {"method": method, "k": int(k), "lam": float(lam), "n_neighbors": int(nn), "subset": subset,
                   "n": int(d.size), "share": float(d.size / len(g))}
            if d.size:
                gain, se = mean_se(d)
                p = float(stats.ttest_1samp(d, 0.0).pvalue) if d.size > 1 and np.any(d != d[0]) else float("nan")
                row.update(recall=float(sub["recall"].mean()), de_recall=float(sub["de_recall"].mean()), gain=gain,
                           gain_se=se, p_value=p)
            else:
                row.update(recall=np.nan, de_recall=np.nan, gain=np.nan, gain_se=np.nan, p_value=np.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def across_seeds(gains: pd.DataFrame, by: Sequence[str] = ("split", "method", "k", "subset")) -> pd.DataFrame:
    """Mean over split seeds of :func:`subset_gains` rows (with a ``seed`` column), and their spread.

    Returns
    -------
    DataFrame
        Columns ``by``, ``n_seeds``, ``share``, ``n`` (means), ``recall``, ``de_recall``, ``gain`` (means over
        seeds), ``gain_sd`` (standard deviation over seeds, 0 for one seed), ``gain_min``, ``gain_max``,
        ``gain_se`` (root mean square of the per-seed paired standard errors: the noise of one split) and
        ``seeds_positive`` (seeds with gain > 0).
    """
    by = list(by)
    g = gains.dropna(subset=["gain"]).groupby(by, sort=False)
    out = g.agg(n_seeds=("seed", "nunique"), share=("share", "mean"), n=("n", "mean"), recall=("recall", "mean"),
                de_recall=("de_recall", "mean"), gain=("gain", "mean"), gain_min=("gain", "min"),
                gain_max=("gain", "max"))
    out["gain_sd"] = g["gain"].std(ddof=1).fillna(0.0)
    out["gain_se"] = g["gain_se"].apply(lambda s: float(np.sqrt(np.mean(np.square(s)))))
    out["seeds_positive"] = g["gain"].apply(lambda s: int((s > 0).sum()))
    return out.reset_index()


#: Subsets of the test queries a gain is reported on (:func:`subset_gains`).
SUBSETS = ("all", "seen", "unseen")


def paired_comparisons(per_query: pd.DataFrame, *, confidence: float = 0.95) -> pd.DataFrame:
    """Notebook 05's declared family under the one verdict rule: PEFA against the DE per (split regime, method, k,
    subset of test queries).

    Each split seed is one run (PEFA and the DE are deterministic given the split). Per cell,
    :func:`xenbench.methods.protocol.compare_runs` of the method's and the DE's per-query recalls: the per-query paired
    test on each query's difference averaged over the seeds in which it was a test query (``mean``, ``lo``, ``hi``,
    ``p``, ``p_wilcoxon``, ``n`` distinct queries; the p-values cover the queries only) and the 95% t-interval of the
    per-seed mean gains across the independent splits (``run_mean``, ``run_lo``, ``run_hi``, ``n_runs``). A subset
    that holds every test query in every seed (``seen`` when every gold is seen) is the ``all`` test again: it is
    left out (``same_as_all`` lists it) so that a test counts once in the family. Cells with fewer than 2 queries
    are left out. :func:`xenbench.methods.protocol.decide` adds ``p_holm``, ``p_wilcoxon_holm`` and ``verdict``
    (Holm over every row: the family).

    Parameters
    ----------
    per_query : DataFrame
        :func:`evaluate_per_query` rows (with ``row``) of every run, with columns ``split`` (the regime) and
        ``seed``.

    Returns
    -------
    DataFrame
        Columns ``split``, ``method``, ``k``, ``subset``, the :func:`~xenbench.methods.protocol.compare_runs` fields,
        ``same_as_all`` (subsets of this cell's (split, method, k) equal to all), ``p_holm``, ``p_wilcoxon_holm``,
        ``verdict``.
    """
    from xenbench.methods.protocol import compare_runs, decide

    owner = "pefa.paired_comparisons"
    need = {"split", "seed", "method", "k", "row", "seen", "recall", "de_recall"}
    if not isinstance(per_query, pd.DataFrame) or not need <= set(per_query.columns):
        got = sorted(per_query.columns) if isinstance(per_query, pd.DataFrame) else type(per_query).__name__
        raise ParameterError("per_query", f"evaluate_per_query rows with columns {sorted(need)}", got, owner)
    out = []
    for (regime, method, k), cell in per_query.groupby(["split", "method", "k"], sort=False):
        seeds = list(cell.groupby("seed", sort=True))
        masks = {"all": [np.ones(len(g), bool) for _, g in seeds], "seen": [g["seen"].to_numpy(bool) for _, g in seeds]}
        masks["unseen"] = [~m for m in masks["seen"]]
        same = [s for s in SUBSETS[1:] if all(m.all() for m in masks[s])]  # the all test again: counted once
        rows = []
        for subset in [s for s in SUBSETS if s not in same]:
            runs = [{"seed": seed, "rows": g["row"].to_numpy()[m], "per_query": g["recall"].to_numpy(np.float64)[m],
                     "de": g["de_recall"].to_numpy(np.float64)[m]} for (seed, g), m in zip(seeds, masks[subset]) if m.any()]
            if sum(r["rows"].size for r in runs) < 2:
                continue
            a = pd.DataFrame(runs).drop(columns="de")
            b = a.assign(per_query=[r["de"] for r in runs])
            rows.append({"split": regime, "method": method, "k": int(k), "subset": subset,
                         **compare_runs(a, b, split="seed", seed=None, confidence=confidence),
                         "same_as_all": ", ".join(same)})
        out += rows
    columns = ["split", "method", "k", "subset", "mean", "se", "lo", "hi", "p", "p_wilcoxon", "n", "n_a_better",
               "n_b_better", "run_mean", "run_lo", "run_hi", "n_runs", "same_as_all"]
    return decide(pd.DataFrame(out, columns=columns if not out else None))


def gain_by_seen_share(summary: pd.DataFrame, k: int, title: str | None = None):
    """Plotly figure: gain over the DE (points) against the share of seen golds, per split regime and method.

    Each regime's "all" point sits at its seen share; its "seen" and "unseen" subsets at shares 1 and 0, joined
    by a line (the overall gain is the share-weighted mean of the two, so it lies on that line). Error bars:
    ±2 paired standard errors of one split.
    """
    import plotly.graph_objects as go

    df = summary[summary["k"] == k]
    fig = go.Figure()
    for (split, method), g in df.groupby(["split", "method"], sort=False):
        g = g.set_index("subset")
        seen_share = float(g.loc["seen", "share"]) if "seen" in g.index else 0.0
        x = [0.0 if s == "unseen" else 1.0 if s == "seen" else seen_share for s in g.index]
        order = np.argsort(x)
        fig.add_trace(go.Scatter(
            x=np.asarray(x)[order], y=100 * g["gain"].to_numpy()[order], mode="lines+markers",
            name=f"{method}, {split} split", text=list(np.asarray(g.index)[order]),
            error_y={"type": "data", "array": 200 * g["gain_se"].to_numpy()[order]},
            hovertemplate="%{text}: seen share %{x:.2f}, gain %{y:+.1f} points<extra></extra>"))
    fig.add_hline(y=0, line_dash="dot")
    fig.update_layout(title=title or f"PEFA's Recall@{k} gain over the DE vs the share of seen golds",
                      xaxis_title="share of test queries whose gold is labelled in training",
                      yaxis_title=f"Recall@{k} gain (points)")
    return fig


def tune_and_test(dataset, P: np.ndarray, U: np.ndarray, split, lambdas: Sequence[float], k_values: Sequence[int],
                  n_neighbors: Sequence[int], *, index: str = "flat") -> dict[str, pd.DataFrame]:
    """One split, end to end: Y from the training queries, the λ (and XL's k) sweep on dev, the chosen settings
    (:func:`choose_on_dev`) scored per test query against the DE, and the gains on all / seen / unseen golds.

    Parameters
    ----------
    dataset : Dataset
        Items and gold labels; P (n_items × d) and U (n_queries × d) are its L2-normalized DE embeddings.
    split : :class:`xenbench.studies.splits.ThreeWaySplit`
        Query rows ``train``, ``dev`` and ``test``.

    Returns
    -------
    dict
        ``sweep_dev`` (:func:`lambda_sweep` on dev), ``chosen``, ``per_query`` (:func:`evaluate_per_query` on
        test, with each query's dataset ``row``), ``gains`` (:func:`subset_gains`) and ``coverage`` (one row: seen
        shares of dev and test).
    """
    Y_train, Y_dev, Y_test = (relevance_matrix(dataset, rows) for rows in (split.train, split.dev, split.test))
    Q_train = U[split.train]
    sweep_dev = lambda_sweep(P, Q_train, Y_train, U[split.dev], Y_dev, lambdas, k_values, n_neighbors=n_neighbors,
                             index=index)
    chosen = choose_on_dev(sweep_dev)
    per_query = evaluate_per_query(P, Q_train, Y_train, U[split.test], Y_test, chosen, index=index,
                                   eval_rows=split.test)
    coverage = pd.DataFrame([{"train": int(split.train.size), "dev": int(split.dev.size), "test": int(split.test.size),
                              "seen_dev": label_coverage(Y_train, Y_dev), "seen_test": label_coverage(Y_train, Y_test)}])
    return {"sweep_dev": sweep_dev, "chosen": chosen, "per_query": per_query, "gains": subset_gains(per_query),
            "coverage": coverage}
