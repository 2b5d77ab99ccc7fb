"""First-stage retrievers: the dual encoder (DE) and TF-IDF baselines of ANNCUR §4.

Both follow one contract: ``fit(items)`` indexes offline, ``search(queries, k) -> (D, I)`` retrieves online,
with ``D`` float32 of shape (nq, k) (scores, best first) and ``I`` int64 of shape (nq, k) (item rows).
"""
from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from sklearn.feature_extraction.text import TfidfVectorizer
from tqdm.auto import tqdm

from xenbench._validation import check_is_fitted
from xenbench._device import resolve_device
from xenbench.models.crossencoder import bundled_backbone, quiet_loading
from xenbench.data.datasets import Item, Query
from xenbench.errors import ParameterError
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
        ``"cuda:<k>"`` or ``"mps"`` (:func:`xenbench.models.crossencoder.resolve_device`).
    cache_dir : Path or None
        Embeddings are cached on disk keyed by the model's weights file and the exact texts;
        ``None`` uses :func:`default_cache_dir`; ``False`` disables the cache.
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
        from transformers import AutoModel, AutoTokenizer

        self.device = resolve_device(device, owner="DualEncoder")  # before loading anything: a bad device fails fast
        self.path = bundled_backbone() if str(model) == "bundled" else Path(model)
        record_input("model", self.path)  # its digest goes into the run's provenance
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        with quiet_loading():  # the unused-pooler load report is expected
            self.model = AutoModel.from_pretrained(self.path, add_pooling_layer=False).eval()
        self.model.to(self.device)
        self.batch_size = batch_size
        self.max_length = max_length
        self.cache_dir = None if cache_dir is False else Path(cache_dir or default_cache_dir()) / "embeddings"
        self._model_key = _file_digest(self.path)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], *, desc: str = "embedding") -> np.ndarray:
        """L2-normalized embeddings, float32 of shape (len(texts), d); read from/written to the cache."""
        key = hashlib.sha256(
            (self._model_key + f"|{self.max_length}|" + "\x1e".join(texts)).encode()
        ).hexdigest()[:32]
        cached = self.cache_dir / f"{key}.npy" if self.cache_dir else None
        if cached is not None and cached.is_file():
            return np.load(cached)
        order = np.argsort([len(t) for t in texts], kind="stable")  # similar lengths -> less padding
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
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
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, out)
            tmp.replace(cached)
        return out

    def fit(self, items: Sequence[Item]) -> DualEncoder:
        """Embed the items (the offline index): ``item_embeddings_`` of shape (nb, d)."""
        self.item_embeddings_ = self.encode([item_text(it) for it in items], desc="items")
        return self

    def embed_queries(self, queries: Sequence[Query]) -> np.ndarray:
        """Query embeddings (nq, d): the query text as is (mention spans are not marked)."""
        return self.encode([q.text for q in queries], desc="queries")

    def scores(self, queries: Sequence[Query]) -> np.ndarray:
        """Cosine scores (nq, nb) against the fitted items."""
        check_is_fitted(self, "item_embeddings_", "fit(items)")
        return self.embed_queries(queries) @ self.item_embeddings_.T

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
        self.vectorizer_ = TfidfVectorizer(ngram_range=self.ngram_range, min_df=self.min_df, sublinear_tf=True)
        self.item_matrix_ = self.vectorizer_.fit_transform([item_text(it) for it in items])
        return self

    def scores(self, queries: Sequence[Query]) -> np.ndarray:
        """Cosine scores (nq, nb), dense float32."""
        check_is_fitted(self, "vectorizer_", "fit(items)")
        q = self.vectorizer_.transform([query.text for query in queries])
        return np.asarray((q @ self.item_matrix_.T).todense(), dtype=np.float32)

    def search(self, queries: Sequence[Query], k: int) -> tuple[np.ndarray, np.ndarray]:
        return topk(self.scores(queries), k)


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
):
    """Write a first-stage retriever's dense scores (cosine) for queries × items into a ScoreStore.

    The DE/TF-IDF counterpart of :func:`xenbench.models.scoring.run_score_job`: the same store format and manifest
    fields, so a DE matrix lines up entry for entry with the CE matrices of the same ids.

    Parameters
    ----------
    retriever : {"de", "tfidf"}
    dataset : Dataset or str
        A Dataset or a :func:`~xenbench.data.datasets.load_dataset` spec.
    out : path
        Store folder (must not exist: the matrix takes seconds, there is nothing to resume).
    query_ids, item_ids : sequence of str, optional
        Rows and columns in this order (default: all, in dataset order).
    model : str or Path
        The dual encoder's model folder (``"bundled"``: all-MiniLM-L6-v2).
    """
    import time

    from xenbench.data.datasets import load_dataset
    from xenbench.data.store import ScoreStore

    if retriever not in ("de", "tfidf"):
        raise ParameterError("retriever", "'de' or 'tfidf'", retriever, "retriever_score_store")
    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    queries = ds.queries if query_ids is None else [ds.query(q) for q in query_ids]
    items = ds.items if item_ids is None else [ds.item(i) for i in item_ids]
    t0 = time.perf_counter()
    r = DualEncoder(model) if retriever == "de" else TfidfRetriever()
    M = r.fit(items).scores(queries)
    wall = time.perf_counter() - t0
    name = ("bundled:all-MiniLM-L6-v2" if str(model) == "bundled" else str(model)) if retriever == "de" else "tfidf"
    attrs = {"model": name, "kind": retriever, "dataset": ds.name,
             "domain": ds.name.split(":", 1)[-1], "query_ids": [q.id for q in queries],
             "item_ids": [i.id for i in items], "precision": "fp32", "wall_s": round(wall, 2),
             "device": str(getattr(r, "device", "cpu")), "torch_version": torch.__version__}
    from xenbench import __version__

    attrs["xenbench_version"] = __version__
    store = ScoreStore.create(out, len(queries), len(items), chunks=(len(queries), None), attrs=attrs)
    store.write_chunk(0, M)
    return store
