"""The one table of notebooks: each notebook's driver, its findings topic, and the three functions that read its
results file, registered by the modules that define them.

A row (:class:`Notebook`) names the ``studies/`` module the notebook runs (``xb.studies.<driver>``, ARCHITECTURE.md's
driver table), the module of its conclusions (``studies/findings/<topic>.py``) and, once registered, its functions
over a results mapping, one per :data:`KINDS`:

* ``findings`` (:func:`xenbench.studies.findings.register`): the conclusions stated from its results;
* ``records`` (:func:`xenbench.studies.records.register`): every summary re-derived from the raw records in the file;
* ``witnesses`` (:func:`xenbench.studies.witnesses.register`): cells recomputed from the stores with today's code.

A new notebook is a row here and a function of each kind (ARCHITECTURE.md, "What a notebook is made of");
``tests/test_architecture.py`` checks that every row has all three.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xenbench.errors import ParameterError

__all__ = ["KINDS", "NOTEBOOKS", "Notebook", "register", "registered"]

#: The functions a notebook registers, each over its results: conclusions, re-derivations, witnesses.
KINDS: tuple[str, ...] = ("findings", "records", "witnesses")
#: The module whose import registers each kind's functions.
_REGISTRARS = {"findings": "xenbench.studies.findings", "records": "xenbench.studies.records",
               "witnesses": "xenbench.studies.witnesses"}


@dataclass
class Notebook:
    """One notebook: ``name`` (``NN_topic``), its ``driver`` (``xb.studies.<driver>``), its findings ``topic``
    (``studies/findings/<topic>.py``) and its registered ``functions`` (kind -> function of the results mapping)."""

    name: str
    driver: str
    topic: str
    functions: dict[str, Callable[..., Any]] = field(default_factory=dict)


#: Notebook name -> its row, in notebook order: the one table of notebooks.
NOTEBOOKS: dict[str, Notebook] = {nb.name: nb for nb in (
    Notebook("00_data", "stats", "data"),
    Notebook("01_score_matrices", "stats", "scores"),
    Notebook("02_rank_cls_vs_emb", "rank", "rank"),
    Notebook("03_adacur_rounds", "adacur", "adacur"),
    Notebook("04_axn_lambda", "axn", "axn"),
    Notebook("05_pefa_lambda", "pefa", "pefa"),
    Notebook("06_ccsa_balance", "ccsa", "ccsa"),
    Notebook("07_compare_methods", "compare", "compare"),
)}


def register(kind: str, notebook: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``fn(results)`` is ``notebook``'s function of ``kind`` (one of :data:`KINDS`).

    Raises
    ------
    ParameterError
        For a kind not in :data:`KINDS` or a notebook not in :data:`NOTEBOOKS` (add its row first).
    """
    if kind not in KINDS:
        raise ParameterError("kind", f"one of {KINDS}", kind, "notebooks.register")
    if notebook not in NOTEBOOKS:
        raise ParameterError("notebook", f"a notebook of the table ({', '.join(NOTEBOOKS)})", notebook,
                             "notebooks.register")

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        NOTEBOOKS[notebook].functions[kind] = fn
        return fn

    return wrap


def registered(kind: str) -> dict[str, Callable[..., Any]]:
    """Notebook name -> its function of ``kind``, for the notebooks that registered one (importing the modules that
    register them first)."""
    if kind not in KINDS:
        raise ParameterError("kind", f"one of {KINDS}", kind, "notebooks.registered")
    module = importlib.import_module(_REGISTRARS[kind])
    getattr(module, "_load_modules", lambda: None)()
    return {name: nb.functions[kind] for name, nb in NOTEBOOKS.items() if kind in nb.functions}
