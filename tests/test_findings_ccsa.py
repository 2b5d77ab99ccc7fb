"""Notebook 06's generated findings state the whole λ curve of each objective, the λ chosen on dev queries and the
collapse check; the CCSA figures of those results plot what they are given."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from xenbench import findings
from xenbench.studies.findings import ccsa as ccsa_findings
from xenbench.viz import plots

COMMITTED = findings.RESULTS_DIR / "06_ccsa_balance.full.results.json"


def _rows(objective: str, curve: dict[float, tuple[float, float]], seeds=(0, 1, 2)) -> list[dict]:
    """by_reg-like rows: per seed and λ a dev and a test row; λ -> (imbalance, test recall); seed s adds s/100."""
    rows = []
    for seed in seeds:
        for reg, (imb, rec) in curve.items():
            for split in ("dev", "test"):
                rows.append({"method": "CCSA", "objective": objective, "reg": reg, "batch_size": 1000, "steps": 300,
                             "bytes_per_item": 12.0, "imbalance": imb + seed / 100, "code_usage": 1.0,
                             "split": split, "n_queries": 500, "seed": seed,
                             "recall": rec + seed / 100 + (0.05 if split == "dev" and reg == 0.1 else 0.0),
                             "recall_se": 0.01, "gold_recall": rec / 2, "gold_recall_se": 0.01,
                             "postings": 100.0, "scored": 50.0, "sharing": 60.0})
    return rows


def test_lambda_curve_states_every_lambda_its_difference_from_zero_and_the_dev_choice():
    rows = pd.DataFrame(_rows("normalized", {0.0: (1.24, 0.88), 0.1: (1.10, 0.85), 1.0: (1.11, 0.80),
                                             10.0: (1.21, 0.70)}))
    (line,) = ccsa_findings.lambda_curve(rows, objective="normalized", lr=1e-3, n_chunks=16, chunk_size=64)
    assert "xenbench's normalized objective" in line and "C = 16, L = 64, 12 B/item, B = 1000, 300 steps, lr 0.001" in line
    # every λ, not only the end points: imbalance mean over seeds 0, 1, 2 (+0.01 per seed) and its t-interval
    for reg, imb in ((0.0, 1.25), (0.1, 1.11), (1.0, 1.12), (10.0, 1.22)):
        assert f"λ = {reg:g}: imbalance {imb:.2f} [" in line
    # recall differences are paired within a seed: identical across seeds, so the interval has zero width
    assert "Top-k-Recall -0.030 [-0.030, -0.030] vs λ = 0 (lower)" in line
    assert "Top-k-Recall -0.180 [-0.180, -0.180] vs λ = 0 (lower)" in line
    # seeds shift every λ alike, so both steps up (λ 0.1 → 1 → 10) have zero-width paired intervals above 0
    assert "The imbalance is lowest at λ = 0.1 and rises beyond seed noise from λ 0.1 → 1, 1 → 10." in line
    # dev recall is highest at λ = 0.1 (+0.05 on dev only): chosen in every seed, its test recall reported
    assert "λ chosen on dev queries (best Top-k-Recall per seed): 0.1, 0.1, 0.1, with test Top-k-Recall 0.860" in line


def test_lambda_curve_calls_a_rise_only_beyond_seed_noise():
    rows = pd.DataFrame(_rows("normalized", {0.0: (1.24, 0.88), 0.1: (1.10, 0.85), 1.0: (1.11, 0.80)}))
    noisy = rows["reg"].eq(1.0) & rows["seed"].eq(1)
    rows.loc[noisy, "imbalance"] -= 0.02  # λ 1 − λ 0.1 per seed: +0.01, −0.01, +0.01: mean up, interval holds 0
    (line,) = ccsa_findings.lambda_curve(rows, objective="normalized")
    assert "The imbalance is lowest at λ = 0.1; its rises between λ > 0 are within seed noise." in line
    falls, rises = ccsa_findings.imbalance_steps(rows[rows["split"] == "test"])
    assert rises == [] and [reg for reg, _ in falls] == [0.1, 1.0]
    np.testing.assert_allclose(falls[0][1], [-0.14, -0.14, -0.14])
    (line,) = ccsa_findings.lambda_curve(rows[rows["seed"] == 0], objective="normalized")
    assert "is not monotone in λ, lowest at λ = 0.1 (one seed: no interval)" in line


def test_lambda_curve_with_one_seed_uses_the_query_standard_error():
    rows = pd.DataFrame(_rows("paper", {0.0: (1.3, 0.80), 100.0: (1.05, 0.79)}, seeds=(0,)))
    (line,) = ccsa_findings.lambda_curve(rows, objective="paper", lr=1e-4)
    assert "the paper's literal objective (Eq. 6), per-coordinate MSE + λ · L_UR (raw Eq. 5)" in line
    assert "mean over 1 seed;" in line and "lr 0.0001" in line
    # -0.01 with an SE of hypot(0.01, 0.01): within two standard errors
    assert "Top-k-Recall -0.010 vs λ = 0 (level)" in line
    assert "falls monotonically with λ" in line


def _collapse_row(L: int, F: float, usage: float, *, converged: bool = True, B: int = 1000) -> dict:
    from xenbench.methods.ccsa import expected_uniformity_sq

    return {"n_chunks": 16, "chunk_size": L, "batch_size": B, "reg": 0.0, "objective": "normalized", "steps": 2400,
            "max_steps": 6000, "converged": converged, "tol": 0.001, "window": 200, "imbalance": F,
            "code_usage": usage, "mse": 0.0012, "uniformity_norm": 1.5,
            "expected_uniformity_norm": float(np.sqrt(expected_uniformity_sq(F, 16, L, B))),
            "detectable_imbalance": (L - 1) / (B - 1)}


def test_collapse_states_the_rule_the_verdict_and_what_a_batch_can_see():
    (line,) = ccsa_findings.collapse({"collapse": [_collapse_row(64, 1.24, 1.0), _collapse_row(256, 1.2, 1.0, converged=False),
                                                   _collapse_row(256, 3.0, 0.3)]})
    assert ("stopping rule: the mean loss of the last 200 steps less than 0.001 (relative) below that of the 200 "
            "before, at most 6000 steps") in line
    assert "L = 64: stopped by the rule after 2400 steps, imbalance 1.24, 100% of the 1024 codes used" in line
    assert "it does not collapse" in line
    assert "L = 256: still improving at the cap of 2400 steps" in line
    assert "30% of the 4096 codes used, per-coordinate MSE 1.20e-03: it collapses: it ignores most of its codes" in line
    # L = 64: F - 1 = 0.24 > 63/999 = 0.063: visible; 1 + 999 * 0.24 / 63 = 4.806 -> sqrt 2.19
    assert "at L = 64 a batch of B = 1000 drawn from this index has L_UR about 2.19× its noise floor" in line
    assert "(L − 1)/(B − 1) = 0.063, so the remaining imbalance (F − 1 = 0.240) is visible to the regularizer" in line
    # L = 256, F = 1.2: 0.2 < 255/999 = 0.255: invisible; it would take B >= 255 / 0.2 + 1 = 1276.x -> 1277
    assert "remaining imbalance (F − 1 = 0.200) is below what the regularizer can see; it would take B ≳ 1277" in line
    assert "but there is no collapse for it to prevent" in line
    assert ccsa_findings.collapse({}) == []


def test_committed_findings_give_every_lambda_of_the_committed_run():
    doc = json.loads(COMMITTED.read_text(encoding="utf-8"))["results"]
    text = "\n".join(findings.lines("06_ccsa_balance", doc))
    test = pd.DataFrame(doc["by_reg"]).query("split == 'test'")
    for reg, g in test.groupby("reg"):
        assert f"λ = {reg:g}: imbalance {g['imbalance'].mean():.2f}" in text
    dev = pd.DataFrame(doc["by_reg"]).query("split == 'dev'")
    chosen = [f"{g.loc[g['recall'].idxmax(), 'reg']:g}" for _, g in dev.groupby("seed")]
    assert f"λ chosen on dev queries (best Top-k-Recall per seed): {', '.join(chosen)}," in text
    assert "xenbench's normalized objective" in text


def test_loss_curve_lines_plot_each_step_and_the_trailing_mean():
    curve = pd.DataFrame({"step": [1, 2, 3, 4], "loss": [4.0, 2.0, 2.0, 1.0], "mse": [0.1] * 4, "uniformity": [1.0] * 4})
    fig = plots.loss_curve_lines({"L = 64": curve}, window=2)
    raw, mean = fig.data
    assert list(raw.x) == [1, 2, 3, 4] and list(raw.y) == [4.0, 2.0, 2.0, 1.0] and not raw.showlegend
    np.testing.assert_allclose(np.array(mean.y, dtype=float), [np.nan, 3.0, 2.0, 1.5])
    assert mean.name == "L = 64" and fig.layout.yaxis.type == "log"


def test_lambda_curve_lines_plot_imbalance_and_recall_per_objective_with_intervals():
    rows = pd.DataFrame([{"objective": o, "reg": r, "split": s, "imbalance": 1 + r / 10, "imbalance_lo": 1.0,
                          "imbalance_hi": 1.5, "recall": 0.9 - r / 100, "recall_lo": 0.8, "recall_hi": 0.95}
                         for o in ("normalized", "paper") for r in (10.0, 0.0, 0.1) for s in ("dev", "test")])
    fig = plots.lambda_curve_lines(rows)
    assert [t.name for t in fig.data] == ["normalized", "paper"] * 2
    imb = fig.data[0]
    assert list(imb.x) == ["0", "0.1", "10"] and list(imb.y) == pytest.approx([1.0, 1.01, 2.0])
    np.testing.assert_allclose(np.array(imb.error_y.array, dtype=float), [0.5, 0.49, -0.5])
    assert list(fig.data[2].y) == pytest.approx([0.9, 0.899, 0.8])
    assert fig.layout.xaxis.type == "category"
