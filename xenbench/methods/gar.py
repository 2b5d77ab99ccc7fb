"""GAR: graph-based adaptive re-ranking over a corpus graph ([GAR] Alg. 1), through its authors' ``pyterrier-adaptive``.

GAR spends its budget of c re-ranker calls (here B_CE CE calls) in batches of b, alternating between the first
stage's ranking and a *frontier*: the neighbours, in a corpus graph, of the items scored so far, each keyed by the
best score of an item it neighbours ([GAR] §3, Alg. 1). The graph here is each item's ``n_neighbors`` nearest items
by the DE's (or any retriever's) item–item inner products, written in pyterrier-adaptive's ``np_topk`` format
(:func:`item_graph`); the CE reaches GAR as a PyTerrier scorer that reads every score through xenbench's
:class:`~xenbench.metrics.BudgetCounter`, so GAR is charged exactly as every other method. The algorithm itself is
``pyterrier_adaptive.GAR``, run without backfill: the returned top-k are the scored items by exact score.

References
----------
.. [GAR] MacAvaney, Tonellotto, Macdonald. "Adaptive Re-Ranking with a Corpus Graph", CIKM 2022, Alg. 1.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from xenbench._validation import check_array, check_int
from xenbench.errors import NotFittedError, ParameterError
from xenbench.metrics import BudgetCounter, topk_indices

__all__ = ["Gar", "item_graph", "item_neighbors"]


def item_neighbors(X: np.ndarray, n_neighbors: int, *, batch: int = 2048) -> np.ndarray:
    """Each item's ``n_neighbors`` nearest other items by inner product (the one top-k tie rule), itself excluded.

    Parameters
    ----------
    X : ndarray of shape (n_items, d)
        Item embeddings (the DE's ``V``).
    n_neighbors : int
        Edges per item, in [1, n_items − 1].

    Returns
    -------
    ndarray of shape (n_items, n_neighbors), int64
        Best first.

    >>> item_neighbors(np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]), 1).ravel().tolist()
    [1, 0, 1]
    """
    X = check_array(X, "X", "item_neighbors", ndim=2)
    n = X.shape[0]
    k = check_int(n_neighbors, "n_neighbors", 1, n - 1, "item_neighbors", f"n_items - 1 = {n - 1}")
    out = np.empty((n, k), dtype=np.int64)
    for lo in range(0, n, batch):
        S = X[lo:lo + batch] @ X.T
        S[np.arange(S.shape[0]), np.arange(lo, lo + S.shape[0])] = -np.inf  # no self-loop
        out[lo:lo + batch] = topk_indices(S, k)
    return out


def item_graph(neighbors: np.ndarray, folder: str | Path | None = None) -> Any:
    """A ``pyterrier_adaptive.NpTopKCorpusGraph`` of ``neighbors`` (docno of item i: ``str(i)``).

    Parameters
    ----------
    neighbors : int ndarray of shape (n_items, n_neighbors)
        :func:`item_neighbors`.
    folder : path, optional
        Where the graph's files go (it must not exist); default a temporary folder removed with the graph object.
    """
    from npids import Lookup
    from pyterrier_adaptive import NpTopKCorpusGraph

    nb = np.asarray(neighbors)
    if nb.ndim != 2 or not np.issubdtype(nb.dtype, np.integer) or nb.size == 0 or nb.min() < 0 \
            or nb.max() >= nb.shape[0]:
        raise ParameterError("neighbors", "an int array (n_items, n_neighbors) of item indices", f"{nb.dtype} "
                             f"array of shape {nb.shape}", "item_graph")
    tmp = None
    if folder is None:
        tmp = tempfile.TemporaryDirectory(prefix="xenbench-gar-")
        folder = Path(tmp.name) / "graph"
    folder = Path(folder)
    folder.mkdir(parents=True)
    (folder / "edges.u32.np").write_bytes(nb.astype(np.uint32).tobytes())
    # the edge weights are not read by GAR; the rank stands in for them (larger = nearer)
    weights = np.broadcast_to(np.arange(nb.shape[1], 0, -1, dtype=np.float16), nb.shape)
    (folder / "weights.f16.np").write_bytes(np.ascontiguousarray(weights).tobytes())
    with Lookup.builder(folder / "docnos.npids") as docnos:
        for i in range(nb.shape[0]):
            docnos.add(str(i))
    (folder / "pt_meta.json").write_text(json.dumps({"type": "corpus_graph", "format": "np_topk",
                                                     "package_hint": "pyterrier-adaptive",
                                                     "doc_count": int(nb.shape[0]), "k": int(nb.shape[1])}))
    graph = NpTopKCorpusGraph(folder)
    graph._xenbench_tmp = tmp  # the folder lives as long as the graph
    return graph


class _Excluding:
    """A corpus graph without some items: GAR reads only ``neighbours(docno)``."""

    def __init__(self, graph: Any, exclude: np.ndarray) -> None:
        self.graph, self.excluded = graph, {str(int(i)) for i in np.asarray(exclude).ravel()}

    def neighbours(self, docid: str, weights: bool = False) -> Any:
        return [d for d in self.graph.neighbours(docid) if d not in self.excluded]


def _counter_scorer(counter: BudgetCounter, row_of: dict[str, int]) -> Any:
    """A PyTerrier transformer scoring (qid, docno) rows with the CE through ``counter`` (each pair charged once)."""
    import pyterrier as pt

    class CounterScorer(pt.Transformer):
        def transform(self, df: Any) -> Any:
            df = df.copy()
            scores = np.empty(len(df), dtype=np.float64)
            for qid, idx in df.groupby("qid", sort=False).indices.items():
                items = df["docno"].to_numpy()[idx].astype(np.int64)
                scores[idx] = counter.score(items[None, :], rows=np.array([row_of[qid]]))[0]
            df["score"] = scores
            return df

    return CounterScorer()


class Gar:
    """GAR at a budget of B_CE CE calls per query ([GAR] Alg. 1, ``pyterrier_adaptive.GAR`` without backfill).

    Parameters
    ----------
    budget : int
        c of [GAR]: CE calls per query (B_CE).
    batch_size : int, default 16
        b of [GAR]: items scored per batch, alternating between the first stage's ranking and the graph frontier.

    Attributes
    ----------
    graph_ : pyterrier_adaptive.CorpusGraph
        The corpus graph given to :meth:`fit`.
    """

    def __init__(self, budget: int, *, batch_size: int = 16) -> None:
        self.budget = budget
        self.batch_size = batch_size

    def fit(self, graph: Any) -> "Gar":
        """Keep the corpus graph (:func:`item_graph`, or any ``pyterrier_adaptive.CorpusGraph`` over docnos
        ``str(i)``)."""
        check_int(self.budget, "budget", 1, None, "Gar")
        check_int(self.batch_size, "batch_size", 1, None, "Gar")
        if not callable(getattr(graph, "neighbours", None)):
            raise ParameterError("graph", "a pyterrier_adaptive CorpusGraph (xenbench.methods.gar.item_graph)",
                                 type(graph).__name__, "Gar.fit")
        self.graph_ = graph
        return self

    def search(self, counter: BudgetCounter, k: int, *, candidates: np.ndarray,
               exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k items of every query by exact CE score among the B_CE items GAR chose to score.

        Parameters
        ----------
        counter : BudgetCounter
            The CE of the queries (rows of its M), budget >= ``self.budget``.
        k : int
            In [1, budget].
        candidates : int ndarray of shape (nq, m)
            The first stage's ranking of each query, best first (m >= 1).
        exclude : int ndarray, optional
            Items GAR never scores, for every query (scored elsewhere, e.g. ANNCUR's anchors): left out of the graph's
            neighbours (and to be left out of ``candidates`` by the caller).

        Returns
        -------
        D : ndarray of shape (nq, k), float32
        I : ndarray of shape (nq, k), int64
        """
        import pandas as pd
        from pyterrier_adaptive import GAR

        if not hasattr(self, "graph_"):
            raise NotFittedError("This Gar instance is not fitted yet: call fit(graph) first.")
        k = check_int(k, "k", 1, self.budget, "Gar.search", f"budget = {self.budget}")
        cand = np.asarray(candidates)
        if cand.ndim != 2 or cand.shape[0] != counter.n_queries or not np.issubdtype(cand.dtype, np.integer):
            raise ParameterError("candidates", f"an int array (n_queries={counter.n_queries}, m)",
                                 f"{cand.dtype} array of shape {cand.shape}", "Gar.search")
        nq, m = cand.shape
        row_of = {str(r): r for r in range(nq)}
        initial = pd.DataFrame({"qid": np.repeat([str(r) for r in range(nq)], m), "query": "",
                                "docno": cand.ravel().astype(str), "score": np.tile(-np.arange(m, dtype=float), nq),
                                "rank": np.tile(np.arange(m), nq)})
        graph = self.graph_ if exclude is None or not len(exclude) else _Excluding(self.graph_, exclude)
        gar = GAR(_counter_scorer(counter, row_of), graph, num_results=self.budget, batch_size=self.batch_size,
                  backfill=False)
        out = gar.transform(initial)
        D = np.full((nq, k), -np.inf, dtype=np.float32)
        I = np.full((nq, k), -1, dtype=np.int64)
        for qid, g in out.groupby("qid", sort=False):
            r = row_of[qid]
            items = g["docno"].to_numpy().astype(np.int64)
            scores = counter.score(items[None, :], rows=np.array([r]))[0]  # already charged: free
            top = topk_indices(scores[None, :], min(k, items.size))[0]
            D[r, :top.size], I[r, :top.size] = scores[top], items[top]
        return D, I
