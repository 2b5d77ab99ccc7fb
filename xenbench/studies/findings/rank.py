"""Findings of notebook 02 (rank of [CLS]-CE vs [EMB]-CE score matrices, ANNCUR §2.6, §3.3, Table 3(b)).

ANNCUR's chain is: skewed per-query scores (Fig. 1(b)) → higher rank of the [CLS]-CE's matrix (Table 3(b):
numpy rank 315 vs 45) → worse CUR approximation at the same k_q × k_i (Fig. 6, 8). Every statement below is
computed from the notebook's saved results: which CE each rank rule puts lower (numpy's default tolerance on
the raw spectrum, the same on the row-centered spectrum, energy ranks), the skewness, and which CE's CUR is
better over the off-diagonal grid cells, "beats" only where a paired sign test over those cells gives p < 0.05
(the cells share test queries and nested anchors, so they are not independent: a rough guard, not an exact
test).

Two pinv rules (:data:`xenbench.methods.cur.PINV_RULES`): the CE comparison uses xenbench's cut-off
(:data:`MAIN_RULE`); the §B.2 line reports the k_q = k_i spike under both, the authors' plain pinv and the cut-off.
Two recalls, each named: the paper's Top-k-Recall@m (Fig. 6: m retrieved items, the anchor calls not counted) and
Top-k-Recall at a total budget of B_CE CE calls (anchor calls included, anchors re-ranked for free).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from xenbench.errors import ParameterError
from xenbench.studies.findings import register
from xenbench.studies.rank import (
    _CUR_VALUES,
    NUMPY_RANK,
    NUMPY_RANK_CENTERED,
    TOP_SHARE,
    _rank_column,
    ce_roles,
    energy_label,
    is_anncur_layout,
    lowest,
    paired_sign_test,
    rank_orderings,
)

#: "rank([EMB]) ≪ rank([CLS])" is read as "at least this many times lower" (ANNCUR's ratio was 315/45 = 7).
MUCH_LOWER = 2.0
#: Significance level of the paired sign test that decides "beats" vs "within noise".
ALPHA = 0.05
#: The pinv rule of the CE comparison (ranks → CUR quality); the §B.2 line reports every rule of the grid.
MAIN_RULE = "cutoff"
_PINV_NAMES = {"plain": "the plain pinv (NumPy's default cut-off 1e-15, as the ANNCUR authors' code)",
               "cutoff": "xenbench's cut-off (singular values below max(k_q, k_i)·eps(float32)·σ₁ dropped)"}

_RULE_NAMES = {
    NUMPY_RANK: "numpy's default tolerance on the raw spectrum",
    NUMPY_RANK_CENTERED: "numpy's default tolerance on the row-centered spectrum",
    energy_label(0.99, centered=True): "99% energy rank of the row-centered spectrum",
    energy_label(0.9, centered=True): "90% energy rank of the row-centered spectrum",
}


def rank_verdict(ranks_table: pd.DataFrame, skew_table: pd.DataFrame, grid: pd.DataFrame, spikes: pd.DataFrame,
                 cls_ce: str, emb_ce: str) -> dict[str, Any]:
    """The numbers behind notebook 02's conclusion for one [EMB]-CE against the [CLS]-CE.

    Parameters
    ----------
    ranks_table : DataFrame
        :func:`xenbench.studies.rank.rank_table` (with the 99% energy rank).
    skew_table : DataFrame
        :func:`xenbench.studies.rank.skew_table`.
    grid : DataFrame
        :func:`xenbench.studies.rank.cur_grids` (both recall columns needed); only the cells of :data:`MAIN_RULE`
        are used.
    spikes : DataFrame
        :func:`xenbench.studies.rank.diagonal_spikes` (with value ``error_centered``); :data:`MAIN_RULE` only.
    cls_ce, emb_ce : str
        The [CLS]-CE and the [EMB]-CE compared (:func:`xenbench.studies.rank.ce_roles`).

    Returns
    -------
    verdict : dict
        ``numpy_rank`` ({ce: rank}), ``numpy_rank_ratio_cls_over_emb``, ``emb_much_lower_numpy_rank``
        (numpy rank of [EMB] at most 1/:data:`MUCH_LOWER` of [CLS]'s), ``energy_rank_99_centered``,
        ``energy_rank_ratio_cls_over_emb``, ``lower_energy_rank`` (CE or "tie"), ``median_skewness``,
        ``median_offdiag`` ({ce: {error, error_centered, recall}} medians over k_q ≠ k_i),
        ``median_diagonal_spike_error_centered`` ({ce: median ratio}), ``better_error_centered``,
        ``better_recall_at_m``, ``better_recall_at_budget``, ``better_error`` (CE with the better median, or "tie"),
        ``lower_numpy_rank``, and ``sign_tests`` ({value: :func:`~xenbench.studies.rank.paired_sign_test` of emb vs cls
        over the off-diagonal cells, "lower" = emb better; for a recall, higher is better so the test is on −recall}).
    """
    owner = "rank_verdict"
    r_all = _rank_column(ranks_table, NUMPY_RANK, owner)
    ces = list(r_all)
    if cls_ce not in ces or emb_ce not in ces or cls_ce == emb_ce:
        raise ParameterError("emb_ce", f"a CE of ranks_table other than cls_ce ({ces})", emb_ce, owner)
    pair = [cls_ce, emb_ce]
    r_np = {ce: r_all[ce] for ce in pair}
    r99 = _rank_column(ranks_table, energy_label(0.99, centered=True), owner)
    r99c = {ce: r99[ce] for ce in pair}
    if "pinv" in grid.columns:
        grid = grid[grid["pinv"] == MAIN_RULE]
    if "pinv" in spikes.columns:
        spikes = spikes[spikes["pinv"] == MAIN_RULE]
    off = grid[~grid["diagonal"] & grid["ce"].isin(pair)]
    med = off.groupby("ce")[_CUR_VALUES].median()
    wide = off.pivot_table(index=["k_q", "k_i"], columns="ce", values=_CUR_VALUES, dropna=False)
    sign = {v: paired_sign_test(wide[v][emb_ce] * (-1 if v.startswith("recall") else 1),
                                wide[v][cls_ce] * (-1 if v.startswith("recall") else 1)) for v in _CUR_VALUES}
    sp = spikes[(spikes["value"] == "error_centered") & spikes["ce"].isin(pair)]
    return {
        "cls_ce": cls_ce, "emb_ce": emb_ce,
        "numpy_rank": r_np,
        "numpy_rank_ratio_cls_over_emb": r_np[cls_ce] / r_np[emb_ce],
        "emb_much_lower_numpy_rank": bool(r_np[emb_ce] * MUCH_LOWER <= r_np[cls_ce]),
        "energy_rank_99_centered": r99c,
        "energy_rank_ratio_cls_over_emb": r99c[cls_ce] / r99c[emb_ce],
        "lower_energy_rank": lowest(r99c),
        "median_skewness": {ce: float(skew_table.loc[ce, "median skewness"]) for ce in pair},
        "median_offdiag": {ce: {k: float(v) for k, v in row.items()} for ce, row in med.to_dict(orient="index").items()},
        "median_diagonal_spike_error_centered": {str(k): float(v) for k, v in sp.groupby("ce")["ratio"].median().items()},
        "better_error_centered": lowest({ce: med.loc[ce, "error_centered"] for ce in pair}),
        "better_recall_at_m": lowest({ce: -med.loc[ce, "recall_at_m"] for ce in pair}),
        "better_recall_at_budget": lowest({ce: -med.loc[ce, "recall_at_budget"] for ce in pair}),
        "better_error": lowest({ce: med.loc[ce, "error"] for ce in pair}),
        "lower_numpy_rank": lowest(r_np),
        "sign_tests": sign,
    }


def describe_ranks(ranks_table: pd.DataFrame, shape: tuple[int, int], cls_ce: str, emb_ce: str) -> str:
    """Three lines comparing the ranks of the [CLS]-CE and an [EMB]-CE of a :func:`xenbench.studies.rank.rank_table`.

    Parameters
    ----------
    ranks_table : DataFrame
        :func:`xenbench.studies.rank.rank_table` with the 90% and 99% energy ranks, at least 2 CEs.
    shape : tuple of int
        Shape of the matrices (full rank = ``min(shape)``).
    cls_ce, emb_ce : str
        The CEs compared (rows of ``ranks_table``; see :func:`xenbench.studies.rank.ce_roles`).

    Returns
    -------
    text : str
        The numpy ranks (and ANNCUR's 315 vs 45), the [CLS]-CE's top-component share and row-centered
        numpy rank, and the row-centered energy ranks with their ratios.
    """
    owner = "describe_ranks"
    r_np = _rank_column(ranks_table, NUMPY_RANK, owner)
    r90c = _rank_column(ranks_table, energy_label(0.9, centered=True), owner)
    r99c = _rank_column(ranks_table, energy_label(0.99, centered=True), owner)
    if cls_ce not in r_np or emb_ce not in r_np or cls_ce == emb_ce:
        raise ParameterError("emb_ce", f"a CE of ranks_table other than cls_ce ({list(r_np)})", emb_ce, owner)
    return "\n".join([
        f"numpy rank: {cls_ce} {r_np[cls_ce]}, {emb_ce} {r_np[emb_ce]} (full rank would be {min(shape)}); "
        f"ANNCUR's YuGiOh matrices: 315 vs 45.",
        f"{cls_ce}: its top singular component holds {ranks_table.loc[cls_ce, TOP_SHARE]:.1%} of ‖M‖²; "
        f"row-centered, numpy rank {ranks_table.loc[cls_ce, NUMPY_RANK_CENTERED]}.",
        f"Row-centered energy ranks (90% / 99%): {cls_ce} {r90c[cls_ce]} / {r99c[cls_ce]}, "
        f"{emb_ce} {r90c[emb_ce]} / {r99c[emb_ce]}: "
        f"{emb_ce} needs {r90c[cls_ce] / r90c[emb_ce]:.1f}x / {r99c[cls_ce] / r99c[emb_ce]:.1f}x fewer components.",
    ])


def describe_layout(layout: Mapping[str, Any]) -> str:
    """A CE's scoring layout in words, from :func:`xenbench.studies.rank.ce_layouts`.

    Examples
    --------
    >>> describe_layout({"kind": "emb", "pooling": "mean", "scale": 20.0})
    "[EMB]-CE, 20 · cosine of the mean-pooled query and item segments (xenbench's variant, not ANNCUR's layout)"
    """
    kind, pooling, scale = layout.get("kind"), layout.get("pooling"), layout.get("scale")
    if kind == "cls":
        return "[CLS]-CE, linear head on the [CLS] state"
    if kind != "emb":
        return "layout not recorded"
    if pooling == "markers":
        dot = "raw dot" if scale is None else f"{scale:g} · cosine"
        paper = " (ANNCUR's [EMB]-CE layout)" if is_anncur_layout(layout) else ""
        return f"[EMB]-CE, {dot} of the [unused0]/[unused1] mean and the [unused2] state{paper}"
    if pooling == "mean":
        dot = "raw dot" if scale is None else f"{scale:g} · cosine"
        return f"[EMB]-CE, {dot} of the mean-pooled query and item segments (xenbench's variant, not ANNCUR's layout)"
    return f"[EMB]-CE, {pooling} pooling"


def _frames(results: Mapping[str, Any]) -> tuple[list[str], pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    ranks = pd.DataFrame.from_dict(results["ranks"], orient="index")
    ces = list(results.get("ces") or ranks.index)
    ranks = ranks.loc[ces]
    skew = pd.DataFrame.from_dict(results["skew"], orient="index")
    return ces, ranks, skew, pd.DataFrame(results["grid"]), pd.DataFrame(results["diagonal_spikes"])


def _comparison(v: Mapping[str, Any], value: str, what: str) -> str:
    """"<emb> beats <cls>" / "<cls> beats <emb>" / "within noise", from the sign test over the grid cells."""
    t = v["sign_tests"][value]
    cls_ce, emb_ce = v["cls_ce"], v["emb_ce"]
    counts = f"{emb_ce} better in {t['lower']} of {t['n']} off-diagonal cells, sign test p = {t['p']:.2g}"
    if t["n"] == 0:
        return f"by {what}: no cell to compare"
    if t["p"] < ALPHA:
        winner, loser = (emb_ce, cls_ce) if t["lower"] > t["higher"] else (cls_ce, emb_ce)
        return f"by {what}, {winner} beats {loser} ({counts})"
    return f"by {what}, {emb_ce} and {cls_ce} are within noise ({counts})"


@register("02_rank_cls_vs_emb")
def findings(results: Mapping[str, Any]) -> list[str]:
    """Which rank rule orders the CEs how, whether ANNCUR's rank([EMB]) ≪ rank([CLS]) holds under each, the
    skew, and whether the lower-rank CE also has the better CUR approximation, per [EMB]-CE."""
    ces, ranks, skew, grid, spikes = _frames(results)
    shape = results.get("shape")
    params = results.get("params", {})
    k, budget, m = params.get("k"), params.get("budget"), params.get("m")
    orderings = rank_orderings(ranks, tuple(_RULE_NAMES))
    cls_ce, emb_ces = ce_roles(results["layouts"])
    out = []
    layouts = results.get("layouts") or {}
    if layouts:
        out.append("Layouts compared: " + "; ".join(f"{ce}: {describe_layout(layouts.get(ce, {}))}" for ce in ces)
                   + ".")
    full = f" (full rank {min(shape)})" if shape else ""
    out.append(f"Which tolerance rule yields which ordering{full}: " + "; ".join(
        f"{_RULE_NAMES[rule]}: {row['ordering']} ("
        + ", ".join(f"{ce} {int(row[ce])}" for ce in ces) + ")" for rule, row in orderings.iterrows()) + ".")
    if TOP_SHARE in ranks.columns:  # why the raw-spectrum numpy rank can order CEs by their offsets, not their shapes
        out.append("numpy's tolerance is σ₁ · max(m, n) · eps, so a common offset (a dominant top component) raises "
                   "it and lowers the raw-spectrum rank: the top singular component holds "
                   + ", ".join(f"{ranks.loc[ce, TOP_SHARE]:.2%} of ‖M‖² for {ce}" for ce in ces)
                   + "; the row-centered rules remove the offset.")
    for emb_ce in emb_ces:
        v = rank_verdict(ranks, skew, grid, spikes, cls_ce, emb_ce)
        claims = []
        for rule in _RULE_NAMES:
            r = _rank_column(ranks, rule, "findings")
            holds = r[emb_ce] * MUCH_LOWER <= r[cls_ce]
            claims.append(f"{'holds' if holds else 'does not hold'} by {_RULE_NAMES[rule]} "
                          f"(ratio {r[cls_ce] / r[emb_ce]:.2f})")
        out.append(f"ANNCUR's rank({emb_ce}) ≪ rank({cls_ce}) (at least {MUCH_LOWER:g}× lower; the paper's "
                   f"ratio was 7): " + "; ".join(claims) + ".")
        sk = v["median_skewness"]
        more = lowest({ce: -val for ce, val in sk.items()})
        out.append(f"Median per-query skewness: {cls_ce} {sk[cls_ce]:.2f}, {emb_ce} {sk[emb_ce]:.2f}"
                   + (f": {more}'s scores are the more right-skewed." if more != "tie" else ": equal."))
        med = v["median_offdiag"]
        at_m = f"the paper's Top-{k}-Recall@{m} ({m} items retrieved by ŝ, anchor calls not counted)"
        at_b = f"Top-{k}-Recall at B_CE = {budget} CE calls (anchor calls included, anchors re-ranked free)"
        out.append(f"CUR with {_PINV_NAMES[MAIN_RULE]} over the k_q ≠ k_i cells (medians, {cls_ce} vs {emb_ce}): "
                   f"error_centered {med[cls_ce]['error_centered']:.3f} vs {med[emb_ce]['error_centered']:.3f}, "
                   f"{at_m} {med[cls_ce]['recall_at_m']:.3f} vs {med[emb_ce]['recall_at_m']:.3f}, "
                   f"{at_b} {med[cls_ce]['recall_at_budget']:.3f} vs {med[emb_ce]['recall_at_budget']:.3f}, "
                   f"ANNCUR's error {med[cls_ce]['error']:.3f} vs {med[emb_ce]['error']:.3f}; "
                   + "; ".join([_comparison(v, "error_centered", "error_centered"),
                                _comparison(v, "recall_at_m", f"Top-{k}-Recall@{m}"),
                                _comparison(v, "recall_at_budget", f"recall at B_CE = {budget}"),
                                _comparison(v, "error", "ANNCUR's own error (Fig. 8; it rewards a common offset)")])
                   + ".")
        better = {value: _winner(v, value) for value in ("error_centered", "recall_at_m", "recall_at_budget")}
        cur_better = better["error_centered"] if len(set(better.values())) == 1 else None
        agree = []
        for rule in _RULE_NAMES:
            low = lowest({ce: _rank_column(ranks, rule, "findings")[ce] for ce in (cls_ce, emb_ce)})
            if cur_better is None:
                verdict = "cannot be checked (the CUR measures do not name one better CE)"
            elif low == "tie":
                verdict = "does not separate them"
            else:
                verdict = "agrees" if low == cur_better else "does not agree"
            agree.append(f"{_RULE_NAMES[rule]} (lower: {low}) {verdict}")
        out.append(f"Does the lower rank predict the better CUR ({emb_ce} vs {cls_ce})? " + "; ".join(agree) + ".")
    out += _spike_lines(spikes, [cls_ce, *emb_ces])
    out += _recall_definitions(grid, k, m, budget)
    return out


def _spike_lines(spikes: pd.DataFrame, ces: list[str]) -> list[str]:
    """The §B.2 spike of error_centered under every pinv rule of the run (median over the diagonal cells)."""
    sp = spikes[spikes["value"] == "error_centered"]
    if "pinv" not in sp.columns:
        sp = sp.assign(pinv=MAIN_RULE)
    parts = []
    for rule in [r for r in ("plain", "cutoff") if r in set(sp["pinv"])]:
        med = sp[sp["pinv"] == rule].groupby("ce")["ratio"].median()
        parts.append(f"with {_PINV_NAMES[rule]}: " + ", ".join(f"{med[ce]:.1f}× ({ce})" for ce in ces if ce in med))
    if not parts:
        return []
    return ["At k_q = k_i (ANNCUR §B.2), error_centered over the worse neighbour's (the next smaller or larger k_i of "
            "the grid in the same k_q row; median over the diagonal cells) " + "; ".join(parts) + "."]


def _recall_definitions(grid: pd.DataFrame, k: Any, m: Any, budget: Any) -> list[str]:
    """How far the paper's Top-k-Recall@m lies above recall at B_CE calls off the diagonal (cut-off rule): the two
    definitions differ by the k_i anchor calls, which only the budget charges."""
    if not {"recall_at_m", "recall_at_budget"} <= set(grid.columns) or m != budget:
        return []
    g = grid[grid["pinv"] == MAIN_RULE] if "pinv" in grid.columns else grid
    off = g[~g["diagonal"]].dropna(subset=["recall_at_budget"])
    if off.empty:
        return []
    gap = 100 * (off["recall_at_m"] - off["recall_at_budget"])
    worst = off.loc[gap.idxmax()]
    return [f"Both recalls with m = B_CE = {budget}: the paper's Top-{k}-Recall@{m} is {gap.mean():+.1f} points above "
            f"Top-{k}-Recall at B_CE = {budget} calls on average over the k_q ≠ k_i cells (most "
            f"{gap.max():+.1f} at k_q = {int(worst['k_q'])}, k_i = {int(worst['k_i'])}, {worst['ce']}): the budget "
            f"charges the k_i anchor calls, the paper's m does not."]


def _winner(v: Mapping[str, Any], value: str) -> str | None:
    """The CE that beats the other by the sign test at :data:`ALPHA`, or None (within noise)."""
    t = v["sign_tests"][value]
    if t["n"] == 0 or t["p"] >= ALPHA:
        return None
    return v["emb_ce"] if t["lower"] > t["higher"] else v["cls_ce"]
