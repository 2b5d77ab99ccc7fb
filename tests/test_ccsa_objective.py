"""CCSA's two objectives (the paper's Eq. 6 taken literally and xenbench's normalized variant) on hand cases, the
stopping rule, the sampling model of Eq. 5's batch estimate, and the convergence experiment of notebook 06."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xenbench.errors import ParameterError
from xenbench.methods.ccsa import (
    CodeIndex,
    CompositeCodeAE,
    _stalled,
    ccsa_loss,
    code_usage,
    expected_uniformity_sq,
    imbalance_factor,
    uniformity_loss,
    ur_noise_floor,
)
from xenbench.studies.ccsa import train_to_convergence

pytestmark = pytest.mark.usefixtures("one_thread")


def _clustered(n: int = 400, d: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((3, d)) * 3
    X = centres[rng.choice(3, size=n, p=[0.7, 0.2, 0.1])] + rng.standard_normal((n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def test_paper_objective_is_mse_plus_lambda_times_eq5_by_hand():
    # B = 2 items, d = 2, one chunk of L = 2, both items on code 0.
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    decoded = torch.tensor([[0.5, 0.0], [0.0, 0.0]])  # squared errors 0.25, 0, 0, 1
    codes = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # column sums (2, 0), target B / L = 1
    # Eq. 5: sqrt(((2 - 1)^2 + (0 - 1)^2) / B) = sqrt(2 / 2) = 1; MSE over the B·d = 4 entries: 1.25 / 4
    loss, mse, ur = ccsa_loss(x, decoded, codes, reg=10.0, n_chunks=1, chunk_size=2, objective="paper")
    assert ur.item() == pytest.approx(1.0) and mse.item() == pytest.approx(0.3125)
    assert loss.item() == pytest.approx(0.3125 + 10 * 1.0)
    # normalized: squared error summed over d, averaged over B (0.625) + λ · L_UR / sqrt(C (1 - 1/L)) = 1 / sqrt(0.5)
    loss, mse, ur = ccsa_loss(x, decoded, codes, reg=10.0, n_chunks=1, chunk_size=2)
    assert loss.item() == pytest.approx(0.625 + 10 / np.sqrt(0.5))
    assert mse.item() == pytest.approx(0.3125) and ur.item() == pytest.approx(1.0)  # logged the same either way
    # λ = 0: the paper's loss is the MSE, the normalized one d times it
    assert ccsa_loss(x, decoded, codes, reg=0.0, n_chunks=1, chunk_size=2, objective="paper")[0].item() == \
        pytest.approx(0.3125)


@pytest.mark.parametrize("objective", ["paper", "normalized"])
def test_fit_trains_on_the_objective_it_names(objective):
    X = _clustered()
    ae = CompositeCodeAE(4, 8, reg=3.0, batch_size=100, steps=12, lr=1e-2, objective=objective, progress=False,
                         device="cpu").fit(X)
    c = ae.curve_
    assert list(c["step"]) == list(range(1, 13)) and ae.steps_ == 12 and not ae.converged_
    if objective == "paper":
        want = c["mse"] + 3.0 * c["uniformity"]
    else:
        want = c["mse"] * X.shape[1] + 3.0 * c["uniformity"] / ur_noise_floor(4, 8)
    np.testing.assert_allclose(c["loss"], want, rtol=1e-5)
    # the per-pass history is the mean of its steps (4 full batches of 100 per pass)
    assert ae.history_[0]["loss"] == pytest.approx(c["loss"].iloc[:4].mean())


def test_stopping_rule_by_hand_and_in_fit():
    assert not _stalled([5.0, 4.0, 3.0], 2, 0.1)  # fewer than two windows
    assert not _stalled([4.0, 4.0, 2.0, 2.0], 2, 0.1)  # 4 -> 2: improved by 50 %
    assert _stalled([4.0, 4.0, 3.9, 3.9], 2, 0.1)  # 4 -> 3.9: 2.5 % < 10 %
    assert _stalled([1.0, 1.0, 1.2, 1.2], 2, 0.0)  # the loss rose
    X = _clustered()
    # a tolerance no improvement can meet stops at the first check, after 2 windows
    ae = CompositeCodeAE(4, 8, batch_size=100, steps=500, tol=10.0, window=5, progress=False, device="cpu").fit(X)
    assert ae.steps_ == 10 and ae.converged_ and len(ae.curve_) == 10
    # a window longer than the cap never checks: all steps, not converged
    ae = CompositeCodeAE(4, 8, batch_size=100, steps=30, tol=1e-3, window=20, progress=False, device="cpu").fit(X)
    assert ae.steps_ == 30 and not ae.converged_
    with pytest.raises(ParameterError, match="'objective' parameter of CompositeCodeAE must be one of"):
        CompositeCodeAE(objective="raw").fit(X)
    with pytest.raises(ParameterError, match="'tol' parameter of CompositeCodeAE"):
        CompositeCodeAE(tol=-1.0).fit(X)


def test_expected_uniformity_of_a_batch_drawn_from_an_imbalanced_index():
    # Monte Carlo: B items drawn with replacement from an index of known list shares p (the same in each chunk)
    C, L, B = 2, 8, 200
    p = np.array([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
    F = imbalance_factor(p)
    rng = np.random.default_rng(0)
    sq = []
    for _ in range(3000):
        codes = torch.nn.functional.one_hot(torch.from_numpy(rng.choice(L, size=(B, C), p=p)), L).float().flatten(1)
        sq.append(uniformity_loss(codes, L).item() ** 2 / ur_noise_floor(C, L) ** 2)
    want = expected_uniformity_sq(F, C, L, B)
    assert want == pytest.approx(1 + (B - 1) * (F - 1) / (L - 1))
    assert np.mean(sq) == pytest.approx(want, rel=0.03)  # SE of the mean about 0.5 %
    assert expected_uniformity_sq(1.0, C, L, B) == pytest.approx(1.0)  # a balanced index: the noise floor


def test_code_usage_by_hand():
    assert code_usage([[3, 0], [1, 1]]) == 0.75
    assert code_usage([[0, 4, 0, 0]]) == 0.25
    with pytest.raises(ParameterError, match="list_sizes"):
        code_usage([])


def test_train_to_convergence_reports_the_index_and_the_curve():
    X = _clustered()
    table, curves = train_to_convergence(X, X, n_chunks=4, chunk_sizes=[4, 8], batch_size=100, max_steps=60,
                                         tol=1e-2, window=10, lr=1e-2, progress=False, device="cpu")
    assert list(table["chunk_size"]) == [4, 8] and set(curves) == {4, 8}
    for row in table.itertuples():
        curve = curves[row.chunk_size]
        assert len(curve) == row.steps <= 60 and row.converged == (row.steps < 60)
        # the reported index is the one the model encodes
        ae = CompositeCodeAE(4, row.chunk_size, batch_size=100, steps=60, tol=1e-2, window=10, lr=1e-2,
                             progress=False, device="cpu").fit(X)
        sizes = CodeIndex(4, row.chunk_size).add(ae.encode(X)).list_sizes
        assert row.imbalance == pytest.approx(imbalance_factor(sizes)) and row.code_usage == code_usage(sizes)
        assert row.mse == pytest.approx(curve["mse"].tail(10).mean())
        assert row.detectable_imbalance == pytest.approx((row.chunk_size - 1) / 99)


def test_study_adds_the_paper_objective_sweep_with_its_own_learning_rate():
    import pandas as pd
    import scipy.sparse as sp

    from xenbench.studies.ccsa import balance_sweep, eval_split, evaluated_rows, exact_ip_topk, study

    X = _clustered(300, d=16)
    queries = X[:60]
    relevant = sp.csr_matrix((np.ones(60), (np.arange(60), np.arange(60))), shape=(60, 300))
    res = study(X, X, queries, relevant, seeds=[3], regs=[0.0], batch_size=50, batch_sizes=[50], reg_for_batches=0.0,
                n_chunks=4, chunk_size=4, nprobes=[1], binary_bits=8, n_eval_queries=40, k=5, m=10, shortlist=50,
                steps=4, lr=1e-3, paper_regs=[0.0, 10.0], paper_lr=1e-2, progress=False, device="cpu")
    assert (res.by_reg["objective"] == "normalized").all() and (res.paper_objective["objective"] == "paper").all()
    assert set(res.paper_frequencies) == {0.0, 10.0}
    rows, split = evaluated_rows(eval_split(60, 40, 3))
    direct, _ = balance_sweep(X, X, queries[rows], [(0.0, 50), (10.0, 50)], exact=exact_ip_topk(queries[rows], X, 5),
                              relevant=relevant[rows], split=split, n_chunks=4, chunk_size=4, k=5, m=10, steps=4,
                              shortlist=50, seed=3, lr=1e-2, objective="paper", progress=False, device="cpu")
    pd.testing.assert_frame_equal(res.paper_objective.drop(columns="seed"), direct)
    none = study(X, X, queries, relevant, seeds=[3], regs=[0.0], batch_size=50, batch_sizes=[50], reg_for_batches=0.0,
                 n_chunks=4, chunk_size=4, nprobes=[1], binary_bits=8, n_eval_queries=40, k=5, m=10, shortlist=50,
                 steps=4, progress=False, device="cpu")
    assert none.paper_objective.empty and none.paper_frequencies == {}


def test_quick_profile_trains_every_faiss_quantizer_on_39_rows_per_centroid():
    # faiss warns ("please provide at least 39 * k training points") below 39 rows per centroid: the quick profile's
    # corpus must cover the IVF lists (L), the PQ codebooks of CCSA's bytes, OPQ's inner 8-bit PQ and HNSW's PQ
    from xenbench.data.sources import load_dataset
    from xenbench.studies.ccsa import pq_for_bytes
    from xenbench.harness import load_spec, profile_values
    from xenbench.studies.corpus import corpus_specs

    quick = profile_values(load_spec("06_ccsa_balance"), "quick")
    rows = sum(len(ds.items) + len(ds.queries) for ds in map(load_dataset, corpus_specs(quick["dataset"])))
    _, nbits = pq_for_bytes(quick["n_chunks"], quick["chunk_size"], 384)
    centroids = max(quick["chunk_size"], 2**nbits, 256)  # 256: OPQ's inner PQ and HNSW-PQ are 8-bit
    assert rows >= 39 * centroids, (rows, centroids)
