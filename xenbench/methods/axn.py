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

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from xenbench._device import search_device
from xenbench.methods.adacur import AdaCur, AdaCurResult, SearchOptions, TopK
from xenbench._validation import check_array, check_float, check_int, check_is_fitted
from xenbench.errors import NotFittedError, ParameterError  # noqa: F401  (NotFittedError: old import path)
from xenbench.metrics import BudgetCounter, mean_se, recall_under_budget
from xenbench.methods.trace import RoundTrace, trace_from_result

__all__ = ["PAIRS", "SANITY_CHECKS", "Axn", "lambda_sweep", "paired_comparisons", "prior_scale", "protocol_runs", "protocol_summary",
           "round_trace"]


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
        self.V_ = V.astype(np.float64)
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
        return u.astype(np.float64) @ self.V_.T  # u_paramᵀ Vᵀ: Eq. 7 in score space


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


# ==============================================================================================
# tuning λ on a dev split ([AXN] §3: "we tune λ on the dev set")
# ==============================================================================================
def lambda_sweep(M_test: np.ndarray, V: np.ndarray, u_param: np.ndarray, lambdas: Sequence[float],
                 budgets: Sequence[int], k_values: Sequence[int] = (1, 10, 100), *, n_rounds: int = 5,
                 candidates: np.ndarray | None = None, method: str = "AXN", seed: int = 0,
                 query_ids: np.ndarray | None = None, per_query: bool = False,
                 device: str | torch.device = "auto") -> pd.DataFrame:
    """Top-k-Recall of AXN for every λ and budget B_CE: one run of all queries per (λ, B_CE).

    Parameters
    ----------
    M_test : ndarray of shape (nq, n_items)
        Exact CE scores of the queries (every read is a counted CE call).
    V : ndarray of shape (n_items, d)
        Item embeddings.
    u_param : ndarray of shape (nq, d)
        Parametric query embeddings on the CE's scale (used for λ > 0).
    lambdas : sequence of float
        λ values in [0, 1].
    budgets : sequence of int
        B_CE values.
    k_values : sequence of int
        Sizes of the exact neighbourhood; pairs with k > B_CE are skipped.
    n_rounds : int
        R (capped at B_CE).
    candidates : int ndarray of shape (nq, >= B_CE / R), optional
        A retriever's ranking for round 1 (default: random items).
    method : str
        Label of the ``method`` column.
    seed : int
        Seed of the random first round.
    query_ids : int ndarray of shape (nq,), optional
        Global ids (rows of the full score matrix) of the queries of ``M_test``; the random first
        round is keyed by them (see :meth:`Axn.run`). Default ``arange(nq)``.
    per_query : bool, default False
        Also return one row per (λ, B_CE, k, query) in a second frame (for paired tests).
    device : str or torch.device, default "auto"
        Torch device of the searches: CUDA when available, else CPU (see :class:`Axn`).

    Returns
    -------
    DataFrame
        Columns ``method``, ``lam``, ``budget``, ``k``, ``recall`` (mean over queries), ``recall_se``
        (its standard error) and ``n_test_queries``. With ``per_query=True``, a tuple of it and a
        frame with columns ``method``, ``lam``, ``budget``, ``k``, ``query``, ``recall``.
    """
    options = SearchOptions(device=search_device(device, "lambda_sweep"))
    rows, per_rows = [], []
    qids = np.arange(np.asarray(M_test).shape[0]) if query_ids is None else np.asarray(query_ids)
    for budget in budgets:
        for lam in lambdas:
            axn = Axn(budget, n_rounds=min(n_rounds, budget), lam=lam, seed=seed, options=options).fit(V)
            result = axn.run(M_test, u_param=u_param if lam > 0 else None, candidates=candidates, query_ids=query_ids)
            for k in (k for k in k_values if k <= budget):
                r = recall_under_budget(M_test, result.I, k, calls=result.calls, budget=budget, per_query=True)
                recall, se = mean_se(r)
                rows.append({"method": method, "lam": float(lam), "budget": int(budget), "k": int(k), "recall": recall,
                             "recall_se": se, "n_test_queries": int(r.size)})
                if per_query:
                    per_rows.append(pd.DataFrame({"method": method, "lam": float(lam), "budget": int(budget),
                                                  "k": int(k), "query": qids.astype(np.int64), "recall": r}))
    summary = pd.DataFrame(rows)
    if per_query:
        return summary, (pd.concat(per_rows, ignore_index=True) if per_rows else pd.DataFrame(
            columns=["method", "lam", "budget", "k", "query", "recall"]))
    return summary


def round_trace(M: np.ndarray, V: np.ndarray, query_row: int, *, budget: int, n_rounds: int = 5, lam: float = 0.0,
                u_param: np.ndarray | None = None, candidates: np.ndarray | None = None, seed: int = 0,
                device: str | torch.device = "auto") -> RoundTrace:
    """AXN for one query of M, keeping its approximate scores u · v_i after every round (for the
    per-round scatter of :func:`xenbench.viz.plots.adacur.round_scatter`; "anchors" are the scored items).

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores; row ``query_row`` is the query.
    V : ndarray of shape (n_items, d)
        Item embeddings.
    u_param : ndarray of shape (d,), optional
        The query's parametric embedding (required when ``lam > 0``).
    candidates : int ndarray of shape (>= B_CE / R,), optional
        A retriever's ranking for this query (round 1 takes its first items).
    budget, n_rounds, lam, seed
        As in :class:`Axn`; the random first round is keyed by ``query_row``.
    device : str or torch.device, default "auto"
        Torch device of the search: CUDA when available, else CPU (see :class:`Axn`).
    """
    device = search_device(device, "round_trace")
    axn = Axn(budget, n_rounds=n_rounds, lam=lam, seed=seed, options=SearchOptions(device=device)).fit(V)
    result = axn.run(M[[query_row]], u_param=None if u_param is None or lam == 0 else np.asarray(u_param)[None],
                     candidates=None if candidates is None else np.asarray(candidates)[None],
                     query_ids=np.array([query_row]), trace_query=0, return_approx=True)
    return trace_from_result(result, query_row, M[query_row], budget, f"AXN, λ = {lam:g}")


# ==============================================================================================
# the notebook-04 protocol: λ chosen on dev, test over first-round seeds × query splits, paired tests
# ==============================================================================================
#: Pre-declared comparisons of notebook 04, (challenger, baseline); fixed before any result is seen. All of them, every
#: (budget, k) cell, form the family of the verdict rule (:func:`xenbench.methods.protocol.verdict`).
PAIRS: tuple[tuple[str, str], ...] = (
    ("AXN DE, tuned λ", "DE re-rank"),                          # tuned AXN vs retrieve-and-rerank
    ("AXN, tuned λ", "AXN, λ = 0"),                             # sanity check: does u_param (Eq. 7) help at all?
    ("AXN DE, MF-IND, tuned λ", "ADACUR TopK No-Split"),        # AXN MF-IND vs ADACUR TopK No-Split
    ("AXN DE, MF-IND, tuned λ", "AXN DE, tuned λ"),             # does fitting V to the CE help?
)
#: Pairs of :data:`PAIRS` that are sanity checks, not claims: λ = 0 is one end of the grid that the tuned λ was
#: chosen from on dev, so tuned AXN is expected to be at least as good; the comparison checks the protocol, and its
#: size says how far the regression of Eq. 4 alone is from usable. It stays in the declared family.
SANITY_CHECKS: tuple[tuple[str, str], ...] = (("AXN, tuned λ", "AXN, λ = 0"),)


def _per_query_recalls(M_test: np.ndarray, I: np.ndarray, calls: np.ndarray, budget: int,
                       k_values: Sequence[int]) -> dict[int, np.ndarray]:
    return {k: recall_under_budget(M_test, I, k, calls=calls, budget=budget, per_query=True)
            for k in k_values if k <= budget}


def protocol_runs(M: np.ndarray, splits: Sequence, V: np.ndarray, U: np.ndarray, *, seeds: Sequence[int],
                  lambdas: Sequence[float], budgets: Sequence[int], k_values: Sequence[int] = (1, 10, 100),
                  n_rounds: int = 5, mf_items_per_query: int = 100, mf_epochs: int = 0, mf_lr: float = 0.005,
                  progress: bool = True, device: str | torch.device = "auto") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Notebook 04's protocol: every split × seed is one run; λ is chosen on dev rows, reported on test rows.

    Per split (:class:`xenbench.methods.protocol.Split`: anchor / dev / test rows of M): β = :func:`prior_scale`
    on the anchor (training) queries, u_param = β · U. Every random draw of a run takes the run's own seed,
    :func:`xenbench.methods.protocol.run_seed` of (split seed, seed). Methods:

    * "AXN" (random first round, keyed by (run seed, global query row)), once per seed in ``seeds``; λ is
      chosen once per split on its dev rows with the first seed's first round (halves the cost) and used by
      every seed;
    * "AXN DE" (the DE's top B_CE / R items first, then greedy rounds): deterministic given the split, so run
      once per split (``seed`` = the first seed);
    * "AXN DE, MF-IND" (with ``mf_epochs > 0``): per run, MF-IND ([AXN] §2.1) is fitted on G =
      ``mf_items_per_query`` random items of each anchor query, with the run seed choosing G's items, the MLP
      initialization and the pair order, so its runs carry its training's randomness; λ is chosen on dev
      for each fitted model.

    λ is chosen per (method, budget, k) by :func:`xenbench.methods.protocol.choose_on_dev` (ties to the smaller λ);
    each run reports the test rows at that λ ("…, tuned λ") and at λ = 0 ("…, λ = 0"). Baselines on the same
    test rows: ADACUR TopK No-Split (R_anc = M[anchor], random first round, per seed) and DE re-rank (per split).

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores (every read by a method is a counted CE call).
    splits : sequence of Split
        From :func:`xenbench.methods.protocol.query_splits`.
    V, U : ndarray of shape (n_items, d), (n_queries, d)
        DE item and query embeddings.
    seeds : sequence of int
        Seeds within a split (>= 1).
    lambdas, budgets, k_values, n_rounds
        As in :func:`lambda_sweep`.
    mf_items_per_query, mf_epochs, mf_lr
        MF-IND's sparse matrix G (k_d items per training query) and training
        (:class:`xenbench.methods.mf.MatrixFactorization`); 0 epochs: no MF-IND.
    device : str or torch.device, default "auto"
        Torch device of every AXN and ADACUR search and of MF-IND's training: CUDA when available, else CPU.

    Returns
    -------
    runs : DataFrame
        One row per (split, seed, method, budget, k) on the test rows: ``lam`` (NaN for baselines),
        ``recall``, ``recall_se`` (over queries), ``n_test_queries``, ``rows`` and ``per_query`` (arrays).
        Deterministic methods have rows for the first seed only.
    dev : DataFrame
        The dev λ sweeps, one per split and method (and per seed for MF-IND): :func:`lambda_sweep` frames with
        ``split`` and ``seed`` columns.
    """
    from tqdm.auto import tqdm

    from xenbench.methods.baselines import rerank_baseline
    from xenbench.metrics import BudgetCounter
    from xenbench.methods.mf import MatrixFactorization, observed_pairs
    from xenbench.methods.protocol import choose_on_dev, run_seed

    owner = "protocol_runs"
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ParameterError("seeds", "a non-empty list of ints >= 0", seeds, owner)
    if not splits:
        raise ParameterError("splits", "a non-empty list of protocol.Split", splits, owner)
    device = search_device(device, owner)
    options = SearchOptions(device=device)
    M = np.asarray(M)
    de = U @ V.T
    de_order = np.argsort(-de, axis=1, kind="stable")
    k_values = [int(k) for k in k_values]
    runs, dev_frames = [], []
    n_steps = len(splits) * (len(seeds) * (2 if mf_epochs else 1) + 2)
    bar = tqdm(total=n_steps, desc="04 protocol (split × method × seed)", disable=not progress)

    def add(split, seed, method, budget, lam, test, recalls):
        for k, r in recalls.items():
            recall, se = mean_se(r)
            runs.append({"split": int(split.seed), "seed": int(seed), "method": method, "budget": int(budget),
                         "k": int(k), "lam": float(lam), "recall": recall, "recall_se": se,
                         "n_test_queries": int(r.size), "rows": test, "per_query": r})

    for split in splits:
        anchor, dev, test = split.anchor, split.dev, split.test
        M_test = M[test]
        u_de = prior_scale(M[anchor], de[anchor]) * U

        def tune(name, V_m, u_m, cand, seed):
            """λ per (budget, k) with the best recall on the split's dev rows (run seed of ``seed``)."""
            sweep = lambda_sweep(M[dev], V_m, u_m[dev], lambdas, budgets, k_values, n_rounds=n_rounds,
                                 candidates=None if cand is None else cand[dev], method=name,
                                 seed=run_seed(int(split.seed), seed), query_ids=dev, device=device)
            dev_frames.append(sweep.assign(split=int(split.seed), seed=int(seed)))
            return choose_on_dev(sweep, ["budget", "k"], "lam")

        def report(name, V_m, u_m, cand, seed, chosen):
            """The run's test rows at the chosen λ per (budget, k), and at λ = 0."""
            for budget in budgets:
                at_b = chosen[chosen["budget"] == budget]
                for lam in sorted(set(at_b["lam"]) | {0.0}):
                    axn = Axn(budget, n_rounds=min(n_rounds, budget), lam=lam, seed=run_seed(int(split.seed), seed),
                              options=options).fit(V_m)
                    res = axn.run(M_test, u_param=u_m[test] if lam > 0 else None,
                                  candidates=None if cand is None else cand[test], query_ids=test)
                    rec = _per_query_recalls(M_test, res.I, res.calls, budget, k_values)
                    tuned = set(at_b.loc[at_b["lam"] == lam, "k"])
                    add(split, seed, f"{name}, tuned λ", budget, lam, test, {k: rec[k] for k in rec if k in tuned})
                    if lam == 0.0:
                        add(split, seed, f"{name}, λ = 0", budget, 0.0, test, rec)
            bar.update(1)

        chosen = tune("AXN", V, u_de, None, seeds[0])  # random first round: chosen once per split, on seed 0's draws
        for seed in seeds:
            report("AXN", V, u_de, None, seed, chosen)
        report("AXN DE", V, u_de, de_order, seeds[0], tune("AXN DE", V, u_de, de_order, seeds[0]))  # deterministic
        if mf_epochs:
            for seed in seeds:  # MF-IND is trained per run: G's items, initialization and pair order follow its seed
                rs = run_seed(int(split.seed), seed)
                rows_g, cols_g = observed_pairs(anchor.size, M.shape[1], mf_items_per_query, seed=rs)
                mf = MatrixFactorization("ind", epochs=mf_epochs, lr=mf_lr, seed=rs, progress=False,
                                         device=device).fit(U[anchor], V, rows_g, cols_g, M[anchor][rows_g, cols_g])
                V_mf, u_mf = mf.item_embeddings_, mf.transform_queries(U)
                report("AXN DE, MF-IND", V_mf, u_mf, de_order, seed, tune("AXN DE, MF-IND", V_mf, u_mf, de_order, seed))
        for seed in seeds:
            for budget in budgets:
                ada = AdaCur(budget, n_rounds=min(n_rounds, budget), sampler=TopK(),
                             seed=run_seed(int(split.seed), seed), options=options)
                res = ada.fit(M[anchor]).run(M_test, query_ids=test)
                add(split, seed, "ADACUR TopK No-Split", budget, np.nan, test,
                    _per_query_recalls(M_test, res.I, res.calls, budget, k_values))
        for budget in budgets:
            counter = BudgetCounter(M_test, budget)
            _, I = rerank_baseline(counter, de_order[test], budget)
            add(split, seeds[0], "DE re-rank", budget, np.nan, test,
                _per_query_recalls(M_test, I, counter.calls, budget, k_values))
        bar.update(1)
    bar.close()
    return pd.DataFrame(runs), pd.concat(dev_frames, ignore_index=True)


def protocol_summary(runs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Test recall per (method, budget, k): mean over runs with a t-interval over runs (seed × split;
    split only for the deterministic methods), :func:`xenbench.methods.protocol.summarize`; plus ``recall`` (the
    mean) and ``recall_se`` (sd over runs / √runs) for the plots, and the chosen λ values."""
    from xenbench.methods.protocol import summarize

    out = summarize(runs, ["method", "budget", "k"], confidence=confidence)
    out["recall"] = out["mean"]
    out["recall_se"] = out["sd_runs"] / np.sqrt(out["n_runs"])
    lams = runs.groupby(["method", "budget", "k"])["lam"].agg(
        lambda x: ", ".join(f"{v:g}" for v in sorted(set(x.dropna()))))
    return out.merge(lams.rename("lams").reset_index(), on=["method", "budget", "k"])


def paired_comparisons(runs: pd.DataFrame, pairs: Sequence[tuple[str, str]] = PAIRS, *,
                       confidence: float = 0.95) -> pd.DataFrame:
    """The pre-declared ``pairs`` (challenger a, baseline b) per (budget, k), under the one verdict rule.

    Per cell, :func:`xenbench.methods.protocol.compare_runs` over the runs (a deterministic method's one run per
    split pairs with every run of the other): the per-query paired test on each query's difference averaged
    over the runs in which it was a test query (``mean``, ``se``, ``lo``, ``hi``, ``p``, ``p_wilcoxon``, ``n``
    queries, ``n_a_better``, ``n_b_better``; its p-values cover the queries only) and the interval across the
    independent runs (``run_mean``, ``run_lo``, ``run_hi``, ``n_runs``). Every pair and cell was declared in
    advance, so the family is this table: :func:`xenbench.methods.protocol.decide` adds ``p_holm``,
    ``p_wilcoxon_holm`` and ``verdict``. ``sanity_check`` marks the pairs of :data:`SANITY_CHECKS`.
    """
    from xenbench.methods.protocol import compare_runs, decide

    out = []
    for a, b in pairs:
        for (budget, k), g in runs[runs["method"].isin([a, b])].groupby(["budget", "k"], sort=True):
            ga, gb = g[g["method"] == a], g[g["method"] == b]
            if ga.empty or gb.empty:
                continue
            c = compare_runs(ga, gb, split="split", seed="seed", confidence=confidence)
            out.append({"challenger": a, "baseline": b, "budget": int(budget), "k": int(k),
                        "sanity_check": (a, b) in SANITY_CHECKS, **c})
    if not out:
        return pd.DataFrame(out)
    return decide(pd.DataFrame(out))
