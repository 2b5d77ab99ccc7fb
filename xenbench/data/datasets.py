"""One ``Dataset`` type for every source: items, queries, gold and named query splits.

Every loader returns one (:mod:`~xenbench.data.beir` for BEIR folders, :mod:`~xenbench.data.zeshel` for ZESHEL
files, :mod:`~xenbench.data.sources` for the bundled WordNet-EL domains and the one-string specs of
``load_dataset``); notebooks, methods and the scorer read nothing else. :meth:`Dataset.split_queries` and
:meth:`Dataset.subset` derive new datasets (seeded); :func:`sample_queries` is the one seeded query sample.

Identifiers are always strings (a loader converts JSON integer ids with ``str``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from xenbench._validation import PY_INT, check_int, is_float
from xenbench.data.readers import MAX_LINE_BYTES  # noqa: F401  (docs/DATA.md names xb.data.datasets.MAX_LINE_BYTES)
from xenbench.errors import ParameterError
from xenbench.sampling import Sample, labelled_sample, sample_rows

__all__ = [
    "Item",
    "Query",
    "Dataset",
    "DEFAULT_FRACTIONS",
    "corpus_sample",
    "sample_queries",
]

#: Default ``fractions`` of :meth:`Dataset.split_queries`.
# Read-only so no caller can change every later default split by mutating it.
DEFAULT_FRACTIONS: Mapping[str, float] = MappingProxyType({"train": 0.6, "dev": 0.2, "test": 0.2})


@dataclass(frozen=True)
class Item:
    """A retrievable entity/document. ``id`` is always a string."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Query:
    """A query; ``mention`` is an optional character span ``(start, end)`` (end exclusive) into ``text``."""

    id: str
    text: str
    mention: tuple[int, int] | None = None


@dataclass
class Dataset:
    """Items, queries, graded relevance per query, and named query splits.

    ``qrels[qid]`` maps item ids to relevance grades (integers, as TREC qrels hold them: > 0 relevant, 0 or below
    judged not relevant); ``gold[qid]`` lists the relevant items (grade > 0) in the order they were judged;
    ``splits[name]`` lists query ids. Give either: ``gold`` alone means grade 1 for each listed item (ZESHEL,
    WordNet-EL), ``qrels`` alone fills ``gold``; given both, they must agree.

    Treat a ``Dataset`` as immutable: the helpers (:meth:`split_queries`, :meth:`subset`) return
    new datasets, and the id indexes are cached (rebuilt only if ``items``/``queries`` is replaced
    or changes length).
    """

    name: str
    items: list[Item]
    queries: list[Query]
    gold: dict[str, list[str]]
    splits: dict[str, list[str]] = field(default_factory=dict)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.qrels:
            self.qrels = {qid: dict.fromkeys(golds, 1) for qid, golds in self.gold.items() if golds}
            return
        positives = {qid: [i for i, g in judged.items() if g > 0] for qid, judged in self.qrels.items()}
        positives = {qid: golds for qid, golds in positives.items() if golds}
        if not self.gold:
            self.gold = positives
        elif {q: set(g) for q, g in positives.items()} != {q: set(g) for q, g in self.gold.items() if g}:
            raise ParameterError("gold", "the items of qrels with grade > 0 (give one of gold and qrels, or both "
                                 "agreeing)", "gold that differs from qrels", "Dataset")

    def grades(self, queries: Sequence[str] | None = None, items: Sequence[str] | None = None):
        """Relevance grades as a sparse matrix: rows ``queries``, columns ``items`` (ids; default all, in row order).

        Returns
        -------
        scipy.sparse.csr_matrix of shape (len(queries), len(items)), int64
            The grade of every judged pair whose item is among ``items`` (items outside them are dropped: a
            subsample of the corpus cannot retrieve them); judged-not-relevant grades are stored as 0 entries only
            implicitly (every measure here reads the positive grades).
        """
        import scipy.sparse as sp

        queries = self.query_ids if queries is None else list(queries)
        column = self.item_index if items is None else {item_id: j for j, item_id in enumerate(items)}
        rows, cols, vals = [], [], []
        for r, qid in enumerate(queries):
            for item_id, grade in self.qrels.get(qid, {}).items():
                j = column.get(item_id)
                if j is not None and grade > 0:
                    rows.append(r)
                    cols.append(j)
                    vals.append(int(grade))
        n_items = len(self.items) if items is None else len(column)
        return sp.csr_matrix((np.asarray(vals, np.int64), (rows, cols)), shape=(len(queries), n_items))

    def __repr__(self) -> str:
        # The generated repr would print the whole corpus in a notebook cell; sizes say enough.
        splits = {name: len(ids) for name, ids in self.splits.items()}
        return (
            f"Dataset(name={self.name!r}, items={len(self.items)}, queries={len(self.queries)}, "
            f"gold={len(self.gold)}, splits={splits})"
        )

    # -- ids and lookups ------------------------------------------------------------------------

    @property
    def item_ids(self) -> list[str]:
        """Item ids in row order."""
        return [item.id for item in self.items]

    @property
    def query_ids(self) -> list[str]:
        """Query ids in row order."""
        return [query.id for query in self.queries]

    @property
    def item_index(self) -> dict[str, int]:
        """Map item id -> row in ``items`` (the column of a score matrix)."""
        return self._index("items")

    @property
    def query_index(self) -> dict[str, int]:
        """Map query id -> row in ``queries`` (the row of a score matrix)."""
        return self._index("queries")

    def _index(self, attr: str) -> dict[str, int]:
        # Cached because callers look ids up in loops. The cache holds the list itself (compared with
        # ``is``, so a freed list's id can never be mistaken for a new one) and its length.
        rows = getattr(self, attr)
        cache = self.__dict__.setdefault("_index_cache", {})
        hit = cache.get(attr)
        if hit is None or hit[0] is not rows or hit[1] != len(rows):
            hit = (rows, len(rows), {row.id: i for i, row in enumerate(rows)})
            cache[attr] = hit
        return hit[2]

    def query(self, query_id: str) -> Query:
        """The query with id ``query_id``.

        Raises
        ------
        ParameterError
            If no query has that id.
        """
        row = self.query_index.get(query_id)
        if row is None:
            raise ParameterError("query_id", f"a query id of dataset {self.name!r}", query_id, "Dataset.query")
        return self.queries[row]

    def item(self, item_id: str) -> Item:
        """The item with id ``item_id``.

        Raises
        ------
        ParameterError
            If no item has that id.
        """
        row = self.item_index.get(item_id)
        if row is None:
            raise ParameterError("item_id", f"an item id of dataset {self.name!r}", item_id, "Dataset.item")
        return self.items[row]

    # -- derived datasets -----------------------------------------------------------------------

    def split_queries(
        self,
        seed: int,
        fractions: Mapping[str, float] | None = None,
        *,
        with_gold_only: bool = True,
    ) -> Dataset:
        """A copy whose ``splits`` is a fresh seeded random partition of the queries.

        Parameters
        ----------
        seed
            Seed of ``numpy.random.default_rng``; the same seed gives the same split.
        fractions
            Split name -> fraction of the queries, summing to 1 (default :data:`DEFAULT_FRACTIONS`,
            60/20/20 train/dev/test). Sizes are rounded on the cumulative fractions, so they always
            add up to the number of queries split.
        with_gold_only
            Split only queries that have gold (default): a query without gold cannot be evaluated,
            and BEIR qrels cannot record it, so it stays out of every split as in
            :func:`~xenbench.data.beir.load_beir`.

        Returns
        -------
        Dataset
            Same items, queries and gold; ``splits`` replaced. Each split lists its ids in
            permutation order, so taking its first ``k`` ids is still a random sample.

        Notes
        -----
        Ids are sorted before the permutation, so the split does not depend on the input order.
        """
        owner = "Dataset.split_queries"
        check_int(seed, "seed", None, None, owner, expected="an integer")
        fractions = dict(DEFAULT_FRACTIONS if fractions is None else fractions)
        if not fractions:
            raise ParameterError("fractions", "a non-empty mapping of split name to fraction", fractions, owner)
        for name, frac in fractions.items():
            if not isinstance(name, str) or not name:
                raise ParameterError("fractions", "keyed by non-empty split names", fractions, owner)
            if not is_float(frac, 0, 1):
                raise ParameterError("fractions", "fractions between 0 and 1", fractions, owner)
        if not math.isclose(sum(fractions.values()), 1.0, rel_tol=0.0, abs_tol=1e-9):
            raise ParameterError("fractions", "fractions summing to 1", fractions, owner)

        ids = sorted(q.id for q in self.queries if not with_gold_only or self.gold.get(q.id))
        order = np.random.default_rng(int(seed)).permutation(len(ids))
        shuffled = [ids[i] for i in order]
        # Cut at rounded cumulative fractions: sizes sum to len(ids) without a remainder fix-up.
        cuts = np.rint(np.cumsum(list(fractions.values())) * len(ids)).astype(int)
        cuts[-1] = len(ids)
        splits, start = {}, 0
        for name, stop in zip(fractions, cuts):
            splits[name] = shuffled[start:stop]
            start = stop
        return Dataset(self.name, list(self.items), list(self.queries), dict(self.gold), splits,
                       {qid: dict(judged) for qid, judged in self.qrels.items()})

    def subset(self, query_ids: Iterable[str] | None = None, item_ids: Iterable[str] | None = None) -> Dataset:
        """A copy restricted to some queries and/or items, with gold and splits kept consistent.

        Parameters
        ----------
        query_ids
            Queries to keep (``None``: all). Row order of the dataset is kept, not this order.
        item_ids
            Items to keep (``None``: all).

        Returns
        -------
        Dataset
            Gold lists only kept items (a query left with none loses its gold entry and leaves every
            split); splits list only kept queries. The result can always be written by
            :func:`~xenbench.data.beir.save_beir`.

        Raises
        ------
        ParameterError
            If an id is not in the dataset (a typo would otherwise silently shrink the result).
        """
        keep_q = self._checked_ids(query_ids, self.query_index, "query_ids")
        keep_i = self._checked_ids(item_ids, self.item_index, "item_ids")
        queries = [q for q in self.queries if keep_q is None or q.id in keep_q]
        items = [it for it in self.items if keep_i is None or it.id in keep_i]
        gold: dict[str, list[str]] = {}
        for qid, golds in self.gold.items():
            if keep_q is not None and qid not in keep_q:
                continue
            kept = [g for g in golds if keep_i is None or g in keep_i]
            if kept:
                gold[qid] = kept
        # A query keeps its judgements (not-relevant ones too) only while it keeps a relevant item.
        qrels = {qid: {i: g for i, g in self.qrels[qid].items() if keep_i is None or i in keep_i} for qid in gold}
        # A query whose gold items were all dropped stays a query but leaves its splits: a split (a qrels file)
        # lists judged queries only, so save_beir can write the subset.
        lost = {qid for qid in self.gold if qid not in gold}
        splits = {name: [q for q in ids if (keep_q is None or q in keep_q) and q not in lost]
                  for name, ids in self.splits.items()}
        return Dataset(self.name, items, queries, gold, splits, qrels)

    @staticmethod
    def _checked_ids(ids: Iterable[str] | None, index: Mapping[str, int], name: str) -> set[str] | None:
        if ids is None:
            return None
        if isinstance(ids, str):  # a bare string would be iterated character by character
            raise ParameterError(name, "an iterable of ids (not a single string)", ids, "Dataset.subset")
        wanted = set(ids)
        unknown = sorted(wanted.difference(index))
        if unknown:
            raise ParameterError(name, "ids present in the dataset", unknown[:5], "Dataset.subset")
        return wanted



def corpus_sample(dataset: Dataset, max_queries: int | None = None, max_items: int | None = None, seed: int = 0, *,
                  owner: str = "corpus_sample") -> Sample:
    """The seeded sample notebooks 03, 04 and 07 work on (:func:`xenbench.sampling.labelled_sample`): with qrels, the
    queries with a relevant item and every relevant item of theirs plus a random fill; without, plain seeded rows.

    One function for the kernel (:func:`xenbench.studies.setup.load_setup`) and every check before it (the sizes,
    the scoring plan, a run file's queries), so all of them see the same rows.
    """
    grades = dataset.grades()
    relevant = [grades.indices[grades.indptr[r]:grades.indptr[r + 1]] for r in range(grades.shape[0])]
    return labelled_sample(len(dataset.queries), len(dataset.items), relevant, max_queries, max_items, seed,
                           owner=owner)


def sample_queries(dataset: Dataset, max_queries: int | None = None, seed: int = 0) -> list[Query]:
    """The queries with gold, or a seeded random sample of ``max_queries`` of them, in dataset order.

    Raises
    ------
    ParameterError
        If ``max_queries`` is not ``None`` or an int >= 1.
    """
    check_int(max_queries, "max_queries", 1, None, "sample_queries", allow_none=True, types=PY_INT)
    with_gold = [q for q in dataset.queries if dataset.gold.get(q.id)]
    if max_queries is None or max_queries >= len(with_gold):
        return with_gold
    return [with_gold[i] for i in sample_rows(len(with_gold), max_queries, seed, kind="queries")]
