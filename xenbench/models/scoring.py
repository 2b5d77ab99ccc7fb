"""Exact cross-encoder scores: dense query×item matrices (resumable, on disk) and sparse pair lists.

Both paths share one engine:

1. each query and item is tokenized **once** (:meth:`PairEncoder.encode_queries` / ``encode_items``),
   n + m tokenizer calls for n·m pairs;
2. pairs are assembled from token ids by vectorized gathers (:class:`PairAssembler`: the same tensors as
   :meth:`PairEncoder.collate`, without its per-pair Python loop), on the target device;
3. within a query chunk, pairs are sorted by length and cut into batches, so each batch is padded only to
   its own longest pair (length bucketing + dynamic padding);
4. a BERT CE runs padding-free (:func:`~xenbench.models.packed.packed_forward`: token-wise ops on the attended
   tokens only, the same scores as the padded forward); other architectures run the padded ``ce(batch)``;
5. ``torch.inference_mode`` and, when asked, autocast to bf16/fp16 (fp32 by default: bf16 noise of about
   1e-2 relative inflates numerical ranks, see FACTS.md).

:func:`score_to_store` writes row chunks to a :class:`~xenbench.data.store.ScoreStore` and skips the chunks a
previous (killed) run finished; :func:`score_pairs_sparse` scores given (query, item) entries, e.g. AXN's
sparse matrix G; :func:`run_score_job` is the ``xenbench score`` entry point.
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from xenbench import __version__
from xenbench._io import repo_relative
from xenbench._validation import check_int
from xenbench._device import resolve_device
from xenbench.models import packed
from xenbench.models.crossencoder import (
    CEConfig,
    CrossEncoder,
    build_cross_encoder,
    load_cross_encoder,
    truncated_lengths,
)
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.errors import DataError, ParameterError
from xenbench.data.store import ScoreStore, writer_lock
from xenbench.models.fingerprint import (cache_path, folder_fingerprint, load_shared, model_fingerprint,
                                         texts_fingerprint)

__all__ = [
    "PairAssembler",
    "ScoreTiming",
    "ScoredMatrix",
    "score_matrix",
    "score_to_store",
    "score_pairs_sparse",
    "run_score_job",
    "model_fingerprint",
    "cache_path",
    "cached_scores",
]

logger = logging.getLogger(__name__)

Precision = Literal["fp32", "bf16", "fp16", "bf16-weights"]
PRECISIONS = ("fp32", "bf16", "fp16", "bf16-weights")
_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: Pairs per length-sorted batch when ``batch_size=None``, by device type. On 2 CPU cores MiniLM-L6 ran
#: fastest at 64-128 pairs of ~29 tokens (larger batches stop helping the matmuls and cost cache); a GPU
#: needs large batches to fill (2048 gave 44k pairs/s fp32 on an H100 for data/scores/).
DEFAULT_BATCH_SIZE = {"cpu": 64, "cuda": 1024, "mps": 256}
#: A query chunk (the unit of resume) holds about this many pairs when ``query_chunk`` is not given:
#: a couple of minutes on 2 CPU cores, a few seconds on a GPU.
TARGET_CHUNK_PAIRS = 2**16


# -- timing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreTiming:
    """What one scoring call cost.

    Attributes
    ----------
    n_pairs : int
        Pairs scored by this call (chunks skipped on resume are not counted).
    wall_s : float
        Wall time of the scoring loop (tokenization included, model loading excluded).
    device, precision : str
        Where and how the forward passes ran.
    batch_size, n_threads : int
        Pairs per batch and ``torch.get_num_threads()``.
    """

    n_pairs: int
    wall_s: float
    device: str
    precision: str
    batch_size: int
    n_threads: int

    @property
    def pairs_per_s(self) -> float:
        return self.n_pairs / self.wall_s if self.wall_s > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pairs_per_s": self.pairs_per_s}

    @classmethod
    def last(cls, store: ScoreStore) -> ScoreTiming:
        """The timing of the last :func:`score_to_store` call on ``store`` (from its ``sessions`` attribute)."""
        session = (store.attrs.get("sessions") or [None])[-1]
        if not session:
            raise DataError(store.path, "has no scoring session recorded (it was not written by score_to_store)")
        return cls(**{f: session[f] for f in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ScoredMatrix:
    """What :func:`score_matrix` returns: the scores and what computing them cost."""

    scores: np.ndarray  # (n_queries, n_items), float32
    timing: ScoreTiming


# -- parameters -----------------------------------------------------------------------------------


def _check_common(ce: Any, queries: Any, items: Any, batch_size: Any, precision: Any, owner: str) -> None:
    if not isinstance(ce, CrossEncoder):
        raise ParameterError("ce", "a xenbench CrossEncoder (build_cross_encoder / load_cross_encoder)",
                             type(ce).__name__, owner)
    for name, seq, kind in (("queries", queries, Query), ("items", items, Item)):
        if isinstance(seq, (str, bytes)) or not isinstance(seq, Sequence):
            raise ParameterError(name, f"a non-empty sequence of {kind.__name__}", type(seq).__name__, owner)
        if len(seq) == 0:
            raise ParameterError(name, f"a non-empty sequence of {kind.__name__}", seq, owner)
        bad = next((j for j, x in enumerate(seq) if not isinstance(x, kind)), None)
        if bad is not None:
            raise ParameterError(name, f"a sequence of {kind.__name__} (entry {bad} is not)",
                                 type(seq[bad]).__name__, owner)
    check_int(batch_size, "batch_size", 1, None, owner, allow_none=True, expected="an int >= 1 or None")
    if precision not in PRECISIONS:
        raise ParameterError("precision", f"one of {list(PRECISIONS)}", precision, owner)


# -- pair assembly --------------------------------------------------------------------------------


class PairAssembler:
    """Builds :meth:`PairEncoder.collate` batches for (query row, item row) index pairs, vectorized.

    Each query's and each item's segment ids are stored once in a padded id table on ``device``; a batch is a
    few gathers and ``where``s over the regions of ``pairs.template`` (``prefix · query · mid · pad · item ·
    suffix``), with each pair's segments truncated as the template says (:func:`truncated_lengths`). The output
    equals ``ce.pairs.collate([q_ids[r] ...], [i_ids[c] ...])`` exactly (tested).

    Parameters
    ----------
    pairs : PairEncoder
        ``ce.pairs`` (its ``template``).
    q_ids, i_ids : list of list of int
        Segment token ids from ``encode_queries`` / ``encode_items``.
    device : torch.device
        Where the tables and batches live.
    """

    def __init__(self, pairs: Any, q_ids: Sequence[list[int]], i_ids: Sequence[list[int]],
                 device: torch.device | str = "cpu") -> None:
        self.template = t = pairs.template
        self.pad_id = int(t.pad_id)
        self.device = torch.device(device)
        self.q_len = np.array([len(q) for q in q_ids], dtype=np.int64)
        self.i_len = np.array([len(i) for i in i_ids], dtype=np.int64)
        self._q_ids = self._table(q_ids, max(int(self.q_len.max(initial=0)), 1))
        self._i_ids = self._table(i_ids, max(int(self.i_len.max(initial=0)), 1))
        self._q_len_t = torch.as_tensor(self.q_len, device=self.device)
        self._i_len_t = torch.as_tensor(self.i_len, device=self.device)
        self._const = [torch.tensor(list(r) or [self.pad_id], dtype=torch.long, device=self.device)
                       for r in (t.prefix, t.mid, t.suffix)]
        self._n = (len(t.prefix), len(t.mid), len(t.suffix))
        # No pair is longer than its constant regions, both longest segments and the query padding together.
        width = sum(self._n) + int(self.q_len.max(initial=0)) + int(self.i_len.max(initial=0)) + (t.query_pad_to or 0)
        self._pos = torch.arange(width, device=self.device)

    def _table(self, rows: Sequence[list[int]], width: int) -> torch.Tensor:
        table = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        lens = np.array([len(r) for r in rows], dtype=np.int64)
        # One flat copy instead of a Python loop of row assignments.
        table[np.arange(width)[None, :] < lens[:, None]] = np.fromiter(
            (t for r in rows for t in r), dtype=np.int64, count=int(lens.sum()))
        return torch.from_numpy(table).to(self.device)

    def _layout(self, a, b):
        """Region ends of pairs with segment lengths ``a``, ``b`` (numpy or torch): (a', b', head, item start)."""
        n_prefix, n_mid, _ = self._n
        a, b = truncated_lengths(a, b, self.template)
        head = n_prefix + a + n_mid
        pad_to = self.template.query_pad_to or 0
        start = head + ((pad_to - head).clip(min=0) if isinstance(head, np.ndarray) else (pad_to - head).clamp(min=0))
        return a, b, head, start

    def lengths(self, q_rows: np.ndarray, i_rows: np.ndarray) -> np.ndarray:
        """Padded length of each pair: ndarray of shape (B,), int64."""
        _, b, _, start = self._layout(self.q_len[q_rows], self.i_len[i_rows])
        return start + b + self._n[2]

    def batch(self, q_rows: np.ndarray | torch.Tensor, i_rows: np.ndarray | torch.Tensor,
              width: int | None = None) -> dict[str, torch.Tensor]:
        """The batch of pairs ``(q_rows[b], i_rows[b])``.

        Parameters
        ----------
        q_rows, i_rows : array of shape (B,)
            Rows into the query and item id lists.
        width
            The longest pair's length if the caller knows it (saves a device sync).

        Returns
        -------
        dict of str to Tensor
            ``input_ids``, ``attention_mask``, ``token_type_ids`` (B, width) and ``query_len`` (B,).
        """
        qr = torch.as_tensor(q_rows, device=self.device)
        ir = torch.as_tensor(i_rows, device=self.device)
        n_prefix, n_mid, n_suffix = self._n
        a, b, head, start = self._layout(self._q_len_t[qr], self._i_len_t[ir])
        a, b, head, start = a[:, None], b[:, None], head[:, None], start[:, None]
        end = start + b
        if width is None:
            width = int((end + n_suffix).max())
        pos = self._pos[:width][None, :]
        types = self.template.types
        ids = torch.full((len(qr), width), self.pad_id, dtype=torch.long, device=self.device)
        tt = torch.zeros_like(ids)
        att = torch.zeros_like(ids)
        # (mask, ids) of each attended region, in order; positions outside a region keep pad / 0.
        q_col = (pos - n_prefix).clamp(0, self._q_ids.shape[1] - 1)
        i_col = (pos - start).clamp(0, self._i_ids.shape[1] - 1)
        regions = (
            (pos < n_prefix, lambda: self._const[0][pos.clamp(max=max(n_prefix - 1, 0))], types[0]),
            ((pos >= n_prefix) & (pos < n_prefix + a), lambda: self._q_ids[qr[:, None], q_col], types[1]),
            ((pos >= n_prefix + a) & (pos < head), lambda: self._const[1][(pos - n_prefix - a).clamp(0, max(n_mid - 1, 0))],
             types[2]),
            ((pos >= start) & (pos < end), lambda: self._i_ids[ir[:, None], i_col], types[3]),
            ((pos >= end) & (pos < end + n_suffix), lambda: self._const[2][(pos - end).clamp(0, max(n_suffix - 1, 0))],
             types[4]),
        )
        for mask, gather, ty in regions:
            mask = mask.expand_as(ids)
            ids = torch.where(mask, gather().expand_as(ids), ids)
            att = att | mask.long()
            if ty:
                tt = torch.where(mask, ty, tt)
        return {"input_ids": ids, "attention_mask": att, "token_type_ids": tt, "query_len": start[:, 0]}


# -- the engine -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _on_device(ce: CrossEncoder, device: torch.device) -> Iterator[None]:
    """Run ``ce`` in eval mode on ``device``; put it back where and how it was afterwards."""
    # Per-module flags: a CE can be "training" at the top while its model is in eval mode (as
    # build_cross_encoder returns it), and ce.train(flag) would switch dropout on everywhere.
    modes = [(m, m.training) for m in ce.modules()]
    old = ce.device
    ce.eval().to(device)
    try:
        yield
    finally:
        ce.to(old)
        for m, flag in modes:
            m.training = flag


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision not in _AUTOCAST_DTYPES:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_AUTOCAST_DTYPES[precision])


def _forward(ce: CrossEncoder) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """The batch -> scores function the engine calls: the padding-free :func:`~xenbench.models.packed.packed_forward`
    for a CE it supports (BERT, ELECTRA, RoBERTa, XLM-R, Llama-style LLM rerankers; the same scores, tested; no FLOPs on the pads a length-bucketed batch still carries), else the
    padded ``ce(batch)``. Attention stays the exact re-padded SDPA: the CUDA varlen kernel is used by the scorer only
    once it is measured on a GPU (``benchmarks/bench_packed.py --device cuda``)."""
    if packed.supports(ce):
        return lambda batch: packed.packed_forward(ce, batch, attention="padded")
    return ce


def _score_indexed(ce: CrossEncoder, asm: PairAssembler, q_rows: np.ndarray, i_rows: np.ndarray, *,
                   batch_size: int, precision: str, on_batch: Callable[[int], None]) -> np.ndarray:
    """Scores of pairs ``(q_rows[b], i_rows[b])``: ndarray of shape (B,), float32, in input order."""
    lens = asm.lengths(q_rows, i_rows)
    order = np.argsort(lens, kind="stable")  # length bucketing: a batch pads only to its own longest pair
    l_sorted = lens[order]
    # One host-to-device copy per chunk; batches slice it (no per-batch transfer or sync).
    q_sorted = torch.as_tensor(q_rows[order], device=asm.device)
    i_sorted = torch.as_tensor(i_rows[order], device=asm.device)
    out = torch.empty(len(order), dtype=torch.float32, device=asm.device)
    if precision == "bf16-weights":  # a bf16 copy of the weights: the caller's CE keeps its fp32 weights
        ce = copy.deepcopy(ce).to(torch.bfloat16)
    if ce.reuses_prefix:
        with torch.inference_mode(), _autocast(asm.device, precision):
            out = _score_by_prefix(ce, asm, q_rows, i_rows, batch_size=batch_size, on_batch=on_batch)
        return out.cpu().numpy()
    forward = _forward(ce)
    with torch.inference_mode(), _autocast(asm.device, precision):
        for s in range(0, len(order), batch_size):
            e = min(s + batch_size, len(order))
            batch = asm.batch(q_sorted[s:e], i_sorted[s:e], width=int(l_sorted[e - 1]))
            out[s:e] = forward(batch).float()
            on_batch(e - s)
    scores = np.empty(len(order), dtype=np.float32)
    scores[order] = out.cpu().numpy()
    return scores


def _score_by_prefix(ce: CrossEncoder, asm: PairAssembler, q_rows: np.ndarray, i_rows: np.ndarray, *,
                     batch_size: int, on_batch: Callable[[int], None]) -> torch.Tensor:
    """Scores (B,) float32 of an LLM reranker's pairs, one query at a time: the query's prefix (system text,
    instruction, query: everything before the document) is run once and its key/value cache reused by every batch
    of its items (length-sorted), so a row of m items costs one prefix + m tails instead of m whole pairs."""
    out = torch.empty(len(q_rows), dtype=torch.float32, device=asm.device)
    order = np.argsort(q_rows, kind="stable")
    starts = np.flatnonzero(np.r_[True, q_rows[order][1:] != q_rows[order][:-1]])
    for s, e in zip(starts, np.r_[starts[1:], len(order)]):
        idx = order[s:e]
        q = int(q_rows[idx[0]])
        idx = idx[np.argsort(asm.lengths(np.full(len(idx), q), i_rows[idx]), kind="stable")]
        cache, start = None, None
        for b in range(0, len(idx), batch_size):
            part = idx[b:b + batch_size]
            batch = asm.batch(np.full(len(part), q), i_rows[part])
            qlen = batch["query_len"]
            if cache is None:
                start = int(qlen[0])  # the query's kept prefix: the same for each of its items (chat truncation)
                cache = ce.encode_prefix(batch["input_ids"][0, :start])
            if bool((qlen != start).any()):  # pragma: no cover - guarded by CrossEncoder.reuses_prefix
                raise RuntimeError("pairs of one query with different prefixes cannot share a cache")
            tails = {k: batch[k][:, start:] for k in ("input_ids", "attention_mask")}
            out[torch.as_tensor(part, device=asm.device)] = ce.score_after_prefix(cache, tails).float()
            on_batch(len(part))
    return out


def _progress_bar(total: int, enabled: bool, desc: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc=desc, unit="pair", unit_scale=True, smoothing=0.1)


# -- public API -----------------------------------------------------------------------------------


def score_matrix(
    ce: CrossEncoder,
    queries: Sequence[Query],
    items: Sequence[Item],
    *,
    batch_size: int | None = None,
    device: str | torch.device = "auto",
    precision: Precision = "fp32",
    progress: bool = True,
    query_chunk: int | None = None,
) -> ScoredMatrix:
    """Exact dense scores ``f(q, i)`` for every query × item, in memory (:func:`score_to_store` writes them to disk,
    resumably, for matrices that do not fit or take hours).

    Parameters
    ----------
    ce : CrossEncoder
        Moved to ``device`` and set to eval mode while scoring, restored afterwards.
    queries : sequence of Query of length n_queries
    items : sequence of Item of length n_items
    batch_size
        Pairs per forward pass, taken from the length-sorted pairs of a query chunk; ``None``: by device
        (:data:`DEFAULT_BATCH_SIZE`). The batch composition changes the float bits.
    device
        See :func:`resolve_device`.
    precision
        ``"fp32"`` (default, exact); autocast to ``"bf16"``/``"fp16"``; or ``"bf16-weights"``, a bf16 copy of the
        weights and activations (half the weight bytes). The last three are faster where the hardware has bf16/fp16
        units and carry about 1e-2 relative noise: not for rank analysis (``make bench`` measures speed and error).
    progress
        Show a tqdm bar with pairs/s.
    query_chunk
        Queries per chunk (pairs of a chunk are sorted by length together). Default: about 65,536 pairs per chunk.

    Returns
    -------
    ScoredMatrix
        ``scores``, float32 of shape (n_queries, n_items), and ``timing`` (:class:`ScoreTiming`).

    Raises
    ------
    ParameterError
        Empty or ill-typed ``queries``/``items``, bad ``batch_size``/``query_chunk``/``precision``/``device``.
    """
    scores, timing = _score(ce, queries, items, None, batch_size, device, precision, progress, query_chunk, None,
                            "local", None, "score_matrix")
    return ScoredMatrix(scores, timing)


def score_to_store(
    ce: CrossEncoder,
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
    ce, queries, items, device, precision, progress
        As :func:`score_matrix`.
    out
        The store's folder.
    batch_size
        As :func:`score_matrix`; ``None``: the existing store's (a resume), else by device. It is part of a store's
        identity: the batch composition changes the float bits.
    query_chunk
        Queries per chunk (rows of a store block). An existing store keeps its own chunking.
    manifest
        Extra JSON fields for the store attributes (model path, dataset, domain, seed, ...).
    backend
        ``"local"``: this process. ``"ray"`` (``pip install xenbench[ray]``): row blocks are Ray tasks on actors that
        each hold the model (one per GPU, or per CPU slot); this process stays the only writer of the store, with
        the same verification, identity and lock, so a resumed job skips finished blocks and a killed worker's
        block is retried on a restarted actor (:func:`_score_blocks_ray`).
    ray_options
        ``address`` (a running cluster, e.g. ``"auto"``; default a local Ray started here), ``workers`` (actors;
        default one per GPU, or per CPU), ``gpus_per_worker`` (default 1 on CUDA, else 0).
    overwrite
        Replace a store already at ``out`` (of this job or another) instead of resuming it.

    Returns
    -------
    ScoreStore
        Complete. A block whose scores hold NaN/inf (a model with NaN weights) is refused by
        :meth:`ScoreStore.write_chunk`: the call raises and the store stays incomplete.

    Raises
    ------
    ParameterError
        As :func:`score_matrix`, and a bad ``backend``.
    DataError
        ``out`` holds a store of another job (other ids, texts, weights, model config, precision, batch size or
        device kind: each changes the float bits), or another process is writing it (:func:`writer_lock`).
    """
    if out is None:
        raise ParameterError("out", "a store folder (score_matrix scores in memory)", out, "score_to_store")
    store, _ = _score(ce, queries, items, out, batch_size, device, precision, progress, query_chunk, manifest,
                      backend, ray_options, "score_to_store", overwrite=overwrite)
    return store


def _score(ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item], out: str | os.PathLike[str] | None,
           batch_size: int | None, device: str | torch.device, precision: Precision, progress: bool,
           query_chunk: int | None, manifest: Mapping[str, Any] | None, backend: str,
           ray_options: Mapping[str, Any] | None, owner: str, *, overwrite: bool = False) -> tuple[Any, ScoreTiming]:
    _check_common(ce, queries, items, batch_size, precision, owner)
    check_int(query_chunk, "query_chunk", 1, None, owner, allow_none=True, expected="an int >= 1 or None")
    dev = resolve_device(device)
    if batch_size is None and out is not None and not overwrite and (Path(out) / "zarr.json").is_file():
        batch_size = ScoreStore.open(out).attrs.get("batch_size")  # a resume keeps the store's batches (same bits)
    batch_size = batch_size or DEFAULT_BATCH_SIZE.get(dev.type, 64)
    n_q, n_i = len(queries), len(items)
    explicit_chunk = query_chunk is not None
    if query_chunk is None:
        query_chunk = max(1, min(n_q, math.ceil(TARGET_CHUNK_PAIRS / n_i)))
    t_start = time.perf_counter()

    if backend not in ("local", "ray"):
        raise ParameterError("backend", "'local' or 'ray'", backend, owner)
    # One writer per store: a second job into the same `out` is refused before it touches anything.
    with contextlib.nullcontext() if out is None else writer_lock(out):
        return _score_matrix(ce, queries, items, out, batch_size, dev, precision, progress, query_chunk,
                             explicit_chunk, manifest, t_start, backend, dict(ray_options or {}), overwrite=overwrite)


def _score_matrix(ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item],
                  out: str | os.PathLike[str] | None, batch_size: int, dev: torch.device, precision: Precision,
                  progress: bool, query_chunk: int, explicit_chunk: bool, manifest: Mapping[str, Any] | None,
                  t_start: float, backend: str = "local", ray_options: dict[str, Any] | None = None, *,
                  overwrite: bool = False) -> tuple[ScoreStore | np.ndarray, ScoreTiming]:
    n_q, n_i = len(queries), len(items)
    store = None
    if out is not None:
        store = _open_or_create(Path(out), ce, queries, items, precision, query_chunk, manifest,
                                batch_size=batch_size, device_type=dev.type, explicit_chunk=explicit_chunk,
                                overwrite=overwrite)
        query_chunk = store.chunks[0]
        todo = store.missing_chunks()
        if len(todo) < store.n_chunks:
            logger.info("resuming %s: %d of %d chunks already done", out, store.n_chunks - len(todo), store.n_chunks)
    else:
        matrix = np.empty((n_q, n_i), dtype=np.float32)
        todo = list(range(math.ceil(n_q / query_chunk)))

    def rows_of(k: int) -> tuple[int, int]:
        return k * query_chunk, min((k + 1) * query_chunk, n_q)

    n_pairs = sum(n_i * (b - a) for a, b in map(rows_of, todo))
    bar = _progress_bar(n_pairs, progress, "scoring")
    try:
        if todo and backend == "ray":
            assert store is not None
            _score_blocks_ray(ce, queries, items, store, todo, rows_of, batch_size=batch_size, device=dev,
                              precision=precision, on_pairs=bar.update, **(ray_options or {}))
        elif todo:
            with _on_device(ce, dev):
                # Tokenize only the rows still to do: a resumed job does not pay for finished chunks.
                rows_todo = np.concatenate([np.arange(*rows_of(k)) for k in todo])
                q_ids = ce.pairs.encode_queries([queries[r] for r in rows_todo])
                local = np.full(n_q, -1, dtype=np.int64)
                local[rows_todo] = np.arange(len(rows_todo))
                asm = PairAssembler(ce.pairs, q_ids, ce.pairs.encode_items(items), dev)
                for k in todo:
                    a, b = rows_of(k)
                    t0 = time.perf_counter()
                    qr = np.repeat(local[a:b], n_i)
                    ir = np.tile(np.arange(n_i, dtype=np.int64), b - a)
                    block = _score_indexed(ce, asm, qr, ir, batch_size=batch_size, precision=precision,
                                           on_batch=bar.update).reshape(b - a, n_i)
                    if store is None:
                        matrix[a:b] = block
                        continue
                    info = {"wall_s": time.perf_counter() - t0, "n_pairs": (b - a) * n_i, "device": str(dev),
                            "precision": precision, "batch_size": batch_size}
                    store.write_chunk(k, block, info)
                    store.update_attrs({"wall_s": store.wall_s, "chunks_done": len(store.done_chunks())})
    finally:
        bar.close()

    timing = ScoreTiming(n_pairs, time.perf_counter() - t_start, str(dev), precision, batch_size,
                         torch.get_num_threads())
    logger.info("scored %d pairs in %.1f s (%.0f pairs/s) on %s, %s", n_pairs, timing.wall_s,
                timing.pairs_per_s, dev, precision)
    if store is not None:
        sessions = [*store.attrs.get("sessions", []), timing.to_dict()]
        store.update_attrs({"wall_s": store.wall_s, "chunks_done": store.n_chunks, "sessions": sessions,
                            "device": str(dev)})
        return store, timing
    return matrix, timing


class _BlockScorer:
    """Scores whole row blocks of one job; a Ray actor holds one (the model stays loaded between blocks).

    Computes exactly what the local path computes for a block: the same token ids, the same length-sorted
    batches of ``batch_size`` pairs, the same precision.
    """

    def __init__(self, ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item], device: str,
                 batch_size: int, precision: str) -> None:
        self.ce, self.dev = ce, resolve_device(device)
        self.ce.eval().to(self.dev)
        self.n_items, self.batch_size, self.precision = len(items), batch_size, precision
        self.asm = PairAssembler(ce.pairs, ce.pairs.encode_queries(list(queries)), ce.pairs.encode_items(list(items)),
                                 self.dev)

    def score(self, start: int, stop: int) -> tuple[np.ndarray, float, str]:
        t0 = time.perf_counter()
        qr = np.repeat(np.arange(start, stop, dtype=np.int64), self.n_items)
        ir = np.tile(np.arange(self.n_items, dtype=np.int64), stop - start)
        block = _score_indexed(self.ce, self.asm, qr, ir, batch_size=self.batch_size, precision=self.precision,
                               on_batch=lambda n: None).reshape(stop - start, self.n_items)
        return block, time.perf_counter() - t0, f"{os.uname().nodename}:{os.getpid()}"

    def pid(self) -> int:
        return os.getpid()


def _score_blocks_ray(ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item], store: ScoreStore,
                      todo: Sequence[int], rows_of: Callable[[int], tuple[int, int]], *, batch_size: int,
                      device: torch.device, precision: str, on_pairs: Callable[[int], None], address: str | None = None,
                      workers: int | None = None, gpus_per_worker: float | None = None,
                      on_actors: Callable[[list[Any]], None] | None = None) -> None:
    """Score the blocks ``todo`` as Ray tasks and write each into ``store`` here, as it arrives.

    One actor per worker holds the model (``gpus_per_worker`` GPUs each, default 1 on CUDA; else one CPU
    slot). Blocks are handed out one at a time to whichever actor is free. An actor that dies (a killed worker
    process, a lost node) is restarted and its block retried (``max_restarts``/``max_task_retries``); blocks
    already written stay written, so even a job that fails can be resumed.
    """
    from xenbench._ray import ray_session

    with ray_session(address, workers) as ray:
        gpus = (1.0 if device.type == "cuda" else 0.0) if gpus_per_worker is None else float(gpus_per_worker)
        if workers is None:
            res = ray.available_resources()
            workers = max(1, int(res.get("GPU", 0) // gpus) if gpus else int(res.get("CPU", 1)))
        actor_cls = ray.remote(num_cpus=1, num_gpus=gpus, max_restarts=3, max_task_retries=3)(_BlockScorer)
        ce_ref = ray.put(ce)
        actors = [actor_cls.remote(ce_ref, list(queries), list(items), str(device), batch_size, precision)
                  for _ in range(workers)]
        if on_actors is not None:
            on_actors(actors)
        queue = list(todo)
        running: dict[Any, tuple[int, Any]] = {}

        def submit(actor: Any) -> None:
            if queue:
                k = queue.pop(0)
                running[actor.score.remote(*rows_of(k))] = (k, actor)

        for actor in actors:
            submit(actor)
        while running:
            ready, _ = ray.wait(list(running), num_returns=1)
            k, actor = running.pop(ready[0])
            block, wall_s, worker = ray.get(ready[0])
            a, b = rows_of(k)
            store.write_chunk(k, block, {"wall_s": wall_s, "n_pairs": (b - a) * len(items), "device": str(device),
                                         "precision": precision, "batch_size": batch_size, "worker": worker})
            store.update_attrs({"wall_s": store.wall_s, "chunks_done": len(store.done_chunks())})
            on_pairs((b - a) * len(items))
            submit(actor)


# Manifest keys that identify a job: every argument that changes the float bits of a block. Resuming into a
# store whose values differ would mix two matrices (e.g. batch 64 and 256 give different bits).
_IDENTITY_KEYS = ("query_ids", "item_ids", "texts_sha256", "model_sha256", "model_config", "precision", "kind",
                  "batch_size", "device_type")
_HOW_TO_MATCH = {"batch_size": "pass the same --batch-size", "device_type": "resume on the same kind of device",
                 "precision": "pass the same --precision"}


def _open_or_create(path: Path, ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item],
                    precision: str, query_chunk: int, manifest: Mapping[str, Any] | None, *, batch_size: int,
                    device_type: str, explicit_chunk: bool = False, overwrite: bool = False) -> ScoreStore:
    identity = {
        "query_ids": [q.id for q in queries],
        "item_ids": [it.id for it in items],
        "texts_sha256": texts_fingerprint(queries, items),
        "model_sha256": model_fingerprint(ce),
        "model_config": json.loads(ce.config.to_json()),  # max lengths, layout, head
        "precision": precision,
        "kind": "dense",
        "batch_size": int(batch_size),
        "device_type": device_type,
    }
    if (path / "zarr.json").is_file() and not overwrite:
        store = ScoreStore.open(path, mode="r+")
        attrs = store.attrs
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
        **dict(manifest or {}),
        **identity,
        "xenbench_version": __version__,
        "torch_version": torch.__version__,
        "dtype": "float32",
        "wall_s": 0.0,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return ScoreStore.create(path, len(queries), len(items), chunks=(query_chunk, None), attrs=attrs,
                             overwrite=overwrite)


def score_pairs_sparse(
    ce: CrossEncoder,
    queries: Sequence[Query],
    items: Sequence[Item],
    pairs: np.ndarray,
    *,
    batch_size: int | None = None,
    device: str | torch.device = "auto",
    precision: Precision = "fp32",
    progress: bool = False,
) -> np.ndarray:
    """Exact scores of selected entries, e.g. the sparse matrix G of AXN.

    Parameters
    ----------
    ce, queries, items, batch_size, device, precision, progress
        As in :func:`score_matrix`.
    pairs : array-like of int, shape (nnz, 2)
        ``(query_row, item_row)`` per entry, rows into ``queries`` and ``items``.

    Returns
    -------
    ndarray of shape (nnz,), float32
        ``scores[e] = f(queries[pairs[e, 0]], items[pairs[e, 1]])``, equal to the dense matrix entries.
    """
    owner = "score_pairs_sparse"
    _check_common(ce, queries, items, batch_size, precision, owner)
    arr = np.asarray(pairs)
    if arr.ndim != 2 or arr.shape[1] != 2 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise ParameterError("pairs", "an int array of shape (nnz, 2) of (query_row, item_row)",
                             f"{arr.dtype} array of shape {arr.shape}", owner)
    arr = arr.astype(np.int64, copy=False)
    for col, name, n in ((0, "query", len(queries)), (1, "item", len(items))):
        bad = np.flatnonzero((arr[:, col] < 0) | (arr[:, col] >= n))
        if bad.size:
            raise ParameterError("pairs", f"{name} rows in [0, {n - 1}] (entry {int(bad[0])} is not)",
                                 arr[bad[0]].tolist(), owner)
    dev = resolve_device(device)
    batch_size = batch_size or DEFAULT_BATCH_SIZE.get(dev.type, 64)
    scores = np.empty(0, dtype=np.float32)
    if len(arr):
        # Tokenize only the queries and items that occur, once each.
        uq, q_local = np.unique(arr[:, 0], return_inverse=True)
        ui, i_local = np.unique(arr[:, 1], return_inverse=True)
        bar = _progress_bar(len(arr), progress, "scoring pairs")
        try:
            with _on_device(ce, dev):
                asm = PairAssembler(ce.pairs, ce.pairs.encode_queries([queries[r] for r in uq]),
                                    ce.pairs.encode_items([items[c] for c in ui]), dev)
                scores = _score_indexed(ce, asm, q_local.reshape(-1), i_local.reshape(-1), batch_size=batch_size,
                                        precision=precision, on_batch=bar.update)
        finally:
            bar.close()
    return scores


# A CE with a randomly initialised head on the bundled backbone: only for testing the pipeline. The name says so,
# and using it warns: its scores are meaningless.
_UNTRAINED = {"untrained-cls": "cls", "untrained-emb": "emb"}


def run_score_job(
    ce: str | os.PathLike[str] | CrossEncoder,
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
) -> ScoreStore:
    """Score a dataset's queries × items into a store at ``out`` (``xenbench score``); resumes if interrupted.

    Parameters
    ----------
    ce
        ``"untrained-cls"`` / ``"untrained-emb"`` (the bundled MiniLM with a random head seeded with ``seed``:
        for testing the pipeline only, it warns),
        a path for :func:`~xenbench.models.crossencoder.load_cross_encoder`, or a CrossEncoder.
    dataset
        A :class:`Dataset` or a spec for :func:`xenbench.data.sources.load_dataset` (``"wordnet-el:noun.food"``).
    query_ids, item_ids
        Rows and columns in this order; ``None`` means all, in dataset order.
    out
        Store folder.
    batch_size, device, precision, progress, query_chunk, backend, ray_options
        As in :func:`score_matrix`.
    chunk_pairs
        Pairs per resumable block instead of ``query_chunk``: blocks of ``ceil(chunk_pairs / n_items)``
        queries (a finer chunk loses less work to a kill; ``xenbench score --chunk-pairs``).
    seed
        Seed of an untrained CE's random head; recorded in the manifest.
    overwrite
        Replace a store already at ``out`` instead of resuming it (``xenbench score --overwrite``); it is deleted
        only once the model has loaded.

    Returns
    -------
    ScoreStore
        Complete; its attrs hold the manifest (model, dataset, domain, ids, seed, versions, timings).

    Raises
    ------
    ParameterError
        Unknown or duplicated ids, an unknown ``"bundled-*"`` name, and :func:`score_matrix`'s errors.
    DataError
        From loading the CE or dataset, or ``out`` holding another job's store.
    """
    owner = "run_score_job"
    if isinstance(dataset, str):
        from xenbench.data.sources import load_dataset

        dataset = load_dataset(dataset)
    if not isinstance(dataset, Dataset):
        raise ParameterError("dataset", "a Dataset or a dataset spec string", type(dataset).__name__, owner)
    queries = _select(dataset.queries, dataset.query_index, query_ids, "query_ids", dataset.name, owner)
    items = _select(dataset.items, dataset.item_index, item_ids, "item_ids", dataset.name, owner)

    if isinstance(ce, CrossEncoder):
        model, name = ce, f"<in-memory {ce.config.kind} CE on {ce.config.backbone}>"
    elif isinstance(ce, str) and ce.startswith(("untrained", "bundled-")):
        if ce not in _UNTRAINED:
            raise ParameterError("ce", f"one of {sorted(_UNTRAINED)} (an untrained head, for testing only), or a CE "
                                 "folder such as models/cls-ce", ce, owner)
        warnings.warn(f"{ce}: the head is random (seed {seed}), so its scores carry no meaning; use a trained CE "
                      "folder such as models/cls-ce for experiments", UserWarning, stacklevel=2)
        model, name = build_cross_encoder(CEConfig(kind=_UNTRAINED[ce]), seed=seed), ce  # type: ignore[arg-type]
    else:
        model, name = load_cross_encoder(ce), repo_relative(ce)  # models/cls-ce for a bundled CE: holds in any clone
    if chunk_pairs is not None:
        if query_chunk is not None:
            raise ParameterError("chunk_pairs", "None when query_chunk is given (choose one)", chunk_pairs, owner)
        check_int(chunk_pairs, "chunk_pairs", 1, None, owner)
        query_chunk = max(1, math.ceil(chunk_pairs / len(items)))
    domain = dataset.name.split(":", 1)[1] if ":" in dataset.name else dataset.name
    manifest = {"model": name, "dataset": dataset.name, "domain": domain, "seed": seed}
    return score_to_store(model, queries, items, out, batch_size=batch_size, device=device, precision=precision,
                          progress=progress, query_chunk=query_chunk, manifest=manifest, backend=backend,
                          ray_options=ray_options, overwrite=overwrite)


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



def cached_scores(model: str | os.PathLike[str], dataset: Dataset, *, device: str | torch.device = "auto",
                  batch_size: int | None = None, cache: str | os.PathLike[str] | None = None,
                  progress: bool = True) -> ScoreStore:
    """Exact scores of every query × item of ``dataset`` by the CE in folder ``model``, computed once and cached.

    For notebooks run on a user's own data without a precomputed matrix: pass a seeded sample
    (:meth:`xenbench.data.datasets.Dataset.subset`) to score only what the notebook needs. The store lives in
    ``<cache>/scores/<key>``, ``key`` = a hash of the CE's weights and config (:func:`model_fingerprint`, computed once
    per CE: :func:`xenbench.models.fingerprint.folder_fingerprint`) and of every query and item text, so another
    checkpoint or another sample gets its own store; the CE is loaded only when something is left to score. Scoring
    is resumable (:func:`score_to_store`): an interrupted run continues where it stopped.

    Parameters
    ----------
    model
        A CE folder (:func:`xenbench.models.crossencoder.load_cross_encoder`).
    dataset
        The queries and items to score (rows and columns in its order).
    cache
        Root folder; default ``$XENBENCH_CACHE`` or ``~/.cache/xenbench``.

    Returns
    -------
    ScoreStore
        Complete (verified by :func:`score_to_store` when it was written or resumed).
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
