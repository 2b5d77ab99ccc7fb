"""ADACUR's reference engine: one query at a time, numpy, read line by line against Alg. 1-3.

The batched engine (:mod:`.batched`) must return the same anchors and ranked lists (tests/test_adacur.py).

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. Findings of EMNLP 2023: Alg. 1 (rounds), Alg. 2 (ŝ from the
   anchors so far), Alg. 3 (samplers), §3.2 (oracle samplers).
.. [AXN] Yadav et al., ICLR 2024: Eq. 7 (the prior's scores mixed into ŝ).
"""
from __future__ import annotations

import time

import numpy as np

from xenbench.methods.adacur.records import AdaCurResult, RoundRecord, _Plan, rank_by_exact
from xenbench.methods.adacur.samplers import (
    _STREAM_EPSILON,
    _STREAM_MAIN,
    Draws,
    Oracle,
    _gumbel,
    _n_random,
    keyed_uniforms,
)
from xenbench.metrics import BudgetCounter

__all__ = ["run_reference"]


def _approx_scores_reference(R_anc: np.ndarray, c_test: np.ndarray, anchors: np.ndarray, prior: np.ndarray | None,
                             prior_weight: float, score_eps: float) -> tuple[np.ndarray, float, float]:
    """Alg. 2 APPROXScores for one query, mixed with the prior's scores when given ([AXN] Eq. 7);
    returns ŝ (n_items,), seconds in pinv, seconds in matmul."""
    t0 = time.perf_counter()
    intersection = R_anc[:, anchors]  # R_anc[:, I_anc], (k_q, |I_anc|)
    rtol = max(intersection.shape) * score_eps  # pinv_rtol for R_anc's stored dtype
    U = np.linalg.pinv(intersection, rtol=rtol)  # line 6, (|I_anc|, k_q)
    t1 = time.perf_counter()
    s_hat = (c_test @ U) @ R_anc  # line 7: C_test × U × R_anc, cheapest association first
    if prior is not None:
        s_hat = (1.0 - prior_weight) * s_hat + prior_weight * prior
    return s_hat, t1 - t0, time.perf_counter() - t1


def _top_reference(keys: np.ndarray, k: int) -> np.ndarray:
    """Top-k of a 1-d key vector, ties to the lower index."""
    return np.argsort(-keys, kind="stable")[:k]


def _sample_reference(plan: _Plan, t: int, k_s: int, s_hat: np.ndarray, is_anchor: np.ndarray,
                      qid: int, exact: np.ndarray, oracle_masked: np.ndarray) -> np.ndarray:
    """Alg. 3 SAMPLEANCHORS for one query: k_s new anchors, already-chosen ones masked."""
    n_items = s_hat.size
    sampler = plan.round_sampler(t)

    def uniforms(stream: int) -> np.ndarray:
        return keyed_uniforms(plan.seed, np.array([qid]), t, stream, n_items)[0]

    draws = Draws(lambda: uniforms(_STREAM_MAIN), lambda: _gumbel(uniforms(_STREAM_MAIN)))
    if isinstance(sampler, Oracle):
        masked = is_anchor | oracle_masked  # never pick the exact top-k_m (§3.2)
        n_rand = _n_random(sampler.epsilon, k_s)
        greedy = _top_reference(np.where(masked, -np.inf, sampler.keys(exact, draws)), k_s - n_rand)
        masked = masked.copy()
        masked[greedy] = True
        keys = np.where(masked, -np.inf, uniforms(_STREAM_EPSILON))
        return np.concatenate([greedy, _top_reference(keys, n_rand)])
    keys = np.where(is_anchor, -np.inf, sampler.keys(s_hat, draws))  # Alg. 3 line 8
    return _top_reference(keys, k_s)


def run_reference(plan: _Plan, R_anc: np.ndarray, counter: BudgetCounter, candidates: np.ndarray | None,
                   prior: np.ndarray | None, prior_weight: float, query_ids: np.ndarray, trace_query: int | None,
                   want_approx: bool) -> AdaCurResult:
    """ADACUR (Alg. 1) one query at a time."""
    n_queries, n_items = counter.n_queries, counter.n_items
    n_rounds = len(plan.sizes)
    records = [RoundRecord(t, "anchors", np.zeros((n_queries, k_s), np.int64)) for t, k_s in enumerate(plan.sizes)]
    if plan.split:
        records.append(RoundRecord(n_rounds, "retrieve", np.zeros((n_queries, plan.budget - plan.n_anchor_items), np.int64)))
    anchors_all = np.zeros((n_queries, plan.n_anchor_items), np.int64)
    c_all = np.zeros((n_queries, plan.n_anchor_items), np.float64)
    approx_all = np.zeros((n_queries, n_items), np.float32) if want_approx else None
    D = np.zeros((n_queries, plan.budget), np.float32)
    I = np.zeros((n_queries, plan.budget), np.int64)

    for q in range(n_queries):
        exact = counter.M[q].astype(np.float64)  # read only by the oracle samplers (§3.2)
        prior_q = None if prior is None else prior[q].astype(np.float64)
        oracle_masked = np.zeros(n_items, bool)
        if isinstance(plan.sampler, Oracle) and plan.sampler.k_m > 0:
            oracle_masked[_top_reference(exact, plan.sampler.k_m)] = True
        anchors = np.zeros(0, np.int64)  # I_anc  (Alg. 1 line 9)
        c_test = np.zeros(0, np.float64)  # C_test (line 10)
        is_anchor = np.zeros(n_items, bool)
        for t, k_s in enumerate(plan.sizes):  # line 11
            rec = records[t]
            if t == 0:
                s_hat = np.zeros(n_items)  # ŝ^(1) from an empty anchor set
            else:
                s_hat, t_pinv, t_mm = _approx_scores_reference(R_anc, c_test, anchors, prior_q, prior_weight,
                                                                plan.score_eps)
                rec.time_pinv += t_pinv
                rec.time_matmul += t_mm
            if q == trace_query:
                rec.approx_scores = s_hat.astype(np.float32)
            t0 = time.perf_counter()
            if t == 0 and candidates is not None:
                new = candidates[q, :k_s].astype(np.int64)  # first batch from DE / TF-IDF (§2.2)
            else:
                new = _sample_reference(plan, t, k_s, s_hat, is_anchor, int(query_ids[q]), exact, oracle_masked)
            t1 = time.perf_counter()
            calls_before = counter.calls[q]
            scores = counter.score(new[None, :], rows=np.array([q]))[0]  # line 15: exact CE scores
            rec.time_sample += t1 - t0
            rec.time_ce += time.perf_counter() - t1
            rec.n_calls += int(counter.calls[q] - calls_before)
            rec.items[q] = new
            anchors = np.concatenate([anchors, new])  # line 14
            c_test = np.concatenate([c_test, scores.astype(np.float64)])
            is_anchor[new] = True
        anchors_all[q], c_all[q] = anchors, c_test
        items, item_scores = anchors, c_test
        if plan.split or want_approx:
            rec = records[-1] if plan.split else records[n_rounds - 1]
            s_hat, t_pinv, t_mm = _approx_scores_reference(R_anc, c_test, anchors, prior_q, prior_weight,
                                                            plan.score_eps)
            rec.time_pinv += t_pinv
            rec.time_matmul += t_mm
            if want_approx:
                approx_all[q] = s_hat
        if plan.split:
            # Retrieve by the final ŝ among non-anchors until B_CE is spent; anchors are re-used free.
            rec = records[-1]
            if q == trace_query:
                rec.approx_scores = s_hat.astype(np.float32)
            keys = s_hat.copy()
            keys[is_anchor] = -np.inf
            t0 = time.perf_counter()
            extra = _top_reference(keys, plan.budget - plan.n_anchor_items)
            t1 = time.perf_counter()
            calls_before = counter.calls[q]
            extra_scores = counter.score(extra[None, :], rows=np.array([q]))[0]
            rec.time_sample += t1 - t0
            rec.time_ce += time.perf_counter() - t1
            rec.n_calls += int(counter.calls[q] - calls_before)
            rec.items[q] = extra
            items = np.concatenate([anchors, extra])
            item_scores = np.concatenate([c_test, extra_scores.astype(np.float64)])
        D[q], I[q] = (a[0] for a in rank_by_exact(items[None, :], item_scores[None, :]))
    return AdaCurResult(D, I, anchors_all, c_all.astype(np.float32), counter.calls.copy(), records, approx_all)
