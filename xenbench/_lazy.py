"""Submodules that load on first attribute access, so importing a package stays cheap (no torch, faiss, plotly)."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType


def submodules(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], ModuleType], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose attribute ``name`` is the module ``names[name]`` (a dotted
    path relative to ``package``), imported on first access."""

    def __getattr__(name: str) -> ModuleType:
        if name in names:
            return importlib.import_module(f"{package}.{names[name]}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(importlib.import_module(package).__dict__) | set(names))

    return __getattr__, __dir__
