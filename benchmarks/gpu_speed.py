"""The GPU check's speed sections (``benchmarks/gpu_check.py``): three reranker sizes x three pair lengths, forward
time apart from host time, and the scorer options that might bring it closer to the device's GEMM rate.

Models (:data:`MODELS`), all in bf16 on the device, none downloaded:

* ``minilm-l6``: the bundled [CLS]-CE (models/cls-ce, MiniLM-L6, hidden 384), saved as a Hugging Face folder (its
  first layer only in the dry run);
* ``bert-base``: a ``BertForSequenceClassification`` of BERT-base's size (12 layers x 768, 110M parameters) with
  seeded random weights, on the bundled backbone's tokenizer (bert-base-uncased's vocabulary);
* ``qwen-0.5b``: a ``Qwen2ForCausalLM`` of Qwen2-0.5B's size (24 layers x 896, 14 query / 2 key-value heads,
  151,936 vocabulary rows) with seeded random weights, a byte-level BPE tokenizer trained here on the bundled texts,
  a Qwen3-Reranker-style chat template, scored logit("yes") - logit("no") at the last token (sentence-transformers'
  ``LogitScore``, :class:`xenbench.models.crossencoder.CrossEncoder`'s ``"lm"`` kind).

Each is written to a folder and read back by :func:`xenbench.models.loading.load_cross_encoder` (ours) and by
``sentence_transformers.CrossEncoder`` (theirs), so both score the same weights with the same pair template.

Pair sets (:data:`LENGTHS`): ``30``: WordNet-EL pairs as they are (a query's text, an item's title and gloss; 30
tokens on average for the BERT tokenizer); ``128`` and ``256``: the same queries against long documents made by
concatenating the bundled glosses in a seeded order, truncated by the model (``max_length``) to exactly that many
tokens per pair. The dry run (``--tiny``) uses the same code on a handful of pairs and, for the two random-weight
models, configs of a few thousand parameters (:data:`CONFIGS`).

Per (model, length) cell, section ``sizes and lengths`` measures, interleaved, ``repeats`` times after a warm-up:

* forward only: ``ce(batch)`` under bf16 autocast over pre-tokenized, length-sorted batches already on the device
  (device time by CUDA events; ``perf_counter`` on a CPU);
* end to end: :func:`xenbench.models.scoring.score_matrix` from the query and item texts (tokenization, pair
  assembly, transfers, forward, scores back on the host);
* sentence-transformers ``CrossEncoder.predict`` on the text pairs, fp32 weights under bf16 autocast, and loaded in
  bf16 (``model_kwargs={"torch_dtype": torch.bfloat16}``);

each with its min/median/max pairs/s and its share of the bf16 GEMM rate measured in the same run at the row's
FLOPs per pair (:func:`flops_per_pair`). Section ``scorer variants`` times the forward-only options of
:data:`VARIANTS` on the cells of :data:`VARIANT_CELLS` first, each against the plain padded forward on the same
batches, with its scores' distance from the plain forward's: the GPU run shows which one wins where.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("gpu_check")

MODELS = ("minilm-l6", "bert-base", "qwen-0.5b")
#: Nominal tokens per pair: 30 = the WordNet-EL pairs as they are; 128 and 256 = exactly that many (truncated).
LENGTHS = (30, 128, 256)
#: Forward-only options tried against the padded forward (see :func:`variant_forward`).
VARIANTS = ("bf16-weights", "batch x4", "token budget", "cuda graphs", "compile", "packed")
#: Cells the variants are tried on first (the issue's goal cell first), then the others while the box lasts.
VARIANT_CELLS = (("bert-base", 128), ("bert-base", 256), ("minilm-l6", 30), ("qwen-0.5b", 256), ("minilm-l6", 128),
                 ("qwen-0.5b", 128), ("minilm-l6", 256), ("bert-base", 30), ("qwen-0.5b", 30))
#: Tokens per batch of the "token budget" variant: 1,024 pairs of 256 tokens, more pairs when they are shorter.
TOKEN_BUDGET = 1024 * 256
#: Architectures of the random-weight models, full size and the dry run's.
CONFIGS = {
    "full": {"bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
             "qwen-0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                               intermediate_size=4864, vocab_size=151936)},
    "tiny": {"bert-base": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
             "qwen-0.5b": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=64, vocab_size=None)},
}
SEED = 0
#: A Qwen3-Reranker-style chat template: sentence-transformers' ``query``/``document`` roles, an optional system
#: message; the answer is read at the last token after the generation prompt.
CHAT_TEMPLATE = (
    "{%- set sys = messages | selectattr('role', 'eq', 'system') | list -%}"
    "<|im_start|>system\n{{ sys[0].content if sys else 'Judge whether the Document meets the requirements based on "
    "the Query provided. Note that the answer can only be \"yes\" or \"no\".' }}<|im_end|>\n<|im_start|>user\n"
    "<Query>: {{ (messages | selectattr('role', 'eq', 'query') | first).content }}\n"
    "<Document>: {{ (messages | selectattr('role', 'eq', 'document') | first).content }}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
CHAT_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


class SectionTimeout(Exception):
    """A section of the check reached its time box (``gpu_check.Box.check`` raises it between passes)."""


def cell_name(model: str, length: int) -> str:
    return f"{model} @ {'~30' if length == 30 else length} tokens"


# --------------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------------
def flops_per_pair(config: Any, lengths: np.ndarray) -> float:
    """Mean forward FLOPs of one pair of ``lengths`` tokens (padding not counted), from a transformers config.

    Per layer and token: 2 x the projection weights (Q, K, V and output: ``d·h·d_h + 2·d·g·d_h + h·d_h·d`` with
    ``h`` query and ``g`` key-value heads of ``d_h``; the MLP: 2·d·d_ff, or 3·d·d_ff for a gated (SwiGLU) decoder),
    plus the attention scores and their weighted sum, 4·L·h·d_h (half of it in a causal decoder, where a token
    attends to those before it). BERT's count is ``2 (4 d² + 2 d d_ff) + 4 L d`` per layer and token. Embeddings,
    norms, the head (a [CLS] classifier, an LLM reranker's two answer rows) are left out.
    """
    d, n_layers, d_ff = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    h = config.num_attention_heads
    d_h = getattr(config, "head_dim", None) or d // h
    g = getattr(config, "num_key_value_heads", None) or h
    decoder = bool(getattr(config, "is_decoder", False)) or config.model_type in ("llama", "qwen2", "qwen3")
    weights = d * h * d_h + 2 * d * g * d_h + h * d_h * d + (3 if decoder else 2) * d * d_ff
    L = np.asarray(lengths, dtype=np.float64)
    attention = 4 * L * h * d_h * (0.5 if decoder else 1.0)
    return float(np.mean(n_layers * L * (2 * weights + attention)))


# --------------------------------------------------------------------------------------------------
# pair sets
# --------------------------------------------------------------------------------------------------
def pair_set(dataset: Any, length: int, n_queries: int, n_items: int, seed: int = SEED) -> tuple[list, list]:
    """(queries, items) whose n_queries x n_items pairs make the cell's pair set; seeded, deterministic.

    ``length`` 30: a seeded sample of the dataset's queries (their text, no mention span) and items. Otherwise the
    same queries against ``n_items`` documents, each the bundled items' ``title text`` glosses concatenated in a
    seeded order until it holds ``length`` words (a word is at least one token): the model's ``max_length`` then
    cuts every pair to ``length`` tokens.
    """
    from xenbench.data.datasets import Item, Query
    from xenbench.models.pairs import document_text
    from xenbench.sampling import sample_rows

    rows = sample_rows(len(dataset.queries), n_queries, seed, kind="queries")
    queries = [Query(dataset.queries[r].id, dataset.queries[r].text) for r in rows]
    if length == 30:
        return queries, [dataset.items[i] for i in sample_rows(len(dataset.items), n_items, seed, kind="items")]
    glosses = [document_text(it) for it in dataset.items]
    order = np.random.default_rng(seed).permutation(len(glosses))
    items, at = [], 0
    for k in range(n_items):
        words: list[str] = []
        while len(words) < length:
            words += glosses[order[at % len(order)]].split()
            at += 1
        items.append(Item(f"long{length}-{k}", "", " ".join(words)))
    return queries, items


# --------------------------------------------------------------------------------------------------
# models: folders both libraries read
# --------------------------------------------------------------------------------------------------
def _bpe_tokenizer(texts: list[str], vocab_size: int = 4000) -> Any:
    """A Qwen2 tokenizer with a byte-level BPE trained on ``texts`` (with 'yes'/'no' as tokens) and the chat
    template: the shape of Qwen's tokenization, from nothing but the bundled texts."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts + ["yes", "no"] * 200, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=CHAT_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    qwen = Qwen2Tokenizer(vocab=model["vocab"], merges=merges, model_max_length=32768)
    qwen.add_tokens(CHAT_SPECIALS[1:], special_tokens=True)
    qwen.chat_template = CHAT_TEMPLATE
    return qwen


def build_folder(name: str, mode: str, dest: Path, device: Any, texts: list[str], minilm: Any = None) -> Path:
    """Write model ``name`` as a Hugging Face folder (bf16 weights, its tokenizer) at ``dest``; returns ``dest``.

    ``minilm``: the loaded bundled [CLS]-CE (its model is saved; the tokenizer is the backbone's, without the
    mention markers the "segments" layout registers). The random-weight models are initialized on ``device`` from
    seed :data:`SEED` (fast on a GPU; a 0.5B model takes seconds on a CPU).
    """
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, Qwen2Config, Qwen2ForCausalLM

    from xenbench.models.crossencoder import bundled_backbone

    dest.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    if name == "minilm-l6":
        model, tok = minilm.model, AutoTokenizer.from_pretrained(bundled_backbone())
        if mode == "tiny":  # the dry run: its first layer only (the same code, a sixth of the CPU time)
            model = copy.deepcopy(model)
            model.bert.encoder.layer = model.bert.encoder.layer[:1]
            model.config.num_hidden_layers = 1
    elif name == "bert-base":
        tok = AutoTokenizer.from_pretrained(bundled_backbone())
        cfg = BertConfig(vocab_size=len(tok), max_position_embeddings=512, num_labels=1, **CONFIGS[mode][name])
        with torch.device(device):
            model = BertForSequenceClassification(cfg)
    elif name == "qwen-0.5b":
        tok = _bpe_tokenizer(texts, vocab_size=4000 if mode == "full" else 600)
        sizes = dict(CONFIGS[mode][name])
        vocab = sizes.pop("vocab_size") or max(tok.get_vocab().values()) + 1
        cfg = Qwen2Config(vocab_size=vocab, **sizes, max_position_embeddings=32768, tie_word_embeddings=True,
                          pad_token_id=tok.pad_token_id, use_sliding_window=False)
        with torch.device(device):
            model = Qwen2ForCausalLM(cfg)
    else:
        raise ValueError(f"unknown model {name!r}: expected one of {MODELS}")
    if name != "minilm-l6":  # bf16 on disk: half the bytes to write and read (the bundled CE's model is shared)
        model.to(torch.bfloat16)
    model.eval().save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest


# --------------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def device_clock(device: Any) -> Iterator[list[float]]:
    """Seconds of the work queued inside the block: CUDA events on a GPU (device time), ``perf_counter`` on a CPU.
    The value is appended to the yielded list on exit."""
    import torch

    out: list[float] = []
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield out
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    else:
        t = time.perf_counter()
        yield out
        out.append(time.perf_counter() - t)


def spread(rates: list[float]) -> dict[str, float]:
    """min / median / max of per-repeat rates (pairs/s)."""
    return {"min": min(rates), "median": statistics.median(rates), "max": max(rates)}


def sorted_batches(ce: Any, queries: list, items: list, device: Any, *, batch_size: int | None = None,
                   token_budget: int | None = None) -> tuple[list[dict], np.ndarray, np.ndarray]:
    """Pre-tokenized batches of every query x item pair on ``device``: length-sorted, each padded to its longest
    pair; ``batch_size`` pairs each, or as many as fit ``token_budget`` padded tokens. Returns (batches, order:
    batch position -> flat pair index, lengths of the pairs in flat order)."""
    from xenbench.models.pairs import PairAssembler

    asm = PairAssembler(ce.pairs, ce.pairs.encode_queries(queries), ce.pairs.encode_items(items), device)
    q_rows, i_rows = np.divmod(np.arange(len(queries) * len(items)), len(items))
    lens = asm.lengths(q_rows, i_rows)
    order = np.argsort(lens, kind="stable")
    bounds, s = [], 0
    while s < len(order):
        if token_budget is not None:  # sorted ascending: the batch's width is its last pair's length
            e = s + 1
            while e < len(order) and (e + 1 - s) * int(lens[order[e]]) <= token_budget:
                e += 1
        else:
            e = min(s + batch_size, len(order))
        bounds.append((s, e))
        s = e
    batches = [asm.batch(q_rows[order[s:e]], i_rows[order[s:e]], width=int(lens[order[e - 1]])) for s, e in bounds]
    return batches, order, lens


def forward_pass(fn: Callable[[dict], Any], batches: list[dict], device: Any, autocast: bool = True
                 ) -> tuple[float, Any]:
    """Device seconds of ``fn`` over every batch (bf16 autocast unless ``autocast`` is False), and the scores
    (float32, batch order, on the device)."""
    import torch

    amp = torch.autocast(device_type=device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.inference_mode(), amp, device_clock(device) as secs:
        scores = torch.cat([fn(b).float() for b in batches])
    return secs[0], scores


# --------------------------------------------------------------------------------------------------
# variants (forward only)
# --------------------------------------------------------------------------------------------------
class GraphForward:
    """``ce(batch)`` under bf16 autocast, replayed from CUDA graphs, one per batch shape (captured on first sight,
    in the untimed warm-up): the launches of a whole forward become one, which is what a small model at short
    lengths waits on. Called outside autocast: it captures under its own, without autocast's weight cache (which
    a graph cannot hold, torch.cuda.graphs' notes)."""

    def __init__(self, ce: Any) -> None:
        self.ce, self.graphs = ce, {}

    def __call__(self, batch: dict) -> Any:
        import torch

        key = tuple(batch["input_ids"].shape)
        if key not in self.graphs:
            static = {k: v.clone() for k, v in batch.items()}
            amp = functools.partial(torch.autocast, "cuda", dtype=torch.bfloat16, cache_enabled=False)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), amp():  # warm-up on a side stream, as torch.cuda.graphs asks
                for _ in range(2):
                    self.ce(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph), amp():
                out = self.ce(static)
            self.graphs[key] = (graph, static, out)
        graph, static, out = self.graphs[key]
        for k, v in batch.items():
            static[k].copy_(v)
        graph.replay()
        return out.clone()


def variant_forward(name: str, ce: Any, device: Any) -> tuple[Callable[[dict], Any], bool, dict]:
    """(forward function, autocast?, batching) of variant ``name``; raises ``NotImplementedError`` naming why a
    variant cannot run here (CUDA graphs and ``torch.compile`` are not tried on a CPU: compiling takes minutes
    there, and graphs are CUDA's).

    * ``bf16-weights``: a bf16 copy of the model, no autocast (no casts per op, half the weight bytes);
    * ``batch x4``: batches of 4x the pairs;
    * ``token budget``: batches of up to :data:`TOKEN_BUDGET` padded tokens (more pairs when they are short);
    * ``cuda graphs``: :class:`GraphForward` (bf16 autocast inside the graphs);
    * ``compile``: ``torch.compile(ce, dynamic=False)`` (one graph per batch shape, compiled in the warm-up);
    * ``packed``: :func:`xenbench.models.packed.packed_forward`, with ``varlen_attn`` on CUDA (re-padded SDPA on a
      CPU): no FLOPs on pads.
    """
    import torch

    from xenbench.models import packed

    if name == "bf16-weights":
        low = copy.deepcopy(ce).to(torch.bfloat16)
        return low, False, {}
    if name == "batch x4":
        return ce, True, {"factor": 4}
    if name == "token budget":
        return ce, True, {"token_budget": TOKEN_BUDGET}
    if name == "cuda graphs":
        if device.type != "cuda":
            raise NotImplementedError("needs CUDA")
        return GraphForward(ce), False, {}
    if name == "compile":
        if device.type != "cuda":
            raise NotImplementedError("not tried on a CPU (compiling takes minutes there)")
        return torch.compile(ce, dynamic=False), True, {}
    if name == "packed":
        if not packed.supports(ce):
            raise NotImplementedError(f"packed_forward does not support {type(ce.model).__name__}")
        return functools.partial(packed.packed_forward, ce, attention="auto"), True, {}
    raise ValueError(f"unknown variant {name!r}: expected one of {VARIANTS}")


# --------------------------------------------------------------------------------------------------
# the sections
# --------------------------------------------------------------------------------------------------
def _mark_not_run(cells: dict, todo: list, err: BaseException) -> None:
    """The cells a section left when ``err`` stopped it (its time box, an interrupt), recorded as not run and why."""
    for m, n in todo:
        cells.setdefault(cell_key(m, n), {"model": m, "length": n, "status": f"not run: {err}"[:300]})


def cell_key(model: str, length: int) -> str:
    return f"{model}@{length}"


def n_pairs_for(config: Any, length: int, lo: int, hi: int, flop_target: float = 48e12) -> int:
    """Pairs of a cell: about ``flop_target`` FLOPs per pass (a few tenths of a second on an H200 at a third of its
    GEMM rate), a power of two within [lo, hi]."""
    want = flop_target / flops_per_pair(config, np.array([length]))
    return int(min(max(2 ** round(np.log2(max(want, 1.0))), lo), hi))


def speed_model(ctx: Any, name: str) -> tuple[Any, Path]:
    """(our CE on the device, its folder) of model ``name``, built once per run (:func:`build_folder`)."""
    if name not in ctx.speed_models:
        from xenbench.models.loading import load_cross_encoder

        ctx.backbone()  # with a payload: the rebuilt backbone (its tokenizer is BERT-base's) as $XENBENCH_BACKBONE

        texts = [q.text for q in ctx.dataset.queries] + [f"{it.title} {it.text}" for it in ctx.dataset.items]
        minilm = ctx.ce("cls-ce") if name == "minilm-l6" else None
        folder = build_folder(name, ctx.mode, Path(ctx._tmp.name) / "speed" / name, ctx.device, texts, minilm)
        ce = load_cross_encoder(folder).to(ctx.device).eval()
        ctx.speed_models[name] = (ce, folder)
    return ctx.speed_models[name]


def with_max_length(ce: Any, max_length: int | None) -> Any:
    """The same model and tokenizer with pairs cut to ``max_length`` tokens (None: as loaded)."""
    import dataclasses

    from xenbench.models.crossencoder import CrossEncoder

    if max_length is None:
        return ce
    out = CrossEncoder(ce.model, ce.pairs.tokenizer, dataclasses.replace(ce.config, max_length=max_length))
    out.name = ce.name
    return out


def _unsort(sorted_scores: Any, order: np.ndarray) -> np.ndarray:
    flat = np.empty(len(order), dtype=np.float32)
    flat[order] = sorted_scores.float().cpu().numpy()
    return flat


def _diff(a: np.ndarray, b: np.ndarray, std: float) -> dict[str, float]:
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return {"mean_over_std": float(d.mean()) / std, "max_over_std": float(d.max()) / std, "std": std}


def _share(rate: float, flops: float, gemm: float | None) -> float | None:
    return None if not gemm else rate * flops / gemm


def sizes_and_lengths(report: Any, ctx: Any, box: Any) -> None:
    """Section ``sizes and lengths``: every (model, length) cell, forward only, end to end, sentence-transformers
    under autocast and in bf16 (see the module docstring)."""
    import torch

    detail = report.doc["detail"].setdefault("speed", {})
    cells = detail.setdefault("cells", {})
    todo = [(m, n) for m in MODELS for n in LENGTHS]
    try:
        for model in MODELS:
            box.check(f"building {model}")
            try:
                ce, folder = speed_model(ctx, model)
            except SectionTimeout:
                raise
            except Exception as err:  # noqa: BLE001 - the other models still run
                log.exception("building %s failed", model)
                for n in LENGTHS:
                    cells[cell_key(model, n)] = {"model": model, "length": n,
                                                 "status": f"error building it: {_error(err)}"}
                    todo.remove((model, n))
                continue
            detail.setdefault("models", {})[model] = {
                "architecture": type(ce.model).__name__, "layout": ce.config.layout,
                "parameters": int(sum(p.numel() for p in ce.model.parameters())),
                **{k: getattr(ce.model.config, k, None) for k in ("hidden_size", "num_hidden_layers",
                                                                 "num_attention_heads", "intermediate_size")}}
            st, why = _st_models(ctx, folder)
            if why:
                detail.setdefault("models", {})[model]["sentence_transformers"] = why
            for length in LENGTHS:
                box.check(f"{cell_name(model, length)}")
                try:
                    c = cells[cell_key(model, length)] = _measure_cell(ctx, box, model, length, ce, st)
                    log.info("   %-24s %s", cell_name(model, length), "; ".join(
                        f"{k} {m['pairs_per_s']['median']:,.0f}/s" + (f" ({m['share_of_bf16_gemm']:.1%})" if
                                                                      m["share_of_bf16_gemm"] is not None else "")
                        for k, m in c["measures"].items()))
                    if c["status"] == "ok":
                        report.doc["rows"].append(_cell_row(c))
                except SectionTimeout:
                    raise
                except Exception as err:  # noqa: BLE001 - the other cells still run
                    log.exception("%s failed", cell_name(model, length))
                    cells[cell_key(model, length)] = {"model": model, "length": length,
                                                      "status": f"error: {_error(err)}"}
                todo.remove((model, length))
                report.save()
            del st
            if ctx.cuda:
                torch.cuda.empty_cache()
    except BaseException as err:
        _mark_not_run(cells, todo, err)
        raise


def _cell_row(c: dict) -> dict:
    """The benchmark table's row of a measured cell: the scorer end to end against sentence-transformers' faster
    loading, with the forward alone and each one's share of the GEMM rate in its description."""
    st_best = max(("st autocast", "st bf16"), key=lambda k: c["measures"][k]["pairs_per_s"]["median"])
    e2e, theirs, fwd = (c["measures"][k] for k in ("end to end", st_best, "forward only"))

    def pct(m: dict) -> str:
        return "" if m["share_of_bf16_gemm"] is None else f" ({m['share_of_bf16_gemm']:.1%} of the GEMM rate)"

    reuse = "; the scorer reuses each query's prompt prefix, shares at whole-pair FLOPs" if c["prefix_reuse"] else ""
    return {"comparison": f"{cell_name(c['model'], c['length'])}: scorer end to end vs sentence-transformers "
                          f"({st_best.split()[1]}), bf16",
            "metric": "pairs/s", "ours": e2e["pairs_per_s"]["median"], "baseline": theirs["pairs_per_s"]["median"],
            "ratio": e2e["pairs_per_s"]["median"] / theirs["pairs_per_s"]["median"], "higher_is_better": True,
            "at": f"{c['n_pairs']:,} pairs, mean {c['mean_tokens']:.1f} tokens, batch {c['batch_size']}, "
                  f"{c['flops_per_pair'] / 1e9:.3g} GFLOP/pair, median of {c['repeats']}; ours{pct(e2e)}, "
                  f"theirs{pct(theirs)}; forward only {fwd['pairs_per_s']['median']:,.0f} pairs/s{pct(fwd)}{reuse}"}


def _error(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:300]


def _st_models(ctx: Any, folder: Path) -> tuple[dict[str, Any], str]:
    """sentence-transformers CrossEncoders of ``folder``: fp32 weights (run under autocast) and bf16 weights; and
    why there are none (not installed, or it cannot load the folder), else ""."""
    import importlib.util

    import torch

    if importlib.util.find_spec("sentence_transformers") is None:
        return {}, "not installed"
    from sentence_transformers import CrossEncoder as STCrossEncoder

    def load(dtype: Any) -> Any:
        return STCrossEncoder(str(folder), activation_fn=torch.nn.Identity(), device=str(ctx.device),
                              local_files_only=True, model_kwargs={"torch_dtype": dtype})

    try:
        return {"st autocast": load(torch.float32), "st bf16": load(torch.bfloat16)}, ""
    except Exception as err:  # noqa: BLE001 - ours is still measured
        log.exception("sentence-transformers cannot load %s", folder)
        return {}, f"cannot load it: {_error(err)}"


def _measure_cell(ctx: Any, box: Any, model: str, length: int, ce_loaded: Any, st: dict[str, Any]) -> dict:
    import torch

    from xenbench.models.pairs import document_text
    from xenbench.models.scoring import score_matrix

    sz = ctx.sizes
    ce = with_max_length(ce_loaded, None if length == 30 else length)
    n_items = sz.speed_items
    n_pairs = n_pairs_for(ce.model.config, length, *sz.speed_pairs)
    queries, items = pair_set(ctx.dataset, length, max(n_pairs // n_items, 1), n_items)
    batches, order, lens = sorted_batches(ce, queries, items, ctx.device, batch_size=sz.batch_size)
    n = len(queries) * len(items)
    flops = flops_per_pair(ce.model.config, lens)
    texts = [(q.text, document_text(it)) for q in queries for it in items]
    for m in st.values():
        m.max_length = length if length != 30 else ce_loaded.config.max_length
    amp = functools.partial(torch.autocast, device_type=ctx.device.type, dtype=torch.bfloat16)

    def forward() -> tuple[float, np.ndarray]:
        secs, s = forward_pass(ce, batches, ctx.device)
        return secs, _unsort(s, order)

    def end_to_end() -> tuple[float, np.ndarray]:
        ctx.sync()
        t = time.perf_counter()
        s = score_matrix(ce, queries, items, batch_size=sz.batch_size, device=ctx.device, precision="bf16",
                         progress=False).scores
        return time.perf_counter() - t, s.reshape(-1)

    def theirs(key: str) -> Callable[[], tuple[float, np.ndarray]]:
        def run() -> tuple[float, np.ndarray]:
            ctx.sync()
            t = time.perf_counter()
            with amp(enabled=key == "st autocast"):
                s = st[key].predict(texts, batch_size=sz.batch_size, show_progress_bar=False, convert_to_numpy=True)
            ctx.sync()
            return time.perf_counter() - t, np.asarray(s, dtype=np.float32).reshape(-1)
        return run

    fns = {"forward only": forward, "end to end": end_to_end, **{k: theirs(k) for k in st}}
    runs: dict[str, list[float]] = {k: [] for k in fns}
    scores: dict[str, np.ndarray] = {}
    for key, fn in fns.items():  # warm-up: allocations, kernel plans, lazy imports
        box.check(f"warming up {key} of {cell_name(model, length)}")
        fn()
    for r in range(sz.repeats):
        for key in (list(fns) if r % 2 == 0 else list(reversed(fns))):
            box.check(f"repeat {r + 1} of {key} of {cell_name(model, length)}")
            secs, scores[key] = fns[key]()
            runs[key].append(n / secs)
    gemm = ctx.gemm.get("bf16")
    std = float(scores["forward only"].std()) or 1.0
    measures = {k: {"pairs_per_s": spread(v), "runs": v,
                    "share_of_bf16_gemm": _share(statistics.median(v), flops, gemm)} for k, v in runs.items()}
    for k in st:
        measures[k]["vs_end_to_end"] = _diff(scores[k], scores["end to end"], std)
    measures["end to end"]["vs_forward_only"] = _diff(scores["end to end"], scores["forward only"], std)
    return {"model": model, "length": length, "status": "ok" if st else "ok (no sentence-transformers)",
            "n_pairs": n, "queries": len(queries), "items": len(items), "mean_tokens": float(lens.mean()),
            "max_tokens": int(lens.max()), "flops_per_pair": flops, "batch_size": sz.batch_size,
            "repeats": sz.repeats, "device": str(ctx.device), "prefix_reuse": bool(ce.reuses_prefix),
            "measures": measures}


def scorer_variants(report: Any, ctx: Any, box: Any) -> None:
    """Section ``scorer variants``: each of :data:`VARIANTS` against the padded forward, forward only, on the cells
    of :data:`VARIANT_CELLS` in order (``sizes.variant_cells`` of them) while the box lasts."""
    import torch

    detail = report.doc["detail"].setdefault("speed", {})
    out = detail.setdefault("variants", {})
    todo = list(VARIANT_CELLS[: ctx.sizes.variant_cells])
    for m, n in VARIANT_CELLS[ctx.sizes.variant_cells:]:
        out[cell_key(m, n)] = {"model": m, "length": n,
                               "status": f"not run: this mode tries the first {ctx.sizes.variant_cells} cells"}
    try:
        while todo:
            model, length = todo[0]
            box.check(f"variants on {cell_name(model, length)}")
            c = out[cell_key(model, length)] = _variants_of_cell(report, ctx, box, model, length)
            log.info("   %-24s padded %s/s; %s; best %s", cell_name(model, length),
                     f"{c['padded']['pairs_per_s']['median']:,.0f}", "; ".join(
                         f"{k} {v['vs_padded_median']:.2f}x" if v.get("status") == "ok" else f"{k} {v.get('status')}"
                         for k, v in c["variants"].items()), c["best"])
            todo.pop(0)
            report.save()
            if ctx.cuda:
                torch.cuda.empty_cache()
    except BaseException as err:
        _mark_not_run(out, todo, err)
        raise


def _variants_of_cell(report: Any, ctx: Any, box: Any, model: str, length: int) -> dict:
    import torch

    sz = ctx.sizes
    ce_loaded, _ = speed_model(ctx, model)
    ce = with_max_length(ce_loaded, None if length == 30 else length)
    n_pairs = n_pairs_for(ce.model.config, length, *sz.speed_pairs)
    queries, items = pair_set(ctx.dataset, length, max(n_pairs // sz.speed_items, 1), sz.speed_items)
    batches, order, lens = sorted_batches(ce, queries, items, ctx.device, batch_size=sz.batch_size)
    n = len(order)
    flops = flops_per_pair(ce.model.config, lens)
    gemm = ctx.gemm.get("bf16")
    cell = {"model": model, "length": length, "status": "ok", "n_pairs": n, "mean_tokens": float(lens.mean()),
            "flops_per_pair": flops, "batch_size": sz.batch_size, "repeats": sz.repeats, "variants": {}}

    def timed(fn: Callable, vb: list[dict], order_v: np.ndarray, autocast: bool) -> tuple[list[float], np.ndarray]:
        forward_pass(fn, vb, ctx.device, autocast)  # warm-up: compiles, captures graphs, plans kernels
        rates, flat = [], None
        for r in range(sz.repeats):
            box.check(f"repeat {r + 1} on {cell_name(model, length)}")
            secs, s = forward_pass(fn, vb, ctx.device, autocast)
            rates.append(n / secs)
            flat = _unsort(s, order_v)
        return rates, flat

    base_rates, base = timed(ce, batches, order, True)
    std = float(base.std()) or 1.0
    cell["padded"] = {"pairs_per_s": spread(base_rates), "runs": base_rates,
                      "share_of_bf16_gemm": _share(statistics.median(base_rates), flops, gemm)}
    for name in VARIANTS:
        box.check(f"{name} on {cell_name(model, length)}")
        entry: dict[str, Any] = {}
        cell["variants"][name] = entry
        try:
            if name == "compile" and length == 30:
                raise NotImplementedError("pair lengths vary at ~30 tokens: one compile per batch width")
            if name == "compile" and box.left() < sz.compile_min_s:
                raise NotImplementedError(f"less than {sz.compile_min_s:.0f} s left in the box for compiling")
            fn, autocast, batching = variant_forward(name, ce, ctx.device)
            vb, vo = batches, order
            if batching:
                vb, vo, _ = sorted_batches(ce, queries, items, ctx.device, token_budget=batching.get("token_budget"),
                                           batch_size=sz.batch_size * batching.get("factor", 1))
            rates, flat = timed(fn, vb, vo, autocast)
            entry.update(status="ok", pairs_per_s=spread(rates), runs=rates, batches=len(vb),
                         share_of_bf16_gemm=_share(statistics.median(rates), flops, gemm),
                         vs_padded_median=statistics.median(rates) / statistics.median(base_rates),
                         vs_padded=_diff(flat, base, std))
            if name == "packed":
                from xenbench.models.packed import varlen_available

                entry["attention"] = "varlen_attn" if varlen_available(ctx.device, torch.bfloat16) else "re-padded SDPA"
        except NotImplementedError as why:
            entry.update(status=f"skipped: {why}")
        except SectionTimeout:
            raise
        except Exception as err:  # noqa: BLE001 - a variant that fails here is reported, the others still run
            log.exception("variant %s failed on %s", name, cell_name(model, length))
            entry.update(status=f"error: {_error(err)}")
        finally:
            fn = None  # noqa: F841 - drop a bf16 copy, compiled graphs or CUDA graphs before the next variant
            if name == "compile" and ctx.cuda:
                torch._dynamo.reset()
    ok = {k: v for k, v in cell["variants"].items() if v.get("status") == "ok"}
    best = max(ok, key=lambda k: ok[k]["pairs_per_s"]["median"], default=None)
    cell["best"] = best if best and ok[best]["vs_padded_median"] > 1 else "padded"
    return cell
