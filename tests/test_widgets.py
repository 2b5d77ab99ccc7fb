"""Widgets are thin: a control change redraws exactly the figure the static cell builds."""
from __future__ import annotations

import numpy as np
import pytest

from xenbench import widgets
from xenbench.studies.protocol import Split
from xenbench.studies import adacur as adacur_study
from xenbench.errors import ParameterError
from xenbench.viz.plots import adacur as adacur_plots


def _split(n: int, k_q: int, seed: int) -> Split:
    """k_q seeded anchor rows of ``n``, the others test rows."""
    perm = np.random.default_rng(seed).permutation(n)
    return Split(np.sort(perm[:k_q]), np.empty(0, np.int64), np.sort(perm[k_q:]), seed)


def test_round_explorer_redraws_the_static_figure_on_change() -> None:
    rng = np.random.default_rng(0)
    M = (rng.normal(size=(60, 8)) @ rng.normal(size=(8, 120))).astype(np.float32)
    split = _split(60, 30, seed=1)
    box = widgets.round_explorer(M, split, budgets=[20, 40], rounds=[2, 4], samplers=("topk", "random"))
    controls = [w for row in box.children[:2] for w in row.children]
    sampler = next(w for w in controls if getattr(w, "description", "") == "sampler")
    view = box.children[-1]
    initial = adacur_plots.round_scatter(adacur_study.adacur_round_trace(M, split, int(split.test[0]), budget=20,
                                                                         n_rounds=4, sampler="topk", seed=0))
    assert len(view.data) == len(initial.data) > 0  # drawn for its initial values when built ...
    assert box.snapshot.to_json() == initial.to_json()  # ... and that figure is the report's static snapshot
    bundle = box._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "Static snapshot" in bundle["text/html"]
    split_choice = next(w for w in controls if getattr(w, "description", "") == "anchors")
    assert split_choice.label == "No-Split"  # not a blank entry

    sampler.value = "random"
    query = next(w for w in controls if getattr(w, "description", "") == "query").value
    trace = adacur_study.adacur_round_trace(M, split, query, budget=20, n_rounds=4, sampler="random", seed=0)
    expected = adacur_plots.round_scatter(trace)
    assert len(view.data) == len(expected.data) > 0
    for got, want in zip(view.data, expected.data):
        np.testing.assert_array_equal(np.asarray(got.x, dtype=float), np.asarray(want.x, dtype=float))
        np.testing.assert_array_equal(np.asarray(got.y, dtype=float), np.asarray(want.y, dtype=float))


def test_axn_explorer_redraws_the_static_figure_on_change() -> None:
    from xenbench.studies import axn

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
    trace = axn.axn_round_trace(M, V, 3, budget=20, lam=0.5, u_param=u_param[3], candidates=order[3])
    expected = adacur_plots.round_scatter(trace, diagonal=False)
    assert len(view.data) == len(expected.data) > 0
    for got, want in zip(view.data, expected.data):
        np.testing.assert_array_equal(np.asarray(got.y, dtype=float), np.asarray(want.y, dtype=float))


def _recording(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` by a wrapper that records the ``device`` of every call."""
    seen, original = [], getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(kwargs.get("device", "<default>"))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


@pytest.mark.parametrize("device", [None, "cpu:0"])
def test_explorers_pass_their_device_to_every_redraw(monkeypatch, device) -> None:
    from xenbench.studies import axn

    kw = {} if device is None else {"device": device}
    want = "auto" if device is None else device
    rng = np.random.default_rng(0)
    M = (rng.normal(size=(40, 6)) @ rng.normal(size=(6, 80))).astype(np.float32)
    split = _split(40, 20, seed=1)
    seen = _recording(monkeypatch, adacur_study, "adacur_round_trace")
    box = widgets.round_explorer(M, split, budgets=[20], rounds=[2, 4], samplers=("topk", "random"), **kw)
    next(w for row in box.children[:2] for w in row.children if getattr(w, "description", "") == "sampler").value = "random"
    assert len(seen) == 2 and set(seen) == {want}  # the initial figure and the redraw

    V = rng.normal(size=(80, 6))
    seen = _recording(monkeypatch, axn, "axn_round_trace")
    box = widgets.axn_explorer(M, V, [3, 7], budgets=[20], lambdas=[0.0, 0.5], u_param=rng.normal(size=(40, 6)), **kw)
    next(w for row in box.children[:2] for w in row.children if getattr(w, "description", "") == "λ").value = 0.5
    assert len(seen) == 2 and set(seen) == {want}


def test_explorers_refuse_a_bad_device_when_built() -> None:
    rng = np.random.default_rng(0)
    M = (rng.normal(size=(40, 6)) @ rng.normal(size=(6, 80))).astype(np.float32)
    split = _split(40, 20, seed=1)
    with pytest.raises(ParameterError, match=r"^The 'device' parameter of adacur_round_trace must be"):
        widgets.round_explorer(M, split, budgets=[20], rounds=[2], device="gpu")
    with pytest.raises(ParameterError, match=r"^The 'device' parameter of axn_round_trace must be"):
        widgets.axn_explorer(M, rng.normal(size=(80, 6)), [3], budgets=[20], lambdas=[0.0],
                             u_param=rng.normal(size=(40, 6)), device="gpu")
