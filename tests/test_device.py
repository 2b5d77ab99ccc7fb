"""The ``device`` parameter: declared by every notebook that runs torch code, passed on by it to every package
call that takes one, and carried by the DE helpers to the DE; ``resolve_device`` for float64 searches."""
from __future__ import annotations

import ast
import importlib
import inspect
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import xenbench
from xenbench import harness as xh
from xenbench._device import resolve_device
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.errors import ParameterError

#: (notebook, call) pairs that may leave ``device`` out, and why.
EXEMPT = {
    ("01_score_matrices", "xb.loading.load_cross_encoder"): "score_matrix(device=device) moves the CE there",
}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _package_calls(name: str) -> list[tuple[str, ast.Call]]:
    """Every ``xb.<module>.<function>(...)`` call in the notebook's code cells."""
    nb = json.loads((xh.NOTEBOOKS_DIR / f"{name}.ipynb").read_text(encoding="utf-8"))
    calls = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if isinstance(node, ast.Call) and (dotted := _dotted(node.func)) and dotted.startswith("xb."):
                calls.append((dotted, node))
    return calls


def _resolve(dotted: str):
    obj, path = xenbench, ["xenbench"]
    for part in dotted.split(".")[1:]:
        path.append(part)
        obj = getattr(obj, part) if hasattr(obj, part) else importlib.import_module(".".join(path))
    return obj


def _takes_device(obj) -> bool:
    try:
        return "device" in inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False


@pytest.mark.parametrize("name", xh.list_notebooks())
def test_notebooks_declare_device_and_pass_it_to_every_call_that_takes_one(name):
    torch_calls = [(dotted, node) for dotted, node in _package_calls(name) if _takes_device(_resolve(dotted))]
    spec = xh.load_spec(name)
    if "device" in spec.params:
        assert xh.profile_values(name, "quick")["device"] == "auto"
    if not torch_calls:
        return
    assert "device" in spec.params, f"{name} calls {sorted({d for d, _ in torch_calls})}, but declares no `device`"
    for dotted, node in torch_calls:
        if (name, dotted) in EXEMPT:
            continue
        passed = {kw.arg: kw.value for kw in node.keywords}
        assert "device" in passed, f"{name}: {dotted}(...) (line {node.lineno} of its cell) gets no device=device"
        assert isinstance(passed["device"], ast.Name) and passed["device"].id == "device", \
            f"{name}: {dotted}(...) must get device=device, not {ast.unparse(passed['device'])}"


def test_the_notebooks_of_this_change_run_torch_code_and_declare_device():
    # the notebook test above only bites when a notebook's calls are seen to take a device
    for name in ("00_data", "03_adacur_rounds", "04_axn_lambda", "05_pefa_lambda"):
        assert any(_takes_device(_resolve(d)) for d, _ in _package_calls(name)), name
        assert "device" in xh.load_spec(name).params, name
    assert not any(_takes_device(_resolve(d)) for d, _ in _package_calls("02_rank_cls_vs_emb"))


# ----------------------------------------------------------------------------------------------
# the DE helpers hand their device to the DE
# ----------------------------------------------------------------------------------------------
class _FakeDE:
    """Stands in for DualEncoder: records the device it was built with; 4-d embeddings of text lengths."""

    devices: list = []

    def __init__(self, model="bundled", *, device="auto", **_):
        type(self).devices.append(device)

    @staticmethod
    def encode(texts):
        x = np.array([[len(t), 1.0, t.count(" "), 2.0] for t in texts], dtype=np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def fit(self, items):
        self.item_embeddings_ = self.encode([f"{it.title}: {it.text}" for it in items])
        return self

    def embed_queries(self, queries):
        return self.encode([q.text for q in queries])

    def scores(self, queries, columns=None):
        items = self.item_embeddings_ if columns is None else self.item_embeddings_[np.asarray(columns)]
        return self.embed_queries(queries) @ items.T

    def search(self, queries, k):
        from xenbench.models.retrievers import topk

        return topk(self.scores(queries), k)


@pytest.fixture
def fake_de(monkeypatch):
    import xenbench.models.retrievers

    _FakeDE.devices = []
    monkeypatch.setattr(xenbench.models.retrievers, "DualEncoder", _FakeDE)
    return _FakeDE.devices


def _tiny_dataset() -> Dataset:
    items = [Item(f"i{k}", f"item {k}", "word " * (k + 1)) for k in range(6)]
    queries = [Query(f"q{k}", "a query " + "x " * k) for k in range(5)]
    return Dataset("tiny", items, queries, {q.id: [items[k].id] for k, q in enumerate(queries)})


@pytest.mark.parametrize("device", ["auto", "cpu:0"])
def test_setup_and_compare_de_helpers_pass_the_device_to_the_de(fake_de, device):
    from xenbench.studies import compare
    from xenbench.studies import setup as study_setup

    ds = _tiny_dataset()
    setup = SimpleNamespace(dataset=ds, items=np.array([0, 2, 3, 5]))
    V, U = study_setup.de_embeddings(setup, device=device)
    de_all, _ = study_setup.retriever_scores(setup, device=device)
    seconds = compare.query_embedding_seconds(setup, n_timed=3, device=device)
    assert V.shape == (4, 4) and U.shape == (5, 4) and de_all.shape == (5, 4) and seconds >= 0
    np.testing.assert_allclose(de_all, U @ V.T, rtol=1e-6)
    assert fake_de == [device] * 3


def test_stats_and_splits_pass_the_device_to_the_de(fake_de, monkeypatch):
    from xenbench.studies import splits, stats

    ds = _tiny_dataset()
    acc = stats.baseline_accuracy([ds], k=2, device="cpu:0")
    assert set(acc["retriever"]) == {"DE", "TF-IDF", "BM25"}  # the default first stages
    monkeypatch.setattr(splits, "load_dataset", lambda spec: ds)
    P, U = splits.pooled_embeddings(["tiny"], device="cpu:0")
    assert P.shape == (6, 4) and U.shape == (5, 4)
    assert fake_de == ["cpu:0", "cpu:0"]
    stats.baseline_accuracy([ds], k=2)
    assert fake_de[-1] == "auto"  # the default, as before


# ----------------------------------------------------------------------------------------------
# resolve_device for float64 computations (ADACUR, AXN)
# ----------------------------------------------------------------------------------------------
def test_float64_auto_skips_mps_and_refuses_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("mps")  # the CE / DE default is unchanged
    assert resolve_device("auto", float64=True) == torch.device("cpu")
    with pytest.raises(ParameterError, match=r"'device' parameter of recall_vs_budget must be .*float64"):
        resolve_device("mps", owner="recall_vs_budget", float64=True)


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", 3])
def test_resolve_device_names_the_owner_of_a_bad_device(bad):
    with pytest.raises(ParameterError, match=r"^The 'device' parameter of lambda_sweep must be 'auto', 'cpu', 'cuda'"):
        resolve_device(bad, owner="lambda_sweep", float64=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_one_clear_error():
    with pytest.raises(ParameterError, match=r"'device' parameter of Axn must be 'auto' or 'cpu': CUDA is not "
                                             r"available on this machine. Got 'cuda' instead"):
        resolve_device("cuda", owner="Axn", float64=True)
