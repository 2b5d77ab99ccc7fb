"""Figures show the numbers they are given: every public builder of ``xenbench.viz.plots`` on a small hand-made input.

Each test builds an input whose numbers are known and checks the traces' x / y / z arrays (and error bars, text,
names, axis titles and ranges) against those numbers or against an independent computation of the builder's
transformation (bins and shares by numpy, ranks by hand, normalisations by hand). Structure-only checks (trace
counts, slider visibility, hover templates, colours) live in test_plots.py, test_rank.py, test_adacur_study.py,
test_ccsa.py; they are not repeated here.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xenbench import plots
from xenbench.viz.plots import _style

# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _f(values) -> list[float]:
    """A trace array as plain floats (plotly keeps numpy arrays, lists or tuples)."""
    return [float(v) for v in np.asarray(values, dtype=np.float64)]


def _facet_by_axis(fig) -> dict[str, str]:
    """Facet title of every x axis ("x", "x2", ...): the annotation whose x lies within the axis's domain."""
    out = {}
    for name in fig.layout:
        if not name.startswith("xaxis"):
            continue
        lo, hi = fig.layout[name].domain
        titles = [a.text for a in fig.layout.annotations if a.yref == "paper" and lo <= a.x <= hi]
        if titles:
            out["x" + name[len("xaxis"):]] = titles[0]
    return out


def _by_facet(fig, **match) -> dict[tuple[str, str], object]:
    """(facet title, trace name) -> trace, for the traces whose attributes equal ``match``."""
    facets = _facet_by_axis(fig)
    out = {}
    for tr in fig.data:
        if all(getattr(tr, k) == v for k, v in match.items()):
            out[(facets[tr.xaxis], tr.name)] = tr
    return out


def _ys(trace) -> dict:
    """x -> y of a trace (the pairs it draws, whatever the order of its arrays)."""
    return {x.item() if hasattr(x, "item") else x: float(y) for x, y in zip(trace.x, trace.y)}


# ----------------------------------------------------------------------------------------------
# data.py
# ----------------------------------------------------------------------------------------------
def _domains() -> pd.DataFrame:
    return pd.DataFrame({"domain": ["animals", "foods", "tools"], "role": ["train", "test", "val"],
                         "items": [1200, 45, 300], "queries": [900, 12, 150]})


def test_domain_sizes_bars_show_items_and_queries_per_domain_and_mark_held_out_domains():
    fig = plots.domain_sizes(_domains())
    assert [tr.name for tr in fig.data] == ["items", "queries"]
    items, queries = fig.data
    assert list(items.x) == ["animals", "foods", "tools"] and list(queries.x) == ["animals", "foods", "tools"]
    assert _f(items.y) == [1200, 45, 300] and _f(queries.y) == [900, 12, 150]
    # only the held-out ("test") domain is hatched and bold
    assert list(items.marker.pattern.shape) == ["", "/", ""] == list(queries.marker.pattern.shape)
    assert list(fig.layout.xaxis.tickvals) == ["animals", "foods", "tools"]
    assert list(fig.layout.xaxis.ticktext) == ["animals", "<b>foods</b>", "tools"]
    assert list(items.customdata) == ["train", "test", "val"]  # the role in the hover label
    assert fig.layout.barmode == "group" and fig.layout.yaxis.type == "log"
    assert fig.layout.yaxis.title.text == "count"
    assert plots.domain_sizes(_domains(), log_y=False).layout.yaxis.type == "linear"


def test_length_histograms_show_each_groups_lengths_as_percentages_with_their_median():
    queries, items = [3, 5, 5, 7, 20], [10, 12, 14]
    fig = plots.length_histograms({"queries": queries, "items": items}, unit="words", nbins=4)
    assert [tr.name for tr in fig.data] == ["queries (median 5)", "items (median 12)"]
    assert _f(fig.data[0].x) == [3, 5, 5, 7, 20] and _f(fig.data[1].x) == [10, 12, 14]
    # percent of each group's texts: groups of different sizes compare directly
    assert all(tr.histnorm == "percent" and tr.nbinsx == 4 for tr in fig.data)
    assert fig.layout.barmode == "overlay"
    assert fig.layout.xaxis.title.text == "length (words)" and fig.layout.yaxis.title.text == "% of texts"
    assert fig.layout.title.text == "Text lengths in words"
    empty = plots.length_histograms({"none": []})
    assert empty.data[0].name == "none"  # no median of nothing


def test_ambiguity_histogram_counts_queries_per_number_of_items_and_drops_zeros():
    counts = [1, 1, 1, 2, 2, 4, 0, 0, 1]  # 4 queries with 1 item, 2 with 2, 1 with 4, zeros left out
    fig = plots.ambiguity_histogram(np.array(counts))
    (bar,) = fig.data
    assert _f(bar.x) == [1, 2, 4] and _f(bar.y) == [4, 2, 1]
    np.testing.assert_allclose(_f(bar.customdata), [4 / 7, 2 / 7, 1 / 7])  # share of the 7 non-zero queries
    assert fig.layout.xaxis.dtick == 1  # integer ticks for small counts
    assert fig.layout.yaxis.title.text == "queries"
    assert "items sharing" in fig.layout.xaxis.title.text


def test_accuracy_bars_show_each_retrievers_accuracy_per_dataset_in_the_panel_of_its_cutoff():
    rows = [("A", "bm25", 10, 0.7), ("A", "bm25", 1, 0.3), ("B", "bm25", 10, 0.6), ("B", "bm25", 1, 0.2),
            ("A", "de", 10, 0.9), ("A", "de", 1, 0.5), ("B", "de", 10, 0.8), ("B", "de", 1, 0.4),
            ("A", "de", 5, 0.75), ("B", "de", 5, 0.65)]
    acc = pd.DataFrame(rows, columns=["dataset", "retriever", "k", "accuracy"])
    fig = plots.accuracy_bars(acc)
    facets = _facet_by_axis(fig)
    # panels in increasing k (5 before 10, although the data list 10 first), titled without "cutoff="
    assert [facets[a] for a in sorted(facets, key=lambda a: fig.layout["xaxis" + a[1:]].domain[0])] == [
        "accuracy@1", "accuracy@5", "accuracy@10"]
    bars = _by_facet(fig)
    expected = {(f"accuracy@{k}", r): {} for _, r, k, _ in rows}
    for d, r, k, a in rows:
        expected[(f"accuracy@{k}", r)][d] = a
    assert {key: _ys(tr) for key, tr in bars.items()} == expected
    assert all(tr.texttemplate == "%{y:.2f}" for tr in fig.data)  # the value printed on every bar
    assert tuple(fig.layout.yaxis.range) == (0, 1)
    assert fig.layout.yaxis.title.text == "accuracy"


# ----------------------------------------------------------------------------------------------
# rank.py
# ----------------------------------------------------------------------------------------------
def test_singular_value_spectra_are_normalized_by_their_own_first_singular_value():
    s = {"cls": np.array([8.0, 4.0, 2.0, 1.0]), "emb": np.array([5.0, 0.5, 0.05])}
    centered = {"cls": np.array([2.0, 1.0, 0.5, 0.25])}
    fig = plots.singular_value_spectra(s, centered=centered, rel_tol=1e-3, rel_tol_label="eps")
    by_name = {tr.name: tr for tr in fig.data}
    assert list(by_name) == ["cls", "cls, row-centered", "emb", "eps"]
    assert _f(by_name["cls"].x) == [1, 2, 3, 4] and _f(by_name["cls"].y) == [1.0, 0.5, 0.25, 0.125]
    assert _f(by_name["cls, row-centered"].y) == [1.0, 0.5, 0.25, 0.125]  # by its own σ₁ = 2, not 8
    assert _f(by_name["emb"].x) == [1, 2, 3]
    np.testing.assert_allclose(_f(by_name["emb"].y), [1.0, 0.1, 0.01])
    # the centered spectrum is dashed in its CE's colour; the tolerance spans the longest spectrum
    assert by_name["cls, row-centered"].line.dash == "dash" and by_name["cls"].line.dash == "solid"
    assert by_name["cls, row-centered"].line.color == by_name["cls"].line.color != by_name["emb"].line.color
    assert _f(by_name["eps"].x) == [1, 4] and _f(by_name["eps"].y) == [1e-3, 1e-3]
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.yaxis.title.text == "σ_j / σ₁" and fig.layout.xaxis.title.text == "index j"


def test_score_skew_histograms_show_the_share_of_pairs_per_bin_on_one_pooled_grid():
    a = np.array([[-2.0, -1.0, 0.0], [0.5, 1.0, np.nan]])  # NaN left out
    b = np.array([0.0, 0.0, 0.0, 4.0])  # pooled range: [-2, 4]
    skew = {"a": np.array([0.3, -0.1, np.nan]), "b": np.array([1.5])}
    fig = plots.score_skew_histograms({"a": a, "b": b}, skew=skew, bins=3, log_y=False)
    lines = [tr for tr in fig.data if tr.type == "scatter"]
    assert [tr.name for tr in lines] == ["a", "b"]
    # 3 bins of width 2 over [-2, 4]: [-2, 0), [0, 2), [2, 4]
    for tr in lines:
        assert _f(tr.x) == [-1.0, 1.0, 3.0]
    np.testing.assert_allclose(_f(lines[0].y), [2 / 5, 3 / 5, np.nan])  # empty bins are gaps, not zeros
    np.testing.assert_allclose(_f(lines[1].y), [np.nan, 3 / 4, 1 / 4])
    violins = [tr for tr in fig.data if tr.type == "violin"]
    assert [tr.name for tr in violins] == ["a", "b"]
    assert _f(violins[0].y) == [0.3, -0.1] and _f(violins[1].y) == [1.5]
    assert [v.line.color for v in violins] == [tr.line.color for tr in lines]  # one colour per CE
    assert fig.layout.yaxis.type == "linear" and fig.layout.yaxis.title.text == "share of (query, item) pairs"
    assert fig.layout.yaxis2.title.text == "skewness g₁"
    assert "score − query mean" in fig.layout.xaxis.title.text


def test_score_skew_histograms_shares_match_numpy_on_random_scores():
    rng = np.random.default_rng(3)
    scores = {"x": rng.normal(size=(20, 30)), "y": rng.gamma(2.0, size=(20, 30)) - 2.0}
    fig = plots.score_skew_histograms(scores, bins=25)
    pooled = np.concatenate([v.ravel() for v in scores.values()])
    edges = np.histogram_bin_edges(pooled, bins=25)
    assert fig.layout.yaxis.type == "log"
    for tr in fig.data:
        counts, _ = np.histogram(scores[tr.name], bins=edges)
        np.testing.assert_allclose(_f(tr.x), (edges[:-1] + edges[1:]) / 2)
        share = np.asarray(_f(tr.y))
        np.testing.assert_allclose(np.nan_to_num(share), counts / counts.sum())
        assert np.nansum(share) == pytest.approx(1.0)


def _grid() -> pd.DataFrame:
    rows = []
    for ce, scale in (("cls", 1.0), ("emb", 10.0)):
        for k_q in (20, 10):  # unsorted on purpose
            for k_i in (30, 10, 20):
                rows.append({"ce": ce, "k_q": k_q, "k_i": k_i,
                             "error": scale * (k_q + k_i / 100), "recall": k_i / 40 + (0.1 if ce == "emb" else 0.0)})
    return pd.DataFrame(rows)


def test_cur_heatmaps_z_is_the_pivoted_table_per_panel_with_a_log_colour_scale():
    grid = _grid()
    fig = plots.cur_heatmaps(grid, "error")
    assert [a.text for a in fig.layout.annotations] == ["cls", "emb"]
    for tr, (ce, scale) in zip(fig.data, (("cls", 1.0), ("emb", 10.0))):
        assert list(tr.y) == ["10", "20"] and list(tr.x) == ["10", "20", "30"]  # sorted k_q rows, k_i columns
        raw = np.array([[scale * (q + i / 100) for i in (10, 20, 30)] for q in (10, 20)])
        np.testing.assert_allclose(np.asarray(tr.customdata, dtype=float), raw)  # the hover shows the value
        np.testing.assert_allclose(np.asarray(tr.z, dtype=float), np.log10(raw))  # coloured by log10
        assert [list(r) for r in tr.text] == [[f"{v:.1f}" if v < 100 else f"{v:.0f}" for v in row] for row in raw]
        # one colour scale for both panels: the pooled min and max of the error
        assert tr.zmin == pytest.approx(np.log10(10.1)) and tr.zmax == pytest.approx(np.log10(203.0))
    assert fig.data[0].text[0][0] == "10.1" and fig.data[1].text[1][2] == "203"
    # the k_q = k_i cells outlined: (k_q=10, k_i=10) at (x 0, y 0) and (20, 20) at (x 1, y 1) in both panels
    centers = sorted(((s.x0 + s.x1) / 2, (s.y0 + s.y1) / 2, s.xref) for s in fig.layout.shapes)
    assert centers == [(0.0, 0.0, "x"), (0.0, 0.0, "x2"), (1.0, 1.0, "x"), (1.0, 1.0, "x2")]
    # colour-bar ticks are labelled in the value's units, at the log10 of those values
    bar = fig.data[-1].colorbar
    labels = [float(t) for t in bar.ticktext]
    np.testing.assert_allclose(bar.tickvals, np.log10(labels))
    assert min(labels) >= 10.1 / 1.0001 and max(labels) <= 203.0 * 1.0001
    assert bar.title.text == "error"
    assert fig.layout.xaxis.title.text == "k_i (anchor items)" and fig.layout.yaxis.title.text == "k_q (anchor queries)"


def test_cur_heatmaps_recall_is_coloured_linearly_on_zero_to_one():
    fig = plots.cur_heatmaps(_grid(), "recall")
    cls = fig.data[0]
    expected = np.array([[i / 40 for i in (10, 20, 30)] for _ in (10, 20)])
    np.testing.assert_allclose(np.asarray(cls.z, dtype=float), expected)  # not log10
    assert (cls.zmin, cls.zmax) == (0.0, 1.0)
    assert [list(r) for r in cls.text] == [["0.25", "0.50", "0.75"]] * 2
    np.testing.assert_allclose(np.asarray(fig.data[1].z, dtype=float), expected + 0.1)


def test_cur_heatmaps_leave_a_missing_cell_empty():
    grid = _grid()
    grid = grid[~((grid["ce"] == "cls") & (grid["k_q"] == 20) & (grid["k_i"] == 30))]
    z = np.asarray(plots.cur_heatmaps(grid, "error").data[0].customdata, dtype=float)
    assert np.isnan(z[1, 2]) and np.isfinite(np.delete(z.ravel(), 5)).all()


def test_cur_error_curves_draw_value_against_sorted_k_i_one_line_per_k_q_and_circle_the_diagonal():
    grid = _grid()
    fig = plots.cur_error_curves(grid, "error")
    facets = _facet_by_axis(fig)
    lines = {(facets[tr.xaxis], tr.name): tr for tr in fig.data if tr.mode == "lines+markers"}
    assert set(lines) == {(ce, f"k_q = {q}") for ce in ("cls", "emb") for q in (10, 20)}
    for (ce, name), tr in lines.items():
        k_q, scale = int(name.split("= ")[1]), 1.0 if ce == "cls" else 10.0
        assert _f(tr.x) == [10, 20, 30]
        np.testing.assert_allclose(_f(tr.y), [scale * (k_q + i / 100) for i in (10, 20, 30)])
    circles = sorted((facets[tr.xaxis], _f(tr.x)[0], _f(tr.y)[0]) for tr in fig.data if tr.mode == "markers")
    np.testing.assert_equal(circles, [("cls", 10.0, 10.1), ("cls", 20.0, 20.2), ("emb", 10.0, 101.0),
                                      ("emb", 20.0, 202.0)])
    # one colour per k_q in every panel; the legend lists each k_q once, in increasing order
    assert lines[("cls", "k_q = 10")].line.color == lines[("emb", "k_q = 10")].line.color
    assert lines[("cls", "k_q = 10")].line.color != lines[("cls", "k_q = 20")].line.color
    assert [tr.name for tr in fig.data if tr.showlegend] == ["k_q = 10", "k_q = 20"]
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.title.text == "error"
    assert fig.layout.xaxis.type == "log" and _f(fig.layout.xaxis.tickvals) == [10, 20, 30]


# ----------------------------------------------------------------------------------------------
# adacur.py
# ----------------------------------------------------------------------------------------------
class _HandTrace:
    """12 items, 2 rounds. Exact scores are a permutation of 0..11: item 6 is the exact top-1 (11)."""

    exact = np.array([5, 1, 9, 3, 7, 0, 11, 2, 4, 10, 6, 8], dtype=float)
    # round 1: ŝ rises with the item index (ŝ rank of item i is 12 - i); round 2: ŝ = exact / 2
    approx = np.stack([0.1 * np.arange(12), exact / 2])
    anchors = [np.array([11, 3]), np.array([6])]
    query_row, budget, sampler = 7, 3, "topk"


def test_round_scatter_puts_every_item_at_its_exact_and_approximate_score_in_its_band():
    t = _HandTrace()
    labels = [f"title {i}" for i in range(12)]
    fig = plots.round_scatter(t, bands=(3,), item_labels=labels)
    steps = fig.layout.sliders[0].steps
    for r, (band_top, band_rest, anchors_old, anchors_new) in enumerate((
        ([9, 10], [0, 1, 2, 4, 5, 6, 7, 8], None, [3, 11]),  # ŝ rank 1–3 = items 11, 10, 9; 11 is an anchor
        ([2, 9], [0, 1, 4, 5, 7, 8, 10], [3, 11], [6]),  # ŝ rank 1–3 = exact top-3 = items 6, 9, 2; 6 an anchor
    )):
        shown = [tr for tr, v in zip(fig.data, steps[r].args[0]["visible"]) if v and tr.name != "ŝ = exact"]
        by_name = {tr.name: tr for tr in shown}
        expected = {"ŝ rank 1–3": band_top, "ŝ rank 4–12": band_rest, f"anchors, round {r + 1}": anchors_new}
        if anchors_old is not None:
            expected["anchors, round 1"] = anchors_old
        for name, idx in expected.items():
            tr = by_name[name]
            assert _f(tr.x) == _f(t.exact[idx]) and _f(tr.y) == _f(t.approx[r][idx]), name
            assert list(tr.hovertext) == [labels[i] for i in idx]
            assert [int(c[0]) for c in tr.customdata] == idx  # item index in the hover data
        # every item drawn once among the bands and anchors
        drawn = sorted(i for name, idx in expected.items() for i in idx)
        assert drawn == list(range(12))
        # the exact top-1 (item 6) is starred and labelled, the exact top 2–10 (exact 2..10) ringed
        top1 = by_name["exact top-1"]
        assert _f(top1.x) == [11.0] and _f(top1.y) == [float(t.approx[r][6])] and list(top1.text) == ["top-1"]
        top10 = by_name["exact top 2–10"]
        assert sorted(_f(top10.x)) == [float(v) for v in range(2, 11)]
        assert "exact top 11–100" not in by_name  # 12 items: no top-100 set


def test_round_scatter_hover_ranks_and_titles_count_by_hand():
    t = _HandTrace()
    fig = plots.round_scatter(t, bands=(3,))
    steps = fig.layout.sliders[0].steps
    titles = [s.args[1]["title.text"] for s in steps]
    # round 1: anchors 11 and 3; item 6 has ŝ rank 12 - 6 = 6; both anchors (exact 8 and 3) in the exact top-10
    assert "round 1/2: 2 anchors; exact top-1 has ŝ rank 6; 2 of the exact top-10 are anchors" in titles[0]
    # round 2: anchors 11, 3, 6; ŝ = exact / 2 ranks item 6 first; all three anchors in the exact top-10
    assert "round 2/2: 3 anchors; exact top-1 has ŝ rank 1; 3 of the exact top-10 are anchors" in titles[1]
    assert titles[1].startswith("Query row 7: exact vs approximate scores (B_CE=3, topk)")
    assert fig.layout.title.text == titles[1]  # starts at the last round
    # customdata = (item, exact rank, ŝ rank); exact rank of item i is 12 - exact[i]
    band = next(tr for tr, v in zip(fig.data, steps[0].args[0]["visible"]) if v and tr.name == "ŝ rank 4–12")
    for item, exact_rank, approx_rank in band.customdata:
        assert exact_rank == 12 - t.exact[item] and approx_rank == 12 - item
    # the y range holds the diagonal's exact range [0, 11] and the round's ŝ, padded by 5 % of the ŝ spread
    np.testing.assert_allclose(steps[0].args[1]["yaxis.range"], [-0.055, 11.055])
    np.testing.assert_allclose(steps[1].args[1]["yaxis.range"], [-0.275, 11.275])
    np.testing.assert_allclose(fig.layout.yaxis.range, [-0.275, 11.275])
    diag = fig.data[0]
    assert _f(diag.x) == [0.0, 11.0] and _f(diag.y) == [0.0, 11.0]  # ŝ = exact over the exact range
    assert fig.layout.xaxis.title.text == "exact CE score f(q, i)"


def _budget_results() -> pd.DataFrame:
    rows = []
    # rows shuffled: k = 10 first, budgets descending
    for k in (10, 1):
        for method, base in (("my method", 0.1), ("ADACUR TopK", 0.3), ("ANNCUR", 0.2), ("DE re-rank", 0.0)):
            for budget in (100, 50, 20):
                rows.append({"method": method, "budget": budget, "k": k,
                             "recall": base + budget / 1000 + k / 100, "recall_se": budget / 10000})
    return pd.DataFrame(rows)


def test_recall_vs_budget_lines_show_each_methods_recall_and_standard_error_per_budget_and_k():
    res = _budget_results()
    fig = plots.recall_vs_budget_lines(res)
    lines = _by_facet(fig)
    assert set(lines) == {(f"k = {k}", m) for k in (1, 10) for m in set(res["method"])}
    for (facet, method), tr in lines.items():
        part = res[(res["method"] == method) & (res["k"] == int(facet.split("= ")[1]))].sort_values("budget")
        assert _f(tr.x) == [20, 50, 100]  # drawn left to right
        np.testing.assert_allclose(_f(tr.y), part["recall"])
        np.testing.assert_allclose(_f(tr.error_y.array), part["recall_se"])
    # legend: known methods in the shared order, then the others alphabetically
    legend = [tr.name for tr in fig.data if tr.showlegend is not False]
    assert list(dict.fromkeys(legend)) == ["ANNCUR", "ADACUR TopK", "DE re-rank", "my method"]
    assert lines[("k = 1", "ANNCUR")].line.dash == "dash" and lines[("k = 1", "DE re-rank")].line.dash == "dot"
    assert lines[("k = 1", "ADACUR TopK")].line.dash in (None, "solid")
    assert fig.layout.xaxis.type == "log" and _f(fig.layout.xaxis.tickvals) == [20, 50, 100]
    assert tuple(fig.layout.yaxis.range) == (0, 1.02)
    assert fig.layout.xaxis.title.text == "CE budget B_CE" and fig.layout.yaxis.title.text == "Top-k-Recall"
    bare = plots.recall_vs_budget_lines(res, error_bars=False, log_x=False)
    assert all(tr.error_y.array is None for tr in bare.data) and bare.layout.xaxis.type != "log"


def test_recall_vs_rounds_lines_show_recall_per_number_of_rounds_one_line_per_budget():
    rows = [{"budget": b, "n_rounds": r, "k": k, "recall": b / 1000 + r / 100 + k / 10, "recall_se": r / 1000}
            for k in (10, 1) for b in (100, 20) for r in (8, 1, 2)]
    res = pd.DataFrame(rows)
    fig = plots.recall_vs_rounds_lines(res)
    lines = _by_facet(fig)
    assert set(lines) == {(f"k = {k}", f"B_CE = {b}") for k in (1, 10) for b in (20, 100)}
    for (facet, name), tr in lines.items():
        k, b = int(facet.split("= ")[1]), int(name.split("= ")[1])
        assert _f(tr.x) == [1, 2, 8]
        np.testing.assert_allclose(_f(tr.y), [b / 1000 + r / 100 + k / 10 for r in (1, 2, 8)])
        np.testing.assert_allclose(_f(tr.error_y.array), [0.001, 0.002, 0.008])
    # budgets in numeric order (20 before 100), not string order
    assert list(dict.fromkeys(tr.name for tr in fig.data)) == ["B_CE = 20", "B_CE = 100"]
    assert fig.layout.xaxis.type == "log" and _f(fig.layout.xaxis.tickvals) == [1, 2, 8]
    assert fig.layout.xaxis.title.text == "rounds N_r" and fig.layout.yaxis.title.text == "Top-k-Recall"
    assert tuple(fig.layout.yaxis.range) == (0, 1.02)


def _latency() -> pd.DataFrame:
    seconds = {"CE calls": 0.004, "pinv": 0.003, "matmul": 0.002, "sampling": 0.001}
    rows = [{"budget": b, "n_rounds": r, "step": s, "seconds": sec * r * b / 20, "fraction": sec / 0.01}
            for b in (20, 40) for r in (10, 2, 1) for s, sec in seconds.items()]
    return pd.DataFrame(rows)


def test_latency_vs_rounds_bars_stack_milliseconds_per_step_per_rounds_and_budget():
    res = _latency()
    fig = plots.latency_vs_rounds_bars(res)
    bars = _by_facet(fig)
    assert set(bars) == {(f"B_CE={b}", s) for b in (20, 40) for s in ("CE calls", "pinv", "matmul", "sampling")}
    for (facet, step), tr in bars.items():
        part = res[(res["step"] == step) & (res["budget"] == int(facet.split("=")[1]))]
        assert _ys(tr) == pytest.approx({str(r): 1e3 * s for r, s in zip(part["n_rounds"], part["seconds"])})
    assert _ys(bars[("B_CE=40", "CE calls")]) == pytest.approx({"1": 8.0, "2": 16.0, "10": 80.0})  # by hand
    assert list(fig.layout.xaxis.categoryarray) == ["1", "2", "10"]  # rounds in numeric order
    assert list(dict.fromkeys(tr.name for tr in fig.data)) == ["CE calls", "pinv", "matmul", "sampling"]
    assert fig.layout.barmode == "stack" and fig.layout.yaxis.title.text == "ms per query"
    assert fig.layout.xaxis.title.text == "rounds N_r"
    shares = plots.latency_vs_rounds_bars(res, normalize=True)
    assert _ys(_by_facet(shares)[("B_CE=20", "pinv")]) == pytest.approx({"1": 0.3, "2": 0.3, "10": 0.3})
    assert shares.layout.yaxis.title.text == "share of time per query"


# ----------------------------------------------------------------------------------------------
# ccsa.py
# ----------------------------------------------------------------------------------------------
def test_activation_frequency_lines_plot_each_share_by_dimension_with_the_balanced_line_at_one_over_l():
    freqs = {"λ = 0": np.array([0.6, 0.3, 0.1, 0.0]), "λ = 1": np.array([0.3, 0.25, 0.25, 0.2])}
    fig = plots.activation_frequency_lines(freqs, chunk_size=4)
    for tr, f in zip(fig.data, freqs.values()):
        assert _f(tr.x) == [1, 2, 3, 4]
        np.testing.assert_allclose(_f(tr.y), np.where(f > 0, f, np.nan))
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == 0.25 and line.line.dash == "dash"
    assert fig.layout.annotations[0].text == "balanced: 1/L = 25.00%"
    # the axis starts 1.5x below the smallest non-zero share (0.1) and ends at 100 %
    np.testing.assert_allclose(fig.layout.yaxis.range, [np.log10(0.1 / 1.5), 0.0])
    assert fig.layout.yaxis.title.text == "share of items" and "most used first" in fig.layout.xaxis.title.text
    # when every share is above 1/L the balanced line sets the bottom of the axis, so it stays visible
    flat = plots.activation_frequency_lines({"x": np.array([0.5, 0.5])}, chunk_size=8)
    np.testing.assert_allclose(flat.layout.yaxis.range, [np.log10(1 / 8 / 1.5), 0.0])


def _ccsa_rows() -> pd.DataFrame:
    ccsa = [{"method": "CCSA", "split": s, "reg": reg, "batch_size": 100, "nprobe": np.nan,
             "postings": scored, "scored": 100.0, "recall": rec, "gold_recall": rec / 2}
            for s in ("test", "val") for reg, scored, rec in ((0.0, 300.0, 0.4), (0.5, 120.0, 0.7))]
    ivf = [{"method": "IVF-Flat", "split": s, "reg": np.nan, "batch_size": np.nan, "nprobe": w,
            "postings": 50.0 * w, "scored": 50.0 * w, "recall": 0.2 * w, "gold_recall": 0.1 * w}
           for s in ("test", "val") for w in (1, 2, 4)]
    return pd.DataFrame(ccsa + ivf)


def test_recall_vs_postings_shows_one_splits_recall_against_postings_touched_labelled_by_configuration():
    rows = _ccsa_rows()
    rows.loc[rows["split"] == "val", "recall"] = 0.01  # must not be shown
    fig = plots.recall_vs_postings(rows, k=10, m=100)
    assert [tr.name for tr in fig.data] == ["CCSA", "IVF-Flat"]
    ccsa, ivf = fig.data
    assert _f(ccsa.x) == [300.0, 120.0] and _f(ccsa.y) == [0.4, 0.7]
    assert list(ccsa.text) == ["λ = 0, B = 100, 100 re-ranked", "λ = 0.5, B = 100, 100 re-ranked"]
    assert ccsa.mode == "markers"
    assert _f(ivf.x) == [50.0, 100.0, 200.0] and _f(ivf.y) == pytest.approx([0.2, 0.4, 0.8])
    assert list(ivf.text) == ["w = 1, 50 re-ranked", "w = 2, 100 re-ranked", "w = 4, 200 re-ranked"]
    assert ivf.mode == "lines+markers"
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text == "posting-list entries touched per query"
    assert fig.layout.yaxis.title.text == "Top-10-Recall@100 (exact DE)" and tuple(fig.layout.yaxis.range) == (0, 1.02)
    assert fig.layout.title.text == "Top-10-Recall@100 (exact DE) vs work (test queries)"
    gold = plots.recall_vs_postings(_ccsa_rows(), k=1, y="gold_recall", split="val")
    assert _f(gold.data[0].y) == [0.2, 0.35] and _f(gold.data[1].y) == pytest.approx([0.1, 0.2, 0.4])
    assert gold.layout.yaxis.title.text == "Recall@1 (gold labels)"
    assert gold.layout.title.text == "Recall@1 (gold labels) vs work (val queries)"


# ----------------------------------------------------------------------------------------------
# scores.py
# ----------------------------------------------------------------------------------------------
def test_score_distributions_show_the_density_of_row_centered_scores():
    M = np.array([[1.0, 2.0, 3.0, 6.0], [10.0, 10.0, 12.0, 12.0]])
    # rows minus their means: [-2, -1, 0, 3] and [-1, -1, 1, 1]; 2 bins over [-2, 3] of width 2.5
    fig = plots.score_distributions({"M": M}, standardize=False, bins=2)
    (tr,) = fig.data
    assert tr.name == "M"
    np.testing.assert_allclose(_f(tr.x), [-0.75, 1.75])
    # 5 of 8 values in [-2, 0.5), 3 in [0.5, 3]: density = count / (8 * 2.5)
    np.testing.assert_allclose(_f(tr.y), [5 / 20, 3 / 20])
    assert fig.layout.xaxis.title.text == "score − query mean" and fig.layout.yaxis.title.text == "density"
    assert fig.layout.yaxis.type == "log"


def test_score_distributions_standardized_densities_match_numpy_and_integrate_to_one():
    rng = np.random.default_rng(5)
    M = rng.normal(size=(15, 40)) * 7 + rng.normal(size=(15, 1)) * 100  # per-query offsets removed by centering
    fig = plots.score_distributions({"M": M}, bins=30)
    Z = M - M.mean(axis=1, keepdims=True)
    Z = Z / Z.std()
    density, edges = np.histogram(Z, bins=30)
    density = density / (Z.size * np.diff(edges))
    (tr,) = fig.data
    np.testing.assert_allclose(_f(tr.x), (edges[:-1] + edges[1:]) / 2)
    np.testing.assert_allclose(_f(tr.y), density)
    assert float(np.sum(np.asarray(_f(tr.y)) * np.diff(edges))) == pytest.approx(1.0)
    assert fig.layout.xaxis.title.text == "score − query mean (in stds)"


def test_score_distributions_bin_every_matrix_over_the_pooled_range():
    narrow = np.array([[0.0, 1.0], [0.0, 1.0]])  # centered: ±0.5
    wide = np.array([[0.0, 10.0], [0.0, 10.0]])  # centered: ±5
    fig = plots.score_distributions({"narrow": narrow, "wide": wide}, standardize=False, bins=4)
    edges = np.linspace(-5.0, 5.0, 5)  # 4 bins over the pooled range [-5, 5]
    for tr in fig.data:
        np.testing.assert_allclose(_f(tr.x), (edges[:-1] + edges[1:]) / 2)


# ----------------------------------------------------------------------------------------------
# tuning.py
# ----------------------------------------------------------------------------------------------
def _sweep(ks=(1, 10)) -> pd.DataFrame:
    rows = [{"method": m, "budget": b, "lam": lam, "k": k, "recall": base + b / 1000 + k / 100 + lam / 10,
             "recall_se": lam / 100 + 0.001}
            for m, base in (("PEFA", 0.5), ("AXN", 0.1)) for b in (40, 20) for k in ks for lam in (1.0, 0.0, 0.5)]
    return pd.DataFrame(rows)


def test_recall_vs_lambda_lines_show_recall_and_error_per_lambda_one_line_per_method_and_budget():
    sweep = _sweep()
    fig = plots.recall_vs_lambda_lines(sweep)
    lines = _by_facet(fig)
    names = ["AXN, B_CE = 20", "AXN, B_CE = 40", "PEFA, B_CE = 20", "PEFA, B_CE = 40"]
    assert set(lines) == {(f"k = {k}", n) for k in (1, 10) for n in names}
    assert list(dict.fromkeys(tr.name for tr in fig.data)) == names  # sorted by method, then budget
    for (facet, name), tr in lines.items():
        k, (m, b) = int(facet.split("= ")[1]), (name.split(", B_CE = ")[0], int(name.split("= ")[1]))
        base = {"PEFA": 0.5, "AXN": 0.1}[m]
        assert _f(tr.x) == [0.0, 0.5, 1.0]
        np.testing.assert_allclose(_f(tr.y), [base + b / 1000 + k / 100 + lam / 10 for lam in (0.0, 0.5, 1.0)])
        np.testing.assert_allclose(_f(tr.error_y.array), [0.001, 0.006, 0.011])
        assert tr.line.color == _style.method_color(name)
    assert fig.layout.xaxis.title.text == "λ" and fig.layout.yaxis.title.text == "Recall"
    assert tuple(fig.layout.xaxis.range) == (-0.03, 1.03) and tuple(fig.layout.yaxis.range) == (0, 1.02)
    no_budget = plots.recall_vs_lambda_lines(sweep[sweep["budget"] == 20].drop(columns="budget"))
    assert {tr.name for tr in no_budget.data} == {"AXN", "PEFA"}


def _stars(fig) -> dict[str, tuple[float, float, str]]:
    """facet title -> (λ, recall, colour) of its star."""
    facets = _facet_by_axis(fig)
    return {facets[tr.xaxis]: (_f(tr.x)[0], _f(tr.y)[0], tr.marker.color) for tr in fig.data
            if tr.marker.symbol == "star"}


def _chosen() -> pd.DataFrame:
    return pd.DataFrame([{"method": "AXN", "budget": 20, "lam": 0.5, "k": 1, "recall": 0.18},
                         {"method": "AXN", "budget": 20, "lam": 1.0, "k": 10, "recall": 0.32}])


def test_recall_vs_lambda_lines_star_the_chosen_lambda_in_the_panel_of_its_k():
    fig = plots.recall_vs_lambda_lines(_sweep(), _chosen())
    colour = _style.method_color("AXN, B_CE = 20")  # the colour of its line
    assert _stars(fig) == {"k = 1": (0.5, 0.18, colour), "k = 10": (1.0, 0.32, colour)}
    # the star sits on its line: the line of that method and budget in that panel passes through it
    lines = _by_facet(fig, mode="lines+markers")
    assert _ys(lines[("k = 1", "AXN, B_CE = 20")])[0.5] == pytest.approx(0.18)
    assert _ys(lines[("k = 10", "AXN, B_CE = 20")])[1.0] == pytest.approx(0.32)


def test_recall_vs_lambda_lines_star_lands_in_its_k_panel_whatever_the_row_order():
    fig = plots.recall_vs_lambda_lines(_sweep(ks=(10, 1)), _chosen())
    colour = _style.method_color("AXN, B_CE = 20")
    assert _stars(fig) == {"k = 1": (0.5, 0.18, colour), "k = 10": (1.0, 0.32, colour)}
