"""Figures of the rank analysis of CE score matrices ([ANNCUR] Fig. 1(b), 6, 8; notebook 02).

Pure builders: the numbers come from :mod:`xenbench.studies.rank` (singular values, centered scores, skewness,
:func:`~xenbench.studies.rank.cur_grid`); these functions only bin, reshape and draw. Every builder takes
keyword-only styling (``title``, ``height``) and returns a new figure.

One colour per CE throughout (the order of the mappings / of the ``ce`` column), so figures of the same
notebook read together.

References
----------
.. [ANNCUR] Yadav et al., "Efficient Nearest Neighbor Search for Cross-Encoder Models using Matrix
   Factorization", EMNLP 2022: Fig. 1(b) (zero-mean score distributions of [CLS]-CE vs a dot-product
   model), Fig. 6 (Top-10-Recall over k_q × k_i), Fig. 8 (approximation error over k_q × k_i), §B.2.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from xenbench.viz.plots._style import _style

__all__ = ["cur_error_curves", "cur_heatmaps", "score_skew_histograms", "singular_value_spectra"]

_COLORS = plotly.colors.qualitative.Plotly


def _color(j: int) -> str:
    return _COLORS[j % len(_COLORS)]


def singular_value_spectra(
    spectra: Mapping[str, np.ndarray],
    *,
    centered: Mapping[str, np.ndarray] | None = None,
    rel_tol: float | None = None,
    rel_tol_label: str = "numpy tolerance",
    title: str | None = "Singular values, normalized by σ₁",
    height: int | None = 450,
) -> go.Figure:
    """Log-scale singular value spectra σ_j / σ₁ of several score matrices on one figure.

    Parameters
    ----------
    spectra : mapping of str to ndarray of shape (n,)
        Name (e.g. ``"cls-ce"``) -> singular values, descending (:func:`xenbench.studies.rank.singular_values`).
    centered : mapping of str to ndarray of shape (n,), optional
        The same names -> singular values of the row-centered matrices (``center="rows"``), drawn
        dashed in the colour of the uncentered spectrum, each normalized by its own σ₁.
    rel_tol : float, optional
        A relative rank threshold to draw as a horizontal line, e.g. NumPy's ``max(m, n) * eps`` of
        the scores' dtype: singular values above it count in ``numerical_rank``.
    rel_tol_label : str
        Legend text of that line.
    """
    fig = go.Figure()
    for j, (name, s) in enumerate(spectra.items()):
        for what, values, dash in (("", s, "solid"), (", row-centered", (centered or {}).get(name), "dash")):
            if values is None:
                continue
            values = np.asarray(values, dtype=np.float64)
            rel = values / values[0] if values.size and values[0] > 0 else values
            fig.add_scatter(x=np.arange(1, rel.size + 1), y=rel, mode="lines", name=f"{name}{what}",
                            line=dict(color=_color(j), dash=dash),
                            hovertemplate="σ_%{x} / σ₁ = %{y:.2e}<extra>" + f"{name}{what}" + "</extra>")
    if rel_tol is not None:  # a trace, not add_hline: hline annotations misplace on log axes
        n = max((np.asarray(v).size for v in spectra.values()), default=1)
        fig.add_scatter(x=[1, n], y=[rel_tol, rel_tol], mode="lines", name=rel_tol_label,
                        line=dict(color="gray", dash="dot"), hovertemplate=f"{rel_tol:.2e}<extra></extra>")
    fig.update_layout(xaxis_title="index j", yaxis_title="σ_j / σ₁", yaxis_type="log", yaxis_exponentformat="power")
    return _style(fig, title, height)


def score_skew_histograms(
    scores: Mapping[str, np.ndarray],
    *,
    skew: Mapping[str, np.ndarray] | None = None,
    bins: int = 120,
    x_label: str = "score − query mean (in query standard deviations)",
    log_y: bool = True,
    title: str | None = "Per-query score distributions",
    height: int | None = 430,
) -> go.Figure:
    """Histograms of per-query zero-mean scores, one per CE ([ANNCUR] Fig. 1(b)), and per-query skewness.

    The histograms are binned here on one shared grid (a plotly histogram of 3 million raw scores
    would embed all of them in every report) and drawn as the share of (query, item) pairs per bin.

    Parameters
    ----------
    scores : mapping of str to ndarray
        CE name -> centered scores of any shape, e.g. :func:`xenbench.studies.rank.center_rows` (``scale=True``
        to compare shapes across CEs with different score scales).
    skew : mapping of str to ndarray of shape (n_queries,), optional
        CE name -> :func:`xenbench.studies.rank.score_skew`; drawn as violins in a second panel.
    bins : int
        Number of bins spanning the pooled range of all CEs.
    log_y : bool
        Log scale for the histogram: the tails, where the skew lives, hold few pairs.
    """
    arrays = {name: np.asarray(v, dtype=np.float64).ravel() for name, v in scores.items()}
    finite = [a[np.isfinite(a)] for a in arrays.values()]
    lo = min((a.min() for a in finite if a.size), default=0.0)
    hi = max((a.max() for a in finite if a.size), default=1.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    centers = (edges[:-1] + edges[1:]) / 2

    panels = 2 if skew else 1
    fig = make_subplots(rows=1, cols=panels, column_widths=[0.68, 0.32] if panels == 2 else None,
                        subplot_titles=("zero-mean scores", "skewness per query") if panels == 2 else None)
    for j, (name, a) in enumerate(arrays.items()):
        counts, _ = np.histogram(a[np.isfinite(a)], bins=edges)
        share = counts / max(counts.sum(), 1)
        fig.add_scatter(x=centers, y=np.where(share > 0, share, np.nan), mode="lines", line_shape="hvh",
                        name=name, legendgroup=name, line=dict(color=_color(j)), connectgaps=False,
                        hovertemplate="%{x:.2f}: %{y:.2%} of pairs<extra>" + name + "</extra>", row=1, col=1)
    if skew:
        names = list(arrays)
        for name, values in skew.items():
            j = names.index(name) if name in names else len(names) + list(skew).index(name)
            values = np.asarray(values, dtype=np.float64)
            fig.add_violin(y=values[np.isfinite(values)], name=name, legendgroup=name, showlegend=False,
                           line_color=_color(j), box_visible=True, meanline_visible=True, points=False,
                           row=1, col=2)
        fig.update_yaxes(title_text="skewness g₁", row=1, col=2)
    fig.update_xaxes(title_text=x_label, row=1, col=1)
    fig.update_yaxes(title_text="share of (query, item) pairs", type="log" if log_y else "linear",
                     exponentformat="power", row=1, col=1)
    return _style(fig, title, height)


def _facets(grid: pd.DataFrame, facet: str | None) -> list[tuple[str, pd.DataFrame]]:
    if facet is None or facet not in grid.columns:
        return [("", grid)]
    return [(str(name), grid[grid[facet] == name]) for name in pd.unique(grid[facet])]


def _fmt(v: float) -> str:
    if not np.isfinite(v):
        return ""
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def cur_heatmaps(
    grid: pd.DataFrame,
    value: str = "error",
    *,
    facet: str | None = "ce",
    log_color: bool | None = None,
    zmin: float | None = None,
    zmax: float | None = None,
    title: str | None = None,
    height: int | None = 430,
) -> go.Figure:
    """Heat maps of a :func:`~xenbench.studies.rank.cur_grid` column over (k_q × k_i), one panel per CE.

    The kind of [ANNCUR] Fig. 6 (Top-10-Recall) and Fig. 8 (approximation error). Cells are annotated
    with their value; the k_q = k_i cells, where R_anc[:, I_anc] is square and ill-conditioned (§B.2),
    are outlined in black. All panels share one colour scale.

    Parameters
    ----------
    grid : DataFrame
        Columns ``k_q``, ``k_i``, ``value`` and, for several panels, ``facet`` (e.g. the concatenated
        grids of two CEs with a ``ce`` column).
    value : str
        Column to show: ``error``, ``error_centered``, ``recall_at_m``, ``recall_at_budget``, ``cond``.
    facet : str or None
        Column naming the panels.
    log_color : bool, optional
        Colour by log10 of the value (the diagonal spike is orders of magnitude above the other
        errors and would wash them out). Default: True for every column but the recalls.
    zmin, zmax : float, optional
        Colour range (in the value's units). Default: the data's range; recall defaults to [0, 1].
    """
    is_recall = value.startswith("recall")  # recall, recall_at_m, recall_at_budget: higher is better, in [0, 1]
    if log_color is None:
        log_color = not is_recall
    if is_recall:
        zmin = 0.0 if zmin is None else zmin
        zmax = 1.0 if zmax is None else zmax
    facets = _facets(grid, facet)
    vals = grid[value].to_numpy(dtype=np.float64)
    ok = np.isfinite(vals) & ((vals > 0) if log_color else True)
    lo = zmin if zmin is not None else (vals[ok].min() if ok.any() else 0.0)
    hi = zmax if zmax is not None else (vals[ok].max() if ok.any() else 1.0)

    def tr(v: np.ndarray | float) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64)
        if not log_color:
            return v
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(v > 0, np.log10(v), np.nan)

    colorbar: dict = dict(title=value)
    if log_color and lo > 0 and hi > lo:
        ticks = 10.0 ** np.arange(np.floor(np.log10(lo)), np.ceil(np.log10(hi)) + 1)
        fine = np.sort(np.concatenate([ticks, 2 * ticks, 5 * ticks]))
        fine = fine[(fine >= lo / 1.0001) & (fine <= hi * 1.0001)]
        if fine.size < 2:
            fine = np.array([lo, hi])
        colorbar.update(tickvals=tr(fine).tolist(), ticktext=[_fmt(t) for t in fine])

    fig = make_subplots(rows=1, cols=len(facets), subplot_titles=[name for name, _ in facets] if facet else None,
                        horizontal_spacing=0.08)
    for c, (name, part) in enumerate(facets, start=1):
        table = part.pivot_table(index="k_q", columns="k_i", values=value, aggfunc="first", dropna=False)
        table = table.sort_index().sort_index(axis=1)
        kq = [str(v) for v in table.index]
        ki = [str(v) for v in table.columns]
        z = table.to_numpy(dtype=np.float64)
        fig.add_heatmap(
            z=tr(z), x=ki, y=kq, zmin=float(tr(lo)), zmax=float(tr(hi)), colorscale="Viridis",
            reversescale=not is_recall, text=[[_fmt(v) for v in row] for row in z], texttemplate="%{text}",
            customdata=z, hovertemplate="k_q=%{y}, k_i=%{x}: " + value + " = %{customdata:.4g}<extra>"
            + name + "</extra>", colorbar=colorbar, showscale=c == len(facets), row=1, col=c,
        )
        for r, q in enumerate(table.index):  # outline the k_q = k_i cells (categorical axes: unit steps)
            if q in table.columns:
                x = list(table.columns).index(q)
                fig.add_shape(type="rect", x0=x - 0.5, x1=x + 0.5, y0=r - 0.5, y1=r + 0.5,
                              line=dict(color="black", width=3), row=1, col=c)
        fig.update_xaxes(title_text="k_i (anchor items)", type="category", row=1, col=c)
        fig.update_yaxes(title_text="k_q (anchor queries)" if c == 1 else None, type="category", row=1, col=c)
    if title is None:
        title = f"ANNCUR {value} over anchor queries × anchor items (k_q = k_i outlined)"
    return _style(fig, title, height)


def cur_error_curves(
    grid: pd.DataFrame,
    value: str = "error_centered",
    *,
    facet: str | None = "ce",
    log_y: bool = True,
    title: str | None = None,
    height: int | None = 430,
) -> go.Figure:
    """``value`` against k_i, one line per k_q and one panel per CE; the k_q = k_i points are circled.

    The same numbers as :func:`cur_heatmaps`, drawn so that the §B.2 spike reads as a peak of each
    k_q line exactly where k_i reaches k_q.

    Parameters
    ----------
    grid : DataFrame
        Columns ``k_q``, ``k_i``, ``value`` and optionally ``facet``.
    value : str
        Column to draw.
    log_y : bool
        Log y axis (default; the spike spans orders of magnitude).
    """
    facets = _facets(grid, facet)
    k_qs = sorted(pd.unique(grid["k_q"]))
    fig = make_subplots(rows=1, cols=len(facets), subplot_titles=[name for name, _ in facets] if facet else None,
                        shared_yaxes=True, horizontal_spacing=0.05)
    for c, (name, part) in enumerate(facets, start=1):
        for j, k_q in enumerate(k_qs):
            line = part[part["k_q"] == k_q].sort_values("k_i")
            colour = plotly.colors.sample_colorscale("Viridis", [j / max(len(k_qs) - 1, 1)])[0]
            fig.add_scatter(x=line["k_i"], y=line[value], mode="lines+markers", name=f"k_q = {k_q}",
                            legendgroup=str(k_q), showlegend=c == 1, line=dict(color=colour),
                            hovertemplate=f"k_q={k_q}, " + "k_i=%{x}: %{y:.4g}<extra>" + name + "</extra>",
                            row=1, col=c)
            diag = line[line["k_i"] == k_q]
            if len(diag):
                fig.add_scatter(x=diag["k_i"], y=diag[value], mode="markers", showlegend=False,
                                legendgroup=str(k_q), hoverinfo="skip",
                                marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(color="black", width=2)),
                                row=1, col=c)
        fig.update_xaxes(title_text="k_i (anchor items)", type="log", tickmode="array",
                         tickvals=sorted(pd.unique(grid["k_i"])), row=1, col=c)
    fig.update_yaxes(type="log" if log_y else "linear", tickformat=".3~g")
    fig.update_yaxes(title_text=value, row=1, col=1)
    if title is None:
        title = f"ANNCUR {value} against k_i, one line per k_q (k_q = k_i circled)"
    return _style(fig, title, height)
