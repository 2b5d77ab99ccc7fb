"""The committed cross-encoders and score matrices are what the current code computes.

The matrices were computed on a GPU (emb-ce-marker's on the CPU); here random entries are recomputed on the CPU with today's code
(fp32; tolerance 1e-4 absolute on scores of magnitude up to ~20 covers GPU/CPU kernel differences).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xenbench.models.fingerprint import model_fingerprint
from xenbench.models.loading import load_cross_encoder
from xenbench.data.sources import load_dataset
from xenbench.data.store import ScoreStore

ROOT = Path(__file__).resolve().parent.parent
SCORES = ROOT / "data" / "scores" / "noun.cognition"
N_ENTRIES = 60


@pytest.fixture(scope="module")
def dataset():
    return load_dataset("wordnet-el:noun.cognition")


@pytest.mark.parametrize("name", ["cls-ce", "emb-ce", "emb-ce-marker"])
def test_bundled_matrix_recomputes(name, dataset) -> None:
    store = ScoreStore.open(SCORES / name)
    attrs = store.attrs
    assert store.is_complete and store.shape == (1001, 2964)
    assert attrs["dataset"] == "wordnet-el:noun.cognition" and attrs["precision"] == "fp32"
    assert attrs["model"] == f"models/{name}"  # relative to the checkout, so it names the folder in any clone
    assert attrs["query_ids"] == [q.id for q in dataset.queries] and attrs["item_ids"] == [i.id for i in dataset.items]

    ce = load_cross_encoder(ROOT / attrs["model"])
    assert model_fingerprint(ce) == attrs["model_sha256"], "the committed model is not the one that made the matrix"
    rng = np.random.default_rng(2024)
    rows, cols = rng.integers(0, store.shape[0], N_ENTRIES), rng.integers(0, store.shape[1], N_ENTRIES)
    M = store.to_numpy()
    fresh = ce.score_pairs([dataset.queries[r] for r in rows], [dataset.items[c] for c in cols]).numpy()
    np.testing.assert_allclose(fresh, M[rows, cols], atol=1e-4, rtol=0)


@pytest.mark.parametrize(("name", "kind", "pooling"), [("cls-ce", "cls", "mean"), ("emb-ce", "emb", "mean"),
                                                        ("emb-ce-marker", "emb", "markers")])
def test_bundled_checkpoints_are_small_and_documented(name, kind, pooling) -> None:
    folder = ROOT / "models" / name
    assert (folder / "trained.safetensors").stat().st_size <= 25 * 2**20
    ce = load_cross_encoder(folder)
    notes = ce.config.notes
    assert ce.config.kind == kind and notes["train_config"]["kind"] == kind
    # cls-ce and emb-ce were trained before train-ce had --pooling: their recipe is the mean pooling
    assert ce.config.pooling == notes["train_config"].get("pooling", "mean") == pooling
    assert set(notes["train_config"]["domains"]).isdisjoint({"noun.cognition", "noun.food", "verb.contact", "verb.cognition"})


def test_bundled_de_matrix_recomputes(dataset) -> None:
    from xenbench.models.retrievers import DualEncoder

    store = ScoreStore.open(SCORES / "de")
    assert store.shape == (1001, 2964) and store.attrs["kind"] == "de"
    assert store.attrs["item_ids"] == [i.id for i in dataset.items]
    rows, cols = np.arange(0, 1001, 200), np.arange(0, 2964, 150)
    de = DualEncoder(cache_dir=False)
    fresh = de.fit([dataset.items[c] for c in cols]).scores([dataset.queries[r] for r in rows])
    np.testing.assert_allclose(fresh, store.to_numpy()[np.ix_(rows, cols)], atol=1e-5)
