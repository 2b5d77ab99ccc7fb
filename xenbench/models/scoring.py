"""The scoring engine: exact cross-encoder scores of (query, item) pairs, in memory.

1. each query and item is tokenized **once** (:meth:`PairEncoder.encode_queries` / ``encode_items``),
   n + m tokenizer calls for n·m pairs;
2. pairs are assembled from token ids by vectorized gathers (:class:`~xenbench.models.pairs.PairAssembler`: the
   same tensors as :meth:`PairEncoder.collate`, without its per-pair Python loop), on the target device;
3. within a query chunk, pairs are sorted by length and cut into batches, so each batch is padded only to
   its own longest pair (length bucketing + dynamic padding);
4. on the CPU a BERT CE runs padding-free (:func:`~xenbench.models.packed.packed_forward`: token-wise ops on the
   attended tokens only, the same scores as the padded forward); other architectures, and every CE on a GPU (where
   the padded forward was measured faster), run the padded ``ce(batch)``;
5. ``torch.inference_mode`` and, when asked, autocast to bf16/fp16 (fp32 by default: bf16 noise of about
   1e-2 relative inflates numerical ranks, see FACTS.md).

:func:`score_matrix` scores every query × item; :func:`score_pairs_sparse` scores given (query, item) entries, e.g.
AXN's sparse matrix G. :class:`RowScorer` scores row blocks of one matrix: it is all that the layers which store,
distribute or cache scores call (:mod:`~xenbench.models.jobs`, resumable jobs into a score store;
:mod:`~xenbench.models.distributed`, their Ray backend; :mod:`~xenbench.models.cache`, the on-demand score cache),
so none of them knows how pairs are batched or run.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch

from xenbench._device import resolve_device
from xenbench._validation import check_int
from xenbench.data.datasets import Item, Query
from xenbench.data.store import ScoreStore
from xenbench.errors import DataError, ParameterError
from xenbench.models import packed
from xenbench.models.crossencoder import CrossEncoder
from xenbench.models.pairs import PairAssembler, document_text
from xenbench.models.scorers import TextRowScorer, as_scorer, is_native, score_texts

__all__ = [
    "RowScorer",
    "row_scorer",
    "score_text_pairs",
    "ScoreTiming",
    "ScoredMatrix",
    "score_matrix",
    "score_pairs_sparse",
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
        """The timing of the last :func:`~xenbench.models.jobs.score_to_store` call on ``store`` (from its
        ``sessions`` attribute)."""
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


def check_scoring_args(ce: Any, queries: Any, items: Any, batch_size: Any, precision: Any, owner: str) -> Any:
    """The checks every scoring entry point makes first (``owner`` names it in the error); returns ``ce`` as the
    engine scores with it (:func:`~xenbench.models.scorers.as_scorer`: a sentence-transformers CrossEncoder wrapped)."""
    ce = as_scorer(ce, owner)
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
    if precision != "fp32" and not is_native(ce):
        raise ParameterError("precision", f"'fp32' for {ce.name}: a scorer xenbench does not run itself sets its own "
                             "precision", precision, owner)
    return ce


def default_query_chunk(n_queries: int, n_items: int) -> int:
    """Queries per chunk when none is given: about :data:`TARGET_CHUNK_PAIRS` pairs, at most every query."""
    return max(1, min(n_queries, math.ceil(TARGET_CHUNK_PAIRS / n_items)))




# -- the engine -----------------------------------------------------------------------------------


@contextlib.contextmanager
def on_device(ce: Any, device: torch.device) -> Iterator[None]:
    """Run ``ce`` in eval mode on ``device``; put it back where and how it was afterwards (a protocol scorer, which
    runs where it was put, is left as it is)."""
    if not is_native(ce):
        yield
        return
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


def _forward(ce: CrossEncoder, device: torch.device) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """The batch -> scores function the engine calls. On the CPU, the padding-free
    :func:`~xenbench.models.packed.packed_forward` (re-padded SDPA, the same scores, tested) for a CE it supports
    (BERT, ELECTRA, RoBERTa, XLM-R, Llama-style LLM rerankers): it spends no FLOPs on the pads a length-bucketed batch
    still carries (``benchmarks/bench_packed.py``). Elsewhere, and for other CEs, the padded ``ce(batch)``: on a GPU the
    pads cost less than packing's gathers and small kernels (warm bf16 passes on an H200: the padded forward 1.6x the
    packed one, ``benchmarks/gpu_check.py``)."""
    if device.type == "cpu" and packed.supports(ce):
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
    forward = _forward(ce, asm.device)
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


class RowScorer:
    """Scores row blocks of the query × item matrix of one CE: the engine's entry for whoever stores, distributes
    or caches scores.

    The queries of ``rows`` (default: all) and every item are tokenized once, here; :meth:`score_rows` then scores
    the pairs of a block of rows, length-sorted into batches of ``batch_size`` pairs. A block's scores depend only
    on its rows, ``batch_size`` and ``precision`` (not on which other rows were tokenized or scored), so a block
    scored in a resumed job or on a Ray actor has the bits of the same block scored in one go.

    Parameters
    ----------
    ce : CrossEncoder
        Already on ``device`` and in eval mode (:func:`on_device`).
    queries : sequence of Query of length n_queries
    items : sequence of Item of length n_items
    device : torch.device
        Where the id tables and batches live.
    batch_size : int
        Pairs per forward pass.
    precision : str
        One of :data:`PRECISIONS` (see :func:`score_matrix`).
    rows : array-like of int, optional
        The only query rows that :meth:`score_rows` may be asked for (a resumed job tokenizes only what is left).
    """

    def __init__(self, ce: CrossEncoder, queries: Sequence[Query], items: Sequence[Item], device: torch.device, *,
                 batch_size: int, precision: str, rows: np.ndarray | Sequence[int] | None = None) -> None:
        self.ce, self.device = ce, torch.device(device)
        self.n_items, self.batch_size, self.precision = len(items), batch_size, precision
        rows = np.arange(len(queries), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        self._local = np.full(len(queries), -1, dtype=np.int64)  # query row -> row of the assembler's id table
        self._local[rows] = np.arange(len(rows))
        self.asm = PairAssembler(ce.pairs, ce.pairs.encode_queries([queries[r] for r in rows]),
                                 ce.pairs.encode_items(items), self.device)

    def score_rows(self, start: int, stop: int, on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """Scores of query rows ``start:stop`` × every item: ndarray of shape (stop - start, n_items), float32.

        ``on_batch(n)`` is called after each batch of ``n`` pairs (a progress bar's ``update``).
        """
        local = self._local[start:stop]
        if len(local) != stop - start or (local < 0).any():
            raise ParameterError("start, stop", "a block of the rows this RowScorer tokenized", (start, stop),
                                 "RowScorer.score_rows")
        qr = np.repeat(local, self.n_items)
        ir = np.tile(np.arange(self.n_items, dtype=np.int64), stop - start)
        scores = _score_indexed(self.ce, self.asm, qr, ir, batch_size=self.batch_size, precision=self.precision,
                                on_batch=on_batch or (lambda n: None))
        return scores.reshape(stop - start, self.n_items)


def row_scorer(ce: Any, queries: Sequence[Query], items: Sequence[Item], device: torch.device, *, batch_size: int,
               precision: str, rows: np.ndarray | Sequence[int] | None = None) -> RowScorer | TextRowScorer:
    """The engine's row-block scorer for ``ce``: :class:`RowScorer` for a xenbench CE (run natively), else
    :class:`~xenbench.models.scorers.TextRowScorer` for a :class:`~xenbench.models.scorers.Scorer`. Both have
    ``score_rows(start, stop, on_batch)``: all that jobs, their Ray backend and the score cache call."""
    if is_native(ce):
        return RowScorer(ce, queries, items, device, batch_size=batch_size, precision=precision, rows=rows)
    return TextRowScorer(ce, queries, items, batch_size=batch_size, rows=rows)


def scorer_device_type(ce: Any, device: torch.device) -> str:
    """The kind of device ``ce``'s scores come from: ``device`` for a xenbench CE (the engine moves it there), the
    scorer's own ``device`` for a protocol scorer that states one, else ``"cpu"``."""
    if is_native(ce):
        return device.type
    own = getattr(ce, "device", None)
    return torch.device(str(own)).type if own is not None else "cpu"


def progress_bar(total: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar over ``total`` pairs (pairs/s shown), or a silent one."""
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
    """Exact dense scores ``f(q, i)`` for every query × item, in memory (:func:`~xenbench.models.jobs.score_to_store`
    writes them to disk, resumably, for matrices that do not fit or take hours).

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
    owner = "score_matrix"
    ce = check_scoring_args(ce, queries, items, batch_size, precision, owner)
    check_int(query_chunk, "query_chunk", 1, None, owner, allow_none=True, expected="an int >= 1 or None")
    dev = resolve_device(device)
    batch_size = batch_size or DEFAULT_BATCH_SIZE.get(dev.type, 64)
    n_q, n_i = len(queries), len(items)
    query_chunk = query_chunk or default_query_chunk(n_q, n_i)
    t_start = time.perf_counter()
    scores = np.empty((n_q, n_i), dtype=np.float32)
    bar = progress_bar(n_q * n_i, progress, "scoring")
    try:
        with on_device(ce, dev):
            scorer = row_scorer(ce, queries, items, dev, batch_size=batch_size, precision=precision)
            for a in range(0, n_q, query_chunk):
                b = min(a + query_chunk, n_q)
                scores[a:b] = scorer.score_rows(a, b, bar.update)
    finally:
        bar.close()
    where = str(dev) if is_native(ce) else str(getattr(ce, "device", None) or "cpu")
    timing = ScoreTiming(n_q * n_i, time.perf_counter() - t_start, where, precision, batch_size,
                         torch.get_num_threads())
    logger.info("scored %d pairs in %.1f s (%.0f pairs/s) on %s, %s", timing.n_pairs, timing.wall_s,
                timing.pairs_per_s, dev, precision)
    return ScoredMatrix(scores, timing)




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
    ce = check_scoring_args(ce, queries, items, batch_size, precision, owner)
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
        bar = progress_bar(len(arr), progress, "scoring pairs")
        if not is_native(ce):
            try:
                q_texts, i_texts = [queries[r].text for r in arr[:, 0]], [document_text(items[c]) for c in arr[:, 1]]
                return score_texts(ce, q_texts, i_texts, batch_size=batch_size, on_batch=bar.update)
            finally:
                bar.close()
        try:
            with on_device(ce, dev):
                asm = PairAssembler(ce.pairs, ce.pairs.encode_queries([queries[r] for r in uq]),
                                    ce.pairs.encode_items([items[c] for c in ui]), dev)
                scores = _score_indexed(ce, asm, q_local.reshape(-1), i_local.reshape(-1), batch_size=batch_size,
                                        precision=precision, on_batch=bar.update)
        finally:
            bar.close()
    return scores




def score_text_pairs(ce: CrossEncoder, query_texts: Sequence[str], item_texts: Sequence[str], *,
                     batch_size: int | None = None) -> np.ndarray:
    """A xenbench CE's scores of text pairs (its :meth:`~xenbench.models.crossencoder.CrossEncoder.score`): each
    distinct text is one :class:`Query` / title-less :class:`Item`, scored by :func:`score_pairs_sparse` where the
    CE is. Returns ndarray of shape (B,), float32."""
    if len(query_texts) != len(item_texts):
        raise ParameterError("item_texts", f"as long as query_texts ({len(query_texts)})", len(item_texts),
                             "CrossEncoder.score")
    if not len(query_texts):
        return np.zeros(0, dtype=np.float32)
    uq, q_rows = np.unique(np.asarray(list(query_texts), dtype=object).astype(str), return_inverse=True)
    ui, i_rows = np.unique(np.asarray(list(item_texts), dtype=object).astype(str), return_inverse=True)
    queries = [Query(f"q{k}", str(t)) for k, t in enumerate(uq)]
    items = [Item(f"i{k}", "", str(t)) for k, t in enumerate(ui)]
    return score_pairs_sparse(ce, queries, items, np.stack([q_rows.ravel(), i_rows.ravel()], axis=1),
                              batch_size=batch_size, device=ce.device, progress=False)
