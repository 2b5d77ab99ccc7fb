"""Benchmark: does ``torch.compile`` pay for itself on a score matrix? Eager ``ce(batch)`` against
``torch.compile(ce, dynamic=True)`` on the scorer's batches.

Both score the same n_queries x n_items WordNet-EL pairs in the scorer's length-sorted batches (see
``bench_packed.scorer_batches``). The first compiled pass, which includes compilation, is timed on its own;
then the two paths alternate (the order flips each repeat) and medians are reported. From the compile time
and the per-pair saving follows the matrix size at which compiling breaks even.

Run::

    .venv/bin/python benchmarks/bench_compile.py --n-queries 10 --n-items 50 --repeats 3
"""
from __future__ import annotations

import argparse
import atexit
import functools
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

# A cold compile, as on a fresh machine: inductor's on-disk caches would hide most of the compile time.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="bench_compile_")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_packed import REPO, load_ce, scorer_batches, timed_pass  # noqa: E402
from run_all import command_line, interleaved, write_fragment  # noqa: E402

from xenbench.data.beir import load_beir  # noqa: E402

log = logging.getLogger("bench_compile")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ce", default="models/cls-ce", help="CE folder")
    p.add_argument("--domain", default="noun.cognition")
    p.add_argument("--n-queries", type=int, default=10)
    p.add_argument("--n-items", type=int, default=50)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=64, help="pairs per length-sorted batch (the scorer's CPU default)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the benchmark-table fragment here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    device = torch.device(args.device)
    ds = load_beir(REPO / "data" / "wordnet-el" / args.domain)
    ce = load_ce(args.ce, None).to(device)
    batches = scorer_batches(ce, list(ds.queries)[: args.n_queries], list(ds.items)[: args.n_items],
                             args.batch_size, device)
    n = sum(b["input_ids"].shape[0] for b in batches)
    compiled = torch.compile(ce, dynamic=True)
    timed_pass(ce, batches[:2], device, "fp32")  # eager warm-up
    compile_s, _ = timed_pass(compiled, batches, device, "fp32")  # compiles (every new shape class) and runs
    runs, scores = interleaved({name: functools.partial(timed_pass, fn, batches, device, "fp32")
                                for name, fn in (("eager", ce), ("compiled", compiled))}, args.repeats, n)
    med = {k: statistics.median(v) for k, v in runs.items()}
    saved_per_pair = 1 / med["eager"] - 1 / med["compiled"]
    result = {
        "command": command_line(__file__, None), "device": str(device), "threads": torch.get_num_threads(), "ce": args.ce,
        "n_pairs": n, "batch_size": args.batch_size, "repeats": args.repeats,
        "first_compiled_pass_s": compile_s,
        "eager_pairs_per_s": med["eager"], "compiled_pairs_per_s": med["compiled"],
        "speedup": med["compiled"] / med["eager"],
        "break_even_pairs": compile_s / saved_per_pair if saved_per_pair > 0 else None,
        "max_abs_diff": float((scores["compiled"] - scores["eager"]).abs().max()),
        "all_runs": runs,
    }
    log.info(json.dumps(result, indent=2))
    if args.json:
        write_fragment(args.json, fragment(result))
    return result


def fragment(r: dict) -> dict:
    """The benchmark table's row (schema of benchmarks/run_all.py); the measurement under "detail"."""
    even = (f"compiling breaks even after about {r['break_even_pairs']:,.0f} pairs" if r["break_even_pairs"]
            else "compiling never breaks even")
    return {
        "benchmark": "bench_compile",
        "title": "torch.compile against eager on the scorer's batches (same CE, same batches)",
        "command": command_line(__file__, None),
        "rows": [{
            "comparison": "torch.compile(ce, dynamic=True) vs eager ce(batch), fp32", "metric": "pairs/s",
            "ours": r["compiled_pairs_per_s"], "baseline": r["eager_pairs_per_s"], "ratio": r["speedup"],
            "higher_is_better": True,
            "at": (f"{r['n_pairs']} WordNet-EL pairs, scorer batches of {r['batch_size']}, {r['threads']} threads, "
                   f"{r['device']}, median of {r['repeats']} interleaved runs after a first compiled pass of "
                   f"{r['first_compiled_pass_s']:.1f} s; max |diff| {r['max_abs_diff']:.1e}"),
        }],
        "notes": [f"The first compiled pass (compilation included) took {r['first_compiled_pass_s']:.1f} s; {even} "
                  f"(one query x item matrix of noun.cognition is about 3 million pairs)."],
        "detail": r,
    }


if __name__ == "__main__":
    main()
