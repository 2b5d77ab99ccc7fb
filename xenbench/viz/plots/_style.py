"""Shared look of every xenbench figure."""
from __future__ import annotations

import hashlib

import plotly.graph_objects as go

TEMPLATE = "plotly_white"

# One colour per method label, the same in every figure of every notebook.
METHOD_COLORS = {
    "ANNCUR": "#7f7f7f",
    "ANNCUR DE": "#8c564b",
    "ADACUR TopK": "#1f77b4",
    "ADACUR SoftMax": "#17becf",
    "ADACUR TopK No-Split": "#d62728",
    "ADACUR DE+TopK No-Split": "#9467bd",
    "DE re-rank": "#2ca02c",
    "TF-IDF re-rank": "#bcbd22",
}
# Labels not listed above (AXN, PEFA and user-defined variants) get a colour derived from the label itself,
# so a method keeps its colour from one figure to the next whatever else is plotted.
_PALETTE = ["#e377c2", "#ff7f0e", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d",
            "#31a354", "#756bb1", "#636363", "#ad494a", "#5254a3", "#8ca252", "#bd9e39"]


def method_color(name: str) -> str:
    """The colour of a method label: fixed for the known methods, else a stable hash of the label."""
    if name in METHOD_COLORS:
        return METHOD_COLORS[name]
    return _PALETTE[int(hashlib.md5(name.encode("utf-8")).hexdigest(), 16) % len(_PALETTE)]


def _style(fig: go.Figure, title: str | None, height: int | None) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, height=height, legend_title_text="")
    return fig


def _facet_titles(fig: go.Figure, name: str) -> go.Figure:
    """Facet titles "k = 10" instead of plotly's "k=10"."""
    fig.for_each_annotation(lambda a: a.update(text=a.text.replace(f"{name}=", f"{name} = ")))
    return fig
