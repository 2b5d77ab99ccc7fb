"""First-stage retrievers and gold accuracy: exact top-k, cache round-trip, hand-checkable accuracy."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xenbench.data.datasets import Item, Query
from xenbench.errors import ParameterError
from xenbench.models.linking import accuracy_at_k
from xenbench.models.retrievers import DualEncoder, TfidfRetriever, topk

ITEMS = [Item("a", "apple", "a red fruit"), Item("b", "car", "a vehicle with wheels"),
         Item("c", "piano", "a musical instrument with keys")]
QUERIES = [Query("q0", "she played the piano"), Query("q1", "he ate an apple"), Query("q2", "the car has wheels")]


def test_topk_matches_argsort() -> None:
    s = np.random.default_rng(0).normal(size=(5, 20)).astype(np.float32)
    D, I = topk(s, 4)
    assert D.dtype == np.float32 and I.dtype == np.int64 and I.shape == (5, 4)
    np.testing.assert_array_equal(I, np.argsort(-s, axis=1)[:, :4])
    np.testing.assert_allclose(D, np.take_along_axis(s, I, 1))


def test_tfidf_finds_the_word_overlap() -> None:
    _, I = TfidfRetriever().fit(ITEMS).search(QUERIES, 1)
    assert I[:, 0].tolist() == [2, 0, 1]
    with pytest.raises(ParameterError, match="'items' parameter"):
        TfidfRetriever().fit([])


def test_dual_encoder_embeddings_cache_round_trip(tmp_path) -> None:
    de = DualEncoder(cache_dir=tmp_path, batch_size=2)
    first = de.encode([q.text for q in QUERIES])
    assert len(list((tmp_path / "embeddings").glob("*.npy"))) == 1
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(de.encode([q.text for q in QUERIES]), first)  # served from the cache
    # order-independent batching: embedding one text alone gives the same vector
    np.testing.assert_allclose(DualEncoder(cache_dir=False).encode([QUERIES[1].text])[0], first[1], atol=1e-5)
    _, I = de.fit(ITEMS).search(QUERIES, 1)
    assert I[:, 0].tolist() == [2, 0, 1]


def test_a_change_to_the_encoding_code_misses_the_embedding_cache(tmp_path, monkeypatch) -> None:
    """The cache key holds the encoding code's digest: embeddings cached by other code (a changed pooling, say) are not
    served to this code, even on a warm cache."""
    from xenbench.models import retrievers

    texts = [q.text for q in QUERIES]
    DualEncoder(cache_dir=tmp_path).encode(texts)
    original = DualEncoder.encode

    def encode_changed(self, texts, *, desc="embedding"):  # other source: stands for an edited encode
        return original(self, texts, desc=desc)

    monkeypatch.setattr(DualEncoder, "encode", encode_changed)
    retrievers._encoding_digest.cache_clear()
    try:
        DualEncoder(cache_dir=tmp_path).encode(texts)
    finally:
        retrievers._encoding_digest.cache_clear()
    assert len(list((tmp_path / "embeddings").glob("*.npy"))) == 2  # recomputed under a new key, not served


def test_a_dual_encoder_whose_texts_are_cached_loads_no_model(tmp_path) -> None:
    """The model loads on the first text the cache lacks: a notebook whose embeddings are cached skips transformers."""
    texts = [q.text for q in QUERIES]
    first = DualEncoder(cache_dir=tmp_path).encode(texts)
    again = DualEncoder(cache_dir=tmp_path)
    np.testing.assert_array_equal(again.encode(texts), first)
    assert "model" not in vars(again) and "tokenizer" not in vars(again)  # functools.cached_property never ran
    assert again.dim == first.shape[1] == again.model.config.hidden_size
    assert not next(again.model.parameters()).is_inference()  # loaded outside encode's inference mode: trainable
    np.testing.assert_allclose(again.encode(texts + ["a text not cached"])[:3], first, atol=1e-6)


def test_a_dual_encoder_folder_without_a_config_is_refused_up_front(tmp_path) -> None:
    from xenbench.errors import DataError

    (tmp_path / "my-de").mkdir()
    (tmp_path / "my-de" / "model.safetensors").write_bytes(b"")  # weights without the config that says what they are
    with pytest.raises(DataError, match=r"my-de.* is not a Hugging Face model folder \(no config\.json\)"):
        DualEncoder(tmp_path / "my-de")


def test_accuracy_at_k_by_hand() -> None:
    I = np.array([[3, 1, 2], [0, 2, 1], [1, 0, 2]])
    gold = np.array([1, 0, -1])
    assert accuracy_at_k(I, gold, (1, 2, 3)) == {1: 1 / 3, 2: 2 / 3, 3: 2 / 3}


@pytest.mark.parametrize("device,message", [
    ("gpu", "must be 'auto', 'cpu', 'cuda', 'cuda:<k>' or 'mps'. Got 'gpu'"),
    pytest.param("cuda", "must be 'auto' or 'cpu': CUDA is not available on this machine. Got 'cuda'",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_dual_encoder_refuses_a_bad_device(device, message) -> None:
    with pytest.raises(ParameterError, match=rf"^The 'device' parameter of DualEncoder {message}"):
        DualEncoder(device=device)


def test_dual_encoder_encodes_on_its_device() -> None:
    de = DualEncoder(device="cpu:0", cache_dir=False)
    assert de.device == torch.device("cpu:0") and next(de.model.parameters()).device.type == "cpu"
    texts = [q.text for q in QUERIES]
    np.testing.assert_array_equal(de.encode(texts), DualEncoder(device="cpu", cache_dir=False).encode(texts))


@pytest.mark.cuda
def test_dual_encoder_on_cuda_gives_the_cpu_embeddings() -> None:
    texts = [q.text for q in QUERIES] + [f"{it.title}: {it.text}" for it in ITEMS]
    cuda = DualEncoder(device="cuda", cache_dir=False)
    assert next(cuda.model.parameters()).device.type == "cuda"
    np.testing.assert_allclose(cuda.encode(texts), DualEncoder(device="cpu", cache_dir=False).encode(texts), atol=1e-4)


def test_loading_models_leaves_the_users_logging_alone() -> None:
    """DualEncoder and build_cross_encoder silence transformers' expected load reports only while loading."""
    from transformers import logging as hf_logging

    from xenbench.models.crossencoder import CEConfig
    from xenbench.models.loading import build_cross_encoder

    before = hf_logging.get_verbosity()
    try:
        hf_logging.set_verbosity_info()
        DualEncoder(device="cpu")
        assert hf_logging.get_verbosity() == hf_logging.INFO
        build_cross_encoder(CEConfig(kind="cls"))
        assert hf_logging.get_verbosity() == hf_logging.INFO
    finally:
        hf_logging.set_verbosity(before)
