"""First-stage retrievers: the dual encoder (DE) and TF-IDF baselines of ANNCUR §4, BM25, and a TREC run file.

All follow one contract: ``fit(items)`` indexes offline, ``scores(queries)`` gives every item's score (nq, nb)
(``scores(queries, columns)`` those of some item rows: a first stage fitted on a whole corpus, read on a sample) and
``search(queries, k) -> (D, I)`` retrieves online, with ``D`` float32 of shape (nq, k) (scores, best first) and
``I`` int64 of shape (nq, k) (item rows; ``-1`` and ``-inf`` pad where a run file lists fewer than k items).

A first stage is named by one string (:func:`make_retriever`, the ``first_stage`` parameter of the notebooks):
``"de"``, ``"tfidf"``, ``"bm25"`` or ``"run:<path>"`` (a TREC run file, :class:`RunRetriever`).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from xenbench._validation import check_is_fitted
from xenbench._device import resolve_device
from xenbench.models.crossencoder import bundled_backbone
from xenbench.data.datasets import Item, Query
from xenbench.errors import DataError, ParameterError
from xenbench.models.first_stages import FIRST_STAGES, check_first_stage, first_stage_label, run_path  # noqa: F401
from xenbench.metrics import topk_indices
from xenbench.provenance import record_input

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$XENBENCH_CACHE`` or ``~/.cache/xenbench``."""
    return Path(os.environ.get("XENBENCH_CACHE", Path.home() / ".cache" / "xenbench"))


def item_text(item: Item) -> str:
    """The text a retriever sees for an item: ``"title: text"``."""
    return f"{item.title}: {item.text}" if item.title else item.text


_TOPK_ROWS = 1024  # queries per block of topk: bounds the working set of topk_indices on a whole domain


def topk(scores: torch.Tensor | np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k per row of ``scores`` (nq, nb) -> ``(D, I)``, D float32 (nq, k), I int64 (nq, k).

    The scores are compared in float32; ``k`` above nb returns all nb items. Order and ties follow the one
    rule of :mod:`xenbench.metrics` (higher score first, equal scores by lower item index):
    :func:`xenbench.metrics.topk_indices` on blocks of rows.
    """
    s = torch.as_tensor(scores).float().numpy()
    k = min(k, s.shape[1])
    if k == 0:
        return np.zeros((s.shape[0], 0), np.float32), np.zeros((s.shape[0], 0), np.int64)
    I = np.concatenate([topk_indices(s[start:start + _TOPK_ROWS], k) for start in range(0, s.shape[0], _TOPK_ROWS)]) \
        if s.shape[0] else np.zeros((0, k), np.int64)
    return np.take_along_axis(s, I, axis=1).astype(np.float32, copy=False), I


class DualEncoder:
    """Bi-encoder e(x) = normalize(mean-pool(BERT(x))); score = cosine (ANNCUR's DE baseline).

    Parameters
    ----------
    model : str or Path, default "bundled"
        A local Hugging Face folder, or ``"bundled"`` for all-MiniLM-L6-v2.
    batch_size : int
    max_length : int
        Tokens per text after truncation.
    device : str or torch.device, default "auto"
        Where to encode: ``"auto"`` (CUDA when available, else MPS, else CPU), ``"cpu"``, ``"cuda"``,
        ``"cuda:<k>"`` or ``"mps"`` (:func:`xenbench._device.resolve_device`).
    cache_dir : Path or None
        Embeddings are cached on disk keyed by the model's weights file and the exact texts; ``None`` uses
        :func:`default_cache_dir`; ``False`` disables the cache. The model itself loads on the first text the cache
        lacks. A cache file that is unreadable, truncated, of the wrong shape or dtype, or holds NaN/inf is recomputed
        and replaced (with a warning naming it); a cache that cannot be written (a full disk) is skipped with a
        warning.
    """

    def __init__(
        self,
        model: str | Path = "bundled",
        *,
        batch_size: int = 128,
        max_length: int = 128,
        device: str | torch.device = "auto",
        cache_dir: Path | None | bool = None,
    ) -> None:
        self.device = resolve_device(device, owner="DualEncoder")  # before loading anything: a bad device fails fast
        self.path = bundled_backbone() if str(model) == "bundled" else Path(model)
        if not (self.path / "config.json").is_file():
            raise DataError(self.path, "is not a Hugging Face model folder (no config.json): the dual encoder's "
                                       "model is such a folder, or \"bundled\"")
        record_input("model", self.path)  # its digest goes into the run's provenance
        self.batch_size = batch_size
        self.max_length = max_length
        self.cache_dir = None if cache_dir is False else Path(cache_dir or default_cache_dir()) / "embeddings"
        self._model_key = _file_digest(self.path)

    # The model loads on the first text that is not cached: a notebook whose embeddings are all cached never imports
    # transformers for them (1.3 of the 1.9 CPU-s a first DualEncoder took in a fresh process).
    @functools.cached_property
    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.path)

    @functools.cached_property
    def model(self) -> torch.nn.Module:
        from transformers import AutoModel

        from xenbench.models.loading import quiet_loading

        # Loaded outside inference mode even when encode() asks for it: its weights stay ordinary tensors.
        with quiet_loading(), torch.inference_mode(False):  # the unused-pooler load report is expected
            return AutoModel.from_pretrained(self.path, add_pooling_layer=False).eval().to(self.device)

    @functools.cached_property
    def dim(self) -> int:
        """The embedding width d: ``hidden_size`` of the folder's config, read without loading the model."""
        width = json.loads((self.path / "config.json").read_text(encoding="utf-8")).get("hidden_size")
        return width if isinstance(width, int) else int(self.model.config.hidden_size)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], *, desc: str = "embedding") -> np.ndarray:
        """L2-normalized embeddings, float32 of shape (len(texts), d); read from/written to the cache."""
        key = hashlib.sha256(
            (self._model_key + f"|{self.max_length}|" + "\x1e".join(texts)).encode()
        ).hexdigest()[:32]
        cached = self.cache_dir / f"{key}.npy" if self.cache_dir else None
        if cached is not None and cached.exists():
            emb = _read_cache(cached, (len(texts), self.dim))
            if emb is not None:
                return emb
        order = np.argsort([len(t) for t in texts], kind="stable")  # similar lengths -> less padding
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for s in tqdm(range(0, len(texts), self.batch_size), desc=desc, disable=len(texts) <= self.batch_size):
            rows = order[s : s + self.batch_size]
            batch = self.tokenizer(
                [texts[r] for r in rows], padding=True, truncation=True,
                max_length=self.max_length, return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)
            out[rows] = torch.nn.functional.normalize(emb, dim=-1).float().cpu().numpy()
        bad = ~np.isfinite(out).all(axis=1)
        if bad.any():  # never cached: a NaN row would otherwise be served to every later run
            raise DataError(self.path, f"the dual encoder gives NaN/inf embeddings for {int(bad.sum())} of {len(texts)} "
                                       f"texts (first: text {int(np.argmax(bad))}): do its weights hold NaN?")
        if cached is not None:
            _write_cache(cached, out)
        return out

    def fit(self, items: Sequence[Item]) -> DualEncoder:
        """Embed the items (the offline index): ``item_embeddings_`` of shape (nb, d)."""
        self.item_embeddings_ = self.encode([item_text(it) for it in items], desc="items")
        return self

    def embed_queries(self, queries: Sequence[Query]) -> np.ndarray:
        """Query embeddings (nq, d): the query text as is (mention spans are not marked)."""
        return self.encode([q.text for q in queries], desc="queries")

    def scores(self, queries: Sequence[Query], columns: np.ndarray | None = None) -> np.ndarray:
        """Cosine scores (nq, nb) against the fitted items (``columns``: against those item rows only)."""
        check_is_fitted(self, "item_embeddings_", "fit(items)")
        items = self.item_embeddings_ if columns is None else self.item_embeddings_[np.asarray(columns)]
        return self.embed_queries(queries) @ items.T

    def search(self, queries: Sequence[Query], k: int) -> tuple[np.ndarray, np.ndarray]:
        return topk(self.scores(queries), k)


class TfidfRetriever:
    """TF-IDF cosine retrieval (scikit-learn), ANNCUR's sparse baseline.

    Fitted on the item texts; unigrams and bigrams, sublinear tf.
    """

    def __init__(self, *, ngram_range: tuple[int, int] = (1, 2), min_df: int = 1) -> None:
        self.ngram_range = ngram_range
        self.min_df = min_df

    def fit(self, items: Sequence[Item]) -> TfidfRetriever:
        if not items:
            raise ParameterError("items", "a non-empty sequence", [], "TfidfRetriever.fit")
        from sklearn.feature_extraction.text import TfidfVectorizer  # seconds to import: only when a TF-IDF is fitted

        self.vectorizer_ = TfidfVectorizer(ngram_range=self.ngram_range, min_df=self.min_df, sublinear_tf=True)
        self.item_matrix_ = self.vectorizer_.fit_transform([item_text(it) for it in items])
        return self

    def scores(self, queries: Sequence[Query], columns: np.ndarray | None = None) -> np.ndarray:
        """Cosine scores (nq, nb), dense float32 (``columns``: of those item rows only; the idf stays the fitted
        items')."""
        check_is_fitted(self, "vectorizer_", "fit(items)")
        q = self.vectorizer_.transform([query.text for query in queries])
        items = self.item_matrix_ if columns is None else self.item_matrix_[np.asarray(columns)]
        return np.asarray((q @ items.T).todense(), dtype=np.float32)

    def search(self, queries: Sequence[Query], k: int) -> tuple[np.ndarray, np.ndarray]:
        return topk(self.scores(queries), k)


class BM25Retriever:
    """BM25 through ``bm25s`` (Lucene's variant by default): the first stage most re-ranking papers start from.

    Items are indexed as ``"title: text"`` (:func:`item_text`), lower-cased, split into word tokens of two or more
    characters, English stop words removed, no stemming (bm25s's tokenizer); a query term absent from the items
    scores nothing.

    Parameters
    ----------
    k1, b : float
        BM25's term-frequency saturation and length normalization (bm25s's defaults, 1.5 and 0.75).
    method : str
        bm25s's variant: ``"lucene"`` (Lucene's since version 8: Σ_t idf(t) · tf / (tf + k1 · (1 − b + b · |d| /
        avgdl)) with idf = ln(1 + (N − df + 0.5) / (df + 0.5)); the classic (k1 + 1) factor of the numerator scales
        every score alike), ``"robertson"``, ``"atire"``, ``"bm25l"`` or ``"bm25+"``.
    stopwords : str or list of str
        bm25s's stop words (``"en"``; ``[]`` keeps every word).
    """

    def __init__(self, *, k1: float = 1.5, b: float = 0.75, method: str = "lucene", stopwords: str | list = "en") -> None:
        self.k1, self.b, self.method, self.stopwords = k1, b, method, stopwords

    def fit(self, items: Sequence[Item]) -> BM25Retriever:
        import bm25s
        from bm25s.tokenization import Tokenizer

        # bm25s sets its own logger to DEBUG on import, so every fit would print "Building index ..." wherever
        # logging is configured (a notebook, the CLI): its warnings are all a user needs
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        if not items:
            raise ParameterError("items", "a non-empty sequence", [], "BM25Retriever.fit")
        self.tokenizer_ = Tokenizer(stopwords=self.stopwords)
        tokens = self.tokenizer_.tokenize([item_text(it) for it in items], return_as="ids", show_progress=False)
        self.index_ = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        self.index_.index(tokens, show_progress=False)
        self.n_items_ = len(items)
        return self

    def scores(self, queries: Sequence[Query], columns: np.ndarray | None = None) -> np.ndarray:
        """BM25 scores (nq, nb), float32 (``columns``: of those item rows only; document frequencies and the average
        length stay the fitted items')."""
        check_is_fitted(self, "index_", "fit(items)")
        tokens = self.tokenizer_.tokenize([q.text for q in queries], update_vocab=False, return_as="ids",
                                          show_progress=False)
        cols = None if columns is None else np.asarray(columns)
        out = np.zeros((len(queries), self.n_items_ if cols is None else cols.size), dtype=np.float32)
        for row, ids in enumerate(tokens):
            if ids:  # a query of unknown words only is the empty token: it matches nothing
                every = self.index_.get_scores(list(ids))
                out[row] = every if cols is None else every[cols]
        return out

    def search(self, queries: Sequence[Query], k: int) -> tuple[np.ndarray, np.ndarray]:
        return topk(self.scores(queries), k)


class RunRetriever:
    """A TREC run file as a first stage: each query's list, in the run's order, over the items it is fitted on.

    Items of a list that are not among the fitted items are skipped (a seeded subsample of the corpus); scores are
    ``n − position`` for the n kept items of a list (the run's order, strictly decreasing) and ``-inf`` for the others,
    so ``search`` pads a list shorter than k with ``I = -1`` and ``D = -inf``.

    Parameters
    ----------
    run : Run or str or Path
        A :class:`xenbench.data.trec.Run` or the path of a run file (:func:`xenbench.data.trec.read_trec_run`).
    """

    def __init__(self, run) -> None:
        from xenbench.data.trec import Run, read_trec_run

        self.run = run if isinstance(run, Run) else read_trec_run(run)

    def fit(self, items: Sequence[Item]) -> RunRetriever:
        self.item_index_ = {it.id: row for row, it in enumerate(items)}
        return self

    def scores(self, queries: Sequence[Query], columns: np.ndarray | None = None) -> np.ndarray:
        """Rank-based scores (nq, nb), float32; ``-inf`` for items the query's list does not hold (``columns``: of
        those item rows only, the ranks still counted over every fitted item).

        Raises
        ------
        DataError
            Naming the run file, when it has no list for a query.
        """
        check_is_fitted(self, "item_index_", "fit(items)")
        out = np.full((len(queries), len(self.item_index_)), -np.inf, dtype=np.float32)
        for row, q in enumerate(queries):
            docs = self.run.lists.get(q.id)
            if docs is None:
                raise DataError(self.run.path, f"has no list for query {q.id!r}: a first stage must rank every query")
            cols = [self.item_index_[d] for d in docs if d in self.item_index_]
            out[row, cols] = np.arange(len(cols), 0, -1, dtype=np.float32)
        return out if columns is None else out[:, np.asarray(columns)]

    def search(self, queries: Sequence[Query], k: int) -> tuple[np.ndarray, np.ndarray]:
        D, I = topk(self.scores(queries), k)
        I[np.isneginf(D)] = -1
        return D, I


def make_retriever(spec: str, *, device: str | torch.device = "auto", owner: str | None = None):
    """The unfitted retriever a first-stage ``spec`` names: :class:`DualEncoder` (on ``device``),
    :class:`TfidfRetriever`, :class:`BM25Retriever` or :class:`RunRetriever` (the run file is read here)."""
    spec = check_first_stage(spec, owner=owner)
    path = run_path(spec)
    if path is not None:
        return RunRetriever(path)
    return {"de": lambda: DualEncoder(device=device), "tfidf": TfidfRetriever, "bm25": BM25Retriever}[spec]()


def _read_cache(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached embeddings at ``path`` if they are what :meth:`DualEncoder.encode` wrote: a float32 array of
    ``shape``, all finite. Anything else (a truncated or foreign file, a pickle, NaN) is logged and None returned,
    so the caller recomputes and replaces it."""
    try:
        if not path.is_file():
            raise ValueError("not a regular file")
        emb = np.load(path, allow_pickle=False)  # never unpickle: the cache folder is writable by anyone's tools
    except (OSError, ValueError, EOFError) as err:
        problem = f"unreadable ({type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''})"
    else:
        if not isinstance(emb, np.ndarray) or emb.dtype != np.float32 or emb.shape != shape:
            problem = f"holds a {getattr(emb, 'dtype', type(emb).__name__)} array of shape " \
                      f"{getattr(emb, 'shape', '?')}, expected float32 {shape}"
        elif not np.isfinite(emb).all():
            problem = "holds NaN/inf"
        else:
            return emb
    log.warning("embedding cache file %s %s: recomputing it (the cache folder %s can be deleted at any time)", path,
                problem, path.parent)
    if path.is_dir():
        raise DataError(path, f"is a folder where an embedding cache file belongs: delete it (rm -r {path})")
    return None


def _write_cache(path: Path, emb: np.ndarray) -> None:
    """Write ``emb`` to ``path`` through a temporary file; a cache that cannot be written is skipped, not fatal."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(tmp, emb)
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        log.warning("embedding cache %s not written (%s): continuing without it", path, err.strerror or err)


def _file_digest(folder: Path) -> str:
    """Cheap identity of a model folder: size and mtime-free digest of its first MB of weights."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        f = folder / name
        if f.is_file():
            with f.open("rb") as fh:
                head = fh.read(1 << 20)
            return f"{name}:{f.stat().st_size}:{hashlib.sha256(head).hexdigest()[:16]}"
    return str(folder.resolve())


def retriever_score_store(
    retriever: str,
    dataset,
    out: str | Path,
    *,
    query_ids: Sequence[str] | None = None,
    item_ids: Sequence[str] | None = None,
    model: str | Path = "bundled",
    device: str | torch.device = "auto",
    overwrite: bool = False,
):
    """Write a first-stage retriever's dense scores (cosine) for queries × items into a ScoreStore.

    The DE/TF-IDF counterpart of :func:`xenbench.models.jobs.run_score_job`: the same store format and manifest
    fields, so a DE matrix lines up entry for entry with the CE matrices of the same ids.

    Parameters
    ----------
    retriever : {"de", "tfidf"}
    dataset : Dataset or str
        A Dataset or a :func:`~xenbench.data.sources.load_dataset` spec.
    out : path
        Store folder. If it holds a store of the same job (retriever, model, ids and texts), that store is
        finished if a failed write left it incomplete, or returned as is; a store of another job is refused
        unless ``overwrite``.
    query_ids, item_ids : sequence of str, optional
        Rows and columns in this order (default: all, in dataset order).
    model : str or Path
        The dual encoder's model folder (``"bundled"``: all-MiniLM-L6-v2).
    device : str or torch.device
        Where the dual encoder runs (:func:`~xenbench._device.resolve_device`); TF-IDF runs on the CPU, so only
        ``"auto"`` and ``"cpu"`` are accepted for it.
    overwrite : bool
        Replace a store already at ``out`` (``xenbench score --overwrite``).
    """
    import time

    from xenbench.data.sources import load_dataset
    from xenbench.data.store import ScoreStore, writer_lock

    owner = "retriever_score_store"
    if retriever not in ("de", "tfidf"):
        raise ParameterError("retriever", "'de' or 'tfidf'", retriever, owner)
    dev = resolve_device(device, owner=owner)
    if retriever == "tfidf" and not (device == "auto" or dev.type == "cpu"):
        raise ParameterError("device", "'auto' or 'cpu' for tfidf (scikit-learn runs on the CPU)", device, owner)
    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    queries = ds.queries if query_ids is None else [ds.query(q) for q in query_ids]
    items = ds.items if item_ids is None else [ds.item(i) for i in item_ids]
    name = ("bundled:all-MiniLM-L6-v2" if str(model) == "bundled" else str(model)) if retriever == "de" else "tfidf"
    texts = hashlib.sha256("\x1e".join([*(q.text for q in queries), *map(item_text, items)]).encode()).hexdigest()
    identity = {"model": name, "kind": retriever, "query_ids": [q.id for q in queries],
                "item_ids": [i.id for i in items], "texts_sha256": texts}
    out = Path(out)
    with writer_lock(out):
        store = None
        if (out / "zarr.json").is_file() and not overwrite:
            store = ScoreStore.open(out, mode="r+")
            differs = [k for k, v in identity.items() if store.attrs.get(k) != v]
            if differs:
                raise DataError(out, f"holds a score store of another job ({differs[0]} differs): pass --overwrite "
                                     "(overwrite=True) to replace it, or choose another output path")
            if store.is_complete and not store.verify():
                log.info("%s already holds these %s scores", out, retriever)
                return store
        t0 = time.perf_counter()
        r = DualEncoder(model, device=dev) if retriever == "de" else TfidfRetriever()
        M = r.fit(items).scores(queries)
        wall = time.perf_counter() - t0
        if store is None:
            from xenbench import __version__

            attrs = {**identity, "dataset": ds.name, "domain": ds.name.split(":", 1)[-1], "precision": "fp32",
                     "wall_s": round(wall, 2), "device": str(getattr(r, "device", "cpu")),
                     "torch_version": torch.__version__, "xenbench_version": __version__}
            store = ScoreStore.create(out, len(queries), len(items), chunks=(len(queries), None), attrs=attrs,
                                      overwrite=overwrite)
        store.write_chunk(0, M)
    return store
