"""Figures of CCSA's index balance ([CCSA] Fig. 2/3) and its recall-vs-work trade-off against faiss IVF / IVF-PQ."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from xenbench.viz.plots._style import _style, method_color

__all__ = ["activation_frequency_lines", "lambda_curve_lines", "loss_curve_lines", "recall_vs_postings"]


def activation_frequency_lines(frequencies: Mapping[str, np.ndarray], chunk_size: int, *,
                               title: str | None = "Share of items per code dimension",
                               height: int | None = 420) -> go.Figure:
    """Sorted share of items that switch on each of the C·L dimensions, one line per model ([CCSA] Fig. 2/3).

    Parameters
    ----------
    frequencies : mapping
        Label -> :func:`xenbench.methods.ccsa.activation_frequency` output.
    chunk_size : int
        L; the dashed line is the perfectly balanced share 1 / L.

    The log axis runs from just below the smallest non-zero share to 100 %. A log axis cannot show a share of 0,
    so unused dimensions end a line early and are counted in its legend entry instead.
    """
    fig = go.Figure()
    positive = [float(np.min(f[f > 0])) for f in frequencies.values() if np.any(f > 0)]
    for label, f in frequencies.items():
        f = np.asarray(f, dtype=np.float64)
        unused = int((f == 0).sum())
        name = f"{label} ({unused} of {f.size} dims unused)" if unused else str(label)
        fig.add_trace(go.Scatter(x=np.arange(1, f.size + 1), y=np.where(f > 0, f, np.nan), mode="lines", name=name,
                                 hovertemplate="dimension %{x}: %{y:.2%} of items<extra>" + str(label) + "</extra>"))
    fig.add_hline(y=1 / chunk_size, line_dash="dash", line_color="black",
                  annotation_text=f"balanced: 1/L = {1 / chunk_size:.2%}", annotation_position="top right")
    low = min(positive + [1 / chunk_size]) / 1.5
    fig.update_xaxes(title_text="dimension, most used first")
    fig.update_yaxes(title_text="share of items", type="log", tickformat=".1%", range=[np.log10(low), 0.0])
    return _style(fig, title, height)


def recall_vs_postings(rows: pd.DataFrame, *, k: int = 10, m: int = 100, y: str = "recall", split: str = "test",
                       title: str | None = None, height: int | None = 420) -> go.Figure:
    """Recall against posting-list entries touched per query, one trace per method (CCSA models, faiss over
    nprobe); the methods re-rank their shortlist R exactly, so postings are the work that differs.

    Parameters
    ----------
    rows : DataFrame
        Rows of :func:`xenbench.methods.ccsa.balance_sweep` and :func:`xenbench.methods.ccsa.faiss_baselines` (``method``,
        ``postings``, ``scored``, ``recall``/``gold_recall``, ``split``; ``reg``/``batch_size`` or ``nprobe`` label points).
    y : str
        ``"recall"`` (Top-k-Recall@m against the exact DE) or ``"gold_recall"`` (Recall@k against the labels).
    """
    rows = rows[rows["split"] == split]
    fig = go.Figure()
    for method, part in rows.groupby("method", sort=False):
        if "nprobe" in part and part["nprobe"].notna().any():
            text = [f"w = {int(w)}" for w in part["nprobe"]]
        else:
            text = [f"λ = {r:g}, B = {int(b)}" for r, b in zip(part["reg"], part["batch_size"])]
        text = [f"{t}, {s:.0f} re-ranked" for t, s in zip(text, part["scored"])]
        fig.add_trace(go.Scatter(x=part["postings"], y=part[y], mode="lines+markers" if method != "CCSA" else "markers",
                                 text=text, name=str(method), hovertemplate="%{text}<br>%{x:.0f} postings, %{y:.3f}"))
    fig.update_xaxes(title_text="posting-list entries touched per query", type="log")
    label = f"Top-{k}-Recall@{m} (exact DE)" if y == "recall" else f"Recall@{k} (gold labels)"
    fig.update_yaxes(title_text=label, range=[0, 1.02])
    return _style(fig, title or f"{label} vs work ({split} queries)", height)


def loss_curve_lines(curves: Mapping[str, pd.DataFrame], *, window: int, y: str = "loss",
                     title: str | None = "Training loss per step", height: int | None = 420) -> go.Figure:
    """The loss per optimizer step (faint) and its mean over the last ``window`` steps (solid: what the stopping
    rule of :class:`xenbench.methods.ccsa.CompositeCodeAE` compares), one colour per model, log y axis.

    Parameters
    ----------
    curves : mapping
        Label -> :attr:`xenbench.methods.ccsa.CompositeCodeAE.curve_` (columns ``step`` and ``y``).
    window : int
        Steps of the trailing mean.
    """
    fig = go.Figure()
    for label, curve in curves.items():
        curve = pd.DataFrame(curve)
        color = method_color(str(label))
        fig.add_trace(go.Scatter(x=curve["step"], y=curve[y], mode="lines", name=f"{label}, per step",
                                 line={"color": color, "width": 1}, opacity=0.3, legendgroup=str(label),
                                 showlegend=False, hovertemplate="step %{x}: %{y:.4g}<extra>" + str(label) + "</extra>"))
        fig.add_trace(go.Scatter(x=curve["step"], y=curve[y].rolling(window, min_periods=window).mean(),
                                 mode="lines", name=str(label), line={"color": color}, legendgroup=str(label),
                                 hovertemplate=f"step %{{x}}: mean of the last {window} %{{y:.4g}}<extra>{label}</extra>"))
    fig.update_xaxes(title_text="optimizer step")
    fig.update_yaxes(title_text=y, type="log")
    return _style(fig, title, height)


def lambda_curve_lines(rows: pd.DataFrame, *, y: str = "recall", split: str = "test", by: str = "objective",
                       title: str | None = None, height: int | None = 420) -> go.Figure:
    """The λ curve: the index's imbalance (left) and ``y`` (right) against λ, one line per ``by`` value, with the
    95% interval across seeds as error bars ([CCSA] Fig. 2's question: does balance, and recall, improve with λ?).

    Parameters
    ----------
    rows : DataFrame
        :func:`xenbench.methods.ccsa.over_seeds` output with ``reg``, ``split``, ``by``, ``imbalance``, ``y`` and
        their ``_lo``/``_hi`` columns. λ is a category axis (so λ = 0 shows), in increasing order.
    """
    rows = rows[rows["split"] == split].sort_values("reg")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("imbalance (1 = balanced)", y))
    for col, metric in enumerate(("imbalance", y), start=1):
        for name, part in rows.groupby(by, sort=False):
            err = {}
            if f"{metric}_hi" in part and part[f"{metric}_hi"].notna().any():
                err = {"error_y": {"type": "data", "array": part[f"{metric}_hi"] - part[metric],
                                   "arrayminus": part[metric] - part[f"{metric}_lo"]}}
            fig.add_trace(go.Scatter(x=[f"{r:g}" for r in part["reg"]], y=part[metric], mode="lines+markers",
                                     name=str(name), legendgroup=str(name), showlegend=col == 1,
                                     line={"color": method_color(str(name))}, **err,
                                     hovertemplate="λ = %{x}: %{y:.3f}<extra>" + str(name) + "</extra>"), 1, col)
    fig.update_xaxes(title_text="λ", type="category",
                     categoryorder="array", categoryarray=[f"{r:g}" for r in sorted(rows["reg"].unique())])
    return _style(fig, title or f"Balance and {y} against λ ({split} queries)", height)
