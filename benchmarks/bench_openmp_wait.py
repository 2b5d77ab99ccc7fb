"""OpenMP's wait policy on a machine with a busy core: ACTIVE (spin) vs PASSIVE (xenbench's default), side by side.

``import xenbench`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose one, because torch's OpenMP threads
spin while they wait for each other: when another process holds one of the cores, each small batched op of
an ADACUR/AXN round waits for a thread that is not running. This times one AXN search (the batched torch
implementation) on the bundled [CLS]-CE matrix in fresh processes under each policy, first on an idle
machine, then with a busy-loop process per core minus one, and prints medians and ratios.

Usage::

    python benchmarks/bench_openmp_wait.py [--budget 100] [--repeat 3] [--json reports/bench/bench_openmp_wait.json]

``--json`` writes a benchmark fragment (the schema of ``benchmarks/run_all.py``): ours = PASSIVE (xenbench's
default), baseline = ACTIVE, ratio = ACTIVE / PASSIVE seconds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_all (the fragment format)

# One AXN search in a fresh process (the policy is read when OpenMP loads): prints its wall seconds.
_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
import numpy as np
from xenbench.methods.adacur import SearchOptions
from xenbench.methods.axn import Axn
from xenbench.data.store import ScoreStore
M = ScoreStore.open({matrix!r}).to_numpy()
rng = np.random.default_rng(0)
V = rng.standard_normal((M.shape[1], 384)).astype(np.float32)  # item embeddings: shape matters, not quality
test = np.sort(rng.choice(M.shape[0], {n_test}, replace=False))
axn = Axn({budget}, n_rounds=5, seed=0, options=SearchOptions(device="cpu")).fit(V)
axn.run(M[test[:8]], query_ids=test[:8])  # warm-up: allocations, thread pool
t = time.perf_counter()
axn.run(M[test], query_ids=test)
print(time.perf_counter() - t)
"""


def _time(policy: str, args: argparse.Namespace) -> float:
    code = _CHILD.format(root=str(ROOT), matrix=str(args.matrix), n_test=args.n_test, budget=args.budget)
    env = {**os.environ, "OMP_WAIT_POLICY": policy}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if out.returncode != 0:  # say why: the child's own last error line
        lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
        raise SystemExit(f"the timed AXN search failed ({policy}): {lines[-1] if lines else out.returncode}")
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--matrix", type=Path, default=ROOT / "data" / "scores" / "noun.cognition" / "cls-ce")
    p.add_argument("--n-test", type=int, default=351)
    p.add_argument("--budget", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    rows = []
    n_busy = max(1, (os.cpu_count() or 2) - 1)
    for load in ("idle", f"{n_busy} busy core(s)"):
        spinners = [] if load == "idle" else [
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n_busy)]
        try:
            time.sleep(0.5)
            times = {pol: [] for pol in ("ACTIVE", "PASSIVE")}
            for _ in range(args.repeat):  # interleaved, so drift hits both policies alike
                for pol in times:
                    times[pol].append(_time(pol, args))
        finally:
            for s in spinners:
                s.kill()
                s.wait()
        med = {pol: statistics.median(v) for pol, v in times.items()}
        rows.append({"load": load, "active_s": med["ACTIVE"], "passive_s": med["PASSIVE"],
                     "active_over_passive": med["ACTIVE"] / med["PASSIVE"], "runs": args.repeat})
    print(f"AXN search, B_CE = {args.budget}, {args.n_test} test queries, {os.cpu_count()} CPUs "
          f"(median of {args.repeat} fresh processes)")
    print(f"{'load':<18}{'ACTIVE s':>10}{'PASSIVE s':>11}{'ACTIVE/PASSIVE':>16}")
    for r in rows:
        print(f"{r['load']:<18}{r['active_s']:>10.3f}{r['passive_s']:>11.3f}{r['active_over_passive']:>16.2f}")
    if args.json:
        from run_all import command_line, write_fragment

        write_fragment(args.json, {
            "benchmark": "bench_openmp_wait",
            "title": "OpenMP wait policy PASSIVE (xenbench's default) vs ACTIVE on one AXN search",
            "command": command_line(__file__, argv),
            "rows": [{"comparison": f"PASSIVE vs ACTIVE wait, {r['load']}", "metric": "AXN search s",
                      "ours": r["passive_s"], "baseline": r["active_s"], "ratio": r["active_over_passive"],
                      "higher_is_better": False,
                      "at": f"B_CE = {args.budget}, {args.n_test} test queries, {os.cpu_count()} CPUs, "
                            f"{r['load']}, median of {r['runs']} fresh processes"} for r in rows],
            "notes": ["each time is one AXN search (batched torch, 5 rounds) in a fresh process, so the policy is "
                      "read when OpenMP loads; the policies alternate (interleaved) so that drift hits both alike",
                      f"busy cores: {n_busy} busy-loop process(es) hold all CPUs but one"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
