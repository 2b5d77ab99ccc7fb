"""Findings of notebook 05 (PEFA: λ tuned on dev, gains over the DE on seen and unseen golds per split regime).

Every verdict is the one rule :func:`xenbench.studies.protocol.verdict`, applied here by
:func:`xenbench.studies.protocol.decide` to the saved family ``comparisons`` (:func:`xenbench.methods.pefa.paired_comparisons`:
one row per (regime, method, k, subset) test): the per-query paired tests Holm-adjusted over the family, and the 95%
t-interval of the mean gain across the independent splits (one run per split seed).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from xenbench.studies.protocol import ALPHA, decide
from xenbench.studies.findings import register
from xenbench.studies.findings._words import points, verdict_rule

_WORDS = {"beats": "beats", "loses": "loses to", "level": "is level with"}
_LABELS = {"all": "overall", "seen": "on seen golds", "unseen": "on unseen golds"}


def _verdict(row: pd.Series) -> str:
    """"beats" / "loses to" / "is level with" the DE by the rule, with the mean gain over splits, its 95% t-interval
    across splits and the Holm-adjusted per-query p-value (t-test)."""
    if row["n_a_better"] == 0 and row["n_b_better"] == 0:
        return "gives every query the DE's recall (+0.0)"
    return (f"{_WORDS[row['verdict']]} the DE ({points(row['run_mean'])} [{points(row['run_lo'])}, "
            f"{points(row['run_hi'])}], p_Holm {row['p_holm']:.2g})")


def _family(results: Mapping[str, Any]) -> pd.DataFrame:
    empty = pd.DataFrame(columns=["split", "method", "k", "subset", "same_as_all", "p", "p_wilcoxon", "run_mean",
                                  "run_lo", "run_hi", "n_a_better", "n_b_better"])
    comp = pd.DataFrame(results["comparisons"]) if results["comparisons"] else empty
    comp = comp.drop(columns=[c for c in ("p_holm", "p_wilcoxon_holm", "verdict") if c in comp])
    return decide(comp, alpha=ALPHA)  # the rule over the saved family, whatever the file's own verdicts say


@register("05_pefa_lambda")
def findings(results: Mapping[str, Any]) -> list[str]:
    """The verdict rule with this run's family, then per split regime and method: the test seen share and, overall /
    on seen / on unseen golds, whether the dev-tuned PEFA beats the DE at each Recall@k."""
    summary = pd.DataFrame(results["summary"])
    coverage = pd.DataFrame(results["coverage"])
    regimes = list(dict.fromkeys(summary["split"]))
    n_splits = int(coverage.groupby("split")["seed"].nunique().max())
    if "comparisons" not in results:
        out = [f"No verdicts: this results file holds no per-query comparisons (it was saved before the one verdict "
               f"rule, `xenbench.studies.protocol.verdict`); re-run 05 for them. Gains below are means over "
               f"{n_splits} split seeds [min, max over seeds]."]
        comp = None
    else:
        comp = _family(results)
        out = [verdict_rule(len(comp), "(split regime, method, k, subset of test queries) tests", ALPHA,
                            "the randomness of the query split"),
               f"Each gain is in Recall points, PEFA minus the DE at its dev-tuned setting: the mean over the "
               f"{n_splits} split seeds of the mean per-query gain, with its 95% t-interval across those independent "
               f"splits in brackets and the Holm-adjusted per-query paired t-test p-value (p_Holm)."]
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
            for subset, label in _LABELS.items():
                rows = part[(part["method"] == method) & (part["subset"] == subset)].sort_values("k")
                if rows.empty:
                    clauses.append(f"{label}: no test queries")
                    continue
                if comp is None:
                    clauses.append(f"{label} " + "; ".join(
                        f"Recall@{int(r['k'])} gain {points(r['gain'])} [{points(r['gain_min'])}, {points(r['gain_max'])}]"
                        for _, r in rows.iterrows()))
                    continue
                cells = comp[(comp["split"] == regime) & (comp["method"] == method) & (comp["subset"] == subset)]
                same = comp[(comp["split"] == regime) & (comp["method"] == method)]["same_as_all"]
                if cells.empty:
                    clauses.append(f"{label}: every test query, as overall" if any(subset in str(x) for x in same)
                                   else f"{label}: fewer than 2 test queries, no test")
                    continue
                clauses.append(f"{label} " + "; ".join(f"Recall@{int(r['k'])} {_verdict(r)}"
                                                       for _, r in cells.sort_values("k").iterrows()))
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
                       f"{method}'s " + ", ".join(parts) + " (means over seeds, descriptive).")
    return out
