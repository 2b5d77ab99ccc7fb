"""xenbench.studies.protocol: disjoint seeded splits, dev-only choice, paired test against hand computation / scipy."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from xenbench.errors import ParameterError
from xenbench.studies.protocol import (ALPHA, at_chosen, choose_on_dev, compare_runs, decide, holm, paired_test,
                                      pool_by_query, query_splits, run_interval, run_seed, summarize, t_interval, verdict)


def test_query_splits_disjoint_seeded_and_distinct():
    splits = query_splits(50, 10, 8, seeds=[0, 1, 2])
    for s in splits:
        assert len(s.anchor) == 10 and len(s.dev) == 8 and len(s.test) == 32
        parts = [set(s.anchor), set(s.dev), set(s.test)]
        assert not (parts[0] & parts[1]) and not (parts[0] & parts[2]) and not (parts[1] & parts[2])
        assert parts[0] | parts[1] | parts[2] == set(range(50))
        assert all(np.all(np.diff(p) > 0) for p in (s.anchor, s.dev, s.test))
    again = query_splits(50, 10, 8, seeds=[0, 1, 2])
    for s, t in zip(splits, again):
        assert all(np.array_equal(x, y) for x, y in zip(s[:3], t[:3]))
    assert not np.array_equal(splits[0].anchor, splits[1].anchor)
    assert len(query_splits(50, 10, 8, seeds=[3], max_test=5)[0].test) == 5


@pytest.mark.parametrize("kwargs, name", [({"n_anchor": 0}, "n_anchor"), ({"n_dev": 45}, "n_dev"),
                                          ({"seeds": []}, "seeds"), ({"seeds": [1, 1]}, "seeds")])
def test_query_splits_bad_input(kwargs, name):
    args = {"n_queries": 50, "n_anchor": 10, "n_dev": 8, "seeds": [0]} | kwargs
    with pytest.raises(ParameterError, match=name):
        query_splits(**args)


def _grid(recall_by_ki):
    return pd.DataFrame([{"method": "A", "budget": 10, "n_anchor_items": ki, "recall": r}
                         for ki, r in recall_by_ki.items()])


def test_choose_on_dev_picks_dev_best_and_ignores_test():
    dev = _grid({2: 0.5, 5: 0.7, 8: 0.7})  # tie: the smaller k_i
    test = _grid({2: 0.9, 5: 0.1, 8: 0.2})
    chosen = choose_on_dev(dev, by=["method", "budget"], setting="n_anchor_items")
    assert chosen["n_anchor_items"].tolist() == [5] and chosen["recall"].tolist() == [0.7]
    reported = at_chosen(test, chosen, by=["method", "budget"], setting="n_anchor_items")
    assert reported["recall"].tolist() == [0.1]  # the test value at the dev choice, not the test best (0.9)
    corrupted = test.assign(recall=np.random.default_rng(0).random(len(test)))
    assert at_chosen(corrupted, chosen, ["method", "budget"], "n_anchor_items")["n_anchor_items"].tolist() == [5]


def test_holm_matches_hand_computation_and_keeps_the_input_order():
    # m = 4, sorted p = .01, .02, .03, .04 -> 4·.01, 3·.02, max(.06, 2·.03), max(.06, 1·.04)
    np.testing.assert_allclose(holm([0.03, 0.01, 0.04, 0.02]), [0.06, 0.04, 0.06, 0.06])
    np.testing.assert_allclose(holm([0.5, 0.9]), [1.0, 1.0])  # 2·.5 capped at 1; monotone after
    assert holm([0.2]).tolist() == [0.2] and holm([]).size == 0
    with pytest.raises(ParameterError, match="'p_values' parameter of holm"):
        holm([0.1, 1.5])


def test_paired_test_matches_hand_computation_and_scipy():
    a = np.array([1.0, 0.0, 1.0, 1.0, 0.5])
    b = np.array([0.0, 0.0, 1.0, 0.0, 0.0])
    d = a - b  # 1, 0, 0, 1, .5: mean .5, sd .5, se .5/sqrt(5)
    out = paired_test(a, b)
    assert out["mean"] == pytest.approx(0.5)
    assert out["se"] == pytest.approx(0.5 / np.sqrt(5))
    half = stats.t.ppf(0.975, 4) * 0.5 / np.sqrt(5)
    assert (out["lo"], out["hi"]) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    t = 0.5 / (0.5 / np.sqrt(5))
    assert out["p"] == pytest.approx(2 * stats.t.sf(t, 4))
    assert out["p_wilcoxon"] == pytest.approx(stats.wilcoxon(d[d != 0]).pvalue)
    assert (out["n"], out["n_a_better"], out["n_b_better"]) == (5, 3, 0)
    same = paired_test(a, a)
    assert same["mean"] == 0 and same["p"] == 1.0 and same["p_wilcoxon"] == 1.0
    with pytest.raises(ParameterError, match="b_per_query"):
        paired_test(a, b[:3])


def test_summarize_interval_from_run_spread():
    per_run = pd.DataFrame({"method": ["A"] * 3 + ["B"] * 3, "recall": [0.3, 0.4, 0.5, 0.6, 0.6, 0.6],
                            "recall_se": [0.01] * 6})
    s = summarize(per_run, by=["method"]).set_index("method")
    half = stats.t.ppf(0.975, 2) * 0.1 / np.sqrt(3)
    assert s.loc["A", "mean"] == pytest.approx(0.4)
    assert (s.loc["A", "lo"], s.loc["A", "hi"]) == (pytest.approx(0.4 - half), pytest.approx(0.4 + half))
    assert s.loc["B", "sd_runs"] == pytest.approx(0.0) and s.loc["A", "n_runs"] == 3
    assert s.loc["A", "se_query"] == pytest.approx(0.01)


def test_a_recall_interval_is_clipped_to_zero_one():
    """07's findings printed "0.846 to 1.100": the t-interval of a mean near 1 passes 1; a recall's is clipped."""
    per_run = pd.DataFrame({"method": ["A"] * 3 + ["B"] * 3, "recall": [0.75, 0.95, 1.0, 0.0, 0.0, 0.3],
                            "recall_se": [0.01] * 6})
    half_a = stats.t.ppf(0.975, 2) * np.std([0.75, 0.95, 1.0], ddof=1) / np.sqrt(3)
    s = summarize(per_run, by=["method"]).set_index("method")
    assert s.loc["A", "mean"] + half_a > 1 and s.loc["A", "hi"] == 1.0
    assert s.loc["A", "lo"] == pytest.approx(s.loc["A", "mean"] - half_a)  # the side inside [0, 1] is unchanged
    assert s.loc["B", "lo"] == 0.0 and s.loc["B", "hi"] < 1
    raw = summarize(per_run, by=["method"], bounds=None).set_index("method")  # a difference is not a recall
    assert raw.loc["A", "hi"] == pytest.approx(s.loc["A", "mean"] + half_a) and raw.loc["B", "lo"] < 0


def test_pool_by_query_averages_over_runs():
    rows, means = pool_by_query([np.array([1, 3]), np.array([3, 5])], [np.array([1.0, 0.0]), np.array([1.0, 0.5])])
    assert rows.tolist() == [1, 3, 5] and means.tolist() == [1.0, 0.5, 0.5]


# --- the one verdict rule ---------------------------------------------------------------------------


def test_verdict_needs_the_holm_adjusted_test_and_the_run_interval():
    assert verdict([0.001, 0.01], 0.01, 0.05) == "beats"
    assert verdict([0.001, 0.01], -0.05, -0.01) == "loses"
    # the AND: a significant per-query test whose run interval straddles 0 is level, and so is the reverse
    assert verdict([0.001, 0.01], -0.01, 0.05) == "level"
    assert verdict([0.001, 0.06], 0.01, 0.05) == "level"  # every test of the comparison must pass
    assert verdict(0.2, 0.01, 0.05) == "level"
    assert verdict(0.001, float("nan"), float("nan")) == "level"  # one run: no interval, no verdict
    assert verdict(float("nan"), 0.01, 0.05) == "level"
    with pytest.raises(ParameterError, match="'alpha' parameter of verdict"):
        verdict(0.01, 0.0, 1.0, alpha=5.0)


def _cell(diff_queries: int, n: int = 30, runs: int = 3, seed_col: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Challenger a and baseline b over ``runs`` splits of the same ``n`` rows: a_q = 1 on the first
    ``diff_queries`` rows, every other value 0."""
    rows = np.arange(n)
    hit = (rows < diff_queries).astype(np.float64)
    make = lambda v: pd.DataFrame([{"split": s, **({"seed": 0} if seed_col else {}), "rows": rows, "per_query": v}
                                   for s in range(runs)])
    return make(hit), make(np.zeros(n))


def test_a_cell_that_wins_alone_ties_after_holm_over_its_family():
    # d_q = 1 on 6 of 30 queries (0 elsewhere): paired t p = .012 and Wilcoxon p = .031 by hand; the runs agree
    # exactly, so their interval is [0.2, 0.2] and excludes 0.
    one = compare_runs(*_cell(6))
    assert one["mean"] == pytest.approx(0.2) and (one["run_lo"], one["run_hi"]) == (pytest.approx(0.2),) * 2
    assert one["p"] == pytest.approx(stats.ttest_1samp(np.r_[np.ones(6), np.zeros(24)], 0).pvalue)
    assert one["p_wilcoxon"] == pytest.approx(stats.wilcoxon(np.ones(6)).pvalue)
    alone = decide(pd.DataFrame([one]))
    assert alone["verdict"].tolist() == ["beats"] and alone["p_holm"].iloc[0] == pytest.approx(one["p"])
    # the same cell in a declared family with two more cells: Holm multiplies the smallest p by 3
    family = decide(pd.DataFrame([one, compare_runs(*_cell(0)), compare_runs(*_cell(1))]))
    assert family["p_holm"].iloc[0] == pytest.approx(3 * one["p"])
    assert family["p_wilcoxon_holm"].iloc[0] == pytest.approx(3 * one["p_wilcoxon"]) and 3 * one["p_wilcoxon"] > ALPHA
    assert family["verdict"].tolist() == ["level"] * 3
    # a strong cell survives the same family
    strong = decide(pd.DataFrame([compare_runs(*_cell(20)), compare_runs(*_cell(0)), compare_runs(*_cell(1))]))
    assert strong["verdict"].tolist() == ["beats", "level", "level"]


def test_the_run_interval_can_veto_a_significant_per_query_test():
    # 3 splits; the challenger wins on 20 of 30 queries in two runs and loses on 20 in the third: pooled over
    # queries (each query's mean over the runs) it gains +1/3 on 20 queries, p tiny; across runs the
    # interval of (+2/3, +2/3, -2/3) is wide and straddles 0.
    a, b = _cell(20)
    a["per_query"] = [a["per_query"][0], a["per_query"][1], np.zeros(30)]
    b["per_query"] = [b["per_query"][0], b["per_query"][1], (np.arange(30) < 20).astype(float)]
    out = compare_runs(a, b)
    assert out["mean"] == pytest.approx(2 / 9) and out["p"] < 1e-6 and out["p_wilcoxon"] < 1e-3
    want = t_interval(np.array([2 / 3, 2 / 3, -2 / 3]), 0.95)
    assert (out["run_lo"], out["run_hi"]) == (pytest.approx(want[1]), pytest.approx(want[2])) and out["n_runs"] == 3
    assert decide(pd.DataFrame([out]))["verdict"].tolist() == ["level"]


def test_a_deterministic_method_counts_one_run_per_split():
    rng = np.random.default_rng(0)
    rows = np.arange(40)
    # the challenger is random: 4 seeds per split; the baseline is deterministic: one run per split
    a = pd.DataFrame([{"split": s, "seed": r, "rows": rows, "per_query": rng.random(40)}
                      for s in range(3) for r in range(4)])
    b = pd.DataFrame([{"split": s, "seed": 0, "rows": rows, "per_query": rng.integers(0, 2, 40) / 2} for s in range(3)])
    out = compare_runs(a, b)
    assert out["n_runs"] == 12  # each of a's runs, paired with its split's one run of b
    diffs = [a.per_query[i] - b.per_query[a.split[i]] for i in range(12)]
    want = t_interval(np.array([d.mean() for d in diffs]), 0.95)
    assert (out["run_lo"], out["run_hi"]) == (pytest.approx(want[1]), pytest.approx(want[2]))
    assert out["mean"] == pytest.approx(np.mean(diffs))  # every query is in every run: the pooled mean
    # both deterministic: one run per split, 3 runs, not 3 x (number of seeds)
    both = compare_runs(b.assign(per_query=[v + 0.25 for v in b.per_query]), b)
    assert both["n_runs"] == 3 and both["run_mean"] == 0.25
    # a split without seeds (seed=None) is one run
    assert compare_runs(*_cell(6, seed_col=False), seed=None)["n_runs"] == 3
    with pytest.raises(ParameterError, match="'a' parameter of pair_runs"):
        compare_runs(pd.concat([a, a]), pd.concat([a, a]))  # two runs with one seed in a split
    # the same interval from the runs' mean recalls alone (what a results file keeps)
    means = lambda df: df.assign(recall=[float(np.mean(v)) for v in df["per_query"]]).drop(columns=["per_query"])
    again = run_interval(means(a), means(b))
    assert again["n_runs"] == 12 and (again["run_lo"], again["run_hi"]) == (pytest.approx(out["run_lo"]),
                                                                            pytest.approx(out["run_hi"]))


def test_compare_runs_refuses_runs_on_different_rows():
    a, b = _cell(6)
    b["rows"] = [np.arange(1, 31)] * len(b)
    with pytest.raises(ParameterError, match="same test rows"):
        compare_runs(a, b)


def test_run_seed_depends_on_split_and_seed():
    seeds = {run_seed(s, r) for s in range(5) for r in range(5)}
    assert len(seeds) == 25  # every (split, seed) draws its own
    assert run_seed(2, 3) == run_seed(2, 3) == int(np.random.SeedSequence([2, 3]).generate_state(1, np.uint32)[0])
    with pytest.raises(ParameterError, match="'seed' parameter of run_seed"):
        run_seed(0, -1)
