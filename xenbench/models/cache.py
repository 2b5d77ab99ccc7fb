"""The on-demand score cache: a CE's exact scores on a user's sample, computed once and kept.

Notebooks 03, 04 and 07 run on a user's own data and CE without a precomputed matrix: :func:`cached_scores` scores
the seeded sample they need into a resumable store (:func:`~xenbench.models.jobs.score_to_store`) under a key of the
CE's weights and config (or a scorer's own fingerprint) and of every query and item text
(:func:`~xenbench.models.fingerprint.cache_path`, where the harness looks before a run), so another checkpoint or
another sample gets its own store and a repeated run scores nothing.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from xenbench._io import repo_relative
from xenbench.data.datasets import Dataset
from xenbench.data.store import ScoreStore
from xenbench.errors import DataError, ParameterError
from xenbench.models.fingerprint import (
    cache_path,
    folder_fingerprint,
    load_shared,
    model_fingerprint,
    texts_fingerprint,
)
from xenbench.models.jobs import score_to_store
from xenbench.models.loading import UNTRAINED, untrained_cross_encoder
from xenbench.models.references import parse_hub_id, resolve_model
from xenbench.models.scorers import as_scorer, is_native, scorer_identity, scorer_key

__all__ = ["cached_scores"]

logger = logging.getLogger(__name__)


def cached_scores(model: str | os.PathLike[str] | Any, dataset: Dataset, *, device: str | torch.device = "auto",
                  batch_size: int | None = None, cache: str | os.PathLike[str] | None = None,
                  progress: bool = True, max_length: int | None = None) -> ScoreStore:
    """Exact scores of every query × item of ``dataset`` by ``model``, computed once and cached.

    For notebooks run on a user's own data without a precomputed matrix: pass a seeded sample
    (:meth:`xenbench.data.datasets.Dataset.subset`) to score only what the notebook needs. The store lives in
    ``<cache>/scores/<key>``, ``key`` = a hash of the model's fingerprint and of every query and item text, so another
    checkpoint or another sample gets its own store. Scoring is resumable
    (:func:`~xenbench.models.jobs.score_to_store`): an interrupted run continues where it stopped.

    Parameters
    ----------
    model
        ``"untrained-cls"`` / ``"untrained-emb"`` (:func:`~xenbench.models.loading.untrained_cross_encoder`, seed 0:
        for testing the pipeline only); a model reference (a CE folder or a hub id ``org/name[@revision]``,
        :func:`~xenbench.models.references.resolve_model`): its fingerprint
        (:func:`~xenbench.models.fingerprint.model_fingerprint` of its weights and config) is computed once per CE and
        recorded (:func:`xenbench.models.fingerprint.folder_fingerprint`), and the CE is loaded only when something is
        left to score. Or a model object: a xenbench CE, a ``sentence_transformers.CrossEncoder`` or any
        :class:`~xenbench.models.scorers.Scorer` with a ``fingerprint`` (the key; a scorer without one is refused).
    dataset
        The queries and items to score (rows and columns in its order).
    cache
        Root folder; default ``$XENBENCH_CACHE`` or ``~/.cache/xenbench``.
    max_length
        Tokens per pair of a model loaded from a reference (:func:`~xenbench.models.loading.load_cross_encoder`).

    Returns
    -------
    ScoreStore
        Complete (verified by :func:`~xenbench.models.jobs.score_to_store` when it was written or resumed).

    Raises
    ------
    ParameterError
        A scorer without a fingerprint, saying how to give it one; a ``max_length`` with a model object.
    DataError
        A reference that does not resolve (no such folder; a hub id not cached while offline).
    """
    owner = "cached_scores"
    if isinstance(model, str) and model in UNTRAINED:  # a random head, for testing the pipeline: keyed by its weights
        model = untrained_cross_encoder(model, owner=owner, param="model")
    if isinstance(model, (str, os.PathLike)):
        if not Path(model).expanduser().exists() and parse_hub_id(os.fspath(model)) is None:
            raise ParameterError("model", "a cross-encoder folder or hub id org/name (see load_cross_encoder)",
                                 os.fspath(model), owner)
        ref = resolve_model(model, owner=owner)
        if not ref.path.is_dir():
            raise ParameterError("model", "a cross-encoder folder or hub id (see load_cross_encoder)", str(model), owner)
        folder = ref.path
        # The fingerprint recorded when this CE was first used (by xenbench run, before the kernel): no load for a
        # cached sample.
        fingerprint = folder_fingerprint(folder, max_length)
        out = cache_path(fingerprint, dataset, cache)
        scorer, recorded = None, {"model_sha256": fingerprint}
        manifest = {"model": ref.name, **ref.manifest(), "model_path": repo_relative(folder)}
    else:
        if max_length is not None:
            raise ParameterError("max_length", "None for a model object (set it when loading the model)", max_length,
                                 owner)
        scorer = as_scorer(model, owner, param="model")
        # A protocol scorer's own fingerprint joins what can be read off it (max_length, activation, revision,
        # layout): with only the fingerprint as key, max_length=8 got the default length's cached scores.
        native = is_native(scorer)
        fingerprint = model_fingerprint(scorer) if native else scorer_key(scorer)
        if not isinstance(fingerprint, str) or not fingerprint:
            raise ParameterError("model", "a scorer with a fingerprint, the key of the score cache: give it one "
                                 "(CallableScorer(fn, name=..., fingerprint='my-reranker-v2'), "
                                 "SentenceTransformersScorer(model, fingerprint=...): any string that changes when "
                                 "the scores would)", f"{scorer.name} without a fingerprint", owner)
        out = cache_path(fingerprint, dataset, cache)
        manifest = {"model": scorer.name}
        recorded = {"model_sha256": fingerprint if native else scorer.fingerprint,
                    "model_config": json.loads(scorer.config.to_json()) if native else scorer_identity(scorer)}
    try:
        store: ScoreStore | None = ScoreStore.open(out)
    except DataError:  # no store yet, or a broken one: score_to_store says which
        store = None
    if store is not None and store.is_complete:
        _check_hit(store, recorded, dataset)
        return store
    ce = load_shared(folder, max_length) if scorer is None else scorer
    logger.info("scoring %d x %d pairs of %s with %s into %s", len(dataset.queries), len(dataset.items), dataset.name,
                manifest["model"], out)
    return score_to_store(ce, dataset.queries, dataset.items, out, batch_size=batch_size, device=device,
                          progress=progress, manifest={**manifest, "dataset": dataset.name})


def _check_hit(store: ScoreStore, recorded: dict[str, Any], dataset: Dataset) -> None:
    """A cached store is served only if it records this job, as a resume checks it (:mod:`~xenbench.models.jobs`):
    the same query and item ids and texts and, for a model object, the same ``recorded`` fingerprint and
    ``model_config`` (a xenbench CE's config; a protocol scorer's :func:`~xenbench.models.scorers.scorer_identity`).
    A folder's key already holds its config and weights (:func:`~xenbench.models.fingerprint.folder_fingerprint`)."""
    attrs = store.attrs
    expected = {"query_ids": [q.id for q in dataset.queries], "item_ids": [it.id for it in dataset.items],
                "texts_sha256": texts_fingerprint(dataset.queries, dataset.items), **recorded}
    for key, value in expected.items():
        if attrs.get(key) != value:
            raise DataError(store.path, f"is the score cache's store for this model and sample, but records another "
                                        f"job ({key} differs): delete that folder to score again")
