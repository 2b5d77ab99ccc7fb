"""One test query, round by round: the exact and approximate scores after every round of ADACUR / AXN.

:class:`RoundTrace` is what :func:`xenbench.studies.adacur.adacur_round_trace` (ADACUR, [ADACUR] Fig. 6/8) and
:func:`xenbench.studies.axn.axn_round_trace` (AXN) return and :func:`xenbench.viz.plots.adacur` draws;
:func:`trace_from_result` builds it from a one-query :class:`~xenbench.methods.adacur.AdaCurResult` (a view of
what the method did, so it lives beside the methods).

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023: Alg. 1–2, Fig. 6–8.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from xenbench.metrics import approximation_errors

__all__ = ["RoundTrace", "trace_from_result"]


@dataclass
class RoundTrace:
    """Exact and approximate scores of one test query after every round of ADACUR.

    Attributes
    ----------
    query_row : int
        Row of M.
    exact : ndarray of shape (n_items,)
        Exact CE scores f(q, ·).
    approx : ndarray of shape (n_rounds, n_items)
        ``approx[t]``: ŝ from the anchors of rounds 0..t (Alg. 2 after Alg. 1 line 15 of round t);
        the last row is the final ŝ (Alg. 1 line 16).
    anchors : list of ndarray
        ``anchors[t]``: the k_s anchor items I_anc^(t) chosen in round t, in order.
    retrieved : ndarray of shape (B_CE − k_i,)
        Items retrieved by the final ŝ and scored (split variant; empty for No-Split).
    budget, n_anchor_items, sampler
        The configuration (B_CE, k_i, sampler).
    """

    query_row: int
    exact: np.ndarray
    approx: np.ndarray
    anchors: list[np.ndarray]
    retrieved: np.ndarray
    budget: int
    n_anchor_items: int
    sampler: str

    @property
    def n_rounds(self) -> int:
        return len(self.anchors)

    def anchors_until(self, t: int) -> np.ndarray:
        """I_anc after round t (rounds 0..t), in the order chosen."""
        return np.concatenate(self.anchors[:t + 1])

    def summary(self, k_values: Sequence[int] = (1, 10, 100)) -> pd.DataFrame:
        """One row per round: anchors so far, share of the exact top-k among them, approximate rank
        of the exact top-1 item (1 = best), and the mean absolute error of ŝ on all items, on the
        exact top-10 items and on the anchors ([ADACUR] Fig. 7 for one query)."""
        n_items = self.exact.size
        ks = [k for k in k_values if k <= n_items]
        order = np.argsort(-self.exact.astype(np.float64), kind="stable")
        top1 = order[0]
        out = []
        for t in range(self.n_rounds):
            anchors = self.anchors_until(t)
            approx = self.approx[t]
            row: dict[str, Any] = {"round": t + 1, "n_anchors": anchors.size}
            for k in ks:
                row[f"top{k}_in_anchors"] = float(np.isin(order[:k], anchors).mean())
            row["approx_rank_of_top1"] = int((approx > approx[top1]).sum() + 1)
            err = approximation_errors(self.exact[None], approx[None], min(10, n_items), anchors[None])
            row.update({"mae_all": err["all"], "mae_top10": err["topk"], "mae_anchors": err["anchors"]})
            out.append(row)
        return pd.DataFrame(out)


def trace_from_result(result: Any, query_row: int, exact: np.ndarray, budget: int, sampler: str) -> RoundTrace:
    """The :class:`RoundTrace` of a one-query :class:`~xenbench.methods.adacur.AdaCurResult` run with
    ``trace_query=0, return_approx=True`` (ADACUR in :func:`xenbench.studies.adacur.adacur_round_trace`, AXN in
    :func:`xenbench.studies.axn.axn_round_trace`)."""
    anchor_records = [r for r in result.rounds if r.phase == "anchors"]
    # RoundRecord t holds the ŝ that chose round t's anchors, i.e. ŝ after rounds 0..t-1.
    approx = np.stack([r.approx_scores for r in anchor_records[1:]] + [result.approx_scores[0]]).astype(np.float64)
    retrieved = [r.items[0] for r in result.rounds if r.phase == "retrieve"]
    return RoundTrace(int(query_row), np.asarray(exact, dtype=np.float64), approx, [r.items[0] for r in anchor_records],
                      retrieved[0] if retrieved else np.zeros(0, np.int64), budget,
                      int(result.anchors.shape[1]), sampler)
