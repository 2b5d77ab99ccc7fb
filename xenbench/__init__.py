"""xenbench: a workbench for k-NN search with cross-encoders.

Submodules load on first access (``xb.data``, ``xb.plots``, ...) so ``import xenbench`` stays cheap.
"""
from __future__ import annotations

import importlib
import os

# OpenMP threads (torch, faiss) spin while they wait for each other. When another process holds a
# core, that spinning made small batched solves ~1000x slower on a 2-core machine (ADACUR/AXN rounds
# 25x slower end to end); passive waiting costs ~5% when the machine is idle. It must be set before
# the OpenMP runtime loads, i.e. before the first submodule imports torch; a user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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
