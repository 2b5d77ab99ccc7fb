"""CCSA: Eq. 5 by hand, the straight-through Gumbel-softmax, the inverted index against brute-force code
matching, faiss's imbalance factor on hand cases, determinism and the regularizer's effect on balance."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xenbench.ccsa import (
    CodeIndex,
    CompositeCodeAE,
    _hard_gumbel_softmax,
    activation_frequency,
    imbalance_factor,
    uniformity_loss,
)
from xenbench.cur import NotFittedError
from xenbench.errors import ParameterError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_uniformity_loss_by_hand():
    # B = 4 items, one chunk of L = 2: both dimensions on for 2 items -> perfectly uniform.
    balanced = torch.tensor([[1.0, 0], [0, 1], [1, 0], [0, 1]])
    assert uniformity_loss(balanced, 2).item() == pytest.approx(0.0)
    skewed = torch.tensor([[1.0, 0], [1, 0], [1, 0], [0, 1]])  # sums (3, 1), target 2: sqrt((1 + 1) / 4)
    assert uniformity_loss(skewed, 2).item() == pytest.approx(np.sqrt(0.5))


def test_hard_gumbel_softmax_is_one_hot_forward_and_soft_backward():
    logits = torch.randn(5, 3, 4, requires_grad=True)
    out = _hard_gumbel_softmax(logits, 1.0, torch.Generator().manual_seed(0))
    assert torch.equal(out.detach().sum(-1), torch.ones(5, 3))
    assert set(out.detach().unique().tolist()) <= {0.0, 1.0}
    (out * torch.arange(4.0)).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0  # gradients flow through the soft sample


def test_index_search_equals_brute_force_code_matching():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, size=(50, 6))
    queries = rng.integers(0, 4, size=(7, 6))
    index = CodeIndex(6, 4).add(codes)
    assert index.list_sizes.shape == (6, 4) and (index.list_sizes.sum(axis=1) == 50).all()
    D, I, scored = index.search(queries, k=10)
    shared = (queries[:, None, :] == codes[None, :, :]).sum(-1)  # (7, 50)
    for r in range(7):
        want = sorted(np.nonzero(shared[r])[0], key=lambda j: (-shared[r, j], j))[:10]
        np.testing.assert_array_equal(I[r, :len(want)], want)
        np.testing.assert_array_equal(D[r, :len(want)], shared[r, want])
        assert scored[r] == index.list_sizes[np.arange(6), queries[r]].sum()


def test_imbalance_factor_and_activation_frequency_by_hand():
    assert imbalance_factor([[5, 5], [5, 5]]) == pytest.approx(1.0)
    assert imbalance_factor([10, 0]) == pytest.approx(2.0)  # everything in one of two lists
    assert imbalance_factor([3, 1]) == pytest.approx(2 * 10 / 16)
    np.testing.assert_allclose(activation_frequency([[3, 1], [2, 2]]), [0.75, 0.5, 0.5, 0.25])
    with pytest.raises(ParameterError):
        imbalance_factor([0, 0])


def _clustered(n: int = 600, d: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((3, d)) * 3  # three clusters of unequal size: codes collapse without L_UR
    X = centres[rng.choice(3, size=n, p=[0.7, 0.2, 0.1])] + rng.standard_normal((n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def test_training_is_deterministic_and_the_regularizer_balances_the_index():
    X = _clustered()
    params = dict(n_chunks=4, chunk_size=8, batch_size=200, epochs=40, lr=1e-2, progress=False)
    a = CompositeCodeAE(**params).fit(X)
    b = CompositeCodeAE(**params).fit(X)
    np.testing.assert_array_equal(a.encode(X), b.encode(X))
    assert [h["loss"] for h in a.history_] == [h["loss"] for h in b.history_]
    assert a.history_[-1]["mse"] < a.history_[0]["mse"]  # it learns to reconstruct
    regularized = CompositeCodeAE(reg=1.0, **params).fit(X)
    plain_imbalance = imbalance_factor(CodeIndex(4, 8).add(a.encode(X)).list_sizes)
    reg_imbalance = imbalance_factor(CodeIndex(4, 8).add(regularized.encode(X)).list_sizes)
    assert reg_imbalance < plain_imbalance
    assert a.reconstruct(X).shape == X.shape


def test_errors():
    with pytest.raises(ParameterError, match="reg"):
        CompositeCodeAE(reg=-1.0).fit(_clustered(50))
    with pytest.raises(ParameterError, match="chunk_size"):
        CompositeCodeAE(chunk_size=1).fit(_clustered(50))
    with pytest.raises(NotFittedError):
        CompositeCodeAE().encode(_clustered(5))
    with pytest.raises(ParameterError, match="codes"):
        CodeIndex(2, 4).add(np.array([[0, 4]]))
    with pytest.raises(NotFittedError):
        CodeIndex(2, 4).search(np.array([[0, 1]]), 1)


def test_sweep_and_ivf_baseline_rows_and_figures():
    from xenbench.ccsa import balance_sweep, ivf_baseline
    from xenbench.plots import activation_frequency_lines, recall_vs_scored

    X = _clustered(400)
    Q = X[:40]  # queries that are items: their own row is their exact top-1
    results, freqs = balance_sweep(X, Q, [0.0, 1.0], [100], n_chunks=4, chunk_size=8, k=1, m=20, epochs=5,
                                   lr=1e-2, progress=False)
    assert list(results["reg"]) == [0.0, 1.0] and (results["steps"] == 5 * 4).all()
    assert set(freqs) == {(0.0, 100), (1.0, 100)}
    assert all(f.size == 32 and np.isclose(f.sum(), 4.0) for f in freqs.values())  # C chunks, each sums to 1
    ivf, sizes = ivf_baseline(X, Q, 8, [1, 8], k=1, m=20)
    assert sizes.sum() == 400 and ivf["scored"].iloc[-1] == 400  # probing every list reads every item
    assert ivf["recall"].iloc[-1] == 1.0  # ... and finds each query's exact top-1 (itself)
    assert len(recall_vs_scored(results, ivf).data) == 2
    assert len(activation_frequency_lines({str(key): f for key, f in freqs.items()}, 8).data) == 2
