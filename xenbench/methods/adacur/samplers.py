"""ADACUR's samplers (Alg. 3) and the keyed randomness they share with both engines.

Randomness is keyed, not sequential: the uniforms of (seed, query id, round, stream) come from
:func:`keyed_uniforms`, a counter-based SplitMix64 hash. The reference and the batched engine read the same
numbers, whatever the batching, so they draw identical anchors for the random and softmax samplers.

A sampler is a small object with one method, ``keys(scores, draws)``: the k_s unchosen items with the
highest keys become the round's anchors. :data:`SAMPLERS` maps the names used by notebooks and yaml
files to default objects (:func:`make_sampler` also sets τ).

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023: Alg. 3, §3.2 (oracle samplers).
.. [KOOL19] Kool, van Hoof, Welling. "Stochastic Beams and Where to Find Them: The Gumbel-Top-k Trick
   for Sampling Sequences Without Replacement", ICML 2019.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from xenbench._validation import check_choice, check_float, check_int
from xenbench.errors import ParameterError

__all__ = ["SAMPLERS", "Draws", "Oracle", "Random", "Sampler", "SoftMax", "TopK", "keyed_uniforms", "make_sampler"]

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


def _n_random(epsilon: float, k_s: int) -> int:
    """Number of uniformly random anchors ε·k_s of an oracle round, rounded half up."""
    return int(np.floor(epsilon * k_s + 0.5))


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

