"""Findings of notebook 00 (data and first-stage baselines)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from xenbench.studies.findings import register
from xenbench.studies.findings._words import points, versus


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else float("nan")


def first_stage_label_lines(results: Mapping[str, Any]) -> list[str]:
    """The label measures of each first stage, mean over the evaluated datasets, best first by nDCG@10 (results
    saved before notebook 00 reported them have none: no line)."""
    labels = pd.DataFrame(results.get("label_metrics") or [])
    if labels.empty:
        return []
    means = labels.groupby(["retriever", "measure"])["value"].mean().unstack()[list(dict.fromkeys(labels["measure"]))]
    order = means.sort_values("nDCG@10", ascending=False).index if "nDCG@10" in means else means.index
    n_sets = labels["dataset"].nunique()
    return [f"Against the labels (ir-measures, mean over {n_sets} dataset(s)): " + "; ".join(
        f"{r} " + ", ".join(f"{m.replace('RR@', 'MRR@')} {means.loc[r, m]:.3f}" for m in means.columns)
        for r in order) + "."]


@register("00_data")
def findings(results: Mapping[str, Any]) -> list[str]:
    """Mean accuracy@1/@k per retriever, DE vs TF-IDF per dataset (binomial SE), the label measures of each first
    stage, the inspected domain."""
    acc = pd.DataFrame(results["baselines"])
    k = int(acc["k"].max())
    n_sets = acc["dataset"].nunique()
    out = []
    means = acc.groupby(["retriever", "k"])["accuracy"].mean().unstack()
    out.append("Mean over {} dataset(s): ".format(n_sets) + "; ".join(
        f"{r} accuracy@1 {row[1]:.3f}, accuracy@{k} {row[k]:.3f}" for r, row in means.iterrows()) + ".")
    retrievers = list(means.index)
    if {"DE", "TF-IDF"} <= set(retrievers):
        for cut in (1, k):
            wide = acc[acc["k"] == cut].pivot_table(index=["dataset", "n_queries"], columns="retriever", values="accuracy")
            verdicts = []
            for (name, n), row in wide.iterrows():
                se = math.hypot(_se(row["DE"], int(n)), _se(row["TF-IDF"], int(n)))
                verdicts.append(versus(row["DE"] - row["TF-IDF"], se))
            diff = (wide["DE"] - wide["TF-IDF"]).mean()
            out.append(f"DE vs TF-IDF at accuracy@{cut}: DE higher on {verdicts.count('higher')}, lower on "
                       f"{verdicts.count('lower')}, level (within 2 binomial SE) on "
                       f"{verdicts.count('level (within noise)')} of {len(verdicts)} dataset(s); mean difference "
                       f"{points(diff)} points.")
        best = means[k].max()
        out.append(f"No re-ranker of the best retriever's top {k} can exceed accuracy {best:.3f} on average: "
                   f"{1 - best:.1%} of queries have their gold item outside those candidates.")
    out += first_stage_label_lines(results)
    dom = results.get("domain")
    if dom:
        share = dom.get("unambiguous_share")
        out.append(f"{dom['name']}: {dom['items']:,} items, {dom['queries']:,} queries; "
                   + (f"{share:.1%} of mentions are shared by one item only." if share is not None else
                      "no query marks a mention span, so mention ambiguity does not apply."))
    return out
