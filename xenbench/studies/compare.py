"""Notebook 07: every method of the five papers side by side, at equal CE budget and at equal wall time.

The papers are pieces of one pipeline: a **first stage** proposes items (the dual encoder (DE); the DE with PEFA's
kNN adapter over labelled training queries; the DE compressed to a few bytes per item) and a **CE stage** spends
B_CE cross-encoder calls per query (re-rank the first stage's top B_CE; ANNCUR; ADACUR; AXN). This module runs all of
them on the same splits of one exact score matrix M, with the protocol of notebooks 03/04 rather than a copy of it:

=============================  ==========================================================================
:func:`query_embedding_seconds`  the measured seconds to embed one query with the DE
:func:`first_stage_scores`     per split: each first stage's top-m lists of every query (PEFA-XS/XL, PQ codes)
:func:`compare_protocol_runs`  per-query test recall of every method at its dev-chosen setting
:func:`search_seconds`         measured search time per query and method, CE calls excluded
:func:`ce_seconds_per_pair`    the CE's measured seconds per (query, item) pair on a device
:func:`compare_summary`        test recall per (method, budget, k) with its interval across runs, and costs
:func:`pareto_front`           the (cost, recall) points no other point beats on both
:func:`best_per_budget`        per (budget, k): the method best on dev, tested on test against every other
=============================  ==========================================================================

Protocol (as in 03 and 04): the query rows are split several times (:func:`xenbench.studies.protocol.query_splits`)
into training/anchor queries (ANNCUR's and ADACUR's R_anc, AXN's scale β and MF-IND's training queries, PEFA's
labelled training queries), **dev** queries (every setting is chosen there: ANNCUR's k_i, AXN's λ, PEFA's λ) and
**test** queries (where the chosen setting is reported). ANNCUR/ADACUR are
:func:`xenbench.studies.adacur.adacur_protocol_runs` and :func:`~xenbench.studies.adacur.chosen_on_dev`; AXN is
:func:`xenbench.studies.axn.axn_protocol_runs`; a first stage's re-ranking is 03's DE re-rank
(:func:`xenbench.methods.baselines.rerank_baseline`) of that first stage's ranking. A method without
anchor-seed randomness (re-rankings, ANNCUR DE, DE-started ADACUR/AXN) gives the same result for every anchor seed of a
split, so it keeps one run per split (labelled with the first anchor seed): its interval across runs is over splits,
and a comparison with it pairs the runs of that seed (:func:`xenbench.studies.adacur.adacur_paired_comparisons`).

Cost. Every method spends exactly B_CE CE calls per query. Wall time per query = the measured search time without the
CE calls (DE query embedding where the method uses the DE, the first stage's search, the CE stage's own arithmetic;
batched over the test queries, so a throughput per query, not a single-query latency) + B_CE × the CE's seconds per
pair.

References
----------
.. [ANNCUR] Yadav et al., EMNLP 2022, §3.2. .. [ADACUR] Yadav et al., Findings of EMNLP 2023, Fig. 2.
.. [AXN] Yadav et al., ICLR 2024, Eq. 7, §2.1. .. [PEFA] Chang et al., WSDM 2024, Eq. 6, 8.
.. [CCSA] Lassance et al., §3.2 (codes of C · log2(L) bits; compared with PQ codes of equal bytes).
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from xenbench._validation import check_int
from xenbench.errors import ParameterError
from xenbench.studies.protocol import at_chosen, choose_on_dev, run_seed
from xenbench.metrics import LABEL_MEASURES, BudgetCounter, topk_indices, topk_of_lists
from xenbench.studies.adacur import (
    COMPARABLE,
    SPLIT_FRACTIONS,
    SplitState,
    adacur_paired_comparisons,
    adacur_protocol_runs,
    chosen_on_dev,
)
from xenbench.studies.axn import axn_protocol_runs
from xenbench.studies.labels import LABEL_COLUMNS, choose_by_labels
from xenbench.studies.methods import REGISTRY, Comparable, extra_entry
from xenbench.studies.records import RUN_FIELDS
from xenbench.studies.setup import Setup

__all__ = ["CE_STAGE", "COMPARED", "FIRST_STAGE_RERANK", "STAGES", "best_per_budget", "ce_seconds_per_pair",
           "compare_protocol_runs", "compare_summary", "first_stage_scores", "named_first_stages", "pareto_front",
           "pq_codes", "query_embedding_seconds", "search_seconds"]

logger = logging.getLogger(__name__)

#: CE-stage methods of 03 (keys of the one registry, :data:`xenbench.studies.methods.REGISTRY`).
CE_STAGE: tuple[str, ...] = ("de_rerank", "anncur", "anncur_de", "adacur_nosplit", "adacur_de_nosplit")
#: AXN methods of 04 (its labels at the dev-chosen λ) -> the registry's label used here.
_AXN = {"AXN DE, tuned λ": REGISTRY["axn_de"].label, "AXN DE, MF-IND, tuned λ": REGISTRY["axn_de_mf_ind"].label}
#: First stages other than the exact DE whose top B_CE the CE re-ranks -> label of that re-ranking (registry entries).
FIRST_STAGE_RERANK = {REGISTRY[key].needs: REGISTRY[key].label for key in ("pefa_xs_rerank", "pefa_xl_rerank",
                                                                             "pq_rerank")}
#: The registry entries 07 always runs: 03's CE stage, 04's AXN and the first stages' re-ranks (GAR and yours are
#: ``extra_methods``).
COMPARED: tuple[str, ...] = CE_STAGE + ("axn_de", "axn_de_mf_ind", "pefa_xs_rerank", "pefa_xl_rerank", "pq_rerank")
#: Which methods read the DE at query time (they pay its query embedding) and where each sits: from the registry.
STAGES: dict[str, dict[str, Any]] = {REGISTRY[key].label: {"stage": REGISTRY[key].stage, "uses_de": REGISTRY[key].uses_de}
                                     for key in COMPARED}
#: Methods whose result does not depend on the anchor seed (given the split): the registry's deterministic entries.
_DETERMINISTIC = {m.label for m in REGISTRY.values() if m.deterministic}
#: Verdict words of a lost paired comparison (03's "trails"; "loses" in the one verdict rule of studies.protocol).
_LOSES = {"trails", "loses"}
_RUN = ["split_seed", "anchor_seed"]
#: A first stage's top-m lists (D, I) of every query row, each (n_queries, m), as a search returns them.
Lists = tuple[np.ndarray, np.ndarray]
#: Query rows per block where DE scores of the queries on every item are computed only to be searched.
_BLOCK_ROWS = 256
_GROUP = ["method", "budget", "k"]


# ==============================================================================================
# inputs: DE embeddings, first stages, the CE's cost
# ==============================================================================================
def query_embedding_seconds(setup: Setup, *, n_timed: int = 256, device: str | torch.device = "auto") -> float:
    """The measured seconds to embed one query with the DE: the first ``n_timed`` queries of ``setup`` embedded
    (batched, on ``device``) with the DE's embedding cache off, after a one-query warm-up, divided by ``n_timed``.
    The embeddings themselves are :func:`xenbench.studies.setup.de_embeddings`."""
    from xenbench.models.retrievers import DualEncoder

    timed = list(setup.dataset.queries[:check_int(n_timed, "n_timed", 1, None, "query_embedding_seconds")])
    de = DualEncoder(device=device, cache_dir=False)
    de.embed_queries(timed[:1])  # warm-up: lazy initialization and the first kernels are not a query's cost
    t0 = time.perf_counter()
    de.embed_queries(timed)
    return (time.perf_counter() - t0) / len(timed)


def pq_codes(V: np.ndarray, n_bytes: int, *, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """A faiss product quantizer of the DE's item embeddings with ``n_bytes`` bytes per item (inner product).

    Eight-bit sub-quantizers need 39 · 256 training vectors by faiss's rule of thumb; with fewer items the codes use
    4 bits (M = 2 · n_bytes sub-quantizers of 16 centroids), the same bytes. Trained on the items themselves.

    Returns the trained, filled ``faiss.IndexPQ`` and its description (``M``, ``nbits``, ``bytes_per_item``).
    """
    import faiss

    X = np.ascontiguousarray(V, dtype=np.float32)
    d = X.shape[1]
    for nbits in (8, 4):
        m = 8 * n_bytes // nbits
        if d % m == 0 and (X.shape[0] >= 39 * 2**nbits or nbits == 4):
            break
    else:
        raise ParameterError("pq_bytes", f"a number of bytes whose 8-bit or 4-bit sub-quantizers divide d = {d}",
                             n_bytes, "pq_codes")
    if X.shape[0] < 2**nbits:
        raise ParameterError("pq_bytes", f"PQ codes need at least {2**nbits} items to train", X.shape[0], "pq_codes")
    index = faiss.IndexPQ(d, m, nbits, faiss.METRIC_INNER_PRODUCT)
    index.pq.cp.seed = seed
    # faiss prints a warning per sub-quantizer below 39 points per centroid; the description says how many it had.
    index.pq.cp.min_points_per_centroid = min(39, X.shape[0] // 2**nbits)
    index.train(X)
    index.add(X)
    return index, {"M": m, "nbits": nbits, "bytes_per_item": m * nbits / 8,
                   "train_points_per_centroid": X.shape[0] / 2**nbits}


def first_stage_scores(setup: Setup, split: Any, V: np.ndarray, U: np.ndarray, *, depth: int,
                       pefa_lambdas: Sequence[float] = (0.25, 0.5, 0.75), pefa_neighbors: int = 32,
                       pq: Any = None, named: Mapping[str, tuple[Lists, float]] | None = None
                       ) -> tuple[dict[str, dict[float, Lists]], dict[str, float]]:
    """The first stages' top-``depth`` lists of **every** query row, for one split, and their search seconds.

    Lists, as a search returns them, not (n_queries, n_items) score rows: a re-ranking reads the top B_CE of a list in
    the one order of :func:`xenbench.metrics.topk_of_lists` (the order of the dense row, ``-inf`` outside the list).

    Parameters
    ----------
    setup : Setup
        The dataset (gold labels of the training queries) and the kept items.
    split : xenbench.studies.protocol.Split
        ``split.anchor`` are the labelled training queries of PEFA ([PEFA] §3: Y of those queries).
    V, U : ndarray of shape (n_items, d), (n_queries, d)
        The DE's embeddings (:func:`xenbench.studies.setup.de_embeddings`).
    depth : int
        Items each first stage returns per query (the largest budget).
    pefa_lambdas : sequence of float
        λ of PEFA's Eq. 2 to choose from on dev (λ = 1 is the DE alone, so it is left out).
    pefa_neighbors : int
        k of PEFA-XL's NN(q̂, Q; k) (capped at the number of training queries).
    pq : faiss.Index, optional
        :func:`pq_codes` of V: its first stage is a search of the codes (asymmetric inner products).
    named : mapping, optional
        :func:`named_first_stages`: label -> ((D, I) of every query, seconds per query), added as they are (no
        setting; the same for every split).

    Returns
    -------
    scores : dict
        ``"PEFA-XS"``, ``"PEFA-XL"`` (when some training query has a gold item among the kept items) and ``"PQ"``
        (when ``pq`` is given) -> {λ (NaN when there is no setting): (D, I)}, each of shape (n_queries, depth): the
        scores (float32) and the item columns (int64) it returned, ``-inf`` and ``-1`` in an empty place.
    seconds : dict
        The same keys -> measured search seconds per query (without the DE query embedding), plus ``"DE"``: exact
        inner products and top-``depth`` over the items.
    """
    from xenbench.methods import pefa

    Uf, Vf = np.ascontiguousarray(U, dtype=np.float32), np.ascontiguousarray(V, dtype=np.float32)
    t0 = time.perf_counter()
    for a in range(0, len(Uf), _BLOCK_ROWS):  # blocks of queries: at most _BLOCK_ROWS x n_items scores in memory
        topk_indices(Uf[a:a + _BLOCK_ROWS] @ Vf.T, depth)
    seconds = {"DE": (time.perf_counter() - t0) / len(U)}
    scores: dict[str, dict[float, Lists]] = {}
    Y = pefa.relevance_matrix(setup.dataset, split.anchor, setup.items)
    if Y.nnz:
        neighbors = min(int(pefa_neighbors), int(split.anchor.size))
        for name, make in (("PEFA-XS", lambda lam: pefa.PefaXS(lam)),
                           ("PEFA-XL", lambda lam: pefa.PefaXL(lam, neighbors))):
            scores[name], spent = {}, []
            for lam in pefa_lambdas:
                model = make(float(lam)).fit(V, U[split.anchor], Y)
                t0 = time.perf_counter()
                D, I = model.search(U, depth)
                spent.append(time.perf_counter() - t0)
                scores[name][float(lam)] = (D, I)
            seconds[name] = float(np.mean(spent)) / len(U)
    if pq is not None:
        t0 = time.perf_counter()
        D, I = pq.search(Uf, depth)
        seconds["PQ"] = (time.perf_counter() - t0) / len(U)
        scores["PQ"] = {float("nan"): (D, I.astype(np.int64))}
    for name, (sc, spent_s) in (named or {}).items():
        scores[name], seconds[name] = {float("nan"): sc}, spent_s
    return scores, seconds


def ce_seconds_per_pair(model: Any, setup: Setup, *, n_pairs: int = 512, device: str = "auto",
                        seed: int = 0, max_length: int | None = None) -> dict[str, Any]:
    """The CE's measured seconds per (query, item) pair: :func:`xenbench.models.probe.probe_rate` (the batched scorer
    behind the score stores, after one warm-up batch) on a seeded sample of about ``n_pairs`` pairs of ``setup``'s
    queries and kept items. ``model`` is a CE folder or hub id (loaded with ``max_length``; the CE this process already
    loaded, if it did: :func:`xenbench.models.fingerprint.load_shared`), or a model object (a xenbench CE, a
    sentence-transformers CrossEncoder, a :class:`~xenbench.models.scorers.Scorer`). Returns ``seconds_per_pair``,
    ``n_pairs``, ``device``, ``precision``, ``batch_size``, ``source``."""
    from xenbench.models.fingerprint import load_shared
    from xenbench.models.probe import probe_rate
    from xenbench.models.scorers import as_scorer

    items = [setup.dataset.items[i] for i in setup.items]
    by_ref = isinstance(model, (str, os.PathLike))
    ce = load_shared(model, max_length) if by_ref else as_scorer(model, "ce_seconds_per_pair", "model")
    timing = probe_rate(ce, setup.dataset.queries, items, n_pairs=n_pairs, seed=seed, device=device).timing
    name = model if by_ref else ce.name
    return {"seconds_per_pair": timing.wall_s / timing.n_pairs, "n_pairs": timing.n_pairs, "device": timing.device,
            "precision": timing.precision, "batch_size": timing.batch_size, "source": f"measured: {name}"}


# ==============================================================================================
# the runs
# ==============================================================================================
def _rerank_runs(M: np.ndarray, split: Any, scores: Mapping[float, Lists], label: str, budgets: Sequence[int],
                 k_values: Sequence[int], labels: Any = None,
                 measures: Sequence[str] = LABEL_MEASURES) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Re-rank the top B_CE of a first stage with the CE (:func:`xenbench.methods.baselines.rerank_baseline`, the DE
    re-rank of 03 on other scores) on the split's dev and test rows, ``scores`` the first stage's top-m lists (D, I)
    per setting (:func:`first_stage_scores`); its setting (PEFA's λ) is chosen per
    (budget, k) on the dev rows (:func:`xenbench.studies.protocol.choose_on_dev`), the test rows are read at it.
    With ``labels``, also the label records per budget (setting chosen on dev by nDCG@10,
    :func:`xenbench.studies.labels.choose_by_labels`)."""
    from xenbench.methods.baselines import rerank_baseline
    from xenbench.metrics import mean_se, recall_under_budget

    rows_of = {"dev": np.asarray(split.dev), "test": np.asarray(split.test)}
    M_of = {part: M[rows] for part, rows in rows_of.items()}  # the exact scores of the rows, once per part
    out, lists = [], {}
    for lam, (D, I_first) in scores.items():
        for part, rows in rows_of.items():
            M_rows = M_of[part]
            order = topk_of_lists(D[rows], I_first[rows], M.shape[1], max(budgets))
            for budget in budgets:
                counter = BudgetCounter(M_rows, budget)
                _, I = rerank_baseline(counter, order, budget)
                lists[lam, part, budget] = I
                for k in (k for k in k_values if k <= budget):
                    r = recall_under_budget(M_rows, I, k, calls=counter.calls, budget=budget, per_query=True)
                    out.append({"split_seed": int(split.seed), "anchor_seed": 0, "part": part, "method": label,
                                "budget": int(budget), "k": int(k), "setting": lam, "value": float(r.mean()),
                                "value_se": mean_se(r)[1], "n_queries": int(r.size), "per_query": r, "rows": rows})
    return _chosen_on_dev(out, lists, split, label, budgets, list(scores), labels, measures)


def _chosen_on_dev(out: list[dict[str, Any]], lists: Mapping[tuple[Any, str, int], np.ndarray], split: Any, label: str,
                   budgets: Sequence[int], settings: Sequence[Any], labels: Any, measures: Sequence[str], *,
                   anchor_seed: int = 0) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The test rows of ``out`` (dev and test records of every setting) at the setting chosen on dev per (budget, k),
    and with ``labels`` the label records per budget (setting chosen on dev by nDCG@10); ``lists[setting, part,
    budget]`` are the ranked lists."""
    rows_of = {"dev": np.asarray(split.dev), "test": np.asarray(split.test)}
    label_rows = []
    if labels is not None:
        for budget in budgets:
            at_b = [s for s in settings if (s, "dev", budget) in lists]  # a k_i grid differs between budgets
            for rec in choose_by_labels(at_b, [lists[s, "dev", budget] for s in at_b],
                                        [lists[s, "test", budget] for s in at_b], dev_rows=rows_of["dev"],
                                        test_rows=rows_of["test"], grades=labels, measures=measures):
                label_rows.append({"split_seed": int(split.seed), "anchor_seed": anchor_seed, "method": label,
                                   "budget": int(budget), **rec})
    runs = pd.DataFrame(out)
    by = _RUN + _GROUP
    dev, test = runs[runs["part"] == "dev"], runs[runs["part"] == "test"]
    if runs["setting"].isna().all():  # nothing to choose
        test = test.merge(dev[by + ["value"]].rename(columns={"value": "dev_value"}), on=by, how="left")
    else:
        chosen = choose_on_dev(dev, by=by, setting="setting", score="value")
        test = at_chosen(test, chosen, by=by, setting="setting")
        test = test.merge(chosen.rename(columns={"value": "dev_value"}), on=by + ["setting"], how="left")
    return test.drop(columns="part"), label_rows


def _entry_runs(M: np.ndarray, split: Any, entry: Comparable, budgets: Sequence[int], k_values: Sequence[int], *,
                state: Mapping[str, Any], orders: Mapping[str, np.ndarray], anchor_seed: int, seed: int,
                labels: Any = None, measures: Sequence[str] = LABEL_MEASURES
                ) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """A registry entry (GAR, or a method of yours: :func:`xenbench.studies.methods.extra_entry`) on the split's dev
    and test rows, as :func:`_rerank_runs` runs a first stage's re-ranking: built from the split's state
    (:class:`~xenbench.studies.methods.SplitState` of those rows, run seed ``seed``) per budget, each variant's whole
    ranked list (``search(counter, B_CE)``) read for the recalls and the labels, its setting chosen on dev.

    ``state`` holds the state's fields shared by the rows (R_anc, n_rounds, options, V, graph); ``orders`` the first
    stages' scores ranking of every query row (``"de_scores"`` -> (n_queries, >= max budget) item indices)."""
    from xenbench.metrics import mean_se, recall_under_budget
    from xenbench.studies.methods import SPLIT_FRACTIONS as fractions
    from xenbench.studies.methods import SplitState

    out, lists, settings = [], {}, []
    for part, rows in (("dev", np.asarray(split.dev)), ("test", np.asarray(split.test))):
        U = state.get("U")
        st = SplitState(test=rows, orders={name: o[rows] for name, o in orders.items()}, split_fractions=fractions,
                        temperature=1.0, seed=seed, **{k: v for k, v in state.items() if k != "U"},
                        U=None if U is None else U[rows])
        for budget in budgets:
            for variant in entry.variants(st, int(budget)):
                counter = BudgetCounter(M[rows], int(budget))
                _, I = variant.search(counter, int(budget))
                setting = float(variant.n_anchor_items)
                if setting not in settings and not (np.isnan(setting) and any(np.isnan(s) for s in settings)):
                    settings.append(setting)
                key = next(s for s in settings if s == setting or (np.isnan(s) and np.isnan(setting)))
                lists[key, part, int(budget)] = I
                for k in (k for k in k_values if k <= budget):
                    r = recall_under_budget(M[rows], I, k, calls=counter.calls, budget=int(budget),
                                            per_query=True)
                    out.append({"split_seed": int(split.seed), "anchor_seed": int(anchor_seed), "part": part,
                                "method": entry.label, "budget": int(budget), "k": int(k), "setting": setting,
                                "value": float(r.mean()), "value_se": mean_se(r)[1], "n_queries": int(r.size),
                                "per_query": r, "rows": rows})
    return _chosen_on_dev(out, lists, split, entry.label, budgets, settings, labels, measures,
                          anchor_seed=int(anchor_seed))


def named_first_stages(setup: Setup, first_stages: Sequence[str], *, depth: int,
                       device: str | torch.device = "auto", first_stage_depth: int | None = None,
                       seed: int = 0) -> dict[str, tuple[Lists, float]]:
    """First stages named by :func:`xenbench.models.retrievers.make_retriever` specs (``"tfidf"``, ``"bm25"``,
    ``"run:<path>"``; ``"de"``, always compared, is skipped), for the first-stage axis of notebook 07: fitted on the
    whole corpus and read on the kept items (:func:`xenbench.studies.setup.first_stage_lists`: the top ``depth`` of
    :func:`~xenbench.studies.setup.first_stage_matrix`'s rows, with its ``first_stage_depth`` and the seeded order of
    the items a first stage does not return, a block of query rows at a time).

    Returns
    -------
    dict
        Label (``"TF-IDF"``, ``"BM25"``, ``"run <name>"``) -> ((D, I): the top ``depth`` scores and kept-item columns
        of every query row, each (n_queries, depth), best first; the measured search seconds per query: scoring every
        item and its top ``depth``, in blocks of query rows, the index built beforehand; 0 for a run file, whose
        search was done elsewhere).
    """
    from xenbench.models.retrievers import first_stage_label, run_path
    from xenbench.studies.setup import first_stage_lists, fitted_first_stage

    out = {}
    for spec in first_stages:
        if spec == "de":
            continue
        fitted_first_stage(spec, setup.dataset.items, device=device)  # the offline index: not the search's time
        t0 = time.perf_counter()
        lists = first_stage_lists(setup, spec, min(depth, len(setup.items)), device=device, depth=first_stage_depth,
                                  seed=seed)
        seconds = 0.0 if run_path(spec) is not None else (time.perf_counter() - t0) / len(setup.dataset.queries)
        out[first_stage_label(spec)] = (lists, seconds)
    return out


def _rerank_label(name: str) -> str:
    """The method that re-ranks first stage ``name``: ``"PEFA-XS re-rank"``, ``"BM25 re-rank"``, ..."""
    return FIRST_STAGE_RERANK.get(name, f"{name} re-rank")


def _is_deterministic(methods: pd.Series) -> pd.Series:
    """Methods without anchor-seed randomness: the DE-started ones and every first stage's re-rank."""
    return methods.isin(list(_DETERMINISTIC)) | methods.str.endswith(" re-rank")


def compare_protocol_runs(setup: Setup, splits: Sequence[Any], anchor_seeds: Sequence[int], budgets: Sequence[int], *,
                          V: np.ndarray, U: np.ndarray, k_values: Sequence[int] = (1, 10, 100), n_rounds: int = 5,
                          axn_lambdas: Sequence[float] = (0.0, 0.4, 0.8, 0.9, 1.0), mf_items_per_query: int = 100,
                          mf_epochs: int = 3, mf_lr: float = 0.005, pefa_lambdas: Sequence[float] = (0.25, 0.5, 0.75),
                          pefa_neighbors: int = 32, pq_bytes: int | None = 12, device: str | torch.device = "auto",
                          progress: bool = True, first_stages: Sequence[str] = (), labels: Any = None,
                          measures: Sequence[str] = LABEL_MEASURES, first_stage_depth: int | None = None,
                          seed: int = 0, extra_methods: Sequence[Any] = (), graph_neighbors: int = 16
                          ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per-query test recall of every method at its dev-chosen setting, per run (query split × anchor seed).

    Parameters
    ----------
    setup : Setup
        Exact scores ``setup.M`` (n_queries, n_items) and the dataset.
    splits : sequence of xenbench.studies.protocol.Split
        Anchor (training) / dev / test rows.
    anchor_seeds : sequence of int
        ANNCUR's anchor draw and ADACUR's first round; AXN's random first round is not compared here (its DE-started
        variants are), so 04's protocol runs with the first seed only.
    budgets, k_values, n_rounds
        B_CE values, k of Top-k-Recall (k > B_CE skipped) and rounds of ADACUR/AXN.
    V, U : ndarray
        DE embeddings (:func:`xenbench.studies.setup.de_embeddings`).
    axn_lambdas, mf_items_per_query, mf_epochs, mf_lr
        AXN's λ grid (chosen on dev) and MF-IND's training, as in :func:`xenbench.studies.axn.axn_protocol_runs`
        (``mf_epochs=0``: no MF-IND).
    pefa_lambdas, pefa_neighbors
        PEFA's λ grid (chosen on dev by the re-ranking's Top-k-Recall) and k of PEFA-XL.
    pq_bytes : int, optional
        Bytes per item of the compressed first stage (:func:`pq_codes`); None: none.
    first_stages : sequence of str
        More first stages on the first-stage axis (:func:`named_first_stages`: ``"tfidf"``, ``"bm25"``,
        ``"run:<path>"``), each re-ranked by the CE (``"BM25 re-rank"``, ...).
    labels : sparse matrix of shape (n_queries, n_items), optional
        Relevance grades of every row on the kept items (:meth:`xenbench.studies.setup.Setup.grades`): every method's
        ranked lists are also scored against them (the second currency: settings chosen on dev by nDCG@10,
        :mod:`xenbench.studies.labels`), in ``info["label_runs"]``.
    measures : sequence of str
        The label measures, with ``labels``.
    first_stage_depth, seed : int, optional
        How deep the ``first_stages`` retrieve over the whole corpus, and the seed of the order of the items they do
        not return (:func:`xenbench.studies.setup.first_stage_matrix`).
    extra_methods : sequence
        More methods, each a registry key (``"gar"``: GAR over the DE's item graph), an import path
        ``"pkg.mod:Class"`` or a class (:class:`xenbench.studies.methods.Method`: ``fit(state)``, ``search(counter,
        k)``), checked before any work (:func:`xenbench.studies.methods.extra_entry`). Each runs on every split's dev
        and test rows at every budget, its first stage the DE, under the same counter; a seed-free one (the default)
        once per split, else once per anchor seed.
    graph_neighbors : int
        Edges per item of the corpus graph (the DE's nearest items), built once when an extra method needs it.

    Returns
    -------
    runs : DataFrame
        Test rows, one per run (a method without anchor-seed randomness: one per split, at the first anchor seed):
        ``split_seed``, ``anchor_seed``, ``method``, ``budget``, ``k``, ``recall``, ``recall_se``,
        ``dev_recall`` (the run's dev recall at its chosen setting), ``setting`` (k_i, λ or NaN), ``rows``,
        ``per_query`` (arrays, for paired tests).
    info : dict
        What was run: ``first_stages`` (names), ``pq`` (its description) and ``first_stage_seconds`` (per query, of
        the first split); with ``labels``, ``label_runs``: one row per (split_seed, anchor_seed, method, budget,
        measure) with the columns of :data:`xenbench.studies.labels.LABEL_COLUMNS`; ``extra``: the extra methods'
        entries, ``graph`` (the corpus graph or None) and ``graph_seconds`` (its build time, once for every split).
    """
    from tqdm.auto import tqdm

    extras = [extra_entry(spec) for spec in extra_methods]  # refused here, before any work
    labels_seen = [m.label for m in extras]
    if len(set(labels_seen)) != len(labels_seen) or set(labels_seen) & set(STAGES):
        raise ParameterError("extra_methods", f"methods of distinct labels, none of them one that 07 runs anyway "
                             f"({', '.join(STAGES)})", labels_seen, "compare_protocol_runs")
    graph, graph_s = None, 0.0
    if any("corpus graph" in m.requires for m in extras):
        from xenbench.methods.gar import item_graph, item_neighbors

        t0 = time.perf_counter()
        graph = item_graph(item_neighbors(V, check_int(graph_neighbors, "graph_neighbors", 1, V.shape[0] - 1,
                                                       "compare_protocol_runs")))
        graph_s = time.perf_counter() - t0
    M = setup.M
    de = U @ V.T  # the DE's exact scores: 03's methods rank their first round by them (released after the CE stage)
    seeds = [int(s) for s in anchor_seeds]
    budgets = sorted({int(b) for b in budgets})
    depth = min(max(budgets), M.shape[1])
    bar = tqdm(total=3 + len(splits) * (1 + bool(extras)), desc="07 protocol (stage × split)", disable=not progress)
    # the extra methods first: a method that breaks the rules is refused before the long runs
    extra_runs, extra_labels = [], []
    if extras:
        from xenbench._device import search_device
        from xenbench.methods.adacur import SearchOptions

        orders = {"de_scores": topk_indices(de, depth)}
        options = SearchOptions(device=search_device(device, "compare_protocol_runs"))
        for sp in splits:
            shared = {"R_anc": M[sp.anchor], "n_rounds": n_rounds, "options": options, "V": V, "U": U, "graph": graph}
            for entry in extras:
                for anchor_seed in seeds[:1] if entry.deterministic else seeds:
                    runs_x, label_x = _entry_runs(M, sp, entry, budgets, k_values, state=shared, orders=orders,
                                                  anchor_seed=anchor_seed, seed=run_seed(int(sp.seed), anchor_seed),
                                                  labels=labels, measures=measures)
                    extra_runs.append(runs_x)
                    if label_x:
                        extra_labels.append(pd.DataFrame(label_x))
            bar.update(1)
    # a method without anchor-seed randomness runs with the first anchor seed only: one run per split
    seed_free = [key for key in CE_STAGE if COMPARABLE[key].label in _DETERMINISTIC]
    label_parts = []
    ce_runs = []
    for keys, run_seeds in (([k for k in CE_STAGE if k not in seed_free], seeds), (seed_free, seeds[:1])):
        part = adacur_protocol_runs(M, splits, run_seeds, budgets, methods=keys, k_values=k_values, de_scores=de,
                                    n_rounds=n_rounds, device=device, labels=labels, measures=measures)
        if labels is not None:
            part, label_part = part
            label_parts.append(label_part)
        ce_runs.append(part)
    ce_stage = chosen_on_dev(pd.concat(ce_runs, ignore_index=True))
    del de  # AXN computes its own; the first stages below read lists
    bar.update(1)
    axn = axn_protocol_runs(M, splits, V, U, seeds=seeds[:1], lambdas=axn_lambdas, budgets=budgets, k_values=k_values,
                            n_rounds=n_rounds, mf_items_per_query=mf_items_per_query, mf_epochs=mf_epochs, mf_lr=mf_lr,
                            progress=False, device=device, labels=labels, measures=measures)
    axn_runs = axn[0]
    if labels is not None:
        axn_labels = axn[2][axn[2]["method"].isin(list(_AXN))]
        label_parts.append(axn_labels.assign(method=lambda d: d["method"].map(_AXN)))
    axn_runs = axn_runs[axn_runs["method"].isin(list(_AXN))].assign(method=lambda d: d["method"].map(_AXN))
    bar.update(1)
    pq, pq_info = (None, None) if pq_bytes is None else pq_codes(V, int(pq_bytes), seed=int(splits[0].seed))
    named = named_first_stages(setup, first_stages, depth=depth, device=device, first_stage_depth=first_stage_depth,
                               seed=seed)
    bar.update(1)
    first, seconds = [], None
    for sp in splits:
        scores, spent = first_stage_scores(setup, sp, V, U, depth=depth, pefa_lambdas=pefa_lambdas,
                                           pefa_neighbors=pefa_neighbors, pq=pq, named=named)
        seconds = seconds or spent
        for name, sc in scores.items():
            runs_fs, label_fs = _rerank_runs(M, sp, sc, _rerank_label(name), budgets, k_values, labels, measures)
            first.append(runs_fs)
            if label_fs:
                label_parts.append(pd.DataFrame(label_fs))
        bar.update(1)
    bar.close()
    extra_seeded = {m.label for m in extras if not m.deterministic}  # one run per anchor seed: keep its seed
    frames = [ce_stage] + [f.assign(anchor_seed=seeds[0]) for f in (*first, axn_runs)] + extra_runs
    columns = [c for c in RUN_FIELDS if c != "n_rounds" and c != "measure"] + ["rows"]
    runs = pd.concat([f[columns] for f in frames], ignore_index=True)
    runs["setting"] = runs["setting"].astype(float)
    reranks = {_rerank_label(name) for name in seconds or {}} - {"DE re-rank"}
    info = {"first_stages": sorted({m for m in runs["method"] if m in reranks}),
            "pq": pq_info, "first_stage_seconds": seconds, "extra": extras, "graph": graph, "graph_seconds": graph_s}
    if labels is not None:
        label_columns = [*_RUN, "method", "budget", *LABEL_COLUMNS]
        label_runs = pd.concat([f[label_columns] for f in label_parts + extra_labels if not f.empty],
                               ignore_index=True)
        # every seed-free method's one run per split under the first anchor seed, as its recall runs
        label_runs.loc[_is_deterministic(label_runs["method"]) & ~label_runs["method"].isin(list(extra_seeded)),
                       "anchor_seed"] = seeds[0]
        label_runs["setting"] = label_runs["setting"].astype(float)
        info["label_runs"] = label_runs
    return runs, info


# ==============================================================================================
# cost
# ==============================================================================================
def search_seconds(M: np.ndarray, split: Any, budgets: Sequence[int], *, V: np.ndarray, U: np.ndarray,
                   embed_seconds: float, first_stage_seconds: Mapping[str, float], n_rounds: int = 5,
                   lam: float = 0.5, seed: int = 0, device: str | torch.device = "auto",
                   extra: Sequence[Comparable] = (), graph: Any = None) -> pd.DataFrame:
    """Measured search seconds per test query of every method at every budget, CE calls excluded.

    Each CE-stage method runs once on ``split``'s test rows (batched, as in the protocol; the CE calls are lookups of
    M and their share is negligible): its time divided by the number of queries, averaged over its k_i grid (ANNCUR).
    AXN is timed at λ = ``lam`` on the DE's embeddings; MF-IND's AXN is charged the same (its query MLP costs
    microseconds). A method that reads the DE adds ``embed_seconds`` (embedding the query) and the DE's exact search
    (``first_stage_seconds["DE"]``); a first-stage re-ranking adds that first stage's search instead (and the query
    embedding when it reads the DE: PEFA, PQ codes). Each ``extra`` entry (``info["extra"]`` of
    :func:`compare_protocol_runs`, with its corpus ``graph``) is timed as the CE-stage methods are (building it from
    the split's state and its search; its CE calls are lookups here too), plus the DE's cost when it reads the DE.

    Returns
    -------
    DataFrame
        Columns ``method``, ``budget``, ``search_s`` (seconds per query).
    """
    from xenbench._device import search_device
    from xenbench.methods.adacur import SearchOptions
    from xenbench.methods.axn import Axn, prior_scale
    from xenbench.methods.baselines import rerank_baseline

    owner = "search_seconds"
    device = search_device(device, owner)
    test = np.asarray(split.test)
    M_test = M[test]
    order = topk_indices(U[test] @ V.T, min(max(budgets), M.shape[1]))  # the DE's ranking of the test rows only
    state = SplitState(M[split.anchor], test, {"de_scores": order}, n_rounds, SPLIT_FRACTIONS, 1.0, seed,
                       SearchOptions(device=device))
    de_cost = embed_seconds + first_stage_seconds["DE"]
    beta = prior_scale(M[split.anchor], U[split.anchor] @ V.T)
    out = []
    for budget in sorted({int(b) for b in budgets}):
        k = 1
        for key in CE_STAGE:
            method = COMPARABLE[key]
            spent = []
            for variant in method.variants(state, budget):
                t0 = time.perf_counter()
                variant.search(BudgetCounter(M_test, budget), k)
                spent.append(time.perf_counter() - t0)
            if spent:
                de_s = de_cost if STAGES[method.label]["uses_de"] else 0.0
                out.append({"method": method.label, "budget": budget, "search_s": float(np.mean(spent)) / test.size
                            + de_s})
        engine = Axn(budget, n_rounds=min(n_rounds, budget), lam=lam, seed=seed,
                     options=SearchOptions(device=device)).fit(V)
        t0 = time.perf_counter()
        engine.run(M_test, u_param=beta * U[test], candidates=order, query_ids=test)
        axn_s = (time.perf_counter() - t0) / test.size + de_cost
        out += [{"method": label, "budget": budget, "search_s": axn_s} for label in _AXN.values()]
        for entry in extra:
            st = SplitState(M[split.anchor], test, {"de_scores": order}, n_rounds, SPLIT_FRACTIONS, 1.0, seed,
                            SearchOptions(device=device), V=V, U=U[test], graph=graph)
            t0 = time.perf_counter()
            for variant in entry.variants(st, budget):
                variant.search(BudgetCounter(M_test, budget), k)
            out.append({"method": entry.label, "budget": budget, "search_s": (time.perf_counter() - t0) / test.size
                        + (de_cost if entry.uses_de else 0.0)})
        t0 = time.perf_counter()
        rerank_baseline(BudgetCounter(M_test, budget), order, budget)
        rerank_s = (time.perf_counter() - t0) / test.size
        for name, spent in first_stage_seconds.items():
            label = _rerank_label(name)
            if name != "DE":  # a first stage that reads the DE (PEFA, PQ codes) pays its query embedding
                pays = embed_seconds if STAGES.get(label, {}).get("uses_de", False) else 0.0
                out.append({"method": label, "budget": budget, "search_s": pays + spent + rerank_s})
    return pd.DataFrame(out, columns=["method", "budget", "search_s"])


# ==============================================================================================
# summaries
# ==============================================================================================
def compare_summary(runs: pd.DataFrame, seconds: pd.DataFrame, ce_seconds: float, *,
                    confidence: float = 0.95, cell: str = "k") -> pd.DataFrame:
    """Test recall per (method, budget, k) with its interval across runs, and the two costs.

    :func:`xenbench.studies.protocol.summarize` over runs; a deterministic method is summarized over its splits only
    (one run per split). ``calls`` = B_CE; ``search_ms`` from :func:`search_seconds`;
    ``wall_ms`` = ``search_ms`` + B_CE · ``ce_seconds`` · 1000. ``cell="measure"`` summarizes the label records
    (``info["label_runs"]`` of :func:`compare_protocol_runs`) the same way: the second currency. Both are run records
    (:class:`xenbench.studies.records.RunRecord`: ``value``, ``value_se``, ``setting``, ``n_queries``).

    Returns
    -------
    DataFrame
        Columns ``method``, ``stage``, ``budget``, ``k`` (``cell``), ``mean``, ``lo``, ``hi``, ``n_runs``,
        ``setting`` (the dev choices, value×runs), ``calls``, ``search_ms``, ``wall_ms``, ``recall`` (= mean) and
        ``recall_se`` (sd over runs / √runs), named ``value`` and ``value_se`` for the label records.
    """
    from xenbench.studies.protocol import summarize

    if not (isinstance(ce_seconds, (int, float)) and np.isfinite(ce_seconds) and ce_seconds >= 0):
        raise ParameterError("ce_seconds", "seconds per CE call, a finite float >= 0", ce_seconds, "compare_summary")
    group = ["method", "budget", cell]
    first_seed = runs["anchor_seed"].min()  # a seed-free method counts one run per split, whatever the input repeats
    distinct = runs[~_is_deterministic(runs["method"]) | (runs["anchor_seed"] == first_seed)]
    out = summarize(distinct, group, value="value", se="value_se", confidence=confidence)
    settings = distinct.groupby(group)["setting"].agg(
        lambda s: ", ".join(f"{v:g}×{c}" for v, c in s.dropna().value_counts().sort_index().items()))
    out = out.merge(settings.rename("setting").reset_index(), on=group, how="left")
    out = out.merge(seconds, on=["method", "budget"], how="left")
    out.insert(1, "stage", out["method"].map(_stage))
    out["calls"] = out["budget"].astype(int)
    out["search_ms"] = 1e3 * out.pop("search_s")
    out["wall_ms"] = out["search_ms"] + 1e3 * out["calls"] * float(ce_seconds)
    value = "recall" if cell == "k" else "value"
    out[value], out[f"{value}_se"] = out["mean"], out["sd_runs"] / np.sqrt(out["n_runs"])
    # what each mean rests on: test queries per run (label records count those with a relevant kept item)
    queries = (distinct["n_queries"] if "n_queries" in distinct else distinct["rows"].map(len) if "rows" in distinct
               else pd.Series(np.nan, index=distinct.index))
    counts = distinct.assign(n_queries=queries).groupby(group)["n_queries"].min().reset_index()
    out = out.merge(counts, on=group, how="left")
    return out[["method", "stage", "budget", cell, "mean", "lo", "hi", "n_runs", "n_queries", "setting", "calls",
                "search_ms", "wall_ms", value, f"{value}_se"]]


def _stage(method: str) -> str:
    """Where a method sits in the pipeline (:data:`STAGES`; a named first stage's re-rank: ``first stage: BM25``)."""
    if method in STAGES:
        return STAGES[method]["stage"]
    registered = {m.label: m.stage for m in REGISTRY.values()}
    if method in registered:
        return registered[method]
    # a named first stage's re-rank, else a method of yours (extra_methods): it spends the CE calls
    return f"first stage: {method.removesuffix(' re-rank')}" if method.endswith(" re-rank") else "CE stage"


def pareto_front(points: pd.DataFrame, cost: str = "wall_ms", value: str = "mean", by: Sequence[str] = ("k",), *,
                 rel_tol: float = 0.01) -> pd.Series:
    """Whether each point is on the Pareto front of its group: no other point of the group costs at most as much
    and reaches at least as much ``value``, better on one of the two.

    Costs within ``rel_tol`` of each other count as equal (a measured time is not exact to the last percent: without
    it, a method whose search is 0.1 ms cheaper at the same B_CE would sit on the front below a better one).

    >>> df = pd.DataFrame({"k": 1, "wall_ms": [1.0, 2.0, 3.0, 3.0], "mean": [0.5, 0.4, 0.7, 0.6]})
    >>> pareto_front(df).tolist()
    [True, False, True, False]
    >>> pareto_front(pd.DataFrame({"k": 1, "wall_ms": [100.0, 100.5], "mean": [0.3, 0.6]})).tolist()
    [False, True]
    """
    if not (isinstance(rel_tol, float) and 0 <= rel_tol < 1):
        raise ParameterError("rel_tol", "a float in [0, 1)", rel_tol, "pareto_front")
    on = pd.Series(False, index=points.index)
    for _, g in points.groupby(list(by)):
        c, v = g[cost].to_numpy(float), g[value].to_numpy(float)
        for i, idx in enumerate(g.index):
            cheaper = c < c[i] * (1 - rel_tol)
            dominated = (c <= c[i] * (1 + rel_tol)) & (v >= v[i]) & (cheaper | (v > v[i]))
            on[idx] = not dominated.any()
    return on


def best_per_budget(runs: pd.DataFrame, *, confidence: float = 0.95, cell: str = "k") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (budget, k): the method with the best **dev** recall (mean over runs), then paired tests on the **test**
    queries of that method against every other (:func:`xenbench.studies.adacur.adacur_paired_comparisons`: per-query
    paired tests over the pooled test queries, Holm-adjusted over the comparisons of that cell, the run interval).

    Choosing the best on dev keeps the test comparisons honest: the best is named before its test numbers are read.
    (A tuned method's dev recall is read at the setting chosen on those dev queries, a small edge when choosing.)
    ``cell="measure"`` does the same per (budget, label measure) on the label records (a method's dev value at its
    setting chosen by nDCG@10); both are run records (:class:`xenbench.studies.records.RunRecord`).

    Returns
    -------
    table : DataFrame
        One row per (budget, k): ``best``, ``best_mean``, ``best_lo``, ``best_hi`` (test recall across runs),
        ``within_noise``, ``below`` (methods it beats on test), ``above`` (methods that beat it on test), each a
        list of labels, ``n_methods``, and what the best's test value rests on: ``n_queries`` (test queries per run,
        the fewest of its runs; with labels, those with a relevant kept item) and ``n_runs``. A cell without a dev
        value (no dev query with a relevant kept item) has no row, and a warning says so.
    comparisons : DataFrame
        The paired comparisons, ``challenger`` = the best.
    """
    from xenbench.studies.protocol import summarize

    first_seed = runs["anchor_seed"].min()
    table, comps = [], []
    for (budget, key), g in runs.groupby(["budget", cell], sort=True):
        dev = g.groupby("method")["dev_value"].mean().sort_index()
        if dev.isna().all():  # no dev query with a relevant kept item: no best can be named, so none is
            logger.warning("best_per_budget: no dev value at B_CE = %s, %s = %s (no dev query with a relevant kept item): "
                        "that cell has no best method", budget, cell, key)
            continue
        best = str(dev.idxmax())
        others = [m for m in dev.index if m != best]
        distinct = g[(g["method"] == best) & (~_is_deterministic(g["method"]) | (g["anchor_seed"] == first_seed))]
        s = summarize(distinct, ["method"], value="value", se="value_se", confidence=confidence).iloc[0]
        n_queries = (distinct["n_queries"] if "n_queries" in distinct else distinct["rows"].map(len) if "rows" in distinct
                     else pd.Series([np.nan]))
        row = {"budget": int(budget), cell: int(key) if cell == "k" else key, "best": best, "best_dev": float(dev[best]),
               "best_mean": float(s["mean"]), "best_lo": float(s["lo"]), "best_hi": float(s["hi"]),
               "within_noise": [], "below": [], "above": [], "n_methods": int(len(dev)),
               "n_queries": float(n_queries.min()), "n_runs": int(len(distinct))}
        if others:
            c = adacur_paired_comparisons(g, pairs=[(best, m) for m in others], confidence=confidence, cell=cell)
            comps.append(c)
            for _, r in c.iterrows():
                key_ = "below" if r["verdict"] == "beats" else "above" if r["verdict"] in _LOSES else "within_noise"
                row[key_].append(str(r["baseline"]))
        table.append(row)
    comparisons = pd.concat(comps, ignore_index=True) if comps else pd.DataFrame()
    return pd.DataFrame(table), comparisons
