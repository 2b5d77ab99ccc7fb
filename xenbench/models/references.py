"""Where a model reference points: a local folder or file, or a Hugging Face hub id, resolved one way everywhere.

``xenbench score``, ``-p model`` in every notebook and the Python API
(:func:`~xenbench.models.loading.load_cross_encoder`, :func:`~xenbench.models.cache.cached_scores`,
:func:`~xenbench.models.jobs.run_score_job`) name a model the way sentence-transformers and model cards do, and
:func:`resolve_model` turns the name into a local path:

* an existing local path (a folder, or an authors' Lightning ``.ckpt`` file with its ``base``) is used as it is;
  a path that exists wins over a hub id that spells the same (as in transformers);
* ``org/name`` or ``org/name@revision`` (a branch, tag or commit) is a hub id, resolved by
  ``huggingface_hub.snapshot_download``: from the local Hugging Face cache only when ``HF_HUB_OFFLINE`` is set (as the
  Makefile and CI set it), downloading otherwise. The cache is ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub`` (read when a reference is resolved, not when xenbench is imported).

A resolved hub id carries the snapshot's commit (the ``snapshots/<40 hex>`` folder it points at): score stores record
it (:meth:`ModelRef.manifest`) and so does the provenance of a run (:func:`xenbench.provenance.describe_input` reads it
off the snapshot path). Nothing here imports torch or transformers.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xenbench.errors import DataError, ParameterError

__all__ = ["ModelRef", "resolve_model", "model_name", "hub_cache_dir", "hub_timeout", "parse_hub_id", "hub_offline",
           "refuse_custom_code", "CUSTOM_CODE_FILES"]

# huggingface_hub's repo-id rule: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters per part.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"^(?P<id>{_PART}/{_PART})(?:@(?P<revision>[^\s@]+))?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# A git ref name or commit as the hub takes them (names joined by '/', e.g. refs/pr/1); ".." and empty parts are
# refused separately.
_REVISION = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")
_TRUE = {"1", "on", "yes", "true"}


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (``1``/``on``/``yes``/``true``, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
    else ``~/.cache/huggingface/hub`` (huggingface_hub's rule, read now rather than at its import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def parse_hub_id(text: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` of ``"org/name"`` or ``"org/name@revision"``; None for anything else (a path).

    >>> parse_hub_id("cross-encoder/ms-marco-MiniLM-L6-v2@main")
    ('cross-encoder/ms-marco-MiniLM-L6-v2', 'main')
    >>> parse_hub_id("../models/cls-ce") is None
    True
    """
    match = _HUB_ID.match(text)
    if match is None or "--" in match["id"] or ".." in match["id"]:
        return None
    return match["id"], match["revision"]


def model_name(ref: str | os.PathLike[str]) -> str:
    """How reports name the model ``ref`` names, without resolving it: a hub id (a path that does not exist and
    reads as ``org/name[@revision]``) by its id, anything else by its folder's or file's name."""
    text = os.fspath(ref)
    hub = parse_hub_id(text)
    if hub is not None and not Path(text).expanduser().exists():
        return hub[0]
    return Path(text.rstrip("/\\")).name


@dataclass(frozen=True)
class ModelRef:
    """A model reference resolved to a local path.

    Attributes
    ----------
    text : str
        What the user wrote.
    path : Path
        The local folder (a hub id's snapshot folder) or ``.ckpt`` file.
    hub_id : str or None
        ``org/name`` when the reference is a hub id.
    revision : str or None
        The revision asked for (``@revision``), if any.
    commit : str or None
        The resolved snapshot's commit (40 hex digits) of a hub id.
    base : ModelRef or None
        A ``.ckpt`` file's base model (config and tokenizer), resolved the same way.
    """

    text: str
    path: Path
    hub_id: str | None = None
    revision: str | None = None
    commit: str | None = None
    base: ModelRef | None = None

    @property
    def name(self) -> str:
        """How reports and figures name the model: its hub id, else its folder's (or file's) name."""
        return self.hub_id or model_name(self.text)

    def manifest(self) -> dict[str, str]:
        """What a score store records about the reference: ``model_id`` and ``model_revision`` (the snapshot's
        commit) of a hub id, and the same for a checkpoint's base; empty for a local folder."""
        out: dict[str, str] = {}
        if self.hub_id:
            out = {"model_id": self.hub_id, "model_revision": str(self.commit)}
        if self.base is not None and self.base.hub_id:
            out.update({"base_id": self.base.hub_id, "base_revision": str(self.base.commit)})
        return out


def resolve_model(ref: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None,
                  owner: str = "load_cross_encoder", param: str = "model") -> ModelRef:
    """Resolve a model reference (module docstring) to a local path; nothing is loaded.

    Parameters
    ----------
    ref
        A local folder or ``.ckpt`` file, or a hub id ``org/name[@revision]``.
    base
        The base model of a ``.ckpt`` file (a folder or hub id with its config and tokenizer); refused otherwise.
    owner, param
        What error messages name.

    Returns
    -------
    ModelRef

    Raises
    ------
    DataError
        No such local path and not a hub id; a hub id that is not in the cache while offline (naming the id, the
        cache folder and how to fetch it), or that cannot be downloaded.
    ParameterError
        A ``.ckpt`` without ``base``, or a ``base`` for anything but a ``.ckpt``.
    """
    if isinstance(ref, ModelRef):
        return ref
    if not isinstance(ref, (str, os.PathLike)) or not os.fspath(ref):
        raise ParameterError(param, "a model folder, a .ckpt file or a hub id org/name[@revision]", ref, owner)
    text = os.fspath(ref)
    local = Path(text).expanduser()
    if local.exists():
        resolved = ModelRef(text, local)
    else:
        hub = parse_hub_id(text)
        if hub is None:
            raise DataError(local, "no such file or folder: expected a xenbench CE folder, a HF folder, a .ckpt file "
                                   "or a Hugging Face hub id org/name[@revision]")
        resolved = _from_hub(text, *hub, owner, param)
    is_ckpt = resolved.path.is_file() and resolved.path.suffix == ".ckpt"
    if is_ckpt and base is None:
        raise ParameterError("base", f"a folder or hub id with the config and tokenizer of the checkpoint {text} (a "
                             "Lightning .ckpt holds weights only; xenbench score --base, load_cross_encoder(base=...))",
                             None, owner)
    if base is not None and not is_ckpt:
        raise ParameterError("base", f"None: only a Lightning .ckpt file takes a base model, and {text} is not one",
                             os.fspath(base), owner)
    if base is not None:
        resolved = ModelRef(resolved.text, resolved.path, resolved.hub_id, resolved.revision, resolved.commit,
                            resolve_model(base, owner=owner, param="base"))
    return resolved


def _check_revision(repo_id: str, revision: str, owner: str, param: str) -> None:
    """Refuse a revision that is not a git ref or commit before huggingface_hub reads ``refs/<revision>``.

    Offline, huggingface_hub reads the file ``<cache>/models--org--name/refs/<revision>``: a revision holding ``..``
    or an absolute path would read a file outside the cache (``@../../../../dev/zero`` read 2.5 GB) or another
    model's snapshot (``@../../../outside/ref`` scored another model under this id).
    """
    parts = revision.replace("\\", "/").split("/")
    if (revision.startswith(("/", "\\")) or os.path.isabs(revision) or ".." in parts or "" in parts
            or not _REVISION.fullmatch(revision)):
        raise ParameterError(param, "a hub revision that is a branch, tag or commit (letters, digits, '.', '_', '-', "
                             "'/' between names; no '..', no absolute path)", f"{repo_id}@{revision}",
                             owner)


def _inside(folder: Path, cache: Path) -> bool:
    """Whether ``folder``, links resolved, lies inside ``cache``."""
    try:
        folder.resolve().relative_to(cache.resolve())
    except (ValueError, OSError):
        return False
    return True


def hub_timeout() -> float:
    """Seconds any one hub request may wait for an answer: ``HF_HUB_DOWNLOAD_TIMEOUT`` (huggingface_hub's own
    setting; 10 s by default)."""
    from huggingface_hub import constants

    return float(constants.HF_HUB_DOWNLOAD_TIMEOUT)


def _from_hub(text: str, repo_id: str, revision: str | None, owner: str, param: str) -> ModelRef:
    import httpx2
    from huggingface_hub import HfApi, snapshot_download

    if revision is not None:
        _check_revision(repo_id, revision, owner, param)
    cache = hub_cache_dir()
    offline = hub_offline()
    where = f"{repo_id}@{revision}" if revision else repo_id
    pinned, cached_only, unreachable = revision, offline, None
    try:
        if not offline and not (revision and _COMMIT.match(revision)):
            # snapshot_download asks the hub for the revision's commit without a timeout (it waited 240 s on an
            # endpoint that accepts and never answers): ask here with one, then download that commit. A hub that
            # cannot be reached leaves the cache, as snapshot_download itself falls back to it.
            try:
                pinned = HfApi().repo_info(repo_id, revision=revision, timeout=hub_timeout()).sha
            except (httpx2.ConnectError, httpx2.TimeoutException) as err:
                unreachable, cached_only = err, True
        folder = Path(snapshot_download(repo_id, revision=pinned, cache_dir=cache, local_files_only=cached_only,
                                        etag_timeout=hub_timeout()))
    except Exception as err:  # huggingface_hub raises its own types, and httpx's on a network failure
        fetch = f"hf download {repo_id}" + (f" --revision {revision}" if revision else "")
        if offline:
            why = (f"not in the Hugging Face cache {cache} and HF_HUB_OFFLINE is set: fetch it once where the hub is "
                   f"reachable ({fetch}, with HF_HOME pointing at this cache), or unset HF_HUB_OFFLINE to download it")
        else:
            err = unreachable or err
            detail = (str(err).splitlines() or [""])[0][:200]
            why = (f"could not be fetched into {cache} ({type(err).__name__}: {detail or 'no answer'}; a hub request "
                   f"waits at most {hub_timeout():g} s, HF_HUB_DOWNLOAD_TIMEOUT) and is not in that cache; check the "
                   f"id, the revision and the network, or fetch it with {fetch}")
        raise DataError(where, why) from None
    if not _inside(folder, cache):
        raise DataError(where, f"resolved to {folder}, outside the Hugging Face cache {cache}: refused")
    commit = folder.name if _COMMIT.match(folder.name) else None
    return ModelRef(text, folder, repo_id, revision, commit)


#: The files of a folder where transformers reads ``auto_map``: the classes a folder's own ``.py`` files define, which
#: transformers would import (after asking on a terminal) were ``trust_remote_code`` not False.
CUSTOM_CODE_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


def refuse_custom_code(path: str | os.PathLike[str]) -> None:
    """Refuse a model folder that needs its own Python code, before anything of it is loaded.

    xenbench runs no code from a model folder: every ``from_pretrained`` it calls passes ``trust_remote_code=False``.
    A folder whose ``config.json`` (or tokenizer, processor config) has an ``auto_map`` names classes defined in its
    own ``.py`` files; such a model goes through the scorer protocol instead (docs/MODELS.md "Your own scorer": load it
    yourself, having read its code, and pass the object or a ``CallableScorer``).

    Raises
    ------
    DataError
        Naming the file that holds ``auto_map`` and the code it points to.
    """
    folder = Path(path)
    if not folder.is_dir():
        return
    for name in CUSTOM_CODE_FILES:
        file = folder / name
        if not file.is_file():
            continue
        try:
            auto_map = json.loads(file.read_text(encoding="utf-8")).get("auto_map")
        except (ValueError, UnicodeDecodeError, AttributeError):
            continue  # not a JSON object: the loader that reads it names the file
        if auto_map:
            refs = auto_map.values() if isinstance(auto_map, dict) else [auto_map]
            code = sorted({str(r).split("--")[-1].rsplit(".", 1)[0] + ".py" for r in _flat(refs) if r})
            what = ", ".join(code[:3]) or "a .py file"
            raise DataError(file, f"has an auto_map: the model needs its own code ({what}), which xenbench never runs "
                                  "(trust_remote_code=False); load it yourself and pass it as a scorer "
                                  "(docs/MODELS.md, \"Your own scorer\")")


def _flat(values: Iterable[Any]) -> list[Any]:
    """``auto_map``'s values flattened: a tokenizer's is a pair ``[slow, fast]`` (either may be null)."""
    out: list[Any] = []
    for v in values:
        out.extend(_flat(v) if isinstance(v, (list, tuple)) else [v])
    return out
