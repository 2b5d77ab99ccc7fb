"""The in-domain (by_item) split on hand-checkable item groups, the random split of the same sizes, and pooling."""
from __future__ import annotations

import numpy as np
import pytest

from xenbench.errors import DataError, ParameterError
from xenbench.studies.splits import gold_groups, make_split, pool_datasets, split_by_item, split_like

# Items 0..4 with 2, 1, 3, 4 and 1 queries; query 13 has no gold item (-1).
GROUPS = np.array([0, 0, 1, 2, 2, 2, 3, 3, 3, 3, 4, 7, 7, -1])


def sides(split, groups=GROUPS):
    train = set(groups[split.anchor])
    evaluated = set(groups[np.concatenate([split.dev, split.test])])
    return train, evaluated


def test_by_item_puts_each_multi_query_item_on_both_sides():
    splits = [s for s in (_try(seed) for seed in range(20)) if s]
    assert len(splits) >= 10  # a seed whose dev or test draw comes out empty is an error, not a silent split
    for split in splits:
        parts = (split.anchor, split.dev, split.test)
        assert sorted(np.concatenate(parts)) == list(range(GROUPS.size))  # a partition: disjoint and complete
        for part in parts:
            assert list(part) == sorted(part)
        train, evaluated = sides(split)
        assert {0, 2, 3, 7} <= train and {0, 2, 3, 7} == evaluated  # every item with >= 2 queries: both sides
        assert {1, 4, -1} <= train  # single-query items and gold-less queries stay in training
        # By hand: c = 2 -> 1 eval; c = 3 -> round(1.5) = 2; c = 4 -> 2; item 7 (c = 2) -> 1: 6 eval queries.
        assert split.dev.size + split.test.size == 6


def test_by_item_is_seeded():
    a, b = split_by_item(GROUPS, seed=1), split_by_item(GROUPS, seed=1)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert a.seed == 1  # the one split type (xenbench.studies.protocol.Split) names the seed that drew it
    draws = {tuple(np.concatenate([s.dev, [-1], s.test])) for s in (_try(seed) for seed in range(20)) if s}
    assert len(draws) > 1


def _try(seed):
    try:
        return split_by_item(GROUPS, seed=seed)
    except ParameterError:
        return None


def test_eval_fraction_caps_at_all_but_one():
    groups = np.repeat([0, 1], 10)
    split = split_by_item(groups, eval_fraction=0.99, dev_fraction=0.5, seed=0)
    assert split.anchor.size == 2 and set(groups[split.anchor]) == {0, 1}


def test_random_split_like_by_item_sizes():
    by_item = split_by_item(GROUPS, seed=1)
    rand = make_split("random", GROUPS, seed=1)
    assert (rand.dev.size, rand.test.size) == (by_item.dev.size, by_item.test.size)
    assert sorted(np.concatenate(rand[:3])) == list(range(GROUPS.size))
    again = split_like(GROUPS.size, by_item.dev.size, by_item.test.size, seed=1)
    np.testing.assert_array_equal(rand.test, again.test)


def test_bad_inputs():
    with pytest.raises(ParameterError, match="split"):
        make_split("by_gold", GROUPS)
    with pytest.raises(ParameterError, match="eval_fraction"):
        split_by_item(GROUPS, eval_fraction=1.0)
    with pytest.raises(ParameterError, match="groups"):
        split_by_item(np.arange(5), seed=0)  # no item has 2 queries: no dev/test
    with pytest.raises(ParameterError, match="n_test"):
        split_like(10, 5, 5)


def test_gold_groups_and_pooling_of_bundled_domains():
    ds = pool_datasets(["wordnet-el:verb.weather", "wordnet-el:verb.consumption"])
    groups = gold_groups(ds)
    assert groups.size == len(ds.queries) and (groups >= 0).all()
    for r in range(0, len(ds.queries), 17):
        assert ds.items[groups[r]].id in ds.gold[ds.queries[r].id]
    with pytest.raises(DataError, match="repeat"):
        pool_datasets(["wordnet-el:verb.weather", "wordnet-el:verb.weather"])
