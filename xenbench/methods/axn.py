"""AXN: adaptive k-NN search for a cross-encoder over fixed item embeddings ([AXN] §2.2, Alg. 1).

Offline, every item i has an embedding v_i (rows of V, |I| × d): a dual encoder's, or a matrix
factorization's fitted to sparse CE scores. Online, a test query spends B_CE CE calls in R rounds of
k_s = B_CE / R items. Round 1 takes random items (or a retriever's top items); after each round the
query embedding is the least-squares fit of the CE scores a of the items A scored so far,

    u_LinReg = pinv(V_A) · a                                   (Eq. 4; V_A = rows of V for A)
    u        = (1 − λ) · u_LinReg + λ · u_param                (Eq. 7; u_param from a parametric encoder)

and the next round scores the k_s unscored items with the highest u · v_i (Eq. 5). The answer is the
top-k of all scored items by exact CE score (Eq. 6).

This is ADACUR's TopK No-Split search with R_anc replaced by Vᵀ: ŝ = a · pinv(V_Aᵀ) · Vᵀ = u_LinRegᵀ Vᵀ,
and Eq. 7 is linear, so mixing embeddings equals mixing scores, (1 − λ)·ŝ + λ·u_paramᵀ Vᵀ. :class:`Axn`
therefore runs :class:`xenbench.methods.adacur.AdaCur` (its batched torch and per-query numpy implementations,
budget accounting and timings) on Vᵀ with the :class:`~xenbench.methods.adacur.TopK` sampler, and owns the prior:
it turns u_param into ŝ_prior = u_paramᵀ Vᵀ and passes it with ``prior_weight=λ``.

References
----------
.. [AXN] Yadav, Monath, Zaheer, Fergus, McCallum. "Adaptive Retrieval and Scalable Indexing for k-NN
   Search with Cross-Encoders", ICLR 2024: §2.2, Alg. 1, Eq. 4–7.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from xenbench._device import search_device
from xenbench._validation import check_array, check_float, check_int, check_is_fitted
from xenbench.errors import NotFittedError, ParameterError  # noqa: F401  (NotFittedError: old import path)
from xenbench.methods.adacur import AdaCur, AdaCurResult, SearchOptions, TopK
from xenbench.metrics import BudgetCounter

__all__ = ["Axn", "prior_scale", "prior_scores"]


class Axn:
    """AXN test-time k-NN search under a budget of B_CE CE calls per test query (Alg. 1).

    Parameters
    ----------
    budget : int
        B_CE, CE calls per test query, ``1 <= B_CE <= n_items``.
    n_rounds : int, default 5
        R; round r scores k_s = B_CE / R items (the remainder goes to the first rounds).
    lam : float, default 0.0
        λ of Eq. 7 in [0, 1]: 0 is the pure regression embedding, 1 retrieves by u_param alone.
    seed : int, default 0
        Seed of the random first round (keyed per query, see :func:`xenbench.methods.adacur.keyed_uniforms`).
    options : SearchOptions, optional
        Implementation, device, solver and batch size of the search (:class:`xenbench.methods.adacur.SearchOptions`).
        The device ``"auto"`` (the default, also for None) is CUDA when available, else CPU; or
        ``"cpu"``, ``"cuda"``, ``"cuda:<k>"``. Checked in :meth:`fit` (:func:`xenbench._device.search_device`).

    Attributes
    ----------
    V_ : ndarray of shape (n_items, d), float64
        Item embeddings (the offline index).
    device_ : torch.device
        The resolved device of the search.
    lam_ : float
        λ, checked.
    engine_ : AdaCur
        The search engine fitted on Vᵀ.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> V, U = rng.standard_normal((300, 8)), rng.standard_normal((10, 8))
    >>> D, I = Axn(budget=40, n_rounds=4).fit(V).search(U @ V.T, k=10)
    >>> bool((I == np.argsort(-(U @ V.T), axis=1)[:, :10]).all())  # exactly low rank: exact top-10
    True
    """

    def __init__(self, budget: int, *, n_rounds: int = 5, lam: float = 0.0, seed: int = 0,
                 options: SearchOptions | None = None) -> None:
        self.budget = budget
        self.n_rounds = n_rounds
        self.lam = lam
        self.seed = seed
        self.options = options

    def fit(self, V: np.ndarray) -> "Axn":
        """Store the item embeddings V and validate the parameters against |I|.

        Parameters
        ----------
        V : ndarray of shape (n_items, d)
            Item embeddings v_i (a DE's, MF-TRNS's or MF-IND's).

        Returns
        -------
        self : Axn
        """
        owner = type(self).__name__
        V = check_array(V, "V", owner, expected="a finite, non-empty float array of shape (n_items, d)")
        self.lam_ = check_float(self.lam, "lam", 0, 1, owner)
        options = SearchOptions() if self.options is None else self.options
        if not isinstance(options, SearchOptions):
            raise ParameterError("options", "None or a SearchOptions", type(options).__name__, owner)
        self.device_ = search_device("auto" if options.device is None else options.device, owner)
        self.V_ = V.astype(np.float64, copy=False)  # no copy of a float64 V (10^5 items x d: 0.3 GB per fit)
        # Fitted on Vᵀ in V's own dtype: the engine computes in float64 but takes its pinv cut-off
        # from the precision V was stored in (xenbench.methods.cur.pinv_rtol).
        self.engine_ = AdaCur(self.budget, n_rounds=self.n_rounds, sampler=TopK(), first_round="random",
                              seed=self.seed, options=replace(options, device=self.device_)).fit(V.T)
        return self

    def run(self, scores: np.ndarray | BudgetCounter, *, u_param: np.ndarray | None = None,
            candidates: np.ndarray | None = None, query_ids: np.ndarray | None = None,
            trace_query: int | None = None, return_approx: bool = False) -> AdaCurResult:
        """Run Alg. 1 for every test query.

        Parameters
        ----------
        scores : ndarray of shape (nq, n_items) or BudgetCounter
            Exact CE scores of the test queries (every read is a counted CE call).
        u_param : ndarray of shape (nq, d), optional
            u_param of Eq. 7 (a parametric encoder's test query embeddings, on the scale of the CE
            scores: see :func:`prior_scale`); required when ``lam > 0``.
        candidates : int ndarray of shape (nq, >= k_s), optional
            A retriever's ranking; round 1 takes its first k_s items instead of random ones.
        query_ids : int ndarray of shape (nq,), optional
            Global ids (rows of the full score matrix) of the test queries: the random first round of
            a query is keyed by (seed, its id, round), so the same query gets the same first round in
            any subset. Default ``arange(nq)`` (position in this call): pass the ids whenever the
            queries are a subset.
        trace_query, return_approx
            As in :meth:`xenbench.methods.adacur.AdaCur.run`.

        Returns
        -------
        result : AdaCurResult
            ``anchors`` are the scored items A in the order chosen; ``D``/``I`` rank them by exact score.
        """
        check_is_fitted(self, "engine_", "fit(V)")
        prior = None
        if u_param is not None or self.lam_ > 0:
            prior = self._prior_scores(u_param, scores)
        return self.engine_.run(scores, candidates=candidates, prior_scores=prior, prior_weight=self.lam_,
                                query_ids=query_ids, trace_query=trace_query, return_approx=return_approx)

    def search(self, scores: np.ndarray | BudgetCounter, k: int, *, u_param: np.ndarray | None = None,
               candidates: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k items of every test query by exact CE score within B_CE calls (Eq. 6).

        Returns
        -------
        D : ndarray of shape (nq, k), float32
        I : ndarray of shape (nq, k), int64
        """
        check_is_fitted(self, "engine_", "fit(V)")
        k = check_int(k, "k", 1, self.engine_.plan_.budget, f"{type(self).__name__}.search", "budget")
        result = self.run(scores, u_param=u_param, candidates=candidates)
        return result.D[:, :k], result.I[:, :k]

    def _prior_scores(self, u_param: np.ndarray | None, scores: np.ndarray | BudgetCounter) -> np.ndarray | None:
        owner = f"{type(self).__name__}.run"
        nq = scores.n_queries if isinstance(scores, BudgetCounter) else np.asarray(scores).shape[0]
        d = self.V_.shape[1]
        if u_param is None:
            raise ParameterError("u_param", f"an array of shape ({nq}, {d}) since lam > 0", None, owner)
        if self.lam_ == 0:
            raise ParameterError("u_param", "None since lam = 0 (it would be ignored)", "an array", owner)
        u = np.asarray(u_param)
        if u.shape != (nq, d) or not np.issubdtype(u.dtype, np.floating) or not np.isfinite(u).all():
            raise ParameterError("u_param", f"a finite float array of shape ({nq}, {d})",
                                 f"{u.dtype} array of shape {u.shape}", owner)
        return prior_scores(self.V_, u)


def prior_scores(V: np.ndarray, u_param: np.ndarray) -> np.ndarray:
    """ŝ_prior = u_paramᵀ Vᵀ, Eq. 7 in score space: what :meth:`Axn.run` mixes into ŝ with weight λ.

    Eq. 7 is linear, so mixing the embeddings mixes their scores; the product depends on neither λ nor B_CE, so a
    sweep over them computes it once per query set (:func:`xenbench.studies.axn.axn_lambda_sweep`).

    Parameters
    ----------
    V : ndarray of shape (n_items, d)
        Item embeddings (:attr:`Axn.V_`).
    u_param : ndarray of shape (nq, d)
        Parametric query embeddings on the CE's scale (:func:`prior_scale`).

    Returns
    -------
    ndarray of shape (nq, n_items), float64
    """
    u, V = np.asarray(u_param), np.asarray(V)
    if u.ndim != 2 or u.shape[1] != V.shape[1] or not np.issubdtype(u.dtype, np.floating) or not np.isfinite(u).all():
        raise ParameterError("u_param", f"a finite float array of shape (nq, {V.shape[1]})",
                             f"{u.dtype} array of shape {u.shape}", "prior_scores")
    return u.astype(np.float64) @ V.astype(np.float64, copy=False).T


def prior_scale(ce_scores: np.ndarray, prior_scores: np.ndarray) -> float:
    """β that puts a parametric model's scores on the CE's scale: u_param = β · u_DE.

    Eq. 7 mixes two estimates of the same CE scores, so they must share a scale ([AXN] normalizes
    CE scores to the DE's with s' = β(s − α) for the same reason). A per-query offset α does not change
    any ranking, so only β matters: the ratio of the row-centered standard deviations, fitted on
    training queries scored by both.

    Parameters
    ----------
    ce_scores, prior_scores : ndarray of shape (n_queries, n_items)
        CE scores and the parametric model's scores (e.g. DE inner products) of the same pairs.

    Returns
    -------
    beta : float
    """
    ce, prior = np.asarray(ce_scores, dtype=np.float64), np.asarray(prior_scores, dtype=np.float64)
    if ce.ndim != 2 or ce.shape != prior.shape or ce.shape[1] < 2:
        raise ParameterError("prior_scores", f"an array of the CE scores' shape {ce.shape} with >= 2 items",
                             f"shape {prior.shape}", "prior_scale")
    spread = [np.sqrt(np.mean((x - x.mean(axis=1, keepdims=True)) ** 2)) for x in (ce, prior)]
    if not spread[1] > 0:
        raise ParameterError("prior_scores", "scores that vary across items", "constant rows", "prior_scale")
    return float(spread[0] / spread[1])

