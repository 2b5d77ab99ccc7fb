"""The slow witness cells, computed once per pytest process and shared by ``findings --verify``
(tests/test_witnesses.py) and the tamper tests that re-verify copies of the same committed files (tests/test_tamper.py).

A tampered or trimmed copy differs from the committed file in committed values only, never in what its witnesses
compute from (the stores, datasets and models, and today's code): the cells computed for the committed file serve it.
Calls are keyed by the value of their arguments (a digest of their pickle, arrays' bytes included), not their
identity, since each verify loads its inputs afresh; two calls that differ in any argument are two computations.
Functions whose result is one part per element of a list argument (a dataset, a (λ, B) setting) are memoized per
element, so a copy trimmed to one element reuses that element's cells. A test that changes the code under a witness (a
method constant) must see that code's result: it does not use :func:`share_cells`.
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import pytest

_STORE: dict[tuple[str, str], Any] = {}


def _memo(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        key = (name, hashlib.sha256(pickle.dumps((args, sorted(kwargs.items())), protocol=5)).hexdigest())
        if key not in _STORE:
            _STORE[key] = fn(*args, **kwargs)
        return copy.deepcopy(_STORE[key])  # a caller that edits its tables must not edit the next caller's

    return call


def _per_element(name: str, fn: Callable[..., Any], position: int, join: Callable[[list], Any]) -> Callable[..., Any]:
    """``fn`` whose result joins independent parts, one per element of its argument at ``position``."""
    one = _memo(name, fn)

    def call(*args: Any, **kwargs: Any) -> Any:
        elements = list(args[position])
        if not elements:
            return fn(*args, **kwargs)
        return join([one(*args[:position], [e], *args[position + 1:], **kwargs) for e in elements])

    return call


def _tables(parts: list[tuple[pd.DataFrame, ...]]) -> tuple[pd.DataFrame, ...]:
    return tuple(pd.concat(column, ignore_index=True) for column in zip(*parts))


def _sweeps(parts: list[tuple[pd.DataFrame, dict]]) -> tuple[pd.DataFrame, dict]:
    return pd.concat([p[0] for p in parts], ignore_index=True), {k: v for p in parts for k, v in p[1].items()}


#: (module, function, the list argument computed per element or None, how the parts join): the witnesses' slowest
#: computations that a tamper test repeats. baseline_metrics fits each first stage per dataset; balance_sweep trains one
#: CCSA per (λ, B) from the same seed.
SHARED: Sequence[tuple[str, str, int | None, Callable[[list], Any] | None]] = (
    ("xenbench.studies.stats", "baseline_metrics", 0, _tables),
    ("xenbench.studies.pefa", "tune_and_test", None, None),
    ("xenbench.studies.ccsa", "balance_sweep", 3, _sweeps),
)


def share_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route the witnesses' calls of :data:`SHARED` through this process's store for the current test."""
    for module_name, name, position, join in SHARED:
        module = importlib.import_module(module_name)
        fn = getattr(module, name)
        key = f"{module_name}.{name}"
        monkeypatch.setattr(module, name, _memo(key, fn) if position is None else _per_element(key, fn, position, join))
