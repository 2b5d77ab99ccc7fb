"""ADACUR: budget accounting, exactness at full budget, sampler semantics, and the batched torch
implementation agreeing with the per-query numpy reference (anchors, ranked lists, recall)."""
from __future__ import annotations


import numpy as np
import pytest
import torch

import xenbench.methods.adacur.batched as batched_engine
from xenbench.methods.adacur import AdaCur, Oracle, SearchOptions, SoftMax, TopK, keyed_uniforms, round_sizes
from xenbench.methods.adacur.batched import DeviceIndex, _AnchorState, _solve_weights, _topk_stable
from xenbench.methods.baselines import anncur_with_budget, rerank_baseline
from xenbench.methods.cur import AnnCur, NotFittedError
from xenbench.errors import ParameterError
from xenbench.metrics import BudgetCounter, topk_recall

N_ANCHOR_QUERIES, N_ITEMS = 30, 240


def low_rank_noise(n_queries: int = 70, n_items: int = N_ITEMS, rank: int = 8, noise: float = 0.1,
                   seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n_queries, rank)) @ rng.standard_normal((rank, n_items)) / np.sqrt(rank)
    return (M + noise * rng.standard_normal((n_queries, n_items))).astype(np.float32)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    M = low_rank_noise()
    return M[:N_ANCHOR_QUERIES], M[N_ANCHOR_QUERIES:]  # R_anc (k_q = 30), test queries (40)


# (name, sampler); the oracle ones mask k_m = 2 exact top items and draw ε = 1/3 at random.
SAMPLER_CASES = [
    ("topk", "topk"),
    ("softmax", SoftMax(0.5)),
    ("random", "random"),
    ("oracle_topk", Oracle(TopK(), k_m=2, epsilon=1 / 3)),
    ("oracle_softmax", Oracle(SoftMax(), k_m=2, epsilon=1 / 3)),
]


def options(implementation="batched", **engine):
    return SearchOptions(implementation=implementation, **engine)
# budget B_CE = 36; No-Split (k_i = 36) and split (k_i = 15, k_r = 21).
SPLITS = [None, 15]


def run(R, T, implementation, device=None, **params):
    params.setdefault("budget", 36)
    params.setdefault("n_rounds", 3)
    return AdaCur(options=options(implementation, device=device), **params).fit(R).run(
        T, trace_query=1, return_approx=True)


# ----------------------------------------------------------------------------------------------
# batched == reference
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_anchor_items", SPLITS, ids=["no-split", "split"])
@pytest.mark.parametrize("name,sampler", SAMPLER_CASES, ids=[c[0] for c in SAMPLER_CASES])
def test_batched_matches_reference(data, name, sampler, n_anchor_items):
    R, T = data
    ref = run(R, T, "reference", sampler=sampler, n_anchor_items=n_anchor_items)
    bat = run(R, T, "batched", sampler=sampler, n_anchor_items=n_anchor_items, device="cpu")
    np.testing.assert_array_equal(bat.anchors, ref.anchors)
    for r_ref, r_bat in zip(ref.rounds, bat.rounds, strict=True):
        np.testing.assert_array_equal(r_bat.items, r_ref.items)
        assert r_bat.n_calls == r_ref.n_calls
        np.testing.assert_allclose(r_bat.approx_scores, r_ref.approx_scores, atol=1e-5)
    np.testing.assert_array_equal(bat.I, ref.I)
    np.testing.assert_array_equal(bat.D, ref.D)
    np.testing.assert_array_equal(bat.calls, ref.calls)
    np.testing.assert_allclose(bat.approx_scores, ref.approx_scores, atol=1e-5)
    for k in (1, 10):
        assert topk_recall(T, bat.I, k) == topk_recall(T, ref.I, k)


@pytest.mark.parametrize("n_anchor_items", SPLITS, ids=["no-split", "split"])
@pytest.mark.parametrize("sampler", ["topk", "softmax"])
def test_batched_matches_reference_with_prior_scores(data, sampler, n_anchor_items):
    R, T = data
    prior = T + np.random.default_rng(7).normal(0, 1.0, T.shape)  # a noisy parametric model
    params = dict(sampler=sampler, n_anchor_items=n_anchor_items)
    mix = dict(prior_scores=prior, prior_weight=0.4, return_approx=True)
    ref = AdaCur(36, n_rounds=3, options=options("reference"), **params).fit(R).run(T, **mix)
    bat = AdaCur(36, n_rounds=3, options=options(device="cpu"), **params).fit(R).run(T, **mix)
    np.testing.assert_array_equal(bat.anchors, ref.anchors)
    np.testing.assert_array_equal(bat.I, ref.I)
    np.testing.assert_allclose(bat.approx_scores, ref.approx_scores, atol=1e-5)


@pytest.mark.parametrize("solver", ["gram", "pinv"])
def test_batched_matches_reference_with_candidates_and_chunks(data, solver):
    R, T = data
    candidates = np.argsort(-(T + np.random.default_rng(5).normal(0, 1.0, T.shape)), axis=1)  # a noisy "DE"
    params = dict(budget=40, n_anchor_items=20, n_rounds=4, sampler="softmax")
    ref = AdaCur(options=options("reference"), **params).fit(R).run(T, candidates=candidates)
    bat = AdaCur(options=options(device="cpu", solver=solver, batch_size=7), **params).fit(R).run(
        T, candidates=candidates)
    np.testing.assert_array_equal(ref.anchors[:, :5], candidates[:, :5])  # round 1 = the retriever's top k_s
    np.testing.assert_array_equal(bat.anchors, ref.anchors)
    np.testing.assert_array_equal(bat.I, ref.I)


@pytest.mark.parametrize("case", ["rank-deficient", "more-anchors-than-anchor-queries"])
def test_batched_matches_reference_on_solver_edge_cases(case):
    if case == "rank-deficient":  # exact rank 3 < a: the Cholesky path must hand over to pinv
        M = low_rank_noise(rank=3, noise=0.0, seed=2)
        params = dict(budget=24, n_rounds=4, sampler="softmax")
    else:  # a grows past k_q = 30: least squares instead of the min-norm solution
        M = low_rank_noise(seed=3)
        params = dict(budget=64, n_anchor_items=60, n_rounds=4, sampler="topk")
    R, T = M[:N_ANCHOR_QUERIES], M[N_ANCHOR_QUERIES:]
    ref = AdaCur(options=options("reference"), **params).fit(R).run(T, return_approx=True)
    bat = AdaCur(options=options(device="cpu"), **params).fit(R).run(T, return_approx=True)
    np.testing.assert_array_equal(bat.anchors, ref.anchors)
    np.testing.assert_array_equal(bat.I, ref.I)
    np.testing.assert_allclose(bat.approx_scores, ref.approx_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("name,sampler", SAMPLER_CASES, ids=[c[0] for c in SAMPLER_CASES])
def test_batched_on_gpu_matches_reference(data, name, sampler):
    R, T = data
    ref = run(R, T, "reference", sampler=sampler, n_anchor_items=15)
    bat = run(R, T, "batched", sampler=sampler, n_anchor_items=15, device="cuda")
    np.testing.assert_array_equal(bat.anchors, ref.anchors)
    np.testing.assert_array_equal(bat.I, ref.I)


def test_gram_solver_equals_pinv_including_fallbacks():
    rng = np.random.default_rng(0)
    k_q = 12
    cases = [
        rng.standard_normal((5, 4, k_q)),                                   # a < k_q, well conditioned
        rng.standard_normal((5, 20, k_q)),                                  # a > k_q (least squares)
        rng.standard_normal((5, 6, 3)) @ rng.standard_normal((5, 3, k_q)),  # rank 3: Cholesky breaks down
    ]
    for Xt in cases:
        c = rng.standard_normal(Xt.shape[:2])
        want = np.stack([np.linalg.pinv(Xt[i].T, rtol=max(Xt.shape[1:]) * np.finfo(float).eps).T @ c[i]
                         for i in range(len(Xt))])
        got = _solve_weights(torch.from_numpy(Xt), torch.from_numpy(c), "gram").numpy()
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("k", [1, 3, 5, 8])
def test_topk_stable_breaks_ties_by_index_like_a_stable_sort(k):
    keys = np.array([[1.0, 3.0, 3.0, 2.0, 3.0, -np.inf, 2.0, 0.0],   # a 3-way tie across the k = 1, 3 cut
                     [-np.inf] * 6 + [1.0, 1.0],                    # mostly masked: the cut falls in -inf
                     [0.5, 0.4, 0.3, 0.2, 0.1, 0.0, -0.1, -0.2]])   # no ties
    want = np.argsort(-keys, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(_topk_stable(torch.from_numpy(keys), k).numpy(), want)


def test_gram_refinement_corrects_an_ill_conditioned_factor(monkeypatch):
    """A large common offset (like the [CLS]-CE's) makes X = R_anc[:, I_anc] ill-conditioned while its
    Cholesky factor still passes the condition check; the normal equations then lose ~cond² · eps,
    and the refinement step must bring ŝ clearly closer to C_test · pinv(X) · R_anc."""
    rng = np.random.default_rng(0)
    k_q, n_items, nq, a, offset = 40, 300, 50, 30, 200.0

    def matrix(rows):
        return rng.standard_normal((rows, 8)) @ rng.standard_normal((8, n_items)) / np.sqrt(8) \
            + 0.1 * rng.standard_normal((rows, n_items)) + offset

    R, T = matrix(k_q), matrix(nq)
    A = np.stack([rng.choice(n_items, a, replace=False) for _ in range(nq)])
    c = np.take_along_axis(T, A, axis=1)
    want = np.stack([c[q] @ np.linalg.pinv(R[:, A[q]]) @ R for q in range(nq)])
    assert np.median([np.linalg.cond(R[:, A[q]]) for q in range(nq)]) > 1e4
    index = DeviceIndex.build(R, torch.device("cpu"))

    def relative_error(residual_rtol):
        monkeypatch.setattr(batched_engine, "_RESIDUAL_RTOL", residual_rtol)
        state = _AnchorState(index, nq, a)
        state.add(torch.from_numpy(A), torch.from_numpy(c))
        s_hat = state.approx_scores("gram")[0].numpy()
        assert bool(state.ok.all())  # no query fell back to pinv: the refinement is what is tested
        return np.abs(s_hat - want).max() / np.abs(want).max()

    unrefined, refined = relative_error(np.inf), relative_error(1e-10)
    assert unrefined > 1e-9
    assert refined < unrefined / 4


# ----------------------------------------------------------------------------------------------
# budget accounting and exactness
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("implementation", ["reference", "batched"])
@pytest.mark.parametrize("n_anchor_items", SPLITS, ids=["no-split", "split"])
@pytest.mark.parametrize("name,sampler", SAMPLER_CASES, ids=[c[0] for c in SAMPLER_CASES])
def test_budget_is_spent_exactly_and_never_exceeded(data, name, sampler, n_anchor_items, implementation):
    R, T = data
    counter = BudgetCounter(T, budget=36)  # raises BudgetExceededError on the 37th distinct call
    ada = AdaCur(36, n_anchor_items=n_anchor_items, n_rounds=3, sampler=sampler,
                 options=options(implementation, device="cpu")).fit(R)
    result = ada.run(counter)
    assert (counter.calls == 36).all()
    assert sum(r.n_calls for r in result.rounds) == counter.calls.sum()
    assert result.I.shape == (T.shape[0], 36)
    assert all(np.unique(row).size == 36 for row in result.I)  # every returned item was scored once
    np.testing.assert_array_equal(result.D, np.take_along_axis(T, result.I, axis=1))


def test_baselines_spend_exactly_the_budget(data):
    R, T = data
    counter = BudgetCounter(T, budget=30)
    rerank_baseline(counter, np.argsort(np.random.default_rng(0).random(T.shape), axis=1), 30)
    assert (counter.calls == 30).all()
    counter = BudgetCounter(T, budget=30)
    anncur_with_budget(AnnCur(12).fit(R), counter, 30)
    assert (counter.calls == 30).all()


@pytest.mark.parametrize("implementation", ["reference", "batched"])
@pytest.mark.parametrize("n_anchor_items", [None, 20], ids=["no-split", "split"])
def test_full_budget_finds_exact_topk(data, implementation, n_anchor_items):
    R, T = data
    ada = AdaCur(N_ITEMS, n_anchor_items=n_anchor_items, n_rounds=4, options=options(implementation, device="cpu"))
    D, I = ada.fit(R).search(T, 10)
    assert topk_recall(T, I, 10) == 1.0
    np.testing.assert_array_equal(I, np.argsort(-T, axis=1, kind="stable")[:, :10])


def test_rerank_baseline_and_anncur_with_budget(data):
    R, T = data
    exact_order = np.argsort(-T, axis=1, kind="stable")
    D, I = rerank_baseline(T, exact_order, 12)
    np.testing.assert_array_equal(I, exact_order[:, :12])
    assert D.dtype == np.float32 and I.dtype == np.int64
    cur = AnnCur(12, seed=3).fit(R)
    D, I = anncur_with_budget(cur, T, 30)
    _, by_approx = cur.search(T[:, cur.anchor_items_], N_ITEMS)
    for q in range(T.shape[0]):  # anchors + the 18 best non-anchors by ŝ, re-ranked exactly
        extra = [i for i in by_approx[q] if i not in set(cur.anchor_items_)][:18]
        assert set(I[q]) == set(cur.anchor_items_) | set(extra)
    assert topk_recall(T, anncur_with_budget(cur, T, N_ITEMS)[1], 10) == 1.0


# ----------------------------------------------------------------------------------------------
# sampler semantics (independent of either implementation's internals)
# ----------------------------------------------------------------------------------------------
def test_topk_rounds_take_the_best_unchosen_approximate_scores(data):
    R, T = data
    res = AdaCur(30, n_rounds=3, sampler="topk", options=options("reference")).fit(R).run(T, trace_query=4)
    chosen = set(res.rounds[0].items[4])
    for rec in res.rounds[1:]:
        s_hat = rec.approx_scores.astype(np.float64).copy()
        s_hat[list(chosen)] = -np.inf
        assert set(rec.items[4]) == set(np.argsort(-s_hat, kind="stable")[:10])
        chosen |= set(rec.items[4])
    assert not res.rounds[0].approx_scores.any()  # ŝ^(1) from no anchors is 0


def test_single_round_equals_anncur_with_the_same_anchors(data):
    R, T = data
    res = AdaCur(40, n_anchor_items=16, n_rounds=1, options=options("batched", device="cpu")).fit(R).run(
        T, return_approx=True)
    for q in (0, 7, 39):
        cur = AnnCur(16, anchor_items=res.anchors[q]).fit(R)
        np.testing.assert_allclose(res.approx_scores[q], cur.transform(T[q:q + 1, res.anchors[q]])[0],
                                   rtol=1e-4, atol=1e-4)


def test_softmax_temperature_limits(data):
    R, T = data

    def anchors(sampler):
        return AdaCur(24, n_rounds=3, sampler=sampler, options=options("batched", device="cpu")).fit(R).run(T).anchors

    np.testing.assert_array_equal(anchors(SoftMax(temperature=1e-9)), anchors("topk"))  # τ → 0: greedy
    np.testing.assert_array_equal(anchors(SoftMax(temperature=1e12)), anchors("random"))  # τ → ∞: uniform


def test_oracle_samplers_follow_section_3_2(data):
    R, T = data
    exact_order = np.argsort(-T, axis=1, kind="stable")
    res = AdaCur(20, n_rounds=1, sampler=Oracle(TopK(), k_m=3), options=options("reference")).fit(R).run(T)
    np.testing.assert_array_equal(res.anchors, exact_order[:, 3:23])  # ε = 0: ranks k_m+1 .. k_m+k_i
    res = AdaCur(20, n_rounds=1, sampler=Oracle(SoftMax(), k_m=3, epsilon=0.5),
                 options=options("batched", device="cpu")).fit(R).run(T)
    for q in range(T.shape[0]):
        assert not set(res.anchors[q]) & set(exact_order[q, :3])  # the exact top-k_m are never anchors
    res = AdaCur(20, n_rounds=1, sampler=Oracle(TopK(), epsilon=0.25),
                 options=options("batched", device="cpu")).fit(R).run(T)
    np.testing.assert_array_equal(res.anchors[:, :15], exact_order[:, :15])  # (1 − ε)·k_i greedy, then 5 random


def test_seeded_runs_are_deterministic(data):
    R, T = data
    cpu = options(device="cpu")
    a = AdaCur(24, n_rounds=3, sampler="random", options=cpu).fit(R).run(T).anchors
    np.testing.assert_array_equal(a, AdaCur(24, n_rounds=3, sampler="random", options=cpu).fit(R).run(T).anchors)
    assert not np.array_equal(a, AdaCur(24, n_rounds=3, sampler="random", seed=1, options=cpu).fit(R).run(T).anchors)
    # query_ids key the draws: a subset run with the global ids reproduces the full run's anchors.
    sub = AdaCur(24, n_rounds=3, sampler="softmax", options=cpu).fit(R)
    full = sub.run(T).anchors
    np.testing.assert_array_equal(sub.run(T[5:9], query_ids=np.arange(5, 9)).anchors, full[5:9])


def test_sampler_names_and_objects_are_the_same_search(data):
    from xenbench.methods.adacur import SAMPLERS, Random, make_sampler

    R, T = data
    assert all(sampler.name == name for name, sampler in SAMPLERS.items())
    assert make_sampler("softmax", "test", temperature=0.5) == SoftMax(0.5)
    assert make_sampler("oracle_softmax", "test", temperature=0.5) == Oracle(SoftMax(0.5))
    assert make_sampler(Random(), "test") == Random()
    cpu = options(device="cpu")
    for name, sampler in SAMPLERS.items():
        by_name = AdaCur(24, n_rounds=3, sampler=name, options=cpu).fit(R).run(T).anchors
        np.testing.assert_array_equal(by_name, AdaCur(24, n_rounds=3, sampler=sampler, options=cpu).fit(R).run(T).anchors)
    with pytest.raises(ParameterError, match="The 'options' parameter of AdaCur must be None or a SearchOptions"):
        AdaCur(10, options={"device": "cpu"}).fit(R)


def test_keyed_uniforms_are_per_query_and_open_interval():
    u = keyed_uniforms(3, np.arange(50), round_index=2, stream=0, n_items=400)
    assert u.shape == (50, 400) and 0 < u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01
    np.testing.assert_array_equal(keyed_uniforms(3, np.array([17]), 2, 0, 400)[0], u[17])
    assert not np.array_equal(keyed_uniforms(3, np.arange(50), 2, 1, 400), u)
    assert round_sizes(10, 3) == [4, 3, 3]


def test_adaptive_beats_anncur_on_low_rank_plus_noise(data):
    # The paper's headline (Fig. 2): adaptive TopK anchors beat random anchors at equal budget.
    R, T = data
    ada = AdaCur(36, n_rounds=4, sampler="topk", options=options(device="cpu")).fit(R).search(T, 10)[1]
    anncur = anncur_with_budget(AnnCur(18, seed=0).fit(R), T, 36)[1][:, :10]
    assert topk_recall(T, ada, 10) > topk_recall(T, anncur, 10)


def test_round_records(data):
    R, T = data
    res = AdaCur(36, n_anchor_items=15, n_rounds=3, options=options(device="cpu")).fit(R).run(T, trace_query=2)
    assert [r.phase for r in res.rounds] == ["anchors"] * 3 + ["retrieve"]
    assert [r.items.shape[1] for r in res.rounds] == [5, 5, 5, 21]
    assert all(r.approx_scores.shape == (N_ITEMS,) for r in res.rounds)
    assert all(v >= 0 for v in res.timings().values())
    np.testing.assert_array_equal(res.anchors, np.concatenate([r.items for r in res.rounds[:3]], axis=1))


# ----------------------------------------------------------------------------------------------
# parameter errors
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params,message", [
    ({"budget": 0}, r"The 'budget' parameter of AdaCur must be an int in \[1, n_items\]. Got 0 instead."),
    ({"budget": 10, "n_anchor_items": 11}, r"The 'n_anchor_items' parameter of AdaCur must be an int in \[1, budget\]. Got 11 instead."),
    ({"budget": 10, "n_rounds": 11}, r"The 'n_rounds' parameter of AdaCur must be an int in \[1, n_anchor_items\]. Got 11 instead."),
    ({"budget": 10, "sampler": "greedy"}, r"The 'sampler' parameter of AdaCur must be one of \('topk', 'softmax', 'random', 'oracle_topk', 'oracle_softmax'\). Got 'greedy' instead."),
    ({"budget": 10, "sampler": SoftMax(0.0)}, r"The 'temperature' parameter of AdaCur must be a float > 0. Got 0.0 instead."),
    ({"budget": 10, "sampler": Oracle(epsilon=1.5)}, r"The 'oracle_epsilon' parameter of AdaCur must be a float in \[0, 1\]. Got 1.5 instead."),
    ({"budget": 10, "sampler": Oracle(k_m=231)}, r"The 'oracle_k_m' parameter of AdaCur must be an int in \[0, n_items - n_anchor_items\]. Got 231 instead."),
    ({"budget": 10, "options": SearchOptions(implementation="fast")}, r"The 'implementation' parameter of AdaCur must be one of \('batched', 'reference'\). Got 'fast' instead."),
    ({"budget": 10, "first_round": "dense"}, r"The 'first_round' parameter of AdaCur must be one of"),
])
def test_parameter_errors(data, params, message):
    with pytest.raises(ParameterError, match=message):
        AdaCur(**params).fit(data[0])


def test_prior_weight_error(data):
    R, T = data
    with pytest.raises(ParameterError, match=r"The 'prior_weight' parameter of AdaCur must be a float in \[0, 1\]. Got 1.5 instead."):
        AdaCur(10).fit(R).run(T, prior_scores=T, prior_weight=1.5)


def test_run_time_errors(data):
    R, T = data
    ada = AdaCur(10, n_rounds=2).fit(R)
    with pytest.raises(ParameterError, match=r"The 'candidates' parameter of AdaCur.run must be an int array of shape \(nq=40, >= 5\)"):
        ada.run(T, candidates=np.zeros((40, 4), int))
    with pytest.raises(ParameterError, match="The 'candidates' parameter of AdaCur.run must be distinct items"):
        ada.run(T, candidates=np.zeros((40, 6), int))
    with pytest.raises(ParameterError, match=r"The 'scores' parameter of AdaCur.run must be a BudgetCounter with budget >= 10. Got 9 instead."):
        ada.run(BudgetCounter(T, budget=9))
    with pytest.raises(ParameterError, match=r"The 'k' parameter of AdaCur.search must be an int in \[1, budget\]. Got 11 instead."):
        ada.search(T, 11)
    with pytest.raises(NotFittedError):
        AdaCur(10).run(T)
    with pytest.raises(ParameterError, match="The 'prior_scores' parameter of AdaCur.run must be None since prior_weight = 0"):
        ada.run(T, prior_scores=T)
    with pytest.raises(ParameterError, match=r"The 'prior_scores' parameter of AdaCur.run must be a float array of shape \(40, 240\)"):
        ada.run(T, prior_weight=0.5)
    with pytest.raises(ParameterError, match=r"must be a finite float array of shape \(40, 240\)"):
        ada.run(T, prior_scores=T[:, :5], prior_weight=0.5)


# ----------------------------------------------------------------------------------------------
# D4: first_round="sampler" is refused with a non-oracle sampler (ŝ ≡ 0 before any anchor)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("implementation", ["reference", "batched"])
@pytest.mark.parametrize("sampler", ["topk", "softmax", "random"])
def test_first_round_sampler_needs_an_oracle_sampler(data, implementation, sampler):
    with pytest.raises(ParameterError, match=r"The 'first_round' parameter of AdaCur must be 'random' or 'auto' "
                                             rf"with sampler='{sampler}'"):
        AdaCur(12, n_rounds=3, sampler=sampler, first_round="sampler", options=options(implementation)).fit(data[0])


@pytest.mark.parametrize("implementation", ["reference", "batched"])
def test_first_round_sampler_with_an_oracle_still_reads_the_exact_scores(data, implementation):
    R, T = data
    res = AdaCur(12, n_rounds=3, sampler="oracle_topk", first_round="sampler",
                 options=options(implementation, device="cpu")).fit(R).run(T)
    want = np.argsort(-T.astype(np.float64), axis=1, kind="stable")[:, :4]  # k_m = 0, ε = 0: exact top-4
    np.testing.assert_array_equal(res.rounds[0].items, want)


# ----------------------------------------------------------------------------------------------
# D7: the pinv cut-off follows the stored dtype of R_anc
# ----------------------------------------------------------------------------------------------
def test_pinv_cutoff_follows_the_dtype_of_r_anc(data):
    R, _ = data
    assert AdaCur(12).fit(R).plan_.score_eps == np.finfo(np.float32).eps
    assert AdaCur(12).fit(R.astype(np.float64)).plan_.score_eps == np.finfo(np.float64).eps


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_float32_scores_with_a_large_offset_are_recovered(seed):
    # M = rank-5 + 1000, stored in float32 (so rank 6 up to rounding). Every stored entry is within half
    # an ulp(1000) = 2^-14 / 2 ≈ 3.1e-5 of the exact matrix; ADACUR's ŝ (float32) must be within 4 ulp
    # (2.4e-4, i.e. 1e-4 of the spread ≈ 2.2 of the rank-5 part) at every round's approximation, in both
    # implementations. k_q = 30 anchor queries, B_CE = 60 anchors in 3 rounds (a > k_q in the last).
    rng = np.random.default_rng(seed)
    M = (rng.standard_normal((90, 5)) @ rng.standard_normal((5, 400)) + 1000.0).astype(np.float32)
    ulp = np.spacing(np.float32(1000.0))
    for implementation in ("reference", "batched"):
        res = AdaCur(60, n_rounds=3, options=options(implementation, device="cpu")).fit(M[:30]).run(
            M[30:], return_approx=True)
        assert np.abs(res.approx_scores.astype(np.float64) - M[30:]).max() <= 4 * ulp


# ----------------------------------------------------------------------------------------------
# ADACUR TopK rounds against an independent plain-numpy reference (Alg. 1-2), first round fixed
# ----------------------------------------------------------------------------------------------
def plain_adacur_topk(R_anc: np.ndarray, scores: np.ndarray, first: np.ndarray, k_s: int, n_rounds: int) -> np.ndarray:
    """Alg. 1 with TopK (Alg. 3 line 10) for one query, written from the paper: after every round,
    ŝ = C_test · pinv(R_anc[:, I_anc]) · R_anc (Alg. 2, via the min-norm least-squares solve
    w = argmin ‖R_anc[:, I_anc]ᵀ w − C_testᵀ‖), anchors masked, next k_s = top of ŝ."""
    R = R_anc.astype(np.float64)
    anchors = list(first)
    for _ in range(n_rounds - 1):
        w = np.linalg.lstsq(R[:, anchors].T, scores[anchors].astype(np.float64), rcond=None)[0]
        s_hat = w @ R
        s_hat[anchors] = -np.inf
        anchors += list(np.argsort(-s_hat, kind="stable")[:k_s])
    return np.array(anchors)


@pytest.mark.parametrize("implementation", ["reference", "batched"])
def test_topk_anchors_equal_an_independent_numpy_reference(data, implementation):
    R, T = data  # k_q = 30 anchor queries; 4 rounds of k_s = 7 (a <= 28 < k_q, full column rank)
    first = np.stack([np.random.default_rng(q).choice(N_ITEMS, size=7, replace=False) for q in range(len(T))])
    res = AdaCur(28, n_rounds=4, options=options(implementation, device="cpu")).fit(R).run(T, candidates=first)
    want = np.stack([plain_adacur_topk(R, T[q], first[q], 7, 4) for q in range(len(T))])
    np.testing.assert_array_equal(res.anchors, want)
    np.testing.assert_array_equal(res.I, np.take_along_axis(want, np.argsort(
        -np.take_along_axis(T.astype(np.float64), want, axis=1), axis=1, kind="stable"), axis=1))
