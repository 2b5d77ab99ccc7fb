"""Plot builders: pure functions from arrays/DataFrames to plotly ``Figure`` objects.

No I/O and no computation beyond reshaping: the numbers come from :mod:`xenbench.studies.stats`,
:mod:`xenbench.models.linking`, :mod:`xenbench.metrics`. Notebooks display the figures (after
:func:`xenbench.harness.setup_plotly`, so HTML reports keep them); widgets may update them.

Every builder takes keyword-only styling (``title``, ``height``) and returns a new figure.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from xenbench.viz.plots._style import TEMPLATE, _style

__all__ = [
    "TEMPLATE",
    "domain_sizes",
    "length_histograms",
    "ambiguity_histogram",
    "accuracy_bars",
]


def domain_sizes(
    table: pd.DataFrame,
    *,
    title: str | None = "Items and queries per domain (held-out domains hatched and in bold)",
    height: int | None = 450,
    log_y: bool = True,
) -> go.Figure:
    """Grouped bars of items and queries per domain; held-out (``role == "test"``) domains hatched and bold.

    Parameters
    ----------
    table : DataFrame
        Columns ``domain``, ``role``, ``items``, ``queries``
        (:func:`xenbench.data.wordnet.list_domains`).
    log_y : bool
        Log scale: domain sizes span two orders of magnitude.
    """
    held_out = (table["role"] == "test").to_numpy()
    pattern = np.where(held_out, "/", "").tolist()
    fig = go.Figure([
        go.Bar(name=what, x=table["domain"], y=table[what], marker_pattern_shape=pattern,
               customdata=table["role"], hovertemplate="%{x} (%{customdata}): %{y} " + what + "<extra></extra>")
        for what in ("items", "queries")
    ])
    ticks = [f"<b>{d}</b>" if h else d for d, h in zip(table["domain"], held_out)]
    fig.update_layout(barmode="group", yaxis_type="log" if log_y else "linear", yaxis_title="count")
    fig.update_xaxes(tickangle=-60, tickmode="array", tickvals=list(table["domain"]), ticktext=ticks)
    return _style(fig, title, height)


def length_histograms(
    lengths: Mapping[str, Sequence[int] | np.ndarray],
    *,
    unit: str = "tokens",
    title: str | None = None,
    height: int | None = 400,
    nbins: int | None = None,
) -> go.Figure:
    """Overlaid histograms of text lengths, one per named group (e.g. ``{"queries": ..., "items": ...}``).

    Bars show the percentage of each group's texts, so groups of different sizes compare directly.
    """
    fig = go.Figure()
    for name, values in lengths.items():
        values = np.asarray(values)
        fig.add_histogram(x=values, name=f"{name} (median {np.median(values):.0f})" if len(values) else name,
                          histnorm="percent", opacity=0.6, nbinsx=nbins)
    fig.update_layout(barmode="overlay", xaxis_title=f"length ({unit})", yaxis_title="% of texts")
    return _style(fig, title if title is not None else f"Text lengths in {unit}", height)


def ambiguity_histogram(
    counts: Sequence[int] | np.ndarray,
    *,
    title: str | None = "Mention ambiguity",
    height: int | None = 400,
) -> go.Figure:
    """Bar chart of how many queries have 1, 2, 3, ... items sharing their mention (0s are left out).

    Parameters
    ----------
    counts : array of shape (nq,)
        :func:`xenbench.studies.stats.mention_ambiguity`.
    """
    counts = np.asarray(counts, dtype=np.int64)
    counts = counts[counts > 0]
    values, freq = np.unique(counts, return_counts=True)
    share = freq / max(len(counts), 1)
    fig = go.Figure(go.Bar(x=values, y=freq, customdata=share,
                           hovertemplate="%{x} items: %{y} queries (%{customdata:.1%})<extra></extra>"))
    fig.update_layout(xaxis_title="items sharing the mention's lemma (gold included)", yaxis_title="queries",
                      xaxis=dict(tickmode="linear", dtick=1) if len(values) and values.max() <= 20 else {})
    return _style(fig, title, height)


def accuracy_bars(
    accuracy: pd.DataFrame,
    *,
    x: str = "dataset",
    title: str | None = "Accuracy@k of the baselines",
    height: int | None = 420,
) -> go.Figure:
    """Grouped bars of accuracy per dataset and method, one panel per cutoff ``k``.

    Parameters
    ----------
    accuracy : DataFrame
        Long format with columns ``x`` (default ``dataset``), ``retriever``, ``k``, ``accuracy``
        (:func:`xenbench.studies.stats.baseline_accuracy`).
    """
    data = accuracy.assign(cutoff="accuracy@" + accuracy["k"].astype(str))
    fig = px.bar(
        data, x=x, y="accuracy", color="retriever", barmode="group", facet_col="cutoff",
        category_orders={"cutoff": [f"accuracy@{k}" for k in sorted(accuracy["k"].unique())]},
        range_y=[0, 1], text_auto=".2f",
    )
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=")[-1]))
    return _style(fig, title, height)
