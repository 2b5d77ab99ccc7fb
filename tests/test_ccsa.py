"""CCSA: Eq. 5 by hand, the straight-through Gumbel-softmax, the inverted index against brute-force code
matching, faiss's imbalance factor on hand cases, determinism and the regularizer's effect on balance."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from xenbench.methods.ccsa import (
    code_candidates,
    CodeIndex,
    CompositeCodeAE,
    _hard_gumbel_softmax,
    activation_frequency,
    code_bytes,
    imbalance_factor,
    normalized_uniformity_loss,
    uniformity_loss,
    ur_noise_floor,
)
from xenbench.studies.ccsa import exact_rerank, faiss_ivf, pq_for_bytes
from xenbench.methods.cur import NotFittedError
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
    D, I = index.search(queries, k=10)
    assert D.dtype == np.float32 and I.dtype == np.int64 and D.shape == I.shape == (7, 10)  # the search contract
    scored = index.postings(queries)
    shared = (queries[:, None, :] == codes[None, :, :]).sum(-1)  # (7, 50)
    for r in range(7):
        want = sorted(np.nonzero(shared[r])[0], key=lambda j: (-shared[r, j], j))[:10]
        np.testing.assert_array_equal(I[r, :len(want)], want)
        np.testing.assert_array_equal(D[r, :len(want)], shared[r, want])
        assert (I[r, len(want):] == -1).all() and (D[r, len(want):] == 0).all()
        assert scored[r] == index.list_sizes[np.arange(6), queries[r]].sum()
    # many ties, k larger than the hits of some queries: the same rule on a bigger random case
    codes, queries = rng.integers(0, 16, size=(400, 3)), rng.integers(0, 16, size=(30, 3))
    D, I = CodeIndex(3, 16).add(codes).search(queries, k=40)
    shared = (queries[:, None, :] == codes[None, :, :]).sum(-1)
    for r in range(30):
        want = sorted(np.nonzero(shared[r])[0], key=lambda j: (-shared[r, j], j))[:40]
        np.testing.assert_array_equal(I[r], np.pad(want, (0, 40 - len(want)), constant_values=-1))


def _brute_topk(codes, queries, k):
    shared = (queries[:, None, :] == codes[None, :, :]).sum(-1)
    D, I = np.zeros((len(queries), k), np.float32), np.full((len(queries), k), -1, np.int64)
    for r in range(len(queries)):
        want = sorted(np.nonzero(shared[r])[0], key=lambda j: (-shared[r, j], j))[:k]
        I[r, :len(want)], D[r, :len(want)] = want, shared[r, want]
    return D, I


@pytest.mark.parametrize("seed", range(6))
def test_search_equals_brute_force_on_skewed_codes(seed):
    # Skewed code frequencies (crowded lists, many ties at the threshold), k from 1 to all items, queries whose
    # lists hold fewer than k items: always the brute-force answer, also for code_candidates' shortlist.
    rng = np.random.default_rng(seed)
    C, L, n = int(rng.integers(1, 7)), int(rng.integers(2, 12)), int(rng.integers(1, 300))
    p = rng.dirichlet(np.full(L, 0.3))
    codes, queries = rng.choice(L, size=(n, C), p=p), rng.choice(L, size=(25, C))
    index = CodeIndex(C, L).add(codes)
    for k in sorted({1, int(rng.integers(1, n + 1)), n}):
        want = _brute_topk(codes, queries, k)
        D, I = index.search(queries, k)
        np.testing.assert_array_equal(I, want[1])
        np.testing.assert_array_equal(D, want[0])
        short, _, _ = code_candidates(index, queries, shortlist=k)
        for r in range(len(queries)):
            np.testing.assert_array_equal(short[r], want[1][r][want[1][r] >= 0])


def test_search_counts_beyond_255_shared_codes():
    # C = 300 chunks: scores above a byte's range need the kernel's wider counter
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 2, size=(40, 300))
    queries = np.vstack([codes[7], rng.integers(0, 2, size=(3, 300))])
    want = _brute_topk(codes, queries, 5)
    D, I = CodeIndex(300, 2).add(codes).search(queries, 5)
    assert D[0, 0] == 300 and I[0, 0] == 7
    np.testing.assert_array_equal(I, want[1])
    np.testing.assert_array_equal(D, want[0])


def test_search_from_threads_and_after_pickling_gives_the_same_answer():
    # the kernel reuses per-thread scratch arrays: concurrent searches must not see each other's counts, and a
    # pickled index (scratch dropped) must search the same
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    codes, queries = rng.integers(0, 8, size=(2000, 6)), rng.integers(0, 8, size=(64, 6))
    index = CodeIndex(6, 8).add(codes)
    want = index.search(queries, 50)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda r: index.search(queries[r:r + 1], 50), range(len(queries))))
    np.testing.assert_array_equal(np.vstack([I for _, I in got]), want[1])
    np.testing.assert_array_equal(np.vstack([D for D, _ in got]), want[0])
    again = pickle.loads(pickle.dumps(index))
    for a, b in zip(again.search(queries, 50), want):
        np.testing.assert_array_equal(a, b)


def test_search_of_an_index_of_one_item_and_of_queries_sharing_nothing():
    index = CodeIndex(2, 4).add(np.array([[1, 2]]))
    D, I = index.search(np.array([[1, 2], [0, 0], [1, 0]]), 1)
    np.testing.assert_array_equal(I, [[0], [-1], [0]])
    np.testing.assert_array_equal(D, [[2], [0], [1]])
    D, I = index.search(np.zeros((0, 2), np.int64), 1)
    assert D.shape == I.shape == (0, 1)


def test_code_candidates_are_the_unique_items_of_the_query_lists():
    rng = np.random.default_rng(1)
    codes, queries = rng.integers(0, 8, size=(200, 4)), rng.integers(0, 8, size=(9, 4))
    index = CodeIndex(4, 8).add(codes)
    cands, postings, sharing = code_candidates(index, queries)
    short, _, short_sharing = code_candidates(index, queries, shortlist=5)
    shared = (queries[:, None, :] == codes[None, :, :]).sum(-1)
    # a shortlist caps what is returned, not what is counted as sharing a code
    np.testing.assert_array_equal(sharing, (shared > 0).sum(1))
    np.testing.assert_array_equal(short_sharing, sharing)
    for r in range(9):
        np.testing.assert_array_equal(cands[r], np.nonzero(shared[r])[0])
        np.testing.assert_array_equal(short[r], sorted(np.nonzero(shared[r])[0], key=lambda j: (-shared[r, j], j))[:5])
    np.testing.assert_array_equal(postings, index.postings(queries))


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


def test_encode_folds_batchnorm_into_the_linear_layer():
    # encode (numpy, BatchNorm folded into W', b') = arg-max of the torch network's eval-mode logits e(x)
    X = _clustered()
    ae = CompositeCodeAE(n_chunks=4, chunk_size=8, batch_size=200, epochs=5, lr=1e-2, progress=False,
                         device="cpu").fit(X)
    assert ae.net_.norm.running_var.sub(1).abs().max() > 0.1  # the running statistics are far from identity
    with torch.inference_mode():
        logits = ae.net_.logits(torch.from_numpy(X)).double().numpy()
    W, b = ae.encoder_
    np.testing.assert_allclose(X.astype(np.float64) @ W + b, logits.reshape(len(X), -1), atol=1e-4)
    top2 = np.sort(logits, axis=-1)[..., -2:]
    clear = (top2[..., 1] - top2[..., 0]) > 1e-3  # rows whose arg-max cannot flip with float32 rounding
    assert clear.mean() > 0.99
    np.testing.assert_array_equal(ae.encode(X)[clear], logits.argmax(-1)[clear])
    np.testing.assert_array_equal(ae.encode(X[3:4]), ae.encode(X)[3:4])  # one row = the same row in a batch


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


@pytest.mark.parametrize("bad", [4, -1])
def test_search_rejects_a_code_outside_the_chunk_and_stays_usable(bad):
    # The range check of search runs inside the kernel: a bad code in any row gives the shared 'codes' error before
    # anything is counted, so the next search (through the same per-thread scratch) is still exact.
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, (40, 3))
    queries = rng.integers(0, 4, (5, 3))
    index = CodeIndex(3, 4).add(codes)
    broken = queries.copy()
    broken[3, 1] = bad
    with pytest.raises(ParameterError, match=r"'codes' parameter of CodeIndex.search .*values in \[0, L=4\)"):
        index.search(broken, 7)
    want = _brute_topk(codes, queries, 7)
    for q in (queries, queries.astype(np.int32), queries.tolist(), np.asfortranarray(queries)):
        D, I = index.search(q, 7)
        np.testing.assert_array_equal(I, want[1])
        np.testing.assert_array_equal(D, want[0])


def test_normalized_uniformity_loss_balanced_vs_random_batch():
    C, L, B = 3, 8, 64
    # perfectly balanced: in each chunk every code is on for exactly B / L = 8 items -> 0
    balanced = torch.nn.functional.one_hot(torch.arange(B).repeat(C, 1).T % L, L).float().flatten(1)
    assert normalized_uniformity_loss(balanced, C, L).item() == pytest.approx(0.0)
    # codes drawn uniformly at random: E[L_UR^2] = C (1 - 1/L) (Binomial(B, 1/L) counts), so the mean of the
    # squared normalized loss is 1 (Monte Carlo over 4000 batches, SE ~ 0.01)
    g = torch.Generator().manual_seed(0)
    sq = [normalized_uniformity_loss(torch.nn.functional.one_hot(torch.randint(0, L, (B, C), generator=g), L)
                                     .float().flatten(1), C, L).item() ** 2 for _ in range(4000)]
    assert np.mean(sq) == pytest.approx(1.0, abs=0.05)
    assert ur_noise_floor(16, 64) == pytest.approx(np.sqrt(16 * 63 / 64))  # 3.97, the number
    # one chunk of L = 2 with all B items on one code: sums (B, 0), target B/2 -> L_UR = sqrt(B/2), floor sqrt(1/2)
    skew = torch.tensor([[1.0, 0.0]] * 8)
    assert normalized_uniformity_loss(skew, 1, 2).item() == pytest.approx(np.sqrt(4) / np.sqrt(0.5))


def test_exact_rerank_of_all_items_equals_brute_force_and_dedups():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 5)).astype(np.float32)
    Q = rng.standard_normal((7, 5)).astype(np.float32)
    every = [np.concatenate([np.arange(60), np.arange(30)]) for _ in range(7)]  # duplicates count once
    I = exact_rerank(Q, X, every, 10)
    S = Q.astype(np.float64) @ X.astype(np.float64).T
    np.testing.assert_array_equal(I, np.argsort(-S, axis=1, kind="stable")[:, :10])
    few = exact_rerank(Q[:1], X, [np.array([5, 3, 5, -1])], 4)  # fewer candidates than m: -1 pads
    assert sorted(few[0, :2]) == [3, 5] and (few[0, 2:] == -1).all()


def test_an_ivf_pq_without_polysemous_training_searches_as_faiss_default_does():
    """faiss's polysemous training (on by default in an index_factory IVF-PQ) only reorders each sub-quantizer's
    centroids: the distances and ids of a search stay the same. faiss_ivf (notebook 06's baselines, the CCSA
    benchmark) skips it."""
    import faiss

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((20, 16))

    def draw(n: int) -> np.ndarray:
        x = centers[rng.integers(0, 20, n)] + 0.4 * rng.standard_normal((n, 16))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    T, X, Q = draw(10_000), draw(1_000), draw(50)
    default = faiss.index_factory(16, "IVF8,PQ2x6", faiss.METRIC_INNER_PRODUCT)
    ref = faiss.downcast_index(default)
    ref.cp.seed = ref.pq.cp.seed = 3
    assert ref.do_polysemous_training
    default.train(T)
    default.add(X)
    index, ivf = faiss_ivf("IVF8,PQ2x6", T, X, seed=3)
    assert not ivf.do_polysemous_training

    C0, C1 = (faiss.vector_to_array(layer.pq.centroids).reshape(2, 64, 8) for layer in (ref, ivf))
    assert not np.array_equal(C0, C1)
    for a, b in zip(C0, C1):  # each sub-quantizer: the same 64 centroids, in another order
        np.testing.assert_array_equal(a[np.lexsort(a.T)], b[np.lexsort(b.T)])
    for nprobe in (1, 3, 8):
        ref.nprobe = ivf.nprobe = nprobe
        (D0, I0), (D1, I1) = default.search(Q, 200), index.search(Q, 200)
        np.testing.assert_array_equal(I1, I0)
        np.testing.assert_array_equal(D1, D0)


def test_opq_fits_its_rotation_for_the_codes_the_index_stores():
    """OPQ's objective: the distortion of the index's own codes after the rotation R. faiss_ivf trains R with a
    quantizer of the index's nbits (faiss's OPQMatrix otherwise uses 8-bit codebooks, whatever the index's codes): at
    8 bits R is faiss's own, bit for bit; at fewer bits its codes reconstruct the training rows better than under the
    8-bit R, and faiss keeps no pointer to the quantizer that trained it."""
    import faiss

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((20, 8))
    x = centers[rng.integers(0, 20, 700)] + 0.4 * rng.standard_normal((700, 8)) * np.linspace(0.2, 2, 8)
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    T, X = x[:600], x[600:]

    def rotation(index) -> np.ndarray:
        opq = faiss.downcast_VectorTransform(index.chain.at(0))
        assert opq.pq is None
        return faiss.vector_to_array(opq.A).reshape(8, 8)

    def distortion(R: np.ndarray, nbits: int) -> float:
        Y = np.ascontiguousarray(T @ R.T, dtype=np.float32)
        pq = faiss.ProductQuantizer(8, 2, nbits)
        pq.train(Y)
        return float(((pq.decode(pq.compute_codes(Y)) - Y) ** 2).sum(axis=1).mean())

    default = faiss.index_factory(8, "OPQ2,IVF8,PQ2x8", faiss.METRIC_INNER_PRODUCT)
    default.train(T)
    R8 = rotation(faiss_ivf("OPQ2,IVF8,PQ2x8", T, X, seed=3)[0])
    np.testing.assert_array_equal(R8, rotation(default))
    for nbits in (4, 2):
        R = rotation(faiss_ivf(f"OPQ2,IVF8,PQ2x{nbits}", T, X, seed=3)[0])
        assert distortion(R, nbits) < 0.95 * distortion(R8, nbits)  # measured: 0.152 vs 0.171, 0.379 vs 0.455


def test_bytes_per_item_accounting():
    assert code_bytes(16, 64) == 16 * 6 / 8 == 12.0  # C codes of log2(L) bits
    assert code_bytes(256, 256) == 256.0
    M, nbits = pq_for_bytes(16, 64, 384)
    assert M * nbits == 16 * 6 and 384 % M == 0 and nbits == 8  # PQ12x8: 12 bytes, like the code
    assert pq_for_bytes(4, 8, 384) == (4, 3)  # 12 bits are no whole number of bytes: M = C sub-quantizers of 3 bits
    assert pq_for_bytes(256, 256, 384) == (128, 16)  # the paper's 256 bytes: 256 x 8 bits would not divide d = 384
    with pytest.raises(ParameterError, match="chunk_size"):
        code_bytes(4, 6)


def test_findings_follow_the_numbers():
    from xenbench.studies.findings.ccsa import findings

    def rows(reg, imb, rec, gold, se=0.01):
        return [{"method": "CCSA", "reg": reg, "batch_size": 100, "split": sp, "imbalance": imb, "recall": rec,
                 "recall_se": se, "gold_recall": gold, "gold_recall_se": se, "scored": 100.0, "bytes_per_item": 2.0,
                 "postings": 400.0, "sharing": 150.0 + 100 * imb} for sp in ("dev", "test")]

    # both re-rank R = 100; w = 2 touches the postings closest to CCSA's 400
    base = [{"method": "IVF-PQ", "nprobe": w, "split": sp, "bytes_per_item": 2.0, "scored": 100.0, "postings": p,
             "recall": r, "recall_se": 0.01, "gold_recall": r, "gold_recall_se": 0.01}
            for w, p, r in ((1, 200.0, 0.3), (2, 380.0, 0.5), (4, 800.0, 0.7)) for sp in ("dev", "test")]
    res = {"by_reg": rows(0.0, 1.8, 0.5, 0.4) + rows(1.0, 1.1, 0.8, 0.6), "by_batch": rows(1.0, 1.1, 0.8, 0.6),
           "baselines": base}
    text = findings(res)
    assert "λ = 0: imbalance 1.80, 330 items sharing a code with a query" in text[0]
    assert "λ = 1: imbalance 1.10, 260 items sharing a code with a query" in text[0]
    assert "Top-k-Recall +0.300 vs λ = 0 (higher)" in text[0] and "falls monotonically with λ" in text[0]
    assert "λ chosen on dev per seed: 1;" in text[1] and "IVF-PQ (w = 2" in text[1] and "beats (0.800 vs 0.500)" in text[1]
    assert "400 postings touched, 100 items re-ranked" in text[1] and "NOT equal work" not in text[1]
    res["by_reg"] = rows(0.0, 1.8, 0.8, 0.6) + rows(1.0, 1.1, 0.5, 0.595)
    text = findings(res)
    assert "Top-k-Recall -0.300 vs λ = 0 (lower)" in text[0] and "gold Recall@k -0.005 vs λ = 0 (level)" in text[0]
    assert "λ chosen on dev per seed: 0;" in text[1]


def test_findings_flag_a_comparison_at_unequal_re_ranking_work():
    from xenbench.studies.findings.ccsa import findings

    def rows(scored_ccsa, scored_pq, postings_ccsa=1000.0, postings_pq=1000.0):
        by_reg = [{"reg": 0.0, "batch_size": 10, "split": sp, "imbalance": 1.2, "recall": 0.8, "gold_recall": 0.5,
                   "scored": scored_ccsa, "postings": postings_ccsa, "bytes_per_item": 2.0, "recall_se": 0.01,
                   "gold_recall_se": 0.01, "n": 50} for sp in ("dev", "test")]
        base = [{"method": "IVF-PQ", "nprobe": 2, "split": sp, "bytes_per_item": 2.0, "scored": scored_pq,
                 "postings": postings_pq, "recall": 0.5, "gold_recall": 0.4, "recall_se": 0.01, "gold_recall_se": 0.01,
                 "n": 50} for sp in ("dev", "test")]
        return {"by_reg": by_reg, "by_batch": [], "baselines": base}

    # an uncapped CCSA (results written before it took the shortlist) re-ranks far more than the capped IVF-PQ
    flagged = " ".join(findings(rows(16000.0, 1000.0)))
    assert "NOT equal work: CCSA re-ranks 16× as many):" in flagged
    assert "NOT equal work: CCSA touches 0.2× as many)" in " ".join(findings(rows(1000.0, 1000.0, 200.0, 1000.0)))
    # IVF-Flat re-ranks all it probes: a capped CCSA re-ranks a small fraction of that, and the ratio says how small
    assert "NOT equal work: CCSA re-ranks 0.0453× as many)" in " ".join(findings(rows(1000.0, 22086.0)))
    both = " ".join(findings(rows(16000.0, 1000.0, 3000.0, 1000.0)))
    assert "NOT equal work: CCSA re-ranks 16× as many, CCSA touches 3× as many)" in both
    assert "NOT equal work" not in " ".join(findings(rows(1200.0, 1000.0, 1900.0, 1000.0)))


def test_findings_over_seeds_need_the_interval_across_seeds_to_exclude_zero():
    from xenbench.studies.findings.ccsa import findings

    def rows(seed, reg, rec, imb=1.2):
        return [{"method": "CCSA", "reg": reg, "batch_size": 100, "split": sp, "imbalance": imb, "recall": rec,
                 "recall_se": 0.001, "gold_recall": rec, "gold_recall_se": 0.001, "scored": 100.0,
                 "postings": 300.0, "bytes_per_item": 2.0, "seed": seed} for sp in ("dev", "test")]

    base = [{"method": "IVF-PQ", "nprobe": 2, "split": sp, "bytes_per_item": 2.0, "scored": 100.0, "postings": 300.0,
             "recall": 0.5,
             "recall_se": 0.001, "gold_recall": 0.5, "gold_recall_se": 0.001, "seed": seed}
            for seed in (0, 1, 2) for sp in ("dev", "test")]
    # λ 0 -> 1 changes recall by +0.10, +0.12, +0.08 over 3 seeds: mean +0.10, t-interval (2 df) +0.05 to +0.15.
    steady = [r for seed, d in zip((0, 1, 2), (0.10, 0.12, 0.08)) for r in rows(seed, 0.0, 0.6) + rows(seed, 1.0, 0.6 + d)]
    text = findings({"by_reg": steady, "by_batch": [], "baselines": base})
    assert "Top-k-Recall +0.100 [+0.050, +0.150] vs λ = 0 (higher)" in text[0]
    assert "λ = 1: imbalance 1.20 [1.20, 1.20]" in text[0]  # identical imbalance in every seed
    # Per-query SEs are tiny, but the seeds disagree in sign: within noise across seeds.
    noisy = [r for seed, d in zip((0, 1, 2), (0.10, -0.12, 0.05)) for r in rows(seed, 0.0, 0.6) + rows(seed, 1.0, 0.6 + d)]
    text = findings({"by_reg": noisy, "by_batch": [], "baselines": base})
    assert "vs λ = 0 (level)" in text[0] and "(higher)" not in text[0]
    assert "λ chosen on dev per seed: 0, 1;" in text[1]  # seed 1 prefers λ = 0 on dev


def test_eval_split_draws_the_evaluated_rows_and_halves_them_into_dev_and_test():
    from xenbench.studies.protocol import Split
    from xenbench.studies.ccsa import eval_split, evaluated_rows

    split = eval_split(100, 41, 5)
    assert isinstance(split, Split) and split.anchor.size == 0 and split.seed == 5  # CCSA trains on every query
    assert (split.dev.size, split.test.size) == (20, 21) and not np.intersect1d(split.dev, split.test).size
    # the rows the committed results of notebook 06 were computed on: a seeded draw, half of it dev by a second seed
    rows = np.sort(np.random.default_rng(5).choice(100, 41, replace=False))
    np.testing.assert_array_equal(split.dev, np.sort(rows[np.random.default_rng(6).permutation(41)[:20]]))
    got, part = evaluated_rows(split)
    np.testing.assert_array_equal(got, rows)
    assert list(part[np.isin(rows, split.dev)]) == ["dev"] * 20 and (part[~np.isin(rows, split.dev)] == "test").all()
    assert eval_split(10, 50, 0).dev.size + eval_split(10, 50, 0).test.size == 10  # at most every query


def test_over_seeds_means_and_t_interval():
    from scipy import stats

    from xenbench.studies.ccsa import over_seeds

    df = pd.DataFrame({"method": "CCSA", "split": "test", "seed": [0, 1, 2], "recall": [0.5, 0.6, 0.7],
                       "recall_se": [0.01, 0.01, 0.01], "bytes_per_item": 2.0})
    row = over_seeds(df, ["method", "split"]).iloc[0]
    half = stats.t.ppf(0.975, 2) * 0.1 / np.sqrt(3)
    assert row["recall"] == pytest.approx(0.6) and row["n_seeds"] == 3
    assert (row["recall_lo"], row["recall_hi"]) == (pytest.approx(0.6 - half), pytest.approx(0.6 + half))
    assert row["recall_se"] == pytest.approx(0.1 / np.sqrt(3)) and row["bytes_per_item"] == 2.0
    one = over_seeds(df[df["seed"] == 0], ["method", "split"]).iloc[0]
    assert one["recall_se"] == 0.01 and np.isnan(one["recall_lo"])  # one seed: the per-query SE stays


def test_sweep_and_baselines_rows_and_figures():
    import scipy.sparse as sp

    from xenbench.studies.ccsa import balance_sweep, eval_split, evaluated_rows, exact_ip_topk, faiss_baselines
    from xenbench.viz.plots import activation_frequency_lines, recall_vs_postings

    X = _clustered(400, d=16)
    Q = X[:40]  # queries that are items: their own row is their exact top-1 and their gold item
    relevant = sp.csr_matrix((np.ones(40), (np.arange(40), np.arange(40))), shape=(40, 400))
    _, split = evaluated_rows(eval_split(40, 40, 0))
    exact = exact_ip_topk(Q, X, 1)
    kw = dict(exact=exact, relevant=relevant, split=split, k=1, m=20)
    results, freqs = balance_sweep(X, X, Q, [(0.0, 100), (1.0, 100)], n_chunks=4, chunk_size=8, steps=7, lr=1e-2,
                                   progress=False, **kw)
    assert list(results["reg"]) == [0.0, 0.0, 1.0, 1.0] and (results["steps"] == 7).all()
    assert set(freqs) == {(0.0, 100), (1.0, 100)}
    assert all(f.size == 32 and np.isclose(f.sum(), 4.0) for f in freqs.values())  # C chunks, each sums to 1
    # exact re-ranking of its own posting lists always finds the query itself (it shares all C codes)
    assert (results["recall"] == 1.0).all() and (results["gold_recall"] == 1.0).all()
    assert (results["scored"] <= results["postings"]).all() and (results["scored"] == results["sharing"]).all()
    assert results["shortlist"].isna().all()
    capped, _ = balance_sweep(X, X, Q, [(0.0, 100)], n_chunks=4, chunk_size=8, steps=7, lr=1e-2, shortlist=5,
                              progress=False, **kw)
    # R = 5 keeps the five sharing the most codes: a fixed re-ranking budget, the same items counted as sharing a code
    assert (capped["scored"] == 5).all() and (capped["shortlist"] == 5).all()
    np.testing.assert_array_equal(capped["sharing"], results["sharing"].iloc[:2])
    base = faiss_baselines(X, X, Q, 8, [1, 8], pq=(4, 8), shortlist=50, **kw)
    flat = base[base["method"] == "IVF-Flat"]
    assert (flat["postings"].iloc[-2:] == 400).all() and (flat["scored"] == flat["postings"]).all()
    assert (flat["recall"].iloc[-2:] == 1.0).all()  # probing every list re-ranks every item: exact
    assert set(base["method"]) == {"IVF-Flat", "IVF-PQ", "OPQ+IVF-PQ"}
    assert len(recall_vs_postings(pd.concat([results, base]), k=1, m=20).data) == 4
    assert len(activation_frequency_lines({str(key): f for key, f in freqs.items()}, 8).data) == 2


def test_study_repeats_every_experiment_per_seed_and_matches_one_direct_run():
    import scipy.sparse as sp

    from xenbench.studies.ccsa import balance_sweep, eval_split, evaluated_rows, exact_ip_topk, study

    X = _clustered(300, d=16)
    queries = X[:60]
    relevant = sp.csr_matrix((np.ones(60), (np.arange(60), np.arange(60))), shape=(60, 300))
    kw = dict(regs=[0.0, 1.0], batch_size=50, batch_sizes=[50, 100], reg_for_batches=1.0, n_chunks=4, chunk_size=4,
              nprobes=[1, 2], binary_bits=8, n_eval_queries=40, k=5, m=10, shortlist=50, steps=4, progress=False,
              device="cpu")
    res = study(X, X, queries, relevant, seeds=[0, 1], **kw)
    assert res.by_reg.groupby("seed").size().to_dict() == {0: 4, 1: 4}  # 2 λ × (dev, test) per seed
    assert sorted(set(zip(res.by_batch["reg"], res.by_batch["batch_size"]))) == [(1.0, 50), (1.0, 100)]
    assert set(res.baselines["seed"]) == set(res.binary["seed"]) == {0, 1}
    assert set(res.frequencies) == {(0.0, 50), (1.0, 50), (1.0, 100)}

    rows, split = evaluated_rows(eval_split(60, 40, 1))  # seed 1, run by hand
    direct, _ = balance_sweep(X, X, queries[rows], [(0.0, 50), (1.0, 50)], exact=exact_ip_topk(queries[rows], X, 5),
                              relevant=relevant[rows], split=split, n_chunks=4, chunk_size=4, k=5, m=10, steps=4,
                              shortlist=50, seed=1, progress=False, device="cpu")
    got = res.by_reg[res.by_reg["seed"] == 1].drop(columns="seed").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, direct)
    again = study(X, X, queries, relevant, seeds=[0, 1], **kw)
    pd.testing.assert_frame_equal(again.by_reg, res.by_reg)  # same seeds, same numbers
    with pytest.raises(ParameterError, match="'seeds' parameter of study"):
        study(X, X, queries, relevant, seeds=[0, 0], **kw)


def test_faiss_baselines_name_a_training_set_too_small_for_the_quantizers():
    import scipy.sparse as sp

    from xenbench.studies.ccsa import faiss_baselines

    X = _clustered(100, d=16)
    with pytest.raises(ParameterError, match=r"'train' parameter of faiss_baselines must be at least 256 rows to "
                                             r"train 4 IVF lists, PQ1x8 and OPQ. Got '100 rows'"):
        faiss_baselines(X, X, X[:10], 4, [1], exact=np.zeros((10, 5), np.int64), relevant=sp.csr_matrix((10, 100)),
                        split=np.array(["dev", "test"] * 5, dtype=object), pq=(1, 8))
