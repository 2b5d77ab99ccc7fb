"""The on-demand score cache: a CE's exact scores on a user's sample, computed once and kept.

Notebooks 03, 04 and 07 run on a user's own data and CE without a precomputed matrix: :func:`cached_scores` scores
the seeded sample they need into a resumable store (:func:`~xenbench.models.jobs.score_to_store`) under a key of the
CE's weights and config and of every query and item text (:func:`~xenbench.models.fingerprint.cache_path`, where the
harness looks before a run), so another checkpoint or another sample gets its own store and a repeated run scores
nothing.
"""
from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch

from xenbench._io import repo_relative
from xenbench.data.datasets import Dataset
from xenbench.data.store import ScoreStore
from xenbench.errors import DataError, ParameterError
from xenbench.models.fingerprint import cache_path, folder_fingerprint, load_shared
from xenbench.models.jobs import score_to_store

__all__ = ["cached_scores"]

logger = logging.getLogger(__name__)


def cached_scores(model: str | os.PathLike[str], dataset: Dataset, *, device: str | torch.device = "auto",
                  batch_size: int | None = None, cache: str | os.PathLike[str] | None = None,
                  progress: bool = True) -> ScoreStore:
    """Exact scores of every query × item of ``dataset`` by the CE in folder ``model``, computed once and cached.

    For notebooks run on a user's own data without a precomputed matrix: pass a seeded sample
    (:meth:`xenbench.data.datasets.Dataset.subset`) to score only what the notebook needs. The store lives in
    ``<cache>/scores/<key>``, ``key`` = a hash of the CE's weights and config
    (:func:`~xenbench.models.fingerprint.model_fingerprint`, computed once per CE:
    :func:`xenbench.models.fingerprint.folder_fingerprint`) and of every query and item text, so another checkpoint or
    another sample gets its own store; the CE is loaded only when something is left to score. Scoring is resumable
    (:func:`~xenbench.models.jobs.score_to_store`): an interrupted run continues where it stopped.

    Parameters
    ----------
    model
        A CE folder (:func:`xenbench.models.loading.load_cross_encoder`).
    dataset
        The queries and items to score (rows and columns in its order).
    cache
        Root folder; default ``$XENBENCH_CACHE`` or ``~/.cache/xenbench``.

    Returns
    -------
    ScoreStore
        Complete (verified by :func:`~xenbench.models.jobs.score_to_store` when it was written or resumed).
    """
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise ParameterError("model", "a cross-encoder folder (see load_cross_encoder)", str(model), "cached_scores")
    # The fingerprint recorded when this CE was first used (by xenbench run, before the kernel): no load for a cached
    # sample.
    out = cache_path(folder_fingerprint(folder), dataset, cache)
    with contextlib.suppress(DataError):
        store = ScoreStore.open(out)
        if store.is_complete:
            return store
    ce = load_shared(folder)
    logger.info("scoring %d x %d pairs of %s with %s into %s", len(dataset.queries), len(dataset.items), dataset.name,
                folder, out)
    return score_to_store(ce, dataset.queries, dataset.items, out, batch_size=batch_size, device=device,
                          progress=progress, manifest={"model_path": repo_relative(folder), "dataset": dataset.name})
