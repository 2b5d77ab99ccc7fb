"""Findings of notebook 07 (every method side by side): the best method per budget and who is within noise of it, what
a better first stage and a better CE stage each buy over DE re-ranking, and the Pareto front on wall time; all computed
from the saved ``summary``, ``best``, ``protocol`` and ``ce_cost``; and the same in the second currency (nDCG@10
against the labels: ``label_best``, ``label_summary``) where a results file has it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from xenbench.studies.findings import register
from xenbench.studies.findings._words import points

#: The method every gain is measured from: the plain first stage, re-ranked.
BASELINE = "DE re-rank"


def _names(labels: Sequence[str]) -> str:
    return ", ".join(labels) if labels else "none"


def best_line(row: Mapping[str, Any]) -> str:
    """One cell of the best-per-budget table in words."""
    interval = (f" (95% interval across runs {row['best_lo']:.3f} to {row['best_hi']:.3f})"
                if pd.notna(row["best_lo"]) else "")
    cell, value = (f"k = {int(row['k'])}", "recall") if "k" in row else (str(row["measure"]), str(row["measure"]))
    rests = (f" ({int(row['n_queries'])} test queries per run, {int(row['n_runs'])} runs)"
             if pd.notna(row.get("n_queries", float("nan"))) else "")
    text = (f"**B_CE = {int(row['budget'])}, {cell}**: best on dev **{row['best']}**, test {value} "
            f"{row['best_mean']:.3f}{interval}{rests}; within noise of it: {_names(row['within_noise'])}; "
            f"below it: {len(row['below'])} of {int(row['n_methods']) - 1}")
    if row["above"]:
        text += f"; **above it on test**: {_names(row['above'])}"
    return text + "."


def stage_gains(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (budget, k): the best first-stage re-ranking other than the DE's and the best CE-stage method, each as its
    test recall minus DE re-rank's (differences of means across runs, in [−1, 1]); NaN where there is none."""
    out = []
    for (budget, k), g in summary.groupby(["budget", "k"], sort=True):
        base = g[g["method"] == BASELINE]
        if base.empty:
            continue
        b = float(base["mean"].iloc[0])
        row: dict[str, Any] = {"budget": int(budget), "k": int(k), "baseline": b}
        for kind, mask in (("first", g["stage"].str.startswith("first stage") & (g["method"] != BASELINE)),
                           ("ce", g["stage"] == "CE stage")):
            sub = g[mask]
            top = sub.loc[sub["mean"].idxmax()] if not sub.empty else None
            row[f"{kind}_method"] = None if top is None else top["method"]
            row[f"{kind}_gain"] = float("nan") if top is None else float(top["mean"]) - b
        out.append(row)
    return pd.DataFrame(out)


def _stage_line(g: pd.Series) -> str:
    first = ("no other first stage" if g["first_method"] is None
             else f"the best other first stage ({g['first_method']}) {points(g['first_gain'])} points")
    return (f"B_CE = {g['budget']}, k = {g['k']}: over {BASELINE} ({g['baseline']:.3f}), {first}; the best CE stage "
            f"({g['ce_method']}) {points(g['ce_gain'])} points")


def front_line(summary: pd.DataFrame, k: int | str, column: str = "pareto_wall", cell: str = "k") -> str:
    """The Pareto front on wall time at one k (or one label measure, ``cell="measure"``), cheapest first."""
    f = summary[(summary[cell] == k) & summary[column].astype(bool)].sort_values("wall_ms")
    cells = [f"{m} at B_CE = {int(b)} ({w:.0f} ms, {r:.3f})" for m, b, w, r in
             zip(f["method"], f["budget"], f["wall_ms"], f["mean"])]
    where = f"k = {k}" if cell == "k" else f"{k} against the labels"
    return f"Pareto front on wall time per query, {where} (cheapest first): " + "; ".join(cells) + "."


@register("07_compare_methods")
def findings(results: Mapping[str, Any]) -> list[str]:
    """The protocol and the CE's cost in one line; per (budget, k) the best method on dev and its test comparisons; what
    a better first stage and a better CE stage buy over DE re-ranking; the Pareto front on wall time per k."""
    proto, cost = results["protocol"], results["ce_cost"]
    summary = pd.DataFrame(results["summary"])
    best = pd.DataFrame(results["best"])
    ms = 1e3 * float(cost["seconds_per_pair"])
    search = summary.groupby("method")["search_ms"].max()
    out = [f"{summary['method'].nunique()} methods on {proto['ce']} ({proto['n_items']} items, {proto['dataset']}): "
           f"settings and the best method chosen on {proto['n_dev_queries']} dev queries per split; test recall over "
           f"{proto['n_splits']} splits × {proto['n_anchor_seeds']} anchor seeds ({proto['n_test_queries']} test queries "
           f"per split). One CE call costs {ms:.3g} ms ({cost['source']}); the slowest search without CE calls, "
           f"{search.idxmax()}, takes {search.max():.3g} ms per query, so CE calls are "
           f"{'most' if ms * summary['calls'].min() > search.max() else 'not all'} of a query's time at every budget."]
    out += [best_line(row) for row in best.to_dict("records")]
    gains = stage_gains(summary)
    if not gains.empty:
        out.append("What each stage buys (difference of mean test recall): "
                   + "; ".join(_stage_line(g) for _, g in gains.iterrows()) + ".")
    if "pareto_wall" in summary:
        out += [front_line(summary, int(k)) for k in sorted(summary["k"].unique())]
    out += second_currency_lines(results)
    out += outside_lines(results)
    return out


#: The seeds' strongest method of each family, each started from the DE as the outside methods are.
SEED_RIVALS = ("ADACUR DE+TopK No-Split", "AXN DE", "ANNCUR DE")


def outside_lines(results: Mapping[str, Any], rivals: Sequence[str] = SEED_RIVALS) -> list[str]:
    """Where each method from outside the seeds (``protocol["extra_methods"]``: GAR, yours) stands against the seeds'
    DE-started ADACUR, AXN and ANNCUR, per budget, in both currencies: its mean test value minus each rival's across
    the query splits (:func:`xenbench.studies.stats.unit_comparison`: anchor seeds averaged inside a split first;
    95% t interval), with wall time per query beside. Recall at k = 10 (or the largest k a budget has); the label
    choice (nDCG@10) against the labels."""
    from xenbench.studies.stats import unit_comparison

    proto = results.get("protocol") or {}
    extra = [e["label"] for e in proto.get("extra_methods") or []]
    out = []
    for name in extra:
        for runs_key, cell_col, summary_key in (("runs", "k", "summary"), ("label_runs", "measure", "label_summary")):
            runs = pd.DataFrame(results.get(runs_key) or [])
            summary = pd.DataFrame(results.get(summary_key) or [])
            if runs.empty or summary.empty or name not in set(runs["method"]):
                continue
            if cell_col == "k":
                ks = runs.groupby("budget")["k"].agg(set)  # k = 10 where a budget has it, else its largest k
                runs = runs[runs["k"] == runs["budget"].map(lambda b: 10 if 10 in ks[b] else max(ks[b]))]
            else:
                runs = runs[runs["measure"] == proto.get("label_choice", "nDCG@10")]
            cells = []
            for (budget, cell), g in runs.groupby(["budget", cell_col], sort=True):
                wall = summary[(summary["budget"] == budget) & (summary[cell_col] == cell)].set_index("method")["wall_ms"]
                own = g[g["method"] == name]
                vs = []
                for rival in rivals:
                    other = g[g["method"] == rival]
                    if other.empty:
                        continue
                    r = unit_comparison(own, other, unit="split_seed", value="value")
                    vs.append(f"vs {rival} {points(r['mean'])} [{points(r['lo'])}, {points(r['hi'])}] "
                              f"({wall.get(rival, float('nan')):,.0f} ms)")
                where = f"k = {int(cell)}" if cell_col == "k" else str(cell)
                cells.append(f"B_CE = {int(budget)}, {where}: {own['value'].mean():.3f} "
                             f"({wall.get(name, float('nan')):,.0f} ms per query); " + "; ".join(vs))
            if cells:
                n_units = runs["split_seed"].nunique()
                currency = "test recall" if cell_col == "k" else "against the labels"
                out.append(f"**{name}** (from outside the seeds), {currency}: its difference in points from each of the "
                           f"seeds' DE-started methods [95% interval across {n_units} query splits], wall time per "
                           f"query beside: " + " | ".join(cells) + ".")
    return out


def second_currency_lines(results: Mapping[str, Any]) -> list[str]:
    """The second currency (results saved since 07 scored the ranked lists against the labels; none before): the best
    method per budget on nDCG@10 and the Pareto front of nDCG@10 on wall time."""
    best = pd.DataFrame(results.get("label_best") or [])
    summary = pd.DataFrame(results.get("label_summary") or [])
    if best.empty or summary.empty:
        return []
    choice = (results.get("protocol") or {}).get("label_choice", "nDCG@10")
    out = [f"Second currency, against the relevance labels (ir-measures; every setting and the best method chosen on "
           f"dev by {choice}):"]
    out += [best_line(row) for row in best.to_dict("records")]
    if "pareto_wall" in summary:
        out.append(front_line(summary, choice, cell="measure"))
    return out
