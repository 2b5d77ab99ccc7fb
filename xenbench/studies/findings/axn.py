"""Findings of notebook 04 (AXN, λ tuned on dev): the pre-declared paired comparisons and the chosen λ,
all computed from the saved results (``summary``, ``comparisons``, ``protocol``)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from xenbench.studies.findings import register
from xenbench.studies.findings._words import points

#: Holm-adjusted p below which a paired difference counts as real.
ALPHA = 0.05


def verdict(mean: float, p_holm: float, alpha: float = ALPHA) -> str:
    """"beats" / "is behind" when the Holm-adjusted paired p-value is below ``alpha``, else "within noise"."""
    if not math.isfinite(p_holm) or p_holm >= alpha or mean == 0:
        return "within noise"
    return "beats" if mean > 0 else "is behind"


def _cell(row: pd.Series) -> str:
    return (f"B_CE = {int(row['budget'])}, k = {int(row['k'])}: {points(row['mean'])} points "
            f"[{points(row['lo'])}, {points(row['hi'])}]")


def _comparison_line(a: str, b: str, g: pd.DataFrame) -> str:
    words = [verdict(float(m), float(p)) for m, p in zip(g["mean"], g["p_holm"])]
    n = len(words)
    counts = {w: words.count(w) for w in ("beats", "is behind", "within noise")}
    head = f"**{a} vs {b}** ({int(g['n'].max())} test queries, paired): "
    if counts["beats"] == n:
        head += f"{a} beats {b} in all {n} (budget, k) cells"
    elif counts["is behind"] == n:
        head += f"{a} is behind {b} in all {n} (budget, k) cells"
    elif counts["within noise"] == n:
        head += f"within noise in all {n} (budget, k) cells"
    else:
        head += (f"{a} beats {b} in {counts['beats']}, is behind in {counts['is behind']} and is within noise in "
                 f"{counts['within noise']} of {n} (budget, k) cells")
    best = g.loc[g["mean"].idxmax()]
    worst = g.loc[g["mean"].idxmin()]
    head += f"; largest difference {_cell(best)}"
    if worst.name != best.name:
        head += f", smallest {_cell(worst)}"
    return head


@register("04_axn_lambda")
def findings(results: Mapping[str, Any]) -> list[str]:
    """The protocol in one line, one line per pre-declared comparison (per-query paired t-test over the pooled
    test queries, Holm-adjusted over all declared cells; difference in recall points with its 95% interval), and
    the λ values chosen on dev per method."""
    proto = results["protocol"]
    out = [f"On **{results['ce']}** ({results['n_items']} items): λ chosen on dev queries; test recall over "
           f"{len(proto['split_seeds'])} query splits × {len(proto['first_round_seeds'])} first-round seeds "
           f"(the DE-first-round methods have no randomness: one run per split). Verdicts: paired t-test per "
           f"query, Holm-adjusted over the {proto['n_declared_cells']} declared cells, p < {ALPHA}."]
    comp = pd.DataFrame(results["comparisons"])
    if not comp.empty:
        for (a, b), g in comp.groupby(["challenger", "baseline"], sort=False):
            out.append(_comparison_line(a, b, g.reset_index(drop=True)))
    summary = pd.DataFrame(results["summary"])
    tuned = summary[summary["method"].str.endswith("tuned λ")]
    for method, g in tuned.groupby("method", sort=True):
        lams = sorted({float(x) for s in g["lams"] for x in str(s).split(", ") if x})
        if lams:
            span = f"{lams[0]:g}" if len(lams) == 1 else f"from {lams[0]:g} to {lams[-1]:g}"
            out.append(f"{method.removesuffix(', tuned λ')}: λ chosen on dev {span} over runs, budgets and k.")
    return out
