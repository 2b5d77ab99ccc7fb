"""Per-query reference vs batched torch ADACUR on the same configuration, side by side.

Times both implementations of :class:`xenbench.methods.adacur.AdaCur` on one score matrix, at one thread
and at the libraries' default thread count (best of ``--repeat`` runs each), and prints the wall
times, their ratios (target: batched ≥ 20× faster on CPU), the Fig. 4 breakdown (CE calls / pinv /
matmul / sampling), Top-k-Recall of both, and checks that anchors, ranked lists and recall agree.
Exits with status 1 if they do not.

Usage::

    python benchmarks/bench_adacur.py                       # synthetic 500 test x 3000 items
    python benchmarks/bench_adacur.py --matrix scores.npy   # a real (n_queries, n_items) CE matrix
    python benchmarks/bench_adacur.py --sampler softmax --n-anchor-items 50 --device cuda
    python benchmarks/bench_adacur.py ... --json reports/bench/bench_adacur.json   # also a benchmark fragment

The fragment (schema of ``benchmarks/run_all.py``): ours = batched, baseline = reference, ratio = reference /
batched wall time, one row for each at its fastest thread setting and one per thread setting.

The synthetic matrix is low rank plus noise (rank 40, noise 0.1, like an [EMB]-CE matrix whose
numerical rank is small; ANNCUR §3.3). The headline ratio compares each implementation at its own
fastest setting: the reference does thousands of small SVDs, for which multi-threaded BLAS is slower,
while the batched code's large GEMMs use every core.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_all (the fragment format)

from xenbench.methods.adacur import AdaCur, AdaCurResult, SearchOptions  # noqa: E402
from xenbench.metrics import BudgetCounter, topk_recall  # noqa: E402


def synthetic_matrix(n_queries: int, n_items: int, rank: int, noise: float, seed: int) -> np.ndarray:
    """Low-rank-plus-noise score matrix, shape (n_queries, n_items), float32."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n_queries, rank)) @ rng.standard_normal((rank, n_items)) / np.sqrt(rank)
    return (M + noise * rng.standard_normal((n_queries, n_items))).astype(np.float32)


def split_queries(M: np.ndarray, n_anchor_queries: int, n_test: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random split of the rows into R_anc (k_q anchor queries) and test queries."""
    order = np.random.default_rng(seed).permutation(M.shape[0])
    test = order[n_anchor_queries:] if n_test is None else order[n_anchor_queries:n_anchor_queries + n_test]
    return M[order[:n_anchor_queries]], M[test]


def thread_limit(threads: int) -> contextlib.AbstractContextManager:
    """Limit torch and BLAS threads to ``threads`` (0 = the libraries' defaults); restored on exit."""
    if threads <= 0:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    stack.callback(torch.set_num_threads, before)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return stack
    stack.enter_context(threadpool_limits(threads))
    return stack


def best_run(ada: AdaCur, T: np.ndarray, budget: int, repeat: int) -> tuple[AdaCurResult, float, np.ndarray]:
    """Fastest of ``repeat`` runs on all test queries (timeit's convention: noise only adds time)."""
    ada.run(T[:4])  # warm-up: lazy imports, CUDA context, allocator
    best = None
    for _ in range(repeat):
        counter = BudgetCounter(T, budget=budget)
        t0 = time.perf_counter()
        result = ada.run(counter)
        if ada.options.implementation == "batched" and str(ada._torch_device()).startswith("cuda"):
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        if best is None or elapsed < best[1]:
            best = (result, elapsed, counter.calls)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--matrix", type=Path, help="exact score matrix: a .npy of shape (n_queries, n_items) or a ScoreStore folder")
    p.add_argument("--n-items", type=int, default=3000, help="synthetic: number of items")
    p.add_argument("--n-test", type=int, default=500, help="test queries (default 500)")
    p.add_argument("--n-anchor-queries", type=int, default=500, help="k_q, anchor queries (default 500)")
    p.add_argument("--rank", type=int, default=40, help="synthetic: rank")
    p.add_argument("--noise", type=float, default=0.1, help="synthetic: noise level")
    p.add_argument("--budget", type=int, default=100, help="B_CE (default 100)")
    p.add_argument("--n-anchor-items", type=int, default=None, help="k_i; default None = No-Split")
    p.add_argument("--rounds", type=int, default=5, help="N_r (default 5)")
    p.add_argument("--sampler", default="topk", help="topk | softmax | random | oracle_topk | oracle_softmax")
    p.add_argument("--device", default="cpu", help="device of the batched implementation (default cpu)")
    p.add_argument("--solver", default="gram", help="batched solver: gram | pinv")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 0],
                   help="torch/BLAS thread settings to time both at (0 = library defaults; default: 1 0)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per setting; the fastest counts (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, nargs="+", default=[1, 10, 100])
    p.add_argument("--json", type=Path, default=None, help="write a benchmark fragment (benchmarks/run_all.py)")
    args = p.parse_args(argv)

    if args.matrix is not None:
        if Path(args.matrix).is_dir():  # a ScoreStore folder, e.g. data/scores/noun.cognition/cls-ce
            from xenbench.data.store import ScoreStore

            M = ScoreStore.open(args.matrix).to_numpy()
        else:
            M = np.load(args.matrix, mmap_mode="r")
        source = f"{args.matrix} {M.shape}"
        M = np.asarray(M, dtype=np.float32)
    else:
        M = synthetic_matrix(args.n_anchor_queries + args.n_test, args.n_items, args.rank, args.noise, args.seed)
        source = f"synthetic rank {args.rank} + noise {args.noise}"
    R_anc, T = split_queries(M, args.n_anchor_queries, args.n_test, args.seed)
    ks = [k for k in args.k if k <= args.budget]
    params = dict(n_anchor_items=args.n_anchor_items, n_rounds=args.rounds, sampler=args.sampler, seed=args.seed)
    variant = "No-Split" if args.n_anchor_items in (None, args.budget) else f"split k_i={args.n_anchor_items}"
    print(f"matrix: {source}; k_q={R_anc.shape[0]} anchor queries, {T.shape[0]} test queries x {T.shape[1]} items")
    print(f"ADACUR {variant}, sampler={args.sampler}, N_r={args.rounds}, B_CE={args.budget}, seed={args.seed}, "
          f"torch {torch.__version__}, best of {args.repeat} runs per setting")

    reference = AdaCur(args.budget, options=SearchOptions(implementation="reference"), **params).fit(R_anc)
    batched = AdaCur(args.budget, options=SearchOptions(implementation="batched", device=args.device, solver=args.solver),
                     **params).fit(R_anc)
    runs = {}  # (implementation, threads) -> (result, seconds, calls)
    for threads in args.threads:
        with thread_limit(threads):
            label = f"{torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''}"
            label += " (default)" if threads <= 0 else ""
            for name, ada in (("reference", reference), ("batched", batched)):
                runs[name, label] = best_run(ada, T, args.budget, args.repeat)

    labels = list(dict.fromkeys(label for _, label in runs))
    print(f"\n{'wall time [s]':24s}{'reference (numpy)':>20s}{'batched (torch ' + args.device + ')':>24s}{'ratio':>8s}")
    for label in labels:
        t_ref, t_bat = runs["reference", label][1], runs["batched", label][1]
        print(f"{'  ' + label:24s}{t_ref:20.3f}{t_bat:24.3f}{t_ref / t_bat:7.1f}x")
    ref_label = min(labels, key=lambda lb: runs["reference", lb][1])
    bat_label = min(labels, key=lambda lb: runs["batched", lb][1])
    ref, t_ref, calls_ref = runs["reference", ref_label]
    bat, t_bat, calls_bat = runs["batched", bat_label]
    print(f"\nFig. 4 breakdown of each one's fastest setting ({ref_label} / {bat_label}):")
    for step in ("ce", "pinv", "matmul", "sample"):
        print(f"{'  ' + step + ' [s]':24s}{ref.timings()[step]:20.3f}{bat.timings()[step]:24.3f}")
    print(f"{'max CE calls / query':24s}{calls_ref.max():20d}{calls_bat.max():24d}")
    recalls = {}
    for k in ks:
        recalls[k] = (topk_recall(T, ref.I, k), topk_recall(T, bat.I, k))
        print(f"{f'Top-{k}-Recall@{args.budget}':24s}{recalls[k][0]:20.4f}{recalls[k][1]:24.4f}")
    anchors_equal = float((ref.anchors == bat.anchors).all(axis=1).mean())
    lists_equal = bool(np.array_equal(ref.I, bat.I))
    recall_equal = all(a == b for a, b in recalls.values())
    print(f"\nspeed-up, each at its fastest setting: {t_ref / t_bat:.1f}x")
    print(f"queries with identical anchors: {anchors_equal:.1%}; identical ranked lists: {lists_equal}; "
          f"identical recall: {recall_equal}")
    ok = recall_equal and lists_equal and calls_ref.max() <= args.budget and calls_bat.max() <= args.budget
    print("OK" if ok else "MISMATCH")
    if args.json:
        from run_all import command_line, write_fragment

        point = (f"{T.shape[0]} test queries x {T.shape[1]} items, k_q = {R_anc.shape[0]}, B_CE = {args.budget}, "
                 f"N_r = {args.rounds}, {args.sampler}, {variant}")
        same = f"identical ranked lists: {lists_equal}, identical recall: {recall_equal}"
        rows = [{"comparison": f"ADACUR batched ({args.device}) vs per-query reference, each at its fastest threads",
                 "metric": "wall s", "ours": t_bat, "baseline": t_ref, "ratio": t_ref / t_bat,
                 "higher_is_better": False, "at": f"{point}; {ref_label} vs {bat_label}; {same}"}]
        rows += [{"comparison": f"ADACUR batched vs reference, both at {label}", "metric": "wall s",
                  "ours": runs["batched", label][1], "baseline": runs["reference", label][1],
                  "ratio": runs["reference", label][1] / runs["batched", label][1], "higher_is_better": False,
                  "at": point} for label in labels]
        breakdown = ", ".join(f"{step} {ref.timings()[step]:.3f} / {bat.timings()[step]:.3f} s"
                              for step in ("ce", "pinv", "matmul", "sample"))
        write_fragment(args.json, {
            "benchmark": "bench_adacur", "title": "ADACUR batched torch vs per-query numpy reference",
            "command": command_line(__file__, argv), "rows": rows,
            "notes": [f"matrix: {source}; fastest of {args.repeat} runs per setting (timeit's convention)",
                      f"Fig. 4 breakdown, reference / batched: {breakdown}",
                      f"queries with identical anchors: {anchors_equal:.1%}; {same}; {'OK' if ok else 'MISMATCH'}"]})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
