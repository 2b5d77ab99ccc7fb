"""xenbench: a workbench for k-NN search with cross-encoders."""
from __future__ import annotations

__version__ = "0.1.0"
