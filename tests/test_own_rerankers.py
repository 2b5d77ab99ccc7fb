"""A user's own rerankers in the notebooks: 03's quick profile on a BEIR folder with a tiny XLM-R cross-encoder
and a tiny causal-LM (Qwen3-style) reranker, each scoring a seeded sample on demand (``-p model``), and
``xenbench score`` with the same folders."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tiny_models as tiny  # noqa: E402
from test_own_data import small_beir  # noqa: E402

from xenbench.cli import main  # noqa: E402
from xenbench.data.store import ScoreStore  # noqa: E402

pytestmark = pytest.mark.notebook


@pytest.mark.parametrize("family", ["xlm-roberta", "qwen3"])
def test_score_takes_your_reranker_folder(family, tmp_path):
    model = tiny.FAMILIES[family](tmp_path / family)
    out = tmp_path / "scores"
    assert main(["score", str(model), f"beir:{small_beir(tmp_path)}", "--out", str(out), "--n-queries", "3",
                 "--n-items", "5"]) == 0
    store = ScoreStore.open(out)
    assert store.is_complete and store.shape == (3, 5) and np.ptp(store.to_numpy()) > 0


def test_adacur_notebook_scores_your_data_with_your_reranker(tmp_path, monkeypatch):
    """03 on a reranker given by its folder: the causal LM here; the XLM-R family runs 03 below, given by its hub id
    (the same folder, resolved from the Hugging Face cache): one notebook run per family."""
    family = "qwen3"
    monkeypatch.setenv("CI", "true")
    model = tiny.FAMILIES[family](tmp_path / family)
    spec = f"beir:{small_beir(tmp_path)}"
    reports = tmp_path / "reports"
    assert main(["run", "03_adacur_rounds", "--out", str(reports), "-p", "dataset", spec, "-p", "model", str(model),
                 "-p", "max_queries", "34", "-p", "max_items", "null", "-p", "max_test_queries", "null",
                 "-p", "k_values", "[1, 5]", "-p", "n_rounds", "2", "-p", "split_seeds", "[0]",
                 "-p", "n_anchor_queries", "14", "-p", "n_dev_queries", "8", "-p", "budgets", "[10, 20]",
                 "-p", "focus_budgets", "[10, 20]", "-p", "anchor_seeds", "[0]", "-p", "rounds_grid", "[1, 2]",
                 "-p", "latency_queries", "2"]) == 0
    results = json.loads(next(reports.glob(f"03_adacur_rounds.quick.beir-small-beir.{family}.*results.json"))
                         .read_text(encoding="utf-8"))
    assert results["results"]["params"]["model"] == str(model)
    cached = [ScoreStore.open(p) for p in (Path(os.environ["XENBENCH_CACHE"]) / "scores").iterdir()]
    mine = [s for s in cached if s.attrs.get("model_path") == str(model.resolve())]
    assert len(mine) == 1 and mine[0].shape == (34, 40)  # the reranker scored the seeded sample, once


def test_adacur_notebook_takes_a_hub_id_offline_and_names_the_model_by_it(tmp_path, monkeypatch):
    """``-p model ORG/NAME`` with HF_HUB_OFFLINE=1 and the model in the local Hugging Face cache (laid out as
    huggingface_hub lays it out): the run resolves it before the kernel, scores the sample, and the report, results
    and cached store name the model by its id, the store with the snapshot's commit."""
    monkeypatch.setenv("CI", "true")
    folder = tiny.FAMILIES["xlm-roberta"](tmp_path / "xlmr")
    _, commit = tiny.hub_cache(tmp_path / "hf", "tiny-org/tiny-xlmr", folder)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = f"beir:{small_beir(tmp_path)}"
    reports = tmp_path / "reports"
    assert main(["run", "03_adacur_rounds", "--out", str(reports), "-p", "dataset", spec, "-p", "model",
                 "tiny-org/tiny-xlmr", "-p", "max_queries", "34", "-p", "max_items", "null", "-p", "max_test_queries",
                 "null", "-p", "k_values", "[1, 5]", "-p", "n_rounds", "2", "-p", "split_seeds", "[0]",
                 "-p", "n_anchor_queries", "14", "-p", "n_dev_queries", "8", "-p", "budgets", "[10, 20]",
                 "-p", "focus_budgets", "[10, 20]", "-p", "anchor_seeds", "[0]", "-p", "rounds_grid", "[1, 2]",
                 "-p", "latency_queries", "2", "-p", "max_length", "32"]) == 0
    (results,) = reports.glob("03_adacur_rounds.quick.beir-small-beir.tiny-xlmr*.results.json")
    doc = json.loads(results.read_text(encoding="utf-8"))
    assert doc["results"]["params"]["model"] == "tiny-org/tiny-xlmr" and doc["results"]["params"]["ce"] == \
        "tiny-org/tiny-xlmr"
    models = [i for i in doc["provenance"]["inputs"] if i["kind"] == "model"]
    assert [m["hub"] for m in models if "hub" in m] == [{"id": "tiny-org/tiny-xlmr", "commit": commit}]
    html = next(reports.glob("03_adacur_rounds.quick.beir-small-beir.tiny-xlmr*.html")).read_text(encoding="utf-8")
    assert "tiny-org/tiny-xlmr on" in html  # the set-up line names the model by its id
    cached = [ScoreStore.open(p) for p in (Path(os.environ["XENBENCH_CACHE"]) / "scores").iterdir()]
    mine = [s for s in cached if s.attrs.get("model") == "tiny-org/tiny-xlmr"]
    assert len(mine) == 1 and mine[0].attrs["model_revision"] == commit and mine[0].attrs["max_length"] == 32
