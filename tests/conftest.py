"""Shared fixtures: a private embedding cache per session, a temporary reports folder, notebook settings."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def xenbench_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$XENBENCH_CACHE`` points at a fresh folder for the whole session.

    Tests never read embeddings cached by an earlier run (or by someone's notebook session), and
    kernels started by papermill inherit the variable.
    """
    cache = tmp_path_factory.mktemp("xenbench-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XENBENCH_CACHE", str(cache))
        yield cache


@pytest.fixture(autouse=True)
def _fresh_recorded_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no recorded inputs: provenance describes what *this* test read."""
    from xenbench import provenance

    monkeypatch.setattr(provenance, "_INPUTS", {})


@pytest.fixture
def reports_dir(tmp_path: Path) -> Path:
    """Where a test's notebook outputs go (``run_notebook`` creates it)."""
    return tmp_path / "reports"


@pytest.fixture(scope="session")
def notebook_kwargs() -> dict:
    """How tests execute notebooks: the venv's python3 kernel, no progress bar, bounded cells."""
    return {"kernel": "python3", "progress_bar": False, "timeout": 600}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test in test_notebooks.py executes a notebook: mark it even if its author forgot, so
    # `-m "not notebook"` keeps the fast tier fast.
    for item in items:
        if item.path.name == "test_notebooks.py":
            item.add_marker(pytest.mark.notebook)
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
