"""Shared wording: how a difference with a standard error is put into words."""
from __future__ import annotations

import math


def versus(diff: float, se: float, *, higher: str = "higher", lower: str = "lower", z: float = 2.0) -> str:
    """``"higher"``/``"lower"`` when |diff| > z·se, else ``"level (within noise)"``; NaN se counts as no evidence."""
    if not math.isfinite(diff) or not math.isfinite(se) or abs(diff) <= z * se:
        return "level (within noise)"
    return higher if diff > 0 else lower


def points(x: float) -> str:
    """A difference of two rates in percentage points, signed: ``+3.1``."""
    return f"{100 * x:+.1f}"


def verdict_rule(n_cells: int, family: str, alpha: float, randomness: str) -> str:
    """The one verdict rule (:func:`xenbench.studies.protocol.verdict`) in words, with this run's family.

    ``family`` names what was declared (e.g. "(pair, budget, k) cells"); ``randomness`` what varies between runs
    and so sits in the interval across runs but not in the per-query p-values.
    """
    return (f"Verdict rule (`xenbench.studies.protocol.verdict`): a method *beats* (*loses to*) another only where "
            f"the per-query paired t-test and Wilcoxon signed-rank test, each Holm-adjusted over the notebook's "
            f"family of {n_cells} declared {family}, are both below {alpha:g} *and* the 95% t-interval across "
            f"independent runs of the mean difference lies above (below) 0; elsewhere the two are *level* (no "
            f"difference established). The paired p-values cover the test queries only; {randomness} is in the "
            f"interval across runs, not in the p-values.")


def _query_count(summary) -> str:
    """``", each run on 60 test queries with a relevant item, 4 runs"``: what a label summary's numbers rest on
    (empty for a summary saved before the counts were)."""
    if "n_queries" not in summary or summary["n_queries"].isna().all():
        return ""
    lo, hi = int(summary["n_queries"].min()), int(summary.get("n_queries_max", summary["n_queries"]).max())
    runs = int(summary["n_runs"].max()) if "n_runs" in summary else 0
    queries = f"{lo}" if lo == hi else f"{lo} to {hi}"
    return f"; each run on {queries} test queries with a relevant item" + (f", {runs} runs" if runs else "")


def label_summary_lines(summary, how: str, measures: tuple[str, ...] = ("nDCG@10", "Success@1")) -> list[str]:
    """One line per budget of a label summary (:func:`xenbench.studies.labels.label_summary` or 07's
    ``compare_summary(..., cell="measure")``): each method's mean test value of ``measures``, best nDCG@10 first, with
    the 95% interval across runs of the first measure. ``how`` says how the settings were chosen. MRR is written as
    such (ir-measures calls it ``RR@k``)."""
    import pandas as pd

    summary = pd.DataFrame(summary)
    if summary.empty or "measure" not in summary:
        return []
    out = []
    first = measures[0]
    for budget, g in summary.groupby("budget", sort=True):
        wide = g.pivot_table(index="method", columns="measure", values="mean")
        if first not in wide:
            continue
        lo = g[g["measure"] == first].set_index("method")["lo"]
        hi = g[g["measure"] == first].set_index("method")["hi"]
        cells = []
        for method, row in wide.sort_values(first, ascending=False).iterrows():
            interval = f" [{lo[method]:.3f}, {hi[method]:.3f}]" if math.isfinite(lo.get(method, math.nan)) else ""
            rest = ", ".join(f"{m.replace('RR@', 'MRR@')} {row[m]:.3f}" for m in measures[1:] if m in row)
            cells.append(f"{method} {first} {row[first]:.3f}{interval}" + (f", {rest}" if rest else ""))
        out.append(f"Against the labels at B_CE = {int(budget)} ({how}; means over runs, 95% interval across runs"
                   f"{_query_count(g)}): " + "; ".join(cells) + ".")
    return out
