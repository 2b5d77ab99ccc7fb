"""Notebook 07's figure: Top-k-Recall against cost, one line per method, the Pareto front marked."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from xenbench.errors import ParameterError
from xenbench.viz.plots._style import _style, method_color

__all__ = ["recall_vs_cost"]

_COSTS = {"wall_ms": "wall time per query (ms)", "calls": "CE calls per query (B_CE)",
          "search_ms": "search time per query without CE calls (ms)"}


def recall_vs_cost(summary: pd.DataFrame, *, cost: str = "wall_ms", front: str | None = "pareto",
                   title: str | None = "Top-k-Recall against cost", height: int | None = 460,
                   log_x: bool = True, facet: str = "k", value_name: str = "Top-k-Recall") -> go.Figure:
    """Test Top-k-Recall against a cost, one line per method (its budgets), one facet per k.

    Parameters
    ----------
    summary : DataFrame
        :func:`xenbench.studies.compare.summary` (columns ``method``, ``budget``, ``k``, ``mean``, ``lo``, ``hi`` and
        the cost column), optionally a bool column ``front`` naming the Pareto-optimal points.
    cost : {"wall_ms", "calls", "search_ms"}
        The x axis.
    front : str, optional
        Bool column of ``summary`` whose points are ringed and joined by a dashed black line (the Pareto front);
        None: none.
    log_x : bool
        Logarithmic cost axis.
    facet, value_name : str
        The column of one facet each (``"k"``; ``"measure"`` for the label measures of
        :func:`xenbench.studies.compare.compare_summary` with ``cell="measure"``) and the name of the y value.

    Error bars are the 95% intervals across runs (``lo``–``hi``).
    """
    if cost not in _COSTS:
        raise ParameterError("cost", f"one of {sorted(_COSTS)}", cost, "recall_vs_cost")
    needed = {"method", "budget", facet, "mean", "lo", "hi", cost} | ({front} if front else set())
    if not isinstance(summary, pd.DataFrame) or not needed <= set(summary.columns):
        raise ParameterError("summary", f"a DataFrame with columns {sorted(needed)}",
                             sorted(summary.columns) if isinstance(summary, pd.DataFrame) else type(summary).__name__,
                             "recall_vs_cost")
    ks = sorted(summary[facet].unique())
    fig = make_subplots(rows=1, cols=len(ks), shared_yaxes=True,
                        subplot_titles=[f"k = {k}" if facet == "k" else str(k) for k in ks], horizontal_spacing=0.04)
    for col, k in enumerate(ks, start=1):
        at_k = summary[summary[facet] == k]
        for method, g in at_k.groupby("method", sort=True):
            g = g.sort_values(cost)
            fig.add_trace(go.Scatter(
                x=g[cost], y=g["mean"], mode="lines+markers", name=method, legendgroup=method, showlegend=col == 1,
                line={"color": method_color(method)},
                error_y={"type": "data", "symmetric": False, "array": g["hi"] - g["mean"],
                         "arrayminus": g["mean"] - g["lo"], "thickness": 1},
                customdata=g[["budget"]].to_numpy(),
                hovertemplate=(f"{method}<br>B_CE = %{{customdata[0]}}<br>{_COSTS[cost]} %{{x:.3g}}"
                               f"<br>{value_name} %{{y:.3f}}<extra></extra>")), row=1, col=col)
        if front:
            f = at_k[at_k[front].astype(bool)].sort_values(cost)
            fig.add_trace(go.Scatter(
                x=f[cost], y=f["mean"], mode="lines+markers", name="Pareto front", legendgroup="front",
                showlegend=col == 1, line={"color": "black", "dash": "dash", "width": 1},
                marker={"symbol": "circle-open", "size": 14, "color": "black", "line": {"width": 2}},
                hoverinfo="skip"), row=1, col=col)
        fig.update_xaxes(title_text=_COSTS[cost], type="log" if log_x else "linear", row=1, col=col)
    fig.update_yaxes(title_text=f"{value_name} (test)", range=[0, 1.02], row=1, col=1)
    return _style(fig, title, height)
