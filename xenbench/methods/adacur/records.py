"""What one ADACUR search is and what it returns: the validated plan, the rounds' sizes, the per-round
records, the result, and the final step of every run (rank the scored items by exact score).

Shared by both engines (:mod:`.reference`, :mod:`.batched`), the estimator (:mod:`.estimator`) and the
budgeted baselines (:mod:`xenbench.methods.baselines`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from xenbench.methods.adacur.samplers import Random, Sampler

__all__ = ["AdaCurResult", "RoundRecord", "rank_by_exact", "round_sizes"]


def round_sizes(n_anchor_items: int, n_rounds: int) -> list[int]:
    """k_s of every round: k_i / N_r, the remainder (if any) spread over the first rounds.

    >>> round_sizes(10, 5), round_sizes(11, 3)
    ([2, 2, 2, 2, 2], [4, 4, 3])
    """
    base, extra = divmod(n_anchor_items, n_rounds)
    return [base + (1 if t < extra else 0) for t in range(n_rounds)]



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
