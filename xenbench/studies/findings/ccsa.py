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
from xenbench.studies.protocol import t_interval

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


def se_diff(a: pd.Series, b: pd.Series, col: str) -> float:
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
        word, extra = difference(diffs, se_diff(pairs[0][1], pairs[0][0], col), higher="rises", lower="falls")
        parts.append(f"{label} {word} ({lo[col]:.3f} → {hi[col]:.3f}{extra})")
    # Results written before CCSA took a shortlist re-ranked every item sharing a code, so "scored" was that count.
    col = "sharing" if "sharing" in test else "scored"
    parts.append(f"items sharing a code with the query {lo[col]:.0f} → {hi[col]:.0f}, postings touched "
                 f"{lo['postings']:.0f} → {hi['postings']:.0f}")
    seeds = f"{n} seeds" if n > 1 else "1 seed"
    return f"**{name} {lo_v:g} → {hi_v:g}** (test queries, mean over {seeds}): " + "; ".join(parts) + "."


OBJECTIVE_TEXT = {
    "normalized": "xenbench's normalized objective, Σ_d (x − f(x))² + λ · L_UR / sqrt(C (1 − 1/L))",
    "paper": "the paper's literal objective (Eq. 6), per-coordinate MSE + λ · L_UR (raw Eq. 5)",
}


def imbalance_steps(test: pd.DataFrame) -> tuple[list[tuple[float, np.ndarray]], list[tuple[float, float]]]:
    """The imbalance along a λ curve (test rows of one objective), paired within a seed.

    Returns each λ > λ_0 with its per-seed differences from λ_0, and the steps λ_a → λ_b between neighbouring λ > λ_0
    that *rise*: their paired 95% interval across seeds lies above 0, so a wobble within seed noise is not one. One
    seed gives no interval, hence no rise; an index's imbalance has no per-query noise to fall back on.
    """
    regs = sorted(test["reg"].unique())
    by = {reg: test[test["reg"] == reg].set_index("seed")["imbalance"] for reg in regs}

    def diffs(a: float, b: float) -> np.ndarray:
        return (by[b] - by[a].reindex(by[b].index)).dropna().to_numpy(dtype=np.float64)

    rises = [(a, b) for a, b in zip(regs[1:-1], regs[2:])
             if len(d := diffs(a, b)) > 1 and t_interval(d, 0.95)[1] > 0]
    return [(float(reg), diffs(regs[0], reg)) for reg in regs[1:]], [(float(a), float(b)) for a, b in rises]


def _interval(values: np.ndarray, fmt: str) -> str:
    """``m`` with one seed, ``m [lo, hi]`` (95% t-interval across seeds) with several."""
    mean, lo, hi = t_interval(np.asarray(values, dtype=np.float64), 0.95)
    return f"{mean:{fmt}}" if not np.isfinite(lo) else f"{mean:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def lambda_curve(rows: pd.DataFrame, *, objective: str, lr: float | None = None, n_chunks: int | None = None,
                 chunk_size: int | None = None) -> list[str]:
    """The whole λ curve of one objective: per λ, the index's imbalance and code usage, and each recall's
    difference from λ = 0 within a seed (test queries; 95% interval across seeds, or 2 standard errors over test
    queries with one seed), then the λ chosen on dev queries per seed (best dev Top-k-Recall) and its test recall.
    """
    if rows.empty:
        return []
    rows = rows if "objective" in rows else rows.assign(objective="normalized")
    test, dev = rows[rows["split"] == "test"], rows[rows["split"] == "dev"]
    regs = sorted(test["reg"].unique())
    base = regs[0]
    seeds = sorted(test["seed"].unique())
    parts = []
    for reg in regs:
        at = test[test["reg"] == reg].sort_values("seed")
        text = f"λ = {reg:g}: imbalance {_interval(at['imbalance'].to_numpy(), '.2f')}"
        if "code_usage" in at and at["code_usage"].min() < 1:
            text += f", {100 * at['code_usage'].mean():.0f}% of codes used"
        if "sharing" in at:  # the work an imbalanced index adds
            text += f", {at['sharing'].mean():.0f} items sharing a code with a query"
        if reg == base:
            text += (f", Top-k-Recall {_interval(at['recall'].to_numpy(), '.3f')}, gold Recall@k "
                     f"{_interval(at['gold_recall'].to_numpy(), '.3f')}")
        else:
            ref = test[test["reg"] == base].set_index("seed")
            for col, label in (("recall", "Top-k-Recall"), ("gold_recall", "gold Recall@k")):
                pairs = [(a, ref.loc[a["seed"]]) for _, a in at.iterrows()]
                diffs = np.array([a[col] - b[col] for a, b in pairs])
                word, _ = difference(diffs, se_diff(*pairs[0], col), higher="higher", lower="lower")
                word = "level" if word == LEVEL else word
                text += f", {label} {_interval(diffs, '+.3f')} vs λ = {base:g} ({word})"
        parts.append(text)
    means = test.groupby("reg")["imbalance"].mean()
    order = means.loc[regs].to_numpy()
    _, rises = imbalance_steps(test)
    if np.all(np.diff(order) < 0):
        shape = "falls monotonically with λ"
    elif np.all(np.diff(order) > 0):
        shape = "rises monotonically with λ"
    elif len(seeds) == 1:
        shape = f"is not monotone in λ, lowest at λ = {means.idxmin():g} (one seed: no interval)"
    elif rises:
        shape = (f"is lowest at λ = {means.idxmin():g} and rises beyond seed noise from λ "
                 + ", ".join(f"{a:g} → {b:g}" for a, b in rises))
    else:
        shape = f"is lowest at λ = {means.idxmin():g}; its rises between λ > {base:g} are within seed noise"
    chosen = [float(g.loc[g["recall"].idxmax(), "reg"]) for _, g in dev.groupby("seed")]
    picked = pd.DataFrame([test[(test["seed"] == sd) & (test["reg"] == lam)].iloc[0]
                           for sd, lam in zip(sorted(dev["seed"].unique()), chosen)])
    setting = [f"C = {n_chunks}, L = {chunk_size}" if n_chunks and chunk_size else "",
               f"{test['bytes_per_item'].iloc[0]:g} B/item" if "bytes_per_item" in test else "",
               f"B = {int(test['batch_size'].iloc[0])}" if "batch_size" in test else "",
               f"{'/'.join(str(int(v)) for v in sorted(test['steps'].unique()))} steps" if "steps" in test else "",
               f"lr {lr:g}" if lr is not None else ""]
    setting = ", ".join(part for part in setting if part) or "settings of the run"
    n = f"{len(seeds)} seeds, 95% interval across seeds" if len(seeds) > 1 else "1 seed"
    return [f"**The λ curve, {OBJECTIVE_TEXT[objective]}** ({setting}; test queries, mean over {n}; recall "
            f"differences paired within a seed): " + "; ".join(parts) + f". The imbalance {shape}. λ chosen on dev "
            f"queries (best Top-k-Recall per seed): {', '.join(f'{v:g}' for v in chosen)}, with test Top-k-Recall "
            f"{picked['recall'].mean():.3f} and gold Recall@k {picked['gold_recall'].mean():.3f}."]


def collapse(results: Mapping[str, Any]) -> list[str]:
    """Whether the λ = 0 autoencoder, trained until the stopping rule (or its step cap), collapses ([CCSA] §3.1.3:
    "ignore most of the dimensions"; here: fewer than half of the C·L codes used) at each L, and whether Eq. 5's
    batch estimate could see what imbalance is left (:func:`xenbench.methods.ccsa.expected_uniformity_sq`)."""
    table = pd.DataFrame(results.get("collapse") or [])
    if table.empty:
        return []
    first = table.iloc[0]
    rule = (f"stopping rule: the mean loss of the last {int(first['window'])} steps less than {first['tol']:g} "
            f"(relative) below that of the {int(first['window'])} before, at most {int(first['max_steps'])} steps")
    parts, why = [], []
    for _, r in table.iterrows():
        L, B, F = int(r["chunk_size"]), int(r["batch_size"]), float(r["imbalance"])
        stop = (f"stopped by the rule after {int(r['steps'])} steps" if r["converged"] else
                f"still improving at the cap of {int(r['steps'])} steps")
        codes = f"{100 * r['code_usage']:.0f}% of the {int(r['n_chunks']) * L} codes used"
        verdict = ("collapses: it ignores most of its codes" if r["code_usage"] < 0.5 else
                   "is strongly imbalanced though most codes are used" if F >= 2 else "does not collapse")
        parts.append(f"L = {L}: {stop}, imbalance {F:.2f}, {codes}, per-coordinate MSE {r['mse']:.2e}: it {verdict}")
        threshold = float(r["detectable_imbalance"])
        seen = F - 1 > threshold
        why.append(f"at L = {L} a batch of B = {B} drawn from this index has L_UR about "
                   f"{r['expected_uniformity_norm']:.2f}× its noise floor (the λ = 0 model's own training batches: "
                   f"{r['uniformity_norm']:.2f}×); Eq. 5's batch estimate separates imbalance from sampling noise "
                   f"only above F − 1 ≈ (L − 1)/(B − 1) = {threshold:.3f}, so the "
                   + (f"remaining imbalance (F − 1 = {F - 1:.3f}) is visible to the regularizer, which can trim it"
                      if seen else
                      f"remaining imbalance (F − 1 = {F - 1:.3f}) is below what the regularizer can see; it would "
                      f"take B ≳ {int(np.ceil((L - 1) / max(F - 1, 1e-9))) + 1}")
                   + ("" if r["code_usage"] < 0.5 or F >= 2 else ", but there is no collapse for it to prevent"))
    objective = OBJECTIVE_TEXT.get(str(first.get("objective", "normalized")), "")
    return [f"**Does the λ = {first['reg']:g} index collapse when trained to convergence?** (C = {int(first['n_chunks'])}, "
            f"B = {int(first['batch_size'])}, {objective}; {rule}) " + "; ".join(parts) + ". Why the regularizer "
            "can or cannot help: " + "; ".join(why) + "."]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def _compare(pairs: list[tuple[pd.Series, pd.Series]]) -> list[str]:
    """Top-k-Recall and gold Recall@k of a (challenger a, baseline b) pair per seed: "beats"/"loses to"/level."""
    out = []
    for col in ("recall", "gold_recall"):
        diffs = np.array([a[col] - b[col] for a, b in pairs])
        word, extra = difference(diffs, se_diff(*pairs[0], col), higher="beats", lower="loses to")
        a_mean = np.mean([a[col] for a, _ in pairs])
        b_mean = np.mean([b[col] for _, b in pairs])
        out.append(f"{word} ({a_mean:.3f} vs {b_mean:.3f}{extra})")
    return out


@register("06_ccsa_balance")
def findings(results: Mapping[str, Any]) -> list[str]:
    """The λ curve of each objective, the λ = 0 collapse check, the trend over B, then CCSA (its dev-best λ per seed) against each faiss method at the nprobe whose
    postings touched are closest to CCSA's (both re-rank their shortlist R; a pair outside 0.5-2× work is flagged), and the binary-code HNSW comparison; every word from test rows."""
    out = []
    by_reg, by_batch = _seeded(results, "by_reg"), _seeded(results, "by_batch")
    params = results.get("params") or {}
    shape = {"n_chunks": params.get("n_chunks"), "chunk_size": params.get("chunk_size")}
    out += lambda_curve(by_reg, objective="normalized", lr=params.get("lr"), **shape)
    out += lambda_curve(_seeded(results, "paper_objective"), objective="paper", lr=params.get("paper_lr"), **shape)
    out += collapse(results)
    if not by_batch.empty and by_batch["batch_size"].nunique() > 1:
        out.append(_trend(by_batch[by_batch["split"] == "test"], "batch_size",
                          f"Batch size B (normalized objective, λ = {by_batch['reg'].iloc[0]:g})"))
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
    out.append(f"**CCSA (normalized objective, λ chosen on dev per seed: {', '.join(f'{v:g}' for v in lams)}; {c['bytes_per_item']:g} B/item, "
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
