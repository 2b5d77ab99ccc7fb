"""Sparse matrix factorization for AXN (§2.1): the observed pattern, fitting observed CE scores,
the gated MLP starting as the identity, determinism and errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xenbench.methods.cur import NotFittedError
from xenbench.errors import ParameterError
from xenbench.methods.mf import MatrixFactorization, _GatedMLP, observed_pairs

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def problem():
    """Training-query and item 'DE' embeddings, and CE scores that are a bilinear function of them."""
    rng = np.random.default_rng(0)
    Q, V = rng.standard_normal((40, 8)), rng.standard_normal((120, 8))
    W = np.eye(8) + 0.5 * rng.standard_normal((8, 8))
    G = 3.0 * (Q @ W) @ V.T  # what the CE "scores": the DE's geometry, distorted and rescaled
    return Q, V, G


def test_observed_pairs_top_and_random():
    scores = np.array([[0.1, 0.9, 0.5, 0.9], [0.3, 0.2, 0.1, 0.0]])
    rows, cols = observed_pairs(2, 4, 2, retriever_scores=scores)
    np.testing.assert_array_equal(rows, [0, 0, 1, 1])
    np.testing.assert_array_equal(cols, [1, 3, 0, 1])  # ties to the lower item
    r1, c1 = observed_pairs(5, 30, 7, seed=3)
    r2, c2 = observed_pairs(5, 30, 7, seed=3)
    np.testing.assert_array_equal(c1, c2)
    assert all(len(set(c1[r1 == q])) == 7 for q in range(5))  # distinct items per query


@pytest.mark.parametrize("kind", ["trns", "ind"])
def test_fitting_reduces_the_error_on_observed_scores(problem, kind):
    Q, V, G = problem
    rows, cols = observed_pairs(40, 120, 30, seed=0)
    mf = MatrixFactorization(kind, epochs=60, lr=0.05, batch_size=256, progress=False)
    mf.fit(Q, V, rows, cols, G[rows, cols])
    assert mf.history_[-1] < mf.history_[0] / 100
    assert mf.item_embeddings_.shape == V.shape
    again = MatrixFactorization(kind, epochs=60, lr=0.05, batch_size=256, progress=False).fit(Q, V, rows, cols,
                                                                                          G[rows, cols])
    np.testing.assert_array_equal(again.item_embeddings_, mf.item_embeddings_)  # seeded


def test_inductive_model_scores_unseen_queries(problem):
    Q, V, G = problem
    rows, cols = observed_pairs(30, 120, 40, seed=1)  # queries 30..39 are never observed
    mf = MatrixFactorization("ind", epochs=80, lr=0.02, batch_size=256, progress=False).fit(
        Q[:30], V, rows, cols, G[rows, cols])
    U_new = mf.transform_queries(Q[30:])
    pred = U_new @ mf.item_embeddings_.T
    de = Q[30:] @ V.T  # the starting point: the DE's own inner products
    corr = lambda a, b: np.mean([np.corrcoef(x, y)[0, 1] for x, y in zip(a, b)])  # noqa: E731
    assert corr(pred, G[30:]) > corr(de, G[30:])


def test_gated_mlp_starts_close_to_the_identity():
    torch.manual_seed(0)
    net, x = _GatedMLP(8), torch.randn(5, 8)
    assert torch.allclose(net(x), x, atol=0.05)  # σ(−5) ≈ 0.007 of the MLP is mixed in


def test_errors(problem):
    Q, V, G = problem
    rows, cols = observed_pairs(40, 120, 5)
    with pytest.raises(ParameterError, match="kind"):
        MatrixFactorization("svd").fit(Q, V, rows, cols, G[rows, cols])
    with pytest.raises(ParameterError, match="rows, cols, values"):
        MatrixFactorization(progress=False).fit(Q, V, rows, cols + 200, G[rows, cols])
    trns = MatrixFactorization("trns", epochs=1, progress=False).fit(Q, V, rows, cols, G[rows, cols])
    with pytest.raises(ParameterError, match="kind"):
        trns.transform_queries(Q)
    with pytest.raises(NotFittedError):
        MatrixFactorization().transform_queries(Q)


# ----------------------------------------------------------------------------------------------
# device
# ----------------------------------------------------------------------------------------------
def _fit(problem, kind, **device):
    Q, V, G = problem
    rows, cols = observed_pairs(30, 120, 20, seed=2)
    mf = MatrixFactorization(kind, epochs=5, lr=0.02, batch_size=64, progress=False, **device).fit(
        Q[:30], V, rows, cols, G[rows, cols])
    return mf, (mf.transform_queries(Q[30:]) if kind == "ind" else None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the default device is CUDA on this machine")
@pytest.mark.parametrize("kind", ["trns", "ind"])
def test_explicit_cpu_equals_the_default_device(problem, kind):
    default, u_default = _fit(problem, kind)
    explicit, u_explicit = _fit(problem, kind, device="cpu")
    assert default.device_ == explicit.device_ == torch.device("cpu")
    np.testing.assert_array_equal(default.item_embeddings_, explicit.item_embeddings_)
    assert default.history_ == explicit.history_
    if kind == "ind":
        np.testing.assert_array_equal(u_default, u_explicit)


@pytest.mark.parametrize("kind", ["trns", "ind"])
def test_it_trains_on_the_device_it_is_given(problem, kind):
    # "cpu:0" is the CPU under another name: the same numbers, and the parameters say where they live
    mf, u = _fit(problem, kind, device="cpu:0")
    assert mf.device_ == torch.device("cpu:0")
    params = [mf.U_, mf.V_] if kind == "trns" else [*mf.query_net_.parameters(), *mf.item_net_.parameters()]
    assert {p.device.type for p in params} == {"cpu"}
    plain, u_plain = _fit(problem, kind, device="cpu")
    np.testing.assert_array_equal(mf.item_embeddings_, plain.item_embeddings_)
    assert mf.item_embeddings_.dtype == np.float64 and (u is None or u.dtype == np.float64)


@pytest.mark.parametrize("device,message", [
    ("gpu", "must be 'auto', 'cpu', 'cuda', 'cuda:<k>' or 'mps'. Got 'gpu'"),
    pytest.param("cuda", "must be 'auto' or 'cpu': CUDA is not available on this machine. Got 'cuda'",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_a_bad_device_is_one_clear_error(problem, device, message):
    with pytest.raises(ParameterError, match=rf"^The 'device' parameter of MatrixFactorization {message}"):
        _fit(problem, "ind", device=device)


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["trns", "ind"])
def test_cuda_gives_the_cpu_embeddings(problem, kind):
    cpu, u_cpu = _fit(problem, kind, device="cpu")
    cuda, u_cuda = _fit(problem, kind, device="cuda")
    assert cuda.device_.type == "cuda"
    # the same initialization and pair order (drawn on the CPU); float32 round-off only
    np.testing.assert_allclose(cuda.item_embeddings_, cpu.item_embeddings_, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(cuda.history_, cpu.history_, rtol=1e-3)
    if kind == "ind":
        np.testing.assert_allclose(u_cuda, u_cpu, rtol=1e-3, atol=1e-3)


def test_the_seed_is_part_of_the_fit(problem):
    # the protocol of notebook 04 fits MF-IND once per run with the run's seed: a seed must change the fit (the
    # initialization and pair order), and the same seed must give the same fit
    Q, V, G = problem
    rows, cols = observed_pairs(40, 120, 30, seed=0)
    fit = lambda seed: MatrixFactorization("ind", epochs=2, seed=seed, progress=False).fit(Q, V, rows, cols,
                                                                                          G[rows, cols])
    a, b, again = fit(1), fit(2), fit(1)
    np.testing.assert_array_equal(a.item_embeddings_, again.item_embeddings_)
    assert not np.allclose(a.item_embeddings_, b.item_embeddings_)
    assert not np.array_equal(observed_pairs(40, 120, 30, seed=1)[1], cols)  # G's items follow the seed too
