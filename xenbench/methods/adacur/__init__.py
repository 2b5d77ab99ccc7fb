"""ADACUR: adaptive, per-query choice of anchor items for CUR-based k-NN search with cross-encoders.

For each test query, N_r rounds choose k_s = k_i / N_r anchor items each (Alg. 1). Round 1 is uniform
at random (or the top items of a retriever such as a dual encoder or TF-IDF); every later round
approximates all item scores from the anchors so far, ŝ = C_test · pinv(R_anc[:, I_anc]) · R_anc
(Alg. 2), and samples the next k_s anchors from ŝ with the chosen anchors masked (Alg. 3). The test
query is scored exactly (a CE call) on each new anchor.

Two ways to spend the CE budget B_CE (§2.2):

* **split** (``n_anchor_items < budget``): k_i anchors, then the items with the highest final ŝ that
  are not anchors are scored until B_CE calls are spent; anchors are re-ranked for free.
* **No-Split** (``n_anchor_items=None``): all B_CE calls go to anchors; return the anchors sorted by
  their exact scores.

Two engines that must agree (tests check anchors, ranked lists and recall), chosen by
``options=SearchOptions(implementation=...)``:

* ``"reference"`` (:mod:`.reference`): per query, numpy, loops; reads line by line against Alg. 1–3.
* ``"batched"`` (:mod:`.batched`): all test queries at once with torch (CPU or GPU). Alg. 2 becomes a
  batched solve for the query weights w = C_test · pinv(R_anc[:, I_anc]) (one per query) and a single
  GEMM ŝ = W · R_anc; the solve grows a Cholesky factor by one block per round (``SearchOptions.solver``).

The package, one module per mechanism: :mod:`.samplers` (Alg. 3 and the keyed randomness), :mod:`.reference`
and :mod:`.batched` (the engines), :mod:`.records` (the plan of a search, its per-round records and result),
:mod:`.estimator` (:class:`AdaCur`, :class:`SearchOptions`). The budgeted baselines (ANNCUR and re-ranking at
B_CE) are :mod:`xenbench.methods.baselines`.

[AXN] Eq. 7 in score space, (1 − λ)·ŝ + λ·ŝ_prior, is an input of :meth:`AdaCur.run`
(``prior_scores``, ``prior_weight``): :class:`xenbench.methods.axn.Axn` owns λ and u_param and passes them.

Randomness is keyed, not sequential: the uniforms of (seed, query id, round, stream) come from
:func:`keyed_uniforms`, a counter-based SplitMix64 hash. Both implementations read the same numbers,
whatever the batching, so they draw identical anchors for the random and softmax samplers.

Samplers (``sampler=``)
-----------------------
A sampler is a small object with one method, ``keys(scores, draws)``: the k_s unchosen items with the
highest keys become the round's anchors. :data:`SAMPLERS` maps the names used by notebooks and yaml
files to default objects (:func:`make_sampler` also sets τ).

:class:`TopK` (``"topk"``)
    Greedy top-k_s of ŝ (TopK, Alg. 3 line 10).
:class:`SoftMax` (``"softmax"``)
    k_s items without replacement from softmax(ŝ / τ) (SoftMax, Alg. 3 line 12), drawn as the
    top-k_s of ŝ / τ + Gumbel noise (the Gumbel-top-k trick, Kool et al. 2019).
:class:`Random` (``"random"``)
    k_s items uniformly from the items that are not anchors yet (Alg. 3 line 14).
:class:`Oracle` (``"oracle_topk"``, ``"oracle_softmax"``)
    TopK^O_{k_m,ε} and SoftMax^O_{k_m,ε} of §3.2, the oracle analysis: they read the query's *exact*
    scores of all items (free oracle access, not counted as CE calls: an analysis tool), mask the
    exact top-k_m items, take (1 − ε)·k_s items greedily / by softmax of exact scores and ε·k_s
    uniformly at random. With ``n_rounds=1`` they are exactly the §3.2 strategies applied to ANNCUR
    (Fig. 5–7).

Engine options (:class:`SearchOptions`: implementation, device, solver, batch size) change how fast
the search runs, never which items it returns.

All top-k selections use the tie rule of :mod:`xenbench.metrics` (higher key, then lower index).
All linear algebra is float64 so that the two implementations rank items identically.

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023: Alg. 1–3, §2.2 (split / No-Split),
   §3.2 (oracle samplers), Fig. 4 (time per round in CE calls, pinv and matmul).
.. [ANNCUR] Yadav et al., EMNLP 2022, §2.3–2.4, §3.2 (budgeted evaluation).
.. [KOOL19] Kool, van Hoof, Welling. "Stochastic Beams and Where to Find Them: The Gumbel-Top-k Trick
   for Sampling Sequences Without Replacement", ICML 2019.
"""
from __future__ import annotations

from xenbench.methods.adacur.estimator import AdaCur, SearchOptions
from xenbench.methods.adacur.records import AdaCurResult, RoundRecord, rank_by_exact, round_sizes
from xenbench.methods.adacur.samplers import (
    SAMPLERS,
    Draws,
    Oracle,
    Random,
    Sampler,
    SoftMax,
    TopK,
    keyed_uniforms,
    make_sampler,
)

__all__ = [
    "SAMPLERS",
    "AdaCur",
    "AdaCurResult",
    "Draws",
    "Oracle",
    "Random",
    "RoundRecord",
    "Sampler",
    "SearchOptions",
    "SoftMax",
    "TopK",
    "keyed_uniforms",
    "make_sampler",
    "rank_by_exact",
    "round_sizes",
]
