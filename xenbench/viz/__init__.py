"""Layer 5, presentation: ``plots`` (pure builders returning plotly Figures) and ``widgets`` (thin ipywidgets
wrappers over the same functions)."""
from __future__ import annotations

from xenbench._lazy import submodules

__getattr__, __dir__ = submodules(__name__, {m: m for m in ("plots", "widgets")})
