"""Rank analysis of CE score matrices: spectra, numerical and energy ranks, score skew, CUR grids.

ANNCUR (§2.6, §3.3, Table 3(b)) argues that a [CLS]-CE, whose per-query score distribution is strongly
skewed (a few items score high, Fig. 1(b)), yields a query-item score matrix of much higher rank than an
[EMB]-CE scoring a dot product of contextualized query/item embeddings, and that the lower rank makes
the CUR approximation of ANNCUR better at equal numbers of anchor queries k_q and anchor items k_i
(Fig. 6: Top-10-Recall, Fig. 8: approximation error). This module measures each link of that chain:

* :func:`singular_values`, :func:`numerical_rank` (NumPy's ``matrix_rank`` rule, the measure of
  Table 3(b)) and :func:`energy_rank` (how many singular values hold 90% / 99% of ‖M‖_F², a measure
  that does not depend on a tolerance and so not on the float precision of the scores);
* :func:`center_rows` and :func:`score_skew`: the zero-mean per-query score distributions of Fig. 1(b)
  and their skewness;
* :func:`cur_grid` and :func:`diagonal_spike`: ANNCUR's error and Top-k-Recall over a (k_q × k_i) grid
  with fixed held-out test queries, including the k_q = k_i ill-conditioning of §B.2;
* comparing CEs (notebook 02), on ``{ce: M}`` mappings: :func:`load_matrices` (stores that must agree
  on ids), :func:`matrix_summary`, :func:`rank_table`, :func:`skew_table`, :func:`cur_grids`,
  :func:`diagonal_spikes`, :func:`emb_wins`, :func:`rank_orderings` (which CE each rank rule puts lower) and
  :func:`paired_sign_test`. The conclusions built from them live in :mod:`xenbench.studies.findings.rank`.

Notebook 02's driver, one module per concept: :mod:`.matrices` (the CEs' stores, checks and roles), :mod:`.spectra`
(singular values and ranks), :mod:`.grids` (ANNCUR over a (k_q × k_i) grid); everything is exported here, so the
notebook calls ``xb.studies.rank.<name>``.

Precision. Singular values are computed in float64 whatever the dtype of ``M``; the default rank
tolerance uses the machine epsilon of ``M``'s own dtype (the precision the scores were stored with), as
NumPy does. bf16 or fp16 noise in the scores inflates such a rank; the energy ranks are robust to it.

A constant offset matters. A per-query (or global) offset adds a large rank-1 component: it inflates
σ₁, hence NumPy's *relative* tolerance σ₁·max(m, n)·eps, and it can hold almost all of ‖M‖_F², so the
uncentered energy rank is 1. Neither changes any query's ranking of items. ``center="rows"`` removes
the per-query means (as Fig. 1(b) does for its histograms) before the analysis.

References
----------
.. [ANNCUR] Yadav, Monath, Angell, Zaheer, McCallum. "Efficient Nearest Neighbor Search for
   Cross-Encoder Models using Matrix Factorization", EMNLP 2022: §2.6 and Fig. 1(b) ([EMB]-CE, score
   distributions), §3.3 and Table 3(b) (numpy rank of the YuGiOh matrices: 315 [CLS] vs 45 [EMB]),
   Fig. 6 (Top-10-Recall over k_q × k_i), Fig. 8 (approximation error over k_q × k_i), §B.2
   (ill-conditioning at k_q = k_i).
.. [NumPy] ``numpy.linalg.matrix_rank``: default ``tol = S.max() * max(M.shape) * eps(M.dtype)``.
"""
from __future__ import annotations

from xenbench.studies.rank.grids import (
    GRID_FRACTIONS,
    cur_grid,
    cur_grids,
    default_sizes,
    diagonal_spike,
    diagonal_spikes,
    emb_wins,
    offdiagonal_summary,
    paired_sign_test,
    spike_summary,
)
from xenbench.studies.rank.matrices import (
    available_ces,
    ce_layouts,
    ce_roles,
    ce_stores,
    data_line,
    is_anncur_layout,
    load_matrices,
    matrix_summary,
    per_ce,
    store_attrs,
)
from xenbench.studies.rank.spectra import (
    NUMPY_RANK,
    NUMPY_RANK_CENTERED,
    NUMPY_RANK_F64,
    ORDERING_RULES,
    TOP_SHARE,
    energy_label,
    energy_rank,
    lowest,
    numerical_rank,
    numpy_relative_tolerance,
    numpy_tolerance,
    rank_orderings,
    rank_table,
    singular_values,
    skew_table,
)
from xenbench.studies.stats import center_rows, score_skew  # one centering and skew convention, re-exported

#: findings.rank reads these two helpers of the package's modules under its old import path.
from xenbench.studies.rank.grids import _CUR_VALUES  # noqa: F401
from xenbench.studies.rank.spectra import _rank_column  # noqa: F401

__all__ = [
    "NUMPY_RANK",
    "NUMPY_RANK_CENTERED",
    "NUMPY_RANK_F64",
    "ORDERING_RULES",
    "TOP_SHARE",
    "GRID_FRACTIONS",
    "available_ces",
    "ce_layouts",
    "ce_roles",
    "ce_stores",
    "center_rows",
    "cur_grid",
    "cur_grids",
    "data_line",
    "default_sizes",
    "diagonal_spike",
    "diagonal_spikes",
    "emb_wins",
    "energy_label",
    "energy_rank",
    "is_anncur_layout",
    "load_matrices",
    "lowest",
    "matrix_summary",
    "numerical_rank",
    "numpy_relative_tolerance",
    "numpy_tolerance",
    "offdiagonal_summary",
    "paired_sign_test",
    "per_ce",
    "rank_orderings",
    "rank_table",
    "score_skew",
    "singular_values",
    "skew_table",
    "spike_summary",
    "store_attrs",
]
