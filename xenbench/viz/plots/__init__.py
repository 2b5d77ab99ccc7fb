"""Plot builders: pure functions of arrays/DataFrames returning plotly ``Figure``s (no I/O).

One submodule per topic; everything public is re-exported here, so notebooks call ``xb.plots.<name>``.
"""
from __future__ import annotations

from xenbench.viz.plots.adacur import latency_vs_rounds_bars, recall_vs_budget_lines, recall_vs_rounds_lines, round_scatter
from xenbench.viz.plots.compare import recall_vs_cost
from xenbench.viz.plots.ccsa import activation_frequency_lines, lambda_curve_lines, loss_curve_lines, recall_vs_postings
from xenbench.viz.plots.data import accuracy_bars, ambiguity_histogram, domain_sizes, length_histograms
from xenbench.viz.plots.pefa import gain_by_seen_share
from xenbench.viz.plots.rank import cur_error_curves, cur_heatmaps, score_skew_histograms, singular_value_spectra
from xenbench.viz.plots.scores import score_distributions
from xenbench.viz.plots.tuning import recall_vs_lambda_lines

__all__ = [
    "accuracy_bars", "activation_frequency_lines", "ambiguity_histogram", "cur_error_curves", "cur_heatmaps",
    "domain_sizes", "gain_by_seen_share", "lambda_curve_lines", "latency_vs_rounds_bars", "length_histograms",
    "loss_curve_lines",
    "recall_vs_budget_lines", "recall_vs_cost", "recall_vs_lambda_lines",
    "recall_vs_rounds_lines", "recall_vs_postings", "round_scatter", "score_distributions", "score_skew_histograms",
    "singular_value_spectra",
]
