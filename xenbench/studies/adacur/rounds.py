"""ADACUR round by round: Top-k-Recall against the number of rounds N_r ([ADACUR] Fig. 3), the time per query in
CE calls, pinv, matmul and sampling (Fig. 4), and one test query's exact and approximate scores after every round
(Fig. 6 / 8).

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023: §2.2, §3, Fig. 2–4, 6, 8.
.. [ANNCUR] Yadav et al. "Efficient Nearest Neighbor Search for Cross-Encoder Models using Matrix
   Factorization", EMNLP 2022, §3.2.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from xenbench._device import search_device
from xenbench._validation import check_choice, check_float, check_int, is_int
from xenbench.errors import ParameterError
from xenbench.methods.adacur import SAMPLERS, AdaCur, SearchOptions, make_sampler
from xenbench.studies.protocol import Split
from xenbench.methods.trace import RoundTrace, trace_from_result
from xenbench.studies.adacur.budget import METHODS, _check_budgets, _check_inputs, _check_k_values, _recalls, _rows

__all__ = ["adacur_round_trace", "describe_latency", "latency_vs_rounds", "recall_vs_rounds"]

#: Steps of the latency breakdown (RoundRecord field -> label), in stacking order ([ADACUR] Fig. 4).
_STEPS = {"ce": "CE calls", "pinv": "pinv", "matmul": "matmul", "sample": "sampling"}


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
