"""Retrieval metrics, approximation errors and CE-call accounting for k-NN search with cross-encoders.

Everything here works on a precomputed exact score matrix ``M`` of shape ``(n_queries, n_items)``:
a cross-encoder (CE) "call" f(q, i) is a lookup ``M[q, i]``, counted by :class:`BudgetCounter`.

Ties
----
Every top-k in xenbench uses one total order on items: **higher score first, and among equal scores
the lower item index first** (a stable sort of ``-scores``). :func:`topk_indices` implements it (numpy),
:func:`xenbench.models.retrievers.topk` calls it, the batched ADACUR/AXN search has a torch twin
(``xenbench.methods.adacur.batched._topk_stable``), and the ADACUR/ANNCUR code follows it, so "the exact top-k" T is always a well-defined set of exactly k
items. A method that retrieves an item tied with, but not inside, T gets no credit for it; with
float32 CE scores exact ties are rare, and the rule keeps the metric monotone in the retrieved set
(a superset of T always scores 1.0).

References
----------
.. [ANNCUR] Yadav et al., "Efficient Nearest Neighbor Search for Cross-Encoder Models using Matrix
   Factorization", EMNLP 2022, §3.2 (Top-k-Recall@m, budget B_CE).
.. [ADACUR] Yadav et al., "Adaptive Selection of Anchor Items for CUR-based k-NN search with
   Cross-Encoders", Findings of EMNLP 2023, §3 (evaluation metric), Fig. 7 (approximation error).
"""
from __future__ import annotations

import numpy as np

from xenbench._validation import check_int
from xenbench.errors import BudgetExceededError, ParameterError

__all__ = [
    "BudgetCounter",
    "BudgetExceededError",
    "approximation_errors",
    "LABEL_MEASURES",
    "MAX_GRADE",
    "exact_topk",
    "label_metrics",
    "label_recall",
    "mean_se",
    "recall_under_budget",
    "topk_indices",
    "topk_of_lists",
    "topk_recall",
]


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def _check_matrix(M: np.ndarray, name: str, owner: str) -> np.ndarray:
    M = np.asarray(M)
    if M.ndim != 2 or M.shape[0] < 1 or M.shape[1] < 1:
        raise ParameterError(name, "a non-empty 2-d array of shape (n_queries, n_items)",
                             f"shape {M.shape}", owner)
    if not np.issubdtype(M.dtype, np.floating):
        raise ParameterError(name, "a floating-point array", f"dtype {M.dtype}", owner)
    return M


def _check_k(k: object, upper: int, owner: str, name: str = "k", what: str = "n_items") -> int:
    return check_int(k, name, 1, upper, owner, f"{what}={upper}")


def _check_retrieved(retrieved: np.ndarray, n_queries: int, n_items: int, owner: str) -> np.ndarray:
    retrieved = np.asarray(retrieved)
    if retrieved.ndim != 2 or retrieved.shape[0] != n_queries or not np.issubdtype(retrieved.dtype, np.integer):
        raise ParameterError("retrieved", f"an int array of shape (n_queries={n_queries}, m)",
                             f"{retrieved.dtype} array of shape {retrieved.shape}", owner)
    if retrieved.size and (retrieved.min() < -1 or retrieved.max() >= n_items):
        raise ParameterError("retrieved", f"item indices in [0, n_items={n_items}) or -1 for padding",
                             f"values in [{retrieved.min()}, {retrieved.max()}]", owner)
    return retrieved.astype(np.int64, copy=False)


# ----------------------------------------------------------------------------------------------
# top-k with the documented tie rule
# ----------------------------------------------------------------------------------------------
def topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest scores per row, best first; ties go to the lower item index.

    Equal to ``np.argsort(-scores, axis=1, kind="stable")[:, :k]`` but linear in ``n_items``
    (a partition finds the k-th value, then ties at that value are resolved by index), which matters
    for the (n_queries, n_items) matrices of a whole domain.

    Parameters
    ----------
    scores : ndarray of shape (n_queries, n_items)
        Scores without NaN; ``-inf`` is allowed (it marks masked items).
    k : int
        Number of items to return, ``1 <= k <= n_items``.

    Returns
    -------
    I : ndarray of shape (n_queries, k), int64
        Item indices sorted by (score descending, index ascending).

    Examples
    --------
    >>> topk_indices(np.array([[0.5, 2.0, 2.0, 1.0]]), 2)
    array([[1, 2]])
    """
    scores = np.asarray(scores)
    n_queries, n_items = scores.shape
    k = _check_k(k, n_items, "topk_indices")
    # The k-th largest value v per row: everything above v is in, ties at v fill the rest by index.
    v = np.partition(scores, n_items - k, axis=1)[:, n_items - k:n_items - k + 1]
    above = scores > v
    at = scores == v
    need = k - above.sum(axis=1, keepdims=True)
    select = above | at
    # Only rows with more ties at v than places left need the running count (without ties, none does).
    crowded = np.flatnonzero(at.sum(axis=1) > need[:, 0])
    if crowded.size:
        select[crowded] = above[crowded] | (at[crowded] & (np.cumsum(at[crowded], axis=1) <= need[crowded]))
    cols = np.nonzero(select)[1].reshape(n_queries, k)  # row-major: ascending item index per row
    chosen = np.take_along_axis(scores, cols, axis=1)
    order = np.argsort(-chosen, axis=1, kind="stable")  # stable keeps index order among ties
    return np.take_along_axis(cols, order, axis=1).astype(np.int64, copy=False)


def topk_of_lists(D: np.ndarray, I: np.ndarray, n_items: int, k: int) -> np.ndarray:
    """:func:`topk_indices` of the rows a top-m search stands for (score ``D`` at item ``I``, ``-inf`` at every other
    item), without building those (n_queries, n_items) rows.

    The one tie rule holds: the found items by (score descending, index ascending), then, where fewer than ``k`` have
    a finite score, the lowest item indices not among them (the order of the ``-inf`` items in the dense row).

    Parameters
    ----------
    D : ndarray of shape (n_queries, m)
        Scores as a search returns them (faiss: float32); ``-inf`` marks an empty place.
    I : ndarray of shape (n_queries, m)
        Item indices in [0, n_items), ``-1`` for an empty place; distinct within a row.
    n_items, k : int
        Items of the dense row, and places to return (``1 <= k <= n_items``).

    Returns
    -------
    ndarray of shape (n_queries, k), int64
        Equal to ``topk_indices(dense, k)`` where ``dense[q, I[q, j]] = D[q, j]`` and ``-inf`` elsewhere.

    Examples
    --------
    >>> topk_of_lists(np.array([[1.0, 2.0, 2.0]]), np.array([[4, 3, 5]]), 6, 5)
    array([[3, 5, 4, 0, 1]])
    """
    owner = "topk_of_lists"
    n_items = check_int(n_items, "n_items", 1, None, owner)
    k = _check_k(k, n_items, owner)
    D, I = np.asarray(D, dtype=np.float64), np.asarray(I)
    if D.ndim != 2 or D.shape != I.shape or not np.issubdtype(I.dtype, np.integer):
        raise ParameterError("D, I", "a float and an int array of one shape (n_queries, m)",
                             f"{D.dtype} {D.shape} and {I.dtype} {I.shape}", owner)
    if I.size and (I.min() < -1 or I.max() >= n_items):
        raise ParameterError("I", f"item indices in [0, n_items={n_items}) or -1", f"[{I.min()}, {I.max()}]", owner)
    found = (I >= 0) & (D > -np.inf)
    key_i = np.where(found, I, n_items).astype(np.int64)  # an empty place sorts after every found item
    order = np.lexsort((key_i, -np.where(found, D, -np.inf)), axis=-1)[:, :k]
    out = np.full((I.shape[0], k), n_items, dtype=np.int64)
    out[:, :order.shape[1]] = np.take_along_axis(key_i, order, axis=1)
    n_found = found.sum(axis=1)
    for row in np.flatnonzero(n_found < k):  # short lists: the -inf items of the dense row, lowest index first
        n = int(n_found[row])
        out[row, n:] = np.setdiff1d(np.arange(k), out[row, :n], assume_unique=True)[:k - n]
    return out


def exact_topk(M_exact: np.ndarray, k: int) -> np.ndarray:
    """The exact top-k items T of every query (the ground truth of Top-k-Recall).

    Parameters
    ----------
    M_exact : ndarray of shape (n_queries, n_items)
        Exact CE scores f(q, i).
    k : int
        Number of neighbours.

    Returns
    -------
    T : ndarray of shape (n_queries, k), int64
        Best first, ties to the lower item index (see module docstring).
    """
    M_exact = _check_matrix(M_exact, "M_exact", "exact_topk")
    return topk_indices(M_exact, _check_k(k, M_exact.shape[1], "exact_topk"))


# ----------------------------------------------------------------------------------------------
# recall
# ----------------------------------------------------------------------------------------------
def topk_recall(M_exact: np.ndarray, retrieved: np.ndarray, k: int, *,
                per_query: bool = False) -> float | np.ndarray:
    """Top-k-Recall@m: the fraction of the exact top-k items found after exact re-ranking.

    T = exact top-k items of the query; S = the m items a method retrieved; the method re-ranks S by
    exact scores and keeps top-k(S); recall = |T ∩ top-k(S)| / k ([ANNCUR] §3.2, [ADACUR] §3).

    Because T and top-k(S) use the same total order (module docstring), every item of S ∩ T
    outranks every item of S \\ T, so top-k(S) ⊇ S ∩ T and the recall equals |T ∩ S| / k; the
    re-ranking step needs no extra work and the order of ``retrieved`` does not matter.

    Parameters
    ----------
    M_exact : ndarray of shape (n_queries, n_items)
        Exact CE scores.
    retrieved : int ndarray of shape (n_queries, m)
        Retrieved item indices S per query, any order; duplicates count once and ``-1`` marks
        padding (e.g. the ``I`` of a faiss-style search that found fewer than m items). m < k is
        allowed (then recall ≤ m/k).
    k : int
        Size of the exact neighbourhood T, ``1 <= k <= n_items``.
    per_query : bool, default False
        Return the recall of every query instead of the mean.

    Returns
    -------
    recall : float or ndarray of shape (n_queries,)
        In [0, 1] (the papers report ×100).

    Examples
    --------
    >>> M = np.array([[0.9, 0.1, 0.5, 0.3]])
    >>> topk_recall(M, np.array([[2, 1]]), k=2)  # T = {0, 2}, S ∩ T = {2}
    0.5
    """
    M_exact = _check_matrix(M_exact, "M_exact", "topk_recall")
    n_queries, n_items = M_exact.shape
    k = _check_k(k, n_items, "topk_recall")
    retrieved = _check_retrieved(retrieved, n_queries, n_items, "topk_recall")
    in_T = np.zeros((n_queries, n_items), dtype=bool)
    np.put_along_axis(in_T, topk_indices(M_exact, k), True, axis=1)
    # A boolean "retrieved" mask de-duplicates S for free; -1 padding is dropped before marking.
    in_S = np.zeros((n_queries, n_items), dtype=bool)
    rows, cols = np.nonzero(retrieved >= 0)
    in_S[rows, retrieved[rows, cols]] = True
    recall = (in_T & in_S).sum(axis=1) / k
    return recall if per_query else float(recall.mean())


def mean_se(values: np.ndarray) -> tuple[float, float]:
    """Mean of per-query values and its standard error (0.0 for a single value).

    >>> mean_se(np.array([1.0, 3.0]))  # standard deviation √2, over √2
    (2.0, 1.0)
    """
    values = np.asarray(values, dtype=np.float64)
    se = float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else 0.0
    return float(values.mean()), se


def label_recall(retrieved: np.ndarray, relevant, k: int, *, per_query: bool = False) -> float | np.ndarray:
    """Recall@k against relevance labels: |top-k ∩ relevant| / |relevant| ([PEFA] §4 "Evaluation Protocols").

    Queries without a relevant item are left out (their recall is undefined).

    Parameters
    ----------
    retrieved : int ndarray of shape (nq, m)
        Item rows, best first; ``-1`` pads. Only the first k count.
    relevant : (sparse) array of shape (nq, n_items)
        Non-zero where an item is relevant to a query.
    k : int
        ``1 <= k <= m``.
    per_query : bool, default False
        Return one value per query that has a relevant item instead of the mean.

    Examples
    --------
    >>> label_recall(np.array([[3, 1, 0]]), np.array([[1, 0, 0, 1]]), k=2)  # item 3 of {0, 3} in the top 2
    0.5
    """
    import scipy.sparse as sp

    retrieved = np.asarray(retrieved)
    rel = sp.csr_matrix(relevant)
    if retrieved.ndim != 2 or retrieved.shape[0] != rel.shape[0] or not np.issubdtype(retrieved.dtype, np.integer):
        raise ParameterError("retrieved", f"an int array with {rel.shape[0]} rows (one per query of relevant)",
                             f"{retrieved.dtype} array of shape {retrieved.shape}", "label_recall")
    k = _check_k(k, retrieved.shape[1], "label_recall", what="retrieved.shape[1]")
    top = retrieved[:, :k]
    n_rel = np.diff(rel.indptr)
    rows = np.repeat(np.arange(top.shape[0]), k)
    cols = top.reshape(-1)
    valid = cols >= 0
    hits = np.zeros(top.shape[0])
    np.add.at(hits, rows[valid], np.asarray(rel[rows[valid], cols[valid]] != 0).reshape(-1))
    has = n_rel > 0
    recall = hits[has] / n_rel[has]
    return recall if per_query else float(recall.mean())


#: The largest relevance grade (in absolute value) read or measured: trec_eval, under ir-measures, sizes its arrays by
#: the largest grade (grade 10^9 took 7.8 GB and 20 s for one call, and under a memory cap gave nDCG 0 silently).
#: Graded qrels in use (TREC, BEIR, MS MARCO) stay within 0-4.
MAX_GRADE: int = 1000

#: The label measures every notebook reports beside Top-k-Recall, in ir-measures' names: nDCG@10, MRR@10 (``RR@10``,
#: the reciprocal rank of the first relevant item within the top 10, averaged over queries), R@100 and Success@k
#: (a relevant item within the top k; with one relevant item per query, entity linking's accuracy@k).
LABEL_MEASURES: tuple[str, ...] = ("nDCG@10", "RR@10", "R@100", "Success@1", "Success@10")


def label_metrics(ranked: np.ndarray, relevance, measures=LABEL_MEASURES, *,
                  per_query: bool = False) -> dict[str, float] | tuple[np.ndarray, dict[str, np.ndarray]]:
    """Label measures of ranked lists against graded relevance, computed by ir-measures (trec_eval's definitions).

    The one place xenbench computes nDCG, MRR, R@k and Success@k: the lists and grades are handed to
    ``ir_measures.iter_calc`` (pytrec_eval underneath), so a run file and qrels written from the same lists
    (:func:`xenbench.data.trec.write_trec_run`) give the same numbers in trec_eval, ir-measures or ranx.

    Which queries count: those with at least one relevant item (grade > 0) in ``relevance``; trec_eval leaves a
    query without judgements out the same way. Their mean is over exactly those queries; one of them with an empty
    list scores 0 (as ``trec_eval -c`` counts it; no notebook hands an empty list).

    Parameters
    ----------
    ranked : int ndarray of shape (nq, m)
        Item columns of ``relevance``, best first per row; ``-1`` pads a shorter list. A list may be shorter than a
        measure's cut-off (R@100 of a list of 50 counts what those 50 found).
    relevance : (sparse) array of shape (nq, n_items)
        Integer grades: > 0 relevant (nDCG's gain is the grade), 0 not relevant
        (:meth:`xenbench.data.datasets.Dataset.grades`).
    measures : sequence of str
        ir-measures names (``"nDCG@10"``, ``"RR@10"``, ``"R@100"``, ``"Success@1"``, ...); default
        :data:`LABEL_MEASURES`.
    per_query : bool, default False
        Return every counted query's value instead of the means.

    Returns
    -------
    means : dict of str to float
        Measure -> mean over the counted queries (NaN for every measure when no query has a relevant item).
    or, with ``per_query``, (rows, values)
        ``rows``: int ndarray of the counted rows (ascending); ``values``: measure -> float ndarray over them.

    Examples
    --------
    >>> grades = np.array([[0, 2, 1], [1, 0, 0]])  # row 0: item 1 grade 2, item 2 grade 1; row 1: item 0
    >>> label_metrics(np.array([[2, 1, 0], [1, 0, -1]]), grades, ["RR@10", "Success@1"])
    {'RR@10': 0.75, 'Success@1': 0.5}
    """
    import ir_measures
    import scipy.sparse as sp

    owner = "label_metrics"
    rel = sp.csr_matrix(relevance, copy=True)  # a copy: the judged-not-relevant grades are dropped below
    ranked = np.asarray(ranked)
    if ranked.ndim != 2 or ranked.shape[0] != rel.shape[0] or not np.issubdtype(ranked.dtype, np.integer):
        raise ParameterError("ranked", f"an int array with {rel.shape[0]} rows (one per row of relevance)",
                             f"{ranked.dtype} array of shape {ranked.shape}", owner)
    if ranked.size and (ranked.min() < -1 or ranked.max() >= rel.shape[1]):
        raise ParameterError("ranked", f"item columns in [0, {rel.shape[1]}) or -1 for padding",
                             f"values in [{ranked.min()}, {ranked.max()}]", owner)
    if isinstance(measures, str):
        measures = [measures]
    names = list(measures)
    try:
        parsed = [ir_measures.parse_measure(m) for m in names]
    except (ValueError, NameError, SyntaxError, TypeError):
        raise ParameterError("measures", "ir-measures names such as 'nDCG@10', 'RR@10', 'R@100', 'Success@1'",
                             names, owner) from None
    if rel.nnz and np.abs(rel.data).max() > MAX_GRADE:
        raise ParameterError("relevance", f"integer grades within [-{MAX_GRADE}, {MAX_GRADE}] (trec_eval sizes its "
                             "arrays by the largest grade)", f"grade {rel.data[np.abs(rel.data).argmax()]}", owner)
    rel.data[rel.data < 0] = 0  # judged not relevant, as 0: no gain, and no query counts for it
    rel.eliminate_zeros()
    rows = np.flatnonzero(np.diff(rel.indptr) > 0)
    qrels = {str(r): {str(j): int(g) for j, g in zip(rel.indices[rel.indptr[r]:rel.indptr[r + 1]],
                                                      rel.data[rel.indptr[r]:rel.indptr[r + 1]]) if g > 0}
             for r in rows}
    # Scores m − rank: strictly decreasing, so ir-measures reads each list in the given order (ties cannot reorder).
    run = {}
    for r in rows:
        docs = ranked[r][ranked[r] >= 0]
        run[str(r)] = {str(j): float(docs.size - pos) for pos, j in enumerate(docs)}
    values = {name: np.zeros(rows.size) for name in names}  # a query with an empty list scores 0
    index = {str(r): n for n, r in enumerate(rows)}
    by_measure = dict(zip(parsed, names))
    for metric in ir_measures.iter_calc(parsed, qrels, {q: d for q, d in run.items() if d}):
        values[by_measure[metric.measure]][index[metric.query_id]] = metric.value
    if per_query:
        return rows.astype(np.int64), values
    return {name: float(v.mean()) if v.size else float("nan") for name, v in values.items()}


def recall_under_budget(M_exact: np.ndarray, retrieved: np.ndarray, k: int, *, calls: np.ndarray,
                        budget: int, per_query: bool = False) -> float | np.ndarray:
    """Top-k-Recall of a method that spent ``calls`` CE calls, checked against the budget B_CE.

    Parameters
    ----------
    M_exact : ndarray of shape (n_queries, n_items)
        Exact CE scores.
    retrieved : int ndarray of shape (n_queries, m)
        Items the method returns (all of them must have been exactly scored within the budget).
    k : int
        Size of the exact neighbourhood.
    calls : int ndarray of shape (n_queries,)
        CE calls spent per query (e.g. ``BudgetCounter.calls``).
    budget : int
        B_CE, the allowed number of CE calls per query.
    per_query : bool, default False
        Return per-query recalls.

    Returns
    -------
    recall : float or ndarray of shape (n_queries,)

    Raises
    ------
    BudgetExceededError
        If any query spent more than ``budget`` calls: its recall would not be comparable.
    """
    calls = np.asarray(calls)
    if calls.max(initial=0) > budget:
        q = int(np.argmax(calls))
        raise BudgetExceededError(f"query {q} spent {int(calls[q])} CE calls, more than the budget "
                                  f"B_CE={budget}; compare methods at equal budget only")
    return topk_recall(M_exact, retrieved, k, per_query=per_query)


# ----------------------------------------------------------------------------------------------
# approximation error (ADACUR Fig. 7)
# ----------------------------------------------------------------------------------------------
def approximation_errors(M_exact: np.ndarray, M_approx: np.ndarray, k: int,
                         anchors: np.ndarray | None = None) -> dict[str, float]:
    """Mean absolute error |M − M̃| on all items, on the exact top-k items and on the anchor items.

    [ADACUR] Fig. 7 reports "the average of absolute difference between approximate and exact item
    scores" separately for these item sets: small error on the anchors and large error on the top-k
    items explains poor top-k recall (§3.2). Each set's error is averaged within a query, then over
    queries. (The relative Frobenius error of ANNCUR is :func:`xenbench.methods.cur.approximation_error`.)

    Parameters
    ----------
    M_exact, M_approx : ndarray of shape (n_queries, n_items)
        Exact scores and approximate scores ŝ.
    k : int
        Size of the exact top-k set.
    anchors : int ndarray of shape (n_queries, k_i), optional
        Anchor items I_anc of every query.

    Returns
    -------
    errors : dict
        ``{"all": float, "topk": float}`` and ``"anchors": float`` when ``anchors`` is given.
    """
    M_exact = _check_matrix(M_exact, "M_exact", "approximation_errors")
    M_approx = _check_matrix(M_approx, "M_approx", "approximation_errors")
    if M_approx.shape != M_exact.shape:
        raise ParameterError("M_approx", f"an array of the shape of M_exact {M_exact.shape}",
                             f"shape {M_approx.shape}", "approximation_errors")
    n_queries, n_items = M_exact.shape
    k = _check_k(k, n_items, "approximation_errors")
    abs_err = np.abs(M_exact.astype(np.float64) - M_approx.astype(np.float64))
    out = {
        "all": float(abs_err.mean()),
        "topk": float(np.take_along_axis(abs_err, topk_indices(M_exact, k), axis=1).mean()),
    }
    if anchors is not None:
        anchors = _check_retrieved(anchors, n_queries, n_items, "approximation_errors")
        out["anchors"] = float(np.take_along_axis(abs_err, anchors, axis=1).mean())
    return out


# ----------------------------------------------------------------------------------------------
# CE-call accounting
# ----------------------------------------------------------------------------------------------
class BudgetCounter:
    """Serves exact CE scores from ``M`` and counts distinct (query, item) calls against B_CE.

    A CE call f(q, i) is the lookup ``M[q, i]``. A pair is charged once: asking again for an item
    that was already scored for that query is free, as the papers re-use anchor scores when
    re-ranking ([ADACUR] §2.2, footnote 1). A request that would take any query over the budget
    raises :class:`BudgetExceededError` before anything is charged, so ``calls <= budget`` holds
    after every successful call: the counter is the proof that a method stayed within B_CE.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores of the test queries (not copied).
    budget : int, optional
        B_CE per query; ``None`` counts without a limit.

    Attributes
    ----------
    calls : ndarray of shape (n_queries,), int64
        CE calls spent per query so far.
    scored : ndarray of shape (n_queries, n_items), bool
        Which pairs have been scored.

    Examples
    --------
    >>> counter = BudgetCounter(np.arange(6, dtype=np.float32).reshape(2, 3), budget=2)
    >>> counter.score(np.array([[0, 2], [1, 1]])).tolist()
    [[0.0, 2.0], [4.0, 4.0]]
    >>> counter.calls.tolist()
    [2, 1]
    """

    def __init__(self, M: np.ndarray, budget: int | None = None) -> None:
        self.M = _check_matrix(M, "M", "BudgetCounter")
        self.n_queries, self.n_items = self.M.shape
        if budget is not None:
            budget = _check_k(budget, self.n_items, "BudgetCounter", name="budget")
        self.budget = budget
        self.calls = np.zeros(self.n_queries, dtype=np.int64)
        self.scored = np.zeros((self.n_queries, self.n_items), dtype=bool)

    def score(self, items: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Exact scores ``M[rows[:, None], items]``, charging the pairs not scored before.

        Parameters
        ----------
        items : int ndarray of shape (n_rows, j)
            Items to score for every requested query.
        rows : int ndarray of shape (n_rows,), optional
            Distinct query rows of ``M``; default all rows in order.

        Returns
        -------
        scores : ndarray of shape (n_rows, j)
            Exact CE scores, dtype of ``M``.

        Raises
        ------
        BudgetExceededError
            If a query would exceed the budget; nothing is charged then.
        """
        rows = np.arange(self.n_queries) if rows is None else np.asarray(rows, dtype=np.int64).reshape(-1)
        items = np.asarray(items, dtype=np.int64)
        if items.ndim != 2 or items.shape[0] != rows.shape[0]:
            raise ParameterError("items", f"an int array of shape (n_rows={rows.shape[0]}, j)",
                                 f"shape {items.shape}", "BudgetCounter.score")
        if items.size and (items.min() < 0 or items.max() >= self.n_items):
            raise ParameterError("items", f"item indices in [0, {self.n_items})",
                                 f"values in [{items.min()}, {items.max()}]", "BudgetCounter.score")
        if np.unique(rows).size != rows.size:
            raise ParameterError("rows", "distinct query rows", rows.tolist(), "BudgetCounter.score")
        before = self.scored[rows]
        after = before.copy()
        after[np.arange(rows.size)[:, None], items] = True
        # Counting newly set flags (not len(items)) makes repeats and duplicates free.
        new_calls = self.calls[rows] + after.sum(axis=1) - before.sum(axis=1)
        if self.budget is not None and new_calls.max(initial=0) > self.budget:
            j = int(np.argmax(new_calls))
            raise BudgetExceededError(
                f"query {int(rows[j])} would spend {int(new_calls[j])} CE calls, more than the "
                f"budget B_CE={self.budget}")
        self.scored[rows] = after
        self.calls[rows] = new_calls
        return self.M[rows[:, None], items]

    def remaining(self) -> np.ndarray:
        """CE calls left per query, shape (n_queries,); ``None`` budget gives ``n_items - calls``."""
        limit = self.n_items if self.budget is None else self.budget
        return limit - self.calls
