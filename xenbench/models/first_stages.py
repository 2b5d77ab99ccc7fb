"""How a first stage is named: ``"de"``, ``"tfidf"``, ``"bm25"`` or ``"run:<path>"`` (a TREC run file).

Apart from the retrievers themselves (:mod:`xenbench.models.retrievers`, which build what a name names) so that checking
a notebook's parameters before its kernel starts imports no torch, transformers or scikit-learn.
"""
from __future__ import annotations

from pathlib import Path

from xenbench.errors import ParameterError

__all__ = ["FIRST_STAGES", "check_first_stage", "first_stage_label", "run_path"]

#: The named first stages besides a run file, and how figures and tables name each.
FIRST_STAGES: dict[str, str] = {"de": "DE", "tfidf": "TF-IDF", "bm25": "BM25"}
_FIRST_STAGE_FORMS = "'de', 'tfidf', 'bm25' or 'run:<path of a TREC run file>'"


def check_first_stage(spec: object, name: str = "first_stage", owner: str | None = None) -> str:
    """``spec`` if it names a first stage (:data:`FIRST_STAGES` or ``"run:<path>"``), else a ParameterError naming
    the parameter ``name``. The run file itself is read by :func:`make_retriever` (and checked before a notebook's
    kernel starts, :func:`xenbench.data.trec.check_run`)."""
    if isinstance(spec, str) and (spec in FIRST_STAGES or (spec.startswith("run:") and spec[4:].strip())):
        return spec
    raise ParameterError(name, _FIRST_STAGE_FORMS, spec, owner)


def run_path(spec: str) -> Path | None:
    """The file of a ``"run:<path>"`` first stage (``~`` expanded), or None for a named one."""
    return Path(spec[4:]).expanduser() if spec.startswith("run:") else None


def first_stage_label(spec: str) -> str:
    """How tables name a first stage: ``"DE"``, ``"TF-IDF"``, ``"BM25"``, or ``"run <file name>"`` for a run file."""
    path = run_path(check_first_stage(spec))
    if path is None:
        return FIRST_STAGES[spec]
    name = path.name.removesuffix(".gz")
    for suffix in (".trec", ".run", ".txt", ".tsv"):
        name = name.removesuffix(suffix)
    return f"run {name}"
