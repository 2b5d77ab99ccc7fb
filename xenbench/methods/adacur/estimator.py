"""The ADACUR estimator: :class:`AdaCur` (the algorithm's parameters, fit on R_anc, search under B_CE) and the
engine options :class:`SearchOptions` (which engine, device, solver, batch size: how fast, never which items).

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023: Alg. 1–3, §2.2 (split / No-Split), §3.2.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from xenbench._validation import check_choice, check_float, check_int, check_is_fitted, check_seed
from xenbench.errors import ParameterError
from xenbench.methods.adacur.batched import DeviceIndex, run_batched
from xenbench.methods.adacur.records import AdaCurResult, _Plan, round_sizes
from xenbench.methods.adacur.reference import run_reference
from xenbench.methods.adacur.samplers import _ORACLES, Oracle, Sampler, _check_sampler
from xenbench.methods.cur import _check_R_anc
from xenbench.metrics import BudgetCounter

__all__ = ["AdaCur", "SearchOptions"]


@dataclass(frozen=True)
class SearchOptions:
    """How an ADACUR / AXN search runs, not what it computes: every choice returns the same items.

    Attributes
    ----------
    implementation : {"batched", "reference"}, default "batched"
        Batched torch code or the per-query numpy reference; they return the same anchors and lists.
    device : str or torch.device, optional
        Device of the batched implementation; default "cuda" when available, else "cpu" (:class:`AdaCur`;
        :class:`xenbench.methods.axn.Axn` resolves it with :func:`xenbench._device.search_device`).
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
        self._device_cache: dict[str, DeviceIndex] = {}
        return self

    def _device_index(self, device: torch.device) -> DeviceIndex:
        """The offline index on ``device``, built on first use (query-independent, like E_I in ANNCUR)."""
        key = str(device)
        if key not in self._device_cache:
            self._device_cache[key] = DeviceIndex.build(self.R_anc_, device, self.plan_.score_eps)
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
            return run_reference(plan, self.R_anc_, counter, candidates, prior, prior_weight, query_ids, trace_query,
                                 return_approx)
        return run_batched(plan, self._device_index(self._torch_device()), counter, candidates, prior, prior_weight,
                           query_ids, trace_query, return_approx, options.solver, options.batch_size)

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



def _check_options(options: object, owner: str) -> SearchOptions:
    """Check the engine options of an estimator (errors name the option and the estimator)."""
    if not isinstance(options, SearchOptions):
        raise ParameterError("options", "None or a SearchOptions", type(options).__name__, owner)
    check_choice(options.implementation, "implementation", ("batched", "reference"), owner)
    check_choice(options.solver, "solver", ("gram", "pinv"), owner)
    if options.batch_size is not None:
        check_int(options.batch_size, "batch_size", 1, 2**62, owner, "inf")
    return options
