"""Small methods of a user's own, added to notebook 07 without editing xenbench (tests/test_extra_methods.py).

Each follows :class:`xenbench.studies.methods.Method`: made without arguments, ``fit(state)``, ``search(counter, k)``.
"""
from __future__ import annotations

import numpy as np

from xenbench.metrics import topk_indices


def _top_by_exact(counter, items: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Score ``items`` (nq, B) through the counter; the top-k of each row by exact score (the one tie rule)."""
    scores = counter.score(items)
    top = topk_indices(scores, k)
    rows = np.arange(items.shape[0])[:, None]
    return scores[rows, top].astype(np.float32), items[rows, top].astype(np.int64)


class ReverseRerank:
    """Scores the DE's top B_CE items in reverse order: the same items as DE re-rank, so the same top-k."""

    label = "reversed DE top-B"

    def fit(self, state):
        self.order_ = state.orders["de_scores"]
        return self

    def search(self, counter, k):
        items = self.order_[:, :counter.budget][:, ::-1]
        for j in range(items.shape[1]):  # one call per item, the last first: the order does not change the set
            counter.score(items[:, j:j + 1])
        return _top_by_exact(counter, items, k)


class RandomItems:
    """Scores B_CE items drawn at random (seeded by the run's seed): a random draw per anchor seed."""

    label = "random items"
    deterministic = False

    def fit(self, state):
        self.seed_, self.rows_ = state.seed, state.test
        return self

    def search(self, counter, k):
        rng = np.random.default_rng(self.seed_)
        items = np.stack([rng.permutation(counter.n_items)[:counter.budget] for _ in self.rows_])
        return _top_by_exact(counter, items, k)


class Greedy:
    """Asks for one CE call more than its budget."""

    def fit(self, state):
        return self

    def search(self, counter, k):
        items = np.tile(np.arange(counter.budget + 1), (counter.n_queries, 1))
        return _top_by_exact(counter, items, k)


class OutsideCorpus:
    """Returns an item index past the corpus."""

    def fit(self, state):
        return self

    def search(self, counter, k):
        D, I = _top_by_exact(counter, np.tile(np.arange(counter.budget), (counter.n_queries, 1)), k)
        I[0, 0] = counter.n_items
        return D, I


class NoState:
    """fit takes no state: refused before any work."""

    def fit(self):
        return self

    def search(self, counter, k):
        raise AssertionError("never called")


class NeedsArgs:
    """Cannot be made without arguments."""

    def __init__(self, budget):
        self.budget = budget

    def fit(self, state):
        return self

    def search(self, counter, k):
        raise AssertionError("never called")


not_a_class = 3
