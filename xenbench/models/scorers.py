"""The scorer protocol: anything that scores (query, item) text pairs fills a score store, resumes, caches, runs on Ray.

A **scorer** has three members (:class:`Scorer`)::

    name: str                      # how reports and store attributes name it
    fingerprint: str | None        # changes whenever its scores would: the key of the score cache, checked on resume
    score(query_texts, item_texts) -> ndarray of shape (B,)   # one score per pair (query_texts[b], item_texts[b])

The engine (:func:`~xenbench.models.scoring.row_scorer`) accepts a scorer wherever it accepts a xenbench CE:
:func:`~xenbench.models.scoring.score_matrix`, :func:`~xenbench.models.jobs.score_to_store` (and its resume and Ray
backend), :func:`~xenbench.models.cache.cached_scores` (notebooks 03, 04, 07 through the Python API). A query's text is
``query.text``; an item's is ``"title text"`` (:func:`~xenbench.models.pairs.document_text`), the strings
sentence-transformers is given. Within a row block the pairs are sorted by length (characters) and handed to ``score``
``batch_size`` at a time, in an order that depends only on the block: a deterministic scorer resumes bit-identically.

Implementations:

* xenbench's own :class:`~xenbench.models.crossencoder.CrossEncoder`, which the engine runs natively (tokenized once,
  length-bucketed, padding-free where it can);
* :class:`SentenceTransformersScorer`, a ``sentence_transformers.CrossEncoder`` object with any backend (torch, ONNX,
  OpenVINO), through its ``predict``; the engine wraps such an object itself (:func:`as_scorer`);
* :class:`CallableScorer`, a plain function ``fn(query_texts, item_texts) -> scores`` (an API reranker, an exported
  model, your own code).

Scores are what the scorer returns: a sentence-transformers model applies its activation (the sigmoid by default for a
one-label model; ``activation_fn=torch.nn.Identity()`` gives the raw logit that xenbench's CEs return).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from xenbench.data.datasets import Item, Query
from xenbench.errors import ParameterError
from xenbench.models.pairs import document_text

__all__ = ["Scorer", "SentenceTransformersScorer", "CallableScorer", "as_scorer", "is_native", "TextRowScorer",
           "score_texts", "scorer_identity", "scorer_key"]


@runtime_checkable
class Scorer(Protocol):
    """What the engine needs of a scorer (module docstring)."""

    name: str
    fingerprint: str | None

    def score(self, query_texts: Sequence[str], item_texts: Sequence[str]) -> np.ndarray:
        """Scores of the pairs ``(query_texts[b], item_texts[b])``: array-like of shape (B,)."""
        ...


def is_native(scorer: Any) -> bool:
    """Whether ``scorer`` is a xenbench :class:`~xenbench.models.crossencoder.CrossEncoder` (run by the engine)."""
    from xenbench.models.crossencoder import CrossEncoder

    return isinstance(scorer, CrossEncoder)


def _is_sentence_transformers(obj: Any) -> bool:
    return any(c.__module__.startswith("sentence_transformers.") and c.__name__ == "CrossEncoder"
               for c in type(obj).__mro__)


def as_scorer(obj: Any, owner: str, param: str = "ce") -> Any:
    """``obj`` as something the engine scores with: a xenbench CE or a :class:`Scorer` as they are, a
    ``sentence_transformers.CrossEncoder`` wrapped in :class:`SentenceTransformersScorer`.

    Raises
    ------
    ParameterError
        Anything else, saying how to wrap a function.
    """
    if is_native(obj):
        return obj
    if _is_sentence_transformers(obj):
        return SentenceTransformersScorer(obj)
    if isinstance(obj, Scorer) and callable(getattr(obj, "score", None)) and isinstance(obj.name, str):
        return obj
    raise ParameterError(param, "a xenbench CrossEncoder (load_cross_encoder), a sentence_transformers.CrossEncoder, "
                         "or a scorer with score(query_texts, item_texts), name and fingerprint (wrap a function with "
                         "xb.scorers.CallableScorer(fn, name=..., fingerprint=...))", type(obj).__name__, owner)


def scorer_identity(scorer: Any) -> dict[str, Any]:
    """What identifies a protocol scorer's scores besides its fingerprint, read off the scorer as it is now: its class,
    its ``max_length`` if it has one, and for a sentence-transformers model its activation, backend, prompts, label
    count, modules (the layout) and revision. A store records it as ``model_config`` (a resume checks it) and it joins
    the fingerprint in the score cache's key (:func:`scorer_key`)."""
    cls = type(scorer)
    out: dict[str, Any] = {"scorer": f"{cls.__module__}.{cls.__qualname__}"}
    if getattr(scorer, "max_length", None) is not None:
        out["max_length"] = int(scorer.max_length)
    if isinstance(scorer, SentenceTransformersScorer):
        out.update(_st_settings(scorer.model))
    return out


def scorer_key(scorer: Any) -> str | None:
    """The score-cache key of a protocol scorer: the SHA-256 of its ``fingerprint`` joined with
    :func:`scorer_identity`, so a fingerprint given by hand does not hide a change of ``max_length``, activation,
    revision or layout; None for a scorer without a fingerprint (never cached)."""
    if not isinstance(scorer.fingerprint, str) or not scorer.fingerprint:
        return None
    joined = {"fingerprint": scorer.fingerprint, **scorer_identity(scorer)}
    return hashlib.sha256(json.dumps(joined, sort_keys=True, default=str).encode()).hexdigest()


def _as_scores(got: Any, n: int, name: str) -> np.ndarray:
    """A scorer's output as float32 of shape (n,), or one line saying what it returned."""
    if hasattr(got, "detach"):  # a torch tensor, on any device
        got = got.detach().float().cpu().numpy()
    try:
        arr = np.asarray(got)
    except Exception:  # an object numpy cannot read
        arr = np.asarray(None)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.shape != (n,) or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ParameterError("scorer", f"a scorer whose score() returns one real number per pair (shape ({n},))",
                             f"{type(got).__name__} of dtype {arr.dtype} and shape {arr.shape}", name)
    return arr.astype(np.float32, copy=False)


def score_texts(scorer: Any, query_texts: Sequence[str], item_texts: Sequence[str], *, batch_size: int,
                on_batch: Callable[[int], None] | None = None) -> np.ndarray:
    """Scores of the text pairs ``(query_texts[b], item_texts[b])`` by a :class:`Scorer`: ndarray of shape (B,),
    float32, in input order. The pairs are sorted by length (characters, stable) and passed ``batch_size`` at a
    time, so the calls depend only on the pairs given."""
    lengths = np.array([len(q) + len(i) for q, i in zip(query_texts, item_texts)], dtype=np.int64)
    order = np.argsort(lengths, kind="stable")  # similar lengths together: a scorer that pads pads less
    out = np.empty(len(order), dtype=np.float32)
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        got = scorer.score([query_texts[b] for b in idx], [item_texts[b] for b in idx])
        out[idx] = _as_scores(got, len(idx), scorer.name)
        if on_batch is not None:
            on_batch(len(idx))
    return out


class TextRowScorer:
    """The engine's row-block scorer for a :class:`Scorer` (the counterpart of
    :class:`~xenbench.models.scoring.RowScorer`, which runs a xenbench CE).

    Parameters
    ----------
    scorer : Scorer
    queries : sequence of Query of length n_queries
    items : sequence of Item of length n_items
    batch_size : int
        Pairs per ``score`` call.
    rows : array-like of int, optional
        The only query rows :meth:`score_rows` may be asked for.
    """

    def __init__(self, scorer: Any, queries: Sequence[Query], items: Sequence[Item], *, batch_size: int,
                 rows: np.ndarray | Sequence[int] | None = None) -> None:
        self.scorer, self.batch_size, self.n_items = scorer, batch_size, len(items)
        rows = np.arange(len(queries)) if rows is None else np.asarray(rows, dtype=np.int64)
        self._q_texts = {int(r): queries[int(r)].text for r in rows}
        self._i_texts = [document_text(it) for it in items]

    def score_rows(self, start: int, stop: int, on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """Scores of query rows ``start:stop`` x every item: ndarray of shape (stop - start, n_items), float32."""
        if stop <= start or any(r not in self._q_texts for r in range(start, stop)):
            raise ParameterError("start, stop", "a block of the rows this TextRowScorer holds", (start, stop),
                                 "TextRowScorer.score_rows")
        q_texts = [self._q_texts[r] for r in range(start, stop) for _ in range(self.n_items)]
        scores = score_texts(self.scorer, q_texts, self._i_texts * (stop - start), batch_size=self.batch_size,
                             on_batch=on_batch)
        return scores.reshape(stop - start, self.n_items)


# -- adapters ---------------------------------------------------------------------------------------


class CallableScorer:
    """A plain function as a scorer: ``fn(query_texts, item_texts)`` returns one score per pair.

    Parameters
    ----------
    fn : callable
        ``fn(list of str, list of str) -> array-like of shape (B,)``; picklable (cloudpickle) for the Ray backend.
    name : str
        How reports and store attributes name it.
    fingerprint : str, optional
        Any string that changes whenever the scores would (a model version, a checksum): the key of the score
        cache and what a resumed store is checked against. Without one the cache refuses the scorer and a store it
        wrote cannot be resumed.
    """

    def __init__(self, fn: Callable[[list[str], list[str]], Any], *, name: str, fingerprint: str | None = None) -> None:
        if not callable(fn):
            raise ParameterError("fn", "a function fn(query_texts, item_texts) -> scores", type(fn).__name__,
                                 "CallableScorer")
        if not isinstance(name, str) or not name:
            raise ParameterError("name", "a non-empty str", name, "CallableScorer")
        if fingerprint is not None and (not isinstance(fingerprint, str) or not fingerprint):
            raise ParameterError("fingerprint", "a non-empty str or None", fingerprint, "CallableScorer")
        self.fn, self.name, self.fingerprint = fn, name, fingerprint

    def score(self, query_texts: Sequence[str], item_texts: Sequence[str]) -> Any:
        return self.fn(list(query_texts), list(item_texts))

    def __repr__(self) -> str:
        return f"CallableScorer({self.name!r})"


class SentenceTransformersScorer:
    """A ``sentence_transformers.CrossEncoder`` object as a scorer: ``score`` is its ``predict`` (any backend).

    Parameters
    ----------
    model : sentence_transformers.CrossEncoder
        Loaded with whatever backend, device, ``max_length`` and ``activation_fn`` you chose: the scores are its
        ``predict``'s (for a one-label model the sigmoid of the logit, unless ``activation_fn=torch.nn.Identity()``).
    name : str, optional
        Default: the model's hub id or folder (its transformer config's ``_name_or_path``).
    fingerprint : str, optional
        Default for the torch backend: the SHA-256 of its weights, tokenizer, maximum length, prompts and activation;
        for ONNX/OpenVINO (whose weights are not torch tensors) give one, or the cache refuses the scorer.
    """

    def __init__(self, model: Any, *, name: str | None = None, fingerprint: str | None = None) -> None:
        if not _is_sentence_transformers(model):
            raise ParameterError("model", "a sentence_transformers.CrossEncoder", type(model).__name__,
                                 "SentenceTransformersScorer")
        self.model = model
        self.name = name or _st_name(model)
        self.fingerprint = fingerprint if fingerprint is not None else _st_fingerprint(model)

    @property
    def max_length(self) -> int | None:
        """The model's maximum tokens per pair, as it is now (setting ``model.max_length`` later changes it)."""
        return getattr(self.model, "max_seq_length", None)

    @property
    def device(self) -> str:
        return str(self.model.device)

    def score(self, query_texts: Sequence[str], item_texts: Sequence[str]) -> np.ndarray:
        pairs = list(zip(query_texts, item_texts))
        # One predict batch per call: the engine already sorted the block by length and cut it into batches.
        return np.asarray(self.model.predict(pairs, batch_size=max(len(pairs), 1), show_progress_bar=False,
                                             convert_to_numpy=True), dtype=np.float32)

    def __repr__(self) -> str:
        return f"SentenceTransformersScorer({self.name!r})"


def _transformer(model: Any) -> Any:
    return getattr(model[0], "auto_model", None) if len(model) else None


def _st_name(model: Any) -> str:
    config = getattr(_transformer(model), "config", None)
    return str(getattr(config, "_name_or_path", "") or "") or "sentence-transformers CrossEncoder"


def _st_settings(model: Any) -> dict[str, Any]:
    """What a sentence-transformers CE's scores depend on besides its weights and the tokenizer's vocabulary."""
    config = getattr(_transformer(model), "config", None)
    return {"activation": repr(getattr(model, "activation_fn", None)), "backend": getattr(model, "backend", "torch"),
            "prompts": getattr(model, "prompts", None), "default_prompt": getattr(model, "default_prompt_name", None),
            "num_labels": getattr(model, "num_labels", None), "modules": [type(m).__name__ for m in model],
            "revision": getattr(config, "_commit_hash", None)}


def _st_fingerprint(model: Any) -> str | None:
    """SHA-256 of what a torch-backend sentence-transformers CE's scores depend on; None for other backends."""
    import torch

    if getattr(model, "backend", "torch") != "torch" or not isinstance(_transformer(model), torch.nn.Module):
        return None
    config = getattr(_transformer(model), "config", None)
    tokenizer = getattr(model, "tokenizer", None)
    backend_tok = getattr(tokenizer, "backend_tokenizer", None)
    # the backend tokenizer's runtime truncation/padding settings change with each call: not part of the model
    vocab = {k: v for k, v in json.loads(backend_tok.to_str()).items() if k not in ("truncation", "padding")} if \
        backend_tok is not None else sorted((tokenizer.get_vocab() if tokenizer is not None else {}).items())
    described = {
        "class": f"{type(model).__module__}.{type(model).__qualname__}",
        "modules": [type(m).__name__ for m in model],
        "max_seq_length": getattr(model, "max_seq_length", None),
        "activation": repr(getattr(model, "activation_fn", None)),
        "prompts": getattr(model, "prompts", None), "default_prompt": getattr(model, "default_prompt_name", None),
        "config": config.to_dict() if hasattr(config, "to_dict") else None,
        "tokenizer": vocab,
        "chat_template": getattr(tokenizer, "chat_template", None),
    }
    h = hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode())
    for key, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().contiguous().cpu().reshape(-1)
        h.update(key.encode())
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).numpy())
    return h.hexdigest()
