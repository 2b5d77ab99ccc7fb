"""Layer 4, studies: what the notebooks run and conclude, built from the methods.

``stats`` (notebook 01: score statistics), ``rank`` (02: [CLS]-CE vs [EMB]-CE rank), ``experiments`` (03-05:
budgets, rounds, λ selection), ``compare`` (07: every method side by side), ``corpus`` and ``splits`` (the
DE-embedded corpora and splits of 05/06), ``findings`` (each notebook's conclusions, generated from its results
JSON) and ``witnesses`` (a few cells of each committed result, re-derived with today's code).
"""
from __future__ import annotations

from xenbench._lazy import submodules

__getattr__, __dir__ = submodules(
    __name__, {m: m for m in ("compare", "corpus", "experiments", "findings", "rank", "splits", "stats", "witnesses")})
