"""Scoring jobs: a dataset's query × item scores into a resumable :class:`~xenbench.data.store.ScoreStore`.

:func:`score_to_store` writes one row block at a time and, if a store from an interrupted run of the *same* job is
at ``out``, scores only its missing blocks: a job is identified by every argument that changes the float bits
(ids, texts, weights, model config, precision, batch size, device kind), checked on resume; one process writes a
store (:func:`~xenbench.data.store.writer_lock`); each call appends its timing to the store's ``sessions``. The
blocks are scored here by the engine (:class:`~xenbench.models.scoring.RowScorer`) or on Ray actors
(:mod:`~xenbench.models.distributed`). :func:`run_score_job` is the ``xenbench score`` entry point: it loads the
CE and the dataset, selects the rows and columns and records what produced the store in its manifest.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from xenbench import __version__
from xenbench._device import resolve_device
from xenbench._io import repo_relative
from xenbench._validation import check_int
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.data.store import ScoreStore, check_store_folder, writer_lock
from xenbench.errors import DataError, ParameterError
from xenbench.models.crossencoder import CEConfig
from xenbench.models.distributed import score_blocks_ray
from xenbench.models.fingerprint import load_shared, model_fingerprint, release_shared, texts_fingerprint
from xenbench.models.loading import build_cross_encoder
from xenbench.models.references import resolve_model
from xenbench.models.scorers import is_native, scorer_identity
from xenbench.models.scoring import (
    DEFAULT_BATCH_SIZE,
    Precision,
    ScoreTiming,
    check_scoring_args,
    default_query_chunk,
    on_device,
    progress_bar,
    row_scorer,
    scorer_device_type,
)

__all__ = ["score_to_store", "run_score_job"]

logger = logging.getLogger(__name__)


# Manifest keys that identify a job: every argument that changes the float bits of a block. Resuming into a
# store whose values differ would mix two matrices (e.g. batch 64 and 256 give different bits).
_IDENTITY_KEYS = ("query_ids", "item_ids", "texts_sha256", "model_sha256", "model_config", "precision", "kind",
                  "batch_size", "device_type")
_HOW_TO_MATCH = {"batch_size": "pass the same --batch-size", "device_type": "resume on the same kind of device",
                 "precision": "pass the same --precision"}


def _open_or_create(path: Path, ce: Any, queries: Sequence[Query], items: Sequence[Item],
                    precision: str, query_chunk: int, manifest: Mapping[str, Any] | None, *, batch_size: int,
                    device_type: str, explicit_chunk: bool = False, overwrite: bool = False) -> ScoreStore:
    native = is_native(ce)
    identity = {
        "query_ids": [q.id for q in queries],
        "item_ids": [it.id for it in items],
        "texts_sha256": texts_fingerprint(queries, items),
        # a protocol scorer's own fingerprint (None: unidentified, never resumed) and class
        "model_sha256": model_fingerprint(ce) if native else ce.fingerprint,
        "model_config": json.loads(ce.config.to_json()) if native else scorer_identity(ce),  # lengths, layout, head
        "precision": precision,
        "kind": "dense",
        "batch_size": int(batch_size),
        "device_type": device_type,
    }
    if (path / "zarr.json").is_file() and not overwrite:
        store = ScoreStore.open(path, mode="r+")
        attrs = store.attrs
        if attrs.get("model_sha256") is None or identity["model_sha256"] is None:
            whose = "a scorer without a fingerprint wrote it" if attrs.get("model_sha256") is None else \
                "this run's scorer has no fingerprint"
            raise DataError(path, f"holds a score store to resume, but {whose}, so nothing says the scorers are the "
                                  "same: give the scorer a fingerprint (CallableScorer(fn, name=..., fingerprint=...)) "
                                  "in both runs, or pass overwrite=True to start again")
        for key in _IDENTITY_KEYS:
            if attrs.get(key) != identity[key]:
                values = "" if key in ("query_ids", "item_ids", "model_config") else (
                    f": store {attrs.get(key)!r}, this run {identity[key]!r}")
                hint = _HOW_TO_MATCH.get(key, "pass --overwrite (overwrite=True) to replace it, or choose another "
                                              "output path")
                raise DataError(path, f"holds a score store of another job ({key} differs){values}; {hint}")
        if explicit_chunk and store.chunks[0] != query_chunk:
            raise DataError(path, f"was chunked in blocks of {store.chunks[0]} queries, not {query_chunk}: a resume "
                                  "keeps the store's chunking (omit the chunk size, or start a new store)")
        for k in store.done_chunks():  # a block altered after its marker was written is recomputed
            try:
                store.read_chunk(k, verify=True)
            except DataError as err:
                logger.warning("recomputing block %d: %s", k, err)
                store.invalidate(k)
        return store
    attrs = {
        "model": ce.name,
        **dict(manifest or {}),
        **identity,
        **({"max_length": _max_length(ce)} if _max_length(ce) is not None else {}),
        "xenbench_version": __version__,
        "torch_version": torch.__version__,
        "dtype": "float32",
        "wall_s": 0.0,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return ScoreStore.create(path, len(queries), len(items), chunks=(query_chunk, None), attrs=attrs,
                             overwrite=overwrite)


def _max_length(ce: Any) -> int | None:
    """Tokens per pair the scorer truncates to (a xenbench CE's config, a protocol scorer's ``max_length``)."""
    value = ce.config.max_length if is_native(ce) else getattr(ce, "max_length", None)
    return None if value is None else int(value)


def score_to_store(
    ce: Any,
    queries: Sequence[Query],
    items: Sequence[Item],
    out: str | os.PathLike[str],
    *,
    batch_size: int | None = None,
    device: str | torch.device = "auto",
    precision: Precision = "fp32",
    progress: bool = True,
    query_chunk: int | None = None,
    manifest: Mapping[str, Any] | None = None,
    backend: Literal["local", "ray"] = "local",
    ray_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> ScoreStore:
    """Exact dense scores ``f(q, i)`` for every query × item into a resumable :class:`ScoreStore` at ``out``.

    One row chunk is written at a time (the matrix is never held whole), and if a store from an interrupted run of
    the *same* job exists at ``out``, only its missing chunks are scored (done chunks are checked against their
    SHA-256 first). Each call appends its :class:`ScoreTiming` to the store's ``sessions``
    (:meth:`ScoreTiming.last`).

    Parameters
    ----------
    ce
        A xenbench CE, a ``sentence_transformers.CrossEncoder`` or any :class:`~xenbench.models.scorers.Scorer`
        (a protocol scorer runs where it is, in fp32; its ``fingerprint`` is what a resume checks, and a store written
        without one is never resumed).
    queries, items, device, precision, progress
        As :func:`~xenbench.models.scoring.score_matrix`.
    out
        The store's folder.
    batch_size
        As :func:`~xenbench.models.scoring.score_matrix`; ``None``: the existing store's (a resume), else by device.
        It is part of a store's identity: the batch composition changes the float bits.
    query_chunk
        Queries per chunk (rows of a store block). An existing store keeps its own chunking.
    manifest
        Extra JSON fields for the store attributes (model path, dataset, domain, seed, ...).
    backend
        ``"local"``: this process. ``"ray"`` (``pip install xenbench[ray]``): row blocks are Ray tasks on actors that
        each hold the model (one per GPU, or per CPU slot); this process stays the only writer of the store, with
        the same verification, identity and lock, so a resumed job skips finished blocks and a killed worker's
        block is retried on a restarted actor (:func:`~xenbench.models.distributed.score_blocks_ray`).
    ray_options
        ``address`` (a running cluster, e.g. ``"auto"``; default a local Ray started here), ``workers`` (actors;
        default one per GPU, or per CPU), ``gpus_per_worker`` (default 1 on CUDA, else 0).
    overwrite
        Replace a store already at ``out`` (of this job or another) instead of resuming it. Only a store of xenbench
        is ever replaced: a folder holding anything else is refused before any work
        (:func:`~xenbench.data.store.check_store_folder`).

    Returns
    -------
    ScoreStore
        Complete. A block whose scores hold NaN/inf (a model with NaN weights) is refused by
        :meth:`ScoreStore.write_chunk`: the call raises and the store stays incomplete.

    Raises
    ------
    ParameterError
        As :func:`~xenbench.models.scoring.score_matrix`, and a bad ``backend``.
    DataError
        ``out`` holds a store of another job (other ids, texts, weights, model config, precision, batch size or
        device kind: each changes the float bits), or another process is writing it
        (:func:`~xenbench.data.store.writer_lock`).
    """
    owner = "score_to_store"
    if out is None:
        raise ParameterError("out", "a store folder (score_matrix scores in memory)", out, owner)
    check_store_folder(out)  # only a store of xenbench is ever resumed or replaced
    ce = check_scoring_args(ce, queries, items, batch_size, precision, owner)
    check_int(query_chunk, "query_chunk", 1, None, owner, allow_none=True, expected="an int >= 1 or None")
    dev = resolve_device(device)
    if batch_size is None and not overwrite and (Path(out) / "zarr.json").is_file():
        batch_size = ScoreStore.open(out).attrs.get("batch_size")  # a resume keeps the store's batches (same bits)
    batch_size = batch_size or DEFAULT_BATCH_SIZE.get(dev.type, 64)
    explicit_chunk = query_chunk is not None
    query_chunk = query_chunk or default_query_chunk(len(queries), len(items))
    t_start = time.perf_counter()
    if backend not in ("local", "ray"):
        raise ParameterError("backend", "'local' or 'ray'", backend, owner)
    # One writer per store: a second job into the same `out` is refused before it touches anything.
    with writer_lock(out):
        store = _open_or_create(Path(out), ce, queries, items, precision, query_chunk, manifest,
                                batch_size=batch_size, device_type=scorer_device_type(ce, dev),
                                explicit_chunk=explicit_chunk, overwrite=overwrite)
        n_pairs = _score_missing_blocks(ce, queries, items, store, batch_size=batch_size, device=dev,
                                        precision=precision, progress=progress, backend=backend,
                                        ray_options=dict(ray_options or {}))
        where = str(dev) if is_native(ce) else str(getattr(ce, "device", None) or "cpu")
        timing = ScoreTiming(n_pairs, time.perf_counter() - t_start, where, precision, batch_size,
                             torch.get_num_threads())
        logger.info("scored %d pairs in %.1f s (%.0f pairs/s) on %s, %s", n_pairs, timing.wall_s,
                    timing.pairs_per_s, dev, precision)
        sessions = [*store.attrs.get("sessions", []), timing.to_dict()]
        store.update_attrs({"wall_s": store.wall_s, "chunks_done": store.n_chunks, "sessions": sessions,
                            "device": where})
    return store


def _score_missing_blocks(ce: Any, queries: Sequence[Query], items: Sequence[Item], store: ScoreStore, *,
                          batch_size: int, device: torch.device, precision: str, progress: bool, backend: str,
                          ray_options: dict[str, Any]) -> int:
    """Score the blocks ``store`` lacks and write each as it is done; returns the pairs scored."""
    n_q, n_i = len(queries), len(items)
    query_chunk = store.chunks[0]
    todo = store.missing_chunks()
    if len(todo) < store.n_chunks:
        logger.info("resuming %s: %d of %d chunks already done", store.path, store.n_chunks - len(todo),
                    store.n_chunks)

    def rows_of(k: int) -> tuple[int, int]:
        return k * query_chunk, min((k + 1) * query_chunk, n_q)

    n_pairs = sum(n_i * (b - a) for a, b in map(rows_of, todo))
    bar = progress_bar(n_pairs, progress, "scoring")
    try:
        if todo and backend == "ray":
            score_blocks_ray(ce, queries, items, store, todo, rows_of, batch_size=batch_size, device=device,
                             precision=precision, on_pairs=bar.update, **ray_options)
        elif todo:
            with on_device(ce, device):
                # Tokenize only the rows still to do: a resumed job does not pay for finished chunks.
                rows_todo = np.concatenate([np.arange(*rows_of(k)) for k in todo])
                scorer = row_scorer(ce, queries, items, device, batch_size=batch_size, precision=precision,
                                    rows=rows_todo)
                for k in todo:
                    a, b = rows_of(k)
                    t0 = time.perf_counter()
                    block = scorer.score_rows(a, b, bar.update)
                    info = {"wall_s": time.perf_counter() - t0, "n_pairs": (b - a) * n_i, "device": str(device),
                            "precision": precision, "batch_size": batch_size}
                    store.write_chunk(k, block, info)
                    store.update_attrs({"wall_s": store.wall_s, "chunks_done": len(store.done_chunks())})
    finally:
        bar.close()
    return n_pairs


#: A CE with a randomly initialised head on the bundled backbone (name -> CEConfig kind): only for testing the
#: pipeline. The name says so,
#: and using it warns: its scores are meaningless.
UNTRAINED_KINDS = {"untrained-cls": "cls", "untrained-emb": "emb"}


def run_score_job(
    ce: str | os.PathLike[str] | Any,
    dataset: Dataset | str,
    query_ids: Sequence[str] | None,
    item_ids: Sequence[str] | None,
    out: str | os.PathLike[str],
    *,
    batch_size: int | None = None,
    device: str | torch.device = "auto",
    precision: Precision = "fp32",
    progress: bool = True,
    query_chunk: int | None = None,
    chunk_pairs: int | None = None,
    seed: int = 0,
    backend: Literal["local", "ray"] = "local",
    ray_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    base: str | os.PathLike[str] | None = None,
    max_length: int | None = None,
) -> ScoreStore:
    """Score a dataset's queries × items into a store at ``out`` (``xenbench score``); resumes if interrupted.

    Parameters
    ----------
    ce
        ``"untrained-cls"`` / ``"untrained-emb"`` (the bundled MiniLM with a random head seeded with ``seed``:
        for testing the pipeline only, it warns); a model reference for
        :func:`~xenbench.models.loading.load_cross_encoder` (a folder, a ``.ckpt`` with ``base``, or a Hugging Face
        hub id ``org/name[@revision]``: :func:`~xenbench.models.references.resolve_model`); or a CE object, a
        ``sentence_transformers.CrossEncoder`` or a :class:`~xenbench.models.scorers.Scorer`.
    dataset
        A :class:`Dataset` or a spec for :func:`xenbench.data.sources.load_dataset` (``"wordnet-el:noun.food"``).
    query_ids, item_ids
        Rows and columns in this order; ``None`` means all, in dataset order.
    out
        Store folder.
    batch_size, device, precision, progress, query_chunk, backend, ray_options
        As in :func:`~xenbench.models.scoring.score_matrix`.
    chunk_pairs
        Pairs per resumable block instead of ``query_chunk``: blocks of ``ceil(chunk_pairs / n_items)``
        queries (a finer chunk loses less work to a kill; ``xenbench score --chunk-pairs``).
    seed
        Seed of an untrained CE's random head; recorded in the manifest.
    overwrite
        Replace a store already at ``out`` instead of resuming it (``xenbench score --overwrite``); it is deleted
        only once the model has loaded.
    base
        The base model (folder or hub id) of a ``.ckpt`` (``xenbench score --base``).
    max_length
        Tokens per pair, as sentence-transformers' ``max_length`` (``xenbench score --max-length``; see
        :func:`~xenbench.models.loading.load_cross_encoder`); recorded in the store's attributes.

    Returns
    -------
    ScoreStore
        Complete; its attrs hold the manifest (model — a hub id names it, with ``model_id`` and the snapshot's
        commit ``model_revision`` —, dataset, domain, ids, seed, max_length, versions, timings).

    Raises
    ------
    ParameterError
        Unknown or duplicated ids, an unknown ``"bundled-*"`` name, and
        :func:`~xenbench.models.scoring.score_matrix`'s errors.
    DataError
        From resolving or loading the CE or the dataset, or ``out`` holding another job's store.
    """
    owner = "run_score_job"
    check_store_folder(out)  # before the dataset and the model load
    if isinstance(dataset, str):
        from xenbench.data.sources import load_dataset

        dataset = load_dataset(dataset)
    if not isinstance(dataset, Dataset):
        raise ParameterError("dataset", "a Dataset or a dataset spec string", type(dataset).__name__, owner)
    queries = _select(dataset.queries, dataset.query_index, query_ids, "query_ids", dataset.name, owner)
    items = _select(dataset.items, dataset.item_index, item_ids, "item_ids", dataset.name, owner)

    extra: dict[str, Any] = {}
    shared = False
    if not isinstance(ce, (str, os.PathLike)):
        if max_length is not None or base is not None:
            raise ParameterError("max_length" if max_length is not None else "base", "None for a model object (set "
                                 "it when loading the model)", max_length if max_length is not None else base, owner)
        model = ce
        name = ce.name if hasattr(ce, "name") and isinstance(ce.name, str) else None
    elif isinstance(ce, str) and ce.startswith(("untrained", "bundled-")):
        if ce not in UNTRAINED_KINDS:
            raise ParameterError("ce", f"one of {sorted(UNTRAINED_KINDS)} (an untrained head, for testing only), or a CE "
                                 "folder such as models/cls-ce", ce, owner)
        warnings.warn(f"{ce}: the head is random (seed {seed}), so its scores carry no meaning; use a trained CE "
                      "folder such as models/cls-ce for experiments", UserWarning, stacklevel=2)
        model, name = build_cross_encoder(CEConfig(kind=UNTRAINED_KINDS[ce]), seed=seed), ce  # type: ignore[arg-type]
    else:
        ref = resolve_model(ce, base=base, owner=owner)
        # The CE `xenbench score` has just loaded for its plan, if it did (load_shared): one load and one hash of its
        # weights per job, not two (a 7B reranker loads in minutes); released when the job ends.
        shared = True
        model = load_shared(ce, max_length, base=base)
        # a hub id by its id; a local folder relative to the checkout (models/cls-ce: holds in any clone)
        name, extra = (ref.hub_id or repo_relative(ref.path)), ref.manifest()
    if chunk_pairs is not None:
        if query_chunk is not None:
            raise ParameterError("chunk_pairs", "None when query_chunk is given (choose one)", chunk_pairs, owner)
        check_int(chunk_pairs, "chunk_pairs", 1, None, owner)
        query_chunk = max(1, math.ceil(chunk_pairs / len(items)))
    domain = dataset.name.split(":", 1)[1] if ":" in dataset.name else dataset.name
    manifest = {**({"model": name} if name else {}), **extra, "dataset": dataset.name, "domain": domain, "seed": seed}
    try:
        return score_to_store(model, queries, items, out, batch_size=batch_size, device=device, precision=precision,
                              progress=progress, query_chunk=query_chunk, manifest=manifest, backend=backend,
                              ray_options=ray_options, overwrite=overwrite)
    finally:
        if shared:
            release_shared()


def _select(rows: list, index: Mapping[str, int], ids: Sequence[str] | None, name: str, ds: str,
            owner: str) -> list:
    if ids is None:
        return list(rows)
    if isinstance(ids, str):  # a bare string would be iterated character by character
        raise ParameterError(name, "a sequence of ids (not a single string)", ids, owner)
    ids = list(ids)
    if not ids:
        raise ParameterError(name, "a non-empty sequence of ids, or None for all", ids, owner)
    unknown = [x for x in ids if x not in index]
    if unknown:
        raise ParameterError(name, f"ids of dataset {ds!r} ({len(unknown)} of {len(ids)} are unknown)",
                             unknown[:5], owner)
    if len(set(ids)) != len(ids):
        dup = sorted({x for x in ids if ids.count(x) > 1})[:5] if len(ids) < 10_000 else "(several)"
        raise ParameterError(name, "distinct ids (each is a row/column of the matrix)", dup, owner)
    return [rows[index[x]] for x in ids]
