"""What keys a scorer's cached scores and what a cache hit and a resume check (issue 54, item 5), and a prompt that
leaves a query no room for the document.

Audit findings, each a test here: a sentence-transformers scorer given its own ``fingerprint`` got another scorer's
cached scores when only ``max_length`` (8 vs the default) or the activation (Sigmoid vs Identity) differed, a cache
hit checked nothing, ``score models/cls-ce --resume`` into a DE store told a command-line user to fingerprint a
``CallableScorer``, and long queries under a chat template with a prompt pushed the document out silently.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import _tiny_models as tiny  # noqa: E402
from _cli_inputs import CORPUS, QUERIES, write_beir  # noqa: E402

from xenbench.cli import main  # noqa: E402
from xenbench.data.datasets import Item, Query  # noqa: E402
from xenbench.data.sources import load_dataset  # noqa: E402
from xenbench.errors import DataError  # noqa: E402
from xenbench.models import cache  # noqa: E402
from xenbench.models.loading import load_cross_encoder  # noqa: E402
from xenbench.models.scorers import SentenceTransformersScorer, scorer_key  # noqa: E402
from xenbench.models.scoring import score_matrix  # noqa: E402

REPO = HERE.parents[1]


@pytest.fixture(scope="module", autouse=True)
def _threads(one_thread):
    yield


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tiny.bert(tmp_path_factory.mktemp("tiny") / "bert")


@pytest.fixture(scope="module")
def sample():
    full = load_dataset("wordnet-el:noun.cognition")
    return full.subset([q.id for q in full.queries[:4]], [it.id for it in full.items[:5]])


def _st(folder: Path, **kwargs):
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(folder), local_files_only=True, device="cpu", **kwargs)


def _direct(scorer, ds) -> np.ndarray:
    return score_matrix(scorer, ds.queries, ds.items, device="cpu", progress=False, batch_size=64).scores


def test_a_given_fingerprint_joins_max_length_and_activation_in_the_cache_key(folder, sample, tmp_path):
    """Before: the key was the fingerprint alone, so max_length=8 got the default length's scores (up to 3x the std
    apart) and the Sigmoid model the Identity model's logits."""
    identity = SentenceTransformersScorer(_st(folder, activation_fn=torch.nn.Identity()), fingerprint="mine")
    short = SentenceTransformersScorer(_st(folder, activation_fn=torch.nn.Identity(), max_length=8),
                                       fingerprint="mine")
    sigmoid = SentenceTransformersScorer(_st(folder), fingerprint="mine")
    assert len({scorer_key(s) for s in (identity, short, sigmoid)}) == 3
    logits = cache.cached_scores(identity, sample, cache=tmp_path, progress=False, batch_size=64).to_numpy()
    got_short = cache.cached_scores(short, sample, cache=tmp_path, progress=False, batch_size=64).to_numpy()
    got_sigmoid = cache.cached_scores(sigmoid, sample, cache=tmp_path, progress=False, batch_size=64).to_numpy()
    assert np.array_equal(got_short, _direct(short, sample)) and not np.allclose(got_short, logits)
    np.testing.assert_allclose(got_sigmoid, 1 / (1 + np.exp(-logits.astype(np.float64))), rtol=1e-5, atol=1e-6)
    # the same settings under the same fingerprint still share their scores
    again = SentenceTransformersScorer(_st(folder, activation_fn=torch.nn.Identity()), fingerprint="mine")
    assert scorer_key(again) == scorer_key(identity)
    # max_length read as the model is now, not when it was wrapped
    identity.model.max_seq_length = 8
    assert scorer_key(identity) == scorer_key(short)


def test_a_cache_hit_checks_the_recorded_model_config_as_a_resume_does(folder, sample, tmp_path):
    """Before: a complete store under the key was served whatever it recorded."""
    scorer = SentenceTransformersScorer(_st(folder, activation_fn=torch.nn.Identity()), fingerprint="mine")
    store = cache.cached_scores(scorer, sample, cache=tmp_path, progress=False, batch_size=64)
    config = dict(store.attrs["model_config"], max_length=9999)
    store.update_attrs({"model_config": config})
    with pytest.raises(DataError, match=r"score cache's store for this model and sample, but records another job "
                                        r"\(model_config differs\): delete that folder"):
        cache.cached_scores(scorer, sample, cache=tmp_path, progress=False, batch_size=64)


def test_resuming_a_de_store_with_a_ce_says_what_differs_not_how_to_fingerprint_a_callable(tmp_path, capsys):
    """The regression: ``score de … --out st`` then ``score models/cls-ce … --out st --resume`` advised
    "give the scorer a fingerprint (CallableScorer(fn, …))"."""
    folder = write_beir(tmp_path / "b", CORPUS, QUERIES, [(f"q{k}", f"d{k}", 1) for k in range(3)])
    out = tmp_path / "st"
    assert main(["score", "de", f"beir:{folder}", "--out", str(out), "--device", "cpu"]) == 0
    proc = subprocess.run([str(Path(sys.executable).with_name("xenbench")), "score", str(REPO / "models" / "cls-ce"),
                           f"beir:{folder}", "--out", str(out), "--resume", "--device", "cpu"],
                          capture_output=True, text=True, timeout=600, env={**os.environ})
    errors = [line for line in proc.stderr.splitlines() if line.startswith("xenbench: error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "another job (kind differs): store 'de', this run 'dense'" in errors[0]
    assert "'cls-ce'" in errors[0] and "CallableScorer" not in errors[0]


@pytest.fixture(scope="module")
def chat_with_prompt(tmp_path_factory) -> Path:
    """The tiny Qwen3-style reranker (chat template, max_length 72) with a default prompt of a few tokens."""
    folder = tiny.qwen3(tmp_path_factory.mktemp("chat") / "qwen3")
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"rank": "Answer yes or no."}, "default_prompt_name": "rank"}))
    return folder


def test_queries_that_leave_the_document_no_room_are_counted_in_a_warning_before_scoring(chat_with_prompt):
    """Before: such rows scored the same for every item, silently."""
    ce = load_cross_encoder(chat_with_prompt)
    long = " ".join(["stone river cloud music"] * 40)
    queries = [Query("short", "a river"), Query("long1", long), Query("long2", "garden " + long)]
    items = [Item(f"d{k}", f"title {k}", text) for k, text in enumerate(["music of the river", "a stone ladder",
                                                                          "clouds over the forest"])]
    with pytest.warns(UserWarning, match=r"2 of 3 queries leave no room for the document within max_length 72 .*"
                                         r"first: 'long1'"):
        scores = score_matrix(ce, queries, items, device="cpu", progress=False).scores
    # the rows it counted are constant (to a float32 ulp: the padding-free forward's sums), the other one ranks
    assert np.ptp(scores[0]) > 1e-3 and np.ptp(scores[1]) <= 1e-6 and np.ptp(scores[2]) <= 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # queries that fit: no warning
        score_matrix(ce, queries[:1], items, device="cpu", progress=False)
