"""A cross-encoder's fingerprint, computed once per run, and the CE loaded once per process.

The fingerprint (:func:`model_fingerprint`, the SHA-256 of a CE's config and of every weight) keys the score cache
(:func:`xenbench.models.scoring.cache_path`) and guards a resumed score store. Computing it means loading the CE
(which verifies its checksums) and hashing every weight. A notebook run with ``model`` needs it in two processes:
``xenbench run`` plans the scoring before the kernel starts (is the sample cached? how long if not?), then the
kernel opens the cache. So:

* :func:`load_shared` keeps the last CE it loaded in this process (one: a run has one user CE) and returns the same
  object while its files are unchanged, so a kernel that scores with it and then times it loads it once;
* :func:`folder_fingerprint` computes a folder's fingerprint once per process, and :func:`fingerprints_env` hands the
  ones computed here to a child process (the notebook's kernel) through the environment variable
  :data:`FINGERPRINTS_ENV`. Every entry carries a digest of the size and modification time of each file the CE is
  loaded from (its backbone's too); a process uses an entry only while they are unchanged, else it loads and hashes.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from xenbench.provenance import record_input

if TYPE_CHECKING:  # torch and transformers load on first use: run_notebook asks fingerprints_env() on every run
    from xenbench.models.crossencoder import CrossEncoder

__all__ = ["FINGERPRINTS_ENV", "model_fingerprint", "folder_fingerprint", "load_shared", "release_shared",
           "fingerprints_env"]

#: Environment variable through which a process hands the fingerprints it computed to its children (a JSON list of
#: ``{"path", "files", "fingerprint"}``): :func:`xenbench.harness.runner.run_notebook` sets it for the kernel.
FINGERPRINTS_ENV = "XENBENCH_CE_FINGERPRINTS"

# resolved path -> (files digest, fingerprint), computed or received in this process
_FINGERPRINTS: dict[str, tuple[str, str]] = {}
# the last CE load_shared loaded: (resolved path, files digest, the CE)
_SHARED: tuple[str, str, CrossEncoder] | None = None


def model_fingerprint(ce: CrossEncoder) -> str:
    """SHA-256 of the CE's config and every parameter/buffer: what resuming a store checks."""
    import torch

    h = hashlib.sha256(ce.config.to_json().encode())
    for name, tensor in sorted(ce.model.state_dict().items()):
        h.update(name.encode())
        t = tensor.detach().contiguous().cpu().reshape(-1)
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).numpy())
    return h.hexdigest()


def _sources(path: Path) -> list[Path]:
    """The file or folders a CE at ``path`` is loaded from: itself, and a xenbench folder's backbone."""
    from xenbench.models.crossencoder import CONFIG_NAME, bundled_backbone

    out = [path]
    config = path / CONFIG_NAME
    if config.is_file():
        try:
            backbone = json.loads(config.read_text(encoding="utf-8")).get("backbone", "bundled")
        except (ValueError, AttributeError, OSError):  # a malformed config: the load names it
            return out
        out.append(bundled_backbone() if backbone == "bundled" else Path(backbone))
    return out


def _files_digest(path: Path) -> str:
    """SHA-256 of the relative path, size and modification time (ns) of every file the CE is loaded from: cheap to
    recompute, and changed by any rewrite of a weight or config file."""
    h = hashlib.sha256()
    for k, source in enumerate(_sources(path)):
        files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
        for f in files:
            st = f.stat()
            h.update(f"{k}\t{f.relative_to(source).as_posix() if f != source else ''}\t{st.st_size}\t"
                     f"{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def load_shared(path: str | os.PathLike[str]) -> CrossEncoder:
    """:func:`~xenbench.models.crossencoder.load_cross_encoder` of ``path``, once per process: the same CE object is
    returned again while its files are unchanged (only the last CE loaded is kept).

    Scoring moves a CE to a device and back, leaving it as it was; do not train the returned object in place.
    """
    from xenbench.models.crossencoder import load_cross_encoder

    global _SHARED
    resolved = Path(path).expanduser().resolve()
    key, files = str(resolved), _files_digest(resolved)
    if _SHARED is not None and _SHARED[:2] == (key, files):
        record_input("model", resolved)
        return _SHARED[2]
    _SHARED = None  # the previous CE goes before the next one loads: one model in memory
    ce = load_cross_encoder(resolved)
    _SHARED = (key, files, ce)
    return ce


def release_shared() -> None:
    """Forget the CE :func:`load_shared` keeps: its memory is freed once nothing else holds it (``xenbench run`` drops
    it after planning, before the kernel loads its own)."""
    global _SHARED
    _SHARED = None


def _received(key: str, files: str) -> str | None:
    try:
        entries = json.loads(os.environ.get(FINGERPRINTS_ENV) or "[]")
    except ValueError:
        return None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("path") == key and entry.get("files") == files:
            return str(entry.get("fingerprint"))
    return None


def folder_fingerprint(path: str | os.PathLike[str]) -> str:
    """:func:`model_fingerprint` of the CE at ``path``, computed at most once per run.

    Taken from this process's earlier result or from the parent's (:data:`FINGERPRINTS_ENV`) while the CE's files
    are unchanged; else the CE is loaded (:func:`load_shared`) and hashed. Either way the folder is recorded as an
    input of the run (:func:`xenbench.provenance.record_input`), as loading it would.
    """
    resolved = Path(path).expanduser().resolve()
    key, files = str(resolved), _files_digest(resolved)
    known = _FINGERPRINTS.get(key)
    fingerprint = known[1] if known is not None and known[0] == files else _received(key, files)
    if fingerprint is None:
        fingerprint = model_fingerprint(load_shared(resolved))
    _FINGERPRINTS[key] = (files, fingerprint)
    record_input("model", resolved)
    return fingerprint


def fingerprints_env() -> dict[str, str]:
    """The environment a child process needs to reuse the fingerprints computed in this one: ``{FINGERPRINTS_ENV:
    <JSON>}``, or ``{}`` when there are none."""
    if not _FINGERPRINTS:
        return {}
    entries = [{"path": k, "files": files, "fingerprint": fp} for k, (files, fp) in _FINGERPRINTS.items()]
    return {FINGERPRINTS_ENV: json.dumps(entries)}
