"""AXN (Alg. 1, Eq. 4-7): exact recovery on an exactly low-rank matrix, the λ = 1 limit equals
retrieve-and-rerank, Eq. 7 against a hand-computed least-squares fit, batched = per-query."""
from __future__ import annotations

import numpy as np
import pytest

from xenbench.adacur import rerank_baseline
from xenbench import plots as xb_plots
from xenbench.axn import Axn, lambda_sweep, prior_scale
from xenbench.experiments import at_lambda, select_lambda
from xenbench.cur import NotFittedError
from xenbench.errors import ParameterError
from xenbench.metrics import topk_recall

pytestmark = pytest.mark.usefixtures("one_thread")

N_ITEMS, D = 200, 6


@pytest.fixture(scope="module")
def factors() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Item embeddings V, test query embeddings U, and a noisy parametric guess of U."""
    rng = np.random.default_rng(0)
    V = rng.standard_normal((N_ITEMS, D))
    U = rng.standard_normal((25, D))
    return V, U, U + 0.5 * rng.standard_normal(U.shape)


def test_exactly_low_rank_scores_are_recovered_after_one_round(factors):
    V, U, _ = factors
    M = U @ V.T  # CE scores exactly u_q · v_i: round 1 (k_s = 8 >= d items) pins u_q down
    result = Axn(budget=32, n_rounds=4).fit(V).run(M, return_approx=True)
    np.testing.assert_allclose(result.approx_scores, M, atol=1e-5)
    assert topk_recall(M, result.I, 24) == 1.0  # the 24 items of rounds 2-4 are the exact top-24


def test_lambda_one_with_retriever_first_round_is_retrieve_and_rerank(factors):
    V, U, U_param = factors
    M = U @ V.T
    prior_order = np.argsort(-(U_param @ V.T), axis=1, kind="stable")
    D, I = Axn(budget=30, n_rounds=3, lam=1.0).fit(V).search(M, k=30, u_param=U_param, candidates=prior_order)
    D_rr, I_rr = rerank_baseline(M, prior_order, 30)
    np.testing.assert_array_equal(I, I_rr)
    np.testing.assert_array_equal(D, D_rr)


@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_eq7_mixture_matches_a_hand_computed_least_squares_fit(factors, lam):
    V, U, U_param = factors
    M = U @ V.T + 0.3 * np.random.default_rng(1).standard_normal((U.shape[0], N_ITEMS))  # not low rank
    axn = Axn(budget=20, n_rounds=2, lam=lam, implementation="reference").fit(V)
    result = axn.run(M, u_param=U_param if lam else None, return_approx=True)
    for q in range(U.shape[0]):
        A = result.anchors[q]  # all 20 scored items (> d): an over-determined regression
        u_lin = np.linalg.lstsq(V[A], M[q, A], rcond=None)[0]
        u = (1 - lam) * u_lin + lam * U_param[q]
        np.testing.assert_allclose(result.approx_scores[q], u @ V.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_batched_matches_reference(factors, lam):
    V, U, U_param = factors
    M = U @ V.T + 0.5 * np.random.default_rng(2).standard_normal((U.shape[0], N_ITEMS))
    kwargs = dict(u_param=U_param if lam else None, return_approx=True)
    ref = Axn(budget=30, n_rounds=5, lam=lam, implementation="reference").fit(V).run(M, **kwargs)
    bat = Axn(budget=30, n_rounds=5, lam=lam, device="cpu").fit(V).run(M, **kwargs)
    np.testing.assert_array_equal(bat.anchors, ref.anchors)
    np.testing.assert_array_equal(bat.I, ref.I)
    np.testing.assert_allclose(bat.approx_scores, ref.approx_scores, atol=1e-5)
    assert bat.calls.max() == ref.calls.max() == 30


def test_prior_scale_recovers_the_scale_and_ignores_offsets():
    rng = np.random.default_rng(3)
    prior = rng.standard_normal((10, 50))
    ce = 4.0 * prior + rng.standard_normal((10, 1)) * 100  # per-query offsets change no ranking
    assert prior_scale(ce, prior) == pytest.approx(4.0)
    with pytest.raises(ParameterError, match="prior_scores"):
        prior_scale(ce, prior[:, :10])


def test_parameter_errors(factors):
    V, U, U_param = factors
    M = U @ V.T
    with pytest.raises(NotFittedError):
        Axn(budget=10).run(M)
    with pytest.raises(ParameterError, match="lam"):
        Axn(budget=10, lam=1.5).fit(V)
    with pytest.raises(ParameterError, match="V"):
        Axn(budget=10).fit(V[:, 0])
    with pytest.raises(ParameterError, match="u_param.*since lam > 0"):
        Axn(budget=10, lam=0.5).fit(V).run(M)
    with pytest.raises(ParameterError, match="u_param.*since lam = 0"):
        Axn(budget=10).fit(V).run(M, u_param=U_param)
    with pytest.raises(ParameterError, match="u_param"):
        Axn(budget=10, lam=0.5).fit(V).run(M, u_param=U_param[:, :3])
    with pytest.raises(ParameterError, match="budget"):
        Axn(budget=N_ITEMS + 1).fit(V)


def test_lambda_sweep_selection_and_test_scores(factors):
    V, U, U_param = factors
    M = U @ V.T  # exactly rank d: λ = 0 recovers the top items, λ = 1 only follows the noisy guess
    sweep = lambda_sweep(M, V, U_param, [0.0, 0.5, 1.0], budgets=[24, 40], k_values=(1, 10, 30), n_rounds=4)
    assert set(zip(sweep["budget"], sweep["k"])) == {(24, 1), (24, 10), (40, 1), (40, 10), (40, 30)}  # k <= B_CE
    exact = sweep[sweep["lam"] == 0.0]
    assert (exact[exact["k"] <= 18]["recall"] == 1.0).all()  # rounds 2-4 retrieve the exact top-18 (B_CE = 24)
    assert (sweep[sweep["lam"] == 1.0]["recall"] < 1.0).any()
    chosen = select_lambda(sweep)
    assert (chosen["lam"] == 0.0).all()  # ties (recall 1.0 at several λ) go to the smaller λ
    test = at_lambda(sweep, chosen)
    assert len(test) == len(chosen) and (test["lam"] == 0.0).all()
    fig = xb_plots.recall_vs_lambda_lines(sweep, chosen)
    stars = [tr for tr in fig.data if tr.marker.symbol == "star"]
    assert len(stars) == len(chosen) and len(fig.data) == 2 * len(chosen)  # a line per (B_CE, k) facet, a star each


def test_round_trace_follows_one_query(factors):
    from xenbench.axn import round_trace

    V, U, _ = factors
    M = U @ V.T
    trace = round_trace(M, V, 4, budget=32, n_rounds=4)
    assert trace.n_rounds == 4 and trace.approx.shape == (4, N_ITEMS)
    np.testing.assert_allclose(trace.approx[0], M[4], atol=1e-5)  # rank d: exact after round 1 (8 >= d items)
    assert trace.summary(k_values=(1, 10))["top10_in_anchors"].iloc[-1] == 1.0


def test_first_round_is_keyed_by_global_query_id(factors):
    V, U, U_param = factors
    M = U @ V.T + 0.3 * np.random.default_rng(1).standard_normal((len(U), N_ITEMS))  # not exactly low rank
    subset = np.array([3, 7, 11, 19])
    axn = Axn(budget=24, n_rounds=3, seed=5).fit(V)
    together = axn.run(M[subset], query_ids=subset)
    for pos, q in enumerate(subset):
        alone = axn.run(M[[q]], query_ids=np.array([q]))
        np.testing.assert_array_equal(alone.rounds[0].items[0], together.rounds[0].items[pos])
        np.testing.assert_array_equal(alone.anchors[0], together.anchors[pos])
    full = axn.run(M)  # default ids: rows of M, which are the global ids here
    np.testing.assert_array_equal(full.anchors[subset], together.anchors)
    # lambda_sweep passes the ids through: per-query recall of a query is the same in any subset
    _, per_sub = lambda_sweep(M[subset], V, U_param[subset], [0.0], [24], (5,), n_rounds=3, seed=5,
                              query_ids=subset, per_query=True)
    _, per_all = lambda_sweep(M, V, U_param, [0.0], [24], (5,), n_rounds=3, seed=5, per_query=True)
    np.testing.assert_array_equal(per_sub["recall"].to_numpy(), per_all.set_index("query").loc[subset, "recall"].to_numpy())


def test_axn_pinv_cutoff_follows_the_dtype_of_v(factors):
    V, _, _ = factors
    assert Axn(budget=10).fit(V.astype(np.float32)).engine_.plan_.score_eps == np.finfo(np.float32).eps
    assert Axn(budget=10).fit(V).engine_.plan_.score_eps == np.finfo(np.float64).eps


# ----------------------------------------------------------------------------------------------
# notebook 04's protocol: λ chosen on dev only, seeds × splits, pre-declared paired comparisons
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def protocol_run():
    from xenbench import axn, protocol

    rng = np.random.default_rng(0)
    V, U = rng.standard_normal((120, D)), rng.standard_normal((50, D))
    M = (U @ V.T + 0.3 * rng.standard_normal((50, 120))).astype(np.float32)
    U_de = U + 0.4 * rng.standard_normal(U.shape)  # a noisy "DE"
    splits = protocol.query_splits(50, 15, 12, seeds=[0, 1, 2])
    runs, dev = axn.protocol_runs(M, splits, V, U_de, seeds=[0, 1, 2], lambdas=[0.0, 0.5, 1.0], budgets=[8, 16],
                                  k_values=(1, 5), n_rounds=2, mf_items_per_query=20, mf_epochs=2, progress=False)
    return M, V, U_de, splits, runs, dev


def test_protocol_chooses_lambda_on_dev_and_runs_every_split_and_seed(protocol_run):
    from xenbench.axn import prior_scale

    M, V, U_de, splits, runs, dev = protocol_run
    n = runs.groupby("method")[["split", "seed"]].apply(lambda g: len(set(zip(g["split"], g["seed"]))))
    assert n["AXN, tuned λ"] == n["ADACUR TopK No-Split"] == 9  # 3 splits × 3 first-round seeds
    assert n["AXN DE, tuned λ"] == n["AXN DE, MF-IND, tuned λ"] == n["DE re-rank"] == 3  # deterministic: per split
    s = splits[1]
    for (budget, k), g in runs[(runs["method"] == "AXN, tuned λ") & (runs["split"] == 1) & (runs["seed"] == 2)].groupby(["budget", "k"]):
        # the λ used on test is the best dev λ of that run (ties to the smaller λ) ...
        d = dev[(dev["method"] == "AXN") & (dev["split"] == 1) & (dev["budget"] == budget) & (dev["k"] == k)]
        assert set(d["seed"]) == {0}  # chosen once per split (first seed's first round), used by every seed
        best = d[d["recall"] == d["recall"].max()]["lam"].min()
        assert g["lam"].item() == best
        # ... and its test recall is AXN at that λ on the split's test rows, keyed by global query id
        beta = prior_scale(M[s.anchor], U_de[s.anchor] @ V.T)
        res = Axn(budget, n_rounds=2, lam=best, seed=2).fit(V).run(
            M[s.test], u_param=beta * U_de[s.test] if best > 0 else None, query_ids=s.test)
        assert g["recall"].item() == pytest.approx(topk_recall(M[s.test], res.I, k))
        np.testing.assert_array_equal(g["rows"].item(), s.test)
    assert set(dev["split"]) == {0, 1, 2}


def test_paired_comparisons_pool_queries_over_runs_and_holm_adjust(protocol_run):
    from xenbench.axn import PAIRS, paired_comparisons
    from xenbench.protocol import paired_test

    *_, runs, _ = protocol_run
    comp = paired_comparisons(runs)
    assert set(zip(comp["challenger"], comp["baseline"])) == set(PAIRS)
    row = comp[(comp["challenger"] == "AXN, tuned λ") & (comp["budget"] == 8) & (comp["k"] == 5)].iloc[0]
    per = {}
    for m in ("AXN, tuned λ", "AXN, λ = 0"):  # by hand: each query's mean over the runs it was a test query in
        g = runs[(runs["method"] == m) & (runs["budget"] == 8) & (runs["k"] == 5)]
        acc: dict[int, list[float]] = {}
        for rows, vals in zip(g["rows"], g["per_query"]):
            for q, v in zip(rows, vals):
                acc.setdefault(int(q), []).append(float(v))
        per[m] = {q: np.mean(v) for q, v in acc.items()}
    qs = sorted(per["AXN, tuned λ"])
    want = paired_test([per["AXN, tuned λ"][q] for q in qs], [per["AXN, λ = 0"][q] for q in qs])
    assert row["mean"] == pytest.approx(want["mean"]) and row["p"] == pytest.approx(want["p"])
    assert row["n"] == len(qs)
    p = np.sort(comp["p"].to_numpy())
    m = len(p)
    holm = np.minimum(1, np.maximum.accumulate((m - np.arange(m)) * p))
    np.testing.assert_allclose(np.sort(comp["p_holm"].to_numpy()), holm)
    assert (comp["p_holm"] >= comp["p"]).all()


def _results(mean: float, p_holm: float, lams: str = "0.2, 0.8") -> dict:
    cells = [{"challenger": "AXN DE, tuned λ", "baseline": "DE re-rank", "budget": b, "k": 1, "mean": mean,
              "lo": mean - 0.01, "hi": mean + 0.01, "p": p_holm / 2, "p_holm": p_holm, "n": 40} for b in (50, 100)]
    summary = [{"method": "AXN DE, tuned λ", "budget": 50, "k": 1, "lams": lams},
               {"method": "DE re-rank", "budget": 50, "k": 1, "lams": ""}]
    return {"ce": "cls-ce", "n_items": 900, "comparisons": cells, "summary": summary,
            "protocol": {"split_seeds": [0, 1, 2], "first_round_seeds": [0, 1, 2, 3, 4], "n_declared_cells": 2}}


def test_findings_follow_the_numbers():
    from xenbench.findings.axn import findings

    win = findings(_results(0.05, 0.001))
    assert "3 query splits × 5 first-round seeds" in win[0] and "cls-ce" in win[0]
    assert "AXN DE, tuned λ beats DE re-rank in all 2 (budget, k) cells" in win[1]
    assert "+5.0 points [+4.0, +6.0]" in win[1]
    lose = findings(_results(-0.05, 0.001))
    assert "AXN DE, tuned λ is behind DE re-rank in all 2" in lose[1] and "-5.0 points" in lose[1]
    noise = findings(_results(0.05, 0.2))  # same gain, but the Holm-adjusted p is not below 0.05
    assert "within noise in all 2" in noise[1] and "beats" not in noise[1]
    assert win[-1] == "AXN DE: λ chosen on dev from 0.2 to 0.8 over runs, budgets and k."
    assert findings(_results(0.05, 0.001, lams="0.4"))[-1] == "AXN DE: λ chosen on dev 0.4 over runs, budgets and k."
