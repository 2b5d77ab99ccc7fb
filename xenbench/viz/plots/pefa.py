"""PEFA's gain over the DE against the share of test queries whose gold is seen in training (notebook 05)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

__all__ = ["gain_by_seen_share"]


def gain_by_seen_share(summary: pd.DataFrame, k: int, title: str | None = None) -> go.Figure:
    """Plotly figure: gain over the DE (points) against the share of seen golds, per split regime and method.

    Each regime's "all" point sits at its seen share; its "seen" and "unseen" subsets at shares 1 and 0, joined
    by a line (the overall gain is the share-weighted mean of the two, so it lies on that line). Error bars:
    ±2 paired standard errors of one split.
    """
    df = summary[summary["k"] == k]
    fig = go.Figure()
    for (split, method), g in df.groupby(["split", "method"], sort=False):
        g = g.set_index("subset")
        seen_share = float(g.loc["seen", "share"]) if "seen" in g.index else 0.0
        x = [0.0 if s == "unseen" else 1.0 if s == "seen" else seen_share for s in g.index]
        order = np.argsort(x)
        fig.add_trace(go.Scatter(
            x=np.asarray(x)[order], y=100 * g["gain"].to_numpy()[order], mode="lines+markers",
            name=f"{method}, {split} split", text=list(np.asarray(g.index)[order]),
            error_y={"type": "data", "array": 200 * g["gain_se"].to_numpy()[order]},
            hovertemplate="%{text}: seen share %{x:.2f}, gain %{y:+.1f} points<extra></extra>"))
    fig.add_hline(y=0, line_dash="dot")
    fig.update_layout(title=title or f"PEFA's Recall@{k} gain over the DE vs the share of seen golds",
                      xaxis_title="share of test queries whose gold is labelled in training",
                      yaxis_title=f"Recall@{k} gain (points)")
    return fig

