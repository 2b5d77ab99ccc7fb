"""Findings of notebook 06 (CCSA: balance and recall vs λ and batch size; CCSA vs faiss at equal bytes and equal
exact re-ranking; binary codes in HNSW)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from xenbench.findings import register
from xenbench.findings._words import versus as _versus


def versus(diff: float, se: float, **words: str) -> str:
    """:func:`xenbench.findings._words.versus`, reading "is level (within noise)" in a sentence."""
    word = _versus(diff, se, **words)
    return "is level (within noise)" if word.startswith("level") else word


def _se_diff(a: pd.Series, b: pd.Series, col: str) -> float:
    """Standard error of a difference of two query means (independent-samples bound; conservative for paired)."""
    return float(np.hypot(a[f"{col}_se"], b[f"{col}_se"]))


def _trend(df: pd.DataFrame, by: str, name: str) -> str:
    """Imbalance and both recalls from the smallest to the largest ``by`` (test split), with direction words."""
    df = df.sort_values(by)
    lo, hi = df.iloc[0], df.iloc[-1]
    a, b = round(float(lo["imbalance"]), 2), round(float(hi["imbalance"]), 2)
    imb = "falls" if b < a else "rises" if b > a else "stays"
    parts = [f"imbalance {imb} ({lo['imbalance']:.2f} → {hi['imbalance']:.2f})"]
    for col, label in (("recall", "Top-k-Recall vs the exact DE"), ("gold_recall", "gold Recall@k")):
        word = versus(hi[col] - lo[col], _se_diff(hi, lo, col), higher="rises", lower="falls")
        parts.append(f"{label} {word} ({lo[col]:.3f} → {hi[col]:.3f})")
    parts.append(f"unique items re-ranked per query {lo['scored']:.0f} → {hi['scored']:.0f}")
    return (f"**{name} {lo[by]:g} → {hi[by]:g}** (test queries): " + "; ".join(parts) + ".")


def _verdicts(a, b) -> tuple[str, str]:
    """How row a compares with row b on Top-k-Recall and on gold Recall@k (2 combined SE)."""
    return tuple(versus(a[col] - b[col], _se_diff(a, b, col), higher="beats", lower="loses to")
                 for col in ("recall", "gold_recall"))  # type: ignore[return-value]


@register("06_ccsa_balance")
def findings(results: Mapping[str, Any]) -> list[str]:
    """Trends over λ and B, then CCSA (its dev-best λ) against each faiss method at the nprobe whose re-ranking work is
    closest to CCSA's, and the binary-code HNSW comparison; every word from test rows and standard errors."""
    out = []
    by_reg = pd.DataFrame(results["by_reg"])
    by_batch = pd.DataFrame(results["by_batch"])
    out.append(_trend(by_reg[by_reg["split"] == "test"], "reg", "λ"))
    if by_batch["batch_size"].nunique() > 1:
        out.append(_trend(by_batch[by_batch["split"] == "test"], "batch_size", "Batch size B"))
    dev = by_reg[by_reg["split"] == "dev"]
    best = float(dev.loc[dev["recall"].idxmax(), "reg"])
    test = by_reg[by_reg["split"] == "test"]
    c = test[test["reg"] == best].iloc[0]
    base = pd.DataFrame(results["baselines"])
    base = base[base["split"] == "test"]
    clauses = []
    for method, part in base.groupby("method", sort=False):
        b = part.iloc[(part["scored"] - c["scored"]).abs().argmin()]
        word, gword = _verdicts(c, b)
        clauses.append(f"{method} (w = {int(b['nprobe'])}, {b['bytes_per_item']:g} B/item, {b['scored']:.0f} re-ranked): "
                       f"Top-k-Recall {word} ({c['recall']:.3f} vs {b['recall']:.3f}), gold Recall@k {gword} "
                       f"({c['gold_recall']:.3f} vs {b['gold_recall']:.3f})")
    out.append(f"**CCSA (λ = {best:g}, chosen on dev; {c['bytes_per_item']:g} B/item, {c['scored']:.0f} unique items "
               f"re-ranked per query) against faiss at the nprobe with the closest work**: " + "; ".join(clauses) + ".")
    if results.get("binary"):
        hn = pd.DataFrame(results["binary"])
        hn = hn[hn["split"] == "test"].set_index("method")
        a, b = hn.loc["CCSA-binary+HNSW"], hn.loc["PQ+HNSW"]
        word, gword = _verdicts(a, b)
        out.append(f"**Binary CCSA codes in HNSW ({a['bytes_per_item']:g} B/item, {int(a['shortlist'])} re-ranked)** "
                   f"Top-k-Recall {word} HNSW over PQ codes ({a['recall']:.3f} vs {b['recall']:.3f}); gold Recall@k "
                   f"{gword} ({a['gold_recall']:.3f} vs {b['gold_recall']:.3f}).")
    return out
