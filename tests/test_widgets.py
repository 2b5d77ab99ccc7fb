"""Widgets are thin: a control change redraws exactly the figure the static cell builds."""
from __future__ import annotations

import numpy as np

from xenbench import experiments, widgets
from xenbench.plots import adacur as adacur_plots


def test_round_explorer_redraws_the_static_figure_on_change() -> None:
    rng = np.random.default_rng(0)
    M = (rng.normal(size=(60, 8)) @ rng.normal(size=(8, 120))).astype(np.float32)
    split = experiments.split_rows(60, 30, seed=1)
    box = widgets.round_explorer(M, split, budgets=[20, 40], rounds=[2, 4], samplers=("topk", "random"))
    controls = [w for row in box.children[:2] for w in row.children]
    sampler = next(w for w in controls if getattr(w, "description", "") == "sampler")
    view = box.children[-1]
    initial = adacur_plots.round_scatter(experiments.round_trace(M, split, int(split.test[0]), budget=20, n_rounds=4,
                                                                 sampler="topk", seed=0))
    assert len(view.data) == len(initial.data) > 0  # drawn for its initial values when built ...
    assert box.snapshot.to_json() == initial.to_json()  # ... and that figure is the report's static snapshot
    bundle = box._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "Static snapshot" in bundle["text/html"]
    split_choice = next(w for w in controls if getattr(w, "description", "") == "anchors")
    assert split_choice.label == "No-Split"  # not a blank entry

    sampler.value = "random"
    query = next(w for w in controls if getattr(w, "description", "") == "query").value
    trace = experiments.round_trace(M, split, query, budget=20, n_rounds=4, sampler="random", seed=0)
    expected = adacur_plots.round_scatter(trace)
    assert len(view.data) == len(expected.data) > 0
    for got, want in zip(view.data, expected.data):
        np.testing.assert_array_equal(np.asarray(got.x, dtype=float), np.asarray(want.x, dtype=float))
        np.testing.assert_array_equal(np.asarray(got.y, dtype=float), np.asarray(want.y, dtype=float))


def test_axn_explorer_redraws_the_static_figure_on_change() -> None:
    from xenbench import axn

    rng = np.random.default_rng(1)
    V, U = rng.normal(size=(150, 6)), rng.normal(size=(20, 6))
    M = U @ V.T + 0.3 * rng.normal(size=(20, 150))
    u_param = U + 0.5 * rng.normal(size=U.shape)
    order = np.argsort(-(u_param @ V.T), axis=1, kind="stable")
    box = widgets.axn_explorer(M, V, [3, 7], budgets=[20, 30], lambdas=[0.0, 0.5, 1.0], u_param=u_param,
                               candidates=order)
    controls = [w for row in box.children[:2] for w in row.children]
    lam = next(w for w in controls if getattr(w, "description", "") == "λ")
    first = next(w for w in controls if getattr(w, "description", "") == "round 1")
    view = box.children[-1]
    assert len(view.data) > 0  # drawn for its initial values when built
    assert view.layout.yaxis.title.text == "AXN retrieval score u_qᵀv_i"
    assert not view.data[0].visible  # no "ŝ = exact" diagonal: AXN's scores are on another scale

    first.value = "retriever"
    lam.value = 0.5
    trace = axn.round_trace(M, V, 3, budget=20, lam=0.5, u_param=u_param[3], candidates=order[3])
    expected = adacur_plots.round_scatter(trace, diagonal=False)
    assert len(view.data) == len(expected.data) > 0
    for got, want in zip(view.data, expected.data):
        np.testing.assert_array_equal(np.asarray(got.y, dtype=float), np.asarray(want.y, dtype=float))
