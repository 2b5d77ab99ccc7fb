"""Notebook 04's driver: AXN's λ of Eq. 7 chosen on dev queries, tested over first-round seeds × query splits.

:func:`axn_lambda_sweep` measures AXN (:class:`xenbench.methods.axn.Axn`) for every λ and budget B_CE;
:func:`axn_protocol_runs` runs the protocol (λ chosen on each split's dev rows, reported on its test rows, with
the baselines ADACUR TopK No-Split and DE re-rank); :func:`axn_protocol_summary` and
:func:`axn_paired_comparisons` summarize it under the one verdict rule (:func:`xenbench.studies.protocol.verdict`);
:func:`axn_round_trace` follows one query round by round.

References
----------
.. [AXN] Yadav, Monath, Zaheer, Fergus, McCallum. "Adaptive Retrieval and Scalable Indexing for k-NN
   Search with Cross-Encoders", ICLR 2024: §2.1 (MF-IND), §2.2, Alg. 1, Eq. 4–7, §3 ("we tune λ on the dev set").
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from xenbench._device import search_device
from xenbench._validation import check_float
from xenbench.errors import BudgetExceededError, ParameterError
from xenbench.methods.adacur import SearchOptions
from xenbench.methods.axn import Axn, prior_scale, prior_scores
from xenbench.methods.trace import RoundTrace, trace_from_result
from xenbench.metrics import LABEL_MEASURES, mean_se, topk_indices
from xenbench.studies.labels import LABEL_COLUMNS, choose_by_labels
from xenbench.studies.methods import REGISTRY, SPLIT_FRACTIONS, SplitState
from xenbench.studies.records import as_comparison

__all__ = ["AXN_LABEL_MEASURES", "AXN_PAIRS", "SANITY_CHECKS", "axn_lambda_sweep", "axn_paired_comparisons", "axn_protocol_runs",
           "axn_protocol_summary", "axn_round_trace"]


# ==============================================================================================
# the work of a λ sweep that depends on neither λ nor B_CE, done once per query set
# ==============================================================================================
class _ExactTopK:
    """The exact top-max(k) items of a set of query rows (the tie rule of :func:`xenbench.metrics.topk_indices`),
    found once: every run on those rows reads its Top-k-Recall from them, instead of partitioning the rows × items
    matrix again for each (λ, B_CE, k) as :func:`xenbench.metrics.recall_under_budget` would (at 10^5 items that was a
    (nq, n_items) partition and two (nq, n_items) masks per call). The values equal it: the exact top-k is the first
    k of the top-max(k) in the one total order (score descending, index ascending), and a recall is |T ∩ S| / k.

    Parameters
    ----------
    M_rows : ndarray of shape (nq, n_items)
        Exact CE scores of the rows.
    k_values : sequence of int
        The k of Top-k-Recall.
    """

    def __init__(self, M_rows: np.ndarray, k_values: Sequence[int]) -> None:
        M_rows = np.asarray(M_rows)
        self.n_items = M_rows.shape[1]
        # a k above n_items is above every budget too (B_CE <= n_items), so never read: as before, no error for it
        k_max = min(max((int(k) for k in k_values), default=0), self.n_items)
        self.T = topk_indices(M_rows, k_max) if k_max else np.zeros((M_rows.shape[0], 0), np.int64)

    def recalls(self, retrieved: np.ndarray, calls: np.ndarray, budget: int,
                k_values: Sequence[int]) -> dict[int, np.ndarray]:
        """Per-query Top-k-Recall of ``retrieved`` (int (nq, m), -1 = padding) for every k <= ``budget``, after the
        budget check of :func:`xenbench.metrics.recall_under_budget` (``calls`` per query)."""
        calls = np.asarray(calls)
        if calls.max(initial=0) > budget:
            q = int(np.argmax(calls))
            raise BudgetExceededError(f"query {q} spent {int(calls[q])} CE calls, more than the budget "
                                      f"B_CE={budget}; compare methods at equal budget only")
        S = np.asarray(retrieved, dtype=np.int64)
        # One flat key per (row, item): membership of T's items in S row by row, without (nq, n_items) masks;
        # -1 padding becomes -1, which no item of T matches, and a duplicate in S counts once (T's items are distinct).
        offset = np.arange(S.shape[0], dtype=np.int64)[:, None] * self.n_items
        S_keys = np.where(S >= 0, S + offset, -1)
        out = {}
        for k in (int(k) for k in k_values if k <= budget):
            found = np.isin(self.T[:, :k] + offset, S_keys).sum(axis=1)
            out[k] = found / k
        return out


# ==============================================================================================
# tuning λ on a dev split ([AXN] §3: "we tune λ on the dev set")
# ==============================================================================================
def axn_lambda_sweep(M_test: np.ndarray, V: np.ndarray, u_param: np.ndarray, lambdas: Sequence[float],
                     budgets: Sequence[int], k_values: Sequence[int] = (1, 10, 100), *, n_rounds: int = 5,
                     candidates: np.ndarray | None = None, method: str = "AXN", seed: int = 0,
                     query_ids: np.ndarray | None = None, per_query: bool = False,
                     device: str | torch.device = "auto", ranked: bool = False) -> pd.DataFrame:
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
    ranked : bool, default False
        Add a column ``ranked``: each (λ, B_CE)'s ranked lists (int array (nq, B_CE), the scored items by exact score),
        for the label measures (:mod:`xenbench.studies.labels`).

    Returns
    -------
    DataFrame
        Columns ``method``, ``lam``, ``budget``, ``k``, ``recall`` (mean over queries), ``recall_se``
        (its standard error) and ``n_test_queries`` (and ``ranked``). With ``per_query=True``, a tuple of it and a
        frame with columns ``method``, ``lam``, ``budget``, ``k``, ``query``, ``recall``.
    """
    owner = "axn_lambda_sweep"
    options = SearchOptions(device=search_device(device, owner))
    lambdas = [check_float(lam, "lambdas", 0, 1, owner) for lam in lambdas]
    M_test = np.asarray(M_test)
    rows, per_rows = [], []
    qids = np.arange(M_test.shape[0]) if query_ids is None else np.asarray(query_ids)
    exact = _ExactTopK(M_test, k_values)  # once, not per (λ, B_CE, k)
    prior = _LazyPrior(u_param)  # u_paramᵀ Vᵀ once, not per (λ, B_CE)
    for budget in budgets:
        # one engine per B_CE runs every λ: λ is only the prior's weight in ŝ (Eq. 7 in score space), so the index of
        # V is built once per budget instead of once per (λ, B_CE)
        axn = Axn(budget, n_rounds=min(n_rounds, budget), seed=seed, options=options).fit(V)
        for lam in lambdas:
            result = _run_at(axn, lam, M_test, prior, candidates, query_ids)
            per_k = exact.recalls(result.I, result.calls, budget, k_values)
            for k in (k for k in k_values if k <= budget):
                r = per_k[k]
                recall, se = mean_se(r)
                rows.append({"method": method, "lam": float(lam), "budget": int(budget), "k": int(k), "recall": recall,
                             "recall_se": se, "n_test_queries": int(r.size)} | ({"ranked": result.I} if ranked else {}))
                if per_query:
                    per_rows.append(pd.DataFrame({"method": method, "lam": float(lam), "budget": int(budget),
                                                  "k": int(k), "query": qids.astype(np.int64), "recall": r}))
    summary = pd.DataFrame(rows)
    if per_query:
        return summary, (pd.concat(per_rows, ignore_index=True) if per_rows else pd.DataFrame(
            columns=["method", "lam", "budget", "k", "query", "recall"]))
    return summary


class _LazyPrior:
    """ŝ_prior = u_paramᵀ Vᵀ of one query set (:func:`xenbench.methods.axn.prior_scores`), computed on the first run
    with λ > 0 and reused by every later one (every B_CE and λ of the same V and rows)."""

    def __init__(self, u_param: np.ndarray | None) -> None:
        self.u_param, self.scores = u_param, None

    def __call__(self, axn: Axn, n_queries: int) -> np.ndarray:
        if self.scores is None:
            d = axn.V_.shape[1]
            u = None if self.u_param is None else np.asarray(self.u_param)
            if u is None or u.shape != (n_queries, d):  # as Axn.run: a u_param of the rows' shape when λ > 0
                raise ParameterError("u_param", f"an array of shape ({n_queries}, {d}) since a λ > 0 is run",
                                     None if u is None else f"{u.dtype} array of shape {u.shape}", "axn_lambda_sweep")
            self.scores = prior_scores(axn.V_, u)
        return self.scores


def _run_at(axn: Axn, lam: float, M_rows: np.ndarray, prior: _LazyPrior, candidates: np.ndarray | None,
            query_ids: np.ndarray | None):
    """:meth:`Axn.run` of the fitted ``axn`` at weight λ = ``lam``, ŝ_prior from ``prior``: the same search (Axn.run
    hands λ and ŝ_prior to its engine, :class:`xenbench.methods.adacur.AdaCur`, exactly so), without recomputing
    what does not depend on λ."""
    return axn.engine_.run(M_rows, candidates=candidates, prior_scores=prior(axn, M_rows.shape[0]) if lam > 0 else None,
                           prior_weight=lam, query_ids=query_ids)


def axn_round_trace(M: np.ndarray, V: np.ndarray, query_row: int, *, budget: int, n_rounds: int = 5, lam: float = 0.0,
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
    device = search_device(device, "axn_round_trace")
    axn = Axn(budget, n_rounds=n_rounds, lam=lam, seed=seed, options=SearchOptions(device=device)).fit(V)
    result = axn.run(M[[query_row]], u_param=None if u_param is None or lam == 0 else np.asarray(u_param)[None],
                     candidates=None if candidates is None else np.asarray(candidates)[None],
                     query_ids=np.array([query_row]), trace_query=0, return_approx=True)
    return trace_from_result(result, query_row, M[query_row], budget, f"AXN, λ = {lam:g}")


# ==============================================================================================
# the notebook-04 protocol: λ chosen on dev, test over first-round seeds × query splits, paired tests
# ==============================================================================================
#: Pre-declared comparisons of notebook 04, (challenger, baseline); fixed before any result is seen. All of them, every
#: (budget, k) cell, form the family of the verdict rule (:func:`xenbench.studies.protocol.verdict`).
AXN_PAIRS: tuple[tuple[str, str], ...] = (
    ("AXN DE, tuned λ", "DE re-rank"),                          # tuned AXN vs retrieve-and-rerank
    ("AXN, tuned λ", "AXN, λ = 0"),                             # sanity check: does u_param (Eq. 7) help at all?
    ("AXN DE, MF-IND, tuned λ", "ADACUR TopK No-Split"),        # AXN MF-IND vs ADACUR TopK No-Split
    ("AXN DE, MF-IND, tuned λ", "AXN DE, tuned λ"),             # does fitting V to the CE help?
)
#: The label measures on which the pairs of :data:`AXN_PAIRS` are also compared (a family of their own): Success@1,
#: entity linking's accuracy (the AXN paper's downstream metric on ZESHEL, Fig. 3 and 7), and nDCG@10 (its metric on
#: BEIR).
AXN_LABEL_MEASURES: tuple[str, ...] = ("Success@1", "nDCG@10")
#: Pairs of :data:`AXN_PAIRS` that are sanity checks, not claims: λ = 0 is one end of the grid that the tuned λ was
#: chosen from on dev, so tuned AXN is expected to be at least as good; the comparison checks the protocol, and its
#: size says how far the regression of Eq. 4 alone is from usable. It stays in the declared family.
SANITY_CHECKS: tuple[tuple[str, str], ...] = (("AXN, tuned λ", "AXN, λ = 0"),)


def axn_protocol_runs(M: np.ndarray, splits: Sequence, V: np.ndarray, U: np.ndarray, *, seeds: Sequence[int],
                      lambdas: Sequence[float], budgets: Sequence[int], k_values: Sequence[int] = (1, 10, 100),
                      n_rounds: int = 5, mf_items_per_query: int = 100, mf_epochs: int = 0, mf_lr: float = 0.005,
                      progress: bool = True, device: str | torch.device = "auto", de_scores: np.ndarray | None = None,
                      labels=None, measures: Sequence[str] = LABEL_MEASURES) -> tuple[pd.DataFrame, ...]:
    """Notebook 04's protocol: every split × seed is one run; λ is chosen on dev rows, reported on test rows.

    Per split (:class:`xenbench.studies.protocol.Split`: anchor / dev / test rows of M): β = :func:`prior_scale`
    on the anchor (training) queries, u_param = β · U. Every random draw of a run takes the run's own seed,
    :func:`xenbench.studies.protocol.run_seed` of (split seed, seed). Methods:

    * "AXN" (random first round, keyed by (run seed, global query row)), once per seed in ``seeds``; λ is
      chosen once per split on its dev rows with the first seed's first round (halves the cost) and used by
      every seed;
    * "AXN DE" (the DE's top B_CE / R items first, then greedy rounds): deterministic given the split, so run
      once per split (``seed`` = the first seed);
    * "AXN DE, MF-IND" (with ``mf_epochs > 0``): per run, MF-IND ([AXN] §2.1) is fitted on G =
      ``mf_items_per_query`` random items of each anchor query, with the run seed choosing G's items, the MLP
      initialization and the pair order, so its runs carry its training's randomness; λ is chosen on dev
      for each fitted model.

    λ is chosen per (method, budget, k) by :func:`xenbench.studies.protocol.choose_on_dev` (ties to the smaller λ);
    each run reports the test rows at that λ ("…, tuned λ") and at λ = 0 ("…, λ = 0"). Baselines on the same
    test rows: ADACUR TopK No-Split (R_anc = M[anchor], random first round, per seed) and DE re-rank (per split).

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores (every read by a method is a counted CE call).
    splits : sequence of Split
        From :func:`xenbench.studies.protocol.query_splits`.
    V, U : ndarray of shape (n_items, d), (n_queries, d)
        DE item and query embeddings.
    seeds : sequence of int
        Seeds within a split (>= 1).
    lambdas, budgets, k_values, n_rounds
        As in :func:`axn_lambda_sweep`.
    mf_items_per_query, mf_epochs, mf_lr
        MF-IND's sparse matrix G (k_d items per training query) and training
        (:class:`xenbench.methods.mf.MatrixFactorization`); 0 epochs: no MF-IND.
    device : str or torch.device, default "auto"
        Torch device of every AXN and ADACUR search and of MF-IND's training: CUDA when available, else CPU.
    de_scores : ndarray of shape (n_queries, n_items), optional
        The ranking AXN DE's first round and DE re-rank start from (default the DE's, U · Vᵀ): another first stage's
        scores (:func:`xenbench.studies.setup.first_stage_matrix`). u_param stays the DE's.
    labels : sparse matrix of shape (n_queries, n_items), optional
        Relevance grades of every row on the items (:meth:`xenbench.studies.setup.Setup.grades`): every run also
        scores each method's ranked lists against them, λ chosen on the dev rows by nDCG@10
        (:func:`xenbench.studies.labels.choose_by_labels`).
    measures : sequence of str
        The label measures (ir-measures names), with ``labels``.

    Returns
    -------
    runs : DataFrame
        The run records (:class:`xenbench.studies.records.RunRecord`), one per (split_seed, anchor_seed = ``seed``,
        method, budget, k) on the test rows: ``setting`` = λ (NaN for baselines), ``value`` / ``value_se`` (the test
        recall over queries), ``dev_value`` (the dev recall at the chosen λ; NaN where λ was not chosen on dev),
        ``n_queries``, ``per_query``, and the test ``rows``. Deterministic methods have rows for the first seed only.
    dev : DataFrame
        The dev λ sweeps, one per split and method (and per seed for MF-IND): :func:`axn_lambda_sweep` frames with
        ``split_seed`` and ``anchor_seed`` columns.
    label_runs : DataFrame
        With ``labels`` only: one record per (split_seed, anchor_seed, method, budget, measure) with the columns of
        :data:`xenbench.studies.labels.LABEL_COLUMNS` (``setting`` = the λ chosen by nDCG@10; NaN for the baselines).
    """
    from tqdm.auto import tqdm

    from xenbench.methods.mf import MatrixFactorization, observed_pairs
    from xenbench.studies.protocol import choose_on_dev, run_seed
    from xenbench.metrics import BudgetCounter

    owner = "axn_protocol_runs"
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ParameterError("seeds", "a non-empty list of ints >= 0", seeds, owner)
    if not splits:
        raise ParameterError("splits", "a non-empty list of protocol.Split", splits, owner)
    device = search_device(device, owner)
    options = SearchOptions(device=device)
    M = np.asarray(M)
    if de_scores is not None and np.shape(de_scores) != M.shape:
        raise ParameterError("de_scores", f"scores of every query row, shape {M.shape}", np.shape(de_scores), owner)
    if labels is not None and np.shape(labels) != M.shape:
        raise ParameterError("labels", f"grades of every query row on the items, shape {M.shape}", np.shape(labels),
                             owner)
    de = U @ V.T
    betas = [prior_scale(M[split.anchor], de[split.anchor]) for split in splits]
    # Round 1 of AXN DE takes the first B_CE / R items and DE re-rank the first B_CE: the top max(B_CE) of each row
    # (the order of np.argsort(-scores, kind="stable"), found by a partition instead of sorting all items)
    de_order = topk_indices(de if de_scores is None else np.asarray(de_scores),
                            min(max((int(b) for b in budgets), default=1), M.shape[1]))
    del de  # (n_queries, n_items) float64: not held through the runs
    k_values = [int(k) for k in k_values]
    runs, dev_frames, label_rows = [], [], []
    n_steps = len(splits) * (len(seeds) * (2 if mf_epochs else 1) + 2)
    bar = tqdm(total=n_steps, desc="04 protocol (split × method × seed)", disable=not progress)

    def add(split, seed, method, budget, lam, test, recalls, dev_values=None):
        for k, r in recalls.items():
            recall, se = mean_se(r)
            runs.append({"split_seed": int(split.seed), "anchor_seed": int(seed), "method": method,
                         "budget": int(budget), "k": int(k), "setting": float(lam), "value": recall, "value_se": se,
                         "dev_value": float((dev_values or {}).get(k, np.nan)), "n_queries": int(r.size),
                         "per_query": r, "rows": test})

    def add_labels(split, seed, method, budget, settings, dev_lists, test_lists, dev_rows):
        """The label records of one (run, method, budget): the setting chosen on dev by nDCG@10."""
        for rec in choose_by_labels(settings, dev_lists, test_lists, dev_rows=dev_rows, test_rows=split.test,
                                    grades=labels, measures=measures):
            label_rows.append({"split_seed": int(split.seed), "anchor_seed": int(seed), "method": method,
                               "budget": int(budget), **rec})

    for split, beta in zip(splits, betas):
        anchor, dev, test = split.anchor, split.dev, split.test
        M_test = M[test]
        exact_test = _ExactTopK(M_test, k_values)  # the test rows' exact top-k: once per split, for every method
        u_de = beta * U

        def tune(name, V_m, u_m, cand, seed):
            """λ per (budget, k) with the best recall on the split's dev rows (run seed of ``seed``), and each
            (budget, λ)'s dev lists (with labels)."""
            sweep = axn_lambda_sweep(M[dev], V_m, u_m[dev], lambdas, budgets, k_values, n_rounds=n_rounds,
                                     candidates=None if cand is None else cand[dev], method=name,
                                     seed=run_seed(int(split.seed), seed), query_ids=dev, device=device,
                                     ranked=labels is not None)
            lists = {}
            if labels is not None:
                lists = {(int(b), float(lam)): r for b, lam, r in zip(sweep["budget"], sweep["lam"], sweep["ranked"])}
                sweep = sweep.drop(columns="ranked")
            dev_frames.append(sweep.assign(split_seed=int(split.seed), anchor_seed=int(seed)))
            return choose_on_dev(sweep, ["budget", "k"], "lam"), lists

        def report(name, V_m, u_m, cand, seed, tuned):
            """The run's test rows at the chosen λ per (budget, k), and at λ = 0; with labels, every measure at the λ
            chosen on dev by nDCG@10 (AXN's random first round: chosen on the first seed's dev lists, as λ)."""
            chosen, dev_lists = tuned
            prior, engines = _LazyPrior(u_m[test]), {}  # one engine for every λ of a budget (as in the sweep)

            def run_at(budget, lam):
                if budget not in engines:
                    engines.clear()  # one budget's index at a time (two float64 copies of V each)
                    engines[budget] = Axn(budget, n_rounds=min(n_rounds, budget), seed=run_seed(int(split.seed), seed),
                                          options=options).fit(V_m)
                return _run_at(engines[budget], float(lam), M_test, prior, None if cand is None else cand[test], test)

            for budget in budgets:
                at_b = chosen[chosen["budget"] == budget]
                test_lists = {}
                for lam in sorted(set(at_b["lam"]) | {0.0}):
                    res = run_at(budget, lam)
                    test_lists[lam] = res.I
                    rec = exact_test.recalls(res.I, res.calls, budget, k_values)
                    at_lam = at_b[at_b["lam"] == lam]
                    dev_values = dict(zip(at_lam["k"].astype(int), at_lam["recall"]))  # the dev recall it was chosen by
                    add(split, seed, f"{name}, tuned λ", budget, lam, test, {k: rec[k] for k in rec if k in dev_values},
                        dev_values)
                    if lam == 0.0:
                        add(split, seed, f"{name}, λ = 0", budget, 0.0, test, rec)
                if labels is not None and dev_lists:
                    grid = [float(lam) for lam in lambdas if (int(budget), float(lam)) in dev_lists]
                    add_labels(split, seed, f"{name}, tuned λ", budget, grid, [dev_lists[budget, lam] for lam in grid],
                               [test_lists[lam] if lam in test_lists else (lambda b=budget, x=lam: run_at(b, x).I)
                                for lam in grid], dev)
                    if (int(budget), 0.0) in dev_lists:
                        add_labels(split, seed, f"{name}, λ = 0", budget, [0.0], [dev_lists[budget, 0.0]],
                                   [test_lists[0.0]], dev)
            bar.update(1)

        axn_tuned = tune("AXN", V, u_de, None, seeds[0])  # random first round: chosen once per split, on seed 0's draws
        for seed in seeds:
            report("AXN", V, u_de, None, seed, axn_tuned)
        report("AXN DE", V, u_de, de_order, seeds[0], tune("AXN DE", V, u_de, de_order, seeds[0]))  # deterministic
        if mf_epochs:
            for seed in seeds:  # MF-IND is trained per run: G's items, initialization and pair order follow its seed
                rs = run_seed(int(split.seed), seed)
                rows_g, cols_g = observed_pairs(anchor.size, M.shape[1], mf_items_per_query, seed=rs)
                mf = MatrixFactorization("ind", epochs=mf_epochs, lr=mf_lr, seed=rs, progress=False,
                                         device=device).fit(U[anchor], V, rows_g, cols_g, M[anchor][rows_g, cols_g])
                V_mf, u_mf = mf.item_embeddings_, mf.transform_queries(U)
                report("AXN DE, MF-IND", V_mf, u_mf, de_order, seed, tune("AXN DE, MF-IND", V_mf, u_mf, de_order, seed))
        no_dev = np.empty(0, np.int64)
        # the baselines are entries of the one registry: ADACUR TopK No-Split per seed, DE re-rank once per split
        for key, run_seeds in (("adacur_nosplit", seeds), ("de_rerank", seeds[:1])):
            entry = REGISTRY[key]
            for seed in run_seeds:
                for budget in budgets:
                    state = SplitState(M[anchor], test, {"de_scores": de_order[test]}, min(n_rounds, budget),
                                       SPLIT_FRACTIONS, 1.0, run_seed(int(split.seed), seed), options)
                    counter = BudgetCounter(M_test, budget)
                    _, I = entry.variants(state, budget)[0].search(counter, budget)
                    add(split, seed, entry.label, budget, np.nan, test,
                        exact_test.recalls(I, counter.calls, budget, k_values))
                    if labels is not None:
                        add_labels(split, seed, entry.label, budget, [np.nan], [I[:0]], [I], no_dev)
        bar.update(1)
    bar.close()
    out = pd.DataFrame(runs), pd.concat(dev_frames, ignore_index=True)
    if labels is None:
        return out
    return (*out, pd.DataFrame(label_rows, columns=["split_seed", "anchor_seed", "method", "budget", *LABEL_COLUMNS]))


def axn_protocol_summary(runs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Test recall per (method, budget, k): mean over runs with a t-interval over runs (seed × split;
    split only for the deterministic methods), :func:`xenbench.studies.protocol.summarize`; plus ``recall`` (the
    mean) and ``recall_se`` (sd over runs / √runs) for the plots, and the chosen λ values."""
    from xenbench.studies.protocol import summarize

    out = summarize(runs, ["method", "budget", "k"], value="value", se="value_se", confidence=confidence)
    out["recall"] = out["mean"]
    out["recall_se"] = out["sd_runs"] / np.sqrt(out["n_runs"])
    lams = runs.groupby(["method", "budget", "k"])["setting"].agg(
        lambda x: ", ".join(f"{v:g}" for v in sorted(set(x.dropna()))))
    return out.merge(lams.rename("lams").reset_index(), on=["method", "budget", "k"])


def axn_paired_comparisons(runs: pd.DataFrame, pairs: Sequence[tuple[str, str]] = AXN_PAIRS, *,
                           confidence: float = 0.95, cell: str = "k") -> pd.DataFrame:
    """The pre-declared ``pairs`` (challenger a, baseline b) per (budget, k), under the one verdict rule.

    ``cell="measure"`` compares label records instead (:func:`axn_protocol_runs` with ``labels``: per (budget,
    measure), the per-query values of one label measure); the family is then those cells.

    Per cell, :func:`xenbench.studies.protocol.compare_runs` over the runs (a deterministic method's one run per
    split pairs with every run of the other): the per-query paired test on each query's difference averaged
    over the runs in which it was a test query (``mean``, ``se``, ``lo``, ``hi``, ``p``, ``p_wilcoxon``,
    ``n_queries``, ``n_better``, ``n_worse``; its p-values cover the queries only) and the interval across the
    independent runs (``run_mean``, ``run_lo``, ``run_hi``, ``n_runs``). Every pair and cell was declared in
    advance, so the family is this table: :func:`xenbench.studies.protocol.decide` adds ``p_holm``,
    ``p_wilcoxon_holm`` and ``verdict``. ``sanity_check`` marks the pairs of :data:`SANITY_CHECKS`. One
    :class:`xenbench.studies.records.ComparisonRecord` per row.
    """
    from xenbench.studies.protocol import compare_runs, decide

    out = []
    for a, b in pairs:
        for (budget, key), g in runs[runs["method"].isin([a, b])].groupby(["budget", cell], sort=True):
            ga, gb = g[g["method"] == a], g[g["method"] == b]
            if ga.empty or gb.empty:
                continue
            c = compare_runs(ga, gb, split="split_seed", seed="anchor_seed", confidence=confidence)
            out.append({"challenger": a, "baseline": b, "budget": int(budget), cell: key if cell != "k" else int(key),
                        "sanity_check": (a, b) in SANITY_CHECKS, **as_comparison(c)})
    if not out:
        return pd.DataFrame(out)
    return decide(pd.DataFrame(out))
