"""ADACUR's batched engine: all test queries at once, torch (CPU or GPU).

Alg. 2 becomes a batched solve for the query weights w = C_test · pinv(R_anc[:, I_anc]) (one per query) and a
single GEMM ŝ = W · R_anc; the "gram" solver grows a Cholesky factor by one block per round
(:class:`xenbench.methods.adacur.SearchOptions`). It returns the reference's anchors and ranked lists
(:mod:`.reference`; tests/test_adacur.py): all linear algebra is float64 and every top-k selection uses the tie
rule of :mod:`xenbench.metrics` (:func:`_topk_stable`, its torch twin).

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. Findings of EMNLP 2023: Alg. 1-3, Fig. 4 (time per round in CE
   calls, pinv and matmul).
.. [AXN] Yadav et al., ICLR 2024: Eq. 7 (the prior's scores mixed into ŝ).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

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
from xenbench.metrics import BudgetCounter, topk_indices

__all__ = ["DeviceIndex", "run_batched"]

logger = logging.getLogger(__name__)

# Estimated cond(R_anc[:, I_anc]) above which the batched "gram" solver hands a query to pinv: the
# normal equations lose cond² · eps of accuracy (one refinement step brings it back near cond · eps
# while cond² · eps ≪ 1), and pinv's singular-value cut-off must decide rank-deficient cases.
_GRAM_COND_LIMIT = 1e4


def _gram_cond_limit(rtol: float) -> float:
    """cond limit of the "gram" solver for a pinv cut-off ``rtol``: at most ``_GRAM_COND_LIMIT`` and
    a decade below 1 / rtol, so every query whose singular values pinv would cut (cond > 1 / rtol)
    goes to pinv even when the Cholesky-diagonal estimate of cond undershoots by up to 10×."""
    return min(_GRAM_COND_LIMIT, 0.1 / rtol)

# Working-set target of one batched chunk (R_anc[:, I_anc] and its Gram matrix for every query).
_CHUNK_BYTES = 512 * 2**20
# The batched "gram" solver keeps the item Gram matrix R_ancᵀ R_anc (float64) up to this size
# (n_items <= 11585); above it, it multiplies the gathered R_anc[:, I_anc] instead.
_ITEM_GRAM_BYTES = 2**30
# Relative residual ‖C_test − ŝ[I_anc]‖∞ / ‖C_test‖∞ above which a query gets one refinement step.
# pinv (the reference) leaves ~1e-14; the normal equations leave up to cond² · eps (≤ 1e-8 below
# _GRAM_COND_LIMIT). 1e-10 is far below the resolution of float32 scores (6e-8) and lets the bundled
# matrices (residual ≤ 3e-11, cond ≈ 1.3e3) skip the second solve and GEMM, yet still catches the
# ill-conditioned queries where the error would grow towards score differences.
_RESIDUAL_RTOL = 1e-10



def _sync(device: torch.device) -> None:
    """Wait for queued GPU work so that wall-clock timings are attributed to the right step."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _topk_stable(keys: torch.Tensor, k: int) -> torch.Tensor:
    """Row-wise top-k of ``keys`` (nq, n) in the shared order (key desc, index asc).

    The torch twin of :func:`xenbench.metrics.topk_indices`: the one tie rule of :mod:`xenbench.metrics`
    ("Ties": higher key first, equal keys by lower index; tests/test_topk.py checks that they agree).
    ``torch.topk`` does not specify its order among ties, so rows where the k-th value is tied with
    an unselected item (the (k+1)-th value equals it) fall back to a full stable sort, and the selected
    items are re-ordered by (key desc, index asc). Ties are rare (exact duplicates, or -inf masks),
    so the fast path is the rule.
    """
    n = keys.shape[1]
    if k == 0:
        return torch.zeros((keys.shape[0], 0), dtype=torch.long, device=keys.device)
    values, idx = torch.topk(keys, min(k + 1, n), dim=1)
    ambiguous = values[:, k] == values[:, k - 1] if k < n else torch.zeros_like(values[:, 0], dtype=torch.bool)
    idx = idx[:, :k]
    if bool(ambiguous.any()):
        rows = ambiguous.nonzero().squeeze(1)
        idx[rows] = torch.sort(keys[rows], dim=1, descending=True, stable=True).indices[:, :k]
    idx = idx.sort(dim=1).values
    order = torch.sort(keys.gather(1, idx), dim=1, descending=True, stable=True).indices
    return idx.gather(1, order)


def _solve_weights(Xt: torch.Tensor, c: torch.Tensor, solver: str,
                   score_eps: float = float(np.finfo(np.float64).eps)) -> torch.Tensor:
    """Query weights w = C_test · pinv(R_anc[:, I_anc]) for a batch of queries (Alg. 2 line 6 · C_test).

    This is the general path: the batched "gram" solver prefers :func:`_approx_scores_item_gram`,
    which needs neither this gather nor per-query products over k_q, whenever the item Gram matrix
    fits in memory and a <= k_q.

    Parameters
    ----------
    Xt : Tensor of shape (nq, a, k_q)
        R_anc[:, I_anc]ᵀ of every query (a = anchors so far).
    c : Tensor of shape (nq, a)
        C_test of every query.
    solver : {"gram", "pinv"}
        "pinv": ``torch.linalg.pinv`` per query (an SVD each; what the reference does).
        "gram": Cholesky of the smaller Gram matrix (a×a or k_q×k_q) with one step of iterative
        refinement (corrected semi-normal equations); equal to pinv when R_anc[:, I_anc] has full
        rank. Queries whose Cholesky fails or whose estimated condition number exceeds
        :func:`_gram_cond_limit` are recomputed with pinv, whose cut-off then decides the rank.
    score_eps : float
        eps of the stored dtype of R_anc; the pinv cut-off is ``max(k_q, a) * score_eps``.

    Returns
    -------
    w : Tensor of shape (nq, k_q)
    """
    a, k_q = Xt.shape[1], Xt.shape[2]
    rtol = max(k_q, a) * score_eps  # pinv_rtol((k_q, a), stored dtype)
    if solver == "pinv":
        return (torch.linalg.pinv(Xt, rtol=rtol) @ c.unsqueeze(-1)).squeeze(-1)
    X = Xt.mT  # (nq, k_q, a) = R_anc[:, I_anc]

    def apply(M: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (M @ v.unsqueeze(-1)).squeeze(-1)

    if a <= k_q:
        # Fewer anchors than anchor queries: the min-norm solution of Xt w = c is w = X (Xt X)⁻¹ c.
        L, info = torch.linalg.cholesky_ex(Xt @ X)
        w = apply(X, _cholesky_solve(L, c))
        w = w + apply(X, _cholesky_solve(L, c - apply(Xt, w)))
    else:
        # More anchors than anchor queries: the least-squares solution is w = (X Xt)⁻¹ X c.
        L, info = torch.linalg.cholesky_ex(X @ Xt)
        w = _cholesky_solve(L, apply(X, c))
        w = w + _cholesky_solve(L, apply(X, c - apply(Xt, w)))
    diag = L.diagonal(dim1=-2, dim2=-1).abs()
    cond_estimate = diag.max(dim=1).values / diag.min(dim=1).values  # ≈ cond(X) (cond(Gram) = cond(X)²)
    bad = (info != 0) | ~(cond_estimate <= _gram_cond_limit(rtol)) | ~torch.isfinite(w).all(dim=1)
    if bool(bad.any()):
        rows = bad.nonzero().squeeze(1)
        w[rows] = apply(torch.linalg.pinv(Xt[rows], rtol=rtol), c[rows])
    return w


@dataclass(frozen=True)
class DeviceIndex:
    """The offline index on a torch device: R_anc, R_ancᵀ and, when it fits, the item Gram matrix."""

    R: torch.Tensor         # R_anc, (k_q, n_items)
    RT: torch.Tensor        # R_ancᵀ, contiguous, (n_items, k_q): gathers R_anc[:, I_anc]ᵀ per query
    K: torch.Tensor | None  # R_ancᵀ R_anc, (n_items, n_items), or None when over _ITEM_GRAM_BYTES
    score_eps: float = float(np.finfo(np.float64).eps)  # eps of R_anc's stored dtype (pinv cut-off)

    @classmethod
    def build(cls, R_anc: np.ndarray, device: torch.device,
              score_eps: float = float(np.finfo(np.float64).eps)) -> "DeviceIndex":
        R = torch.from_numpy(R_anc).to(device)
        n_items = R.shape[1]
        K = R.T @ R if 8 * n_items**2 <= _ITEM_GRAM_BYTES else None
        return cls(R, R.T.contiguous(), K, float(score_eps))


class _AnchorState:
    """Anchors I_anc and scores C_test of a batch of queries, grown round by round (Alg. 1 line 14).

    For the "gram" solver it also grows, lazily at each Alg. 2 call, the inverse Cholesky factor
    L⁻¹ of XᵀX = K[I_anc, I_anc] (X = R_anc[:, I_anc], K = R_ancᵀ R_anc) and z = L⁻¹ C_test by one
    block per round. Appending anchors leaves the leading blocks unchanged, so a round costs
    O(nq · k_s · a²) batched products instead of a re-factorisation, and only the new block of XᵀX
    is gathered from K.
    """

    def __init__(self, index: DeviceIndex, nq: int, k_i: int, prior: torch.Tensor | None = None,
                 prior_weight: float = 0.0) -> None:
        self.index = index
        self.prior, self.prior_weight = prior, prior_weight  # ŝ_prior (nq, n_items) and λ, [AXN] Eq. 7
        device = index.R.device
        self.anchors = torch.zeros((nq, k_i), dtype=torch.long, device=device)  # I_anc
        self.c = torch.zeros((nq, k_i), dtype=torch.float64, device=device)  # C_test
        n_items = index.R.shape[1]
        self.is_anchor = torch.zeros((nq, n_items), dtype=torch.bool, device=device)
        # Reused (nq, n_items) buffers: fresh allocations of this size cost as much as the work on them
        # (page faults on CPU). ``penalty`` is 0, or -inf at anchors, added to keys to mask them.
        self.penalty = torch.zeros((nq, n_items), dtype=torch.float64, device=device)
        self.s_hat = torch.zeros((nq, n_items), dtype=torch.float64, device=device)  # ŝ (zeros: no anchors yet)
        self.keys = torch.empty((nq, n_items), dtype=torch.float64, device=device)
        self.a = 0
        self.use_item_gram = index.K is not None
        if self.use_item_gram:
            size = min(k_i, index.R.shape[0])  # the factor is only used while a <= k_q
            # Blocks are written as they are factored; the zero block above the diagonal too.
            self.Linv = torch.empty((nq, size, size), dtype=torch.float64, device=device)
            self.z = torch.empty((nq, size), dtype=torch.float64, device=device)
            self.ok = torch.ones(nq, dtype=torch.bool, device=device)  # factor valid and well conditioned
            self.diag_max = torch.zeros(nq, dtype=torch.float64, device=device)
            self.diag_min = torch.full((nq,), torch.inf, dtype=torch.float64, device=device)
            self.factored = 0

    def add(self, new: torch.Tensor, scores: torch.Tensor) -> None:
        """Append k_s anchors (nq, k_s) and their exact scores (Alg. 1 lines 14-15)."""
        a0, a1 = self.a, self.a + new.shape[1]
        self.anchors[:, a0:a1] = new
        self.c[:, a0:a1] = scores
        self.is_anchor.scatter_(1, new, True)
        self.penalty.scatter_(1, new, -torch.inf)
        self.a = a1

    def unchosen(self, keys: torch.Tensor) -> torch.Tensor:
        """``keys`` (nq, n_items) with the anchors at -inf (Alg. 3 line 8), in the reused key buffer."""
        return torch.add(keys, self.penalty, out=self.keys)

    def _extend_factor(self) -> None:
        """Block step with L = [[L11, 0], [L21, L22]]: L21 = G21 L11⁻ᵀ, L22 = chol(G22 − L21 L21ᵀ),
        L⁻¹ = [[L11⁻¹, 0], [−L22⁻¹ L21 L11⁻¹, L22⁻¹]], z₂ = L22⁻¹ (c₂ − L21 z₁)."""
        a0, a1 = self.factored, self.a
        K, A = self.index.K, self.anchors
        n_items = K.shape[0]
        new = A[:, a0:a1]
        # Rows of XᵀX = K[I_anc, I_anc] for the new anchors, by flat index (torch.take is the fastest gather here).
        G2 = torch.take(K, new.unsqueeze(2) * n_items + A[:, :a1].unsqueeze(1))  # [G21 G22], (nq, k_s, a1)
        G22 = G2[:, :, a0:]
        c2 = self.c[:, a0:a1]
        if a0 > 0:
            G21 = G2[:, :, :a0]
            Li11 = self.Linv[:, :a0, :a0]
            L21 = G21 @ Li11.mT
            G22 = G22 - L21 @ L21.mT
            c2 = c2 - (L21 @ self.z[:, :a0].unsqueeze(-1)).squeeze(-1)
        L22, info = torch.linalg.cholesky_ex(G22)
        eye = torch.eye(a1 - a0, dtype=L22.dtype, device=L22.device).expand_as(L22)
        Li22 = torch.linalg.solve_triangular(L22, eye, upper=False)
        self.Linv[:, a0:a1, a0:a1] = Li22
        self.Linv[:, :a0, a0:a1] = 0
        if a0 > 0:
            self.Linv[:, a0:a1, :a0] = -Li22 @ (L21 @ Li11)
        self.z[:, a0:a1] = (Li22 @ c2.unsqueeze(-1)).squeeze(-1)
        diag = L22.diagonal(dim1=-2, dim2=-1).abs()
        self.diag_max = torch.maximum(self.diag_max, diag.amax(dim=1))
        self.diag_min = torch.minimum(self.diag_min, diag.amin(dim=1))
        # A singular or ill-conditioned leading block stays so as anchors are added (interlacing),
        # so a query that fails once keeps using the pinv path.
        limit = _gram_cond_limit(max(self.index.R.shape[0], a1) * self.index.score_eps)
        self.ok &= (info == 0) & (self.diag_max <= limit * self.diag_min) & torch.isfinite(Li22).all(dim=(1, 2))
        self.factored = a1

    def approx_scores(self, solver: str) -> tuple[torch.Tensor, float, float]:
        """Alg. 2 for the batch: ŝ (nq, n_items), seconds in the solve, seconds in the GEMM with R_anc.

        ŝ is written into ``self.s_hat``, which the next call overwrites. With a prior, ŝ is the
        mixture (1 − λ)·ŝ + λ·ŝ_prior ([AXN] Eq. 7 in score space), counted as matmul time.
        """
        index, A, c = self.index, self.anchors[:, :self.a], self.c[:, :self.a]
        device = index.R.device
        if solver == "gram" and self.use_item_gram and self.a <= index.R.shape[0]:
            t0 = time.perf_counter()
            self._extend_factor()
            _sync(device)
            t_factor = time.perf_counter() - t0
            s_hat, t_solve, t_matmul = _approx_scores_item_gram(index, A, c, self.Linv[:, :self.a, :self.a],
                                                                self.z[:, :self.a], self.ok, self.s_hat)
            t_solve += t_factor
        else:
            t0 = time.perf_counter()
            w = _solve_weights(index.RT[A], c, solver, index.score_eps)  # RT[A] = R_anc[:, I_anc]ᵀ, (nq, a, k_q)
            _sync(device)
            t1 = time.perf_counter()
            s_hat = torch.mm(w, index.R, out=self.s_hat)  # one GEMM (nq, k_q) × (k_q, n_items) for all queries
            _sync(device)
            t_solve, t_matmul = t1 - t0, time.perf_counter() - t1
        if self.prior is not None:
            t0 = time.perf_counter()
            s_hat.mul_(1.0 - self.prior_weight).add_(self.prior, alpha=self.prior_weight)
            _sync(device)
            t_matmul += time.perf_counter() - t0
        return s_hat, t_solve, t_matmul


def _cholesky_solve(L: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Solve (L Lᵀ) y = b for a batch, L (nq, a, a) lower, b (nq, a); two batched triangular solves
    (much faster on CPU than ``torch.cholesky_solve``, which loops over the batch)."""
    z = torch.linalg.solve_triangular(L, b.unsqueeze(-1), upper=False)
    return torch.linalg.solve_triangular(L.mT, z, upper=True).squeeze(-1)


def _weights(index: DeviceIndex, A: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """w = R_anc[:, I_anc] · y per query, (nq, k_q): a weighted sum of a rows of R_ancᵀ (embedding_bag)."""
    return torch.nn.functional.embedding_bag(A, index.RT, per_sample_weights=y, mode="sum")


def _approx_scores_item_gram(index: DeviceIndex, A: torch.Tensor, c: torch.Tensor, Linv: torch.Tensor,
                             z: torch.Tensor, ok: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """Alg. 2 for a batch via L⁻¹, the inverse Cholesky factor of XᵀX, X = R_anc[:, I_anc] (a <= k_q).

    With full column rank, pinv(X) = (XᵀX)⁻¹Xᵀ, so ŝ = C_test (XᵀX)⁻¹ Xᵀ R_anc = w R_anc with
    y = L⁻ᵀ z, z = L⁻¹ C_test and w = X y. Exact CUR interpolates the anchors (ŝ[I_anc] = C_test), so
    the residual there measures accuracy for free: rows whose relative residual exceeds
    ``_RESIDUAL_RTOL`` get one step of corrected semi-normal-equation refinement (Björck), and rows
    whose factor failed or is ill-conditioned (``ok`` false) are recomputed with pinv, as the
    reference does. ŝ is written into ``out`` (nq, n_items).
    """
    R, RT = index.R, index.RT
    device = R.device
    t0 = time.perf_counter()
    y = (z.unsqueeze(1) @ Linv).squeeze(1)  # (L⁻ᵀ z)ᵀ = zᵀ L⁻¹
    y = torch.where(ok.unsqueeze(1), y, torch.zeros_like(y))
    w = _weights(index, A, y)
    _sync(device)
    t1 = time.perf_counter()
    s_hat = torch.mm(w, R, out=out)  # one GEMM (nq, k_q) × (k_q, n_items) for all queries
    _sync(device)
    t2 = time.perf_counter()
    residual = c - s_hat.gather(1, A)
    scale = c.abs().amax(dim=1).clamp_min(torch.finfo(torch.float64).tiny)
    refine = ok & (residual.abs().amax(dim=1) > _RESIDUAL_RTOL * scale)
    if bool(refine.any()):
        rows = refine.nonzero().squeeze(1)
        Li = Linv[rows]
        dy = ((residual[rows].unsqueeze(1) @ Li.mT) @ Li).squeeze(1)  # (XᵀX)⁻¹ r = L⁻ᵀ L⁻¹ r
        s_hat[rows] += _weights(index, A[rows], dy) @ R
    if not bool(ok.all()):
        rows = (~ok).nonzero().squeeze(1)
        s_hat[rows] = _solve_weights(RT[A[rows]], c[rows], "pinv", index.score_eps) @ R
    _sync(device)
    return s_hat, t1 - t0 + time.perf_counter() - t2, t2 - t1


def _sample_batched(plan: _Plan, t: int, k_s: int, state: _AnchorState, qids: np.ndarray,
                    exact: torch.Tensor | None, oracle_masked: torch.Tensor | None) -> torch.Tensor:
    """Alg. 3 for a batch of queries from ``state.s_hat``; same keys and tie rule as :func:`_sample_reference`."""
    s_hat = state.s_hat
    n_items = s_hat.shape[1]
    device = s_hat.device
    sampler = plan.round_sampler(t)

    def uniforms(stream: int) -> torch.Tensor:
        return torch.from_numpy(keyed_uniforms(plan.seed, qids, t, stream, n_items)).to(device)

    def gumbel() -> torch.Tensor:
        # Gumbel noise in numpy, as the reference computes it, so both see bit-identical keys.
        return torch.from_numpy(_gumbel(keyed_uniforms(plan.seed, qids, t, _STREAM_MAIN, n_items))).to(device)

    draws = Draws(lambda: uniforms(_STREAM_MAIN), gumbel)
    if isinstance(sampler, Oracle):
        masked = state.is_anchor | oracle_masked
        n_rand = _n_random(sampler.epsilon, k_s)
        greedy = _topk_stable(sampler.keys(exact, draws).masked_fill(masked, -torch.inf), k_s - n_rand)
        masked = masked.scatter(1, greedy, True)
        rand = _topk_stable(uniforms(_STREAM_EPSILON).masked_fill(masked, -torch.inf), n_rand)
        return torch.cat([greedy, rand], dim=1)
    return _topk_stable(state.unchosen(sampler.keys(s_hat, draws)), k_s)


def _run_batched_chunk(plan: _Plan, index: DeviceIndex, counter: BudgetCounter, rows: np.ndarray,
                       candidates: np.ndarray | None, prior: np.ndarray | None, prior_weight: float, qids: np.ndarray,
                       trace_row: int | None, want_approx: bool, solver: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, list[RoundRecord]]:
    """ADACUR for the test rows ``rows`` at once; returns D, I, anchors, C_test, final ŝ, records."""
    device = index.R.device
    nq, n_items = rows.size, counter.n_items
    n_rounds = len(plan.sizes)
    prior_t = None if prior is None else torch.from_numpy(prior.astype(np.float64)).to(device)
    state = _AnchorState(index, nq, plan.n_anchor_items, prior_t, prior_weight)
    exact = oracle_masked = None
    if isinstance(plan.sampler, Oracle):
        exact_np = counter.M[rows].astype(np.float64)  # oracle access, not charged (§3.2)
        exact = torch.from_numpy(exact_np).to(device)
        oracle_masked = torch.zeros((nq, n_items), dtype=torch.bool, device=device)
        if plan.sampler.k_m > 0:
            oracle_masked.scatter_(1, torch.from_numpy(topk_indices(exact_np, plan.sampler.k_m)).to(device), True)
    records: list[RoundRecord] = []
    s_hat = state.s_hat
    for t, k_s in enumerate(plan.sizes):
        rec = RoundRecord(t, "anchors", np.zeros((nq, k_s), np.int64))
        if t > 0:
            s_hat, rec.time_pinv, rec.time_matmul = state.approx_scores(solver)
        if trace_row is not None:
            rec.approx_scores = s_hat[trace_row].float().cpu().numpy()
        t0 = time.perf_counter()
        if t == 0 and candidates is not None:
            new = torch.from_numpy(candidates[:, :k_s].astype(np.int64)).to(device)
        else:
            new = _sample_batched(plan, t, k_s, state, qids, exact, oracle_masked)
        new_np = new.cpu().numpy()
        t1 = time.perf_counter()
        calls_before = counter.calls[rows].sum()
        scores = counter.score(new_np, rows=rows)  # exact CE scores of the new anchors
        rec.time_sample, rec.time_ce = t1 - t0, time.perf_counter() - t1
        rec.n_calls = int(counter.calls[rows].sum() - calls_before)
        rec.items = new_np
        state.add(new, torch.from_numpy(scores.astype(np.float64)).to(device))
        records.append(rec)
    anchors_np, c_np = state.anchors.cpu().numpy(), state.c.cpu().numpy()
    items, item_scores, approx = anchors_np, c_np, None
    if plan.split or want_approx:
        rec = RoundRecord(n_rounds, "retrieve", np.zeros((nq, 0), np.int64)) if plan.split else records[-1]
        s_hat, t_pinv, t_mm = state.approx_scores(solver)  # Alg. 1 line 16
        rec.time_pinv += t_pinv
        rec.time_matmul += t_mm
        if want_approx:
            approx = s_hat.float().cpu().numpy()
        if plan.split:
            if trace_row is not None:
                rec.approx_scores = s_hat[trace_row].float().cpu().numpy()
            t0 = time.perf_counter()
            extra = _topk_stable(state.unchosen(s_hat), plan.budget - plan.n_anchor_items)
            extra_np = extra.cpu().numpy()
            t1 = time.perf_counter()
            calls_before = counter.calls[rows].sum()
            extra_scores = counter.score(extra_np, rows=rows)
            rec.time_sample, rec.time_ce = t1 - t0, time.perf_counter() - t1
            rec.n_calls = int(counter.calls[rows].sum() - calls_before)
            rec.items = extra_np
            records.append(rec)
            items = np.concatenate([anchors_np, extra_np], axis=1)
            item_scores = np.concatenate([c_np, extra_scores.astype(np.float64)], axis=1)
    D, I = rank_by_exact(items, item_scores)
    return D, I, anchors_np, c_np.astype(np.float32), approx, records


def _merge_records(parts: list[list[RoundRecord]]) -> list[RoundRecord]:
    """Concatenate the per-chunk records of each round along the query axis, summing times."""
    merged = []
    for same_round in zip(*parts):
        first = same_round[0]
        traced = [r.approx_scores for r in same_round if r.approx_scores is not None]
        merged.append(RoundRecord(
            first.round_index, first.phase, np.concatenate([r.items for r in same_round], axis=0),
            sum(r.n_calls for r in same_round), *(sum(getattr(r, f) for r in same_round)
                                                  for f in ("time_ce", "time_pinv", "time_matmul", "time_sample")),
            traced[0] if traced else None))
    return merged


def run_batched(plan: _Plan, index: DeviceIndex, counter: BudgetCounter, candidates: np.ndarray | None,
                prior: np.ndarray | None, prior_weight: float, query_ids: np.ndarray, trace_query: int | None,
                want_approx: bool, solver: str, batch_size: int | None) -> AdaCurResult:
    """ADACUR (Alg. 1) for every test query of ``counter``, in chunks of ``batch_size`` queries (default: a
    chunk's float64 working set stays under 512 MiB)."""
    nq = counter.n_queries
    k_q, n_items = index.R.shape
    k_i = plan.n_anchor_items
    # float64 working set per query: R_anc[:, I_anc]ᵀ, its Gram matrix, and a few (n_items,) rows.
    per_query = 8 * (k_i * k_q + k_i * k_i + 5 * n_items)
    chunk = batch_size or max(1, _CHUNK_BYTES // per_query)
    parts = []
    for start in range(0, nq, chunk):
        rows = np.arange(start, min(nq, start + chunk))
        trace_row = trace_query - start if trace_query is not None and start <= trace_query < start + rows.size else None
        parts.append(_run_batched_chunk(plan, index, counter, rows,
                                        None if candidates is None else candidates[rows],
                                        None if prior is None else prior[rows], prior_weight,
                                        query_ids[rows], trace_row, want_approx, solver))
    logger.debug("AdaCur batched: %d queries in %d chunks on %s", nq, len(parts), index.R.device)
    D, I, anchors, c_test, approx, records = zip(*parts)
    return AdaCurResult(np.concatenate(D), np.concatenate(I), np.concatenate(anchors), np.concatenate(c_test),
                        counter.calls.copy(), _merge_records(list(records)),
                        np.concatenate(approx) if want_approx else None)
