"""Figures of λ tuning ([AXN] Eq. 7, [PEFA] Eq. 2): pure functions of the λ sweeps of
:func:`xenbench.studies.axn.axn_lambda_sweep` and :func:`xenbench.studies.pefa.pefa_lambda_sweep`."""
from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from xenbench.viz.plots._style import _facet_titles, _style, method_color

__all__ = ["recall_vs_lambda_lines"]


def _line(d: pd.DataFrame) -> pd.Series:
    return d["method"] + (", B_CE = " + d["budget"].astype(str) if "budget" in d else "")


def recall_vs_lambda_lines(sweep: pd.DataFrame, chosen: pd.DataFrame | None = None, *,
                           title: str | None = "Recall vs λ", height: int | None = 420) -> go.Figure:
    """Recall vs λ, one line per method (and budget, when the sweep has one), one facet per k.

    Parameters
    ----------
    sweep : DataFrame
        A λ sweep (columns ``method``, ``lam``, ``k``, ``recall``, ``recall_se``, optionally ``budget``),
        one or several methods concatenated.
    chosen : DataFrame, optional
        :func:`xenbench.studies.protocol.choose_on_dev` output: its λ per line and k is marked with a star.
    """
    df = sweep.sort_values([c for c in ("method", "budget", "lam") if c in sweep]).assign(line=_line)
    lines = list(dict.fromkeys(df["line"]))
    ks = sorted(df["k"].unique())  # panels in rising k, whatever the rows' order: the stars below rely on it
    fig = px.line(df, x="lam", y="recall", color="line", facet_col="k", markers=True, error_y="recall_se",
                  labels={"line": ""}, category_orders={"line": lines, "k": ks},
                  color_discrete_map={name: method_color(name) for name in lines})
    fig.update_traces(hovertemplate="%{fullData.name}<br>λ = %{x:.2f}<br>recall %{y:.3f} ± %{error_y.array:.3f}"
                                    "<extra></extra>")
    if chosen is not None:
        colors = {tr.name: tr.line.color for tr in fig.data}
        for (_, r), name in zip(chosen.iterrows(), _line(chosen)):
            fig.add_trace(go.Scatter(x=[r["lam"]], y=[r["recall"]], mode="markers", showlegend=False,
                                     marker={"symbol": "star", "size": 14, "color": colors.get(name),
                                             "line": {"width": 1, "color": "black"}},
                                     hovertemplate=f"{name}<br>chosen λ = %{{x:.2f}}<br>recall %{{y:.3f}}<extra></extra>"),
                          row=1, col=ks.index(r["k"]) + 1)
    fig.update_xaxes(title_text="λ", range=[-0.03, 1.03])
    fig.update_yaxes(range=[0, 1.02], matches="y")
    fig.update_layout(yaxis_title="Recall")
    return _style(_facet_titles(fig, "k"), title, height)
