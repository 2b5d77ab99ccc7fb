"""Shared fixtures: a private embedding cache per session, one local Ray for the tests that use it, a temporary reports
folder, notebook settings, a guard that fails a test which would start a kernel."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

# As many pytest-xdist workers as cores (make test): each worker, and each notebook kernel it starts (they inherit the
# environment), computes on its share of the cores instead of every one of them, which only adds contention (2
# workers x 2 torch threads on 2 cores: about 10% more worker time in the notebook tests). Set before torch loads.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
if _WORKERS and "OMP_NUM_THREADS" not in os.environ:
    _SHARE = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ["OMP_NUM_THREADS"] = str(_SHARE)
    # The variable sizes the thread pools of libraries loaded from here on. numpy is loaded already (zarr's pytest
    # plugin imports it before this file), its OpenBLAS pool sized to every core: with the other core busy, that pool
    # made an SVD of 1001 x 2964 1.5x slower and small pinv/matmul loops 3.8x slower than one thread.
    from threadpoolctl import threadpool_limits

    threadpool_limits(_SHARE)


@pytest.fixture(scope="session", autouse=True)
def xenbench_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$XENBENCH_CACHE`` points at a fresh folder for the whole session.

    Tests never read embeddings cached by an earlier run (or by someone's notebook session), and
    kernels started by papermill inherit the variable. Under pytest-xdist, its ``embeddings`` folder is one folder
    shared by the workers of this run.
    """
    cache = tmp_path_factory.mktemp("xenbench-cache")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The DE's embeddings are keyed by its weights and the exact texts: the workers of one run share them (the
        # witnesses and tamper tests embed the same datasets), each computed once. Written atomically per process.
        shared = tmp_path_factory.getbasetemp().parent / "xenbench-embeddings"
        shared.mkdir(exist_ok=True)
        (cache / "embeddings").symlink_to(shared, target_is_directory=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XENBENCH_CACHE", str(cache))
        yield cache


#: The files whose tests use a local Ray (``ray_cluster``): one unit for pytest-xdist, so that one Ray serves them all.
RAY_FILES = ("test_rerankers.py", "test_scorers.py", "test_scoring.py", "test_sweep.py")
_RAY = contextlib.ExitStack()


@pytest.fixture
def ray_cluster() -> Any:
    """A local two-CPU Ray (the ray extra: make setup installs it), started by the first test that asks for it and
    shut down after the last test of :data:`RAY_FILES` that runs in a row (:func:`pytest_runtest_teardown`): one start
    (about 8 CPU-s of Ray's daemons) instead of one per file, and no idle daemons taking CPU from the other files'
    tests. A test may kill its workers: Ray starts new ones."""
    import ray

    if not ray.is_initialized():
        from xenbench._ray import ray_session

        _RAY.enter_context(ray_session(num_cpus=2))
    return ray


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or nextitem.path.name not in RAY_FILES:
        _RAY.close()


@pytest.fixture(autouse=True)
def _fresh_recorded_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no recorded inputs: provenance describes what *this* test read."""
    from xenbench import provenance

    monkeypatch.setattr(provenance, "_INPUTS", {})


def _digest(value: Any) -> str:
    """sha256 of an array's (or a scipy sparse matrix's) dtype, shape and values."""
    import hashlib

    import numpy as np

    parts = [value.data, value.indices, value.indptr] if hasattr(value, "indptr") else [value]
    h = hashlib.sha256(repr(getattr(value, "shape", None)).encode())
    for part in parts:
        a = np.ascontiguousarray(part)
        # an object array's bytes are pointers: its values instead (a split's "dev"/"test" labels)
        h.update(a.dtype.str.encode() + repr(a.shape).encode() + (repr(a.tolist()).encode() if a.dtype == object
                                                                   else a.tobytes()))
    return h.hexdigest()


@pytest.fixture(scope="session")
def _ccsa_models() -> dict:
    return {}


@pytest.fixture
def ccsa_trained_once(monkeypatch: pytest.MonkeyPatch, _ccsa_models: dict) -> None:
    """Notebook 06's witness trains one CCSA per λ at its full settings (about 20 s each here). The committed results'
    check (tests/test_witnesses.py) and the tamper test of a raw record (tests/test_tamper.py: a committed value
    changed, the code not) train each (λ, B) on the same inputs once between them: they run on one worker (TOGETHER).
    A test that changes the code (a method constant) must not take this fixture."""
    import pandas as pd
    import torch

    from xenbench.studies import ccsa

    sweep = ccsa.balance_sweep

    def once(train, items, queries, settings, **kwargs):  # the models of balance_sweep are independent per setting
        arrays = {name: kwargs.pop(name) for name in ("exact", "relevant", "split")}
        inputs = (*(_digest(a) for a in (train, items, queries, *arrays.values())), repr(sorted(kwargs.items())),
                  torch.get_num_threads())
        frames, frequencies = [], {}
        for setting in settings:
            key = (inputs, tuple(setting))
            if key not in _ccsa_models:
                _ccsa_models[key] = sweep(train, items, queries, [setting], **arrays, **kwargs)
            frame, freq = _ccsa_models[key]
            frames.append(frame)
            frequencies.update(freq)
        return pd.concat(frames, ignore_index=True), frequencies

    monkeypatch.setattr(ccsa, "balance_sweep", once)


@pytest.fixture
def reports_dir(tmp_path: Path) -> Path:
    """Where a test's notebook outputs go (``run_notebook`` creates it)."""
    return tmp_path / "reports"


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list:
    """papermill.execute_notebook, replaced: a case that reaches it has failed (the kernel would have started)."""
    import papermill  # here, not at the top: most test files never start a kernel

    calls: list = []

    def fake(*args, **kwargs):
        calls.append(args)
        raise AssertionError("the kernel was started")

    monkeypatch.setattr(papermill, "execute_notebook", fake)
    monkeypatch.setenv("CI", "true")
    return calls


@pytest.fixture(scope="session")
def notebook_kwargs() -> dict:
    """How tests execute notebooks: the venv's python3 kernel, no progress bar, bounded cells."""
    return {"kernel": "python3", "progress_bar": False, "timeout": 600}


#: The files that take longest under `make test` (``--durations``, 2 cores): they start first, so that no worker is
#: left running one of them while the other has nothing to do.
LONGEST_FIRST = ("test_witnesses.py", "test_tamper.py", "test_notebooks.py")
#: Files whose tests are independent and each long (a notebook run each): every test is a unit of its own for
#: pytest-xdist instead of the whole file on one worker.
SPREAD = ("test_notebooks.py",)
#: Files that run on one worker, in this order: the tamper tests re-verify copies of the committed files after
#: ``findings --verify`` has embedded their datasets into the shared cache (started side by side, both embedded them).
TOGETHER = ("test_witnesses.py", "test_tamper.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (a file's tests on one worker, sharing its module fixtures), except that each test of
    :data:`SPREAD` is a unit of its own, the files of :data:`TOGETHER` are one unit and so are those of
    :data:`RAY_FILES`, and the units go out in collection order (:data:`LONGEST_FIRST` first) rather than by their
    number of tests."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            for group in (TOGETHER, RAY_FILES):
                if path.endswith(group):
                    return " + ".join(group)
            return nodeid if path.endswith(SPREAD) else path

    config.option.loadscopereorder = False
    return LongestFirst(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test in test_notebooks.py executes a notebook: mark it even if its author forgot, so
    # `-m "not notebook"` keeps the fast tier fast.
    for item in items:
        if item.path.name == "test_notebooks.py":
            item.add_marker(pytest.mark.notebook)
    # The longest files first, then the other files that run notebooks, then the rest (a stable sort: within each,
    # the files and their tests keep their order).
    runs_notebooks = {item.path for item in items if item.get_closest_marker("notebook")}
    items.sort(key=lambda item: LONGEST_FIRST.index(item.path.name) if item.path.name in LONGEST_FIRST
               else len(LONGEST_FIRST) + (item.path not in runs_notebooks))
    # `cuda` tests run where torch sees a GPU (benchmarks/gpu_check.py runs `pytest -m cuda` there).
    cuda = [item for item in items if item.get_closest_marker("cuda")]
    if cuda:
        import torch

        if not torch.cuda.is_available():
            for item in cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture(scope="module")
def one_thread():
    """Pin torch and BLAS to one thread for a module: on tiny matrices extra threads only add
    synchronisation (10x slower on a shared 2-core box); restored afterwards."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(before)
