"""Figures of AXN's λ ([AXN] Eq. 7): pure functions of :func:`xenbench.axn.lambda_sweep` outputs."""
from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from xenbench.plots._style import _facet_titles, _style

__all__ = ["recall_vs_lambda_lines"]


def recall_vs_lambda_lines(sweep: pd.DataFrame, chosen: pd.DataFrame | None = None, *,
                           title: str | None = "AXN: Top-k-Recall vs λ", height: int | None = 420) -> go.Figure:
    """Top-k-Recall vs λ, one line per (method, budget), one facet per k.

    Parameters
    ----------
    sweep : DataFrame
        :func:`xenbench.axn.lambda_sweep` output (columns ``method``, ``lam``, ``budget``, ``k``,
        ``recall``, ``recall_se``), one or several methods concatenated.
    chosen : DataFrame, optional
        :func:`xenbench.axn.select_lambda` output: its λ per (method, budget, k) is marked with a star.
    """
    df = sweep.sort_values(["method", "budget", "lam"]).assign(
        line=lambda d: d["method"] + ", B_CE = " + d["budget"].astype(str))
    fig = px.line(df, x="lam", y="recall", color="line", facet_col="k", markers=True, error_y="recall_se",
                  hover_data=["n_test_queries"])
    if chosen is not None:
        colors = {tr.name: tr.line.color for tr in fig.data}
        ks = sorted(df["k"].unique())
        for _, r in chosen.iterrows():
            name = f"{r['method']}, B_CE = {r['budget']}"
            fig.add_trace(go.Scatter(x=[r["lam"]], y=[r["recall"]], mode="markers", showlegend=False,
                                     marker={"symbol": "star", "size": 14, "color": colors.get(name),
                                             "line": {"width": 1, "color": "black"}},
                                     hovertemplate=f"{name}<br>chosen λ = %{{x}}<br>recall %{{y:.3f}}<extra></extra>"),
                          row=1, col=ks.index(r["k"]) + 1)
    fig.update_xaxes(title_text="λ (weight of u_param)", range=[-0.03, 1.03])
    fig.update_yaxes(range=[0, 1.02], matches="y")
    fig.update_layout(yaxis_title="Top-k-Recall")
    return _style(_facet_titles(fig, "k"), title, height)
