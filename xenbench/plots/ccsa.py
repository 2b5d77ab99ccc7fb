"""Figures of CCSA's index balance ([CCSA] Fig. 2/3) and its recall-vs-work trade-off against faiss IVF."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from xenbench.plots._style import _style

__all__ = ["activation_frequency_lines", "recall_vs_scored"]


def activation_frequency_lines(frequencies: Mapping[str, np.ndarray], chunk_size: int, *,
                               title: str | None = "Share of items per code dimension",
                               height: int | None = 420) -> go.Figure:
    """Sorted share of items that switch on each of the C·L dimensions, one line per model ([CCSA] Fig. 2/3).

    Parameters
    ----------
    frequencies : mapping
        Label -> :func:`xenbench.ccsa.activation_frequency` output.
    chunk_size : int
        L; the dashed line is the perfectly balanced share 1 / L.
    """
    fig = go.Figure()
    for label, f in frequencies.items():
        fig.add_trace(go.Scatter(x=np.arange(1, f.size + 1), y=f, mode="lines", name=str(label)))
    fig.add_hline(y=1 / chunk_size, line_dash="dash", line_color="black",
                  annotation_text=f"balanced: 1/L = {1 / chunk_size:.2%}", annotation_position="top right")
    fig.update_xaxes(title_text="dimension, most used first")
    fig.update_yaxes(title_text="share of items", type="log", tickformat=".1%")
    return _style(fig, title, height)


def recall_vs_scored(ccsa: pd.DataFrame, ivf: pd.DataFrame | None = None, *, k: int = 10, m: int = 100,
                     title: str | None = None, height: int | None = 420) -> go.Figure:
    """Top-k-Recall@m against postings read per query: CCSA models (points) and IVF over nprobe (line).

    Parameters
    ----------
    ccsa : DataFrame
        :func:`xenbench.ccsa.balance_sweep` results.
    ivf : DataFrame, optional
        :func:`xenbench.ccsa.ivf_baseline` results.
    """
    fig = go.Figure()
    labels = [f"λ = {r:g}, B = {b}" for r, b in zip(ccsa["reg"], ccsa["batch_size"])]
    fig.add_trace(go.Scatter(x=ccsa["scored"], y=ccsa["recall"], mode="markers+text", text=labels,
                             textposition="top center", name="CCSA", marker={"size": 10}))
    if ivf is not None:
        fig.add_trace(go.Scatter(x=ivf["scored"], y=ivf["recall"], mode="lines+markers+text",
                                 text=[f"w = {w}" for w in ivf["nprobe"]], textposition="bottom right",
                                 name="faiss IVF (nprobe w)", line={"dash": "dot"}))
    fig.update_xaxes(title_text="items scored per query (postings read)", type="log")
    fig.update_yaxes(title_text=f"Top-{k}-Recall@{m}", range=[0, 1.02])
    return _style(fig, title or f"Recall vs work: exact top-{k} neighbours among the {m} returned", height)
