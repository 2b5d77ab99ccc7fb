"""Query splits for adapters that learn from labelled training queries (PEFA, [PEFA] §3-4).

A kNN model over training queries can only help a test query whose relevant item was labelled for
some training query (its *gold is seen*). Two regimes:

Both return a :class:`xenbench.studies.protocol.Split` whose ``anchor`` rows are the labelled training queries
(PEFA's kNN memory), with ``dev`` (choose λ, k) and ``test`` (report) rows.

* ``"random"``: dev and test queries drawn uniformly from all queries (the rest train). On WordNet-EL,
  where queries are example sentences of different senses, few test golds are seen.
* ``"by_item"`` (in-domain): each item's queries are divided between training and evaluation, so an
  item with >= 2 queries has some on both sides; items with a single query stay in training. Every
  evaluation gold is then seen, as for the repeated relevant items of NQ-320K and product search.

References
----------
.. [PEFA] Chang, Jiang, Wang, Jiang, Yu, Dhillon. "PEFA: Parameter-Free Adapters for Large-scale
   Embedding-based Retrieval Models", WSDM 2024: §3 (the kNN memory of training queries), §4 (data).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xenbench._validation import check_float, check_int
from xenbench.data.datasets import Dataset
from xenbench.data.sources import load_dataset
from xenbench.errors import DataError, ParameterError
from xenbench.studies.protocol import Split

__all__ = ["SPLITS", "gold_groups", "make_split", "pool_datasets", "pooled_embeddings", "split_by_item",
           "split_like"]

SPLITS = ("random", "by_item")


def _fraction(x: object, name: str, owner: str) -> float:
    return check_float(x, name, 0, 1, owner, closed="neither")


def gold_groups(dataset: Dataset) -> np.ndarray:
    """Row of each query's first gold item in ``dataset.items`` (-1 for a query without one), shape (n_queries,)."""
    index = dataset.item_index
    out = np.full(len(dataset.queries), -1, np.int64)
    for r, q in enumerate(dataset.queries):
        for item_id in dataset.gold.get(q.id, []):
            if item_id in index:
                out[r] = index[item_id]
                break
    return out


def split_by_item(groups: Sequence[int], eval_fraction: float = 0.5, dev_fraction: float = 0.5, *,
                  seed: int = 0) -> Split:
    """In-domain split: every item's queries divided between training and evaluation (dev + test).

    An item with c >= 2 queries sends max(1, min(c - 1, round(eval_fraction · c))) of them (Python's round,
    half to even; a seeded choice) to evaluation and keeps the others in training, so it has queries on both
    sides. Items with one query, and queries without an item (group -1), stay in training. Each evaluation query
    goes to dev with probability ``dev_fraction`` (seeded), else to test.

    Parameters
    ----------
    groups : sequence of int
        The item (any integer label; -1 = none) of each query, e.g. :func:`gold_groups`.
    eval_fraction, dev_fraction : float in (0, 1)
    seed : int

    Examples
    --------
    >>> split_by_item([0, 0, 1, 2, 2, 2], seed=0).anchor.size  # item 0: 1 + 1, item 1: 1 + 0, item 2: 1 + 2
    3
    """
    owner = "split_by_item"
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.size < 2 or not np.issubdtype(groups.dtype, np.integer):
        raise ParameterError("groups", "a 1-d integer array with one item label per query (>= 2 queries)",
                             f"{groups.dtype} array of shape {groups.shape}", owner)
    eval_fraction = _fraction(eval_fraction, "eval_fraction", owner)
    dev_fraction = _fraction(dev_fraction, "dev_fraction", owner)
    seed = check_int(seed, "seed", 0, 2**63 - 1, owner, "2**63 - 1")
    rng = np.random.default_rng(seed)
    is_eval = np.zeros(groups.size, bool)
    for g in np.unique(groups[groups >= 0]):  # sorted labels: the draw depends on the seed only
        rows = np.flatnonzero(groups == g)
        c = rows.size
        if c >= 2:
            n_eval = max(1, min(c - 1, int(round(eval_fraction * c))))
            is_eval[rng.choice(rows, n_eval, replace=False)] = True
    to_dev = rng.random(groups.size) < dev_fraction
    train = np.flatnonzero(~is_eval)
    dev, test = np.flatnonzero(is_eval & to_dev), np.flatnonzero(is_eval & ~to_dev)
    if dev.size == 0 or test.size == 0:
        raise ParameterError("groups", "items with >= 2 queries, enough for non-empty dev and test queries",
                             f"{dev.size} dev and {test.size} test queries", owner)
    return Split(train, dev, test, seed)


def split_like(n: int, n_dev: int, n_test: int, *, seed: int = 0) -> Split:
    """Random split of ``n`` query rows with ``n_dev`` dev and ``n_test`` test queries (the rest train)."""
    owner = "split_like"
    n = check_int(n, "n", 3, 2**63 - 1, owner, "2**63 - 1")
    n_dev = check_int(n_dev, "n_dev", 1, n - 2, owner, "n - 2")
    n_test = check_int(n_test, "n_test", 1, n - 1 - n_dev, owner, "n - 1 - n_dev")
    seed = check_int(seed, "seed", 0, 2**63 - 1, owner, "2**63 - 1")
    perm = np.random.default_rng(seed).permutation(n)
    return Split(np.sort(perm[n_dev + n_test:]), np.sort(perm[:n_dev]), np.sort(perm[n_dev:n_dev + n_test]), seed)


def make_split(kind: str, groups: Sequence[int], eval_fraction: float = 0.5, dev_fraction: float = 0.5, *,
               seed: int = 0) -> Split:
    """A ``"by_item"`` split (:func:`split_by_item`), or a ``"random"`` one with the same dev and test sizes.

    Both regimes of one seed thus evaluate equally many queries and train on equally many.
    """
    if kind not in SPLITS:
        raise ParameterError("split", f"one of {list(SPLITS)}", kind, "make_split")
    by_item = split_by_item(groups, eval_fraction, dev_fraction, seed=seed)
    if kind == "by_item":
        return by_item
    return split_like(len(groups), by_item.dev.size, by_item.test.size, seed=seed)


def pool_datasets(specs: Sequence[str], name: str | None = None) -> Dataset:
    """One dataset of the items, queries and gold labels of several (e.g. WordNet-EL domains); ids must not clash."""
    if isinstance(specs, str) or not specs:
        raise ParameterError("datasets", "a non-empty list of dataset specs", specs, "pool_datasets")
    parts = [load_dataset(s) for s in specs]
    items = [it for ds in parts for it in ds.items]
    queries = [q for ds in parts for q in ds.queries]
    for what, ids in (("item", [it.id for it in items]), ("query", [q.id for q in queries])):
        if len(set(ids)) != len(ids):
            raise DataError(", ".join(specs), f"{what} ids repeat across the pooled datasets")
    gold = {k: list(v) for ds in parts for k, v in ds.gold.items()}
    return Dataset(name or " + ".join(ds.name for ds in parts), items, queries, gold)


def pooled_embeddings(specs: Sequence[str], *, device: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Bundled DE embeddings of :func:`pool_datasets` ``(specs)``: items P and queries U, row-aligned with it.

    Embedded one dataset at a time (L2-normalized rows do not depend on their neighbours), so each
    dataset's embeddings come from, and go to, the same on-disk cache as a single-dataset run's.
    ``device``: where the DE encodes (:class:`xenbench.models.retrievers.DualEncoder`).
    """
    from xenbench.models.retrievers import DualEncoder

    P, U = [], []
    for spec in specs:
        ds = load_dataset(spec)
        de = DualEncoder(device=device).fit(ds.items)
        P.append(de.item_embeddings_)
        U.append(de.embed_queries(ds.queries))
    return np.concatenate(P), np.concatenate(U)
