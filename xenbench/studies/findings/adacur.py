"""Findings of notebook 03 (ADACUR vs ANNCUR and re-ranking at equal CE budget, [ADACUR] Fig. 2).

Every statement is computed from the notebook's saved results:

* ``protocol``: how many query splits and anchor seeds, dev and test sizes;
* ``comparisons`` and ``runs``: the pre-declared paired comparisons of
  :func:`xenbench.studies.adacur.adacur_paired_comparisons` (test rows, k_i chosen on dev rows) and each run's test
  recall (run records, :class:`xenbench.studies.records.RunRecord`); a pair "beats" / "loses to" its baseline at a (budget, k) only by the one rule
  :func:`xenbench.studies.protocol.verdict`, applied here over the saved family (per-query paired t and Wilcoxon p,
  Holm-adjusted over every declared cell, < α, and the interval across independent runs, recomputed from the
  per-run recalls with a deterministic method counted once per split, excludes 0), else they are "level";
* ``summary``: test recall per (method, budget, k), mean over runs with its interval across runs;
* ``seed_spread``: the range of a method's test recall over anchor seeds within one split;
* ``label_summary`` (results saved since 03 scored ranked lists against the labels): nDCG@10 and Success@1 per method
  and budget, mean over runs with its interval across runs.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from xenbench.errors import ParameterError
from xenbench.studies.protocol import ALPHA, decide, run_interval
from xenbench.studies.adacur import COMPARABLE
from xenbench.studies.findings import register
from xenbench.studies.findings._words import label_summary_lines, verdict_rule


def _frame(results: Mapping[str, Any], key: str, columns: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(results.get(key) or [])
    if df.empty or not set(columns) <= set(df.columns):
        raise ParameterError(f"results[{key!r}]", f"records with columns {columns}",
                             sorted(df.columns) if not df.empty else "nothing", "findings 03_adacur_rounds")
    return df


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _cells(d: pd.DataFrame) -> str:
    return "; ".join(f"B_CE = {int(r.budget)}, k = {int(r.k)}: {_pts(r.mean)} points (per-query 95% CI {_pts(r.lo)} "
                     f"to {_pts(r.hi)}, Holm-adjusted p = {r.p_holm:.2g} (t) and {r.p_wilcoxon_holm:.2g} (Wilcoxon); "
                     f"across runs {_pts(r.run_lo)} to {_pts(r.run_hi)})" for r in d.itertuples())


def describe_pair(d: pd.DataFrame) -> str:
    """One line for one pre-declared pair: where it beats, loses to, or is level with its baseline
    (the ``verdict`` column of :func:`xenbench.studies.protocol.decide`)."""
    challenger, baseline = d["challenger"].iloc[0], d["baseline"].iloc[0]
    beats, loses = d[d["verdict"] == "beats"], d[d["verdict"] == "loses"]
    level = d[d["verdict"] == "level"]
    text = (f"**{challenger} vs {baseline}** ({len(d)} (budget, k) cells; {int(d['n_queries'].max())} test queries, "
            f"{int(d['n_runs'].max())} independent runs): ")
    parts = []
    if len(beats):
        parts.append(f"beats it at {len(beats)} ({_cells(beats)})")
    if len(loses):
        parts.append(f"loses to it at {len(loses)} ({_cells(loses)})")
    if len(level):
        where = ", ".join(f"B_CE = {int(r.budget)}/k = {int(r.k)} ({_pts(r.mean)}; Holm-adjusted p = {r.p_holm:.2g}, "
                          f"across runs {_pts(r.run_lo)} to {_pts(r.run_hi)})" for r in level.itertuples())
        parts.append(f"level at {len(level)} ({where})")
    return text + "; ".join(parts) + "."


#: Labels of the methods that make no random draw given the split (:attr:`xenbench.studies.adacur.Comparable.deterministic`).
DETERMINISTIC = {m.label for m in COMPARABLE.values() if m.deterministic}


def _family(results: Mapping[str, Any]) -> pd.DataFrame:
    """The saved comparisons (the declared family) with the verdict of the one rule recomputed here: the per-query
    p-values as saved, the interval across runs from the saved per-run test recalls (``runs``) with a
    deterministic method's one run per split (the first anchor seed's; results saved before the rule repeated it
    under every anchor seed)."""
    comp = _frame(results, "comparisons", ["challenger", "baseline", "budget", "k", "mean", "lo", "hi", "p",
                                           "p_wilcoxon", "n_queries"])
    per_run = _frame(results, "runs", ["split_seed", "anchor_seed", "method", "budget", "k", "value"])
    first = per_run.groupby("split_seed")["anchor_seed"].transform("min")
    per_run = per_run[~per_run["method"].isin(DETERMINISTIC) | (per_run["anchor_seed"] == first)]
    rows = []
    for r in comp.drop(columns=[c for c in ("run_mean", "run_lo", "run_hi", "n_runs", "p_holm", "p_wilcoxon_holm",
                                            "verdict") if c in comp]).to_dict("records"):
        cell = per_run[(per_run["budget"] == r["budget"]) & (per_run["k"] == r["k"])]
        rows.append(r | run_interval(cell[cell["method"] == r["challenger"]], cell[cell["method"] == r["baseline"]],
                                     split="split_seed", seed="anchor_seed", value="value"))
    return decide(pd.DataFrame(rows), alpha=float((results.get("protocol") or {}).get("alpha", ALPHA)))


@register("03_adacur_rounds")
def findings(results: Mapping[str, Any]) -> list[str]:
    """Markdown lines (without the leading ``* ``) stating notebook 03's conclusions."""
    proto = results.get("protocol") or {}
    need = ["n_splits", "n_anchor_seeds", "n_dev_queries", "n_test_queries", "n_items", "ce"]
    if not set(need) <= set(proto):
        raise ParameterError("results['protocol']", f"a mapping with keys {need}", sorted(proto),
                             "findings 03_adacur_rounds")
    comp = _family(results)
    summary = _frame(results, "summary", ["method", "budget", "k", "mean", "lo", "hi", "n_runs"])
    runs = summary.groupby("method")["n_runs"].max()
    once = sorted(set(summary["method"]) & DETERMINISTIC)
    lines = [f"Protocol ({proto['ce']}, {proto['n_items']} items): {proto['n_splits']} query splits × "
             f"{proto['n_anchor_seeds']} anchor seeds = {int(runs.max())} runs of each method with random draws"
             + (f"; {', '.join(once)} (deterministic given the split) count one run per split" if once else "")
             + f"; ANNCUR's and ANNCUR DE's split k_i is chosen on {proto['n_dev_queries']} dev queries per split and "
             f"reported on {proto['n_test_queries']} test queries; recall intervals are 95% t-intervals across runs.",
             verdict_rule(len(comp), "(pair, budget, k) cells", float(proto.get("alpha", ALPHA)),
                          "the randomness of the anchor draws, first rounds and query splits")]
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
                     f"(95% interval across {int(r.n_runs)} runs {r.lo:.3f} to {r.hi:.3f}).")
    # results saved before 03 scored the ranked lists against the labels have no label_summary: no line
    first = proto.get("first_stage", "de")
    lines += label_summary_lines(results.get("label_summary") or [], "k_i chosen on dev by "
                                 f"{proto.get('label_choice', 'nDCG@10')}; the DE methods start from {first}")
    return lines
