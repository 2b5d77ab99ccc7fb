"""Where a dataset comes from by name: the one-string specs of :func:`load_dataset` and the bundled WordNet-EL.

``load_dataset(spec)`` is the one entry point notebooks and the CLI pass strings to:

``"wordnet-el:<domain>"``
    A bundled domain, BEIR folders under ``data/wordnet-el/<domain>/`` (:func:`load_wordnet_el`).
``"beir:<folder>"``
    ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` (:func:`~xenbench.data.beir.load_beir`).
``"zeshel:<root>:<world>[@<split>,...]"``
    ``documents/<world>.json`` and ``mentions/<split>.json`` (:func:`~xenbench.data.zeshel.load_zeshel`).
"""
from __future__ import annotations

import os
from pathlib import Path

from xenbench._io import REPO_ROOT
from xenbench.data.beir import load_beir
from xenbench.data.datasets import Dataset
from xenbench.data.readers import require_dir
from xenbench.data.zeshel import load_zeshel
from xenbench.errors import ParameterError

__all__ = ["WORDNET_EL_ROOT", "load_dataset", "load_wordnet_el", "wordnet_el_domains"]

#: Where the bundled WordNet-EL domains live: ``<repo root>/data/wordnet-el``.
WORDNET_EL_ROOT: Path = REPO_ROOT / "data" / "wordnet-el"


def wordnet_el_domains(root: str | os.PathLike[str] | None = None) -> list[str]:
    """Names of the WordNet-EL domains under ``root`` (default :data:`WORDNET_EL_ROOT`), sorted."""
    base = Path(root) if root is not None else WORDNET_EL_ROOT
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / "corpus.jsonl").is_file())


def load_wordnet_el(domain: str, root: str | os.PathLike[str] | None = None) -> Dataset:
    """Load one bundled WordNet-EL domain, e.g. ``"noun.cognition"``.

    Parameters
    ----------
    domain
        A folder name under ``root``.
    root
        Folder of domain folders; default :data:`WORDNET_EL_ROOT` (``<repo>/data/wordnet-el``).

    Returns
    -------
    Dataset
        :func:`~xenbench.data.beir.load_beir` of ``root/domain``, named ``"wordnet-el:<domain>"``.

    Raises
    ------
    DataError
        If ``root`` does not exist or the domain's files are malformed.
    ParameterError
        If ``domain`` is not one of the available domains (they are listed).
    """
    base = require_dir(Path(root) if root is not None else WORDNET_EL_ROOT)
    available = wordnet_el_domains(base)
    if domain not in available:
        raise ParameterError("domain", f"one of {available}", domain, "load_wordnet_el")
    return load_beir(base / domain, name=f"wordnet-el:{domain}")


_SPEC_FORMS = "'wordnet-el:<domain>', 'beir:<folder>' or 'zeshel:<root>:<world>[@<split>,...]'"


def load_dataset(spec: str) -> Dataset:
    """Load a dataset from a one-string spec (what notebooks and the CLI pass around).

    Parameters
    ----------
    spec
        ``"wordnet-el:<domain>"`` (bundled, e.g. ``"wordnet-el:noun.cognition"``),
        ``"beir:<folder>"`` or ``"zeshel:<root>:<world>"`` (the world follows the last colon; every
        mention file found is read) or ``"zeshel:<root>:<world>@test,val"`` (only those splits).

    Returns
    -------
    Dataset

    Raises
    ------
    ParameterError
        If the spec has none of these forms.
    DataError
        From the loader.
    """
    kind, sep, rest = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if sep and rest:
        if kind == "wordnet-el":
            return load_wordnet_el(rest)
        if kind == "beir":
            return load_beir(rest)
        if kind == "zeshel":
            root, sep, world = rest.rpartition(":")
            world, at, names = world.partition("@")
            if sep and root and world and (names or not at):
                return load_zeshel(root, world, splits=names.split(",") if at else None)
    raise ParameterError("spec", _SPEC_FORMS, spec, "load_dataset")
