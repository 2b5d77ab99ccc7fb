"""Shared look of every xenbench figure."""
from __future__ import annotations

import plotly.graph_objects as go

TEMPLATE = "plotly_white"


def _style(fig: go.Figure, title: str | None, height: int | None) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, height=height, legend_title_text="")
    return fig
