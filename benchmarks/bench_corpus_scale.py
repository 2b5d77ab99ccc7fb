"""Notebook 07 (and 03, 04) over a whole corpus of 95,840 items with sparse labels: time and peak memory per stage.

The corpus is every item of the 43 bundled WordNet-EL domains, a seeded sample of their queries and sparse graded
labels (tests/_sparse_corpus.py, a BEIR folder); the "CE" is the bundled dual encoder's dot product
(``DualEncoderDotScorer``, a scorer of the protocol), scored once into a score store for every query x every item,
so the notebooks run in store mode with ``max_items`` null at budgets of at most 1% of the items. Stages:

* ``generate``: the BEIR folder written;
* ``score``: the DE embeddings of every item and query (cached on disk by text after the first run), then the
  store written by :func:`xenbench.models.jobs.score_to_store` in blocks of ``--query-chunk`` queries (so the store's
  per-block bookkeeping, which grows with the square of the block count, stays small);
* each notebook through ``xenbench run`` (a subprocess): the seconds and lines before its kernel started (the checks
  and the cost printed before the kernel), then each code cell: wall seconds and the kernel's CPU seconds
  (papermill's start/end time of the cell; the kernel's user+system time sampled every ``--sample-s``), and its
  peak resident memory.

How memory is measured: for ``generate`` and ``score`` (each its own subprocess) and for a whole ``xenbench run``,
the peak RSS of the largest process of the stage (``ru_maxrss`` of ``os.wait4``). Per cell, from
``/proc/<kernel pid>/status`` sampled every ``--sample-s``: ``VmHWM``, the kernel's high-water mark, read at the
cell's end; when it rose during the cell, the cell set it and it is exact (``peak_exact``); otherwise the cell
stayed below the kernel's earlier peak and the highest ``VmRSS`` sampled during it is given (a lower bound).

    python benchmarks/bench_corpus_scale.py --json benchmarks/results/corpus_scale.json
    python benchmarks/run_all.py --docs      # renders docs/BENCHMARKS.md's corpus-scale block from that file
    python benchmarks/bench_corpus_scale.py --notebooks 07_compare_methods --merge-into benchmarks/results/corpus_scale.json

Linux only (``/proc``). Not in ``make bench``: it takes tens of minutes on 2 cores (the DE embeddings of 95,840
items alone take 10-40 minutes the first time, then seconds from the cache).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))  # run_all (the machine description)
sys.path.insert(0, str(ROOT / "tests"))  # the corpus builder and the scorer (tests/_sparse_corpus.py)

import run_all  # noqa: E402

from xenbench._io import write_text_atomic  # noqa: E402

COMMITTED = ROOT / "benchmarks" / "results" / "corpus_scale.json"
BEGIN = "<!-- corpus-scale:start -->"
END = "<!-- corpus-scale:end -->"
DOC_KEYS = {"benchmark": str, "date": str, "command": str, "machine": dict, "corpus": dict, "stages": list}

#: The notebooks' parameters at corpus scale beyond dataset, store, sizes and budgets (``-p`` values of ``xenbench
#: run``): one split and one seed (a measurement of cost, not the protocol's verdicts), quick's method settings.
_COMMON = {"n_anchor_queries": "100", "n_dev_queries": "50", "split_seeds": "[0]", "k_values": "[1, 10, 100]",
           "max_test_queries": "null", "first_stage_depth": "1000", "device": "cpu"}
NOTEBOOK_PARAMS: dict[str, dict[str, str]] = {
    "07_compare_methods": {**_COMMON, "anchor_seeds": "[0]", "first_stages": "[tfidf, bm25]", "pq_bytes": "12"},
    "03_adacur_rounds": {**_COMMON, "anchor_seeds": "[0]", "rounds_grid": "[1, 5]", "latency_queries": "5"},
    "04_axn_lambda": {**_COMMON, "first_round_seeds": "[0]"},
}
#: Parameters that take the run's budgets, and the notebooks that time the CE per call from ``ce_seconds_per_pair``.
_BUDGET_LISTS = {"03_adacur_rounds": ("focus_budgets",)}
_CE_TIMED = ("07_compare_methods",)


# -- measuring a subprocess ------------------------------------------------------------------------------------------


def _read_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (kB) of ``pid`` from /proc, and its user+system CPU ticks; empty if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return {}
    out = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in status.splitlines())
           if k in ("VmRSS", "VmHWM")}
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    out["ticks"] = int(fields[11]) + int(fields[12])  # utime + stime
    return out


def _kernel_pid(root_pid: int) -> int | None:
    """The Jupyter kernel among the descendants of ``root_pid`` (an ``ipykernel_launcher`` process), if started."""
    import psutil

    try:
        for child in psutil.Process(root_pid).children(recursive=True):
            if any("ipykernel_launcher" in part for part in child.cmdline()):
                return child.pid
    except psutil.Error:
        return None
    return None


def measured(cmd: Sequence[str], *, sample_s: float = 0.0, env: Mapping[str, str] | None = None,
             deadline_s: float | None = None) -> dict[str, Any]:
    """Run ``cmd``; its wall and CPU seconds, peak RSS (MB, the largest process of its tree: ``ru_maxrss``), stdout,
    and its stderr lines each with the second it came; with ``sample_s``, samples of its Jupyter kernel
    (``[t, VmRSS kB, VmHWM kB, CPU ticks]``) and the second the kernel was first seen; past ``deadline_s`` seconds
    (checked at each sample) it is sent SIGINT, as Ctrl-C (``stopped`` says so)."""
    t0 = time.time()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=None if env is None else {**os.environ, **env})
    lines: list[tuple[float, str]] = []
    out: list[str] = []
    samples: list[list[float]] = []
    seen: dict[str, float] = {}
    done = threading.Event()

    def read_err() -> None:
        for line in proc.stderr:
            lines.append((time.time() - t0, line.rstrip("\n")))

    def read_out() -> None:
        out.append(proc.stdout.read())

    def sample() -> None:
        pid = None
        while not done.is_set():
            if deadline_s is not None and not seen.get("stopped") and time.time() - t0 > deadline_s:
                seen["stopped"] = time.time() - t0
                os.kill(proc.pid, signal.SIGINT)
            pid = pid or _kernel_pid(proc.pid)
            if pid is not None:
                seen.setdefault("kernel_s", time.time() - t0)
                got = _read_status(pid)
                if got:
                    samples.append([time.time(), got.get("VmRSS", 0), got.get("VmHWM", 0), got["ticks"]])
            done.wait(sample_s)

    threads = [threading.Thread(target=read_err), threading.Thread(target=read_out)]
    if sample_s:
        threads.append(threading.Thread(target=sample))
    for t in threads:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    for t in threads:
        t.join()
    return {"rc": proc.returncode, "wall_s": time.time() - t0, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024, "stdout": "".join(out), "stderr": lines, "samples": samples,
            "kernel_s": seen.get("kernel_s"), "stopped": seen.get("stopped"), "started_at": t0}


# -- stages ----------------------------------------------------------------------------------------------------------


def _stage(name: str, run: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {"stage": name, "wall_s": round(run["wall_s"], 2), "cpu_s": round(run["cpu_s"], 2),
            "peak_rss_mb": round(run["peak_rss_mb"], 1), "peak_exact": True, **extra}


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n" + code]


def _checked(run: Mapping[str, Any], what: str) -> None:
    if run["rc"] != 0:
        tail = "\n".join(line for _, line in run["stderr"][-30:])
        raise SystemExit(f"bench_corpus_scale: {what} failed (exit {run['rc']}):\n{tail}")


def generate(folder: Path, n_queries: int, labelled: float, seed: int,
             domains: list[str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write the BEIR folder in a subprocess: its stage record and the corpus's sizes."""
    run = measured(_python(
        "import json, _sparse_corpus as sc\n"
        f"ds = sc.sparse_corpus(n_queries={n_queries}, labelled={labelled}, seed={seed}, domains={domains!r})\n"
        f"sc.save_beir(ds, {str(folder)!r})\n"
        "print(json.dumps(sc.describe(ds)))\n"))
    _checked(run, "writing the corpus")
    return _stage("generate: BEIR folder from WordNet-EL", run), json.loads(run["stdout"].strip().splitlines()[-1])


def score(folder: Path, store: Path, query_chunk: int, batch_size: int) -> dict[str, Any]:
    """Embed and score every query x item into ``store`` in a subprocess (a store already there is replaced: each run
    times the whole job)."""
    run = measured(_python(
        "import json, time, _sparse_corpus as sc\n"
        "from xenbench.data.beir import load_beir\n"
        "from xenbench.models.jobs import score_to_store\n"
        f"ds = load_beir({str(folder)!r})\n"
        "t = time.perf_counter(); scorer = sc.DualEncoderDotScorer(ds.queries, ds.items); embed = time.perf_counter() - t\n"
        f"st = score_to_store(scorer, ds.queries, ds.items, {str(store)!r}, batch_size={batch_size}, "
        f"query_chunk={query_chunk}, device='cpu', progress=False, overwrite=True)\n"
        "blocks = sum(st.chunk_info(k)['wall_s'] for k in range(st.n_chunks))\n"
        "print(json.dumps({'embed_s': embed, 'store_s': time.perf_counter() - t - embed, 'n_chunks': st.n_chunks,"
        " 'blocks_s': blocks,"
        " 'shape': [len(ds.queries), len(ds.items)], 'pairs_per_s': st.attrs['sessions'][-1]['n_pairs'] /"
        " max(st.attrs['sessions'][-1]['wall_s'], 1e-9)}))\n"))
    _checked(run, "scoring the store")
    info = json.loads(run["stdout"].strip().splitlines()[-1])
    return _stage(f"score: DE embeddings ({info['embed_s']:.0f} s) + store of {info['shape'][0]} x "
                  f"{info['shape'][1]} in {info['n_chunks']} blocks ({info['store_s']:.0f} s, of which scoring the "
                  f"blocks {info['blocks_s']:.0f} s and the store's bookkeeping the rest)", run, **info)


_CALL = re.compile(r"\bxb\.([A-Za-z_][\w.]*)\(")


def _cell_label(source: str) -> str:
    """What a code cell runs: the ``xb.*`` functions it calls, in order (at most four), else its first line."""
    calls = list(dict.fromkeys(m.group(1) for m in _CALL.finditer(source)))
    if calls:
        return ", ".join(calls[:4]) + (", ..." if len(calls) > 4 else "")
    first = next((line.strip() for line in source.splitlines() if line.strip()), "(empty)")
    return first if first.startswith("#") else first.split("  #", 1)[0][:60]  # a comment, or code without its comment


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def cell_stages(notebook: Path, samples: Sequence[Sequence[float]], tick_s: float,
                stopped_at: float | None = None) -> list[dict[str, Any]]:
    """One record per executed code cell of ``notebook``: wall seconds (papermill's start/end), the kernel's CPU
    seconds and peak RSS over that window (module docstring). With ``stopped_at`` (the time the run was stopped), the
    first cell papermill left pending is the one the run stopped in: measured from the previous cell's end."""
    nb = json.loads(notebook.read_text())
    rows = []
    prior_hwm = 0.0
    prev_end = samples[0][0]
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("papermill", {})
        if cell["cell_type"] != "code":
            continue
        if not (meta.get("start_time") and meta.get("end_time")):
            if stopped_at is None or (rows and rows[-1]["stage"].endswith("unfinished)")):
                continue
            meta = {"start_time": None, "end_time": None}  # the cell the run stopped in
        start = _seconds(meta["start_time"]) if meta["start_time"] else prev_end
        end = _seconds(meta["end_time"]) if meta["end_time"] else stopped_at
        prev_end = end
        inside = [s for s in samples if start <= s[0] <= end]
        before = [s for s in samples if s[0] <= start]
        after = [s for s in samples if s[0] >= end]
        first, last = (before[-1] if before else samples[0]), (after[0] if after else samples[-1])
        hwm = last[2] / 1024
        exact = hwm > prior_hwm
        peak = hwm if exact else max([s[1] for s in inside] + [first[1], last[1]]) / 1024
        prior_hwm = max(prior_hwm, hwm)
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        # papermill gives the cell a stop interrupts (or whose kernel dies) an end time too: one ending after the stop
        stopped_in = stopped_at is not None and (not meta["end_time"] or end >= stopped_at)
        rows.append({"stage": _cell_label(source) + (" (stopped here, unfinished)" if stopped_in else ""),
                     "wall_s": round(end - start, 2), "cpu_s": round((last[3] - first[3]) * tick_s, 2),
                     "peak_rss_mb": round(peak, 1), "peak_exact": exact})
        if stopped_in:
            break
    return rows


def run_notebook(name: str, params: Mapping[str, str], out: Path, sample_s: float, timeout: int,
                 deadline_s: float | None = None) -> list[dict[str, Any]]:
    """``xenbench run name`` with ``params``: a record of the whole run, of what came before the kernel, and of each
    code cell. Past ``deadline_s`` the run is stopped as by Ctrl-C and its partly executed notebook is read (the cells
    done, and the one it stopped in)."""
    cmd = [sys.executable, "-m", "xenbench.cli", "run", name, "--out", str(out), "--no-html", "--timeout",
           str(timeout)]
    for key, value in params.items():
        cmd += ["-p", key, value]
    for old in out.glob(f"{name}.*.ipynb"):
        old.unlink()  # a failed run's partial notebook from before is not this run's
    run = measured(cmd, sample_s=sample_s, env={"PYTHONPATH": str(ROOT)}, deadline_s=deadline_s)
    if not run["stopped"]:
        _checked(run, f"xenbench run {name}")
    before = run["kernel_s"] or run["wall_s"]
    printed = [line for t, line in run["stderr"] if t <= before and line.strip()]
    notebooks = sorted(out.glob(f"{name}.*.ipynb"))  # none when stopped before its kernel ran a cell
    results = {} if run["stopped"] else json.loads(next(out.glob(f"{name}.*.results.json")).read_text())
    stopped_at = run["started_at"] + run["stopped"] if run["stopped"] else None
    cells = cell_stages(notebooks[0], run["samples"], 1 / os.sysconf("SC_CLK_TCK"), stopped_at) if notebooks and \
        run["samples"] else []
    what = f"stopped after {run['stopped']:.0f} s (--deadline-s)" if run["stopped"] else "the whole xenbench run"
    whole = _stage(f"{name}: {what}", run, command=shlex.join(["xenbench", *cmd[3:]]),
                   kernel_seconds=results.get("resources", {}).get("seconds"))
    pre = {"stage": f"{name}: before the kernel (checks, cost)", "wall_s": round(before, 2), "cpu_s": None,
           "peak_rss_mb": None, "peak_exact": None, "printed": printed}
    return [whole, pre, *({**c, "stage": f"{name} cell: {c['stage']}"} for c in cells)]


# -- the document ----------------------------------------------------------------------------------------------------


def load_document(path: str | os.PathLike[str] = COMMITTED) -> dict[str, Any]:
    """Read and check a corpus_scale.json (the keys of :data:`DOC_KEYS`)."""
    doc = json.loads(Path(path).read_text())
    for key, kind in DOC_KEYS.items():
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"{path}: '{key}' must be a {kind.__name__}")
    return doc


def _num(value: Any) -> str:
    return "–" if value is None else f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def render(doc: Mapping[str, Any]) -> str:
    """docs/BENCHMARKS.md's corpus-scale block: the machine, the corpus, the command, then one row per stage."""
    m, c = doc["machine"], doc["corpus"]
    rel = ", ".join(f"{n} with {r}" for r, n in c["relevant_per_query"].items())
    lines = [
        f"Measured {doc['date']} on {m.get('cpu')} ({m.get('logical_cpus')} logical CPUs, {m.get('ram_gib')} GiB RAM, "
        f"GPU: {m.get('gpu')}), shared with other jobs (load average {doc.get('load_average', '?')} at the start, "
        f"{doc.get('load_average_end', '?')} at the end): "
        "wall seconds stretch with the load, CPU seconds and memory much less.",
        "",
        f"Corpus: {c['items']:,} items, {c['queries']:,} queries, {c['labelled']:,} labelled (relevant items per "
        f"labelled query: {rel}); scorer: the DE dot product; budgets {doc.get('budgets')} CE calls per query.",
        "",
        f"Command: `{doc['command']}`",
        "",
        "| stage | wall s | CPU s | peak RSS MB |",
        "|---|---:|---:|---:|",
    ]
    for s in doc["stages"]:
        peak = _num(s["peak_rss_mb"]) + ("" if s["peak_exact"] in (True, None) else " (≥, sampled)")
        lines.append(f"| {run_all._cell(s['stage'])} | {_num(s['wall_s'])} | {_num(s['cpu_s'])} | {peak} |")
    printed = [p for s in doc["stages"] for p in s.get("printed", [])]
    if printed:
        lines += ["", "Printed before the kernel started:", "", "```", *printed, "```"]
    return "\n".join(lines)


def merge_stages(doc: Mapping[str, Any], new: Mapping[str, Any], notebooks: Sequence[str]) -> dict[str, Any]:
    """``doc`` with the rows of ``notebooks`` replaced, in place, by those of ``new`` (a run of those notebooks alone):
    every other row and the header stay ``doc``'s, and each replaced whole-run row says when and by which command it
    was measured (its own date, load and command: not the header's)."""
    def of(name: str) -> Any:
        return lambda s: s["stage"].startswith(f"{name}:") or s["stage"].startswith(f"{name} cell:")

    stages = list(doc["stages"])
    for name in notebooks:
        rows = [dict(s) for s in new["stages"] if of(name)(s)]
        if not rows:
            continue
        for s in rows:
            if s["stage"] == f"{name}: the whole xenbench run":
                s["stage"] += (f" (re-measured {new['date']}, load average {new.get('load_average', '?')} to "
                               f"{new.get('load_average_end', '?')}: `{new['command']}`)")
        at = next((i for i, s in enumerate(stages) if of(name)(s)), len(stages))
        stages = [s for s in stages[:at] if not of(name)(s)] + rows + [s for s in stages[at:] if not of(name)(s)]
    return {**doc, "stages": stages}


def update_docs(doc: Path = run_all.DOC, path: Path = COMMITTED) -> bool:
    """Replace docs/BENCHMARKS.md's corpus-scale block by :func:`render` of ``path``; True if it changed."""
    text = doc.read_text()
    if BEGIN not in text:
        return False
    new = run_all._replace_block(text, BEGIN, END, render(load_document(path)) if path.is_file() else
                                 f"Not run yet: there is no `{path.relative_to(ROOT)}`.", doc)
    if new != text:
        write_text_atomic(doc, new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=ROOT / "reports" / "corpus-scale",
                   help="folder of the corpus, the store and the notebook outputs")
    p.add_argument("--n-queries", type=int, default=500, help="queries in the corpus (every one is scored)")
    p.add_argument("--labelled", type=float, default=0.7, help="share of them with relevance labels")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--domains", default=None, help="comma-separated WordNet-EL domains (default: all 43)")
    p.add_argument("--max-queries", default="300",
                   help="-p max_queries of the notebooks: a seeded sample of the labelled queries ('null': all)")
    p.add_argument("--budgets", default="[100, 300, 900]", help="CE budgets, at most 1%% of the items")
    p.add_argument("--notebooks", nargs="+", default=["07_compare_methods"], choices=sorted(NOTEBOOK_PARAMS))
    p.add_argument("--ce-seconds-per-pair", default="0.0025",
                   help="the wall-time axis' cost of one CE call (the DE dot product is not a CE; 0.0025 s is "
                        "about the bundled MiniLM CE on 2 CPU cores)")
    p.add_argument("--query-chunk", type=int, default=16, help="queries per store block")
    p.add_argument("--batch-size", type=int, default=8192, help="pairs per call of the scorer")
    p.add_argument("--sample-s", type=float, default=0.1, help="seconds between samples of the kernel")
    p.add_argument("--timeout", type=int, default=7200, help="seconds a cell may run")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="stop the notebooks (as Ctrl-C) this many seconds after the benchmark started, keeping the "
                        "cells done and the one stopped in")
    p.add_argument("--json", type=Path, default=None, help="write the document here")
    p.add_argument("--merge-into", type=Path, default=None,
                   help="also replace the rows of the notebooks run in this document (e.g. the committed "
                        "benchmarks/results/corpus_scale.json), keeping its other rows")
    args = p.parse_args(argv)

    started, t_start = datetime.datetime.now(datetime.timezone.utc), time.time()
    load = os.getloadavg()[0]
    args.work.mkdir(parents=True, exist_ok=True)
    folder, store_dir = args.work / "corpus", args.work / "scores"
    domains = args.domains.split(",") if args.domains else None
    gen, corpus = generate(folder, args.n_queries, args.labelled, args.seed, domains)
    stages = [gen, score(folder, store_dir / "de-dot", args.query_chunk, args.batch_size)]
    doc = {"benchmark": "bench_corpus_scale", "date": started.strftime("%Y-%m-%d"),
           "command": run_all.command_line(__file__, argv if argv is not None else sys.argv[1:]),
           "machine": run_all.machine(), "load_average": round(load, 1), "budgets": args.budgets, "corpus": corpus,
           "stages": stages}
    for name in args.notebooks:
        params = {"dataset": f"beir:{folder}", "scores_dir": str(store_dir), "ce": "de-dot", "model": "",
                  "max_items": "null", "max_queries": args.max_queries, "budgets": args.budgets,
                  **dict.fromkeys(_BUDGET_LISTS.get(name, ()), args.budgets),
                  **({"ce_seconds_per_pair": args.ce_seconds_per_pair} if name in _CE_TIMED else {}),
                  **NOTEBOOK_PARAMS[name]}
        left = None if args.deadline_s is None else args.deadline_s - (time.time() - t_start)
        if left is not None and left <= 0:
            break
        stages += run_notebook(name, params, args.work / "runs" / name, args.sample_s, args.timeout, left)
        doc["load_average_end"] = round(os.getloadavg()[0], 1)
        if args.json:  # after each notebook: a later one that fails or is stopped leaves the earlier ones written
            write_text_atomic(args.json, json.dumps(doc, indent=2) + "\n")
    if args.merge_into:
        merged = merge_stages(load_document(args.merge_into), doc, args.notebooks)
        write_text_atomic(args.merge_into, json.dumps(merged, indent=2) + "\n")
    print(render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
