"""ANNCUR, ADACUR and retrieve-and-rerank at equal CE budget ([ADACUR] Fig. 2): notebook 03's entries of the one
registry of methods (:data:`COMPARABLE`, from :data:`xenbench.studies.methods.REGISTRY`: each variant, built from one
split's fitted state, answers ``search(counter, k)``) and :func:`recall_vs_budget`, which loops over them. Notebook 07
compares the same registry's methods.

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
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from xenbench._device import search_device
from xenbench._validation import check_float, check_int
from xenbench.errors import ParameterError
from xenbench.methods.adacur import SearchOptions
from xenbench.studies.protocol import Split
from xenbench.metrics import BudgetCounter, mean_se, recall_under_budget, topk_indices
from xenbench.studies.methods import (
    ADACUR_KEYS,
    REGISTRY,
    SPLIT_FRACTIONS,
    Comparable,
    Search,
    SplitState,
    Variant,
)
from xenbench.studies.methods import split_grid as _split_grid

__all__ = ["COMPARABLE", "METHODS", "SPLIT_FRACTIONS", "Comparable", "Search", "SplitState", "Variant", "recall_vs_budget"]

logger = logging.getLogger(__name__)

# ==============================================================================================
# the methods compared at equal budget: 03's entries of the one registry (xenbench.studies.methods)
# ==============================================================================================
#: Method keys of :func:`recall_vs_budget` -> the comparable method, in the order they are run and drawn: the entries
#: :data:`~xenbench.studies.methods.ADACUR_KEYS` of :data:`~xenbench.studies.methods.REGISTRY`.
COMPARABLE: dict[str, Comparable] = {key: REGISTRY[key] for key in ADACUR_KEYS}
#: Method keys of :func:`recall_vs_budget` -> the label in its ``method`` column (and in the plots).
METHODS: dict[str, str] = {key: method.label for key, method in COMPARABLE.items()}


# ==============================================================================================
# inputs
# ==============================================================================================
def _check_inputs(M: Any, split: Any, owner: str) -> tuple[np.ndarray, Split]:
    M = np.asarray(M)
    if M.ndim != 2 or min(M.shape) < 1 or not np.issubdtype(M.dtype, np.floating):
        raise ParameterError("M", "a float array of shape (n_queries, n_items)", f"{M.dtype} array of shape {M.shape}",
                             owner)
    if not isinstance(split, Split):
        raise ParameterError("split", "a xenbench.studies.protocol.Split (anchor, dev, test rows) from query_splits",
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
                     per_query: bool = False, ranked: bool = False) -> pd.DataFrame:
    """Top-k-Recall of ANNCUR, ADACUR and retrieve-and-rerank at equal CE budgets ([ADACUR] Fig. 2).

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores.
    split : xenbench.studies.protocol.Split
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
    ranked : bool
        Add a column ``ranked``: the variant's whole ranked list of every test row (int array (n_test, m), the
        items it scored ranked by exact score, ``search(counter, B_CE)``; its first k are the top-k the recall
        reads, so the recalls do not change), for the label measures (:mod:`xenbench.studies.labels`).

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
                _, I = variant.search(counter, budget if ranked else max(ks))
                rows_v = _rows(method.label, budget, ks, _recalls(M_test, I[:, :max(ks)], counter.calls, budget, ks),
                               variant.n_anchor_items, variant.n_rounds, bool(per_query))
                candidates.append([r | {"ranked": I} for r in rows_v] if ranked else rows_v)
            if candidates:
                rows += _all_or_best(candidates, all_splits)
            logger.info("%s at B_CE=%d: %.1f s", method.label, budget, time.perf_counter() - t0)
    return pd.DataFrame(rows, columns=["method", "budget", "k", "recall", "recall_se", "n_anchor_items",
                                       "n_rounds", "n_test_queries"] + (["per_query"] if per_query else [])
                        + (["ranked"] if ranked else []))


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
