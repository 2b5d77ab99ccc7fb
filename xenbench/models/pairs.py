"""How a (query, item) pair becomes the token ids a cross-encoder reads.

Each query and each item is tokenized **once** (n + m tokenizer calls for n·m pairs) and pairs are assembled from
token ids: :class:`PairEncoder` tokenizes and :meth:`PairEncoder.collate` pads a list of pairs (the plain path);
:class:`PairAssembler` builds the same tensors by vectorized gathers on the target device (the scorer's path).

The layouts (``CEConfig.layout``):

``"segments"``  xenbench's bundled CEs and the ZESHEL release: ``[CLS] query [SEP] item [SEP]``, token type 1 on
                the item, each segment cut to its own budget (:class:`InputFormat`; with markers
                ``[CLS] left [unused0] mention [unused1] right [SEP] title [unused2] text [SEP]``).
``"pair"``      the tokenizer's own pair template (``<s> q </s></s> item </s>`` for RoBERTa/XLM-R, ``[CLS] q [SEP]
                item [SEP]`` for BERT, ...), read off the tokenizer once and applied to ids; the pair is truncated
                as ``tokenizer(q, item, truncation="longest_first")`` does, to the model's maximum length.
``"chat"``      the tokenizer's chat template with sentence-transformers' ``query``/``document`` roles (and the
                prompt as a system message): the rendered text up to the document is tokenized per query, the
                document and the template's tail per item; a pair too long is cut at the maximum length and the
                template's tail written back over its last tokens, as sentence-transformers does. The template is
                rendered under time and size bounds (:mod:`xenbench.models.templates`).
``"bge-llm"``   the recipe of the bge-reranker-v2-gemma model card (FlagEmbedding's LLM reranker): ``<bos> A: query``
                (cut to 3/4 of the maximum length L), a newline, ``B: document`` (cut so that the pair fits in L, the
                card's ``truncation="only_second"``), then a newline and the prompt; score = logit("Yes") at the last
                token.

A prompt and template that leave no room for a query token and a document token within the maximum length are
refused (every pair would score the same); :meth:`PairEncoder.longest` is the longest sequence a layout can build,
which the loader checks against the model's position limit.

The document text of the ``"pair"``, ``"chat"`` and ``"bge-llm"`` layouts is ``"title text"`` (:func:`document_text`;
a retriever reads ``"title: text"``, :func:`xenbench.models.retrievers.item_text`).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from xenbench.data.datasets import Item, Query
from xenbench.errors import DataError, ParameterError
from xenbench.models.templates import render_chat

if TYPE_CHECKING:  # PairEncoder reads a few fields of the CE's config; crossencoder builds a PairEncoder
    from xenbench.models.crossencoder import CEConfig

Layout = Literal["segments", "pair", "chat", "bge-llm"]
#: The bge-reranker-v2-gemma card's prompt (FlagEmbedding's ``FlagLLMReranker`` default).
BGE_LLM_PROMPT = ("Given a query A and a passage B, determine whether the passage contains an answer to the query by "
                  "providing a prediction of either 'Yes' or 'No'.")
#: The ZESHEL markers around a mention (``[unused0]``, ``[unused1]``) and between an item's title and text.
MARKERS = ("[unused0]", "[unused1]", "[unused2]")


def document_text(item: Item) -> str:
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
      chat-template suffix restore);
    * ``"only_second"``: the item segment is cut so that ``prefix · query · mid · item`` fits in ``max_length``; the
      suffix comes after it (the bge-reranker-v2-gemma card: ``prepare_for_model(truncation="only_second")``, then
      the prompt appended).
    """

    prefix: tuple[int, ...]
    mid: tuple[int, ...]
    suffix: tuple[int, ...]
    types: tuple[int, int, int, int, int] = (0, 0, 0, 1, 1)
    pad_id: int = 0
    max_length: int | None = None
    truncation: Literal["longest_first", "right", "only_second"] = "longest_first"
    query_pad_to: int | None = None

    @property
    def budget(self) -> int | None:
        """Tokens left for the query and item segments together, or None (no bound)."""
        if self.max_length is None:
            return None
        suffix = 0 if self.truncation == "only_second" else len(self.suffix)
        return max(self.max_length - len(self.prefix) - len(self.mid) - suffix, 0)


def truncated_lengths(a: Any, b: Any, template: PairTemplate) -> tuple[Any, Any]:
    """Kept lengths of query and item segments of lengths ``a``, ``b`` (ints, or int arrays/tensors of one shape).

    ``"longest_first"`` reproduces the ``tokenizers`` library (``utils/truncation.rs``): with budget B, the shorter
    segment s keeps its length if the longer one can take the rest (``max(s, B - s)``), else both are cut to
    ``B // 2`` and the longer (on a tie the item) gets ``B // 2 + B % 2``. ``"right"`` keeps the query first;
    ``"only_second"`` cuts the item only (transformers' ``truncate_sequences``, which leaves the pair uncut when the
    item is too short to remove enough: the loader refuses a template where that can happen).
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
    elif template.truncation == "only_second":
        remove = a_arr + b_arr - budget
        qa, qb = a_arr, lib.where(b_arr > remove, b_arr - remove, b_arr)
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
    :meth:`collate` (and the scorer's vectorized :class:`PairAssembler`) put them into :attr:`template`.

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
        elif self.layout == "bge-llm":
            if max_length is None or tokenizer.bos_token_id is None:
                raise DataError(where, "the bge-reranker-v2-gemma recipe needs a maximum length and a tokenizer with a "
                                       "<bos> token")
            sep = self._ids(["\n"])[0]
            prompt = self._ids([self.prompt or BGE_LLM_PROMPT])[0]
            self.template = PairTemplate((int(tokenizer.bos_token_id),), tuple(sep), tuple(sep + prompt),
                                         (0, 0, 0, 0, 0), int(self.pad_id), max_length, "only_second", None)
        else:
            raise ParameterError("layout", "'segments', 'pair', 'chat' or 'bge-llm'", self.layout, "PairEncoder")
        self._check_room()

    def _check_room(self) -> None:
        """Refuse a prompt and template that leave no room for one query token and one document token within the
        maximum length: every pair would be cut to the same tokens and score the same (sentence-transformers scores
        such pairs silently)."""
        t = self.template
        if t.max_length is None or self.layout == "segments":
            return
        if self.layout == "bge-llm":  # the longest query segment the recipe keeps, then the separator
            used, what = len(t.prefix) + t.max_length * 3 // 4 + len(t.mid), "a query of 3/4 of it and the template"
        elif self.layout == "chat":  # everything the template renders around an empty query and document
            head = self._chat_heads([""])[0] + self._lead
            used, what = len(self._ids([head])[0]) + len(t.suffix), "the prompt and the chat template"
        else:
            prompt = len(self._ids([self.prompt])[0]) if self.prompt else 0
            used, what = len(t.prefix) + len(t.mid) + len(t.suffix) + prompt, "the prompt and the pair template"
        if t.max_length - used < 2:
            raise DataError(self.where, f"{what} take {used} of the {t.max_length} tokens of max_length: no room for "
                                        "the query and the document, so every pair would score the same; expected a "
                                        f"max_length of at least {used + 2}, or a shorter prompt")

    def longest(self) -> int | None:
        """The longest sequence this layout builds (tokens), or None when it is unbounded."""
        t = self.template
        if self.layout == "segments":
            head = len(t.prefix) + self.fmt.max_query_tokens + len(t.mid)
            return max(head, t.query_pad_to or 0) + self.fmt.max_item_tokens + len(t.suffix)
        if t.max_length is None:
            return None
        return t.max_length + (len(t.suffix) if t.truncation == "only_second" else 0)

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
        text = render_chat(self.tokenizer, self._messages(query, _DOC), self.where, **self._chat_kwargs)
        if text.count(_DOC) != 1:
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
        """Token ids of each query's segment (no special tokens; for ``"chat"``, the rendered text before the item).

        Warns, with the count, when some queries leave no token of the maximum length for the document (a long
        query under the ``"chat"`` layout, where the query is kept first): every item then scores the same for them.
        """
        ids = self._encode_queries(queries)
        self._warn_no_room(queries, ids)
        return ids

    def _warn_no_room(self, queries: Sequence[Query], ids: list[list[int]]) -> None:
        if self.template.max_length is None or not ids:
            return
        lengths = np.fromiter((len(q) for q in ids), dtype=np.int64, count=len(ids))
        _, kept = truncated_lengths(lengths, np.ones_like(lengths), self.template)
        crowded = np.flatnonzero(kept == 0)
        if crowded.size:
            warnings.warn(f"{self.where}: {crowded.size} of {len(ids)} queries leave no room for the document within "
                          f"max_length {self.template.max_length} (the prompt, the template and the query take it all; "
                          f"first: {queries[int(crowded[0])].id!r}): every item scores the same for them; raise "
                          "max_length, shorten the prompt or the queries", UserWarning, stacklevel=3)

    def _encode_queries(self, queries: Sequence[Query]) -> list[list[int]]:
        if self.layout == "pair":
            return self._ids([(self.prompt or "") + q.text for q in queries])
        if self.layout == "chat":
            return self._ids(self._chat_heads([q.text for q in queries]))
        if self.layout == "bge-llm":  # the card cuts "A: query" to 3/4 of the maximum length
            keep = int(self.template.max_length or 0) * 3 // 4
            return [ids[:keep] for ids in self._ids([f"A: {q.text}" for q in queries])]
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
        :func:`document_text` (``"pair"``), or of the document with the spaces before it (``"chat"``; the template's
        tail is :attr:`template`'s suffix).

        Raises
        ------
        DataError
            ``"chat"``: an item whose ids, put after a query's, differ from the ids of the whole rendered text (the
            template's text before the document does not end on a token boundary for this tokenizer).
        """
        if self.layout == "pair":
            return self._ids([document_text(it) for it in items])
        if self.layout == "chat":
            return self._encode_chat_items(items)
        if self.layout == "bge-llm":  # the card cuts "B: passage" to the maximum length before the pair is cut
            keep = int(self.template.max_length or 0)
            return [ids[:keep] for ids in self._ids([f"B: {document_text(it)}" for it in items])]
        budget = self.fmt.max_item_tokens
        titles = self._ids([it.title for it in items])
        texts = self._ids([it.text for it in items])
        if self.fmt.markers:
            return [(t + [self.t_sep] + x)[:budget] for t, x in zip(titles, texts)]
        return [(t + x)[:budget] for t, x in zip(titles, texts)]

    def _encode_chat_items(self, items: Sequence[Item]) -> list[list[int]]:
        docs = [self._lead + document_text(it) + self._tail for it in items]
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


