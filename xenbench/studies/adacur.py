"""Notebook 03's driver: ANNCUR and ADACUR at equal CE budget, round by round, under the dev/test protocol.

Every function takes an exact CE score matrix ``M`` of shape (n_queries, n_items) and a
:class:`xenbench.methods.protocol.Split` of its rows (:func:`xenbench.methods.protocol.query_splits`): anchor
queries Q_anc (whose rows form the offline index R_anc = M[split.anchor]) and test queries (whose rows are the
CE "oracle" a method may query within its budget B_CE; dev rows where settings are chosen). They return tidy
DataFrames (one row per measured number) that the plots of :mod:`xenbench.viz.plots.adacur` draw and the widgets
of :mod:`xenbench.viz.widgets` recompute.

============================  ==================================================================
:func:`recall_vs_budget`      Top-k-Recall at equal CE budget of every method ([ADACUR] Fig. 2)
:func:`recall_vs_rounds`      Top-k-Recall of ADACUR for a number of rounds N_r ([ADACUR] Fig. 3)
:func:`latency_vs_rounds`     time per query in CE calls, pinv, matmul, sampling ([ADACUR] Fig. 4)
:func:`adacur_round_trace`    exact vs approximate scores of one test query, round by round (Fig. 6/8)
:func:`adacur_protocol_runs`  per-query recall on dev and test rows, per (query split, anchor seed)
:func:`chosen_on_dev`         k_i chosen on dev rows, test recall read at that k_i
:func:`adacur_protocol_summary`  test recall: mean over runs, 95 % interval across runs, k_i chosen
:func:`adacur_paired_comparisons`  the pre-declared pairs (:data:`ADACUR_PAIRS`), per-query paired tests
:func:`budget_rule_gap`       ANNCUR's two budget rules at the same split, seed, B_CE, k and k_i
============================  ==================================================================

Notebook 03 reports the protocol functions (built on :mod:`xenbench.methods.protocol`): every setting is chosen
on dev queries, every number is a mean over anchor seeds × query splits with an interval that contains
their variance, and only the pre-declared pairs are compared, with paired tests over queries.

Methods compared at equal budget: the registry :data:`COMPARABLE` maps each key to a :class:`Comparable`
(its display label in the ``method`` column, :data:`METHODS`; the retriever scores it needs; its
variants at a budget). A variant, built from one split's fitted state (:class:`SplitState`), has one
shared call ``search(counter, k) -> (D, I)``; :func:`recall_vs_budget` loops over the registry:

``anncur``
    ANNCUR: k_i random anchor items, then the top B_CE − k_i items by ŝ are scored; best k_i of a
    small grid per (budget, k), as the papers report ([ANNCUR] §3.2, [ADACUR] §3.1).
``anncur_de``
    ANNCUR_DE: the anchors are the DE's top k_i items of each query (one round of ADACUR whose
    first round comes from the DE), then retrieve by ŝ; best k_i of the same grid ([ADACUR] Fig. 2).
``adacur_topk``, ``adacur_softmax``
    ADACUR (split): k_i anchors over N_r rounds (TopK / SoftMax sampler), then retrieve by the final
    ŝ until B_CE calls are spent; best k_i of the same grid.
``adacur_nosplit``
    ADACUR^No-Split with TopK: all B_CE calls are anchors; no split to tune.
``adacur_de_nosplit``
    ADACUR_{DE+TopK}^No-Split: as above, round 1 takes the DE's top k_s items ([ADACUR] Fig. 2).
``de_rerank``, ``tfidf_rerank``
    Retrieve-and-rerank: the retriever's top B_CE items scored with the CE.

The best-split selection of :func:`recall_vs_budget` reads the test queries' recall (as the papers'
"best possible budget split" does), so it is optimistic for the split methods; :func:`chosen_on_dev`
chooses on dev queries instead. No-Split and the re-rank baselines are not tuned at all.

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023: §2.2, §3, Fig. 2–4, 6, 8.
.. [ANNCUR] Yadav et al. "Efficient Nearest Neighbor Search for Cross-Encoder Models using Matrix
   Factorization", EMNLP 2022, §3.2.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch

from xenbench._device import search_device
from xenbench._validation import check_choice, check_float, check_int, is_int
from xenbench.errors import ParameterError
from xenbench.methods.adacur import SAMPLERS, AdaCur, SearchOptions, TopK, make_sampler
from xenbench.methods.baselines import anncur_with_budget, rerank_baseline
from xenbench.methods.cur import AnnCur
from xenbench.methods.protocol import ALPHA, Split, compare_runs, decide, run_seed
from xenbench.methods.trace import RoundTrace, trace_from_result
from xenbench.metrics import BudgetCounter, mean_se, recall_under_budget, topk_indices

__all__ = [
    "ADACUR_PAIRS",
    "COMPARABLE",
    "METHODS",
    "PROTOCOL_METHODS",
    "SPLIT_FRACTIONS",
    "Comparable",
    "Search",
    "SplitState",
    "Variant",
    "adacur_paired_comparisons",
    "adacur_protocol_runs",
    "adacur_protocol_summary",
    "adacur_round_trace",
    "budget_rule_gap",
    "chosen_on_dev",
    "describe_latency",
    "latency_vs_rounds",
    "recall_vs_budget",
    "recall_vs_rounds",
    "seed_spread",
]

logger = logging.getLogger(__name__)

# ==============================================================================================
# the methods compared at equal budget: a registry with one shared call
# ==============================================================================================
#: ``search(counter, k) -> (D float32 (nq, k), I int64 (nq, k))``: the top-k of every test query by
#: exact score, every CE call read through ``counter`` (a fresh :class:`~xenbench.metrics.BudgetCounter`
#: of the test rows with budget B_CE).
Search = Callable[[BudgetCounter, int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class SplitState:
    """What every method of :data:`COMPARABLE` is built from: one split's offline index and settings.

    Attributes
    ----------
    R_anc : ndarray of shape (k_q, n_items)
        M[split.anchor], the offline index.
    test : int ndarray of shape (n_test,)
        Test rows: the keys of ADACUR's per-query randomness.
    orders : dict
        ``"de_scores"`` / ``"tfidf_scores"`` -> the retriever's ranking of the test rows, best first
        (the top max(budgets) items), for the methods that need it.
    n_rounds, split_fractions, temperature, seed
        As in :func:`recall_vs_budget`.
    options : SearchOptions
        ADACUR's engine options (the device).
    """

    R_anc: np.ndarray
    test: np.ndarray
    orders: Mapping[str, np.ndarray]
    n_rounds: int
    split_fractions: Sequence[float]
    temperature: float
    seed: int
    options: SearchOptions


class Variant(NamedTuple):
    """One configuration of a method at a budget: k_i (0 for re-rank, B_CE for No-Split), N_r (None
    when not ADACUR) and its search."""

    n_anchor_items: int
    n_rounds: int | None
    search: Search


@dataclass(frozen=True)
class Comparable:
    """A method of :func:`recall_vs_budget`.

    Attributes
    ----------
    label : str
        Display name (the ``method`` column and the plots).
    variants : callable (SplitState, budget) -> list of Variant
        Its configurations at a budget; with several (a k_i grid), the driver reports the best.
    needs : str, optional
        The retriever scores it needs (``"de_scores"`` or ``"tfidf_scores"``).
    deterministic : bool
        Its result depends on the split only, not on the seed (a retriever's first round or ranking and greedy
        TopK rounds: no random draw). The protocol runs it once per split, and it counts one run per split
        (:mod:`xenbench.methods.protocol`); ``tests/test_experiments.py`` checks that two seeds give the same result.
    """

    label: str
    variants: Callable[[SplitState, int], list[Variant]]
    needs: str | None = None
    deterministic: bool = False


def _top(result: tuple[np.ndarray, np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    D, I = result
    return D[:, :k], I[:, :k]


def _anncur(state: SplitState, budget: int) -> list[Variant]:
    """ANNCUR with k_i random anchors, then B_CE − k_i items by ŝ ([ANNCUR] §3.2), per k_i of the grid."""
    def variant(k_i: int) -> Variant:
        cur = AnnCur(k_i, seed=state.seed).fit(state.R_anc)
        return Variant(k_i, None, lambda counter, k: _top(anncur_with_budget(cur, counter, budget), k))

    return [variant(k_i) for k_i in _split_grid(budget, state.split_fractions, 1, budget, state.R_anc.shape[0])]


def _adacur_search(ada: AdaCur, candidates: np.ndarray | None, test: np.ndarray) -> Search:
    return lambda counter, k: ada.search(counter, k, candidates=candidates, query_ids=test)


def _adacur_split(sampler: str, *, de_start: bool = False) -> Callable[[SplitState, int], list[Variant]]:
    """ADACUR (split) with ``sampler`` per k_i of the grid; ``de_start``: ANNCUR_DE, one round whose
    anchors are the DE's top k_i items ([ADACUR] Fig. 2)."""
    def variants(state: SplitState, budget: int) -> list[Variant]:
        n_rounds = 1 if de_start else state.n_rounds
        candidates = state.orders["de_scores"] if de_start else None
        out = []
        for k_i in _split_grid(budget, state.split_fractions, n_rounds, budget - 1, state.R_anc.shape[0]):
            if k_i < n_rounds or k_i >= budget:
                continue
            ada = AdaCur(budget, n_anchor_items=k_i, n_rounds=n_rounds,
                         sampler=make_sampler(sampler, "recall_vs_budget", temperature=state.temperature),
                         seed=state.seed, options=state.options).fit(state.R_anc)
            out.append(Variant(k_i, None if de_start else n_rounds, _adacur_search(ada, candidates, state.test)))
        return out

    return variants


def _adacur_nosplit(*, de_start: bool = False) -> Callable[[SplitState, int], list[Variant]]:
    """ADACUR^No-Split with TopK; ``de_start``: round 1 takes the DE's top k_s items."""
    def variants(state: SplitState, budget: int) -> list[Variant]:
        if budget < state.n_rounds:
            return []
        ada = AdaCur(budget, n_rounds=state.n_rounds, sampler=TopK(), seed=state.seed,
                     options=state.options).fit(state.R_anc)
        candidates = state.orders["de_scores"] if de_start else None
        return [Variant(budget, state.n_rounds, _adacur_search(ada, candidates, state.test))]

    return variants


def _rerank(scores: str) -> Callable[[SplitState, int], list[Variant]]:
    """Retrieve-and-rerank: the retriever's top B_CE items scored with the CE."""
    def variants(state: SplitState, budget: int) -> list[Variant]:
        order = state.orders[scores]
        return [Variant(0, None, lambda counter, k: _top(rerank_baseline(counter, order, budget), k))]

    return variants


#: Method keys of :func:`recall_vs_budget` -> the comparable method, in the order they are run and drawn.
COMPARABLE: dict[str, Comparable] = {
    "anncur": Comparable("ANNCUR", _anncur),
    "anncur_de": Comparable("ANNCUR DE", _adacur_split("topk", de_start=True), "de_scores", deterministic=True),
    "adacur_topk": Comparable("ADACUR TopK", _adacur_split("topk")),
    "adacur_softmax": Comparable("ADACUR SoftMax", _adacur_split("softmax")),
    "adacur_nosplit": Comparable("ADACUR TopK No-Split", _adacur_nosplit()),
    "adacur_de_nosplit": Comparable("ADACUR DE+TopK No-Split", _adacur_nosplit(de_start=True), "de_scores",
                                    deterministic=True),
    "de_rerank": Comparable("DE re-rank", _rerank("de_scores"), "de_scores", deterministic=True),
    "tfidf_rerank": Comparable("TF-IDF re-rank", _rerank("tfidf_scores"), "tfidf_scores", deterministic=True),
}
#: Method keys of :func:`recall_vs_budget` -> the label in its ``method`` column (and in the plots).
METHODS: dict[str, str] = {key: method.label for key, method in COMPARABLE.items()}

#: Grid of k_i / B_CE over which ANNCUR and ADACUR (split) take their best split per (budget, k).
SPLIT_FRACTIONS: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75)

#: Steps of the latency breakdown (RoundRecord field -> label), in stacking order ([ADACUR] Fig. 4).
_STEPS = {"ce": "CE calls", "pinv": "pinv", "matmul": "matmul", "sample": "sampling"}


# ==============================================================================================
# inputs
# ==============================================================================================
def _check_inputs(M: Any, split: Any, owner: str) -> tuple[np.ndarray, Split]:
    M = np.asarray(M)
    if M.ndim != 2 or min(M.shape) < 1 or not np.issubdtype(M.dtype, np.floating):
        raise ParameterError("M", "a float array of shape (n_queries, n_items)", f"{M.dtype} array of shape {M.shape}",
                             owner)
    if not isinstance(split, Split):
        raise ParameterError("split", "a xenbench.methods.protocol.Split (anchor, dev, test rows) from query_splits",
                             type(split).__name__, owner)
    anchor, test = np.asarray(split.anchor), np.asarray(split.test)
    for name, rows in (("anchor", anchor), ("test", test)):
        if rows.ndim != 1 or rows.size == 0 or not np.issubdtype(rows.dtype, np.integer) \
                or rows.min() < 0 or rows.max() >= M.shape[0]:
            raise ParameterError("split", f"{name} rows: a non-empty 1-d int array in [0, n_queries={M.shape[0]})",
                                 f"{rows.dtype} array of shape {rows.shape}", owner)
    if np.intersect1d(anchor, test).size:
        raise ParameterError("split", "disjoint anchor and test rows", "rows in both", owner)
    return M, split._replace(anchor=anchor.astype(np.int64), test=test.astype(np.int64))


def _check_retriever_scores(scores: Any, name: str, n_test: int, n_items: int, owner: str) -> np.ndarray | None:
    if scores is None:
        return None
    scores = np.asarray(scores)
    if scores.shape != (n_test, n_items) or not np.issubdtype(scores.dtype, np.number):
        raise ParameterError(name, f"scores of the test queries, shape (n_test={n_test}, n_items={n_items}), "
                             "rows in the order of split.test", f"{scores.dtype} array of shape {scores.shape}",
                             owner)
    return scores


def _check_budgets(budgets: Any, n_items: int, owner: str) -> list[int]:
    if isinstance(budgets, (int, np.integer)):
        budgets = [budgets]
    budgets = list(budgets)
    if not budgets:
        raise ParameterError("budgets", "a non-empty list of ints in [1, n_items]", budgets, owner)
    return sorted({check_int(b, "budgets", 1, n_items, owner, f"n_items={n_items}") for b in budgets})


def _check_k_values(k_values: Any, n_items: int, owner: str) -> list[int]:
    k_values = list(k_values)
    if not k_values:
        raise ParameterError("k_values", "a non-empty list of ints in [1, n_items]", k_values, owner)
    return sorted({check_int(k, "k_values", 1, n_items, owner, f"n_items={n_items}") for k in k_values})


# ==============================================================================================
# recall at equal budget (Fig. 2)
# ==============================================================================================
def _split_grid(budget: int, fractions: Sequence[float], lo: int, hi: int, k_q: int) -> list[int]:
    """Distinct k_i = round(f · B) in [lo, hi], without k_i = k_q (ill-conditioned, [ANNCUR] §B.2)."""
    grid = sorted({int(round(f * budget)) for f in fractions})
    grid = [k for k in grid if lo <= k <= hi and k != k_q]
    if not grid:  # every grid point fell out: take the nearest admissible k_i
        grid = [min(max(lo, int(round(fractions[0] * budget))), hi)]
    return grid


def _rows(method: str, budget: int, k_values: list[int], per_query: dict[int, np.ndarray], k_i: int,
          n_rounds: int | None, keep: bool = False) -> list[dict[str, Any]]:
    out = []
    for k in k_values:
        r = per_query[k]
        recall, se = mean_se(r)
        out.append({"method": method, "budget": budget, "k": k, "recall": recall, "recall_se": se,
                    "n_anchor_items": k_i, "n_rounds": n_rounds, "n_test_queries": int(r.size)}
                   | ({"per_query": r} if keep else {}))
    return out


def _recalls(M_test: np.ndarray, I: np.ndarray, calls: np.ndarray, budget: int, k_values: list[int]) -> dict[int, np.ndarray]:
    return {k: recall_under_budget(M_test, I, k, calls=calls, budget=budget, per_query=True) for k in k_values}


def recall_vs_budget(M: np.ndarray, split: Split, budgets: Sequence[int], methods: Sequence[str] | None = None,
                     k_values: Sequence[int] = (1, 10, 100), de_scores: np.ndarray | None = None,
                     tfidf_scores: np.ndarray | None = None, *, n_rounds: int = 5,
                     split_fractions: Sequence[float] = SPLIT_FRACTIONS, temperature: float = 1.0, seed: int = 0,
                     device: str | torch.device = "auto", all_splits: bool = False,
                     per_query: bool = False) -> pd.DataFrame:
    """Top-k-Recall of ANNCUR, ADACUR and retrieve-and-rerank at equal CE budgets ([ADACUR] Fig. 2).

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores.
    split : xenbench.methods.protocol.Split
        Anchor rows (R_anc = M[split.anchor]) and test rows (its dev rows are not read).
    budgets : sequence of int
        B_CE values, each in [1, n_items].
    methods : sequence of str, optional
        Keys of :data:`METHODS`; default every method whose inputs are given (the DE ones need
        ``de_scores``, TF-IDF ``tfidf_scores``).
    k_values : sequence of int
        Sizes of the exact neighbourhood; a (budget, k) pair with k > budget is skipped.
    de_scores, tfidf_scores : ndarray of shape (n_test, n_items), optional
        Retriever scores of the test queries, rows in the order of ``split.test``.
    n_rounds : int
        N_r of every ADACUR variant (k_i < N_r points of the split grid are skipped).
    split_fractions : sequence of float
        Grid of k_i / B_CE for ANNCUR and ADACUR (split); k_i = k_q is left out.
    temperature : float
        Of the SoftMax sampler.
    seed : int
        Seeds ANNCUR's anchor draw and ADACUR's keyed randomness (keyed by the global query row, so a
        query gets the same draws in any subset).
    device : str or torch.device
        Torch device of ADACUR: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"`` or
        ``"cuda:<k>"`` (:func:`xenbench._device.search_device`). Devices retrieve the same items up to float64
        round-off.
    all_splits : bool
        Return one row per grid point of the split methods instead of the best per (budget, k).
        The best per (budget, k) reads the test rows' recall (optimistic); :func:`adacur_protocol_runs`
        chooses on dev rows instead.
    per_query : bool
        Add a column ``per_query``: each row's per-query recalls (float array in the order of
        ``split.test``), for paired tests.

    Returns
    -------
    DataFrame
        Columns ``method`` (label of :data:`METHODS`), ``budget``, ``k``, ``recall`` (mean over test
        queries, in [0, 1]), ``recall_se`` (its standard error), ``n_anchor_items`` (the k_i used:
        0 for re-rank, B_CE for No-Split), ``n_rounds`` (None for non-ADACUR methods),
        ``n_test_queries``.
    """
    owner = "recall_vs_budget"
    M, split = _check_inputs(M, split, owner)
    n_items = M.shape[1]
    budgets = _check_budgets(budgets, n_items, owner)
    k_values = _check_k_values(k_values, n_items, owner)
    n_rounds = check_int(n_rounds, "n_rounds", 1, None, owner)
    test = split.test
    scores = {"de_scores": _check_retriever_scores(de_scores, "de_scores", test.size, n_items, owner),
              "tfidf_scores": _check_retriever_scores(tfidf_scores, "tfidf_scores", test.size, n_items, owner)}
    methods = _check_methods(methods, {name for name, sc in scores.items() if sc is not None}, owner)
    if not split_fractions or not all(0 < f <= 1 for f in split_fractions):
        raise ParameterError("split_fractions", "a non-empty list of floats in (0, 1]", split_fractions, owner)
    check_float(temperature, "temperature", 0, None, owner, closed="neither")
    state = SplitState(M[split.anchor], test,
                       {name: topk_indices(sc, max(budgets)) for name, sc in scores.items() if sc is not None},
                       n_rounds, tuple(split_fractions), temperature, seed,
                       SearchOptions(device=search_device(device, owner)))
    M_test = M[test]
    rows: list[dict[str, Any]] = []
    for budget in budgets:
        ks = [k for k in k_values if k <= budget]
        if not ks:
            continue
        for key in methods:
            method = COMPARABLE[key]
            t0 = time.perf_counter()
            candidates = []
            for variant in method.variants(state, budget):
                counter = BudgetCounter(M_test, budget)
                _, I = variant.search(counter, max(ks))
                candidates.append(_rows(method.label, budget, ks, _recalls(M_test, I, counter.calls, budget, ks),
                                        variant.n_anchor_items, variant.n_rounds, bool(per_query)))
            if candidates:
                rows += _all_or_best(candidates, all_splits)
            logger.info("%s at B_CE=%d: %.1f s", method.label, budget, time.perf_counter() - t0)
    return pd.DataFrame(rows, columns=["method", "budget", "k", "recall", "recall_se", "n_anchor_items",
                                       "n_rounds", "n_test_queries"] + (["per_query"] if per_query else []))


def _check_methods(methods: Sequence[str] | None, given: set[str], owner: str) -> list[str]:
    """Keys of :data:`COMPARABLE`; default every method whose retriever scores are ``given``."""
    if methods is None:
        return [key for key, m in COMPARABLE.items() if m.needs is None or m.needs in given]
    methods = list(methods)
    for key in methods:
        if key not in COMPARABLE:
            raise ParameterError("methods", f"a list of keys of METHODS {list(METHODS)}", key, owner)
        needs = COMPARABLE[key].needs
        if needs is not None and needs not in given:
            raise ParameterError(needs, f"the retriever scores that method {key!r} needs", None, owner)
    return methods


def _all_or_best(candidates: list[list[dict[str, Any]]], all_splits: bool) -> list[dict[str, Any]]:
    """Every variant's rows, or per k the variant with the highest mean recall (ties: the one listed first,
    i.e. the smaller k_i)."""
    if all_splits:
        return [r for rows in candidates for r in rows]
    return [max((rows[j] for rows in candidates), key=lambda r: r["recall"]) for j in range(len(candidates[0]))]


# ==============================================================================================
# rounds (Fig. 3) and latency (Fig. 4)
# ==============================================================================================
def _n_anchor_items(budget: int, anchor_fraction: float | None, owner: str) -> int | None:
    if anchor_fraction is None:
        return None  # No-Split
    check_float(anchor_fraction, "anchor_fraction", 0, 1, owner, closed="neither",
                expected="None (No-Split) or a float in (0, 1)")
    return max(1, min(budget - 1, int(round(anchor_fraction * budget))))


def recall_vs_rounds(M: np.ndarray, split: Split, budgets: Sequence[int], rounds: Sequence[int] = (1, 2, 5, 10, 20),
                     k_values: Sequence[int] = (1, 10, 100), *, sampler: str = "topk",
                     anchor_fraction: float | None = None, temperature: float = 1.0, seed: int = 0,
                     device: str | torch.device = "auto") -> pd.DataFrame:
    """Top-k-Recall of ADACUR as the number of rounds N_r grows, at fixed budgets ([ADACUR] Fig. 3).

    With N_r = 1 every anchor is uniform at random: the No-Split variant then re-ranks B_CE random
    items, and the split variant is ANNCUR with k_i anchors.

    Parameters
    ----------
    M, split
        As in :func:`recall_vs_budget`.
    budgets : sequence of int
        B_CE values.
    rounds : sequence of int
        N_r values; those above k_i are skipped.
    k_values : sequence of int
        Neighbourhood sizes (k > B_CE skipped).
    sampler : str
        One of :data:`xenbench.methods.adacur.SAMPLERS`.
    anchor_fraction : float, optional
        None: No-Split (k_i = B_CE). Else the split variant with k_i = round(fraction · B_CE).
    device : str or torch.device
        Torch device of ADACUR, as in :func:`recall_vs_budget`.

    Returns
    -------
    DataFrame
        Columns ``sampler``, ``budget``, ``n_rounds``, ``n_anchor_items``, ``k``, ``recall``,
        ``recall_se``, ``n_test_queries``.
    """
    owner = "recall_vs_rounds"
    M, split = _check_inputs(M, split, owner)
    check_choice(sampler, "sampler", tuple(SAMPLERS), owner)
    budgets = _check_budgets(budgets, M.shape[1], owner)
    k_values = _check_k_values(k_values, M.shape[1], owner)
    rounds = sorted({check_int(r, "rounds", 1, None, owner) for r in rounds})
    options = SearchOptions(device=search_device(device, owner))
    search_sampler = make_sampler(sampler, owner, temperature=temperature)
    R_anc, M_test = M[split.anchor], M[split.test]
    out = []
    for budget in budgets:
        k_i = _n_anchor_items(budget, anchor_fraction, owner)
        ks = [k for k in k_values if k <= budget]
        for n_r in rounds:
            if n_r > (k_i or budget):
                continue
            ada = AdaCur(budget, n_anchor_items=k_i, n_rounds=n_r, sampler=search_sampler, seed=seed,
                         options=options).fit(R_anc)
            res = ada.run(M_test, query_ids=split.test)
            for row in _rows(METHODS["adacur_nosplit"], budget, ks, _recalls(M_test, res.I, res.calls, budget, ks),
                             k_i or budget, n_r):
                row.pop("method")
                out.append({"sampler": sampler, **row})
    return pd.DataFrame(out, columns=["sampler", "budget", "n_rounds", "n_anchor_items", "k", "recall", "recall_se",
                                      "n_test_queries"])


def latency_vs_rounds(M: np.ndarray, split: Split, budgets: Sequence[int], rounds: Sequence[int] = (1, 2, 5, 10, 20),
                      *, sampler: str = "topk", anchor_fraction: float | None = None,
                      seconds_per_ce_call: float | None = None, max_queries: int | None = 20, solver: str = "pinv",
                      seed: int = 0, device: str | torch.device = "auto") -> pd.DataFrame:
    """Mean time per test query spent in each step of ADACUR, per budget and N_r ([ADACUR] Fig. 4).

    Queries run one at a time (``batch_size=1``), so the numbers are single-query latencies, not a
    batched throughput. Steps: CE calls (Alg. 1 line 15), pinv (Alg. 2 line 6, per round), matmul
    (Alg. 2 line 7) and sampling (Alg. 3). Here a CE call is a lookup in M; pass
    ``seconds_per_ce_call`` (e.g. :func:`ce_seconds_per_call` of the score store) to charge each call
    what the real CE costs instead of the lookup time.

    Parameters
    ----------
    M, split, budgets, rounds, sampler, anchor_fraction
        As in :func:`recall_vs_rounds`.
    seconds_per_ce_call : float, optional
        Modelled cost of one CE call; None keeps the measured (lookup) time.
    max_queries : int, optional
        Time only the first this many test queries (None: all).
    solver : {"pinv", "gram"}
        How Alg. 2 line 6 is computed: "pinv" (an SVD per round, as in the paper) or the faster
        incremental "gram" solver of :class:`~xenbench.methods.adacur.AdaCur`.
    device : str or torch.device
        Where the steps run and are timed, as in :func:`recall_vs_budget`.

    Returns
    -------
    DataFrame
        Columns ``budget``, ``n_rounds``, ``step`` (``"CE calls"``, ``"pinv"``, ``"matmul"``,
        ``"sampling"``), ``seconds`` (mean per query), ``fraction`` (of that configuration's total),
        ``ce_modelled`` (bool), ``n_queries``, ``device`` (the resolved torch device, e.g. ``"cpu"``).
    """
    owner = "latency_vs_rounds"
    M, split = _check_inputs(M, split, owner)
    budgets = _check_budgets(budgets, M.shape[1], owner)
    rounds = sorted({check_int(r, "rounds", 1, None, owner) for r in rounds})
    if seconds_per_ce_call is not None and not (isinstance(seconds_per_ce_call, (int, float)) and seconds_per_ce_call >= 0):
        raise ParameterError("seconds_per_ce_call", "None or a float >= 0", seconds_per_ce_call, owner)
    device = search_device(device, owner)
    test = split.test if max_queries is None else split.test[:check_int(max_queries, "max_queries", 1, None, owner)]
    R_anc, M_test = M[split.anchor], M[test]
    out = []
    for budget in budgets:
        k_i = _n_anchor_items(budget, anchor_fraction, owner)
        for n_r in rounds:
            if n_r > (k_i or budget):
                continue
            # One query at a time (batch_size=1): single-query latencies, not a batched throughput.
            ada = AdaCur(budget, n_anchor_items=k_i, n_rounds=n_r, sampler=sampler, seed=seed,
                         options=SearchOptions(device=device, solver=solver, batch_size=1)).fit(R_anc)
            res = ada.run(M_test, query_ids=test)
            seconds = {step: t / test.size for step, t in res.timings().items()}
            if seconds_per_ce_call is not None:
                seconds["ce"] = float(res.calls.mean()) * seconds_per_ce_call
            total = sum(seconds.values()) or 1.0
            for step, label in _STEPS.items():
                out.append({"budget": budget, "n_rounds": n_r, "step": label, "seconds": seconds[step],
                            "fraction": seconds[step] / total, "ce_modelled": seconds_per_ce_call is not None,
                            "n_queries": int(test.size), "device": str(device)})
    return pd.DataFrame(out, columns=["budget", "n_rounds", "step", "seconds", "fraction", "ce_modelled", "n_queries",
                                      "device"])


def describe_latency(latency: pd.DataFrame, rounds: Sequence[int]) -> list[str]:
    """One line per (budget, N_r ∈ ``rounds``): ms per query and each step's share (from :func:`latency_vs_rounds`)."""
    ms = latency.pivot_table(index=["budget", "n_rounds"], columns="step", values="seconds") * 1e3
    lines = []
    for (b, r), t in ms.iterrows():
        if r in set(rounds):
            total = t.sum()
            lines.append(f"B_CE = {b}, N_r = {r}: {total:.1f} ms per query; CE calls {t['CE calls']:.1f} ms "
                         f"({t['CE calls'] / total:.0%}), pinv {t['pinv']:.1f} ms, matmul {t['matmul']:.1f} ms, "
                         f"sampling {t['sampling']:.1f} ms")
    return lines


# ==============================================================================================
# one query, round by round (Fig. 6 / 8)
# ==============================================================================================
def adacur_round_trace(M: np.ndarray, split: Split, query_row: int, *, budget: int, n_rounds: int = 5,
                       sampler: str = "topk", anchor_fraction: float | None = None, temperature: float = 1.0,
                       seed: int = 0, candidates: np.ndarray | None = None,
                       device: str | torch.device = "auto") -> RoundTrace:
    """Run ADACUR for one test query and keep its approximate scores after every round ([ADACUR] Fig. 6/8).

    The query's randomness is keyed by its row (``query_ids``), so its anchors are exactly those it
    gets in :func:`recall_vs_budget` / :func:`recall_vs_rounds` with the same configuration.

    Parameters
    ----------
    M, split
        As in :func:`recall_vs_budget`.
    query_row : int
        A row of M that is in ``split.test``.
    budget : int
        B_CE.
    n_rounds : int
        N_r.
    sampler : str
        One of :data:`xenbench.methods.adacur.SAMPLERS` (oracle ones read the exact scores, §3.2).
    anchor_fraction : float, optional
        None: No-Split (k_i = B_CE); else the split variant with k_i = round(fraction · B_CE).
    candidates : int ndarray of shape (>= k_s,), optional
        A retriever's ranking for this query; round 1 takes its first k_s items.
    device : str or torch.device
        Torch device of ADACUR, as in :func:`recall_vs_budget`.

    Returns
    -------
    RoundTrace
    """
    owner = "adacur_round_trace"
    M, split = _check_inputs(M, split, owner)
    if not is_int(query_row) or query_row not in set(split.test.tolist()):
        raise ParameterError("query_row", f"a row of M among the {split.test.size} test rows (split.test, e.g. "
                             f"{split.test[0]})", query_row, owner)
    query_row = int(query_row)
    budget = check_int(budget, "budget", 1, M.shape[1], owner, f"n_items={M.shape[1]}")
    k_i = _n_anchor_items(budget, anchor_fraction, owner)
    device = search_device(device, owner)
    ada = AdaCur(budget, n_anchor_items=k_i, n_rounds=n_rounds,
                 sampler=make_sampler(sampler, owner, temperature=temperature), seed=seed,
                 options=SearchOptions(device=device)).fit(M[split.anchor])
    cand = None if candidates is None else np.asarray(candidates)[None, :]
    res = ada.run(M[[query_row]], candidates=cand, query_ids=np.array([query_row]), trace_query=0, return_approx=True)
    return trace_from_result(res, query_row, M[query_row], budget, sampler)


# ==============================================================================================
# the honest protocol: k_i chosen on dev rows, test results over anchor seeds x query splits, paired tests
# ==============================================================================================
#: Pre-declared comparisons (challenger label, baseline label), fixed before any result is seen: the
#: like-for-like random-start pair and the DE-start pair of [ADACUR] Fig. 2, plus the DE-start pair
#: without adaptive rounds. Every pair is tested at every (budget, k); nothing is a "best of" several.
ADACUR_PAIRS: tuple[tuple[str, str], ...] = (
    (METHODS["adacur_nosplit"], METHODS["anncur"]),
    (METHODS["adacur_de_nosplit"], METHODS["de_rerank"]),
    (METHODS["adacur_de_nosplit"], METHODS["anncur_de"]),
)
#: Methods the protocol runs by default: those the pairs of :data:`ADACUR_PAIRS` need (method keys).
PROTOCOL_METHODS: tuple[str, ...] = ("anncur", "anncur_de", "adacur_nosplit", "adacur_de_nosplit", "de_rerank")
# ALPHA (imported above) is the family-wise level of the one verdict rule, xenbench.methods.protocol.verdict.


def adacur_protocol_runs(M: np.ndarray, splits: Sequence[Any], anchor_seeds: Sequence[int], budgets: Sequence[int], *,
                         methods: Sequence[str] = PROTOCOL_METHODS, k_values: Sequence[int] = (1, 10, 100),
                         de_scores: np.ndarray | None = None, tfidf_scores: np.ndarray | None = None, n_rounds: int = 5,
                         split_fractions: Sequence[float] = SPLIT_FRACTIONS,
                         device: str | torch.device = "auto") -> pd.DataFrame:
    """Per-query Top-k-Recall of every method and k_i grid point, on dev and test rows, per (split, anchor seed).

    One run = one query split (:func:`xenbench.methods.protocol.query_splits`: anchor rows Q_anc, dev rows,
    test rows) × one anchor seed. Its random draws (ANNCUR's anchors, ADACUR's first round and draws) take
    the run's own seed, :func:`xenbench.methods.protocol.run_seed` of (split seed, anchor seed), so the
    S × R runs make S × R independent draws. A method that is deterministic given the split
    (:attr:`Comparable.deterministic`) runs once per split, under the first anchor seed. Dev and test
    rows are run together (ADACUR's randomness is keyed by the query row and ANNCUR's anchors do not
    depend on the queries, so each row's result is the one it gets alone) and labelled by ``part``.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores.
    splits : sequence of xenbench.methods.protocol.Split
        Query splits (>= 3 for the issue's protocol).
    anchor_seeds : sequence of int
        Anchor / first-round seeds (>= 5 for the issue's protocol).
    budgets, methods, k_values, n_rounds, split_fractions, device
        As in :func:`recall_vs_budget` (every grid point is kept: ``all_splits=True``).
    de_scores, tfidf_scores : ndarray of shape (n_queries, n_items), optional
        Retriever scores of **every** row of M (:func:`xenbench.studies.setup.retriever_scores`).

    Returns
    -------
    DataFrame
        Columns ``split_seed``, ``anchor_seed``, ``part`` (``"dev"``/``"test"``), the columns of
        :func:`recall_vs_budget` for that part's rows (``recall`` is their mean), ``rows`` (the part's
        query rows) and ``per_query`` (their recalls, same order). Deterministic methods have rows for the
        first anchor seed only.
    """
    from tqdm.auto import tqdm

    owner = "adacur_protocol_runs"
    M = np.asarray(M)
    seeds = [check_int(s, "anchor_seeds", 0, None, owner) for s in anchor_seeds]
    if not seeds or not len(splits):
        raise ParameterError("anchor_seeds" if not seeds else "splits", "a non-empty list", [] if not seeds else splits,
                             owner)
    for name, sc in (("de_scores", de_scores), ("tfidf_scores", tfidf_scores)):
        if sc is not None and np.shape(sc) != M.shape:
            raise ParameterError(name, f"scores of every query row, shape {M.shape}", np.shape(sc), owner)
    device = search_device(device, owner)
    methods = list(methods)
    frames = []
    runs = [(sp, seed) for sp in splits for seed in seeds]
    for sp, seed in tqdm(runs, desc="runs (split x anchor seed)"):
        if not isinstance(sp, Split):
            raise ParameterError("splits", "xenbench.methods.protocol.Split objects (anchor, dev, test)",
                                 type(sp).__name__, owner)
        rows = np.concatenate([sp.dev, sp.test])
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        is_dev = np.isin(rows, sp.dev)
        run_methods = [m for m in methods if seed == seeds[0] or not COMPARABLE.get(m, _RANDOM).deterministic]
        if not run_methods:
            continue
        # dev and test rows together as the evaluated rows: each row's result is the one it gets alone
        evaluated = Split(sp.anchor, np.empty(0, np.int64), rows, sp.seed)
        res = recall_vs_budget(M, evaluated, budgets, run_methods, k_values,
                               None if de_scores is None else np.asarray(de_scores)[rows],
                               None if tfidf_scores is None else np.asarray(tfidf_scores)[rows], n_rounds=n_rounds,
                               split_fractions=split_fractions, seed=run_seed(int(sp.seed), seed), device=device,
                               all_splits=True, per_query=True)
        for part, mask in (("dev", is_dev), ("test", ~is_dev)):
            df = res.copy()
            df["per_query"] = [v[mask] for v in res["per_query"]]
            df["rows"] = [rows[mask]] * len(df)
            df["recall"] = [float(v.mean()) for v in df["per_query"]]
            df["recall_se"] = [mean_se(v)[1] for v in df["per_query"]]
            df["n_test_queries"] = int(mask.sum())
            df.insert(0, "part", part)
            df.insert(0, "anchor_seed", seed)
            df.insert(0, "split_seed", int(sp.seed))
            frames.append(df)
    return pd.concat(frames, ignore_index=True)


_RUN = ["split_seed", "anchor_seed"]
_RANDOM = Comparable("", lambda state, budget: [])  # an unknown key is not deterministic: recall_vs_budget names it
_GROUP = ["method", "budget", "k"]


def chosen_on_dev(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run and (method, budget, k): the k_i with the best **dev** recall, and the **test** row at that k_i.

    Returns
    -------
    DataFrame
        The ``part == "test"`` rows of ``runs`` at the dev-chosen ``n_anchor_items``, plus ``dev_recall``.
    """
    from xenbench.methods.protocol import at_chosen, choose_on_dev

    by = _RUN + _GROUP
    chosen = choose_on_dev(runs[runs["part"] == "dev"], by=by, setting="n_anchor_items")
    test = at_chosen(runs[runs["part"] == "test"], chosen, by=by, setting="n_anchor_items")
    return test.merge(chosen.rename(columns={"recall": "dev_recall"}), on=by + ["n_anchor_items"], how="left")


def adacur_protocol_summary(test_at_chosen: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Test recall per (method, budget, k): mean over runs, interval across runs, per-query SE, and how
    often each k_i was chosen (:func:`xenbench.methods.protocol.summarize` of :func:`chosen_on_dev`)."""
    from xenbench.methods.protocol import summarize

    out = summarize(test_at_chosen, _GROUP, confidence=confidence)
    ki = (test_at_chosen.groupby(_GROUP)["n_anchor_items"]
          .agg(lambda s: ", ".join(f"{int(v)}×{int(c)}" for v, c in s.value_counts().sort_index().items()))
          .rename("k_i chosen (value×runs)").reset_index())
    return out.merge(ki, on=_GROUP, how="left")


def adacur_paired_comparisons(test_at_chosen: pd.DataFrame, pairs: Sequence[tuple[str, str]] = ADACUR_PAIRS, *,
                              alpha: float = ALPHA, confidence: float = 0.95) -> pd.DataFrame:
    """Pre-declared paired comparisons on the test rows, at the dev-chosen settings, with the one verdict rule.

    For each pair (challenger, baseline) and (budget, k), :func:`xenbench.methods.protocol.compare_runs` over the
    runs (a deterministic method's one run per split pairs with every run of the other):

    * ``mean``, ``lo``, ``hi``, ``p`` (paired t), ``p_wilcoxon``, ``n_queries``: the per-query paired test, each
      test query's difference averaged over the runs in which it was a test row; its p-values cover the
      queries only;
    * ``run_mean``, ``run_lo``, ``run_hi``, ``n_runs``: the t-interval of the runs' mean differences (contains
      the anchor-seed and split variance; a pair of deterministic methods has one run per split).

    Every (pair, budget, k) cell was declared in advance, so the table is the family:
    :func:`xenbench.methods.protocol.decide` adds ``p_holm``, ``p_wilcoxon_holm`` (Holm over its rows) and
    ``verdict`` (``"beats"``, ``"level"``, ``"loses"``: :func:`xenbench.methods.protocol.verdict`).
    """
    out = []
    for challenger, baseline in pairs:
        a = test_at_chosen[test_at_chosen["method"] == challenger]
        b = test_at_chosen[test_at_chosen["method"] == baseline]
        if a.empty or b.empty:
            continue
        for (budget, k), ga in a.groupby(["budget", "k"]):
            gb = b[(b["budget"] == budget) & (b["k"] == k)]
            if gb.empty:
                continue
            c = compare_runs(ga, gb, split="split_seed", seed="anchor_seed", confidence=confidence)
            out.append({"challenger": challenger, "baseline": baseline, "budget": int(budget), "k": int(k),
                        "mean": c["mean"], "lo": c["lo"], "hi": c["hi"], "p": c["p"], "p_wilcoxon": c["p_wilcoxon"],
                        "n_queries": c["n"], "n_better": c["n_a_better"], "n_worse": c["n_b_better"],
                        "run_mean": c["run_mean"], "run_lo": c["run_lo"], "run_hi": c["run_hi"],
                        "n_runs": c["n_runs"]})
    df = pd.DataFrame(out, columns=["challenger", "baseline", "budget", "k", "mean", "lo", "hi", "p", "p_wilcoxon",
                                    "n_queries", "n_better", "n_worse", "run_mean", "run_lo", "run_hi", "n_runs"])
    return decide(df, alpha=alpha)


def seed_spread(test_at_chosen: pd.DataFrame) -> pd.DataFrame:
    """Per (method, budget, k, split): min and max test recall over anchor seeds (the seed variance alone)."""
    g = test_at_chosen.groupby(_GROUP + ["split_seed"])["recall"]
    return g.agg(["min", "max", "mean"]).reset_index()


def budget_rule_gap(M: np.ndarray, splits: Sequence[Any], anchor_seeds: Sequence[int], budgets: Sequence[int],
                    k_values: Sequence[int] = (1, 10, 100), *,
                    split_fractions: Sequence[float] = SPLIT_FRACTIONS) -> pd.DataFrame:
    """How much ANNCUR's budget rule moves its test recall: "free anchors" minus "authors' code"
    (:data:`xenbench.methods.cur.BUDGET_RULES`), at the same split, anchor seed, B_CE, k and k_i.

    Every cell is ANNCUR as :func:`adacur_protocol_runs` runs it (R_anc = M[split.anchor], ``AnnCur(k_i, seed=run_seed(split
    seed, anchor seed))``,
    k_i over the same grid of B_CE), scored on the split's test rows; both rules re-rank from the same ŝ, so the cells
    differ only by the rule. The authors' re-ranked items are a subset of the free-anchor ones, so no cell is negative.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores.
    splits : sequence of xenbench.methods.protocol.Split
        Query splits (anchor and test rows are used).
    anchor_seeds, budgets, k_values, split_fractions
        As in :func:`adacur_protocol_runs` (pairs with k > B_CE are skipped).

    Returns
    -------
    DataFrame
        Per (budget, k): ``mean``, ``min`` and ``max`` of the difference in Top-k-Recall over the (split, seed, k_i)
        cells, ``cells``, and the mean recall under each rule (``recall_free_anchors``, ``recall_authors_code``).
    """
    from xenbench.methods.cur import BUDGET_RULES, rerank_candidates

    M = np.asarray(M)
    rows = []
    for sp in splits:
        M_test = M[sp.test].astype(np.float64)
        exact = {k: topk_indices(M_test, k) for k in k_values if k <= M.shape[1]}
        for seed in anchor_seeds:
            for budget in budgets:
                for k_i in _split_grid(budget, split_fractions, 1, budget, sp.anchor.size):
                    cur = AnnCur(k_i, seed=run_seed(int(sp.seed), int(seed))).fit(M[sp.anchor])
                    S_hat = cur.transform(M_test[:, cur.anchor_items_])
                    recall = {}
                    for rule in BUDGET_RULES:
                        scored = np.zeros(M_test.shape, dtype=bool)
                        np.put_along_axis(scored, rerank_candidates(S_hat, cur.anchor_items_, budget, rule), True, 1)
                        recall[rule] = {k: float(np.take_along_axis(scored, T, 1).mean()) for k, T in exact.items()}
                    rows += [{"budget": int(budget), "k": int(k), "free": recall["free anchors"][k],
                              "authors": recall["authors' code"][k]} for k in exact if k <= budget]
    cells = pd.DataFrame(rows)
    gap = cells.assign(gap=cells["free"] - cells["authors"]).groupby(["budget", "k"])
    return gap["gap"].agg(mean="mean", min="min", max="max", cells="size").join(
        gap[["free", "authors"]].mean().rename(columns={"free": "recall_free_anchors",
                                                        "authors": "recall_authors_code"})).reset_index()
