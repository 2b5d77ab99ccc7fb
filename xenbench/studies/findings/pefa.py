"""Findings of notebook 05 (PEFA: λ tuned on dev, gains over the DE on seen and unseen golds per split regime)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from xenbench.studies.findings import register
from xenbench.studies.findings._words import points, versus


def _verdict(row: pd.Series) -> str:
    """"beats" / "loses to" / "is level with" the DE: the mean gain over seeds against 2 paired standard errors of
    one split (conservative: the mean over seeds is less noisy), with the gain ± SE in points and the number of seeds
    with a positive gain."""
    if row["gain"] == 0 and row["gain_se"] == 0 and row["gain_min"] == row["gain_max"] == 0:
        return "gives every query the DE's recall (+0.0)"
    word = versus(float(row["gain"]), float(row["gain_se"]), higher="beats", lower="loses to")
    word = "is level with" if word.startswith("level") else word
    seeds = int(row["n_seeds"])
    spread = f", {int(row['seeds_positive'])}/{seeds} seeds > 0" if seeds > 1 else ""
    return f"{word} the DE ({points(row['gain'])} ± {100 * row['gain_se']:.1f}{spread})"


@register("05_pefa_lambda")
def findings(results: Mapping[str, Any]) -> list[str]:
    """Per split regime and method: the test seen share and, overall / on seen / on unseen golds, whether the
    dev-tuned PEFA beats the DE (mean paired gain over seeds vs 2 paired standard errors of one split)."""
    summary = pd.DataFrame(results["summary"])
    coverage = pd.DataFrame(results["coverage"])
    out = []
    regimes = list(dict.fromkeys(summary["split"]))
    for regime in regimes:
        cov = coverage[coverage["split"] == regime]
        seeds = cov["seed"].nunique()
        head = (f"**{regime} split**: {cov['seen_test'].mean():.1%} of test queries have their gold item labelled "
                f"for a training query (seen)")
        if seeds > 1:
            head += f", {cov['seen_test'].min():.1%}–{cov['seen_test'].max():.1%} over {seeds} seeds"
        out.append(head + f"; {cov['test'].mean():.0f} test, {cov['dev'].mean():.0f} dev and "
                   f"{cov['train'].mean():.0f} training queries per seed.")
        part = summary[summary["split"] == regime]
        for method in sorted(part["method"].unique()):
            clauses = []
            for subset, label in (("all", "overall"), ("seen", "on seen golds"), ("unseen", "on unseen golds")):
                rows = part[(part["method"] == method) & (part["subset"] == subset)].sort_values("k")
                if rows.empty:
                    clauses.append(f"{label}: no test queries")
                    continue
                clauses.append(f"{label} " + "; ".join(f"Recall@{int(r['k'])} {_verdict(r)}"
                                                       for _, r in rows.iterrows()))
            out.append(f"{regime} split, {method} at its dev-tuned setting: " + "; ".join(clauses) + ".")
    out.extend(_regime_contrast(summary, coverage, regimes))
    return out


def _regime_contrast(summary: pd.DataFrame, coverage: pd.DataFrame, regimes: list[str]) -> list[str]:
    """Where the gain appears: overall gain of each method at each k, from the regime with the lowest seen share to
    the one with the highest."""
    if len(regimes) < 2:
        return []
    share = coverage.groupby("split")["seen_test"].mean()
    lo, hi = share.idxmin(), share.idxmax()
    if lo == hi:
        return []
    out = []
    overall = summary[summary["subset"] == "all"].set_index(["split", "method", "k"])
    for method in sorted(summary["method"].unique()):
        parts = []
        for k in sorted(summary["k"].unique()):
            if (lo, method, k) not in overall.index or (hi, method, k) not in overall.index:
                continue
            a, b = overall.loc[(lo, method, k)], overall.loc[(hi, method, k)]
            if b["gain"] == a["gain"]:
                parts.append(f"Recall@{int(k)} gain stays at {points(a['gain'])} points")
            else:
                moves = "rises" if b["gain"] > a["gain"] else "falls"
                parts.append(f"Recall@{int(k)} gain {moves} from {points(a['gain'])} to {points(b['gain'])} points")
        if parts:
            out.append(f"From the {lo} split ({share[lo]:.1%} seen) to the {hi} split ({share[hi]:.1%} seen), "
                       f"{method}'s " + ", ".join(parts) + ".")
    return out
