"""The ONNX route docs/MODELS.md shows is one that installs with the project's pins (issue 54, item 7).

sentence-transformers' ``backend="onnx"`` needs optimum-onnx, which requires transformers < 4.58 (the pins hold
transformers 5.23): the docs said it works, and it could not be installed. The route documented now, an ONNX export
scored by onnxruntime through ``CallableScorer``, is run here from the docs' own code block on a tiny offline model,
and its scores are checked against the torch model's; skipped where the optional ``onnx``/``onnxruntime`` packages
(``pip install 'xenbench[onnx]'``) are absent.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import _tiny_models as tiny  # noqa: E402

from xenbench.data.sources import load_dataset  # noqa: E402
from xenbench.models.jobs import score_to_store  # noqa: E402
from xenbench.models.pairs import document_text  # noqa: E402

MODELS_MD = HERE.parents[1] / "docs" / "MODELS.md"


def _docs_block() -> str:
    """The fenced Python block of docs/MODELS.md that runs onnxruntime."""
    blocks = re.findall(r"```python\n(.*?)```", MODELS_MD.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if "onnxruntime.InferenceSession" in b]
    assert len(found) == 1, "docs/MODELS.md shows one onnxruntime block"
    return found[0]


def test_the_documented_onnx_route_installs_with_the_pins_and_scores_as_the_torch_model(tmp_path):
    folder = tiny.bert(tmp_path / "bert")
    onnx_file = tmp_path / "bert.onnx"
    code = _docs_block().replace('"path/to/my-ce", "my-ce.onnx"', f"{str(folder)!r}, {str(onnx_file)!r}")
    namespace: dict = {}
    exec(compile(code, "docs/MODELS.md", "exec"), namespace)  # noqa: S102 - the docs' own example
    scorer = namespace["scorer"]
    assert onnx_file.is_file() and len(scorer.fingerprint) == 64

    ds = load_dataset("wordnet-el:noun.cognition")
    queries, items = list(ds.queries[:5]), list(ds.items[:7])
    store = score_to_store(scorer, queries, items, tmp_path / "st", progress=False, batch_size=8)

    from sentence_transformers import CrossEncoder  # the torch model, as sentence-transformers scores it

    torch_ce = CrossEncoder(str(folder), activation_fn=torch.nn.Identity(), local_files_only=True, device="cpu")
    ref = np.asarray(torch_ce.predict([(q.text, document_text(it)) for q in queries for it in items],
                                      show_progress_bar=False)).reshape(len(queries), len(items))
    got = store.to_numpy()
    # fp32 kernels of two runtimes: equal to 1e-5 of the scores' spread (measured: ~1e-6 absolute)
    assert float(np.abs(got - ref).max()) <= 1e-5 * float(np.ptp(ref)) + 1e-6
    assert store.attrs["model_sha256"] == scorer.fingerprint  # a resume checks the export's digest
