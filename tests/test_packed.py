"""Packed (padding-free) forward: the same scores as the padded ``ce(batch)``, on the scorer's own batches."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    DebertaV2Config,
    DebertaV2Model,
)

from xenbench.data.sources import load_dataset
from xenbench.errors import ParameterError
from xenbench.models.crossencoder import CEConfig, CrossEncoder, bundled_backbone
from xenbench.models.loading import load_cross_encoder
from xenbench.models.pairs import InputFormat, PairAssembler
from xenbench.models.packed import (
    check_supported,
    pack,
    packed_forward,
    padded_token_share,
    repad,
)

ROOT = Path(__file__).resolve().parents[1]



def scorer_batches(ce, queries, items, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """All query x item pairs as the scorer batches them: length-sorted, each padded to its longest pair."""
    asm = PairAssembler(ce.pairs, ce.pairs.encode_queries(queries), ce.pairs.encode_items(items))
    q_rows, i_rows = (a.reshape(-1) for a in np.meshgrid(np.arange(len(queries)), np.arange(len(items)),
                                                          indexing="ij"))
    lens = asm.lengths(q_rows, i_rows)
    order = np.argsort(lens, kind="stable")
    return [asm.batch(q_rows[order[s:s + batch_size]], i_rows[order[s:s + batch_size]],
                      width=int(lens[order[min(s + batch_size, len(order)) - 1]]))
            for s in range(0, len(order), batch_size)]


def assert_same(ce, batch, tol: float = 1e-5) -> torch.Tensor:
    with torch.inference_mode():
        ref, got = ce(batch), packed_forward(ce, batch)
    assert got.shape == ref.shape == (batch["input_ids"].shape[0],)
    assert got.dtype == ref.dtype
    assert float((got - ref).abs().max()) <= tol * max(1.0, float(ref.abs().max()))
    return ref


def with_format(ce, **changes):
    """The same CE (same weights) with another input format, e.g. the query segment padded."""
    fmt = dataclasses.replace(ce.config.input_format, **changes)
    return CrossEncoder(ce.model, ce.pairs.tokenizer, dataclasses.replace(ce.config, input_format=fmt)).eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: these forwards are tiny, and on a shared 2-core machine a second thread mostly waits."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def texts():
    ds = load_dataset("wordnet-el:noun.cognition")
    return list(ds.queries), list(ds.items)


@pytest.fixture(scope="module", params=["cls-ce", "emb-ce", "emb-ce-marker"])
def real_ce(request):
    return load_cross_encoder(ROOT / "models" / request.param)


# -- the trained checkpoints ----------------------------------------------------------------------


def test_real_ce_on_scorer_batches(real_ce, texts):
    queries, items = texts
    batches = scorer_batches(real_ce, queries[:6], items[:8], batch_size=16)
    assert len(batches) == 3
    refs = torch.cat([assert_same(real_ce, b) for b in batches])
    assert float(refs.std()) > 1.0  # real, spread-out scores, not a degenerate constant


def test_real_ce_very_different_lengths_and_batch_of_one(real_ce, texts):
    queries, items = texts
    qi, ii = real_ce.pairs.encode_queries(queries[:200]), real_ce.pairs.encode_items(items[:200])
    qs, its = np.argsort([len(q) for q in qi]), np.argsort([len(i) for i in ii])
    # Shortest with shortest, longest with longest, unsorted: most of the batch is padding.
    rows = [(qs[0], its[0]), (qs[-1], its[-1]), (qs[1], its[2]), (qs[-2], its[-3])]
    batch = real_ce.pairs.collate([qi[a] for a, _ in rows], [ii[b] for _, b in rows])
    assert padded_token_share(batch) > 0.25
    assert_same(real_ce, batch)
    assert_same(real_ce, real_ce.pairs.collate([qi[qs[-1]]], [ii[its[0]]]))  # B = 1, no padding at all


def test_real_ce_with_padded_query_segment(real_ce, texts):
    """``query_pad_to``: attended tokens are not contiguous and item positions start at 40."""
    queries, items = texts
    padded = with_format(real_ce, query_pad_to=40)
    batches = scorer_batches(padded, queries[:4], items[:6], batch_size=12)
    att = batches[0]["attention_mask"]
    assert bool(((att[:, :-1] == 0) & (att[:, 1:] == 1)).any())  # a gap inside a pair
    ref = torch.cat([assert_same(padded, b) for b in batches])
    # Positions matter: the same pairs unpadded score differently, so matching them is not trivial.
    with torch.inference_mode():
        plain = torch.cat([real_ce(b) for b in scorer_batches(real_ce, queries[:4], items[:6], 12)])
    assert float((ref.sort().values - plain.sort().values).abs().max()) > 1e-3


# -- tiny random BERTs (every head and pooling, fast) ---------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(bundled_backbone())


def tiny_ce(tokenizer, kind: str, pooling: str = "mean", scale: float | None = None, **fmt):
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=128, num_labels=1, initializer_range=0.5)
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg) if kind == "cls" else BertModel(cfg, add_pooling_layer=False)
    fmt = InputFormat(**{"max_query_tokens": 12, "max_item_tokens": 20, **fmt})
    config = CEConfig(kind=kind, pooling=pooling, scale=scale, input_format=fmt)
    return CrossEncoder(model.eval(), tokenizer, config).eval()


TINY = {
    "cls": {"kind": "cls"},
    "cls-query-pad": {"kind": "cls", "query_pad_to": 16},
    "emb-mean-scaled": {"kind": "emb", "pooling": "mean", "scale": 20.0},
    "emb-mean-query-pad": {"kind": "emb", "pooling": "mean", "scale": 20.0, "query_pad_to": 16},
    "emb-markers": {"kind": "emb", "pooling": "markers"},
    "emb-cls-sep": {"kind": "emb", "pooling": "cls-sep", "markers": False},
}


@pytest.mark.parametrize("layout", sorted(TINY))
def test_tiny_bert_every_head(layout, tokenizer, texts):
    ce = tiny_ce(tokenizer, **TINY[layout])
    queries, items = texts
    for batch in scorer_batches(ce, queries[:5], items[:7], batch_size=16):
        assert_same(ce, batch)
    assert_same(ce, scorer_batches(ce, queries[:1], items[:1], 1)[0])


def test_padded_attention_path_is_forced_and_autocast_runs(tokenizer, texts):
    ce = tiny_ce(tokenizer, "cls", query_pad_to=16)
    batch = scorer_batches(ce, *(t[:6] for t in texts), batch_size=36)[0]
    with torch.inference_mode():
        ref = ce(batch)
        # fp32, reductions in another order (SDPA vs the eager attention): 1.5e-5 measured on an AVX-512 Xeon, on
        # scores up to 5.8 (2.6e-6 relative), so the bound is relative
        torch.testing.assert_close(packed_forward(ce, batch, attention="padded"), ref, rtol=1e-5, atol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # low precision: close, not equal
            low_ref, low = ce(batch).float(), packed_forward(ce, batch).float()
    assert float((low - low_ref).abs().max()) < 0.1 * float(ref.std()) + 1e-3


def reference_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k):
    """softmax(Q_i K_iᵀ / √D) V_i per sequence i of packed (T, H, D) tensors: what torch's ``varlen_attn`` computes
    (its documented contract), written out so the varlen branch can run without its CUDA kernel."""
    assert query.shape == key.shape == value.shape and query.dim() == 3  # (T, H, D), self-attention
    assert cu_seq_q.dtype == cu_seq_k.dtype == torch.int32 and torch.equal(cu_seq_q, cu_seq_k)
    lengths = cu_seq_q.diff()
    assert int(cu_seq_q[0]) == 0 and int(cu_seq_q[-1]) == query.shape[0] and max_q == max_k == int(lengths.max())
    out = torch.empty_like(query)
    for s, e in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist()):
        q, k, v = (x[s:e].transpose(0, 1) for x in (query, key, value))  # (H, L_i, D)
        out[s:e] = (torch.softmax(q @ k.transpose(1, 2) / query.shape[-1] ** 0.5, dim=-1) @ v).transpose(0, 1)
    return out


@pytest.mark.parametrize("layout", ["cls-query-pad", "emb-markers", "emb-mean-query-pad"])
def test_varlen_branch_gives_the_padded_scores_with_a_reference_kernel(layout, tokenizer, texts, monkeypatch):
    # The GPU path minus its CUDA kernel: packing, cu_seqlens, the (T, H, D) layout and the argument order that
    # encode_packed hands to varlen_attn, checked on CPU in fp32 against the padded forward.
    from xenbench.models import packed

    monkeypatch.setattr(packed, "_varlen_attn", reference_varlen_attn)
    monkeypatch.setattr(packed, "varlen_available", lambda device, dtype: True)
    ce = tiny_ce(tokenizer, **TINY[layout])
    for batch in scorer_batches(ce, *(t[:5] for t in texts), batch_size=16):
        with torch.inference_mode():
            torch.testing.assert_close(packed_forward(ce, batch, attention="varlen"), ce(batch), rtol=1e-5,
                                       atol=1e-5)


@pytest.mark.cuda
def test_cuda_varlen_matches_padded_under_bf16(tokenizer, texts):
    ce = tiny_ce(tokenizer, "cls", query_pad_to=16).cuda()
    batch = {k: v.cuda() for k, v in scorer_batches(ce, *(t[:6] for t in texts), batch_size=36)[0].items()}
    with torch.inference_mode():
        ref = ce(batch)
        torch.testing.assert_close(packed_forward(ce, batch), ref, rtol=1e-5, atol=1e-4)  # fp32: re-padded SDPA
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low_ref, low = ce(batch).float(), packed_forward(ce, batch, attention="varlen").float()
    assert float((low - low_ref).abs().max()) < 0.1 * float(ref.std()) + 1e-2


# -- packing itself -------------------------------------------------------------------------------


def test_pack_keeps_columns_and_types(tokenizer):
    ce = tiny_ce(tokenizer, "cls", query_pad_to=8)
    batch = ce.pairs.collate([[2000, 2001], [2002]], [[3000], [3001, 3002, 3003]])
    p = pack(batch)
    # Pair 0: [CLS] a b [SEP] pad pad pad pad | c [SEP] ; pair 1: [CLS] d [SEP] pad*5 | e f g [SEP]
    assert p.lengths.tolist() == [6, 7] and p.cu_seqlens.tolist() == [0, 6, 13] and p.max_len == 7
    assert p.position_ids.tolist() == [0, 1, 2, 3, 8, 9, 0, 1, 2, 8, 9, 10, 11]
    assert p.token_type_ids.tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1]
    assert p.input_ids.tolist()[:6] == [ce.pairs.cls_id, 2000, 2001, ce.pairs.sep_id, 3000, ce.pairs.sep_id]
    back = repad(p.input_ids, p)
    assert torch.equal(back, batch["input_ids"] * batch["attention_mask"])
    compact = repad(p.input_ids, p, "compact")
    assert compact.shape == (2, 7) and compact[0, 6] == 0 and compact[1, 6] == ce.pairs.sep_id


def test_empty_pair_is_refused():
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 0], [0, 0, 0]]),
             "token_type_ids": torch.zeros(2, 3, dtype=torch.long)}
    with pytest.raises(ParameterError, match="'batch' parameter of pack must be pairs with at least one attended token"):
        pack(batch)


# -- what is not supported ------------------------------------------------------------------------


def test_unsupported_architectures_raise_a_clear_error(tokenizer):
    deberta = DebertaV2Model(DebertaV2Config(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=64))
    config = CEConfig(kind="emb", scale=None)
    ce = CrossEncoder(deberta.eval(), tokenizer, config)
    batch = ce.pairs.collate([[2000]], [[3000]])
    with pytest.raises(ParameterError, match="'ce' parameter of packed_forward must be a BERT-style cross-encoder .*Got 'DebertaV2Model'"):
        packed_forward(ce, batch)
    mismatched = CrossEncoder(tiny_ce(tokenizer, "emb").model, tokenizer, CEConfig(kind="cls"))
    with pytest.raises(ParameterError, match="kind 'cls' needs BertForSequenceClassification.*Got 'BertModel'"):  # a bare encoder has no [CLS] head to reproduce
        check_supported(mismatched)
    with pytest.raises(ParameterError, match="'attention' parameter of packed_forward must be 'varlen' only with"):  # CPU fp32: no flash-attention kernel
        packed_forward(tiny_ce(tokenizer, "cls"), batch, attention="varlen")
    left_padded = {k: v.flip(1) if v.dim() == 2 else v for k, v in tiny_ce(tokenizer, "cls").pairs.collate(
        [[2000], [2000, 2001, 2002]], [[3000], [3001]]).items()}
    with pytest.raises(ParameterError, match="column 0 attended in every pair"):  # the [CLS] head reads column 0, a pad here
        packed_forward(tiny_ce(tokenizer, "cls"), left_padded)
    with pytest.raises(ParameterError, match="must be 'auto', 'varlen' or 'padded'. Got 'flash'"):
        packed_forward(tiny_ce(tokenizer, "cls"), batch, attention="flash")


def test_the_scorer_runs_a_bert_ce_packed_and_gets_the_padded_scores(monkeypatch):
    from xenbench.models import packed, scoring

    ds = load_dataset("wordnet-el:noun.cognition")
    queries, items = ds.queries[:3], ds.items[:7]
    calls = []
    real = packed.packed_forward
    monkeypatch.setattr(packed, "packed_forward", lambda *a, **k: calls.append(k) or real(*a, **k))
    for path in ("models/cls-ce", "models/emb-ce", "models/emb-ce-marker"):
        ce = load_cross_encoder(ROOT / path)
        got = scoring.score_matrix(ce, queries, items, batch_size=8, device="cpu", progress=False).scores
        padded = torch.stack([ce.score_pairs([q] * len(items), items) for q in queries]).numpy()
        np.testing.assert_allclose(got, padded, rtol=0, atol=1e-5 * max(1.0, float(np.abs(padded).max())))
    assert calls and all(k == {"attention": "padded"} for k in calls)


def test_the_scorer_keeps_the_padded_forward_for_other_architectures(tokenizer):
    from xenbench.models import packed, scoring

    deberta = DebertaV2Model(DebertaV2Config(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=64))
    ce = CrossEncoder(deberta.eval(), tokenizer, CEConfig(kind="emb", scale=None))
    cpu = torch.device("cpu")
    assert not packed.supports(ce) and scoring._forward(ce, cpu) is ce
    assert packed.supports(tiny_ce(tokenizer, "cls")) and packed.supports(tiny_ce(tokenizer, "emb"))


def test_the_scorer_packs_on_the_cpu_only(tokenizer):
    """On a GPU the padded forward was measured faster than packing (gpu_check's warm bf16 passes), so the scorer
    packs a supported CE on the CPU and runs ``ce(batch)`` on any other device; choosing the path needs no GPU."""
    from xenbench.models import scoring

    ce = tiny_ce(tokenizer, "cls")
    assert scoring._forward(ce, torch.device("cpu")) is not ce
    for device in ("cuda", "cuda:1", "mps"):
        assert scoring._forward(ce, torch.device(device)) is ce
