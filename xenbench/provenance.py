"""Provenance of a run: what produced a results file (code, parameters, libraries, machine, inputs).

Every results file written by :func:`xenbench.harness.save_results` carries a ``provenance`` object::

    {"git": {"commit": "c791298...", "dirty": false},   # the checkout xenbench was imported from
     "xenbench": "0.1.0",
     "params": {...},                                     # the notebook's resolved parameters
     "packages": {"numpy": "2.3.1", "torch": "2.13.0", ...},
     "python": "3.12.3",
     "machine": {"device": "cpu", "gpu": null, "cpu": "AMD EPYC ...", "cores": 2, "torch_threads": 2},
     "inputs": [{"kind": "score store", "path": "data/scores/noun.cognition/cls-ce", "sha256": "..."}, ...]}

Inputs are recorded explicitly: each loader of the data layer and the models layer reports what it opened
(:func:`record_input`: score stores opened read-only, dataset folders and files, CE and DE model folders) to
this process's list, and :func:`collect` hashes them (SHA-256 of a file; of a folder, the SHA-256 of its
sorted ``relative path, file SHA-256`` lines). A notebook kernel is one process, so the list is exactly
what that run read. A tree with uncommitted changes (tracked files changed or untracked files not ignored)
is ``dirty``: its commit does not say what ran, and ``xenbench findings --write`` refuses such a file
(:func:`refusal`).
"""
from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from xenbench import __version__
from xenbench._io import REPO_ROOT, repo_relative
from xenbench.integrity import file_sha256

__all__ = ["PACKAGES", "record_input", "recorded_inputs", "clear_inputs", "content_sha256", "git_state",
           "run_git_state", "environment", "collect", "refusal", "summary"]

#: Distributions whose versions can change a number (``numba``: CCSA's kernel; faiss ships as faiss-cpu/-gpu).
PACKAGES: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",), "torch": ("torch",), "transformers": ("transformers",),
    "faiss": ("faiss-cpu", "faiss-gpu", "faiss"), "scikit-learn": ("scikit-learn",), "numba": ("numba",),
}

# (kind, resolved path) in the order first read; one entry per path.
_INPUTS: dict[Path, str] = {}


def record_input(kind: str, path: str | os.PathLike[str]) -> None:
    """Note that this process read ``path`` (a file or a folder) as an input of kind ``kind``.

    Called by the loaders (``ScoreStore.open``, ``load_beir``, ``load_zeshel``, ``load_cross_encoder``,
    ``DualEncoder``); the digest is computed later, by :func:`collect`.
    """
    _INPUTS.setdefault(Path(path).resolve(), kind)


def recorded_inputs() -> list[tuple[str, Path]]:
    """``(kind, path)`` of every input recorded in this process, in the order first read."""
    return [(kind, path) for path, kind in _INPUTS.items()]


def clear_inputs() -> None:
    """Forget the recorded inputs (a process that runs several studies in turn)."""
    _INPUTS.clear()


def content_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, or of a folder's content: its regular files (recursively), as sorted lines
    ``<relative path>\\t<file SHA-256>``, so a renamed, added, removed or changed file changes the digest."""
    path = Path(path)
    if path.is_file():
        return file_sha256(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(path).as_posix()}\t{file_sha256(f)}\n".encode())
    return h.hexdigest()


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(root: str | os.PathLike[str] = REPO_ROOT) -> dict[str, Any]:
    """``{"commit": <full hash> | None, "dirty": bool | None}`` of the git checkout at ``root``.

    ``dirty`` is True when a tracked file differs from the commit or an untracked file is not ignored (either
    could change what runs); both are None outside a git checkout (an installed wheel) or without git.
    """
    commit = _git(Path(root), "rev-parse", "HEAD")
    status = _git(Path(root), "status", "--porcelain") if commit else None
    if commit is None or status is None:
        return {"commit": None, "dirty": None}
    return {"commit": commit.strip(), "dirty": bool(status.strip())}


def _version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """Versions of xenbench, Python and :data:`PACKAGES`, and the machine: the device ``"auto"`` resolves to
    (:func:`xenbench._device.resolve_device`), the GPU's name, the CPU model, its core count and torch's threads."""
    from xenbench._device import resolve_device  # imports torch: only when a run is recorded

    import torch

    device = resolve_device("auto")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "xenbench": __version__,
        "python": platform.python_version(),
        "packages": {name: _version(dists) for name, dists in PACKAGES.items()},
        # torch's intra-op threads: a model trained on the CPU (06's CCSA) ends differently at another count
        # (1 vs 2 threads: 2.8e-4 relative in a balance), so a witness re-derives it at the recorded count.
        "machine": {"device": device.type, "gpu": gpu, "cpu": _cpu_model(), "cores": os.cpu_count(),
                    "torch_threads": torch.get_num_threads()},
    }


# The git state this process first saw per checkout: a run is clean only if the tree was clean when it started
# (the code it imported) and still is when it saves (nothing edited or committed under it meanwhile).
_FIRST_GIT: dict[Path, dict[str, Any]] = {}


def run_git_state(root: str | os.PathLike[str] = REPO_ROOT) -> dict[str, Any]:
    """:func:`git_state` of ``root`` for this process's run: the commit first seen, dirty if the tree was dirty then
    or is now, or if HEAD moved in between."""
    key = Path(root).resolve()
    now = git_state(key)
    first = _FIRST_GIT.setdefault(key, now)
    if now == first or first["commit"] is None:
        return now
    return {"commit": first["commit"], "dirty": True}


def collect(params: Mapping[str, Any] | None = None, *, root: str | os.PathLike[str] = REPO_ROOT) -> dict[str, Any]:
    """The ``provenance`` object of a run (see the module docstring): git state of ``root`` over the run
    (:func:`run_git_state`), :func:`environment`, ``params`` and the digest of every recorded input
    (:func:`record_input`)."""
    inputs = [{"kind": kind, "path": repo_relative(path),
               "sha256": content_sha256(path) if path.exists() else None}
              for kind, path in recorded_inputs()]
    return {"git": run_git_state(root), **environment(), "params": dict(params) if params is not None else None,
            "inputs": inputs}


def refusal(doc: Mapping[str, Any]) -> str | None:
    """Why a results document cannot stand as a committed result, or None if it can: no provenance, or a
    run from a dirty tree or from outside a git checkout (its commit does not say what ran)."""
    prov = doc.get("provenance")
    if not isinstance(prov, Mapping) or not isinstance(prov.get("git"), Mapping):
        return "has no provenance (written before provenance was recorded, or not by xenbench.harness.save_results)"
    git = prov["git"]
    if git.get("commit") is None:
        return "was not written from a git checkout (its provenance names no commit)"
    if git.get("dirty") is not False:
        return (f"was written from a dirty tree (uncommitted changes on top of {str(git['commit'])[:12]}): "
                "commit, then re-run the notebook")
    return None


def summary(prov: Mapping[str, Any]) -> str:
    """One paragraph of a provenance object for a report's header (commit, versions, machine, inputs)."""
    git, machine = prov.get("git") or {}, prov.get("machine") or {}
    commit = str(git.get("commit") or "unknown")[:12]
    state = {True: "dirty: uncommitted changes", False: "clean", None: "not a git checkout"}[git.get("dirty")]
    packages = ", ".join(f"{k} {v}" for k, v in (prov.get("packages") or {}).items() if v)
    device = machine.get("gpu") or machine.get("device")
    lines = [f"xenbench {prov.get('xenbench')} at commit {commit} ({state}); Python {prov.get('python')}, {packages}.",
             f"Device {device}; CPU {machine.get('cpu')} ({machine.get('cores')} cores"
             + (f", torch threads {machine['torch_threads']}" if machine.get("torch_threads") else "") + ")."]
    inputs = prov.get("inputs")
    if inputs:
        lines.append("Inputs: " + "; ".join(f"{i['kind']} {i['path']} (sha256 {str(i['sha256'])[:12]})"
                                            for i in inputs) + ".")
    return "\n".join(lines)
