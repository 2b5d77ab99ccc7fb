"""Notebook 03's driver (:mod:`xenbench.studies.adacur`) and its inputs (:mod:`xenbench.studies.setup`) on small
synthetic low-rank matrices: every method at every budget, exactness at full budget, the per-round trace agreeing
with AdaCur itself, and the dev/test protocol."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from xenbench.errors import ParameterError
from xenbench.methods.adacur import AdaCur
from xenbench.studies.protocol import Split
from xenbench.studies import adacur as ex
from xenbench.studies import records
from xenbench.studies import setup as study_setup

REPO = Path(__file__).resolve().parent.parent

N_QUERIES, N_ITEMS, N_ANCHOR_QUERIES = 70, 60, 20


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def M() -> np.ndarray:
    """Rank-6 scores plus a little noise, (70 queries, 60 items)."""
    rng = np.random.default_rng(0)
    low = rng.standard_normal((N_QUERIES, 6)) @ rng.standard_normal((6, N_ITEMS))
    return (low + 0.05 * rng.standard_normal((N_QUERIES, N_ITEMS))).astype(np.float32)


@pytest.fixture(scope="module")
def split() -> Split:
    """k_q = 20 seeded anchor rows, the other 50 test rows (no dev rows: the one-split functions do not read them)."""
    perm = np.random.default_rng(3).permutation(N_QUERIES)
    return Split(np.sort(perm[:N_ANCHOR_QUERIES]), np.empty(0, np.int64), np.sort(perm[N_ANCHOR_QUERIES:]), 3)


@pytest.fixture(scope="module")
def retrievers(M, split) -> dict[str, np.ndarray]:
    """A noisy "DE" and a noisier "TF-IDF" view of the test queries' exact scores."""
    rng = np.random.default_rng(1)
    test = M[split.test]
    return {"de_scores": test + 0.5 * rng.standard_normal(test.shape),
            "tfidf_scores": test + 2.0 * rng.standard_normal(test.shape)}


# ----------------------------------------------------------------------------------------------
# recall_vs_budget
# ----------------------------------------------------------------------------------------------
BUDGETS = [10, 30]


@pytest.fixture(scope="module")
def budget_results(M, split, retrievers) -> pd.DataFrame:
    return ex.recall_vs_budget(M, split, BUDGETS, k_values=(1, 10, 20), **retrievers, seed=0)


def test_recall_vs_budget_has_every_method_budget_and_valid_k(budget_results):
    assert set(budget_results["method"]) == set(ex.METHODS.values())
    for method, group in budget_results.groupby("method"):
        pairs = set(zip(group["budget"], group["k"]))
        assert pairs == {(10, 1), (10, 10), (30, 1), (30, 10), (30, 20)}, method  # k > budget skipped
    assert budget_results["recall"].between(0, 1).all()
    assert (budget_results["recall_se"] >= 0).all()
    assert (budget_results["n_test_queries"] == N_QUERIES - N_ANCHOR_QUERIES).all()


def test_recall_vs_budget_anchor_counts_follow_the_method(budget_results):
    by = budget_results.set_index("method")
    assert (by.loc["DE re-rank", "n_anchor_items"] == 0).all()
    nosplit = budget_results[budget_results["method"].str.contains("No-Split")]
    assert (nosplit["n_anchor_items"] == nosplit["budget"]).all()
    split_methods = budget_results[budget_results["method"].isin(["ADACUR TopK", "ADACUR SoftMax"])]
    assert (split_methods["n_anchor_items"] < split_methods["budget"]).all()
    assert (split_methods["n_anchor_items"] >= 5).all()  # k_i >= N_r


def test_recall_vs_budget_best_split_is_the_max_over_the_grid(M, split, budget_results):
    grid = ex.recall_vs_budget(M, split, BUDGETS, methods=["anncur", "adacur_topk"], k_values=(1, 10, 20),
                               all_splits=True)
    best = grid.groupby(["method", "budget", "k"])["recall"].max()
    got = budget_results.set_index(["method", "budget", "k"])["recall"]
    pd.testing.assert_series_equal(got.loc[best.index].sort_index(), best.sort_index(), check_names=False)
    assert grid.groupby(["method", "budget", "k"]).size().min() >= 2  # a real grid, not one split


def test_every_method_is_exact_when_the_budget_covers_all_items(M, split, retrievers):
    df = ex.recall_vs_budget(M, split, [N_ITEMS], k_values=(1, 10, N_ITEMS), **retrievers)
    assert set(df["method"]) == set(ex.METHODS.values())
    assert (df["recall"] == 1.0).all(), df[df["recall"] < 1.0]


def test_recall_vs_budget_defaults_to_the_methods_whose_inputs_are_given(M, split):
    df = ex.recall_vs_budget(M, split, [10], k_values=(1,))
    assert set(df["method"]) == {"ANNCUR", "ADACUR TopK", "ADACUR SoftMax", "ADACUR TopK No-Split"}
    with pytest.raises(ParameterError, match="'de_scores' parameter of recall_vs_budget"):
        ex.recall_vs_budget(M, split, [10], methods=["de_rerank"], k_values=(1,))
    with pytest.raises(ParameterError, match="keys of METHODS"):
        ex.recall_vs_budget(M, split, [10], methods=["adacur"], k_values=(1,))


def test_recall_vs_budget_rejects_retriever_scores_of_the_wrong_rows(M, split):
    with pytest.raises(ParameterError, match=r"shape \(n_test=50, n_items=60\)"):
        ex.recall_vs_budget(M, split, [10], de_scores=M, k_values=(1,))


def test_every_comparable_method_searches_within_the_budget(M, split, retrievers):
    """The registry's shared call: search(counter, k) -> (D float32 (nq, k), I int64 (nq, k)), every
    returned item scored through the counter, no query over B_CE calls."""
    from xenbench.methods.adacur import SearchOptions
    from xenbench.metrics import BudgetCounter, topk_indices

    assert ex.METHODS == {key: m.label for key, m in ex.COMPARABLE.items()}
    budget, k = 20, 5
    state = ex.SplitState(M[split.anchor], split.test,
                          {name: topk_indices(sc, budget) for name, sc in retrievers.items()}, n_rounds=4,
                          split_fractions=ex.SPLIT_FRACTIONS, temperature=1.0, seed=0,
                          options=SearchOptions(device="cpu"))
    M_test = M[split.test]
    for key, method in ex.COMPARABLE.items():
        variants = method.variants(state, budget)
        assert variants, key
        for variant in variants:
            counter = BudgetCounter(M_test, budget)
            D, I = variant.search(counter, k)
            assert D.shape == I.shape == (split.test.size, k) and D.dtype == np.float32 and I.dtype == np.int64, key
            assert counter.calls.max() <= budget, key
            np.testing.assert_array_equal(D, np.take_along_axis(M_test, I, axis=1))


def test_recall_vs_budget_is_deterministic(M, split, retrievers, budget_results):
    again = ex.recall_vs_budget(M, split, BUDGETS, k_values=(1, 10, 20), **retrievers, seed=0)
    pd.testing.assert_frame_equal(again, budget_results)


def test_adacur_beats_random_anchors_on_low_rank_data(M, split):
    """On a rank-6 matrix, 5 adaptive rounds find more of the top-10 than 1 round of random anchors."""
    df = ex.recall_vs_rounds(M, split, [20], rounds=(1, 5), k_values=(10,))
    r = df.set_index("n_rounds")["recall"]
    assert r[5] > r[1] + 0.2


# ----------------------------------------------------------------------------------------------
# rounds and latency
# ----------------------------------------------------------------------------------------------
def test_recall_vs_rounds_shape_and_skips(M, split):
    df = ex.recall_vs_rounds(M, split, [4, 20], rounds=(1, 2, 5), k_values=(1, 10))
    # B = 4: 5 rounds > k_i skipped, k = 10 > B skipped
    assert set(zip(df["budget"], df["n_rounds"])) == {(4, 1), (4, 2), (20, 1), (20, 2), (20, 5)}
    assert set(df.loc[df["budget"] == 4, "k"]) == {1}
    assert df["recall"].between(0, 1).all()


def test_latency_vs_rounds_models_ce_calls(M, split):
    df = ex.latency_vs_rounds(M, split, [20], rounds=(1, 4), seconds_per_ce_call=0.01, max_queries=3)
    assert set(df["step"]) == {"CE calls", "pinv", "matmul", "sampling"}
    ce = df[df["step"] == "CE calls"]
    np.testing.assert_allclose(ce["seconds"], 20 * 0.01)  # B_CE calls per query, each 10 ms
    np.testing.assert_allclose(df.groupby("n_rounds")["fraction"].sum(), 1.0)
    assert (df["seconds"] >= 0).all() and (df["n_queries"] == 3).all()
    one_round = df[(df["n_rounds"] == 1) & df["step"].isin(["pinv", "matmul"])]
    assert (one_round["seconds"] == 0).all()  # No-Split with 1 round never approximates


def test_ce_seconds_per_call_reads_the_store_sessions():
    attrs = {"sessions": [{"n_pairs": 1000, "wall_s": 2.0}, {"n_pairs": 1000, "wall_s": 2.0}]}
    assert study_setup.ce_seconds_per_call(attrs) == pytest.approx(2e-3)
    assert study_setup.ce_seconds_per_call({"wall_s": 6.0, "query_ids": [1, 2], "item_ids": [1, 2, 3]}) == pytest.approx(1.0)


# ----------------------------------------------------------------------------------------------
# round_trace
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sampler, fraction", [("topk", None), ("softmax", None), ("topk", 0.5)])
def test_round_trace_matches_adacur_on_all_test_queries(M, split, sampler, fraction):
    budget, n_rounds = 20, 4
    pos = 7
    row = int(split.test[pos])
    trace = ex.adacur_round_trace(M, split, row, budget=budget, n_rounds=n_rounds, sampler=sampler,
                                  anchor_fraction=fraction, seed=5)
    k_i = budget if fraction is None else 10
    ada = AdaCur(budget, n_anchor_items=None if fraction is None else k_i, n_rounds=n_rounds, sampler=sampler,
                 seed=5).fit(M[split.anchor])
    res = ada.run(M[split.test], query_ids=split.test, return_approx=True)
    rounds = [r for r in res.rounds if r.phase == "anchors"]
    assert trace.n_rounds == n_rounds and trace.n_anchor_items == k_i
    for t in range(n_rounds):
        np.testing.assert_array_equal(trace.anchors[t], rounds[t].items[pos])
    all_anchors = trace.anchors_until(n_rounds - 1)
    assert np.unique(all_anchors).size == all_anchors.size == k_i  # disjoint rounds
    np.testing.assert_allclose(trace.approx[-1], res.approx_scores[pos], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(trace.exact, M[row])
    if fraction is None:
        assert trace.retrieved.size == 0
    else:
        assert trace.retrieved.size == budget - k_i and not np.isin(trace.retrieved, all_anchors).any()


def test_round_trace_interpolates_its_anchors_and_is_deterministic(M, split):
    row = int(split.test[0])
    a = ex.adacur_round_trace(M, split, row, budget=15, n_rounds=3, seed=1)
    b = ex.adacur_round_trace(M, split, row, budget=15, n_rounds=3, seed=1)
    for t in range(3):
        np.testing.assert_array_equal(a.anchors[t], b.anchors[t])
        anchors = a.anchors_until(t)  # CUR is exact on the anchors while |I_anc| <= k_q
        np.testing.assert_allclose(a.approx[t][anchors], M[row, anchors], atol=1e-4)
    np.testing.assert_array_equal(a.approx, b.approx)
    summary = a.summary(k_values=(1, 10))
    assert list(summary["round"]) == [1, 2, 3] and list(summary["n_anchors"]) == [5, 10, 15]
    assert (summary["mae_anchors"] < 1e-4).all()


def test_round_trace_rejects_an_anchor_query(M, split):
    with pytest.raises(ParameterError, match="'query_row' parameter of adacur_round_trace must be a row of M among"):
        ex.adacur_round_trace(M, split, int(split.anchor[0]), budget=10)


# ----------------------------------------------------------------------------------------------
# figures (structure only)
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plots():
    """The figure builders, imported here: this module's cuda test runs on GPU machines without plotly."""
    from xenbench.viz.plots import adacur

    return adacur


def test_round_scatter_has_one_slider_step_per_round(M, split, plots):
    trace = ex.adacur_round_trace(M, split, int(split.test[0]), budget=20, n_rounds=4)
    fig = plots.round_scatter(trace, bands=(5, 20))
    steps = fig.layout.sliders[0].steps
    assert len(steps) == 4 and fig.layout.sliders[0].active == 3
    visible = [np.array(s.args[0]["visible"]) for s in steps]
    assert all(v[0] for v in visible)  # the diagonal is always shown
    shown = np.array(visible)[:, 1:]
    assert (shown.sum(axis=0) == 1).all()  # every other trace belongs to exactly one round
    assert [bool(tr.visible) for tr in fig.data] == list(visible[-1])  # starts at the last round
    assert not fig.frames  # static HTML and FigureWidget friendly: no animation frames


def test_summary_figures_build(M, split, budget_results, plots):
    assert len(plots.recall_vs_budget_lines(budget_results).data) == len(ex.METHODS) * 3  # methods x k facets
    rounds = ex.recall_vs_rounds(M, split, [20], rounds=(1, 2), k_values=(1, 10))
    assert plots.recall_vs_rounds_lines(rounds).data
    latency = ex.latency_vs_rounds(M, split, [20], rounds=(1, 2), max_queries=2)
    fig = plots.latency_vs_rounds_bars(latency)
    assert fig.layout.barmode == "stack" and {tr.name for tr in fig.data} == {"CE calls", "pinv", "matmul", "sampling"}


def test_a_perfect_retriever_makes_its_methods_exact(M, split):
    """With the exact scores as "DE", re-rank and the DE-seeded methods hold the exact top-k."""
    df = ex.recall_vs_budget(M, split, [20], methods=["de_rerank", "anncur_de", "adacur_de_nosplit"],
                             k_values=(1, 4), de_scores=M[split.test])
    assert (df["recall"] == 1.0).all(), df  # k <= B_CE / N_r = 4 items come in the DE's first batch


def test_load_setup_checks_ids(tmp_path) -> None:
    from xenbench.data.datasets import Dataset, Item, Query
    from xenbench.errors import DataError
    from xenbench.data.store import ScoreStore

    items = [Item(f"i{k}", f"t{k}", "x") for k in range(6)]
    queries = [Query(f"q{k}", f"query {k}") for k in range(5)]
    ds = Dataset("tiny", items, queries, {q.id: ["i0"] for q in queries})
    M = np.arange(30, dtype=np.float32).reshape(5, 6)
    store = ScoreStore.create(tmp_path / "s", 5, 6, chunks=(5, None),
                              attrs={"query_ids": ds.query_ids, "item_ids": ds.item_ids, "model": "m"})
    store.write_chunk(0, M)
    setup = study_setup.load_setup(tmp_path / "s", ds, seed=0, max_items=4)
    assert setup.M.shape == (5, 4)
    np.testing.assert_array_equal(setup.M, M[:, setup.items])
    assert setup.item_labels == [f"t{i}" for i in setup.items]
    bad = ScoreStore.create(tmp_path / "b", 5, 6, chunks=(5, None),
                            attrs={"query_ids": ds.query_ids[::-1], "item_ids": ds.item_ids})
    bad.write_chunk(0, M)
    with pytest.raises(DataError, match="was not computed on tiny"):
        study_setup.load_setup(tmp_path / "b", ds)


# ----------------------------------------------------------------------------------------------
# the honest protocol: dev choice, test at the dev choice, pre-declared paired comparisons
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def protocol(M):
    from xenbench.studies.protocol import query_splits

    splits = query_splits(N_QUERIES, N_ANCHOR_QUERIES, 15, seeds=[0, 1, 2])
    de = M + 0.5 * np.random.default_rng(2).standard_normal(M.shape)
    runs = ex.adacur_protocol_runs(M, splits, [0, 1], [20], k_values=(1, 5), de_scores=de)
    return splits, de, runs


def test_protocol_runs_parts_are_the_splits_rows(protocol):
    splits, _, runs = protocol
    by_seed = {s.seed: s for s in splits}
    for _, r in runs.iterrows():
        sp = by_seed[r["split_seed"]]
        assert np.array_equal(r["rows"], sp.dev if r["part"] == "dev" else sp.test)
        assert r["recall"] == pytest.approx(float(np.mean(r["per_query"])))
    assert set(runs["method"]) == {ex.METHODS[m] for m in ex.PROTOCOL_METHODS}
    assert len(runs.groupby(["split_seed", "anchor_seed"])) == 6
    # a method that is deterministic given the split runs once per split (under the first anchor seed)
    n_runs = runs.groupby("method")[["split_seed", "anchor_seed"]].apply(lambda g: len(g.drop_duplicates()))
    for key in ex.PROTOCOL_METHODS:
        assert n_runs[ex.METHODS[key]] == (3 if ex.COMPARABLE[key].deterministic else 6), key
    assert set(runs[runs["method"] == ex.METHODS["de_rerank"]]["anchor_seed"]) == {0}


def test_the_methods_called_deterministic_are_and_the_others_are_not(M, split, retrievers):
    # the protocol's run count rests on this: a deterministic method scores the same items for any seed. Read
    # with k = B_CE, a search returns every item it scored, so a different draw shows.
    from xenbench.methods.adacur import SearchOptions
    from xenbench.metrics import BudgetCounter, topk_indices

    budget, M_test = 20, M[split.test]
    orders = {name: topk_indices(retrievers[name], budget) for name in ("de_scores", "tfidf_scores")}

    def scored(key: str, seed: int) -> list[np.ndarray]:
        state = ex.SplitState(M[split.anchor], split.test, orders, 5, ex.SPLIT_FRACTIONS, 1.0, seed, SearchOptions())
        return [v.search(BudgetCounter(M_test, budget), budget)[1] for v in ex.COMPARABLE[key].variants(state, budget)]

    for key, method in ex.COMPARABLE.items():
        same = all(np.array_equal(a, b) for a, b in zip(scored(key, 0), scored(key, 12345)))
        assert same == method.deterministic, key


def test_anncur_anchors_are_drawn_per_split_and_seed(M, monkeypatch):
    from xenbench.methods.cur import AnnCur
    from xenbench.studies.protocol import query_splits, run_seed

    drawn = []
    fit = AnnCur.fit

    def spy(self, R_anc):
        out = fit(self, R_anc)
        drawn.append((self.seed, self.n_anchor_items, tuple(self.anchor_items_)))
        return out

    monkeypatch.setattr(AnnCur, "fit", spy)
    splits = query_splits(N_QUERIES, N_ANCHOR_QUERIES, 15, seeds=[0, 1])
    ex.adacur_protocol_runs(M, splits, [0, 1], [20], methods=("anncur",), k_values=(1,), split_fractions=(0.25,))
    assert [d[0] for d in drawn] == [run_seed(s, r) for s in (0, 1) for r in (0, 1)]
    anchors = {d[2] for d in drawn}
    assert len(anchors) == 4  # 2 splits x 2 seeds: four draws, not two (a seed alone would repeat its draw)
    assert all(len(a) == 5 for a in anchors)


def test_dev_choice_never_reads_test_rows(M, protocol):
    splits, de, runs = protocol
    chosen = ex.chosen_on_dev(runs)
    # corrupt every test row of every split (the scores the methods see and the recall is measured on)
    test_rows = np.unique(np.concatenate([s.test for s in splits]))
    for s in splits:  # the splits' dev/anchor rows must stay intact: use one split's test rows only
        bad = M.copy()
        bad[s.test] = np.random.default_rng(9).standard_normal((s.test.size, M.shape[1])).astype(M.dtype)
        runs_bad = ex.adacur_protocol_runs(bad, [s], [0, 1], [20], k_values=(1, 5), de_scores=de)
        again = ex.chosen_on_dev(runs_bad)
        key = ["split_seed", "anchor_seed", "method", "budget", "k"]
        a = chosen[chosen["split_seed"] == s.seed].set_index(key)["setting"].sort_index()
        b = again.set_index(key)["setting"].sort_index()
        assert a.equals(b)
        assert not np.allclose(again["value"].to_numpy(), chosen[chosen["split_seed"] == s.seed]["value"].to_numpy())
    assert test_rows.size > 0


def test_test_recall_is_reported_at_the_dev_choice(protocol):
    _, _, runs = protocol
    chosen = ex.chosen_on_dev(runs)
    key = ["split_seed", "anchor_seed", "method", "budget", "k"]
    dev, test = runs[runs["part"] == "dev"], runs[runs["part"] == "test"]
    assert len(chosen) == len(dev.groupby(key))
    # run records (RunRecord), each with its test rows
    assert list(chosen.columns) == [c for c in records.RUN_FIELDS if c != "measure"] + ["rows"]
    for _, r in chosen.iterrows():
        same = (dev[key] == r[key].to_numpy()).all(axis=1)
        g = dev[same].sort_values("n_anchor_items")
        best = g[g["recall"] == g["recall"].max()]["n_anchor_items"].iloc[0]  # the smallest k_i among the best
        assert r["setting"] == best and r["dev_value"] == pytest.approx(g["recall"].max())
        t = test[(test[key] == r[key].to_numpy()).all(axis=1) & (test["n_anchor_items"] == best)]
        assert len(t) == 1 and r["value"] == pytest.approx(t["recall"].iloc[0])
        assert r["n_queries"] == len(r["per_query"]) == len(r["rows"])


def _hand_runs(sign: float) -> pd.DataFrame:
    """Two methods on the same 30 test rows in 3 runs; d_q = sign on 24 queries, 0 on 6."""
    rows = np.arange(30)
    hit = (rows < 24).astype(np.float64)
    chal, base = (hit, np.zeros(30)) if sign > 0 else (np.zeros(30), hit)
    out = []
    for run in range(3):
        for method, v in (("C", chal), ("B", base)):
            out.append({"split_seed": run, "anchor_seed": 0, "method": method, "budget": 10, "k": 1,
                        "setting": 0.0, "value": v.mean(), "value_se": 0.0, "rows": rows, "per_query": v})
    return pd.DataFrame(out)


def test_paired_comparisons_verdicts_follow_the_numbers():
    beats = ex.adacur_paired_comparisons(_hand_runs(1.0), pairs=[("C", "B")]).iloc[0]
    assert beats["verdict"] == "beats" and beats["mean"] == pytest.approx(0.8)
    assert (beats["n_better"], beats["n_worse"], beats["n_queries"]) == (24, 0, 30)
    trails = ex.adacur_paired_comparisons(_hand_runs(-1.0), pairs=[("C", "B")]).iloc[0]
    assert trails["verdict"] == "loses" and trails["mean"] == pytest.approx(-0.8)
    level = _hand_runs(1.0)
    level["per_query"] = [np.zeros(30)] * len(level)
    assert ex.adacur_paired_comparisons(level, pairs=[("C", "B")]).iloc[0]["verdict"] == "level"


def test_paired_comparisons_holm_adjust_over_every_declared_cell():
    # d_q = 1 on 6 of 30 queries: paired t p = .012, Wilcoxon p = .031, a win on its own. Two such cells form
    # a family of 2: Holm doubles the smaller p-values (cumulative max), so neither survives.
    def cell(budget: int) -> pd.DataFrame:
        runs = _hand_runs(1.0).assign(budget=budget)
        hit = (np.arange(30) < 6).astype(np.float64)
        runs["per_query"] = [hit if m == "C" else np.zeros(30) for m in runs["method"]]
        return runs

    alone = ex.adacur_paired_comparisons(cell(10), pairs=[("C", "B")]).iloc[0]
    assert alone["verdict"] == "beats" and alone["p_holm"] == pytest.approx(alone["p"])
    family = ex.adacur_paired_comparisons(pd.concat([cell(10), cell(20)], ignore_index=True), pairs=[("C", "B")])
    assert family["p"].tolist() == pytest.approx([alone["p"]] * 2)
    assert family["p_holm"].tolist() == pytest.approx([2 * alone["p"]] * 2)
    assert family["p_wilcoxon_holm"].tolist() == pytest.approx([2 * alone["p_wilcoxon"]] * 2)
    assert family["verdict"].tolist() == ["level"] * 2


def _results(sign: float, spread: float = 0.01) -> dict:
    """03's results by hand: ADACUR TopK No-Split vs ANNCUR at (50, 1) gains sign · (5 ± spread) points over the 3
    splits (one anchor seed each) and about 0 at (50, 10); ADACUR DE+TopK No-Split vs DE re-rank at (50, 1), saved the
    old way: the deterministic pair repeated under 5 anchor seeds per split."""
    cell = {"challenger": "ADACUR TopK No-Split", "baseline": "ANNCUR", "n_queries": 351}
    comp = [{**cell, "budget": 50, "k": 1, "mean": sign * 0.05, "lo": sign * 0.05 - 0.02, "hi": sign * 0.05 + 0.02,
             "p": 0.001, "p_wilcoxon": 0.002, "verdict": "level"},  # a saved verdict is not trusted: recomputed
            {**cell, "budget": 50, "k": 10, "mean": 0.004, "lo": -0.01, "hi": 0.018, "p": 0.6, "p_wilcoxon": 0.5},
            {"challenger": "ADACUR DE+TopK No-Split", "baseline": "DE re-rank", "n_queries": 351, "budget": 50, "k": 1,
             "mean": 0.1, "lo": 0.08, "hi": 0.12, "p": 1e-6, "p_wilcoxon": 1e-6}]
    runs = []
    for split, d in enumerate((-spread, 0.0, spread)):
        for k, gain in ((1, sign * (0.05 + d)), (10, 0.004 + d)):
            runs += [{"split_seed": split, "anchor_seed": 0, "method": "ADACUR TopK No-Split", "budget": 50, "k": k,
                      "value": 0.5 + gain},
                     {"split_seed": split, "anchor_seed": 0, "method": "ANNCUR", "budget": 50, "k": k, "value": 0.5}]
        runs += [{"split_seed": split, "anchor_seed": seed, "method": m, "budget": 50, "k": 1, "value": r}
                 for seed in range(5) for m, r in (("ADACUR DE+TopK No-Split", 0.6 + d), ("DE re-rank", 0.5))]
    summary = [{"method": "ANNCUR", "budget": 50, "k": 1, "mean": 0.375, "lo": 0.355, "hi": 0.395, "n_runs": 15},
               {"method": "DE re-rank", "budget": 50, "k": 1, "mean": 0.3, "lo": 0.29, "hi": 0.31, "n_runs": 3}]
    spread_rows = [{"method": "ANNCUR", "budget": 50, "k": 1, "split_seed": 0, "min": 0.355, "max": 0.395, "mean": 0.37}]
    return {"protocol": {"ce": "cls-ce", "n_items": 100, "n_splits": 3, "n_anchor_seeds": 5, "n_dev_queries": 150,
                         "n_test_queries": 351},
            "comparisons": comp, "summary": summary, "seed_spread": spread_rows, "runs": runs}


def test_findings_say_what_the_numbers_say():
    from xenbench.studies.findings.adacur import findings

    text = "\n".join(findings(_results(+1.0)))
    assert "3 query splits × 5 anchor seeds = 15 runs" in text and "150 dev queries" in text
    assert "DE re-rank (deterministic given the split) count one run per split" in text
    assert "family of 3 declared (pair, budget, k) cells" in text
    assert "ADACUR TopK No-Split vs ANNCUR** (2 (budget, k) cells; 351 test queries, 3 independent runs)" in text
    assert "beats it at 1 (B_CE = 50, k = 1: +5.0 points" in text
    # Holm over the 3 cells: .001 -> .003 (t, 2nd smallest), .002 -> .004 (Wilcoxon); runs +4, +5, +6 points:
    # t-interval 5 ± t(.975, 2) · 1/√3 = [+2.5, +7.5]
    assert "Holm-adjusted p = 0.002 (t) and 0.004 (Wilcoxon); across runs +2.5 to +7.5)" in text
    assert "level at 1 (B_CE = 50/k = 10 (+0.4; Holm-adjusted p = 0.6" in text and "loses to it" not in text
    # the deterministic pair saved under 5 anchor seeds per split counts 3 runs, not 15
    assert "ADACUR DE+TopK No-Split vs DE re-rank** (1 (budget, k) cells; 351 test queries, 3 independent runs)" in text
    assert "from 0.355 to 0.395" in text and "0.375 (95% interval across 15 runs 0.355 to 0.395)" in text
    flipped = "\n".join(findings(_results(-1.0)))
    assert "loses to it at 1 (B_CE = 50, k = 1: -5.0 points" in flipped
    # the same significant per-query test with runs of 0, +5 and +10 points: the interval reaches below 0, level
    vetoed = "\n".join(findings(_results(+1.0, spread=0.05)))
    assert "ADACUR TopK No-Split vs ANNCUR** (2 (budget, k) cells; 351 test queries, 3 independent runs): level at 2" \
        in vetoed
    with pytest.raises(ParameterError, match="protocol"):
        findings({"comparisons": []})


# ----------------------------------------------------------------------------------------------
# device: one resolved device reaches every ADACUR search; "cpu" is the default on a CPU machine
# ----------------------------------------------------------------------------------------------
ONLY_CPU = pytest.mark.skipif(torch.cuda.is_available(), reason="the default device is CUDA on this machine")
NEEDS_CUDA = pytest.mark.cuda


@pytest.fixture
def adacur_devices(monkeypatch) -> list:
    """The torch device of every batched ADACUR search run during the test."""
    seen, original = [], AdaCur._torch_device

    def spy(self):
        seen.append(original(self))
        return seen[-1]

    monkeypatch.setattr(AdaCur, "_torch_device", spy)
    return seen


def _device_runs(M, split, retrievers, **device) -> dict:
    """Every ADACUR-running function of the module on small inputs, with ``device`` (or its default)."""
    from xenbench.studies.protocol import query_splits

    splits = query_splits(N_QUERIES, N_ANCHOR_QUERIES, 15, seeds=[0])
    de = M + 0.5 * np.random.default_rng(2).standard_normal(M.shape)
    trace = ex.adacur_round_trace(M, split, int(split.test[0]), budget=20, n_rounds=4, anchor_fraction=0.5, **device)
    return {
        "recall_vs_budget": ex.recall_vs_budget(M, split, [20], ["anncur_de", "adacur_softmax", "adacur_de_nosplit"],
                                                (1, 5), de_scores=retrievers["de_scores"], **device),
        "recall_vs_rounds": ex.recall_vs_rounds(M, split, [20], rounds=(1, 4), k_values=(1, 5), **device),
        "protocol_runs": ex.adacur_protocol_runs(M, splits, [0], [20], methods=("anncur_de", "adacur_nosplit"),
                                                 k_values=(1, 5), de_scores=de, **device),
        "round_trace": {"anchors": np.concatenate(trace.anchors), "approx": trace.approx, "retrieved": trace.retrieved},
    }


def _assert_same_runs(a: dict, b: dict, atol: float = 0.0) -> None:
    for name in a:
        if name == "round_trace":
            np.testing.assert_array_equal(a[name]["anchors"], b[name]["anchors"])
            np.testing.assert_array_equal(a[name]["retrieved"], b[name]["retrieved"])
            np.testing.assert_allclose(a[name]["approx"], b[name]["approx"], rtol=0, atol=atol or 0)
            continue
        arrays = [c for c in ("per_query", "rows") if c in a[name]]
        pd.testing.assert_frame_equal(a[name].drop(columns=arrays), b[name].drop(columns=arrays), check_exact=not atol,
                                      atol=atol or None)
        for c in arrays:
            for x, y in zip(a[name][c], b[name][c]):
                np.testing.assert_allclose(x, y, rtol=0, atol=atol)


@ONLY_CPU
def test_explicit_cpu_equals_the_default_device(M, split, retrievers, adacur_devices):
    default = _device_runs(M, split, retrievers)
    assert adacur_devices and set(adacur_devices) == {torch.device("cpu")}  # "auto" is the CPU here
    _assert_same_runs(default, _device_runs(M, split, retrievers, device="cpu"))
    latency = ex.latency_vs_rounds(M, split, [20], rounds=(1, 4), max_queries=2)
    assert set(latency["device"]) == {"cpu"}


def test_the_device_reaches_every_adacur_search(M, split, retrievers, adacur_devices):
    # "cpu:0" is the CPU under another name: a search on a hard-coded "cpu" would show up as torch.device("cpu")
    runs = _device_runs(M, split, retrievers, device="cpu:0")
    n = len(adacur_devices)
    ex.latency_vs_rounds(M, split, [20], rounds=(1, 4), max_queries=2, device="cpu:0")
    assert n > 4 and len(adacur_devices) > n
    assert set(adacur_devices) == {torch.device("cpu:0")}
    _assert_same_runs(runs, _device_runs(M, split, retrievers, device="cpu"))


def _every_device_function(M, split, device):
    from xenbench.studies.protocol import query_splits

    splits = query_splits(N_QUERIES, N_ANCHOR_QUERIES, 15, seeds=[0])
    return {
        "recall_vs_budget": lambda: ex.recall_vs_budget(M, split, [20], ["anncur"], (1,), device=device),
        "recall_vs_rounds": lambda: ex.recall_vs_rounds(M, split, [20], rounds=(1,), k_values=(1,), device=device),
        "latency_vs_rounds": lambda: ex.latency_vs_rounds(M, split, [20], rounds=(1,), max_queries=1, device=device),
        "adacur_round_trace": lambda: ex.adacur_round_trace(M, split, int(split.test[0]), budget=20, device=device),
        "adacur_protocol_runs": lambda: ex.adacur_protocol_runs(M, splits, [0], [20], methods=("anncur",), k_values=(1,),
                                                                device=device),
    }


@pytest.mark.parametrize("device,message", [
    ("gpu", "must be 'auto', 'cpu', 'cuda' or 'cuda:<k>'. Got 'gpu'"),
    ("mps", r"must be .* \(this computation is in float64, which MPS lacks\). Got 'mps'"),
    pytest.param("cuda", "must be 'auto' or 'cpu': CUDA is not available on this machine. Got 'cuda'",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_a_bad_device_is_one_clear_error_naming_the_function(M, split, device, message):
    for owner, call in _every_device_function(M, split, device).items():
        with pytest.raises(ParameterError, match=rf"^The 'device' parameter of {owner} {message}"):
            call()


@NEEDS_CUDA
def test_cuda_gives_the_cpu_results(M, split, retrievers, adacur_devices):
    cpu = _device_runs(M, split, retrievers, device="cpu")
    cuda = _device_runs(M, split, retrievers, device="cuda")
    assert {d.type for d in adacur_devices} == {"cpu", "cuda"}
    _assert_same_runs(cpu, cuda, atol=1e-9)  # float64 throughout: the same anchors and recall
    assert set(ex.latency_vs_rounds(M, split, [20], rounds=(1, 4), max_queries=2, device="cuda")["device"]) == {"cuda"}


def test_load_setup_samples_a_store_keeping_every_relevant_item():
    """A store is sampled as a CE on demand is: the queries with a relevant item, each one's relevant items kept."""
    store = str(REPO / "data/scores/noun.cognition/cls-ce")
    setup = study_setup.load_setup(store, "wordnet-el:noun.cognition", max_queries=50, max_items=120, seed=3)
    whole = study_setup.load_setup(store, "wordnet-el:noun.cognition")
    assert setup.M.shape == (50, 120) and setup.sample.n_relevant + setup.sample.n_random == 120
    assert (setup.grades().getnnz(axis=1) > 0).all()  # every sampled query keeps its gold
    rows = [whole.dataset.query_ids.index(q) for q in setup.dataset.query_ids]
    np.testing.assert_array_equal(setup.M, whole.M[np.ix_(rows, setup.items)])  # the same scores, read block-wise
    assert len(setup.dataset.items) == 2964  # the queries over the whole corpus: first stages fit on it
