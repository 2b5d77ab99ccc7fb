"""Shared look of every xenbench figure."""
from __future__ import annotations

import plotly.graph_objects as go

TEMPLATE = "plotly_white"


def _style(fig: go.Figure, title: str | None, height: int | None) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, height=height, legend_title_text="")
    return fig


def _facet_titles(fig: go.Figure, name: str) -> go.Figure:
    """Facet titles "k = 10" instead of plotly's "k=10"."""
    fig.for_each_annotation(lambda a: a.update(text=a.text.replace(f"{name}=", f"{name} = ")))
    return fig
