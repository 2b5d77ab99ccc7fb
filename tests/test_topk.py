"""One top-k tie rule (xenbench.metrics, "Ties"): higher score first, equal scores by lower item index.

Three implementations must agree with a stable sort of ``-scores`` on inputs full of ties:
:func:`xenbench.metrics.topk_indices` (numpy), :func:`xenbench.models.retrievers.topk` (which calls it) and the
torch :func:`xenbench.methods.adacur.batched._topk_stable` of the batched ADACUR/AXN search.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xenbench.methods.adacur.batched import _topk_stable
from xenbench.metrics import topk_indices
from xenbench.models.retrievers import topk


def _tied(seed: int, shape=(7, 40), levels: int = 4) -> np.ndarray:
    """Scores with only ``levels`` distinct values per row (every top-k cut falls inside a tie),
    and a few -inf entries (the masks of the searches)."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, levels, size=shape).astype(np.float64)
    s[rng.random(shape) < 0.1] = -np.inf
    return s


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [1, 2, 5, 13, 39, 40])
def test_numpy_and_torch_top_k_agree_on_ties(seed, k):
    s = _tied(seed)
    want = np.argsort(-s, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(topk_indices(s, k), want)
    np.testing.assert_array_equal(_topk_stable(torch.from_numpy(s), k).numpy(), want)
    D, I = topk(s.astype(np.float32), k)
    np.testing.assert_array_equal(I, want)
    np.testing.assert_array_equal(D, np.take_along_axis(s, want, 1).astype(np.float32))


@pytest.mark.parametrize("k", [1, 3, 10, 20])
def test_rows_with_and_without_ties_at_the_cut_in_one_matrix(k):
    """Rows whose k-th value is tied beside rows of distinct scores: each row gets the stable sort's top k."""
    rng = np.random.default_rng(k)
    s = rng.standard_normal((12, 20))
    s[::2] = rng.integers(0, 3, size=(6, 20))  # every other row: three values, so the cut falls inside a tie
    np.testing.assert_array_equal(topk_indices(s, k), np.argsort(-s, axis=1, kind="stable")[:, :k])


def test_all_equal_rows_give_the_first_k_items():
    s = np.zeros((3, 10))
    for I in (topk_indices(s, 4), _topk_stable(torch.from_numpy(s), 4).numpy(), topk(s, 4)[1]):
        np.testing.assert_array_equal(I, np.tile(np.arange(4), (3, 1)))


def test_retriever_topk_keeps_its_contract():
    # float32 D, int64 I, k clipped to the number of items, torch tensors accepted, ties decided in float32
    s = torch.tensor([[0.1, 0.3, 0.3, 0.2]], dtype=torch.float64)
    D, I = topk(s, 10)
    assert D.dtype == np.float32 and I.dtype == np.int64 and I.tolist() == [[1, 2, 3, 0]]
    a, b = 1.0, 1.0 + 1e-12  # different in float64, equal in float32: the lower index wins
    assert topk(np.array([[a, b]]), 1)[1].tolist() == [[0]]
    D, I = topk(np.zeros((2, 3), np.float32), 0)
    assert D.shape == I.shape == (2, 0) and D.dtype == np.float32 and I.dtype == np.int64


def test_retriever_topk_in_row_blocks_equals_one_block(monkeypatch):
    import xenbench.models.retrievers as retrievers

    s = _tied(9, shape=(50, 30)).astype(np.float32)
    whole = topk(s, 7)
    monkeypatch.setattr(retrievers, "_TOPK_ROWS", 8)
    blocked = topk(s, 7)
    for a, b in zip(whole, blocked):
        np.testing.assert_array_equal(a, b)
