"""ADACUR: adaptive, per-query choice of anchor items for CUR-based k-NN search with cross-encoders.

For each test query, N_r rounds choose k_s = k_i / N_r anchor items each (Alg. 1). Round 1 is uniform
at random (or the top items of a retriever such as a dual encoder or TF-IDF); every later round
approximates all item scores from the anchors so far, ŝ = C_test · pinv(R_anc[:, I_anc]) · R_anc
(Alg. 2), and samples the next k_s anchors from ŝ with the chosen anchors masked (Alg. 3). The test
query is scored exactly (a CE call) on each new anchor.

Two ways to spend the CE budget B_CE (§2.2):

* **split** (``n_anchor_items < budget``): k_i anchors, then the items with the highest final ŝ that
  are not anchors are scored until B_CE calls are spent; anchors are re-ranked for free.
* **No-Split** (``n_anchor_items=None``): all B_CE calls go to anchors; return the anchors sorted by
  their exact scores.

Two implementations that must agree (tests check anchors, ranked lists and recall), chosen by
``options=SearchOptions(implementation=...)``:

* ``"reference"``: per query, numpy, loops; reads line by line against Alg. 1–3.
* ``"batched"``: all test queries at once with torch (CPU or GPU). Alg. 2 becomes a
  batched solve for the query weights w = C_test · pinv(R_anc[:, I_anc]) (one per query) and a single
  GEMM ŝ = W · R_anc; the solve grows a Cholesky factor by one block per round (``SearchOptions.solver``).

[AXN] Eq. 7 in score space, (1 − λ)·ŝ + λ·ŝ_prior, is an input of :meth:`AdaCur.run`
(``prior_scores``, ``prior_weight``): :class:`xenbench.methods.axn.Axn` owns λ and u_param and passes them.

Randomness is keyed, not sequential: the uniforms of (seed, query id, round, stream) come from
:func:`keyed_uniforms`, a counter-based SplitMix64 hash. Both implementations read the same numbers,
whatever the batching, so they draw identical anchors for the random and softmax samplers.

Samplers (``sampler=``)
-----------------------
A sampler is a small object with one method, ``keys(scores, draws)``: the k_s unchosen items with the
highest keys become the round's anchors. :data:`SAMPLERS` maps the names used by notebooks and yaml
files to default objects (:func:`make_sampler` also sets τ).

:class:`TopK` (``"topk"``)
    Greedy top-k_s of ŝ (TopK, Alg. 3 line 10).
:class:`SoftMax` (``"softmax"``)
    k_s items without replacement from softmax(ŝ / τ) (SoftMax, Alg. 3 line 12), drawn as the
    top-k_s of ŝ / τ + Gumbel noise (the Gumbel-top-k trick, Kool et al. 2019).
:class:`Random` (``"random"``)
    k_s items uniformly from the items that are not anchors yet (Alg. 3 line 14).
:class:`Oracle` (``"oracle_topk"``, ``"oracle_softmax"``)
    TopK^O_{k_m,ε} and SoftMax^O_{k_m,ε} of §3.2, the oracle analysis: they read the query's *exact*
    scores of all items (free oracle access, not counted as CE calls: an analysis tool), mask the
    exact top-k_m items, take (1 − ε)·k_s items greedily / by softmax of exact scores and ε·k_s
    uniformly at random. With ``n_rounds=1`` they are exactly the §3.2 strategies applied to ANNCUR
    (Fig. 5–7).

Engine options (:class:`SearchOptions`: implementation, device, solver, batch size) change how fast
the search runs, never which items it returns.

All top-k selections use the tie rule of :mod:`xenbench.metrics` (higher key, then lower index).
All linear algebra is float64 so that the two implementations rank items identically.

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023: Alg. 1–3, §2.2 (split / No-Split),
   §3.2 (oracle samplers), Fig. 4 (time per round in CE calls, pinv and matmul).
.. [ANNCUR] Yadav et al., EMNLP 2022, §2.3–2.4, §3.2 (budgeted evaluation).
.. [KOOL19] Kool, van Hoof, Welling. "Stochastic Beams and Where to Find Them: The Gumbel-Top-k Trick
   for Sampling Sequences Without Replacement", ICML 2019.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch

from xenbench._validation import check_choice, check_float, check_int, check_is_fitted, check_seed
from xenbench.methods.cur import AnnCur, _check_R_anc
from xenbench.errors import NotFittedError, ParameterError  # noqa: F401  (NotFittedError: old import path)
from xenbench.metrics import BudgetCounter, topk_indices

__all__ = [
    "SAMPLERS",
    "AdaCur",
    "AdaCurResult",
    "Draws",
    "Oracle",
    "Random",
    "RoundRecord",
    "Sampler",
    "SearchOptions",
    "SoftMax",
    "TopK",
    "anncur_with_budget",
    "keyed_uniforms",
    "make_sampler",
    "rank_by_exact",
    "rerank_baseline",
    "round_sizes",
    "search_device",
]

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

# Stream ids of keyed_uniforms within one (query, round).
_STREAM_MAIN, _STREAM_EPSILON = 0, 1


# ==============================================================================================
# keyed randomness, shared by both implementations
# ==============================================================================================
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on a uint64 array, in place (array ops wrap modulo 2**64 without warnings)."""
    tmp = np.empty_like(z)
    for shift, mult in ((30, _MIX1), (27, _MIX2)):
        z ^= np.right_shift(z, np.uint64(shift), out=tmp)
        z *= mult
    z ^= np.right_shift(z, np.uint64(31), out=tmp)
    return z


def keyed_uniforms(seed: int, query_ids: np.ndarray, round_index: int, stream: int, n_items: int) -> np.ndarray:
    """Uniform numbers in (0, 1), one per (query, item), as a pure function of their key.

    Each (seed, query id, round, stream) selects an independent SplitMix64 sequence and item i reads
    its i-th value. Row q does not depend on the other queries, so a per-query loop and a batched run
    (in any chunking) see the same numbers, which is what makes their random and softmax draws equal.

    Parameters
    ----------
    seed : int
        Non-negative seed of the run.
    query_ids : int ndarray of shape (nq,)
        Stable ids of the test queries (by default their row in the test matrix).
    round_index : int
        Round t of Alg. 1 (0-based).
    stream : int
        Independent stream within a round (the oracle samplers use a second one for their ε part).
    n_items : int
        |I|.

    Returns
    -------
    u : ndarray of shape (nq, n_items), float64
        Values in the open interval (0, 1), so that log(u) and log(-log(u)) are finite.
    """
    query_ids = np.asarray(query_ids, dtype=np.uint64).reshape(-1)
    h = np.zeros(query_ids.shape, dtype=np.uint64)
    for part in (np.full_like(h, seed), query_ids, np.full_like(h, round_index), np.full_like(h, stream)):
        h = _mix64(h + _GOLDEN * (part + np.uint64(1)))
    counters = _GOLDEN * (np.arange(1, n_items + 1, dtype=np.uint64))
    bits = _mix64(h[:, None] + counters[None, :])
    u = np.right_shift(bits, np.uint64(11), out=bits).astype(np.float64)  # 53 random bits
    u += 0.5
    u *= 1.0 / 2.0**53
    return u


def _gumbel(u: np.ndarray) -> np.ndarray:
    """Standard Gumbel noise -log(-log u) from uniforms in (0, 1), computed in place in ``u``."""
    np.log(u, out=u)
    np.negative(u, out=u)
    np.log(u, out=u)
    return np.negative(u, out=u)


# ==============================================================================================
# samplers (Alg. 3): one small object each, shared by both implementations
# ==============================================================================================
@dataclass(frozen=True)
class Draws:
    """The keyed random numbers of one round (seed, query ids, round t), as the caller's arrays.

    The reference passes numpy rows of one query, the batched code torch tensors of a chunk; both read
    :func:`keyed_uniforms`, so a sampler draws the same items in either.
    """

    uniform: Callable[[], Any]  # U(0, 1) per (query, item)
    gumbel: Callable[[], Any]   # -log(-log U) of the same uniforms


@dataclass(frozen=True)
class TopK:
    """TopK (Alg. 3 line 10): the k_s unchosen items with the highest ŝ."""

    name: ClassVar[str] = "topk"

    def keys(self, scores: Any, draws: Draws) -> Any:
        return scores


@dataclass(frozen=True)
class SoftMax:
    """SoftMax (Alg. 3 line 12): k_s items without replacement from softmax(ŝ / τ), as the top-k_s of
    ŝ / τ + Gumbel noise (the Gumbel-top-k trick, [KOOL19]).

    Attributes
    ----------
    temperature : float, default 1.0
        τ > 0: τ → 0 is TopK, τ → ∞ is Random.
    """

    temperature: float = 1.0
    name: ClassVar[str] = "softmax"

    def keys(self, scores: Any, draws: Draws) -> Any:
        return scores / self.temperature + draws.gumbel()


@dataclass(frozen=True)
class Random:
    """Random (Alg. 3 line 14): k_s items uniformly from the items that are not anchors yet."""

    name: ClassVar[str] = "random"

    def keys(self, scores: Any, draws: Draws) -> Any:
        return draws.uniform()


@dataclass(frozen=True)
class Oracle:
    """TopK^O_{k_m,ε} / SoftMax^O_{k_m,ε} of [ADACUR] §3.2: the oracle analysis of anchor choice.

    ``keys`` are the inner sampler's keys of the query's *exact* scores (free oracle access, not
    counted as CE calls). A round masks the exact top-k_m items, takes (1 − ε)·k_s items by these keys
    and ε·k_s uniformly at random from the rest.

    Attributes
    ----------
    inner : TopK or SoftMax, default TopK()
        How the greedy part ranks the exact scores.
    k_m : int, default 0
        Exact top items never chosen (``oracle_k_m`` in error messages).
    epsilon : float, default 0.0
        ε in [0, 1], the fraction of each round drawn uniformly (``oracle_epsilon``).
    """

    inner: TopK | SoftMax = TopK()
    k_m: int = 0
    epsilon: float = 0.0

    @property
    def name(self) -> str:
        return f"oracle_{self.inner.name}"

    def keys(self, scores: Any, draws: Draws) -> Any:
        return self.inner.keys(scores, draws)


Sampler = TopK | SoftMax | Random | Oracle

#: Sampler names of notebooks and yaml files -> default objects; :func:`make_sampler` sets τ.
SAMPLERS: dict[str, Sampler] = {
    "topk": TopK(), "softmax": SoftMax(), "random": Random(), "oracle_topk": Oracle(TopK()),
    "oracle_softmax": Oracle(SoftMax()),
}
_ORACLES = tuple(name for name, s in SAMPLERS.items() if isinstance(s, Oracle))


def make_sampler(sampler: str | Sampler, owner: str, *, temperature: float = 1.0) -> Sampler:
    """The sampler object of a name of :data:`SAMPLERS` with SoftMax temperature τ, or ``sampler`` itself.

    >>> make_sampler("oracle_softmax", "doc", temperature=0.5)
    Oracle(inner=SoftMax(temperature=0.5), k_m=0, epsilon=0.0)
    """
    if not isinstance(sampler, str):
        return sampler
    check_choice(sampler, "sampler", tuple(SAMPLERS), owner)
    return _with_temperature(SAMPLERS[sampler], temperature)


def _with_temperature(sampler: Sampler, temperature: float) -> Sampler:
    if isinstance(sampler, SoftMax):
        return SoftMax(temperature)
    if isinstance(sampler, Oracle):
        return replace(sampler, inner=_with_temperature(sampler.inner, temperature))
    return sampler


def _temperature(sampler: Sampler) -> float | None:
    """τ of a SoftMax sampler (plain or inside an oracle), else None."""
    inner = sampler.inner if isinstance(sampler, Oracle) else sampler
    return inner.temperature if isinstance(inner, SoftMax) else None


def round_sizes(n_anchor_items: int, n_rounds: int) -> list[int]:
    """k_s of every round: k_i / N_r, the remainder (if any) spread over the first rounds.

    >>> round_sizes(10, 5), round_sizes(11, 3)
    ([2, 2, 2, 2, 2], [4, 4, 3])
    """
    base, extra = divmod(n_anchor_items, n_rounds)
    return [base + (1 if t < extra else 0) for t in range(n_rounds)]


def _n_random(epsilon: float, k_s: int) -> int:
    """Number of uniformly random anchors ε·k_s of an oracle round, rounded half up."""
    return int(np.floor(epsilon * k_s + 0.5))


def rank_by_exact(items: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort every row of scored items by exact score (descending; ties to the lower item index).

    Parameters
    ----------
    items : int ndarray of shape (nq, m)
        Distinct items per row.
    scores : ndarray of shape (nq, m)
        Their exact CE scores.

    Returns
    -------
    D : ndarray of shape (nq, m), float32
    I : ndarray of shape (nq, m), int64
    """
    by_index = np.argsort(items, axis=1, kind="stable")
    items = np.take_along_axis(items, by_index, axis=1)
    scores = np.take_along_axis(scores, by_index, axis=1)
    order = np.argsort(-scores.astype(np.float64), axis=1, kind="stable")
    return (np.take_along_axis(scores, order, axis=1).astype(np.float32),
            np.take_along_axis(items, order, axis=1).astype(np.int64))


# ==============================================================================================
# records
# ==============================================================================================
@dataclass
class RoundRecord:
    """What one round of Alg. 1 did, over all test queries (Fig. 4 time breakdown).

    Attributes
    ----------
    round_index : int
        t, 0-based; the re-ranking phase of the split variant has ``round_index == n_rounds``.
    phase : str
        ``"anchors"`` (Alg. 1 lines 12–15) or ``"retrieve"`` (split variant: final ŝ, extra items).
    items : ndarray of shape (nq, k_s), int64
        Anchors I_anc^(t) chosen in this round (or the items retrieved for re-ranking).
    n_calls : int
        CE calls spent in this round, summed over queries.
    time_ce, time_pinv, time_matmul, time_sample : float
        Seconds spent scoring with the CE (Alg. 1 line 15), in pinv / the batched solve for
        C_test · U (Alg. 2 line 6), in the matmul with R_anc (Alg. 2 line 7) and in sampling
        (Alg. 3). The reference sums them over queries; the batched code measures wall time.
    approx_scores : ndarray of shape (n_items,) or None
        ŝ^(t) that chose ``items``, for the traced query only (zeros in round 0: no anchors yet).
    """

    round_index: int
    phase: str
    items: np.ndarray
    n_calls: int = 0
    time_ce: float = 0.0
    time_pinv: float = 0.0
    time_matmul: float = 0.0
    time_sample: float = 0.0
    approx_scores: np.ndarray | None = None


@dataclass
class AdaCurResult:
    """Output of :meth:`AdaCur.run`.

    Attributes
    ----------
    D : ndarray of shape (nq, B_CE), float32
        Exact scores of every scored item, descending.
    I : ndarray of shape (nq, B_CE), int64
        The scored items (anchors and, for split, retrieved items) re-ranked by exact score;
        ``I[:, :k]`` is the method's top-k.
    anchors : ndarray of shape (nq, k_i), int64
        I_anc in the order chosen (round by round).
    anchor_scores : ndarray of shape (nq, k_i), float32
        C_test, the exact scores of ``anchors``.
    calls : ndarray of shape (nq,), int64
        CE calls spent per query (from the :class:`~xenbench.metrics.BudgetCounter`).
    rounds : list of RoundRecord
        One record per round, plus one ``"retrieve"`` record for the split variant.
    approx_scores : ndarray of shape (nq, n_items), float32, or None
        Final ŝ from all k_i anchors (Alg. 1 line 16), when it was computed.
    """

    D: np.ndarray
    I: np.ndarray
    anchors: np.ndarray
    anchor_scores: np.ndarray
    calls: np.ndarray
    rounds: list[RoundRecord] = field(default_factory=list)
    approx_scores: np.ndarray | None = None

    def timings(self) -> dict[str, float]:
        """Total seconds per step over all rounds: ``ce``, ``pinv``, ``matmul``, ``sample``."""
        return {name: float(sum(getattr(r, f"time_{name}") for r in self.rounds))
                for name in ("ce", "pinv", "matmul", "sample")}


@dataclass(frozen=True)
class SearchOptions:
    """How an ADACUR / AXN search runs, not what it computes: every choice returns the same items.

    Attributes
    ----------
    implementation : {"batched", "reference"}, default "batched"
        Batched torch code or the per-query numpy reference; they return the same anchors and lists.
    device : str or torch.device, optional
        Device of the batched implementation; default "cuda" when available, else "cpu" (:class:`AdaCur`;
        :class:`xenbench.methods.axn.Axn` resolves it with :func:`search_device`).
    solver : {"gram", "pinv"}, default "gram"
        How the batched implementation applies pinv(R_anc[:, I_anc]) (Alg. 2 line 6). "pinv": a batched
        SVD per round, like the reference. "gram": a Cholesky factor of R_anc[:, I_anc]ᵀ R_anc[:, I_anc],
        gathered from the item Gram matrix R_ancᵀ R_anc (kept when it fits in 1 GiB) and extended by
        one block per round, checked by the residual on the anchors and refined once where needed;
        queries whose factor is rank-deficient or ill-conditioned fall back to pinv. Both give the
        reference's anchors; "gram" is several times faster.
    batch_size : int, optional
        Test queries per batched chunk; default keeps a chunk's float64 working set under 512 MiB.

    Checked by the estimator that receives them (in ``fit``), so errors name it.
    """

    implementation: str = "batched"
    device: str | torch.device | None = None
    solver: str = "gram"
    batch_size: int | None = None


@dataclass(frozen=True)
class _Plan:
    """Validated configuration shared by both implementations."""

    budget: int            # B_CE
    n_anchor_items: int    # k_i
    sizes: tuple[int, ...]  # k_s per round
    sampler: Sampler
    first_round: str       # "random" or "sampler" (candidates override it at run time)
    seed: int
    score_eps: float = float(np.finfo(np.float64).eps)  # eps of R_anc's stored dtype (pinv cut-off)

    @property
    def split(self) -> bool:
        return self.n_anchor_items < self.budget

    def round_sampler(self, t: int) -> Sampler:
        """The sampler of round t: round 1 of Alg. 1 is uniform at random (§2.2) unless chosen otherwise."""
        return Random() if t == 0 and self.first_round == "random" else self.sampler


# ==============================================================================================
# reference implementation: one query at a time, numpy, read against Alg. 1-3
# ==============================================================================================
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


def _run_reference(plan: _Plan, R_anc: np.ndarray, counter: BudgetCounter, candidates: np.ndarray | None,
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


# ==============================================================================================
# batched implementation: all queries at once, torch
# ==============================================================================================
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
class _DeviceIndex:
    """The offline index on a torch device: R_anc, R_ancᵀ and, when it fits, the item Gram matrix."""

    R: torch.Tensor         # R_anc, (k_q, n_items)
    RT: torch.Tensor        # R_ancᵀ, contiguous, (n_items, k_q): gathers R_anc[:, I_anc]ᵀ per query
    K: torch.Tensor | None  # R_ancᵀ R_anc, (n_items, n_items), or None when over _ITEM_GRAM_BYTES
    score_eps: float = float(np.finfo(np.float64).eps)  # eps of R_anc's stored dtype (pinv cut-off)

    @classmethod
    def build(cls, R_anc: np.ndarray, device: torch.device,
              score_eps: float = float(np.finfo(np.float64).eps)) -> "_DeviceIndex":
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

    def __init__(self, index: _DeviceIndex, nq: int, k_i: int, prior: torch.Tensor | None = None,
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


def _weights(index: _DeviceIndex, A: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """w = R_anc[:, I_anc] · y per query, (nq, k_q): a weighted sum of a rows of R_ancᵀ (embedding_bag)."""
    return torch.nn.functional.embedding_bag(A, index.RT, per_sample_weights=y, mode="sum")


def _approx_scores_item_gram(index: _DeviceIndex, A: torch.Tensor, c: torch.Tensor, Linv: torch.Tensor,
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


def _run_batched_chunk(plan: _Plan, index: _DeviceIndex, counter: BudgetCounter, rows: np.ndarray,
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


# ==============================================================================================
# estimator
# ==============================================================================================
def _as_counter(scores: np.ndarray | BudgetCounter, budget: int, n_items: int, owner: str) -> BudgetCounter:
    """Wrap an exact score matrix in a fresh BudgetCounter, or check a given counter."""
    if isinstance(scores, BudgetCounter):
        counter = scores
    else:
        M = np.asarray(scores)
        if M.ndim != 2 or M.shape[1] != n_items or not np.issubdtype(M.dtype, np.floating):
            raise ParameterError("scores", f"a float array of shape (nq, n_items={n_items}) or a BudgetCounter",
                                 f"{M.dtype} array of shape {M.shape}", owner)
        counter = BudgetCounter(M, budget)
    if counter.n_items != n_items:
        raise ParameterError("scores", f"scores over n_items={n_items} items", f"{counter.n_items} items", owner)
    if counter.budget is not None and counter.budget < budget:
        raise ParameterError("scores", f"a BudgetCounter with budget >= {budget}", counter.budget, owner)
    if counter.calls.any():
        raise ParameterError("scores", "a fresh BudgetCounter (no calls spent)",
                             f"one with {int(counter.calls.sum())} calls spent", owner)
    return counter


def _check_candidates(candidates: object, n_queries: int, n_items: int, width: int, owner: str) -> np.ndarray:
    """Check first-round candidates: int (nq, >= width), in range, the first ``width`` distinct per row."""
    cand = np.asarray(candidates)
    if cand.ndim != 2 or cand.shape[0] != n_queries or cand.shape[1] < width or not np.issubdtype(cand.dtype, np.integer):
        raise ParameterError("candidates", f"an int array of shape (nq={n_queries}, >= {width})",
                             f"{cand.dtype} array of shape {cand.shape}", owner)
    head = np.sort(cand[:, :width], axis=1)
    if head.size and (head.min() < 0 or head.max() >= n_items):
        raise ParameterError("candidates", f"item indices in [0, n_items={n_items})",
                             f"values in [{head.min()}, {head.max()}]", owner)
    if (head[:, 1:] == head[:, :-1]).any():
        raise ParameterError("candidates", f"distinct items in the first {width} columns of every row",
                             "a row with repeated items", owner)
    return cand


def _check_prior(prior_scores: object, prior_weight: float, n_queries: int, n_items: int, owner: str) -> np.ndarray | None:
    """Check ŝ_prior against λ: a finite float (nq, n_items) array exactly when λ > 0."""
    if prior_scores is None:
        if prior_weight > 0:
            raise ParameterError("prior_scores", f"a float array of shape ({n_queries}, {n_items}) since prior_weight > 0",
                                 None, owner)
        return None
    if prior_weight == 0:
        raise ParameterError("prior_scores", "None since prior_weight = 0 (they would be ignored)",
                             "an array", owner)
    prior = np.asarray(prior_scores)
    if prior.shape != (n_queries, n_items) or not np.issubdtype(prior.dtype, np.floating) or not np.isfinite(prior).all():
        raise ParameterError("prior_scores", f"a finite float array of shape ({n_queries}, {n_items})",
                             f"{prior.dtype} array of shape {prior.shape}", owner)
    return prior


def search_device(device: str | torch.device, owner: str) -> torch.device:
    """The torch device of an ADACUR / AXN search: :func:`xenbench.models.crossencoder.resolve_device` for float64.

    ``"auto"`` is CUDA when available, else CPU (not MPS: the searches compute in float64). Raises one
    :class:`ParameterError` naming ``device`` and ``owner`` for a string that is not a device, ``"cuda"``
    on a machine without CUDA, or ``"mps"``.
    """
    from xenbench._device import resolve_device

    return resolve_device(device, owner=owner, float64=True)


class AdaCur:
    """ADACUR k-NN search under a budget of B_CE cross-encoder calls per test query.

    Parameters
    ----------
    budget : int
        B_CE, CE calls per test query, ``1 <= B_CE <= n_items``.
    n_anchor_items : int or None, default None
        k_i. ``None`` is ADACUR^No-Split (k_i = B_CE, the anchors are the answer); ``k_i < B_CE`` is
        the split variant (k_r = B_CE − k_i more items retrieved by the final ŝ and re-ranked).
    n_rounds : int, default 5
        N_r, ``1 <= N_r <= k_i``; round t chooses k_s = k_i / N_r anchors (see :func:`round_sizes`).
    sampler : TopK, SoftMax, Random, Oracle or a name of :data:`SAMPLERS`, default "topk"
        Alg. 3 strategy, or a §3.2 oracle (module docstring); a name gets the default object (τ = 1,
        k_m = 0, ε = 0).
    first_round : {"auto", "random", "sampler"}, default "auto"
        How round 1 is chosen when no ``candidates`` are given: "random" (Alg. 1, §2.2); "sampler"
        (use the sampler; allowed only with the oracle samplers, since ŝ ≡ 0 before any anchor and
        TopK would give every query items 0..k_s−1: a ParameterError otherwise);
        "auto" = "sampler" for the oracle samplers, "random" otherwise.
    seed : int, default 0
        Seed of every random choice (see :func:`keyed_uniforms`).
    options : SearchOptions, optional
        Implementation, device, solver and batch size (:class:`SearchOptions`; default its defaults).
        They change the speed, not the anchors or the ranked lists.

    Attributes
    ----------
    R_anc_ : ndarray of shape (k_q, n_items), float64
        Scores of the anchor queries Q_anc on all items (the offline index).
    plan_.score_eps : float
        eps of R_anc's dtype as given (e.g. float32): the pinv cut-off is max(k_q, |I_anc|) · eps.
    n_items_ : int
        |I|.

    References
    ----------
    [ADACUR] Alg. 1–3, §2.2, §3.2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> M = (rng.standard_normal((60, 4)) @ rng.standard_normal((4, 200))).astype(np.float32)
    >>> ada = AdaCur(budget=20, n_rounds=4, options=SearchOptions(implementation="reference")).fit(M[:20])
    >>> D, I = ada.search(M[20:], k=5)
    >>> D.shape, I.dtype
    ((40, 5), dtype('int64'))
    """

    def __init__(self, budget: int, *, n_anchor_items: int | None = None, n_rounds: int = 5,
                 sampler: str | Sampler = "topk", first_round: str = "auto", seed: int = 0,
                 options: SearchOptions | None = None) -> None:
        self.budget = budget
        self.n_anchor_items = n_anchor_items
        self.n_rounds = n_rounds
        self.sampler = sampler
        self.first_round = first_round
        self.seed = seed
        self.options = options

    # -- parameters --------------------------------------------------------------------------
    def _plan(self, n_items: int, score_dtype: np.dtype | type = np.float64) -> _Plan:
        owner = type(self).__name__
        budget = check_int(self.budget, "budget", 1, n_items, owner, "n_items")
        k_i = budget if self.n_anchor_items is None else check_int(
            self.n_anchor_items, "n_anchor_items", 1, budget, owner, "budget")
        n_rounds = check_int(self.n_rounds, "n_rounds", 1, k_i, owner, "n_anchor_items")
        sampler = _check_sampler(self.sampler, n_items - k_i, owner)
        check_choice(self.first_round, "first_round", ("auto", "random", "sampler"), owner)
        oracle = isinstance(sampler, Oracle)
        first = self.first_round
        if first == "auto":
            first = "sampler" if oracle else "random"
        if first == "sampler" and not oracle:
            # Before any anchor ŝ ≡ 0, so TopK would give every query items 0..k_s−1 (and SoftMax
            # / Random would just be a uniform draw): only an oracle sampler can choose round 1.
            raise ParameterError("first_round", f"'random' or 'auto' with sampler={sampler.name!r} ('sampler' "
                                 f"needs an oracle sampler {_ORACLES}: before any anchor the approximate "
                                 "scores are all 0)", self.first_round, owner)
        check_seed(self.seed, owner)
        _check_options(self._options(), owner)
        return _Plan(budget, k_i, tuple(round_sizes(k_i, n_rounds)), sampler, first, int(self.seed),
                     float(np.finfo(np.dtype(score_dtype)).eps))

    def _options(self) -> SearchOptions:
        return SearchOptions() if self.options is None else self.options

    def _torch_device(self) -> torch.device:
        device = self._options().device
        if device is None:
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            return torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ParameterError("device", "a torch device such as 'cpu' or 'cuda:0'", device,
                                 type(self).__name__) from exc

    # -- estimator API -----------------------------------------------------------------------
    def fit(self, R_anc: np.ndarray) -> "AdaCur":
        """Store the offline index R_anc and validate the parameters against n_items.

        Parameters
        ----------
        R_anc : ndarray of shape (k_q, n_items)
            Exact CE scores of the anchor queries Q_anc on all items.

        Returns
        -------
        self : AdaCur
        """
        R_anc = _check_R_anc(R_anc, type(self).__name__)
        self.plan_ = self._plan(R_anc.shape[1], R_anc.dtype)  # R_anc's dtype sets the pinv cut-off
        self.R_anc_ = R_anc.astype(np.float64)
        self.n_items_ = R_anc.shape[1]
        self._device_cache: dict[str, _DeviceIndex] = {}
        return self

    def _device_index(self, device: torch.device) -> _DeviceIndex:
        """The offline index on ``device``, built on first use (query-independent, like E_I in ANNCUR)."""
        key = str(device)
        if key not in self._device_cache:
            self._device_cache[key] = _DeviceIndex.build(self.R_anc_, device, self.plan_.score_eps)
        return self._device_cache[key]

    def run(self, scores: np.ndarray | BudgetCounter, *, candidates: np.ndarray | None = None,
            prior_scores: np.ndarray | None = None, prior_weight: float = 0.0, query_ids: np.ndarray | None = None,
            trace_query: int | None = None, return_approx: bool = False) -> AdaCurResult:
        """Run ADACUR for every test query and return everything it did.

        Parameters
        ----------
        scores : ndarray of shape (nq, n_items) or BudgetCounter
            Exact CE scores of the test queries: the CE "oracle". Every read that the method makes
            goes through a :class:`~xenbench.metrics.BudgetCounter` (created with ``budget`` when an
            array is given), so the run fails if it ever exceeds B_CE.
        candidates : int ndarray of shape (nq, >= k_s), optional
            Item rankings of a cheap retriever (DE, TF-IDF), best first; round 1 takes the first k_s
            (ADACUR_{DE+TopK}, §3). Overrides ``first_round``.
        prior_scores : float ndarray of shape (nq, n_items), optional
            ŝ_prior: rounds after the first sample from (1 − λ)·ŝ + λ·ŝ_prior, λ = ``prior_weight``.
            This is [AXN] Eq. 7 written in score space (with R_anc = Vᵀ it is AXN itself, which is how
            :class:`xenbench.methods.axn.Axn` uses it). Required when ``prior_weight > 0`` and refused
            otherwise. Free: they cost no CE calls.
        prior_weight : float, default 0.0
            λ in [0, 1] of the mixing above.
        query_ids : int ndarray of shape (nq,), optional
            Keys of the per-query randomness; default ``arange(nq)``. Pass the global ids to get the
            same draws for a query whatever subset it is run in.
        trace_query : int, optional
            Row whose approximate scores ŝ^(t) are kept in every :class:`RoundRecord`.
        return_approx : bool, default False
            Also compute and return the final ŝ of all queries (for Fig. 6/7 style analysis).

        Returns
        -------
        result : AdaCurResult
        """
        check_is_fitted(self, "plan_", "fit(R_anc)")
        owner = f"{type(self).__name__}.run"
        plan = self.plan_
        # λ keeps the message it had as a parameter of the estimator ("... parameter of AdaCur").
        prior_weight = float(check_float(prior_weight, "prior_weight", 0, 1, type(self).__name__))
        counter = _as_counter(scores, plan.budget, self.n_items_, owner)
        nq = counter.n_queries
        if candidates is not None:
            candidates = _check_candidates(candidates, nq, self.n_items_, plan.sizes[0], owner)
        if query_ids is None:
            query_ids = np.arange(nq, dtype=np.int64)
        else:
            query_ids = np.asarray(query_ids)
            if query_ids.shape != (nq,) or not np.issubdtype(query_ids.dtype, np.integer) or (query_ids < 0).any():
                raise ParameterError("query_ids", f"a non-negative int array of shape ({nq},)",
                                     f"{query_ids.dtype} array of shape {query_ids.shape}", owner)
        if trace_query is not None:
            trace_query = check_int(trace_query, "trace_query", 0, nq - 1, owner, "nq - 1")
        prior = _check_prior(prior_scores, prior_weight, nq, self.n_items_, owner)
        options = self._options()
        if options.implementation == "reference":
            return _run_reference(plan, self.R_anc_, counter, candidates, prior, prior_weight, query_ids, trace_query,
                                  return_approx)
        return self._run_batched(plan, options, counter, candidates, prior, prior_weight, query_ids, trace_query,
                                 return_approx)

    def _run_batched(self, plan: _Plan, options: SearchOptions, counter: BudgetCounter,
                     candidates: np.ndarray | None, prior: np.ndarray | None, prior_weight: float,
                     query_ids: np.ndarray, trace_query: int | None, want_approx: bool) -> AdaCurResult:
        device = self._torch_device()
        index = self._device_index(device)
        nq = counter.n_queries
        k_q = self.R_anc_.shape[0]
        k_i = plan.n_anchor_items
        # float64 working set per query: R_anc[:, I_anc]ᵀ, its Gram matrix, and a few (n_items,) rows.
        per_query = 8 * (k_i * k_q + k_i * k_i + 5 * self.n_items_)
        chunk = options.batch_size or max(1, _CHUNK_BYTES // per_query)
        parts = []
        for start in range(0, nq, chunk):
            rows = np.arange(start, min(nq, start + chunk))
            trace_row = trace_query - start if trace_query is not None and start <= trace_query < start + rows.size else None
            parts.append(_run_batched_chunk(plan, index, counter, rows,
                                            None if candidates is None else candidates[rows],
                                            None if prior is None else prior[rows], prior_weight,
                                            query_ids[rows], trace_row, want_approx, options.solver))
        logger.debug("AdaCur batched: %d queries in %d chunks on %s", nq, len(parts), device)
        D, I, anchors, c_test, approx, records = zip(*parts)
        return AdaCurResult(np.concatenate(D), np.concatenate(I), np.concatenate(anchors), np.concatenate(c_test),
                            counter.calls.copy(), _merge_records(list(records)),
                            np.concatenate(approx) if want_approx else None)

    def search(self, scores: np.ndarray | BudgetCounter, k: int, *, candidates: np.ndarray | None = None,
               prior_scores: np.ndarray | None = None, prior_weight: float = 0.0,
               query_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k items of every test query by exact score, within B_CE CE calls (faiss contract).

        Parameters
        ----------
        scores : ndarray of shape (nq, n_items) or BudgetCounter
            Exact CE scores of the test queries (see :meth:`run`).
        k : int
            ``1 <= k <= B_CE``.
        candidates, prior_scores, prior_weight, query_ids
            As in :meth:`run`.

        Returns
        -------
        D : ndarray of shape (nq, k), float32
            Exact CE scores, descending.
        I : ndarray of shape (nq, k), int64
        """
        check_is_fitted(self, "plan_", "fit(R_anc)")
        k = check_int(k, "k", 1, self.plan_.budget, f"{type(self).__name__}.search", "budget")
        result = self.run(scores, candidates=candidates, prior_scores=prior_scores, prior_weight=prior_weight,
                          query_ids=query_ids)
        return result.D[:, :k], result.I[:, :k]


def _check_sampler(sampler: object, max_k_m: int, owner: str) -> Sampler:
    """The sampler object of ``sampler`` (a name of SAMPLERS or an object), its parameters checked.

    The messages keep the names the parameters had on the estimator (``temperature``,
    ``oracle_k_m``, ``oracle_epsilon``)."""
    if isinstance(sampler, str):
        sampler = make_sampler(sampler, owner)
    elif not isinstance(sampler, (TopK, SoftMax, Random, Oracle)):
        raise ParameterError("sampler", f"one of {tuple(SAMPLERS)} or a TopK, SoftMax, Random or Oracle object",
                             sampler, owner)
    if isinstance(sampler, Oracle):
        if not isinstance(sampler.inner, (TopK, SoftMax)):
            raise ParameterError("sampler", "an Oracle of TopK() or SoftMax(temperature)", sampler, owner)
        check_int(sampler.k_m, "oracle_k_m", 0, max_k_m, owner, "n_items - n_anchor_items")
        check_float(sampler.epsilon, "oracle_epsilon", 0, 1, owner)
    temperature = _temperature(sampler)
    if temperature is not None:
        check_float(temperature, "temperature", 0, None, owner, closed="neither")
    return sampler


def _check_options(options: object, owner: str) -> SearchOptions:
    """Check the engine options of an estimator (errors name the option and the estimator)."""
    if not isinstance(options, SearchOptions):
        raise ParameterError("options", "None or a SearchOptions", type(options).__name__, owner)
    check_choice(options.implementation, "implementation", ("batched", "reference"), owner)
    check_choice(options.solver, "solver", ("gram", "pinv"), owner)
    if options.batch_size is not None:
        check_int(options.batch_size, "batch_size", 1, 2**62, owner, "inf")
    return options


# ==============================================================================================
# baselines at the same budget
# ==============================================================================================
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
