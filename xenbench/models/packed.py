"""Padding-free ("packed", variable-length) forward pass of a BERT-style cross-encoder.

A length-bucketed batch still pads every pair to its batch's longest pair, and with ``query_pad_to`` every
pair also carries a block of pad tokens between the query head and the item tail. The padded forward
(:meth:`CrossEncoder.forward`) spends its embedding, Q/K/V, output-projection, FFN and LayerNorm FLOPs on
those pads. :func:`packed_forward` computes the same scores on the (T, d) tensor of attended tokens only,
T = ``attention_mask.sum()``:

* every token keeps its original position id (its column in the padded batch) and token type, so the
  embeddings are those of the padded path even when the attended tokens are not contiguous;
* token-wise ops call the Hugging Face model's own submodules (no weight copies), so a loaded or
  fine-tuned CE is used as it is;
* attention runs per sequence: on CUDA with fp16/bf16 activations through PyTorch's variable-length
  flash attention (:func:`torch.nn.attention.varlen.varlen_attn`), otherwise (CPU, or fp32, which flash
  attention does not take) through ``scaled_dot_product_attention`` on q/k/v re-padded to (B, H, L_max, d_h)
  with a key mask, L_max = the longest sequence's *attended* length (the query pad gap is gone);
* the heads: [CLS]-CE = the model's own head on each sequence's first token (BERT's pooler + classifier,
  ELECTRA's and RoBERTa's classification heads, which read ``features[:, 0]``); [EMB]-CE = ``ce.embed_pair`` on
  the last hidden states scattered back to the padded layout, then the same (scaled cosine or raw) dot product
  as ``CrossEncoder.forward``.

Supported: the post-LayerNorm encoders with BERT's layer (absolute positions, encoder-only): BERT, ELECTRA,
RoBERTa and XLM-R (``*Model`` / ``*ForSequenceClassification``); and LLM rerankers with Llama's decoder layer
(``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM`` with full attention: rotary positions from each
token's slot in its pair, causal attention per pair, the score read at each pair's last token). RoBERTa and XLM-R derive position ids from the
input ids (``padding_idx + 1 +`` the token's rank among the non-pad tokens); they are computed on the padded batch
as the model computes them and carried with each token. Anything else (ModernBERT's rotary local/global attention,
DeBERTa-v2's relative attention, other decoders) raises :class:`~xenbench.errors.ParameterError` rather than computing
different numbers; the scorer then runs the padded forward.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

from xenbench.errors import ParameterError

__all__ = ["Packed", "check_supported", "encode_packed", "pack", "packed_forward", "padded_token_share", "repad",
           "supports", "varlen_available"]

Attention = Literal["auto", "varlen", "padded"]

try:  # PyTorch >= 2.10; CUDA (flash attention) kernels only
    from torch.nn.attention.varlen import varlen_attn as _varlen_attn
except ImportError:  # pragma: no cover - depends on the torch version
    _varlen_attn = None


@dataclass(frozen=True)
class Packed:
    """The attended tokens of a padded batch of B pairs of width W, packed sequence after sequence.

    Attributes
    ----------
    input_ids, token_type_ids, position_ids : Tensor of shape (T,), int64
        Per attended token; ``position_ids`` is the token's column in the padded batch.
    flat_index : Tensor of shape (T,), int64
        Each token's index into the flattened (B * W) padded batch (to scatter results back).
    seq_index : Tensor of shape (T,), int64
        The pair (batch row) each token belongs to.
    slot : Tensor of shape (T,), int64
        Each token's rank among its pair's attended tokens (its column once re-padded to ``max_len``).
    lengths : Tensor of shape (B,), int64
        Attended tokens per pair.
    cu_seqlens : Tensor of shape (B + 1,), int32
        Cumulative ``lengths`` starting at 0 (the varlen-attention convention).
    max_len : int
        ``max(lengths)``.
    batch_size, width : int
        B and W of the padded batch.
    """

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    position_ids: torch.Tensor
    flat_index: torch.Tensor
    seq_index: torch.Tensor
    slot: torch.Tensor
    lengths: torch.Tensor
    cu_seqlens: torch.Tensor
    max_len: int
    batch_size: int
    width: int

    @property
    def n_tokens(self) -> int:
        """T, the number of attended tokens."""
        return int(self.input_ids.shape[0])


def pack(batch: dict[str, torch.Tensor]) -> Packed:
    """Pack a padded batch (``input_ids``, ``attention_mask``, ``token_type_ids`` of shape (B, W)).

    Raises
    ------
    ParameterError
        If a pair has no attended token (its attention would be undefined).
    """
    ids, att = batch["input_ids"], batch["attention_mask"]
    tt = batch.get("token_type_ids")
    B, W = ids.shape
    mask = att.reshape(-1) > 0
    # nonzero keeps row-major order: tokens are grouped by pair and ordered by column within a pair.
    flat = mask.nonzero().squeeze(1)
    lengths = (att > 0).sum(1)
    lo, hi = (int(x) for x in torch.stack(torch.aminmax(lengths)).tolist()) if B else (1, 0)
    if lo < 1:
        raise ParameterError("batch", "pairs with at least one attended token each", "an attention_mask row of zeros",
                             "pack")
    cu = torch.zeros(B + 1, dtype=torch.int32, device=ids.device)
    cu[1:] = lengths.cumsum(0)
    seq = flat // W
    return Packed(
        input_ids=ids.reshape(-1)[flat],
        token_type_ids=(tt.reshape(-1)[flat] if tt is not None else torch.zeros_like(flat)),
        position_ids=flat % W,
        flat_index=flat,
        seq_index=seq,
        slot=torch.arange(flat.shape[0], device=ids.device) - cu[:-1].long()[seq],
        lengths=lengths,
        cu_seqlens=cu,
        max_len=hi,
        batch_size=B,
        width=W,
    )


def repad(x: torch.Tensor, packed: Packed, layout: Literal["batch", "compact"] = "batch") -> torch.Tensor:
    """Scatter per-token rows ``x`` (T, ...) back into a zero-filled padded tensor.

    ``layout="batch"``: the original (B, W, ...) layout (each token at its original column);
    ``"compact"``: (B, max_len, ...), each pair's tokens left-aligned (what the attention fallback uses).
    """
    if layout == "batch":
        n, index = packed.width, packed.flat_index
    else:
        n, index = packed.max_len, packed.seq_index * packed.max_len + packed.slot
    out = x.new_zeros((packed.batch_size * n, *x.shape[1:]))
    return out.index_copy_(0, index, x).view(packed.batch_size, n, *x.shape[1:])


def varlen_available(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether :func:`packed_forward`'s ``attention="auto"`` uses ``varlen_attn`` for activations of ``dtype``.

    Flash attention has CUDA kernels for fp16/bf16 only; fp32 and CPU use the exact re-padded SDPA.
    """
    return _varlen_attn is not None and torch.device(device).type == "cuda" and dtype in (torch.float16,
                                                                                          torch.bfloat16)


@dataclass(frozen=True)
class _Family:
    """How one encoder family is packed: its exact classes, where its first-token head sits, its positions."""

    cls: str  # the *ForSequenceClassification class
    emb: str  # the bare encoder class
    base: str  # attribute of the encoder inside the classification model
    pooler: bool  # BERT: pooler(dense, tanh) before the classifier
    positions: Literal["column", "roberta", "slot"]


_FAMILIES = (
    _Family("BertForSequenceClassification", "BertModel", "bert", True, "column"),
    _Family("ElectraForSequenceClassification", "ElectraModel", "electra", False, "column"),
    _Family("RobertaForSequenceClassification", "RobertaModel", "roberta", False, "roberta"),
    _Family("XLMRobertaForSequenceClassification", "XLMRobertaModel", "roberta", False, "roberta"),
)


#: Decoder-only LLM rerankers with Llama's layer (pre-RMSNorm, rotary positions, grouped-query causal attention,
#: gated MLP; Qwen3 adds an RMSNorm on each head's q and k): computed token-wise on the packed tokens.
_CAUSAL = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def _family(ce: Any) -> tuple[_Family, nn.Module, nn.Module | None]:
    model = getattr(ce, "model", None)
    kind = getattr(getattr(ce, "config", None), "kind", None)
    name = type(model).__name__
    if kind == "lm" and name in _CAUSAL and type(model).__module__.startswith("transformers."):
        return _Family(name, name, "model", False, "slot"), model.model, model
    # Exact classes (and transformers' own modules), not isinstance: a subclass may override forward.
    module = type(model).__module__
    for fam in _FAMILIES:
        if not module.startswith("transformers."):
            break
        if kind == "cls" and name == fam.cls:
            return fam, getattr(model, fam.base), model
        if kind == "emb" and name == fam.emb:
            return fam, model, None
    expected = {"cls": " or ".join(f.cls for f in _FAMILIES), "emb": " or ".join(f.emb for f in _FAMILIES),
                "lm": " or ".join(_CAUSAL)}.get(kind, "a cls, emb or lm CE")
    raise ParameterError("ce", f"a BERT-style cross-encoder (kind {kind!r} needs {expected})", name, "packed_forward")


def check_supported(ce: Any) -> tuple[nn.Module, nn.Module | None]:
    """The encoder of ``ce`` and its sequence-classification wrapper (``None`` for an [EMB]-CE).

    Raises
    ------
    ParameterError
        Naming the model class, if the architecture is not one this module reproduces exactly.
    """
    fam, base, head = _family(ce)
    name = type(ce.model).__name__
    if fam.positions == "slot":
        cfg = base.config
        types = getattr(cfg, "layer_types", None) or ["full_attention"]
        if any(t != "full_attention" for t in types) or getattr(cfg, "use_sliding_window", False):
            raise ParameterError("ce", "a causal LM with full attention in every layer", f"{name} with sliding "
                                 "window layers", "packed_forward")
        return base, head
    if fam.pooler and head is not None and base.pooler is None:
        raise ParameterError("ce", f"a {fam.cls} with a pooler", f"{name} without one", "packed_forward")
    cfg = base.config
    if cfg.is_decoder or getattr(cfg, "position_embedding_type", "absolute") != "absolute":
        raise ParameterError("ce", "an encoder with absolute positions", f"{name} with is_decoder={cfg.is_decoder}, "
                             f"position_embedding_type={getattr(cfg, 'position_embedding_type', None)!r}",
                             "packed_forward")
    return base, head


def supports(ce: Any) -> bool:
    """Whether :func:`packed_forward` reproduces ``ce`` (:func:`check_supported` passes)."""
    try:
        check_supported(ce)
    except ParameterError:
        return False
    return True


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed: Packed, use_varlen: bool,
            dropout_p: float, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """Per-pair softmax attention of packed q/k/v of shape (T, H, d_h) -> (T, H, d_h) (``causal``: each token
    attends to its pair's earlier tokens and itself only)."""
    if use_varlen:
        # Default scale 1/sqrt(d_h) is BERT's; positional arguments are stable across torch versions.
        return _varlen_attn(q, k, v, packed.cu_seqlens, packed.cu_seqlens, packed.max_len, packed.max_len)
    B, L = packed.batch_size, packed.max_len
    # (B, L, H, d_h) -> (B, H, L, d_h); the key mask hides each pair's slots past its length.
    qp, kp, vp = (repad(x, packed, "compact").transpose(1, 2) for x in (q, k, v))
    slots = torch.arange(L, device=q.device)
    keep = (slots[None, :] < packed.lengths[:, None])[:, None, None, :]
    if causal:
        keep = keep & (slots[None, :] <= slots[:, None])[None, None]
    out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=keep, dropout_p=dropout_p, scale=scale)
    return out.transpose(1, 2).reshape(B * L, *q.shape[1:])[packed.seq_index * L + packed.slot]


def encode_packed(base: nn.Module, packed: Packed, attention: Attention = "auto") -> torch.Tensor:
    """Last hidden states (T, d) of a ``BertModel`` on packed tokens."""
    # (1, T) inputs: BertEmbeddings sums word + type + position embeddings, then LayerNorm (+ dropout).
    h = base.embeddings(input_ids=packed.input_ids[None], token_type_ids=packed.token_type_ids[None],
                        position_ids=packed.position_ids[None])[0]
    if getattr(base, "embeddings_project", None) is not None:  # ELECTRA: embedding size -> hidden size
        h = base.embeddings_project(h)
    T = h.shape[0]
    for layer in base.encoder.layer:
        sa = layer.attention.self
        heads, d_h = sa.num_attention_heads, sa.attention_head_size
        q, k, v = (proj(h).view(T, heads, d_h) for proj in (sa.query, sa.key, sa.value))
        if attention == "varlen" and not varlen_available(q.device, q.dtype):
            raise ParameterError("attention", "'varlen' only with torch.nn.attention.varlen and CUDA fp16/bf16 "
                                 "activations", f"'varlen' on {q.device.type} with {q.dtype}", "packed_forward")
        dropout_p = sa.dropout.p if sa.training else 0.0
        use_varlen = attention != "padded" and dropout_p == 0.0 and varlen_available(q.device, q.dtype)
        ctx = _attend(q, k, v, packed, use_varlen, dropout_p).reshape(T, heads * d_h)
        a = layer.attention.output(ctx, h)  # dense, dropout, LayerNorm(. + h)
        h = layer.output(layer.intermediate(a), a)  # FFN, dropout, LayerNorm(. + a)
    return h


def encode_causal(base: nn.Module, packed: Packed) -> torch.Tensor:
    """Last hidden states (T, d) of a Llama-style decoder (``LlamaModel``/``Qwen2Model``/``Qwen3Model``) on packed
    tokens: each layer's own modules, token-wise; rotary positions from each token's slot in its pair (right-padded
    pairs start at 0, as the padded forward counts them); causal attention per pair (re-padded SDPA)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    h = base.embed_tokens(packed.input_ids)[None]  # (1, T, d)
    cos, sin = base.rotary_emb(h, packed.slot[None])
    T = h.shape[1]
    for layer in base.layers:
        at = layer.self_attn
        x = layer.input_layernorm(h)
        q, k, v = (proj(x).view(1, T, -1, at.head_dim) for proj in (at.q_proj, at.k_proj, at.v_proj))
        if hasattr(at, "q_norm"):  # Qwen3: RMSNorm on each head's q and k before the rotation
            q, k = at.q_norm(q), at.k_norm(k)
        q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # (1, H, T, d_h)
        groups = q.shape[1] // k.shape[1]  # grouped-query attention: each k/v head serves `groups` q heads
        k, v = k.repeat_interleave(groups, dim=1), v.transpose(1, 2).repeat_interleave(groups, dim=1)
        ctx = _attend(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), packed, False, 0.0,
                      causal=True, scale=at.scaling)
        h = h + at.o_proj(ctx.reshape(1, T, -1))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return base.norm(h)[0]


def packed_forward(ce: Any, batch: dict[str, torch.Tensor], attention: Attention = "auto") -> torch.Tensor:
    """The scores ``ce(batch)`` (B,), computed on attended tokens only.

    Parameters
    ----------
    ce : CrossEncoder
        A BERT [CLS]-CE or [EMB]-CE (see :func:`check_supported`); its own modules compute everything.
    batch : dict of str to Tensor
        ``input_ids``, ``attention_mask``, ``token_type_ids`` (B, W) and ``query_len`` (B,), as from
        ``ce.pairs.collate`` or the scorer's ``PairAssembler.batch``.
    attention
        ``"auto"``: ``varlen_attn`` when available for the activations (CUDA, fp16/bf16), else re-padded SDPA;
        ``"padded"``: always the re-padded SDPA; ``"varlen"``: always ``varlen_attn`` (error if unavailable).

    Returns
    -------
    Tensor of shape (B,)
        In the dtype the heads compute in (fp32 for an fp32 model, as ``ce(batch)``).

    Raises
    ------
    ParameterError
        Unsupported architecture (names the model class), unknown ``attention``, or an empty pair.
    """
    if attention not in ("auto", "varlen", "padded"):
        raise ParameterError("attention", "'auto', 'varlen' or 'padded'", attention, "packed_forward")
    base, head = check_supported(ce)
    fam = _family(ce)[0]
    if fam.positions == "slot":  # an LLM reranker: its score at each pair's last token
        packed = pack({k: v for k, v in batch.items() if k != "token_type_ids"})
        if not bool((batch["attention_mask"][:, 0] > 0).all()):
            raise ParameterError("batch", "right-padded pairs (positions count from column 0)", "a left-padded batch",
                                 "packed_forward")
        h = encode_causal(base, packed)
        return ce.answer_score(h[packed.cu_seqlens[1:].long() - 1])
    names = getattr(ce, "input_names", ("input_ids", "attention_mask", "token_type_ids"))
    if "token_type_ids" not in names:  # the model never sees the batch's types (a one-type model): zeros, as it does
        batch = {k: v for k, v in batch.items() if k != "token_type_ids"}
    packed = pack(batch)
    if fam.positions == "roberta":
        # RoBERTa's create_position_ids_from_input_ids: padding_idx + rank among the non-pad tokens (pads: padding_idx).
        pad = base.embeddings.padding_idx
        real = (batch["input_ids"] != pad).long()
        positions = (real.cumsum(1) * real + pad).reshape(-1)[packed.flat_index]
        packed = dataclasses.replace(packed, position_ids=positions)
    h = encode_packed(base, packed, attention)
    if head is not None:
        # The packed first token is column 0 only if column 0 is attended (right padding, as collate and
        # PairAssembler build batches).
        if not bool((batch["attention_mask"][:, 0] > 0).all()):
            raise ParameterError("batch", "column 0 attended in every pair (a [CLS]-CE reads it; no left padding)",
                                 "a left-padded batch", "packed_forward")
        first = h[packed.cu_seqlens[:-1].long()][:, None]  # (B, 1, d)
        if fam.pooler:  # BertForSequenceClassification: classifier(dropout(tanh(dense(h[:, 0]))))
            return head.classifier(head.dropout(base.pooler(first))).select(-1, 0)
        return head.classifier(first).select(-1, 0)  # ELECTRA/RoBERTa heads read features[:, 0]
    # Pooling stays in CrossEncoder.embed_pair: it reads only attended positions, so zero-filled pads are inert.
    return ce.pair_score(*ce.embed_pair(repad(h, packed, "batch"), batch))


def padded_token_share(batch: dict[str, torch.Tensor]) -> float:
    """Share of the B x W positions of a padded batch that are not attended (what packing saves)."""
    att = batch["attention_mask"]
    return 1.0 - float((att > 0).sum()) / max(att.numel(), 1)

