"""Figures say what they show: shared method colours, readable hover labels, scales that fit the data."""
from __future__ import annotations

import numpy as np
import pandas as pd

from xenbench.viz.plots import adacur as adacur_plots
from xenbench.viz.plots import tuning
from xenbench.viz.plots._style import METHOD_COLORS, method_color


def _budget_table(methods: list[str]) -> pd.DataFrame:
    rows = [{"method": m, "budget": b, "k": k, "recall": 0.5, "recall_se": 1 / 30}
            for m in methods for b in (20, 50) for k in (1, 10)]
    return pd.DataFrame(rows)


def test_a_method_keeps_its_colour_across_figures():
    assert method_color("ADACUR TopK") == METHOD_COLORS["ADACUR TopK"]
    assert method_color("AXN DE, MF-IND, tuned λ") == method_color("AXN DE, MF-IND, tuned λ")  # stable
    one = adacur_plots.recall_vs_budget_lines(_budget_table(["AXN, tuned λ", "DE re-rank"]))
    two = adacur_plots.recall_vs_budget_lines(_budget_table(["ANNCUR", "ADACUR TopK", "AXN, tuned λ"]))
    colour = {tr.name: tr.line.color for fig in (one, two) for tr in fig.data}
    assert colour["AXN, tuned λ"] == method_color("AXN, tuned λ")
    assert len({tr.line.color for fig in (one, two) for tr in fig.data if tr.name == "AXN, tuned λ"}) == 1


def test_hover_labels_are_readable():
    fig = adacur_plots.recall_vs_budget_lines(_budget_table(["ANNCUR"]))
    assert fig.data[0].hovertemplate == "%{fullData.name}<br>B_CE = %{x}<br>recall %{y:.3f} ± %{error_y.array:.3f}<extra></extra>"
    sweep = pd.DataFrame([{"method": "AXN", "budget": 20, "lam": lam, "k": 1, "recall": 0.1, "recall_se": 0.033333333,
                           "n_test_queries": 30} for lam in (0.0, 0.5, 1.0)])
    lam_fig = tuning.recall_vs_lambda_lines(sweep)
    assert lam_fig.data[0].name == "AXN, B_CE = 20"
    assert "λ = %{x:.2f}" in lam_fig.data[0].hovertemplate and "± %{error_y.array:.3f}" in lam_fig.data[0].hovertemplate
    assert "lam=" not in lam_fig.data[0].hovertemplate and not lam_fig.data[0].hovertemplate.startswith("=")


class _Trace:
    """A hand-made RoundTrace: 2 rounds over 30 items, scores far from the exact scale."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.exact = rng.normal(size=30) * 5
        self.approx = np.stack([rng.normal(size=30) * 0.01, rng.normal(size=30) * 0.01])
        self.anchors = [np.array([0, 1]), np.array([2, 3])]
        self.query_row, self.budget, self.sampler = 4, 4, "topk"


def test_round_scatter_without_diagonal_fits_the_scores_it_shows():
    t = _Trace()
    cur = adacur_plots.round_scatter(t)
    axn = adacur_plots.round_scatter(t, y_title="AXN retrieval score u·v", diagonal=False)
    assert cur.data[0].name == "ŝ = exact" and cur.data[0].visible
    assert axn.data[0].visible is False and axn.layout.yaxis.title.text == "AXN retrieval score u·v"
    lo, hi = axn.layout.yaxis.range
    assert hi - lo < 1.0 < cur.layout.yaxis.range[1] - cur.layout.yaxis.range[0]  # not squashed by the exact range
    assert all(step.args[0]["visible"][0] is False for step in axn.layout.sliders[0].steps)
    top1 = [tr for tr in axn.data if tr.name == "exact top-1"]
    assert top1 and all(tr.cliponaxis is False for tr in top1)  # the "top-1" label is never cut at the edge


def test_activation_frequency_axis_stays_within_100_percent_and_counts_unused_dimensions():
    from xenbench.viz.plots import activation_frequency_lines

    collapsed = np.array([0.9, 0.1, 0.0, 0.0])  # shares of items per dimension, most used first; 2 unused
    fig = activation_frequency_lines({"λ = 0": collapsed, "λ = 1": np.full(4, 0.25)}, chunk_size=4)
    lo, hi = fig.layout.yaxis.range
    assert fig.layout.yaxis.type == "log" and hi == 0.0  # 10**0 = 100 %: no room above a share of 1
    assert 10**lo < 0.1  # the smallest non-zero share is inside the axis
    assert fig.data[0].name == "λ = 0 (2 of 4 dims unused)" and fig.data[1].name == "λ = 1"
    assert np.isnan(fig.data[0].y[2:]).all() and fig.data[0].y[0] == 0.9  # zeros are gaps, not off-axis points
