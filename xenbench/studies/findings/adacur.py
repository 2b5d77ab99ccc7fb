"""Findings of notebook 03 (ADACUR vs ANNCUR and re-ranking at equal CE budget, [ADACUR] Fig. 2).

Every statement is computed from the notebook's saved results:

* ``protocol``: how many query splits and anchor seeds, dev and test sizes;
* ``comparisons``: the pre-declared paired comparisons of :func:`xenbench.studies.experiments.paired_comparisons`
  (test rows, k_i chosen on dev rows): a pair "beats" / "trails" its baseline at a (budget, k) only where
  that function's verdict says so (paired t and Wilcoxon p, Holm-adjusted over every declared cell, < α and
  the interval across (seed, split) runs excludes 0), else it is "within noise";
* ``summary``: test recall per (method, budget, k), mean over runs with its interval across runs;
* ``seed_spread``: the range of a method's test recall over anchor seeds within one split.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from xenbench.errors import ParameterError
from xenbench.studies.findings import register


def _frame(results: Mapping[str, Any], key: str, columns: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(results.get(key) or [])
    if df.empty or not set(columns) <= set(df.columns):
        raise ParameterError(f"results[{key!r}]", f"records with columns {columns}",
                             sorted(df.columns) if not df.empty else "nothing", "findings 03_adacur_rounds")
    return df


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _cells(d: pd.DataFrame) -> str:
    return "; ".join(f"B_CE = {int(r.budget)}, k = {int(r.k)}: {_pts(r.mean)} points "
                     f"(95% CI {_pts(r.lo)} to {_pts(r.hi)}, Holm-adjusted p = {r.p_holm:.2g})" for r in d.itertuples())


def describe_pair(d: pd.DataFrame) -> str:
    """One line for one pre-declared pair: where it beats, trails, or is within noise of its baseline."""
    challenger, baseline = d["challenger"].iloc[0], d["baseline"].iloc[0]
    beats, trails = d[d["verdict"] == "beats"], d[d["verdict"] == "trails"]
    level = d[~d["verdict"].isin(["beats", "trails"])]
    text = f"**{challenger} vs {baseline}** (paired over test queries, {len(d)} (budget, k) cells): "
    parts = []
    if len(beats):
        parts.append(f"beats it at {len(beats)} ({_cells(beats)})")
    if len(trails):
        parts.append(f"trails it at {len(trails)} ({_cells(trails)})")
    if len(level):
        where = ", ".join(f"B_CE = {int(b)}/k = {int(k)} ({_pts(m)})" for b, k, m in
                          zip(level["budget"], level["k"], level["mean"]))
        parts.append(f"within noise at {len(level)} ({where})")
    return text + "; ".join(parts) + "."


@register("03_adacur_rounds")
def findings(results: Mapping[str, Any]) -> list[str]:
    """Markdown lines (without the leading ``* ``) stating notebook 03's conclusions."""
    proto = results.get("protocol") or {}
    need = ["n_splits", "n_anchor_seeds", "n_dev_queries", "n_test_queries", "n_items", "ce"]
    if not set(need) <= set(proto):
        raise ParameterError("results['protocol']", f"a mapping with keys {need}", sorted(proto),
                             "findings 03_adacur_rounds")
    comp = _frame(results, "comparisons", ["challenger", "baseline", "budget", "k", "mean", "lo", "hi", "p",
                                           "p_holm", "verdict"])
    summary = _frame(results, "summary", ["method", "budget", "k", "mean", "lo", "hi", "n_runs"])
    n_runs = int(summary["n_runs"].max())
    lines = [f"Protocol ({proto['ce']}, {proto['n_items']} items): {n_runs} runs = {proto['n_splits']} query splits × "
             f"{proto['n_anchor_seeds']} anchor seeds; ANNCUR's and ANNCUR DE's split k_i is chosen on "
             f"{proto['n_dev_queries']} dev queries per split and reported on {proto['n_test_queries']} test queries; "
             "intervals are 95% intervals (across runs for recall, over queries for paired differences); "
             f"paired p-values are Holm-adjusted over the {len(comp)} declared (pair, budget, k) cells."]
    for _, d in comp.groupby(["challenger", "baseline"], sort=False):
        lines.append(describe_pair(d.sort_values(["budget", "k"])))
    spread = pd.DataFrame(results.get("seed_spread") or [])
    if not spread.empty:
        spread = spread.assign(width=spread["max"] - spread["min"])
        top = spread.loc[spread["width"].idxmax()]
        lines.append(f"Anchor-seed variance alone: the widest range over seeds within one split is {top['method']} "
                     f"Top-{int(top['k'])} at B_CE = {int(top['budget'])}, from {top['min']:.3f} to {top['max']:.3f} "
                     f"(split {int(top['split_seed'])}); a single-seed result can sit anywhere in such a range.")
    gap = pd.DataFrame(results.get("budget_rules") or [])
    if not gap.empty:  # runs that also ran ANNCUR under the authors' budget rule
        lines.append("ANNCUR's budget rule: re-ranking the anchors for free and spending every slot on other items "
                     "(ADACUR §2.2, footnote 1; xenbench's default) instead of re-ranking the top B_CE − k_i items by "
                     "ŝ over all items, where anchors take slots (the ANNCUR authors' code), changes test recall at "
                     "the same split, seed and k_i by " + "; ".join(
                         f"Top-{int(r.k)} at B_CE = {int(r.budget)}: {100 * r.mean:+.2f} points on average "
                         f"({r.recall_free_anchors:.3f} vs {r.recall_authors_code:.3f}; from {100 * r.min:+.2f} to "
                         f"{100 * r.max:+.2f} over {int(r.cells)} split × seed × k_i cells)"
                         for r in gap.sort_values(["budget", "k"]).itertuples()) + ".")
    ann = summary[(summary["method"] == "ANNCUR") & (summary["k"] == summary["k"].min())]
    for r in ann.itertuples():
        lines.append(f"ANNCUR (dev-chosen k_i) Top-{int(r.k)}-Recall at B_CE = {int(r.budget)}: {r.mean:.3f} "
                     f"(95% interval across runs {r.lo:.3f} to {r.hi:.3f}).")
    return lines
