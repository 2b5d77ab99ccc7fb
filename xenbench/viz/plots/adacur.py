"""Figures of ADACUR vs ANNCUR ([ADACUR] Fig. 2, 3, 4, 6/8): pure functions of the outputs of
:mod:`xenbench.studies.adacur`, returning plotly figures (no computation beyond reshaping).

Every figure is self-contained static HTML: the per-round scatter switches rounds with a slider
that toggles trace visibility (no animation frames, so the same figure also works inside a
``go.FigureWidget``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from xenbench.viz.plots._style import METHOD_COLORS, _facet_titles, _style, method_color

__all__ = [
    "latency_vs_rounds_bars",
    "recall_vs_budget_lines",
    "recall_vs_rounds_lines",
    "round_scatter",
]

_DASHED = {"DE re-rank", "TF-IDF re-rank", "ANNCUR", "ANNCUR DE"}
_STEP_COLORS = {"CE calls": "#4c72b0", "pinv": "#dd8452", "matmul": "#55a868", "sampling": "#c44e52"}
# Bands of approximate rank (Fig. 6: "colour bands indicate ordering of items wrt approximate scores").
_BAND_COLORS = ["#e6550d", "#fd8d3c", "#fdd0a2", "#d9d9d9"]
_ANCHOR_OLD, _ANCHOR_NEW = "#6baed6", "#08519c"


def _ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of every item by score (descending; ties to the lower index, as in xenbench.metrics)."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(scores.size, dtype=np.int64)
    ranks[order] = np.arange(1, scores.size + 1)
    return ranks


def _band_labels(edges: Sequence[int], n_items: int) -> list[tuple[int, int, str]]:
    bounds, lo = [], 1
    for e in sorted(e for e in edges if e < n_items):
        bounds.append((lo, e, f"ŝ rank {lo}–{e}"))
        lo = e + 1
    bounds.append((lo, n_items, f"ŝ rank {lo}–{n_items}" if lo > 1 else "all items"))
    return bounds


def round_scatter(trace: Any, *, bands: Sequence[int] = (10, 100, 1000), item_labels: Sequence[str] | None = None,
                  title: str | None = None, height: int | None = 560, marker_size: int = 5,
                  y_title: str = "approximate score ŝ (CUR)", diagonal: bool = True) -> go.Figure:
    """Exact (x) vs approximate (y) scores of all items for one query, one slider step per round (Fig. 6/8).

    Items are coloured by bands of their approximate rank (``bands`` are the upper ranks of the
    bands), anchor items are blue (dark: chosen in this round), the exact top-1 / top-10 / top-100
    items are marked and the top-1 labelled. The dashed diagonal is ŝ = exact.

    Parameters
    ----------
    trace : RoundTrace
        From :func:`xenbench.studies.adacur.adacur_round_trace` (attributes ``exact`` (n_items,), ``approx``
        (n_rounds, n_items), ``anchors`` (list of (k_s,) arrays), ``query_row``, ``budget``,
        ``sampler``).
    bands : sequence of int
        Upper approximate ranks of the colour bands.
    item_labels : sequence of str, optional
        Hover label of every item (e.g. titles).
    title : str, optional
        Default names the query and the configuration; the round is appended per step.
    y_title, diagonal
        What the y values are, and whether they estimate the exact score (then the ŝ = exact diagonal is
        drawn and both axes share a range). AXN's retrieval scores u_qᵀv_i are on another scale: pass
        ``y_title="AXN retrieval score u·v", diagonal=False``.

    Returns
    -------
    Figure
        Starts at the last round; the slider "round" switches rounds.
    """
    exact = np.asarray(trace.exact, dtype=np.float64)
    approx = np.asarray(trace.approx, dtype=np.float64)
    n_rounds, n_items = approx.shape
    exact_rank = _ranks(exact)
    labels = np.asarray(item_labels, dtype=object) if item_labels is not None else np.array(
        [f"item {i}" for i in range(n_items)], dtype=object)
    base_title = title if title is not None else (
        f"Query row {trace.query_row}: exact vs approximate scores (B_CE={trace.budget}, {trace.sampler})")
    top_sets = [(1, "exact top-1", "star", 16), (10, "exact top 2–10", "diamond-open", 10),
                (100, "exact top 11–100", "circle-open", 8)]
    fig = go.Figure()
    per_round: list[int] = []
    steps_layout = []
    band_bounds = _band_labels(bands, n_items)
    warm = _BAND_COLORS[:-1] if len(band_bounds) <= len(_BAND_COLORS) else px.colors.sample_colorscale(
        "Oranges_r", len(band_bounds) - 1, low=0.1, high=0.8)
    band_colors = list(warm[:len(band_bounds) - 1]) + [_BAND_COLORS[-1]]  # the last band (the rest) grey
    lo_x, hi_x = exact.min(), exact.max()
    fig.add_trace(go.Scatter(x=[lo_x, hi_x], y=[lo_x, hi_x], mode="lines", name="ŝ = exact",
                             line=dict(color="black", dash="dash", width=1), hoverinfo="skip", visible=diagonal,
                             showlegend=diagonal))
    for t in range(n_rounds):
        s = approx[t]
        approx_rank = _ranks(s)
        anchors_now = np.asarray(trace.anchors[t], dtype=np.int64)
        anchors_before = np.concatenate([np.asarray(a, dtype=np.int64) for a in trace.anchors[:t]]) if t else \
            np.zeros(0, np.int64)
        is_anchor = np.zeros(n_items, dtype=bool)
        is_anchor[anchors_now] = True
        is_anchor[anchors_before] = True
        custom = np.stack([np.arange(n_items), exact_rank, approx_rank], axis=1)
        hover = ("%{hovertext}<br>exact %{x:.3f} (rank %{customdata[1]})<br>ŝ %{y:.3f} (rank %{customdata[2]})"
                 "<extra>%{fullData.name}</extra>")
        first = len(fig.data)

        def add(mask: np.ndarray, name: str, **marker: Any) -> None:
            idx = np.flatnonzero(mask)
            fig.add_trace(go.Scatter(x=exact[idx], y=s[idx], mode="markers", name=name, hovertext=labels[idx],
                                     customdata=custom[idx], hovertemplate=hover, marker=marker,
                                     legendgroup=name, visible=t == n_rounds - 1))

        for (lo, hi, name), color in zip(band_bounds, band_colors):
            add(~is_anchor & (approx_rank >= lo) & (approx_rank <= hi), name, color=color, size=marker_size)
        if t:
            add(np.isin(np.arange(n_items), anchors_before), "anchors, round 1" if t == 1 else f"anchors, rounds 1–{t}",
                color=_ANCHOR_OLD, size=marker_size + 2)
        add(np.isin(np.arange(n_items), anchors_now), f"anchors, round {t + 1}", color=_ANCHOR_NEW,
            size=marker_size + 2)
        for k, name, symbol, size in top_sets:
            if k > n_items:
                continue
            mask = exact_rank <= k if k == 1 else (exact_rank <= k) & (exact_rank > {10: 1, 100: 10}[k])
            idx = np.flatnonzero(mask)
            fig.add_trace(go.Scatter(
                x=exact[idx], y=s[idx], mode="markers+text" if k == 1 else "markers", name=name,
                text=["top-1"] * idx.size if k == 1 else None, textposition="top left", cliponaxis=False,
                hovertext=labels[idx],
                customdata=custom[idx], hovertemplate=hover,
                marker=dict(symbol=symbol, size=size, color="black", line=dict(width=1.5, color="black")),
                legendgroup=name, visible=t == n_rounds - 1))
        per_round.append(len(fig.data) - first)
        top1 = int(np.argmin(exact_rank))
        n_anchors = int(is_anchor.sum())
        k10 = min(10, n_items)
        top10_anchors = int(is_anchor[exact_rank <= k10].sum())
        pad = 0.05 * (s.max() - s.min() or 1.0)
        steps_layout.append({
            "title.text": f"{base_title}<br><sup>round {t + 1}/{n_rounds}: {n_anchors} anchors; exact top-1 has ŝ rank "
                          f"{approx_rank[top1]}; {top10_anchors} of the exact top-{k10} are anchors</sup>",
            "yaxis.range": [float(min(s.min(), lo_x) - pad), float(max(s.max(), hi_x) + pad)] if diagonal
            else [float(s.min() - pad), float(s.max() + pad)],
        })
    steps, start = [], 1
    for t in range(n_rounds):
        visible = [diagonal] + [False] * (len(fig.data) - 1)
        for j in range(start, start + per_round[t]):
            visible[j] = True
        start += per_round[t]
        steps.append(dict(method="update", label=str(t + 1), args=[{"visible": visible}, steps_layout[t]]))
    fig.update_layout(
        sliders=[dict(active=n_rounds - 1, steps=steps, currentvalue=dict(prefix="round "), pad=dict(t=50))],
        xaxis_title="exact CE score f(q, i)", yaxis_title=y_title,
    )
    _style(fig, None, height)
    fig.update_layout(title_text=steps_layout[-1]["title.text"], yaxis_range=steps_layout[-1]["yaxis.range"])
    return fig


def recall_vs_budget_lines(results: pd.DataFrame, *, title: str | None = "Top-k-Recall at equal CE budget",
                           height: int | None = 420, log_x: bool = True, error_bars: bool = True) -> go.Figure:
    """Top-k-Recall vs CE budget, one line per method, one facet per k ([ADACUR] Fig. 2).

    Parameters
    ----------
    results : DataFrame
        :func:`xenbench.studies.adacur.recall_vs_budget` output (columns ``method``, ``budget``, ``k``,
        ``recall``, ``recall_se``).
    error_bars : bool
        ± one standard error over test queries.
    """
    methods = [m for m in METHOD_COLORS if m in set(results["method"])] + sorted(
        set(results["method"]) - set(METHOD_COLORS))
    fig = px.line(results.sort_values("budget"), x="budget", y="recall", color="method", facet_col="k", markers=True,
                  error_y="recall_se" if error_bars and "recall_se" in results else None, log_x=log_x,
                  category_orders={"method": methods}, color_discrete_map={m: method_color(m) for m in methods})
    se = "recall_se" in results and error_bars
    fig.update_traces(hovertemplate="%{fullData.name}<br>B_CE = %{x}<br>recall %{y:.3f}"
                      + (" ± %{error_y.array:.3f}" if se else "") + "<extra></extra>")
    for tr in fig.data:
        if tr.name in _DASHED:
            tr.line.dash = "dash" if tr.name.startswith("ANNCUR") else "dot"
    budgets = sorted(results["budget"].unique())
    fig.update_xaxes(tickvals=budgets, title_text="CE budget B_CE")
    fig.update_yaxes(range=[0, 1.02], matches="y")
    fig.update_layout(yaxis_title="Top-k-Recall")
    return _style(_facet_titles(fig, "k"), title, height)


def recall_vs_rounds_lines(results: pd.DataFrame, *, title: str | None = "Top-k-Recall of ADACUR vs number of rounds",
                           height: int | None = 400) -> go.Figure:
    """Top-k-Recall vs number of rounds N_r, one line per budget, one facet per k ([ADACUR] Fig. 3).

    Parameters
    ----------
    results : DataFrame
        :func:`xenbench.studies.adacur.recall_vs_rounds` output.
    """
    df = results.sort_values(["budget", "n_rounds"]).assign(budget=lambda d: "B_CE = " + d["budget"].astype(str))
    fig = px.line(df, x="n_rounds", y="recall", color="budget", facet_col="k", markers=True, log_x=True,
                  error_y="recall_se" if "recall_se" in df else None)
    rounds = sorted(results["n_rounds"].unique())
    fig.update_xaxes(tickvals=rounds, title_text="rounds N_r")
    fig.update_yaxes(range=[0, 1.02], matches="y")
    fig.update_layout(yaxis_title="Top-k-Recall")
    return _style(_facet_titles(fig, "k"), title, height)


def latency_vs_rounds_bars(results: pd.DataFrame, *, normalize: bool = False,
                           title: str | None = "Time per query by step vs number of rounds",
                           height: int | None = 420) -> go.Figure:
    """Stacked bars of time per query in CE calls, pinv, matmul and sampling vs N_r, one facet per budget (Fig. 4).

    Parameters
    ----------
    results : DataFrame
        :func:`xenbench.studies.adacur.latency_vs_rounds` output.
    normalize : bool
        Show each step's share of the total instead of milliseconds.
    """
    df = results.assign(ms=results["seconds"] * 1e3, n_rounds=results["n_rounds"].astype(str),
                        budget=results["budget"].map(lambda b: f"B_CE={b}"))
    y = "fraction" if normalize else "ms"
    fig = px.bar(df, x="n_rounds", y=y, color="step", facet_col="budget", color_discrete_map=_STEP_COLORS,
                 category_orders={"step": list(_STEP_COLORS), "n_rounds": [str(r) for r in sorted(results["n_rounds"].unique())]},
                 hover_data={"seconds": ":.2e", "fraction": ":.1%"})
    fig.update_layout(barmode="stack", yaxis_title="share of time per query" if normalize else "ms per query")
    fig.update_xaxes(title_text="rounds N_r", type="category")
    fig.for_each_annotation(lambda a: a.update(text=a.text.replace("budget=", "")))
    return _style(fig, title, height)
