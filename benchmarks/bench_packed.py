"""Benchmark: padding-free :func:`xenbench.models.packed.packed_forward` vs the padded ``ce(batch)`` on the scorer's batches.

Both score the same (query, item) pairs of a WordNet-EL domain, all n_queries x n_items of them, cut into the
batches the scorer builds (``PairAssembler``; pairs sorted by length, each batch padded to its longest pair),
assembled once on the device before timing. Per CE, one pass = every batch through one path; passes alternate
padded/packed (the order flips each repeat) because the machine may be shared, and medians (plus the fastest
pass) are reported. Also reported: the share of padded positions in those batches (what packing can save in
the token-wise ops), the max |packed - padded| score difference and, for low precision, that difference in
score standard deviations.

``--query-pad-to N`` pads each query segment to N tokens (the ZESHEL layout; same weights), where packing
saves the most. ``--precision bf16|fp16`` runs both paths under autocast; on CUDA the packed path then uses
PyTorch's variable-length flash attention (fp32 uses re-padded SDPA on either device).

Run::

    .venv/bin/python benchmarks/bench_packed.py --n-queries 8 --n-items 64 --repeats 5
    .venv/bin/python benchmarks/bench_packed.py --device cuda --precision bf16 --n-queries 200 --n-items 500
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_all (the fragment format)

from run_all import command_line, interleaved, write_fragment

from xenbench.data.beir import load_beir
from xenbench.models.crossencoder import CrossEncoder
from xenbench.models.loading import load_cross_encoder
from xenbench.models.pairs import PairAssembler
from xenbench.models.packed import packed_forward, varlen_available

log = logging.getLogger("bench_packed")
REPO = Path(__file__).resolve().parent.parent
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_BATCH_SIZE = {"cpu": 64, "cuda": 1024}  # the scorer's defaults (pairs per length-sorted batch)



def load_ce(path: str, query_pad_to: int | None) -> Any:
    ce = load_cross_encoder(REPO / path if not Path(path).is_absolute() else path)
    if query_pad_to:  # same weights, query segment padded: item positions start at query_pad_to
        fmt = dataclasses.replace(ce.config.input_format, query_pad_to=query_pad_to)
        ce = CrossEncoder(ce.model, ce.pairs.tokenizer, dataclasses.replace(ce.config, input_format=fmt))
    return ce.eval()


def scorer_batches(ce: Any, queries: list, items: list, batch_size: int, device: torch.device
                   ) -> list[dict[str, torch.Tensor]]:
    """Every query x item pair, batched as the scorer does: sorted by length, each padded to its longest pair."""
    asm = PairAssembler(ce.pairs, ce.pairs.encode_queries(queries), ce.pairs.encode_items(items), device)
    q_rows, i_rows = (a.reshape(-1) for a in np.meshgrid(np.arange(len(queries)), np.arange(len(items)),
                                                          indexing="ij"))
    lens = asm.lengths(q_rows, i_rows)
    order = np.argsort(lens, kind="stable")
    out = []
    for s in range(0, len(order), batch_size):
        rows = order[s:s + batch_size]
        out.append(asm.batch(q_rows[rows], i_rows[rows], width=int(lens[rows[-1]])))
    return out


def timed_pass(fn: Any, batches: list[dict[str, torch.Tensor]], device: torch.device, precision: str
               ) -> tuple[float, torch.Tensor]:
    """Seconds to score every batch with ``fn`` (device work included), and the scores (float32)."""
    autocast = (torch.autocast(device_type=device.type, dtype=AUTOCAST[precision]) if precision in AUTOCAST
                else contextlib.nullcontext())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    with torch.inference_mode(), autocast:
        scores = [fn(b).float() for b in batches]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t, torch.cat(scores).cpu()


def bench_one(path: str, args: argparse.Namespace, queries: list, items: list, device: torch.device) -> dict:
    ce = load_ce(path, args.query_pad_to).to(device)
    batch_size = args.batch_size or DEFAULT_BATCH_SIZE.get(device.type, 64)
    batches = scorer_batches(ce, queries, items, batch_size, device)
    n = sum(b["input_ids"].shape[0] for b in batches)
    positions = sum(b["attention_mask"].numel() for b in batches)
    attended = sum(int(b["attention_mask"].sum()) for b in batches)
    paths = {"padded": ce, "packed": lambda b: packed_forward(ce, b)}
    for fn in paths.values():  # warm-up: allocator, kernel selection, lazy imports
        timed_pass(fn, batches[:2], device, args.precision)
    runs, scores = interleaved({name: functools.partial(timed_pass, fn, batches, device, args.precision)
                                for name, fn in paths.items()}, args.repeats, n)
    med = {k: statistics.median(v) for k, v in runs.items()}
    diff = float((scores["packed"] - scores["padded"]).abs().max())
    act_dtype = AUTOCAST.get(args.precision, torch.float32)
    return {
        "ce": path,
        "kind": ce.config.kind,
        "n_pairs": n,
        "n_batches": len(batches),
        "batch_size": batch_size,
        "query_pad_to": args.query_pad_to,
        "mean_pair_tokens": attended / n,
        "padded_token_share": 1 - attended / positions,
        "packed_attention": "varlen_attn" if varlen_available(device, act_dtype) else "re-padded SDPA",
        "padded_pairs_per_s": {"median": med["padded"], "best": max(runs["padded"])},
        "packed_pairs_per_s": {"median": med["packed"], "best": max(runs["packed"])},
        "speedup": {"median": med["packed"] / med["padded"], "best": max(runs["packed"]) / max(runs["padded"]),
                    "per_repeat": [a / b for a, b in zip(runs["packed"], runs["padded"], strict=True)]},
        "max_abs_diff": diff,
        "max_diff_over_score_std": diff / float(scores["padded"].std()),
        "all_runs": runs,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ce", nargs="+", default=["models/cls-ce", "models/emb-ce"], help="CE folders")
    p.add_argument("--domain", default="noun.cognition")
    p.add_argument("--n-queries", type=int, default=8)
    p.add_argument("--n-items", type=int, default=64)
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"], help="autocast for both paths")
    p.add_argument("--batch-size", type=int, default=None, help="pairs per batch (default: the scorer's, by device)")
    p.add_argument("--query-pad-to", type=int, default=None, help="pad each query segment to this many tokens")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--json", type=Path, default=None, help="also write the benchmark-table fragment here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    ds = load_beir(REPO / "data" / "wordnet-el" / args.domain)
    queries, items = list(ds.queries)[: args.n_queries], list(ds.items)[: args.n_items]
    result = {
        "command": command_line(__file__, None),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "threads": torch.get_num_threads(),
        "precision": args.precision,
        "domain": args.domain,
        "repeats": args.repeats,
        "per_ce": [bench_one(path, args, queries, items, device) for path in args.ce],
    }
    log.info(json.dumps(result, indent=2))
    if args.json:
        write_fragment(args.json, fragment(result))
    return result


def fragment(r: dict) -> dict:
    """The benchmark table's rows (schema of benchmarks/run_all.py), one per CE; the measurement under "detail"."""
    rows = []
    for c in r["per_ce"]:
        pad = f", query padded to {c['query_pad_to']}" if c["query_pad_to"] else ""
        rows.append({
            "comparison": f"packed_forward vs padded ce(batch), {c['kind']}-CE {r['precision']}",
            "metric": "pairs/s", "ours": c["packed_pairs_per_s"]["median"],
            "baseline": c["padded_pairs_per_s"]["median"], "ratio": c["speedup"]["median"], "higher_is_better": True,
            "at": (f"{c['n_pairs']} WordNet-EL pairs ({r['domain']}{pad}), scorer batches of {c['batch_size']}, "
                   f"mean {c['mean_pair_tokens']:.1f} tokens, {c['padded_token_share']:.0%} of positions padding, "
                   f"{r['threads']} threads, {r['device']}, attention {c['packed_attention']}, median of "
                   f"{r['repeats']} interleaved runs; max |diff| {c['max_abs_diff']:.1e}"),
        })
    return {
        "benchmark": "bench_packed",
        "title": "Padding-free packed forward against the padded forward (same CE, same length-bucketed batches)",
        "command": command_line(__file__, None),
        "rows": rows,
        "notes": [("Packing removes the padded positions from every token-wise op (embeddings, projections, FFN, "
                   "LayerNorm); attention runs per pair. Length bucketing already leaves little padding, so the "
                   "gain grows with the padded share (e.g. --query-pad-to, or unsorted batches).")],
        "detail": r,
    }


if __name__ == "__main__":
    main()
