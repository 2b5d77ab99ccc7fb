"""Checksums of model weights: a corrupted or swapped weights file is refused, never scored.

A xenbench model folder holds ``checksums.json``, written when the folder is saved::

    {"files": {"trained.safetensors": "<sha256>"},
     "backbone": {"path": "bundled", "files": {"model.safetensors": "<sha256>"}}}

:func:`verify` recomputes every digest when the folder is loaded and raises one :class:`DataError` naming the
file that differs. The backbone's digest catches a different or damaged backbone install (the trained tensors
are only the part of the model that training changed).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from xenbench._io import write_text_atomic
from xenbench.errors import DataError

__all__ = ["CHECKSUMS_NAME", "file_sha256", "record", "verify"]

CHECKSUMS_NAME = "checksums.json"
_BACKBONE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _backbone_files(backbone: Path) -> list[str]:
    return [name for name in _BACKBONE_WEIGHTS if (backbone / name).is_file()]


def record(folder: str | os.PathLike[str], files: Iterable[str], backbone: str | os.PathLike[str] | None,
           backbone_name: str | None = None) -> Path:
    """Write ``folder/checksums.json`` with the SHA-256 of ``files`` (names inside ``folder``) and of the
    backbone folder's weight files; ``backbone_name`` is how the config names the backbone (e.g. "bundled")."""
    folder = Path(folder)
    doc: dict = {"files": {name: file_sha256(folder / name) for name in files}}
    if backbone is not None:
        b = Path(backbone)
        doc["backbone"] = {"path": backbone_name or str(b), "files": {n: file_sha256(b / n) for n in _backbone_files(b)}}
    return write_text_atomic(folder / CHECKSUMS_NAME, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def verify(folder: str | os.PathLike[str], backbone: str | os.PathLike[str] | None) -> None:
    """Check every recorded digest of ``folder`` (and of the backbone folder, if recorded).

    Raises
    ------
    DataError
        ``checksums.json`` missing or unreadable, a file missing, or a digest that differs: naming the file.
    """
    folder = Path(folder)
    path = folder / CHECKSUMS_NAME
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        files = dict(doc["files"])
    except FileNotFoundError:
        raise DataError(path, "missing: the weights cannot be verified (a folder made by hand or by an older "
                              "xenbench? record its checksums: xb.loading.record_checksums(FOLDER), docs/MODELS.md)"
                        ) from None
    except (ValueError, KeyError, TypeError) as err:
        raise DataError(path, f"unreadable checksums ({err})") from None
    for name, digest in files.items():
        _check(folder / name, digest, "is corrupted or was replaced: its SHA-256 differs from the one recorded "
                                      f"when the model was saved (in {path}; replaced on purpose? record the "
                                      "folder's checksums again: xb.loading.record_checksums(FOLDER), docs/MODELS.md)")
    recorded = doc.get("backbone")
    if recorded and backbone is not None:
        for name, digest in dict(recorded.get("files", {})).items():
            _check(Path(backbone) / name, digest, "differs from the backbone this model was trained on (SHA-256): "
                                                  "install the same backbone version")


def _check(path: Path, digest: str, problem: str) -> None:
    if not path.is_file():
        raise DataError(path, "missing (listed in checksums.json)")
    if file_sha256(path) != digest:
        raise DataError(path, problem)
