"""xenbench: a workbench for k-NN search with cross-encoders.

Submodules load on first access (``xb.data``, ``xb.plots``, ...) so ``import xenbench`` stays cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = {
    "adacur", "axn", "ccsa", "cli", "crossencoder", "cur", "data", "errors", "experiments", "findings", "linking", "metrics", "mf",
    "notebook", "pefa", "plots", "rank", "retrievers", "scoring", "stats", "store", "train", "widgets", "wordnet",
}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"xenbench.{name}")
    raise AttributeError(f"module 'xenbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBMODULES)
