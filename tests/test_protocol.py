"""xenbench.methods.protocol: disjoint seeded splits, dev-only choice, paired test against hand computation / scipy."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from xenbench.errors import ParameterError
from xenbench.methods.protocol import at_chosen, choose_on_dev, holm, paired_test, pool_by_query, query_splits, summarize


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


def test_pool_by_query_averages_over_runs():
    rows, means = pool_by_query([np.array([1, 3]), np.array([3, 5])], [np.array([1.0, 0.0]), np.array([1.0, 0.5])])
    assert rows.tolist() == [1, 3, 5] and means.tolist() == [1.0, 0.5, 0.5]
