"""Notebook 03's driver: ANNCUR and ADACUR at equal CE budget, round by round, under the dev/test protocol.

Every function takes an exact CE score matrix ``M`` of shape (n_queries, n_items) and a
:class:`xenbench.studies.protocol.Split` of its rows (:func:`xenbench.studies.protocol.query_splits`): anchor
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

Notebook 03 reports the protocol functions (built on :mod:`xenbench.studies.protocol`): every setting is chosen
on dev queries, every number is a mean over anchor seeds × query splits with an interval that contains
their variance, and only the pre-declared pairs are compared, with paired tests over queries.

The package, one module per part of the notebook: :mod:`.budget` (the methods at equal budget: the registry and
:func:`recall_vs_budget`), :mod:`.rounds` (rounds, latency, one query round by round) and :mod:`.runs` (the dev/test
protocol, its summaries and paired comparisons); everything is exported here, so the notebook calls
``xb.studies.adacur.<name>``.

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

from xenbench.studies.adacur.budget import (
    COMPARABLE,
    METHODS,
    SPLIT_FRACTIONS,
    Comparable,
    Search,
    SplitState,
    Variant,
    recall_vs_budget,
)
from xenbench.studies.adacur.rounds import adacur_round_trace, describe_latency, latency_vs_rounds, recall_vs_rounds
from xenbench.studies.adacur.runs import (
    ADACUR_PAIRS,
    PROTOCOL_METHODS,
    adacur_paired_comparisons,
    adacur_protocol_runs,
    adacur_protocol_summary,
    budget_rule_gap,
    chosen_on_dev,
    seed_spread,
)

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
