"""What notebooks 03, 04 and 07 work on: the exact score matrix of one CE on a sample of one dataset, with its texts
and labels.

:func:`load_setup` draws the sample that keeps the labels (:func:`xenbench.data.datasets.corpus_sample`: the queries
with a relevant item, every relevant item of theirs and a seeded random fill) and reads its scores from a store (or
scores it with your own CE); :func:`de_embeddings` and :func:`retriever_scores` add the bundled dual encoder's
embeddings and the DE / TF-IDF scores of every query; :func:`first_stage_matrix` any first stage's scores
(``de``, ``tfidf``, ``bm25`` or a TREC run file), fitted on the whole corpus and read on the sample;
:meth:`Setup.grades` the relevance labels of every query on the kept items. The query rows are split by
:func:`xenbench.studies.protocol.query_splits` (anchor / dev / test rows), not here.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from xenbench.errors import ParameterError
from xenbench.sampling import Sample, sample_rows

log = logging.getLogger(__name__)

__all__ = ["Setup", "ce_seconds_per_call", "corpus_digest", "de_embeddings", "first_stage_lists", "first_stage_matrix",
           "fitted_first_stage", "load_setup", "read_sample", "retriever_scores", "returned_counts"]


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
        The sampled queries (rows of M, in order) over the whole corpus.
    items : ndarray of shape (n_items,)
        Dataset rows of the kept item columns.
    attrs : dict
        The store's manifest.
    sample : Sample, optional
        What :func:`load_setup` kept of the corpus (:class:`xenbench.sampling.Sample`).
    """

    M: np.ndarray
    dataset: Any
    items: np.ndarray
    attrs: dict
    sample: Sample | None = None
    returned: dict = field(default_factory=dict)

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
                f"({a.get('device')}, {a.get('precision')}, batched); Fig. 4 charges calls at this rate."
                + (f"\n{self.sample.describe()}" if self.sample is not None else ""))


def load_setup(store_path, dataset, *, seed: int = 0, max_items: int | None = None,
               model: str | os.PathLike[str] | Any = None, max_queries: int | None = None,
               device: str = "auto", max_length: int | None = None) -> Setup:
    """The exact matrix of one CE on a seeded sample of ``dataset`` that keeps its labels.

    The sample is :func:`xenbench.data.datasets.corpus_sample` of ``max_queries`` queries and ``max_items`` items
    (None: all): with qrels, queries with a relevant item and every relevant item of theirs plus a seeded random fill
    (refused, naming ``max_items``, when it cannot hold them); without, plain seeded rows.

    Two sources of scores. Without ``model``: the score store at ``store_path``, which must score ``dataset``'s
    queries and items in order; its sampled rows and columns are read block by block (a corpus-scale store is never
    held whole). With ``model`` (for your own data: a CE folder or hub id, loaded with ``max_length``; or, from
    Python, a model object: a xenbench CE, a ``sentence_transformers.CrossEncoder`` or a
    :class:`~xenbench.models.scorers.Scorer` with a fingerprint): the sample is scored with it through
    :func:`xenbench.models.cache.cached_scores` (resumable, cached by model and texts; ``store_path`` is ignored).

    The returned :class:`Setup` holds the sampled queries of ``dataset`` over its **whole** corpus (``items`` are the
    sampled columns' rows in it), so first stages learn their statistics from the corpus
    (:func:`first_stage_matrix`), and ``sample`` says what was kept.

    A CE that does not read the query (:func:`xenbench.models.ce_check.check_ce`: its rankings barely depend on the
    query, or it does not beat chance and BM25 on the sample's labels) is warned about, and the run's findings are
    marked as not to be trusted (:func:`xenbench.models.ce_check.warn_if_untrained`).

    Raises
    ------
    DataError
        If the store's query or item ids are not the dataset's, in the same order.
    ParameterError
        If ``model`` is not a CE folder, hub id or scorer, ``max_length`` is given without it, or ``max_items``
        cannot hold the sampled queries' relevant items.
    """
    from xenbench.data.datasets import corpus_sample
    from xenbench.data.sources import load_dataset
    from xenbench.data.store import ScoreStore
    from xenbench.errors import DataError

    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    sample = corpus_sample(ds, max_queries, max_items, seed, owner="load_setup")
    query_ids = [ds.queries[r].id for r in sample.queries]
    if model is not None and not (isinstance(model, str) and not model):
        from xenbench.models.cache import cached_scores

        store = cached_scores(model, ds.subset(query_ids, [ds.items[i].id for i in sample.items]), device=device,
                              max_length=max_length)
        M = store.to_numpy()
    else:
        if max_length is not None:
            raise ParameterError("max_length", "None unless model is given (a precomputed store is read as it is)",
                                 max_length, "load_setup")
        store = ScoreStore.open(store_path)
        if list(store.attrs["item_ids"]) != ds.item_ids or list(store.attrs["query_ids"]) != ds.query_ids:
            raise DataError(store.path, f"was not computed on {ds.name}: its query/item ids differ from the dataset's")
        M = read_sample(store, sample.queries, sample.items)
    from xenbench.models.ce_check import judged_items, sample_evidence, warn_if_untrained

    name = os.path.basename(str(model or store.attrs.get("model") or store_path).rstrip("/\\"))
    corpus = ds if sample.queries.size == len(ds.queries) else ds.subset(query_ids)
    kept = [corpus.items[i] for i in sample.items]  # a CE that does not read the query: warned, and the findings marked
    cols = judged_items(corpus.gold, corpus.queries, kept, seed=seed)  # a whole corpus: judged on a bounded part
    warn_if_untrained(M[:, cols], name, **sample_evidence(corpus.gold, corpus.queries, [kept[j] for j in cols]))
    return Setup(M=M, dataset=corpus, items=np.asarray(sample.items), attrs=store.attrs, sample=sample)


def read_sample(store: Any, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``store[rows][:, cols]`` (float32, shape (len(rows), len(cols))), read one row block at a time, so a store of a
    whole corpus is never held in memory at once; every block read is verified as :meth:`ScoreStore.read_chunk`
    verifies it."""
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    out = np.empty((rows.size, cols.size), dtype=np.float32)
    per = store.chunks[0]
    for block in np.unique(rows // per):
        start, _ = store.chunk_rows(int(block))
        mine = np.flatnonzero(rows // per == block)
        out[mine] = store.read_chunk(int(block))[rows[mine] - start][:, cols]
    return out


def de_embeddings(setup: Setup, *, device: str | torch.device = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Bundled DE embeddings (L2-normalized, float64): items V (n_items, d) and every query U (n_queries, d).

    Their inner products are the ``de_scores`` of :func:`retriever_scores`; AXN uses V as its item
    embeddings and U as u_param ([AXN] Eq. 7). ``device``: where the DE encodes
    (:class:`xenbench.models.retrievers.DualEncoder`).
    """
    from xenbench.models.retrievers import DualEncoder

    de = DualEncoder(device=device).fit([setup.dataset.items[i] for i in setup.items])
    return de.item_embeddings_.astype(np.float64), de.embed_queries(setup.dataset.queries).astype(np.float64)


#: Fitted first stages of this process, by (class, spec, device, digest of the corpus' item ids and texts): a notebook that
#: reads BM25 for 03's table and again for a figure fits it once.
_FITTED: dict[tuple[str, str, str], Any] = {}


def corpus_digest(items: Sequence[Any]) -> str:
    """SHA-256 of the items' ids and texts: the key of a first stage fitted on them."""
    import hashlib

    from xenbench.models.retrievers import item_text

    h = hashlib.sha256()
    for it in items:
        h.update(f"{it.id}\t{item_text(it)}\n".encode())
    return h.hexdigest()


def fitted_first_stage(spec: str, items: Sequence[Any], *, device: str | torch.device = "auto") -> Any:
    """The retriever of ``spec`` (:func:`xenbench.models.retrievers.make_retriever`) fitted on ``items``, once per
    process and corpus (:data:`_FITTED`, keyed by :func:`corpus_digest`)."""
    from xenbench.models.retrievers import make_retriever

    retriever = make_retriever(spec, device=device, owner="first_stage_matrix")  # cheap: nothing loads until fit
    key = (f"{type(retriever).__module__}.{type(retriever).__qualname__}", spec, str(device), corpus_digest(items))
    if key not in _FITTED:
        _FITTED.clear()  # one corpus at a time: a 10^6-item index is not kept beside the next one
        _FITTED[key] = retriever.fit(list(items))
    return _FITTED[key]


def first_stage_matrix(setup: Setup, first_stage: str = "de", *, device: str | torch.device = "auto",
                       depth: int | None = None, seed: int = 0, report: bool = True) -> np.ndarray:
    """A first stage's scores of **every** query row on the kept items, shape (n_queries, n_items), float32.

    ``first_stage`` is a :func:`xenbench.models.retrievers.make_retriever` spec: ``"de"`` (the bundled DE, on
    ``device``), ``"tfidf"``, ``"bm25"`` or ``"run:<path>"`` (a TREC run file). TF-IDF and BM25 are fitted on the
    **whole corpus** (``setup.dataset.items``: their document frequencies and average length are the corpus', not the
    sample's), then read on the kept items; the DE embeds each item alone, so its scores need no corpus statistics.

    What a first stage returns: with ``depth``, the items of its top ``depth`` over the whole corpus (so a sample
    keeps only those of them it holds); a run file, the items its list holds; otherwise every kept item. The items
    it does not return follow, below every returned one, in a seeded random order (``seed``; one permutation per
    query): a re-ranking past the first stage's list takes random items, not the corpus' first rows. With
    ``report``, a first stage that returns fewer than all kept items for some query is logged with its counts
    (:func:`returned_counts` gives them).

    Passed as ``de_scores`` it replaces the DE's ranking in the methods that start from one (DE re-rank, ANNCUR DE,
    ADACUR DE+TopK, AXN DE's first round). :func:`first_stage_lists` gives the top k of these rows a block of query
    rows at a time.
    """
    blocks = list(_first_stage_blocks(setup, first_stage, device=device, depth=depth, seed=seed, report=report,
                                      block_rows=len(setup.dataset.queries)))  # one block: the DE embeds all at once
    return np.concatenate([scores for scores, _ in blocks]) if len(blocks) > 1 else blocks[0][0]


def first_stage_lists(setup: Setup, first_stage: str, k: int, *, device: str | torch.device = "auto",
                      depth: int | None = None, seed: int = 0, report: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of :func:`first_stage_matrix`'s rows, computed :data:`_DEPTH_ROWS` query rows at a time, so no
    (n_queries, n_items) array is built: each row is the one :func:`first_stage_matrix` gives (its scores depend on
    its query alone; the seeded order of the items not returned is drawn row by row in the same order).

    Returns
    -------
    D : ndarray of shape (n_queries, k), float32
        The scores, best first.
    I : ndarray of shape (n_queries, k), int64
        The kept items' columns, in :func:`xenbench.metrics.topk_indices`'s order (ties: lower column).
    """
    from xenbench.metrics import topk_indices

    D, I = [], []
    for scores, _ in _first_stage_blocks(setup, first_stage, device=device, depth=depth, seed=seed, report=report,
                                         block_rows=_DEPTH_ROWS):
        top = topk_indices(scores, k)
        D.append(np.take_along_axis(scores, top, axis=1))
        I.append(top)
    return np.concatenate(D), np.concatenate(I)


def _first_stage_blocks(setup: Setup, first_stage: str, *, device: str | torch.device, depth: int | None, seed: int,
                        report: bool, block_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`first_stage_matrix`'s rows ``block_rows`` query rows at a time, in order: (scores with the items not
    returned filled in, float32; which items the first stage returned), each (rows, n_items); after the last block,
    the report and ``setup.returned``."""
    from xenbench.metrics import topk_indices
    from xenbench.models.first_stages import run_path

    cols = np.asarray(setup.items, dtype=np.int64)
    corpus = setup.dataset.items
    queries = list(setup.dataset.queries)
    if first_stage == "de" and depth is None:  # per-item embeddings: the sample's are the corpus' own
        fitted, read = fitted_first_stage("de", [corpus[i] for i in cols], device=device), None
    else:
        fitted, read = fitted_first_stage(first_stage, corpus, device=device), cols
    where = np.full(len(corpus), -1, dtype=np.int64)
    where[cols] = np.arange(cols.size)
    rng = np.random.default_rng([int(seed), 11])  # one stream over every row, whatever the blocks
    counts = []
    for first in range(0, len(queries), max(1, int(block_rows))):
        rows = queries[first:first + block_rows]
        scores = np.asarray(fitted.scores(rows, read), dtype=np.float32)
        returned = np.isfinite(scores)
        if depth is not None and depth < len(corpus):
            for start in range(0, len(rows), _DEPTH_ROWS):  # (rows x corpus) at a time, never every query at once
                block = np.asarray(fitted.scores(rows[start:start + _DEPTH_ROWS]), dtype=np.float32)
                top = topk_indices(block, depth)
                top = np.where(np.isfinite(np.take_along_axis(block, top, axis=1)), top, -1)
                kept = np.zeros((block.shape[0], cols.size), dtype=bool)
                r, c = np.nonzero(top >= 0)
                hit = where[top[r, c]] >= 0
                kept[r[hit], where[top[r, c]][hit]] = True
                returned[start:start + block.shape[0]] &= kept
        counts.append(returned.sum(axis=1))
        yield _fill_unreturned(scores, returned, rng), returned
    counts = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    if report:
        short = int((counts < cols.size).sum())
        if short:
            what = (f"its top {depth} over the corpus of {len(corpus):,} items" if depth is not None
                    else "its run file's lists" if run_path(first_stage) is not None else "its lists")
            log.warning("first stage %s: %d of %d queries get fewer than the %d kept items from %s (median %d, fewest "
                        "%d); the rest follow in a seeded random order (seed %d)", first_stage, short, len(queries),
                        cols.size, what, int(np.median(counts)), int(counts.min()), seed)
    if isinstance(getattr(setup, "returned", None), dict):
        setup.returned[first_stage] = counts


#: Query rows per block when a first stage's top ``depth`` over the corpus is found (a block x corpus float32 array).
_DEPTH_ROWS = 256


def _fill_unreturned(scores: np.ndarray, returned: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``scores`` with every item a first stage did not return placed below its returned ones, in a seeded random
    order per query (``rng``, drawn row by row): strictly decreasing from (the row's lowest returned score - 1), so the
    one top-k tie rule cannot fall back to column order."""
    out = scores.copy()
    for row in np.flatnonzero(~returned.all(axis=1)):
        miss = np.flatnonzero(~returned[row])
        floor = float(out[row, returned[row]].min()) - 1.0 if returned[row].any() else 0.0
        out[row, rng.permutation(miss)] = floor - np.arange(miss.size, dtype=np.float64)
    return out


def returned_counts(setup: Setup) -> dict[str, np.ndarray]:
    """Per first stage read through :func:`first_stage_matrix`: how many kept items it returned for each query row."""
    return dict(setup.returned)


def retriever_scores(setup: Setup, *, device: str | torch.device = "auto") -> tuple[np.ndarray, np.ndarray]:
    """DE and TF-IDF scores of **every** query row on the kept items: two arrays (n_queries, n_items), the TF-IDF
    fitted on the whole corpus (:func:`first_stage_matrix`).

    The protocol needs them for dev and test rows of several splits; slice rows with ``[rows]``.
    ``device``: where the DE encodes (:class:`xenbench.models.retrievers.DualEncoder`).
    """
    return (first_stage_matrix(setup, "de", device=device, report=False),
            first_stage_matrix(setup, "tfidf", device=device, report=False))
