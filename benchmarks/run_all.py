"""Run every benchmark and write one table: reports/bench.json (machine + every row) and reports/bench.md.

Each benchmark script in :data:`BENCHMARKS` runs with the arguments ``make bench`` uses plus ``--json
reports/bench/<name>.json`` and writes a *fragment* there::

    {"benchmark": str, "title": str, "command": str (the command that reproduces it),
     "rows": [{"comparison": str, "metric": str, "ours": float, "baseline": float, "ratio": float,
               "higher_is_better": bool, "at": str}],
     "notes": [str]}

``ratio`` is ours' advantage over the baseline measured side by side in one run (times: baseline / ours;
throughputs or recall: ours / baseline); ``at`` states the compared point. A script that is missing, fails or
writes no valid fragment is listed as ``failed: <error>`` and the others still run. Fragments already in
reports/bench/ that no listed script wrote (someone else's) are picked up as well.

docs/BENCHMARKS.md's table is rendered from the committed copy benchmarks/results/bench.json::

    python benchmarks/run_all.py                 # run everything, write reports/bench.json and reports/bench.md
    python benchmarks/run_all.py --only bench_ccsa --keep   # rerun one, keep the other fragments
    cp reports/bench.json benchmarks/results/bench.json
    python benchmarks/run_all.py --docs          # re-render docs/BENCHMARKS.md's block (no running)

docs/BENCHMARKS.md's "GPU check" block is rendered from benchmarks/results/gpu_check.json (a run of
``benchmarks/gpu_check.py`` on a GPU, committed by hand) by the same ``--docs``, and its "Corpus scale" block from
benchmarks/results/corpus_scale.json (a run of ``benchmarks/bench_corpus_scale.py``, committed by hand).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from xenbench._io import write_text_atomic

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(__file__).resolve().parent
REPORTS = ROOT / "reports"
FRAGMENTS = REPORTS / "bench"
COMMITTED = BENCH_DIR / "results" / "bench.json"
#: The page whose block between BEGIN and END is the committed table rendered.
DOC = ROOT / "docs" / "BENCHMARKS.md"
BEGIN = "<!-- bench:start -->"
END = "<!-- bench:end -->"
#: The GPU check's committed run (benchmarks/gpu_check.py) and its block in the page's "GPU check" section.
GPU_COMMITTED = BENCH_DIR / "results" / "gpu_check.json"
GPU_BEGIN = "<!-- gpu:start -->"
GPU_END = "<!-- gpu:end -->"
GPU_KEYS = {"date": str, "mode": str, "status": str, "machine": dict, "checks": list, "sections": list}

#: (script name in benchmarks/, the arguments `make bench` runs it with), in table order.
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("bench_scoring", ["--ce", "models/cls-ce", "--n-queries", "10", "--n-items", "50", "--repeats", "3"]),
    ("bench_adacur", ["--matrix", "data/scores/noun.cognition/cls-ce", "--n-test", "501", "--n-anchor-queries", "500"]),
    ("bench_openmp_wait", []),
    ("bench_ccsa", []),
    ("bench_pefa_pecos", []),
    ("bench_packed", ["--n-queries", "8", "--n-items", "32", "--repeats", "5"]),
    ("bench_compile", ["--n-queries", "10", "--n-items", "50", "--repeats", "3"]),
    ("bench_rerankers", ["--n-queries", "2", "--n-items", "64", "--repeats", "3", "--threads", "1"]),
    ("bench_scorers", ["--n-queries", "4", "--n-items", "64", "--repeats", "5"]),
]

FRAGMENT_KEYS = {"benchmark": str, "title": str, "command": str, "rows": list, "notes": list}
ROW_KEYS = {"comparison": str, "metric": str, "ours": float, "baseline": float, "ratio": float,
            "higher_is_better": bool, "at": str}


class FragmentError(ValueError):
    """A benchmark fragment that does not follow the schema; the message names the file and the key."""


# --------------------------------------------------------------------------------------------------
# fragments
# --------------------------------------------------------------------------------------------------
def _is(value: object, kind: type) -> bool:
    if kind is float:  # a number: int or float, not bool, finite
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind)


_KIND = {str: "a string", float: "a finite number", bool: "true or false", list: "a list"}


def validate_fragment(doc: object, source: str | os.PathLike[str]) -> dict[str, Any]:
    """``doc`` if it follows the fragment schema, else :class:`FragmentError` naming ``source`` and the first bad key."""
    if not isinstance(doc, Mapping):
        raise FragmentError(f"{source}: a benchmark fragment must be a JSON object, got {type(doc).__name__}")
    for key, kind in FRAGMENT_KEYS.items():
        if key not in doc:
            raise FragmentError(f"{source}: missing key '{key}'")
        if not _is(doc[key], kind):
            raise FragmentError(f"{source}: '{key}' must be {_KIND[kind]}, got {doc[key]!r}")
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, Mapping):
            raise FragmentError(f"{source}: rows[{i}] must be an object, got {row!r}")
        for key, kind in ROW_KEYS.items():
            if key not in row:
                raise FragmentError(f"{source}: rows[{i}] is missing key '{key}'")
            if not _is(row[key], kind):
                raise FragmentError(f"{source}: '{key}' of rows[{i}] must be {_KIND[kind]}, got {row[key]!r}")
    for i, note in enumerate(doc["notes"]):
        if not isinstance(note, str):
            raise FragmentError(f"{source}: notes[{i}] must be a string, got {note!r}")
    return dict(doc)


def load_fragment(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate one fragment file."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FragmentError(f"{path}: no such fragment (the benchmark wrote none)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FragmentError(f"{path}: not JSON ({err})") from None
    return validate_fragment(doc, path)


def write_fragment(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> Path:
    """Validate ``doc`` and write it to ``path`` (numbers as plain floats), creating the folder."""
    doc = {**doc, "rows": [{**r, **{k: float(r[k]) for k in ("ours", "baseline", "ratio") if k in r}}
                           for r in doc.get("rows", [])]}
    validate_fragment(doc, path)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def command_line(script: str | os.PathLike[str], argv: Sequence[str] | None) -> str:
    """The command that reproduces a benchmark run: ``python benchmarks/<script> <args>`` without ``--json PATH``."""
    args = list(sys.argv[1:] if argv is None else argv)
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--json":
            skip = True
        elif not a.startswith("--json="):
            kept.append(a)
    return shlex.join(["python", f"benchmarks/{Path(script).name}", *kept])


def wall_timed(fn: Callable[[], T]) -> Callable[[], tuple[float, T]]:
    """``fn`` as a timed pass for :func:`interleaved`: it returns (wall seconds, ``fn()``)."""
    def timed() -> tuple[float, T]:
        t = time.perf_counter()
        out = fn()
        return time.perf_counter() - t, out
    return timed


def interleaved(passes: Mapping[str, Callable[[], tuple[float, T]]], repeats: int, n_work: float
                ) -> tuple[dict[str, list[float]], dict[str, T]]:
    """Time ``repeats`` rounds of every pass, the order rotating each round (the machine may be shared).

    Parameters
    ----------
    passes : mapping of name -> callable returning (seconds, output)
        One pass each; its own seconds, so that a pass can exclude set-up or include device synchronization.
    repeats : int
        Rounds; round r starts at the (r mod len(passes))-th pass (two passes: their order flips each round).
    n_work : float
        Work per pass (pairs scored): the rates are ``n_work / seconds``.

    Returns
    -------
    runs : dict of name -> list of float
        Each pass's rate per round, in round order.
    outputs : dict of name -> output
        Each pass's output of the last round.
    """
    names = list(passes)
    runs: dict[str, list[float]] = {k: [] for k in names}
    outputs: dict[str, T] = {}
    for r in range(repeats):
        for key in names[r % len(names):] + names[:r % len(names)]:
            secs, outputs[key] = passes[key]()
            runs[key].append(n_work / secs)
    return runs, outputs


# --------------------------------------------------------------------------------------------------
# machine
# --------------------------------------------------------------------------------------------------
def _version(module: str) -> str:
    try:
        mod = __import__(module)
    except Exception:  # noqa: BLE001 - a missing or broken library is reported, not fatal
        return "not installed"
    return str(getattr(mod, "__version__", "unknown"))


def machine() -> dict[str, Any]:
    """CPU model, logical CPUs, torch threads, RAM, GPU and library versions of this machine."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        import torch

        threads = torch.get_num_threads()
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    except Exception:  # noqa: BLE001
        threads, gpu = None, "none"
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "torch_threads": threads, "ram_gib": ram, "gpu": gpu,
            "versions": {"python": platform.python_version(), **{m: _version(m) for m in
                                                                 ("torch", "numpy", "faiss", "scipy", "numba")}}}


# --------------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------------
def _tail(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def run_one(name: str, args: Sequence[str], fragments: Path = FRAGMENTS, timeout: float | None = None
            ) -> dict[str, Any]:
    """Run ``benchmarks/<name>.py args --json fragments/<name>.json``; the fragment, or an entry whose ``status``
    says why there is none (``failed: ...``)."""
    script = BENCH_DIR / f"{name}.py"
    out = fragments / f"{name}.json"
    entry = {"benchmark": name, "title": name, "command": shlex.join(["python", f"benchmarks/{name}.py", *args]),
             "rows": [], "notes": [], "fragment": name}
    if not script.exists():
        return {**entry, "status": f"failed: missing benchmarks/{name}.py"}
    out.unlink(missing_ok=True)
    print(f"== {entry['command']}", flush=True)
    try:
        proc = subprocess.run([sys.executable, str(script), *args, "--json", str(out)], cwd=ROOT, timeout=timeout,
                              stdout=None, stderr=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        return {**entry, "status": f"failed: timed out after {timeout:g} s"}
    sys.stderr.write(proc.stderr[-4000:])
    if proc.returncode != 0:
        return {**entry, "status": f"failed: exit status {proc.returncode}: {_tail(proc.stderr)}"}
    try:
        return {**load_fragment(out), "status": "ok", "fragment": name}
    except FragmentError as err:
        return {**entry, "status": f"failed: {err}"}


def collect(results: Sequence[Mapping[str, Any]], fragments: Path = FRAGMENTS) -> list[dict[str, Any]]:
    """``results`` plus every other fragment in ``fragments`` (by file name order), each validated."""
    seen = {r["benchmark"] for r in results} | {r["fragment"] for r in results if "fragment" in r}
    out = [dict(r) for r in results]
    for path in sorted(fragments.glob("*.json")) if fragments.is_dir() else []:
        if path.stem in seen:
            continue
        try:
            doc = load_fragment(path)
            if doc["benchmark"] in seen:  # a listed benchmark's fragment under its own name: already in
                continue
            out.append({**doc, "status": "ok"})
            seen.add(doc["benchmark"])
        except FragmentError as err:
            out.append({"benchmark": path.stem, "title": path.stem, "command": "", "rows": [], "notes": [],
                        "status": f"failed: {err}"})
    return out


# --------------------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------------------
def fmt(value: float) -> str:
    """A table number: thousands separated from 100 up, 2 decimals from 1, else 3 significant digits."""
    v = float(value)
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(doc: Mapping[str, Any]) -> str:
    """Markdown of a bench.json document: the machine, one table of every row (failed benchmarks as one row
    each), then each benchmark's command and notes."""
    m = doc["machine"]
    v = m.get("versions", {})
    lines = [f"Measured {doc.get('date', '')} on {m.get('cpu')} ({m.get('logical_cpus')} logical CPUs, "
             f"{m.get('torch_threads')} torch threads, {m.get('ram_gib')} GiB RAM, GPU: {m.get('gpu')}); "
             + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
             "",
             "| benchmark | comparison | metric | ours | baseline | ratio | at |",
             "|---|---|---|---:|---:|---:|---|"]
    for b in doc["benchmarks"]:
        if b.get("status", "ok") != "ok":
            lines.append(f"| {_cell(b['benchmark'])} | {_cell(b['status'])} | | | | | |")
            continue
        for r in b["rows"]:
            better = "higher" if r["higher_is_better"] else "lower"
            lines.append(f"| {_cell(b['benchmark'])} | {_cell(r['comparison'])} | {_cell(r['metric'])} "
                         f"({better} is better) | {fmt(r['ours'])} | {fmt(r['baseline'])} | "
                         f"**{r['ratio']:.2f}×** | {_cell(r['at'])} |")
    for b in doc["benchmarks"]:
        if b.get("status", "ok") != "ok" or not (b["notes"] or b["command"]):
            continue
        lines += ["", f"**{b['benchmark']}** — {b['title']} (`{b['command']}`):"]
        lines += [f"* {n}" for n in b["notes"]]
    return "\n".join(lines)


def bench_document(benchmarks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"machine": machine(), "date": datetime.date.today().isoformat(), "benchmarks": list(benchmarks)}


def load_document(path: str | os.PathLike[str] = COMMITTED) -> dict[str, Any]:
    """Read a bench.json; every benchmark that ran must carry a valid fragment."""
    path = Path(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    for key in ("machine", "benchmarks"):
        if key not in doc:
            raise FragmentError(f"{path}: missing key '{key}'")
    for b in doc["benchmarks"]:
        if b.get("status", "ok") == "ok":
            validate_fragment(b, f"{path} ({b.get('benchmark', '?')})")
    return doc


def docs_block(path: str | os.PathLike[str] = COMMITTED) -> str:
    """docs/BENCHMARKS.md's block: :func:`render` of the committed bench.json."""
    return render(load_document(path))


def _replace_block(text: str, begin: str, end: str, body: str, source: Path) -> str:
    if begin not in text or end not in text:
        raise FragmentError(f"{source}: no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def update_docs(doc: str | os.PathLike[str] = DOC, path: str | os.PathLike[str] = COMMITTED,
                gpu: str | os.PathLike[str] = GPU_COMMITTED) -> bool:
    """Replace the text between the bench markers of ``doc`` by :func:`docs_block` (and between its GPU markers, if
    it has them, by :func:`gpu_block` of ``gpu``) (temp file + rename); True if it changed."""
    doc = Path(doc)
    text = doc.read_text(encoding="utf-8")
    new = _replace_block(text, BEGIN, END, docs_block(path), doc)
    if GPU_BEGIN in new:
        new = _replace_block(new, GPU_BEGIN, GPU_END, gpu_block(gpu), doc)
    if new != text:
        write_text_atomic(doc, new)
    return new != text


# --------------------------------------------------------------------------------------------------
# the GPU check (benchmarks/gpu_check.py)
# --------------------------------------------------------------------------------------------------
def load_gpu_document(path: str | os.PathLike[str] = GPU_COMMITTED) -> dict[str, Any]:
    """Read and validate a gpu_check.json: a fragment plus the machine, the checks and the sections."""
    path = Path(path)
    doc = load_fragment(path)
    for key, kind in GPU_KEYS.items():
        if not isinstance(doc.get(key), kind):
            raise FragmentError(f"{path}: '{key}' must be {kind.__name__}, got {doc.get(key)!r}")
    return doc


def _check_value(c: Mapping[str, Any]) -> tuple[str, str]:
    if c.get("value") is None:
        return "", ""
    if c.get("bar") is None:
        return f"{c['value']:g}", ""
    return f"{c['value']:.2e}", f"≤ {c['bar']:.0e}"


def render_gpu(doc: Mapping[str, Any], *, full: bool = True) -> str:
    """Markdown of a gpu_check.json: the device, then (``full``) every section and check, then the measured rows
    (the benchmark table's columns) and notes. ``full=False``: the docs' short form (device, tally, the checks that
    did not pass or skip, rows)."""
    m = doc.get("machine", {})
    gpu = m.get("gpu") if m.get("gpu") not in (None, "none") else f"no GPU ({doc.get('device', 'cpu')})"
    mem = (f", {m['memory_free_gib']} of {m['memory_total_gib']} GiB free" if "memory_total_gib" in m else "")
    lines = [f"**{str(doc.get('status', '?')).upper()}**: `{doc.get('command', '')}` ({doc.get('mode')} mode) on "
             f"**{gpu}**{mem}, {doc.get('date', '')}; driver {m.get('driver', '?')}, torch {m.get('torch', '?')} "
             f"(CUDA {m.get('cuda_runtime')}), Python {m.get('python', '?')}, {m.get('logical_cpus', '?')} CPUs "
             f"({m.get('cpu', '?')})."]
    if m.get("missing"):
        lines.append("Missing: " + "; ".join(f"{k} ({v})" for k, v in m["missing"].items()) + ".")
    sub = doc.get("subset") or {}
    if sub:
        lines.append(f"Pairs: {sub['pairs_per_pass']:,} per pass ({sub['query_rows']} seeded query rows x "
                     f"{sub['items']} items of {sub['domain']}, seed {sub['seed']}, batches of {sub['batch_size']}).")
    checks = doc.get("checks", [])
    tally: dict[str, int] = {}
    for c in checks:
        tally[c["status"]] = tally.get(c["status"], 0) + 1
    lines.append(f"{len(checks)} checks: " + ", ".join(f"{n} {k}" for k, n in tally.items()) + ".")
    if full:
        lines += ["", "| section | status | s | box s |", "|---|---|---:|---:|"]
        lines += [f"| {s['name']} | {_cell(s['status'])} | {s['wall_s'] if s['wall_s'] is not None else ''} | "
                  f"{s['box_s'] if s['box_s'] is not None else ''} |" for s in doc.get("sections", [])]
    shown = checks if full else [c for c in checks if c["status"] not in ("pass", "skipped")]
    if shown:
        lines += ["", "| check | status | value (× std) | bar | detail |", "|---|---|---:|---|---|"]
        lines += [f"| {_cell(c['name'])} | {c['status']} | {_check_value(c)[0]} | {_check_value(c)[1]} | "
                  f"{_cell(c.get('detail', ''))} |" for c in shown]
    if doc.get("rows"):
        lines += ["", "| comparison | metric | ours | baseline | ratio | at |", "|---|---|---:|---:|---:|---|"]
        for r in doc["rows"]:
            better = "higher" if r["higher_is_better"] else "lower"
            lines.append(f"| {_cell(r['comparison'])} | {_cell(r['metric'])} ({better} is better) | {fmt(r['ours'])} "
                         f"| {fmt(r['baseline'])} | **{r['ratio']:.2f}×** | {_cell(r['at'])} |")
    lines += render_speed(doc)
    lines += [""] + [f"* {n}" for n in doc.get("notes", [])] if doc.get("notes") else []
    return "\n".join(lines)


#: How the speed tables name what was measured (gpu_speed.py's keys).
SPEED_MEASURES = {"forward only": "forward only (pre-tokenized batches, device time)",
                  "end to end": "end to end (score_matrix from texts)",
                  "st autocast": "sentence-transformers, fp32 weights, bf16 autocast",
                  "st bf16": "sentence-transformers, loaded in bf16"}


def _rate(m: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(median pairs/s, min-max, share of the bf16 GEMM rate) of one measure, or "not run"."""
    if not m or "pairs_per_s" not in m:
        return "not run", "", ""
    r, share = m["pairs_per_s"], m.get("share_of_bf16_gemm")
    return fmt(r["median"]), f"{fmt(r['min'])}–{fmt(r['max'])}", "" if share is None else f"{share:.1%}"


def render_speed(doc: Mapping[str, Any]) -> list[str]:
    """The speed sections of a gpu_check.json (benchmarks/gpu_speed.py) as two tables over the whole grid of
    models x lengths and variants: a cell the run did not measure (the section was not there yet, ran out of its
    box or failed: see its status) reads "not run"."""
    from gpu_speed import LENGTHS, MODELS, VARIANT_CELLS, VARIANTS, cell_key, cell_name

    speed = (doc.get("detail") or {}).get("speed") or {}
    cells, variants = speed.get("cells", {}), speed.get("variants", {})
    lines = ["", "Speed by model size and pair length, bf16 (sections \"sizes and lengths\" and \"scorer variants\"; "
             "pairs/s median of the repeats, their min–max, and the share of this run's bf16 GEMM rate at the row's "
             "FLOPs per pair):", "",
             "| model @ tokens | pairs | mean tokens | GFLOP/pair | measured | pairs/s | min–max | share of GEMM |",
             "|---|---:|---:|---:|---|---:|---|---:|"]
    for model in MODELS:
        for length in LENGTHS:
            c = cells.get(cell_key(model, length)) or {}
            if "measures" not in c:
                lines.append(f"| {cell_name(model, length)} | | | | not run | | | |")
                continue
            size = f"{c['n_pairs']:,} | {c['mean_tokens']:.1f} | {c['flops_per_pair'] / 1e9:.3g}"
            for key, label in SPEED_MEASURES.items():
                median, span, share = _rate((c.get("measures") or {}).get(key))
                lines.append(f"| {cell_name(model, length)} | {size} | {label} | {median} | {span} | {share} |")
    lines += ["", "Forward-only variants against the padded forward on the same pairs (× its pairs/s; share of the "
              "GEMM rate):", "", "| model @ tokens | padded | " + " | ".join(VARIANTS) + " | best |",
              "|---|" + "---:|" * (len(VARIANTS) + 1) + "---|"]
    for model, length in VARIANT_CELLS:
        c = variants.get(cell_key(model, length)) or {}
        if "padded" not in c:
            lines.append(f"| {cell_name(model, length)} | not run | " + " | ".join(["not run"] * len(VARIANTS))
                         + " | |")
            continue
        median, _, share = _rate(c["padded"])
        row = [f"{median} pairs/s ({share})" if share else f"{median} pairs/s"]
        for name in VARIANTS:
            v = c["variants"].get(name) or {}
            if v.get("status") == "ok":
                row.append(f"{v['vs_padded_median']:.2f}×" + (f" ({v['share_of_bf16_gemm']:.1%})"
                                                              if v.get("share_of_bf16_gemm") is not None else ""))
            else:
                row.append(_cell(v.get("status", "not run")))
        lines.append(f"| {cell_name(model, length)} | " + " | ".join(row) + f" | {c.get('best', '')} |")
    return lines


def _shown(path: Path) -> Path:
    """``path`` as messages name it: relative to the checkout when inside it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def gpu_block(path: str | os.PathLike[str] = GPU_COMMITTED) -> str:
    """docs/BENCHMARKS.md's GPU block: :func:`render_gpu` (short form) of the committed gpu_check.json, or a line
    saying there is none."""
    path = Path(path)
    if not path.is_file():
        return f"Not run on a GPU yet: there is no `{_shown(path)}` (only its CPU dry run runs, in `make test`)."
    return render_gpu(load_gpu_document(path), full=False)


def corpus_scale() -> Any:
    """benchmarks/bench_corpus_scale.py as a module: it renders docs/BENCHMARKS.md's corpus-scale block from its
    committed run (it imports this module, so it is loaded here only when asked for)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_corpus_scale", BENCH_DIR / "bench_corpus_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", "--readme", action="store_true", dest="docs",
                   help="only re-render docs/BENCHMARKS.md's table from benchmarks/results/bench.json (runs nothing; "
                        "--readme: its former name)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks (names in BENCHMARKS)")
    p.add_argument("--keep", action="store_true", help="with --only: keep the other fragments already written")
    p.add_argument("--no-run", action="store_true", help="run nothing: tabulate the fragments in reports/bench/")
    p.add_argument("--timeout", type=float, default=None, help="seconds per benchmark (default: none)")
    args = p.parse_args(argv)
    if args.docs:
        changed = update_docs(DOC, COMMITTED)
        changed = corpus_scale().update_docs(DOC) or changed  # its block, from benchmarks/results/corpus_scale.json
        print(f"{_shown(DOC)} {'updated' if changed else 'already up to date'} from {_shown(COMMITTED)}"
              f"{' and ' + str(_shown(GPU_COMMITTED)) if GPU_COMMITTED.is_file() else ''}")
        return 0
    names = [n for n, _ in BENCHMARKS]
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        p.error(f"unknown benchmark(s) {unknown}; choose from {names}")
    FRAGMENTS.mkdir(parents=True, exist_ok=True)
    results = []
    for name, bench_args in BENCHMARKS:
        if args.no_run or (args.only and name not in args.only):
            if not (args.keep or args.no_run):
                (FRAGMENTS / f"{name}.json").unlink(missing_ok=True)
            elif not (FRAGMENTS / f"{name}.json").exists():  # listed, not run now, nothing from before
                results.append({"benchmark": name, "title": name, "command": "", "rows": [], "notes": [],
                                "status": f"failed: not run (--only/--no-run) and no earlier fragment {name}.json"})
            else:  # kept from an earlier run: listed in its place
                results.append({**load_fragment(FRAGMENTS / f"{name}.json"), "status": "ok", "fragment": name})
            continue
        results.append(run_one(name, bench_args, timeout=args.timeout))
    listed = [r for r in collect(results)]
    order = {n: i for i, n in enumerate(names)}
    listed.sort(key=lambda r: order.get(r.get("fragment", r["benchmark"]), len(order)))
    doc = bench_document(listed)
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "bench.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (REPORTS / "bench.md").write_text("# Benchmarks\n\n" + render(doc) + "\n", encoding="utf-8")
    print(render(doc))
    print(f"\nwrote {REPORTS / 'bench.json'} and {REPORTS / 'bench.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
