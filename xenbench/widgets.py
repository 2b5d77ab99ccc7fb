"""Interactive controls for notebooks: thin ipywidgets wrappers around the static cells' functions.

No logic lives here: every widget calls :mod:`xenbench.experiments` and :mod:`xenbench.plots` with
the values of its controls and shows the figure they return, so what a reader explores is exactly
what the static cells compute. ipywidgets and plotly's ``FigureWidget`` (which needs ``anywidget``)
are imported only when a widget is built.

Under papermill the controls are displayed but receive no events; the static figures carry the
report.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xenbench import experiments
from xenbench.plots import adacur as adacur_plots

__all__ = ["round_explorer"]


def _figure_view() -> tuple[Any, Callable[[Any], None]]:
    """An empty ``go.FigureWidget`` and a function that redraws a figure in it.

    Nothing is drawn until the first call, so building the widget under papermill costs nothing.
    """
    import plotly.graph_objects as go

    view = go.FigureWidget()

    def show(new: Any) -> None:
        with view.batch_update():
            view.data = ()
            view.add_traces(list(new.data))
            view.layout = new.layout
    return view, show


def round_explorer(M: np.ndarray, split: experiments.QuerySplit, *, budgets: Sequence[int],
                   rounds: Sequence[int] = (1, 2, 5, 10), samplers: Sequence[str] = ("topk", "softmax", "random"),
                   query_rows: Sequence[int] | None = None, query_labels: Sequence[str] | None = None,
                   item_labels: Sequence[str] | None = None, anchor_fractions: Sequence[float | None] = (None, 0.5),
                   seed: int = 0, value: dict[str, Any] | None = None) -> Any:
    """Controls (query, sampler, budget, rounds, split) over :func:`xenbench.plots.adacur.round_scatter`.

    Each change (or the "draw" button) calls :func:`xenbench.experiments.round_trace` with the
    controls' values, exactly as the notebook's static cell does, and redraws the scatter. The figure
    is drawn on the first event, not when the widget is built (see :func:`_figure_view`).

    Parameters
    ----------
    M, split
        As in :func:`xenbench.experiments.round_trace`.
    budgets, rounds, samplers
        Choices of B_CE, N_r and sampler.
    query_rows : sequence of int, optional
        Test rows offered by the query picker (default the first 50 of ``split.test``).
    query_labels : sequence of str, optional
        Label of every row of M (e.g. the query text), shown in the picker.
    item_labels : sequence of str, optional
        Hover label of every item.
    anchor_fractions : sequence of float or None
        Choices of k_i / B_CE; None is No-Split.
    value : dict, optional
        Initial values: keys ``query_row``, ``sampler``, ``budget``, ``n_rounds``, ``anchor_fraction``.

    Returns
    -------
    ipywidgets.VBox
        The controls above the figure.
    """
    import ipywidgets as widgets

    rows = list(split.test[:50] if query_rows is None else query_rows)

    def label(r: int) -> str:
        text = f"row {r}"
        if query_labels is not None:
            q = str(query_labels[r])
            text += ": " + (q if len(q) <= 70 else q[:67] + "...")
        return text

    value = dict(value or {})
    query = widgets.Dropdown(options=[(label(int(r)), int(r)) for r in rows],
                             value=int(value.get("query_row", rows[0])), description="query",
                             layout=widgets.Layout(width="480px"))
    sampler = widgets.Dropdown(options=list(samplers), value=value.get("sampler", samplers[0]), description="sampler")
    budget = widgets.Dropdown(options=[int(b) for b in budgets], value=int(value.get("budget", budgets[0])),
                              description="B_CE")
    n_rounds = widgets.Dropdown(options=[int(r) for r in rounds], value=int(value.get("n_rounds", rounds[-1])),
                                description="rounds")
    split_choice = widgets.Dropdown(
        options=[("No-Split" if f is None else f"k_i = {f:.0%} of B_CE", f) for f in anchor_fractions],
        value=value.get("anchor_fraction", anchor_fractions[0]), description="anchors")
    draw = widgets.Button(description="draw", tooltip="draw the figure for the values above", icon="refresh")
    status = widgets.HTML("<i>Press draw or change a control to draw the figure (section 2 shows the default "
                          "configuration as a static figure).</i>")

    def figure() -> Any:
        trace = experiments.round_trace(M, split, query.value, budget=budget.value, n_rounds=n_rounds.value,
                                        sampler=sampler.value, anchor_fraction=split_choice.value, seed=seed)
        return adacur_plots.round_scatter(trace, item_labels=item_labels)

    view, show = _figure_view()

    def update(_: Any = None) -> None:
        try:
            status.value = "<i>computing...</i>"
            show(figure())
            status.value = ""
        except Exception as exc:  # a bad combination (e.g. more rounds than anchors): say so, keep the figure
            status.value = f"<span style='color:#c00'>{type(exc).__name__}: {exc}</span>"

    for control in (query, sampler, budget, n_rounds, split_choice):
        control.observe(update, names="value")
    draw.on_click(update)
    return widgets.VBox([widgets.HBox([query, sampler]), widgets.HBox([budget, n_rounds, split_choice, draw]), status,
                         view])
