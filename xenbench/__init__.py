"""xenbench: a workbench for k-NN search with cross-encoders.

Submodules load on first access (``xb.data``, ``xb.plots``, ...) so ``import xenbench`` stays cheap.
"""
from __future__ import annotations

import logging
import os

# faiss's loader logs, at INFO, each CPU variant it fails to import before the one it loads ("Could not load library
# with AVX512 support due to: ModuleNotFoundError(...)"): noise in the terminal and in every report of a notebook that
# logs at INFO (05, 07), never a problem. Set here, before any submodule imports faiss (methods.pefa, studies.ccsa,
# studies.compare); a user's own setting of that logger wins.
if logging.getLogger("faiss.loader").level == logging.NOTSET:
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)

# OpenMP threads (torch, faiss) spin while they wait for each other. When another process holds a
# core, that spinning made small batched solves ~1000x slower on a 2-core machine (ADACUR/AXN rounds
# 25x slower end to end); passive waiting costs ~5% when the machine is idle. It must be set before
# the OpenMP runtime loads, i.e. before the first submodule imports torch; a user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

# The layers (ARCHITECTURE.md), and each public module of layers 0-3 and 5 by its short name: ``xb.ccsa`` is
# ``xenbench.methods.ccsa``; the subpackages and entry points too. Of layer 4 only ``xb.findings``: a notebook's
# driver is always ``xb.studies.<name>`` (four of them, adacur, axn, pefa, ccsa, share their paper's name with the
# method, and ``xb.<name>`` is the method). tests/test_architecture.py checks this list against the package.
_SUBMODULES: dict[str, str] = {
    "data": "data", "models": "models", "methods": "methods", "studies": "studies", "viz": "viz",
    "errors": "errors", "metrics": "metrics", "sampling": "sampling", "integrity": "integrity", "provenance": "provenance",
    "harness": "harness", "sweep": "sweep", "cli": "cli",
    "datasets": "data.datasets", "readers": "data.readers", "beir": "data.beir", "zeshel": "data.zeshel",
    "sources": "data.sources", "store": "data.store", "wordnet": "data.wordnet", "trec": "data.trec",
    "crossencoder": "models.crossencoder", "pairs": "models.pairs", "loading": "models.loading",
    "scoring": "models.scoring", "packed": "models.packed", "jobs": "models.jobs", "distributed": "models.distributed",
    "cache": "models.cache", "fingerprint": "models.fingerprint", "probe": "models.probe",
    "retrievers": "models.retrievers", "linking": "models.linking", "train": "models.train",
    "scorers": "models.scorers", "references": "models.references", "templates": "models.templates",
    "ce_check": "models.ce_check", "first_stages": "models.first_stages",
    "adacur": "methods.adacur", "axn": "methods.axn", "baselines": "methods.baselines", "ccsa": "methods.ccsa",
    "cur": "methods.cur", "mf": "methods.mf", "pefa": "methods.pefa",
    "trace": "methods.trace", "gar": "methods.gar",
    "findings": "studies.findings",
    "plots": "viz.plots", "widgets": "viz.widgets",
}

from xenbench._lazy import submodules  # noqa: E402  (after OMP_WAIT_POLICY, which must come first)

__getattr__, __dir__ = submodules(__name__, _SUBMODULES)
