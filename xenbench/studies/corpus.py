"""Several datasets as one corpus of dense embeddings: items, queries and gold labels as global rows.

CCSA ([CCSA] §4.1) indexes a whole collection; our largest is WordNet-EL, 95,840 items over 40 domains.
:func:`load_corpus` stacks each domain's dual-encoder (DE) embeddings (read from the DE's on-disk cache,
computed and cached per domain when missing, so an interrupted assembly resumes at the first domain not
yet cached) and maps every query's gold item ids to global item rows.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from xenbench.data.sources import load_dataset, wordnet_el_domains  # wordnet_el_domains: re-exported
from xenbench.errors import ParameterError

__all__ = ["Corpus", "corpus_specs", "load_corpus", "wordnet_el_domains"]


def corpus_specs(dataset: str | Sequence[str]) -> list[str]:
    """Dataset specs of a corpus: ``"wordnet-el:all"`` (every domain), one spec, or a list (or comma-separated
    string) of specs/domains.

    A bare domain name (``"verb.weather"``) means ``"wordnet-el:verb.weather"``.
    """
    if isinstance(dataset, str):
        if dataset == "wordnet-el:all":
            return [f"wordnet-el:{d}" for d in wordnet_el_domains()]
        dataset = [s.strip() for s in dataset.split(",")] if "," in dataset else [dataset]
    if not isinstance(dataset, Sequence) or not dataset or not all(isinstance(s, str) and s for s in dataset):
        raise ParameterError("dataset", "'wordnet-el:all', a dataset spec, or a non-empty list of specs/domains",
                             dataset, "corpus_specs")
    specs = [s if ":" in s else f"wordnet-el:{s}" for s in dataset]
    if len(set(specs)) != len(specs):
        raise ParameterError("dataset", "distinct dataset specs", dataset, "corpus_specs")
    return specs


@dataclass
class Corpus:
    """Dense embeddings of several datasets, stacked in the order of ``specs``.

    Attributes
    ----------
    name : str
    specs : list of str
    items : float32 ndarray (N, d)
        L2-normalized DE item embeddings.
    queries : float32 ndarray (nq, d)
    relevant : scipy.sparse.csr_matrix (nq, N)
        1 where a gold item (global row) of the query.
    item_source, query_source : int ndarray
        Index into ``specs`` of each item / query row.
    """

    name: str
    specs: list[str]
    items: np.ndarray
    queries: np.ndarray
    relevant: sp.csr_matrix
    item_source: np.ndarray
    query_source: np.ndarray

    def __repr__(self) -> str:
        return (f"Corpus(name={self.name!r}, sources={len(self.specs)}, items={len(self.items)}, "
                f"queries={len(self.queries)}, d={self.items.shape[1]})")

    def query_subset(self, rows: np.ndarray) -> "Corpus":
        """The same items with only the given query rows."""
        rows = np.asarray(rows, dtype=np.int64)
        return Corpus(self.name, self.specs, self.items, self.queries[rows], self.relevant[rows],
                      self.item_source, self.query_source[rows])


def load_corpus(dataset: str | Sequence[str], *, encoder=None, progress: bool = True) -> Corpus:
    """Stack the DE embeddings and gold labels of every dataset in ``dataset`` (see :func:`corpus_specs`).

    Each dataset is embedded by ``encoder`` (default :class:`xenbench.models.retrievers.DualEncoder`), whose cache
    is keyed by the texts, so a cached dataset costs one file read and a missing one is computed and cached
    before the next starts (resumable per dataset).
    """
    specs = corpus_specs(dataset)
    if encoder is None:
        from xenbench.models.retrievers import DualEncoder

        encoder = DualEncoder()
    items, queries, rows, cols, item_src, query_src = [], [], [], [], [], []
    n_items = n_queries = 0
    for s, spec in enumerate(tqdm(specs, desc="corpus", disable=not progress)):
        ds = load_dataset(spec)
        X = encoder.fit(ds.items).item_embeddings_
        Q = encoder.embed_queries(ds.queries)
        index = ds.item_index
        for r, q in enumerate(ds.queries):
            for item_id in ds.gold.get(q.id, []):
                if item_id in index:
                    rows.append(n_queries + r)
                    cols.append(n_items + index[item_id])
        items.append(X)
        queries.append(Q)
        item_src.append(np.full(len(X), s))
        query_src.append(np.full(len(Q), s))
        n_items += len(X)
        n_queries += len(Q)
    relevant = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n_queries, n_items))
    name = dataset if isinstance(dataset, str) else "+".join(specs)
    return Corpus(name, specs, np.concatenate(items).astype(np.float32), np.concatenate(queries).astype(np.float32),
                  relevant, np.concatenate(item_src), np.concatenate(query_src))
