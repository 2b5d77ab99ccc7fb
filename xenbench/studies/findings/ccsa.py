"""Findings of notebook 06 (CCSA: balance and recall vs λ and batch size; CCSA vs faiss at equal bytes and equal
exact re-ranking; binary codes in HNSW).

Every comparison is made within a seed (same query sample, that seed's models and k-means) and the per-seed
differences are averaged: with several seeds a direction word needs the 95% t-interval of the difference across
seeds to exclude 0; with one seed, the difference must exceed two standard errors over test queries.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from xenbench.studies.findings import register
from xenbench.studies.findings._words import versus as _versus
from xenbench.methods.protocol import t_interval

LEVEL = "is level (within noise)"


def _seeded(results: Mapping[str, Any], key: str) -> pd.DataFrame:
    df = pd.DataFrame(results.get(key) or [])
    return df if df.empty or "seed" in df else df.assign(seed=0)  # results saved before seeds existed: one seed


def difference(diffs: np.ndarray, se_one: float, *, higher: str, lower: str) -> tuple[str, str]:
    """(word, interval text) for per-seed differences; one seed falls back to 2 standard errors (``se_one``)."""
    diffs = np.asarray(diffs, dtype=np.float64)
    if diffs.size == 1:
        word = _versus(float(diffs[0]), se_one, higher=higher, lower=lower)
        return (LEVEL if word.startswith("level") else word), ""
    mean, lo, hi = t_interval(diffs, 0.95)
    word = higher if lo > 0 else lower if hi < 0 else LEVEL
    return word, f"; difference {mean:+.3f}, 95% interval across {diffs.size} seeds {lo:+.3f} to {hi:+.3f}"


def _se_diff(a: pd.Series, b: pd.Series, col: str) -> float:
    """Standard error of a difference of two query means (independent-samples bound; conservative for paired)."""
    return float(np.hypot(a[f"{col}_se"], b[f"{col}_se"]))


def _trend(test: pd.DataFrame, by: str, name: str) -> str:
    """Imbalance and both recalls from the smallest to the largest ``by`` (test split), per seed, then averaged."""
    lo_v, hi_v = test[by].min(), test[by].max()
    pairs = [(g[g[by] == lo_v].iloc[0], g[g[by] == hi_v].iloc[0]) for _, g in test.groupby("seed")]
    lo = pd.DataFrame([a for a, _ in pairs]).mean(numeric_only=True)
    hi = pd.DataFrame([b for _, b in pairs]).mean(numeric_only=True)
    n = len(pairs)
    parts = []
    imb_diffs = np.array([b["imbalance"] - a["imbalance"] for a, b in pairs])
    if n == 1:  # no noise estimate for one index: report the direction of the (rounded) values
        a, b = round(float(lo["imbalance"]), 2), round(float(hi["imbalance"]), 2)
        imb, extra = ("falls" if b < a else "rises" if b > a else "stays"), ""
    else:
        imb, extra = difference(imb_diffs, float("nan"), higher="rises", lower="falls")
    parts.append(f"imbalance {imb} ({lo['imbalance']:.2f} → {hi['imbalance']:.2f}{extra})")
    for col, label in (("recall", "Top-k-Recall vs the exact DE"), ("gold_recall", "gold Recall@k")):
        diffs = np.array([b[col] - a[col] for a, b in pairs])
        word, extra = difference(diffs, _se_diff(pairs[0][1], pairs[0][0], col), higher="rises", lower="falls")
        parts.append(f"{label} {word} ({lo[col]:.3f} → {hi[col]:.3f}{extra})")
    # Results written before CCSA took a shortlist re-ranked every item sharing a code, so "scored" was that count.
    col = "sharing" if "sharing" in test else "scored"
    parts.append(f"items sharing a code with the query {lo[col]:.0f} → {hi[col]:.0f}, postings touched "
                 f"{lo['postings']:.0f} → {hi['postings']:.0f}")
    seeds = f"{n} seeds" if n > 1 else "1 seed"
    return f"**{name} {lo_v:g} → {hi_v:g}** (test queries, mean over {seeds}): " + "; ".join(parts) + "."


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def _compare(pairs: list[tuple[pd.Series, pd.Series]]) -> list[str]:
    """Top-k-Recall and gold Recall@k of a (challenger a, baseline b) pair per seed: "beats"/"loses to"/level."""
    out = []
    for col in ("recall", "gold_recall"):
        diffs = np.array([a[col] - b[col] for a, b in pairs])
        word, extra = difference(diffs, _se_diff(*pairs[0], col), higher="beats", lower="loses to")
        a_mean = np.mean([a[col] for a, _ in pairs])
        b_mean = np.mean([b[col] for _, b in pairs])
        out.append(f"{word} ({a_mean:.3f} vs {b_mean:.3f}{extra})")
    return out


@register("06_ccsa_balance")
def findings(results: Mapping[str, Any]) -> list[str]:
    """Trends over λ and B, then CCSA (its dev-best λ per seed) against each faiss method at the nprobe whose
    postings touched are closest to CCSA's (both re-rank their shortlist R; a pair outside 0.5-2× work is flagged), and the binary-code HNSW comparison; every word from test rows."""
    out = []
    by_reg, by_batch = _seeded(results, "by_reg"), _seeded(results, "by_batch")
    out.append(_trend(by_reg[by_reg["split"] == "test"], "reg", "λ"))
    if not by_batch.empty and by_batch["batch_size"].nunique() > 1:
        out.append(_trend(by_batch[by_batch["split"] == "test"], "batch_size", "Batch size B"))
    base = _seeded(results, "baselines")
    chosen, matches = [], {}
    for seed, g in by_reg.groupby("seed"):
        dev = g[g["split"] == "dev"]
        best = float(dev.loc[dev["recall"].idxmax(), "reg"])
        test = g[(g["split"] == "test") & (g["reg"] == best)].iloc[0]
        chosen.append((best, test))
        for method, part in base[(base["seed"] == seed) & (base["split"] == "test")].groupby("method", sort=False):
            matches.setdefault(method, []).append((test, part.iloc[(part["postings"] - test["postings"]).abs().argmin()]))
    lams = sorted({lam for lam, _ in chosen})
    c = pd.DataFrame([t for _, t in chosen]).mean(numeric_only=True)
    clauses = []
    for method, pairs in matches.items():
        b = pd.DataFrame([p[1] for p in pairs]).mean(numeric_only=True)
        words = _compare(pairs)
        widths = sorted({int(p[1]["nprobe"]) for p in pairs})
        unequal = [f"CCSA {what} {r:.3g}× as many" for what, r in
                   (("re-ranks", _ratio(c["scored"], b["scored"])), ("touches", _ratio(c["postings"], b["postings"])))
                   if not 0.5 <= r <= 2.0]
        note = f"; NOT equal work: {', '.join(unequal)}" if unequal else ""
        clauses.append(f"{method} (w = {'/'.join(map(str, widths))}, {b['bytes_per_item']:g} B/item, {b['postings']:.0f} "
                       f"postings, {b['scored']:.0f} re-ranked{note}): Top-k-Recall {words[0]}, gold Recall@k {words[1]}")
    out.append(f"**CCSA (λ chosen on dev per seed: {', '.join(f'{v:g}' for v in lams)}; {c['bytes_per_item']:g} B/item, "
               f"{c['postings']:.0f} postings touched, {c['scored']:.0f} items re-ranked per query) against faiss at the "
               f"nprobe touching the closest number of postings**: " + "; ".join(clauses) + ".")
    hn = _seeded(results, "binary")
    if not hn.empty:
        hn = hn[hn["split"] == "test"]
        pairs = [(g.set_index("method").loc["CCSA-binary+HNSW"], g.set_index("method").loc["PQ+HNSW"])
                 for _, g in hn.groupby("seed")]
        a = pairs[0][0]
        words = _compare(pairs)
        out.append(f"**Binary CCSA codes in HNSW ({a['bytes_per_item']:g} B/item, {int(a['shortlist'])} re-ranked) against "
                   f"HNSW over PQ codes of the same bytes**: Top-k-Recall {words[0]}; gold Recall@k {words[1]}.")
    return out
