"""Findings of notebook 01 (computing score matrices, agreement with the bundled ones, score shape)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xenbench.studies.findings import register


@register("01_score_matrices")
def findings(results: Mapping[str, Any]) -> list[str]:
    """Agreement of fresh scores with the bundled stores, per-query skew of each matrix.

    Throughput is left to the notebook's table and ``make bench``: it depends on the machine and its load, not on
    the science.
    """
    out = []
    agreement = results.get("agreement") or []
    if agreement:
        worst = max(a["max_abs_diff"] for a in agreement)
        n = sum(a["n_pairs"] for a in agreement)
        out.append(f"Fresh scores agree with the bundled matrices on {n:,} shared pairs: max |difference| {worst:.1e}.")
    else:
        out.append("No bundled matrix shares pairs with this run, so agreement was not checked.")
    summary = sorted(results.get("score_summary", []), key=lambda s: -s["median_query_skew"])
    if summary:
        out.append("Per-query skewness of the zero-mean scores (median over queries), most skewed first: " + ", ".join(
            f"{s['matrix']} {s['median_query_skew']:.2f} (top score {s['median_top1_z']:.1f} std above the mean)"
            for s in summary) + ".")
    return out
