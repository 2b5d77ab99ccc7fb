"""Interactive controls for notebooks: thin ipywidgets wrappers around the static cells' functions.

No logic lives here: every widget calls the notebook's driver (:mod:`xenbench.studies.adacur`,
:mod:`xenbench.studies.axn`) and :mod:`xenbench.viz.plots` with
the values of its controls and shows the figure they return, so what a reader explores is exactly
what the static cells compute. ipywidgets and plotly's ``FigureWidget`` (which needs ``anywidget``)
are imported only when a widget is built.

An explorer is drawn for its initial values when it is built. Under papermill the controls receive no
events, and an HTML report cannot run them: each explorer therefore also carries a static snapshot of its
initial figure (``text/html`` beside the live widget view; reports keep only the snapshot).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xenbench._markup import escape
from xenbench.studies.protocol import Split
from xenbench.studies import adacur as adacur_study
from xenbench.studies import axn as axn_study
from xenbench.viz.plots import adacur as adacur_plots

__all__ = ["Explorer", "axn_explorer", "round_explorer"]

_LIVE_NOTE = ("<p><i>Static snapshot of the explorer's initial figure: open the notebook in JupyterLab to change "
              "the controls.</i></p>")


class Explorer:
    """Controls over a live figure, displayed as the widget in JupyterLab and as a static snapshot elsewhere.

    Attributes
    ----------
    widget : ipywidgets.VBox
        Rows of controls, a status line, and the ``go.FigureWidget`` (last child).
    snapshot : plotly.graph_objects.Figure
        The figure for the initial values (what the widget shows before any change).
    """

    def __init__(self, widget: Any, snapshot: Any) -> None:
        self.widget, self.snapshot = widget, snapshot

    @property
    def children(self) -> tuple[Any, ...]:
        return self.widget.children

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = _LIVE_NOTE + self.snapshot.to_html(full_html=False, include_plotlyjs=False)
        return bundle



def _figure_view() -> tuple[Any, Callable[[Any], None]]:
    """An empty ``go.FigureWidget`` and a function that redraws a figure in it."""
    import plotly.graph_objects as go

    view = go.FigureWidget()

    return view, lambda new: _figure_view_show(view, new)


def _query_picker(rows: Sequence[int], query_labels: Sequence[str] | None, value: int | None) -> Any:
    import ipywidgets as widgets

    def label(r: int) -> str:
        text = f"row {r}"
        if query_labels is not None:
            q = str(query_labels[r])
            text += ": " + (q if len(q) <= 70 else q[:67] + "...")
        return text

    return widgets.Dropdown(options=[(label(int(r)), int(r)) for r in rows],
                            value=int(rows[0] if value is None else value), description="query",
                            layout=widgets.Layout(width="480px"))


def _explorer(rows: Sequence[Sequence[Any]], draw: Any, status: Any, figure: Callable[[], Any]) -> Explorer:
    """Controls in ``rows`` (then ``draw``) over a FigureWidget drawn now with ``figure()`` and redrawn on change."""
    import ipywidgets as widgets

    controls = [c for row in rows for c in row]
    view = _redraw_on_change(controls, draw, status, figure)
    snapshot = figure()
    _figure_view_show(view, snapshot)
    box = widgets.VBox([*(widgets.HBox(list(row)) for row in rows[:-1]), widgets.HBox([*rows[-1], draw]), status, view])
    return Explorer(box, snapshot)


def _figure_view_show(view: Any, new: Any) -> None:
    with view.batch_update():
        view.data = ()
        view.add_traces(list(new.data))
        view.layout = new.layout


def _redraw_on_change(controls: Sequence[Any], draw: Any, status: Any, figure: Callable[[], Any]) -> Any:
    """Wire the controls and the draw button to redraw ``figure()`` in a FigureWidget; returns the view."""
    view, show = _figure_view()

    def update(_: Any = None) -> None:
        try:
            status.value = "<i>computing...</i>"
            show(figure())
            status.value = ""
        except Exception as exc:  # a bad combination (e.g. more rounds than anchors): say so, keep the figure
            status.value = f"<span style='color:#c00'>{escape(f'{type(exc).__name__}: {exc}')}</span>"

    for control in controls:
        control.observe(update, names="value")
    draw.on_click(update)
    return view


def axn_explorer(M: np.ndarray, V: np.ndarray, rows: Sequence[int], *, budgets: Sequence[int],
                 lambdas: Sequence[float], u_param: np.ndarray, candidates: np.ndarray | None = None,
                 n_rounds: int = 5, query_labels: Sequence[str] | None = None,
                 item_labels: Sequence[str] | None = None, seed: int = 0, value: dict[str, Any] | None = None,
                 device: str = "auto") -> Any:
    """Controls (query, λ, budget, first round) over AXN's per-round scatter.

    Each change calls :func:`xenbench.methods.axn.round_trace` and :func:`xenbench.viz.plots.adacur.round_scatter`,
    as the notebook's static cell does.

    Parameters
    ----------
    M, V
        Exact CE scores (n_queries, n_items) and item embeddings (n_items, d).
    rows : sequence of int
        Rows of M offered by the query picker.
    budgets, lambdas
        Choices of B_CE and λ.
    u_param : ndarray of shape (n_queries, d)
        Parametric embedding of every row.
    candidates : int ndarray of shape (n_queries, >= B_CE / R), optional
        A retriever's ranking per row; offers a "retriever" first round.
    value : dict, optional
        Initial values: keys ``query_row``, ``lam``, ``budget``, ``first_round`` ("random" or "retriever").
    device : str, default "auto"
        Torch device of every redraw's search (passed to :func:`xenbench.studies.axn.axn_round_trace`).
    """
    import ipywidgets as widgets

    value = dict(value or {})
    query = _query_picker(list(rows), query_labels, value.get("query_row"))
    lam = widgets.SelectionSlider(options=[float(x) for x in lambdas], value=float(value.get("lam", lambdas[0])),
                                  description="λ")
    budget = widgets.Dropdown(options=[int(b) for b in budgets], value=int(value.get("budget", budgets[0])),
                              description="B_CE")
    first = widgets.Dropdown(options=["random"] + (["retriever"] if candidates is not None else []),
                             value=value.get("first_round", "random"), description="round 1")
    draw = widgets.Button(description="draw", tooltip="redraw the figure for the values above", icon="refresh")
    status = widgets.HTML("")

    def figure() -> Any:
        row = query.value
        trace = axn_study.axn_round_trace(M, V, row, budget=budget.value, n_rounds=n_rounds, lam=lam.value,
                                          u_param=u_param[row],
                                          candidates=candidates[row] if first.value == "retriever" else None,
                                          seed=seed, device=device)
        return adacur_plots.round_scatter(trace, item_labels=item_labels, y_title="AXN retrieval score u_qᵀv_i",
                                          diagonal=False,
                                          title=f"Row {row}: AXN, λ = {lam.value:g}, B_CE = {budget.value}")

    return _explorer([[query, lam], [budget, first]], draw, status, figure)


def round_explorer(M: np.ndarray, split: Split, *, budgets: Sequence[int],
                   rounds: Sequence[int] = (1, 2, 5, 10), samplers: Sequence[str] = ("topk", "softmax", "random"),
                   query_rows: Sequence[int] | None = None, query_labels: Sequence[str] | None = None,
                   item_labels: Sequence[str] | None = None, anchor_fractions: Sequence[float | None] = (None, 0.5),
                   seed: int = 0, value: dict[str, Any] | None = None, device: str = "auto") -> Any:
    """Controls (query, sampler, budget, rounds, split) over :func:`xenbench.viz.plots.adacur.round_scatter`.

    Each change (or the "draw" button) calls :func:`xenbench.studies.adacur.adacur_round_trace` with the
    controls' values, exactly as the notebook's static cell does, and redraws the scatter. The figure
    is drawn on the first event, not when the widget is built (see :func:`_figure_view`).

    Parameters
    ----------
    M, split
        As in :func:`xenbench.studies.adacur.adacur_round_trace`.
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
    device : str, default "auto"
        Torch device of every redraw's search (passed to :func:`xenbench.studies.adacur.adacur_round_trace`).

    Returns
    -------
    Explorer
        The controls above the figure, drawn for the initial values; a static snapshot for reports.
    """
    import ipywidgets as widgets

    rows = list(split.test[:50] if query_rows is None else query_rows)
    value = dict(value or {})
    query = _query_picker(rows, query_labels, value.get("query_row"))
    sampler = widgets.Dropdown(options=list(samplers), value=value.get("sampler", samplers[0]), description="sampler")
    budget = widgets.Dropdown(options=[int(b) for b in budgets], value=int(value.get("budget", budgets[0])),
                              description="B_CE")
    n_rounds = widgets.Dropdown(options=[int(r) for r in rounds], value=int(value.get("n_rounds", rounds[-1])),
                                description="rounds")
    # A Dropdown shows a blank for the value None: No-Split gets a key of its own.
    fractions = {("none" if f is None else f"{f:g}"): f for f in anchor_fractions}
    start = value.get("anchor_fraction", anchor_fractions[0])
    split_choice = widgets.Dropdown(
        options=[("No-Split" if f is None else f"k_i = {f:.0%} of B_CE", key) for key, f in fractions.items()],
        value="none" if start is None else f"{start:g}", description="anchors")
    draw = widgets.Button(description="draw", tooltip="redraw the figure for the values above", icon="refresh")
    status = widgets.HTML("")

    def figure() -> Any:
        trace = adacur_study.adacur_round_trace(M, split, query.value, budget=budget.value, n_rounds=n_rounds.value,
                                   sampler=sampler.value, anchor_fraction=fractions[split_choice.value], seed=seed,
                                   device=device)
        return adacur_plots.round_scatter(trace, item_labels=item_labels)

    return _explorer([[query, sampler], [budget, n_rounds, split_choice]], draw, status, figure)
