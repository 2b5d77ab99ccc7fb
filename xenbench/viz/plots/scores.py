"""Figures of score matrices: zero-mean score distributions (ANNCUR Fig. 1b kind)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from xenbench.viz.plots._style import _style


def score_distributions(matrices: Mapping[str, np.ndarray], *, standardize: bool = True, bins: int = 200,
                        title: str | None = None, height: int | None = 420) -> go.Figure:
    """Density of each matrix's zero-mean scores per query (each row minus its mean), one line per matrix.

    Binned here (``bins`` bins over the pooled range) so a figure of millions of scores stays small.
    ``standardize`` divides each matrix by its overall std, to compare shapes across score scales.
    """
    from xenbench.studies.stats import center_rows

    fig = go.Figure()
    pooled = {}
    for name, M in matrices.items():
        Z = center_rows(M).ravel()
        pooled[name] = Z / (Z.std() or 1.0) if standardize else Z
    lo = min((float(Z.min()) for Z in pooled.values()), default=0.0)
    hi = max((float(Z.max()) for Z in pooled.values()), default=1.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)  # one grid: the lines share their bins
    for name, Z in pooled.items():
        density, _ = np.histogram(Z, bins=edges, density=True)
        fig.add_scatter(x=(edges[:-1] + edges[1:]) / 2, y=density, mode="lines", name=name)
    fig.update_xaxes(title="score − query mean" + (" (in stds)" if standardize else ""))
    fig.update_yaxes(title="density", type="log")
    return _style(fig, title, height)
