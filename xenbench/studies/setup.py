"""What notebooks 03, 04 and 07 work on: the exact score matrix of one CE on one dataset, with its texts and labels.

:func:`load_setup` opens a score store (or scores a seeded sample with your own CE) and keeps a seeded sample of
the items (:func:`subsample`); :func:`de_embeddings` and :func:`retriever_scores` add the bundled dual encoder's
embeddings and the DE / TF-IDF scores of every query; :func:`first_stage_matrix` any first stage's scores
(``de``, ``tfidf``, ``bm25`` or a TREC run file); :meth:`Setup.grades` the relevance labels of every query on the
kept items. The query rows are split by
:func:`xenbench.methods.protocol.query_splits` (anchor / dev / test rows), not here.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from xenbench.errors import ParameterError
from xenbench.sampling import sample_rows

__all__ = ["Setup", "ce_seconds_per_call", "de_embeddings", "first_stage_matrix", "load_setup", "retriever_scores",
           "subsample"]


def subsample(n: int, max_n: int | None, seed: int = 0) -> np.ndarray:
    """Sorted seeded sample of ``min(n, max_n)`` item indices of ``range(n)`` (all of them when ``max_n`` is None):
    :func:`xenbench.sampling.sample_rows` of kind ``"items"``, so every notebook's seed picks the same items.

    Used to cut the item set (columns of M, and the same items of the retrievers) for quick runs.
    """
    return sample_rows(n, max_n, seed, kind="items")


def ce_seconds_per_call(attrs: Mapping[str, Any]) -> float:
    """Seconds per CE call measured when a score matrix was computed (its :class:`~xenbench.data.store.ScoreStore` attrs).

    The throughput of the batched scoring run (pairs per second over its sessions), so a lower bound
    on the cost of a test query's k_s calls per round: what the latency figure charges per CE call.
    """
    sessions = attrs.get("sessions") or []
    pairs = sum(s.get("n_pairs", 0) for s in sessions)
    wall = sum(s.get("wall_s", 0.0) for s in sessions)
    if pairs > 0 and wall > 0:
        return wall / pairs
    n_pairs = len(attrs.get("query_ids", ())) * len(attrs.get("item_ids", ()))
    if attrs.get("wall_s") and n_pairs:
        return float(attrs["wall_s"]) / n_pairs
    raise ParameterError("attrs", "score-store attributes with 'sessions' (n_pairs, wall_s) or 'wall_s'",
                         sorted(attrs), "ce_seconds_per_call")


@dataclass
class Setup:
    """What notebooks 03, 04 and 07 work on: the exact matrix of one CE on one dataset, and its texts.

    Attributes
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores (the kept item columns only).
    dataset : Dataset
        Texts of the same queries (rows) and items.
    items : ndarray of shape (n_items,)
        Dataset rows of the kept item columns.
    attrs : dict
        The store's manifest.
    """

    M: np.ndarray
    dataset: Any
    items: np.ndarray
    attrs: dict

    @property
    def n_items(self) -> int:
        return int(self.M.shape[1])

    @property
    def item_labels(self) -> list[str]:
        return [self.dataset.items[i].title for i in self.items]

    @property
    def query_texts(self) -> list[str]:
        return [q.text for q in self.dataset.queries]

    @property
    def ce_seconds_per_call(self) -> float:
        return ce_seconds_per_call(self.attrs)

    @property
    def item_ids(self) -> list[str]:
        """Ids of the kept items, in column order of M."""
        return [self.dataset.items[i].id for i in self.items]

    def grades(self):
        """Relevance grades of every query row on the kept items: a sparse int matrix of M's shape
        (:meth:`xenbench.data.datasets.Dataset.grades`; relevant items outside the kept sample are dropped)."""
        return self.dataset.grades(items=self.item_ids)

    def describe(self) -> str:
        a = self.attrs
        model = a.get("model") or os.path.basename(str(a.get("model_path", "?")).rstrip("/"))  # a cached store: its folder
        return (f"{model} on {self.dataset.name}: M is {self.M.shape[0]} queries x {self.n_items} items.\n"
                f"One CE call cost {self.ce_seconds_per_call * 1e6:.1f} µs when the matrix was computed "
                f"({a.get('device')}, {a.get('precision')}, batched); Fig. 4 charges calls at this rate.")


def load_setup(store_path, dataset, *, seed: int = 0, max_items: int | None = None,
               model: str | os.PathLike[str] | Any = None, max_queries: int | None = None,
               device: str = "auto", max_length: int | None = None) -> Setup:
    """The exact matrix of one CE on ``dataset``, items subsampled.

    Two sources. Without ``model``: open the score store at ``store_path`` and check that it scores ``dataset``'s
    queries and items in order, and keep a seeded sample of ``max_items`` of its item columns (:func:`subsample`;
    None: all). With ``model`` (for your own data: a CE folder or hub id, loaded with ``max_length``; or, from Python,
    a model object: a xenbench CE, a ``sentence_transformers.CrossEncoder`` or a
    :class:`~xenbench.models.scorers.Scorer` with a fingerprint): score a seeded sample of ``max_queries`` queries ×
    ``max_items`` items with it through :func:`xenbench.models.cache.cached_scores` (resumable, cached by model and
    texts; ``store_path`` is ignored), so nothing needs precomputing.

    A CE that does not read the query (:func:`xenbench.models.ce_check.check_ce`: its rankings barely depend on the
    query, or it does not beat chance and BM25 on the sample's labels) is warned about, and the run's findings are
    marked as not to be trusted (:func:`xenbench.models.ce_check.warn_if_untrained`).

    Raises
    ------
    DataError
        If the store's query or item ids are not the dataset's, in the same order.
    ParameterError
        If ``model`` is not a CE folder, hub id or scorer, or ``max_queries``/``max_length`` is given without it.
    """
    from xenbench.data.sources import load_dataset
    from xenbench.data.store import ScoreStore
    from xenbench.errors import DataError

    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    if model is not None and not (isinstance(model, str) and not model):
        from xenbench.models.cache import cached_scores

        queries = sample_rows(len(ds.queries), max_queries, seed, kind="queries")
        items = subsample(len(ds.items), max_items, seed)
        ds = ds.subset([ds.queries[r].id for r in queries], [ds.items[i].id for i in items])
        store = cached_scores(model, ds, device=device, max_length=max_length)
        items = np.arange(len(ds.items))
    else:
        for name, value in (("max_queries", max_queries), ("max_length", max_length)):
            if value is not None:
                raise ParameterError(name, "None unless model is given (a precomputed store is used whole)", value,
                                     "load_setup")
        store = ScoreStore.open(store_path)
        if list(store.attrs["item_ids"]) != ds.item_ids or list(store.attrs["query_ids"]) != ds.query_ids:
            raise DataError(store.path, f"was not computed on {ds.name}: its query/item ids differ from the dataset's")
        items = subsample(len(ds.items), max_items, seed)
    M = store.to_numpy()[:, items]
    from xenbench.models.ce_check import sample_evidence, warn_if_untrained

    name = os.path.basename(str(model or store.attrs.get("model") or store_path).rstrip("/\\"))
    kept = [ds.items[i] for i in items]  # a CE that does not read the query: warned, and the findings marked
    warn_if_untrained(M, name, **sample_evidence(ds.gold, ds.queries, kept))
    return Setup(M=M, dataset=ds, items=np.asarray(items), attrs=store.attrs)


def de_embeddings(setup: Setup, *, device: str | torch.device = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Bundled DE embeddings (L2-normalized, float64): items V (n_items, d) and every query U (n_queries, d).

    Their inner products are the ``de_scores`` of :func:`retriever_scores`; AXN uses V as its item
    embeddings and U as u_param ([AXN] Eq. 7). ``device``: where the DE encodes
    (:class:`xenbench.models.retrievers.DualEncoder`).
    """
    from xenbench.models.retrievers import DualEncoder

    de = DualEncoder(device=device).fit([setup.dataset.items[i] for i in setup.items])
    return de.item_embeddings_.astype(np.float64), de.embed_queries(setup.dataset.queries).astype(np.float64)


def first_stage_matrix(setup: Setup, first_stage: str = "de", *, device: str | torch.device = "auto") -> np.ndarray:
    """A first stage's scores of **every** query row on the kept items, shape (n_queries, n_items), float32.

    ``first_stage`` is a :func:`xenbench.models.retrievers.make_retriever` spec: ``"de"`` (the bundled DE, on
    ``device``), ``"tfidf"``, ``"bm25"`` or ``"run:<path>"`` (a TREC run file: its order, ``-inf`` for the items its
    list does not hold, so a re-ranking past the run's depth takes the remaining items in column order). Passed as
    ``de_scores`` it replaces the DE's ranking in the methods that start from one (DE re-rank, ANNCUR DE,
    ADACUR DE+TopK, AXN DE's first round).
    """
    from xenbench.models.retrievers import make_retriever

    items = [setup.dataset.items[i] for i in setup.items]
    return np.asarray(make_retriever(first_stage, device=device, owner="first_stage_matrix").fit(items)
                      .scores(list(setup.dataset.queries)), dtype=np.float32)


def retriever_scores(setup: Setup, *, device: str | torch.device = "auto") -> tuple[np.ndarray, np.ndarray]:
    """DE and TF-IDF scores of **every** query row on the kept items: two arrays (n_queries, n_items).

    The protocol needs them for dev and test rows of several splits; slice rows with ``[rows]``.
    ``device``: where the DE encodes (:class:`xenbench.models.retrievers.DualEncoder`).
    """
    from xenbench.models.retrievers import DualEncoder, TfidfRetriever

    items = [setup.dataset.items[i] for i in setup.items]
    queries = list(setup.dataset.queries)
    return DualEncoder(device=device).fit(items).scores(queries), TfidfRetriever().fit(items).scores(queries)
