"""Budgeted baselines: ANNCUR and retrieve-and-rerank under the same CE budget B_CE as ADACUR and AXN.

Both read every exact score through a :class:`~xenbench.metrics.BudgetCounter` and return
``(D float32 (nq, m), I int64 (nq, m))`` ranked by exact score (:func:`xenbench.methods.adacur.rank_by_exact`).

References
----------
.. [ANNCUR] Yadav et al., EMNLP 2022, §3.2 (budgeted evaluation: k_i anchors + B_CE − k_i re-ranked items).
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. Findings of EMNLP 2023, §2.2 footnote 1, §3 (DE / TF-IDF re-rank).
"""
from __future__ import annotations

import numpy as np

from xenbench._validation import check_int, check_is_fitted
from xenbench.methods.adacur import rank_by_exact
from xenbench.methods.adacur.estimator import _as_counter, _check_candidates
from xenbench.methods.cur import AnnCur
from xenbench.metrics import BudgetCounter

__all__ = ["anncur_with_budget", "rerank_baseline"]


def rerank_baseline(M: np.ndarray | BudgetCounter, candidate_order: np.ndarray,
                    budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Retrieve-and-rerank: score the first B_CE items of a retriever's ranking with the CE.

    The DE / TF-IDF baselines of [ANNCUR] §3.2 and [ADACUR] §3 spend the whole budget on re-ranking.

    Parameters
    ----------
    M : ndarray of shape (nq, n_items) or BudgetCounter
        Exact CE scores of the test queries (every read is charged).
    candidate_order : int ndarray of shape (nq, >= budget)
        Items ranked by the retriever, best first; the first ``budget`` must be distinct per row.
    budget : int
        B_CE.

    Returns
    -------
    D : ndarray of shape (nq, B_CE), float32
        Exact scores, descending.
    I : ndarray of shape (nq, B_CE), int64
        The candidates re-ranked by exact score.
    """
    n_items = M.n_items if isinstance(M, BudgetCounter) else np.asarray(M).shape[-1]
    budget = check_int(budget, "budget", 1, n_items, "rerank_baseline", "n_items")
    counter = _as_counter(M, budget, n_items, "rerank_baseline")
    cand = _check_candidates(candidate_order, counter.n_queries, n_items, budget, "rerank_baseline")
    items = cand[:, :budget].astype(np.int64)
    return rank_by_exact(items, counter.score(items).astype(np.float64))


def anncur_with_budget(cur: AnnCur, M: np.ndarray | BudgetCounter, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """ANNCUR at a CE budget: k_i anchor calls, then k_r = B_CE − k_i re-ranking calls.

    The test queries are scored on the fixed anchors I_anc (k_i calls), every item gets ŝ = e_qᵀ E_I,
    and the items of ``cur.rerank_candidates`` (its ``budget_rule``) are ranked by exact score: by default the
    non-anchor items with the highest ŝ are scored until B_CE calls are spent and the anchors' scores are re-used
    for free ([ANNCUR] §3.2, budgeted setting; [ADACUR] §2.2 footnote 1); under "authors' code" the k_r items with
    the highest ŝ over all items are ranked (:data:`xenbench.methods.cur.BUDGET_RULES`).

    Parameters
    ----------
    cur : AnnCur
        A fitted index (k_i = ``cur.anchor_items_.size`` ≤ B_CE).
    M : ndarray of shape (nq, n_items) or BudgetCounter
        Exact CE scores of the test queries.
    budget : int
        B_CE.

    Returns
    -------
    D : ndarray of shape (nq, B_CE) ("free anchors") or (nq, B_CE − k_i) ("authors' code"), float32
        Exact scores, descending.
    I : ndarray of the shape of D, int64
    """
    check_is_fitted(cur, "item_embeddings_", "cur.fit(R_anc)", what="anncur_with_budget needs a fitted AnnCur")
    anchors = cur.anchor_items_
    budget = check_int(budget, "budget", anchors.size, cur.n_items_, "anncur_with_budget", "n_items")
    counter = _as_counter(M, budget, cur.n_items_, "anncur_with_budget")
    nq = counter.n_queries
    anchor_items = np.broadcast_to(anchors, (nq, anchors.size))
    C_test = counter.score(anchor_items).astype(np.float64)  # e_q = f(q, I_anc)
    items = cur.rerank_candidates(cur.transform(C_test), budget)  # the index's budget rule picks what is re-ranked
    return rank_by_exact(items, counter.score(items).astype(np.float64))  # an anchor's pair is charged only once
