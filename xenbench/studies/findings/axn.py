"""Findings of notebook 04 (AXN, λ tuned on dev): the pre-declared paired comparisons under the one verdict rule,
MF-IND's training budget and the chosen λ, all computed from the saved results (``runs``, ``comparisons``,
``summary``, ``protocol``, ``params``).

The verdicts are recomputed here by :func:`xenbench.studies.protocol.decide` over the saved family of comparisons:
their per-query p-values come from ``comparisons`` and the interval across independent runs from the saved per-run
recalls (``runs``; :func:`xenbench.studies.protocol.run_interval`), so a deterministic method counts one run per
split whatever the file says.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from xenbench.studies.axn import SANITY_CHECKS
from xenbench.studies.protocol import ALPHA, decide, run_interval
from xenbench.studies.findings import register
from xenbench.studies.findings._words import label_summary_lines, points, verdict_rule

#: MF-IND's training budget in the AXN paper (§A.2.2, Table 2): 20 epochs on G with k_d = 100 items per training
#: query (10 epochs only with k_d = 1000 on 10K–50K queries), AdamW lr 0.005 (SciDocs) or 0.001 (Hotpot-QA).
PAPER_MF_EPOCHS, PAPER_MF_ITEMS_PER_QUERY = 20, 100
_WORDS = {"beats": "beats", "loses": "loses to", "level": "is level with"}


def _names(methods: list[str]) -> str:
    """"A", "B" and "C" (method names contain commas)."""
    quoted = [f'"{m}"' for m in methods]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _cell(row: pd.Series) -> str:
    where = f"k = {int(row['k'])}" if "k" in row else str(row["measure"])
    return (f"B_CE = {int(row['budget'])}, {where}: {points(row['mean'])} points "
            f"[{points(row['lo'])}, {points(row['hi'])}], across runs [{points(row['run_lo'])}, {points(row['run_hi'])}]")


def _comparison_line(a: str, b: str, g: pd.DataFrame, cells: str = "(budget, k)") -> str:
    n = len(g)
    counts = {w: int((g["verdict"] == w).sum()) for w in ("beats", "loses", "level")}
    label = "sanity check, not a claim: " if (a, b) in SANITY_CHECKS else ""
    head = (f"**{a} vs {b}** ({label}{int(g['n_queries'].max())} test queries, paired; {int(g['n_runs'].max())} independent "
            f"runs): ")
    whole = [w for w, c in counts.items() if c == n]
    if whole:
        head += f"{a} {_WORDS[whole[0]]} {b} in all {n} {cells} cells"
    else:
        head += (f"{a} beats {b} in {counts['beats']}, loses to it in {counts['loses']} and is level with it in "
                 f"{counts['level']} of {n} {cells} cells")
    best, worst = g.loc[g["mean"].idxmax()], g.loc[g["mean"].idxmin()]
    head += f"; largest difference {_cell(best)}"
    if worst.name != best.name:
        head += f", smallest {_cell(worst)}"
    return head + "."


def _family(results: Mapping[str, Any]) -> pd.DataFrame:
    """The saved comparisons with the interval across runs recomputed from ``runs`` and the verdict by the rule."""
    runs = pd.DataFrame(results["runs"])
    comp = pd.DataFrame(results["comparisons"])
    keep = ["challenger", "baseline", "budget", "k", "mean", "lo", "hi", "p", "p_wilcoxon", "n_queries"]
    rows = []
    for r in comp[keep].to_dict("records"):
        cell = runs[(runs["budget"] == r["budget"]) & (runs["k"] == r["k"])]
        rows.append(r | run_interval(cell[cell["method"] == r["challenger"]], cell[cell["method"] == r["baseline"]],
                                     split="split_seed", seed="anchor_seed", value="value"))
    return decide(pd.DataFrame(rows), alpha=ALPHA)


def label_family(results: Mapping[str, Any]) -> pd.DataFrame:
    """The saved label comparisons (the pairs on Success@1 and nDCG@10, results saved since 04 scored the ranked lists
    against the labels) with the interval across runs recomputed from ``label_runs`` and the verdict by the rule; empty
    for results without them."""
    comp = pd.DataFrame(results.get("label_comparisons") or [])
    runs = pd.DataFrame(results.get("label_runs") or [])
    if comp.empty or runs.empty:
        return pd.DataFrame()
    keep = ["challenger", "baseline", "budget", "measure", "mean", "lo", "hi", "p", "p_wilcoxon", "n_queries"]
    rows = []
    for r in comp[keep].to_dict("records"):
        cell = runs[(runs["budget"] == r["budget"]) & (runs["measure"] == r["measure"])]
        rows.append(r | run_interval(cell[cell["method"] == r["challenger"]], cell[cell["method"] == r["baseline"]],
                                     split="split_seed", seed="anchor_seed", value="value"))
    return decide(pd.DataFrame(rows), alpha=ALPHA)


def _mf_line(results: Mapping[str, Any], runs: pd.DataFrame) -> str | None:
    proto, params = results["protocol"], results.get("params") or {}
    mf = runs[runs["method"].str.contains("MF-IND")]
    if mf.empty:
        return None
    per_run = mf[["split_seed", "anchor_seed"]].drop_duplicates()
    n_splits = per_run["split_seed"].nunique()
    how = ("fitted once per split with a fixed seed, so its intervals do not include its training's randomness"
           if len(per_run) == n_splits else
           f"fitted {len(per_run)} times, once per run (G's items, initialization and pair order follow the run's "
           "seed), so its intervals include its training's randomness")
    lr = f", AdamW lr {params['mf_lr']:g}" if "mf_lr" in params else ""
    return (f"MF-IND's budget: G holds {proto['mf_items_per_query']} random items of each of the "
            f"{results['n_queries']['training']} training queries, {proto['mf_epochs']} epochs{lr}; the AXN paper "
            f"trains MF-IND for {PAPER_MF_EPOCHS} epochs on {PAPER_MF_ITEMS_PER_QUERY} items per training query "
            f"(§A.2.2, Table 2). MF-IND was {how}.")


@register("04_axn_lambda")
def findings(results: Mapping[str, Any]) -> list[str]:
    """The protocol in one line, the verdict rule with this run's family, MF-IND's budget, one line per pre-declared
    comparison (per-query differences in recall points with their 95% interval over queries and across runs; the
    sanity check labelled as such) and the λ values chosen on dev per method."""
    proto = results["protocol"]
    runs = pd.DataFrame(results["runs"])
    n_runs = runs[["method", "split_seed", "anchor_seed"]].drop_duplicates().groupby("method").size()
    # "AXN DE, tuned λ" and "AXN DE, λ = 0" are one method's two settings: name the method once
    once = sorted({m.removesuffix(", tuned λ").removesuffix(", λ = 0") for m in n_runs[n_runs < n_runs.max()].index})
    out = [f"On **{results['ce']}** ({results['n_items']} items): λ chosen on dev queries; test recall over "
           f"{len(proto['split_seeds'])} query splits × {len(proto['first_round_seeds'])} seeds = {int(n_runs.max())} "
           f"runs of each method with random draws (first rounds, MF-IND's training)"
           + (f"; {_names(once)} ran once per split (no draw of their own given the split) and count one run per "
              "split" if once else "") + "."]
    comp = _family(results) if results["comparisons"] else pd.DataFrame()
    out.append(verdict_rule(len(comp), "(pair, budget, k) cells", ALPHA,
                            "the randomness of the first rounds, of MF-IND's training and of the query splits"))
    mf = _mf_line(results, runs)
    if mf:
        out.append(mf)
    if not comp.empty:
        for (a, b), g in comp.groupby(["challenger", "baseline"], sort=False):
            out.append(_comparison_line(a, b, g.reset_index(drop=True)))
    first = proto.get("first_stage", "de")
    out += label_summary_lines(results.get("label_summary") or [], f"λ chosen on dev by {proto.get('label_choice', 'nDCG@10')}; "
                               f"AXN DE and DE re-rank start from {first}")
    labels = label_family(results)
    if not labels.empty:
        measures = ", ".join(dict.fromkeys(labels["measure"]))
        out.append(f"Against the labels, the declared pairs are compared on {measures} under the same verdict rule, "
                   f"Holm-adjusted over their own family of {len(labels)} (pair, budget, measure) cells (differences "
                   "in points of the measure).")
        for (a, b), g in labels.groupby(["challenger", "baseline"], sort=False):
            out.append(_comparison_line(a, b, g.reset_index(drop=True), "(budget, measure)"))
    summary = pd.DataFrame(results["summary"])
    tuned = summary[summary["method"].str.endswith("tuned λ")]
    for method, g in tuned.groupby("method", sort=True):
        lams = sorted({float(x) for s in g["lams"] for x in str(s).split(", ") if x})
        if lams:
            span = f"{lams[0]:g}" if len(lams) == 1 else f"from {lams[0]:g} to {lams[-1]:g}"
            out.append(f"{method.removesuffix(', tuned λ')}: λ chosen on dev {span} over runs, budgets and k.")
    return out
