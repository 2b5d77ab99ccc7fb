"""Layer 3, methods: the papers' estimators, each a pure module with explicit inputs (no notebooks, no prose, no
drivers: those are :mod:`xenbench.studies`).

``cur`` (ANNCUR's CUR factorization, Eq. 1-3), ``adacur`` (ADACUR's adaptive rounds, Alg. 1-3: a package of
samplers, two engines and the estimator), ``baselines`` (ANNCUR and retrieve-and-rerank at a CE budget), ``axn``
(AXN's test-time refinement, Eq. 4-7), ``mf`` (matrix-factorization baselines), ``pefa`` (PEFA-XS/XL, Eq. 2-8),
``ccsa`` (composite-code sparse autoencoder and its inverted index, Eq. 1, 5), ``gar`` (GAR's adaptive re-ranking
over a corpus graph, through pyterrier-adaptive), ``trace`` (per-round traces). The evaluation protocol that judges
them (splits, choices on dev, paired tests, the verdict rule) is :mod:`xenbench.studies.protocol`.
"""
from __future__ import annotations

from xenbench._lazy import submodules

__getattr__, __dir__ = submodules(
    __name__, {m: m for m in ("adacur", "axn", "baselines", "ccsa", "cur", "gar", "mf", "pefa", "trace")})
